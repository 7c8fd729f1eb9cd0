/* A C program running an AOT-compiled axle function with no Python at run time.
   Build: cc -O2 main.c mlp.o -lm -o mlp_main  (see docs/aot.md). Reads the inputs as raw
   little-endian arrays from the files named on the command line, writes out0 to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"

static void *slurp(const char *path, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    FILE *f = fopen(path, "rb");
    if (!p || !f || fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %s\n", path); exit(1); }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s x w1 b1 w2 b2\n", argv[0]); return 2; }
    float *x = slurp(argv[1], MLP_ARG0_BYTES), *w1 = slurp(argv[2], MLP_ARG1_BYTES);
    float *b1 = slurp(argv[3], MLP_ARG2_BYTES), *w2 = slurp(argv[4], MLP_ARG3_BYTES);
    float *b2 = slurp(argv[5], MLP_ARG4_BYTES);
    float *out = malloc(MLP_OUT0_BYTES);
    if (mlp_run(x, w1, b1, w2, b2, out) != 0) return 1;
    fwrite(out, 1, MLP_OUT0_BYTES, stdout);
    return 0;
}
