"""axle-cpu against NumPy, a C loop compiled with ``cc``, (when importable) jax.jit and, for the LSTM, onnxruntime.

Every row is timed interleaved (benchmarks/common.py ``measure``) and reported as ratios
within one run. ``quick`` shrinks repeats (and the biggest sizes) for a smoke run.
"""
from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

try:  # first: it sets the thread-waiting policy of the libraries NumPy loads
    from benchmarks.common import Row, load_example, measure
except ImportError:  # run as a script from benchmarks/
    from common import Row, load_example, measure  # type: ignore[no-redef]

import numpy as np

SUITE = "cpu"

_C_SRC = r"""
#include <math.h>
#include <stdint.h>
float seed(const float *x, const float *y, const float *z, int64_t n) {
    float s = 0.0f;
    #pragma omp parallel for simd reduction(+:s)
    for (int64_t i = 0; i < n; i++) s += x[i] + y[i] * z[i];
    return s;
}
void gelu_tanh(const float *x, float *out, int64_t n) {
    #pragma omp parallel for simd
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * (tanhf(x[i] * 0.798f + 0.1f) * 0.5f + 0.5f);
}
void softmax_rows(const float *x, float *out, int64_t rows, int64_t cols) {
    #pragma omp parallel for
    for (int64_t r = 0; r < rows; r++) {
        const float *a = x + r * cols; float *o = out + r * cols; float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; c++) m = a[c] > m ? a[c] : m;
        for (int64_t c = 0; c < cols; c++) { o[c] = expf(a[c] - m); s += o[c]; }
        float inv = 1.0f / s;
        for (int64_t c = 0; c < cols; c++) o[c] *= inv;
    }
}
void layer_norm(const float *x, float *out, int64_t rows, int64_t cols) {
    #pragma omp parallel for
    for (int64_t r = 0; r < rows; r++) {
        const float *a = x + r * cols; float *o = out + r * cols; float s = 0.0f, q = 0.0f;
        for (int64_t c = 0; c < cols; c++) s += a[c];
        float mean = s / cols;
        for (int64_t c = 0; c < cols; c++) { float d = a[c] - mean; q += d * d; }
        float inv = 1.0f / sqrtf(q / cols + 1e-5f);
        for (int64_t c = 0; c < cols; c++) o[c] = (a[c] - mean) * inv;
    }
}
"""


def _c_library() -> Any:
    """The hand-written C loops, built with cc -O3 -march=native -fopenmp (None without cc)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    # the library is loaded, then its directory removed (the mapping outlives the file)
    with tempfile.TemporaryDirectory(prefix="axle_bench_c_") as d:
        src, lib = os.path.join(d, "loops.c"), os.path.join(d, "loops.so")
        with open(src, "w") as f:
            f.write(_C_SRC)
        flags = ["-O3", "-march=native", "-ffast-math", "-fPIC", "-shared", "-fopenmp"]
        r = subprocess.run([cc, *flags, src, "-o", lib, "-lm"], capture_output=True)
        if r.returncode != 0:
            r = subprocess.run([cc, *[f for f in flags if f != "-fopenmp"], src, "-o", lib, "-lm"], capture_output=True)
            if r.returncode != 0:
                return None
        so = ctypes.CDLL(lib)
    P, I = ctypes.c_void_p, ctypes.c_int64
    so.seed.restype = ctypes.c_float
    so.seed.argtypes = [P, P, P, I]
    so.gelu_tanh.argtypes = [P, P, I]
    so.softmax_rows.argtypes = [P, P, I, I]
    so.layer_norm.argtypes = [P, P, I, I]
    return so


def _jax() -> Any:
    try:
        import jax
        import jax.numpy as jnp  # noqa: F401

        return jax
    except Exception:  # noqa: BLE001 - jax is optional
        return None


def _axle() -> tuple[Any, Any, Any]:
    import axle
    import axle.numpy as anp

    return axle, anp, axle.device("cpu:0")


def _sync(r: Any) -> Any:
    if isinstance(r, (tuple, list)):
        return [np.asarray(x) for x in r]
    if hasattr(r, "block_until_ready"):
        return r.block_until_ready()
    return np.asarray(r)


# ---------------------------------------------------------------- workload definitions


def seed_fn(np_: Any) -> Callable[..., Any]:
    return lambda x, y, z: np_.sum(x + y * z)


def gelu_fn(np_: Any) -> Callable[..., Any]:
    return lambda x: x * (np_.tanh(x * 0.798 + 0.1) * 0.5 + 0.5)


def softmax_fn(np_: Any) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        e = np_.exp(x - np_.max(x, axis=1, keepdims=True))
        return e / np_.sum(e, axis=1, keepdims=True)

    return f


def layer_norm_fn(np_: Any) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        mean = np_.mean(x, axis=1, keepdims=True)
        xc = x - mean
        var = np_.mean(xc * xc, axis=1, keepdims=True)
        return xc / np_.sqrt(var + 1e-5)

    return f


def sgd_softmax_regression(np_: Any) -> Callable[..., Any]:
    """One SGD step of softmax regression (the seed tutorial), gradient written out."""

    def step(w: Any, b: Any, x: Any, y: Any) -> Any:
        logits = np_.matmul(x, w) + b
        e = np_.exp(logits - np_.max(logits, axis=1, keepdims=True))
        p = e / np_.sum(e, axis=1, keepdims=True)
        g = (p - y) * (1.0 / x.shape[0])
        return w - 0.5 * np_.matmul(np_.transpose(x), g), b - 0.5 * np_.sum(g, axis=0)

    return step


def sgd_mlp(np_: Any) -> Callable[..., Any]:
    """One SGD step of a 784-512-10 ReLU MLP with softmax cross-entropy, backprop by hand."""

    def step(w1: Any, b1: Any, w2: Any, b2: Any, x: Any, y: Any) -> Any:
        hp = np_.matmul(x, w1) + b1
        h = np_.maximum(hp, 0.0)
        logits = np_.matmul(h, w2) + b2
        e = np_.exp(logits - np_.max(logits, axis=1, keepdims=True))
        p = e / np_.sum(e, axis=1, keepdims=True)
        g2 = (p - y) * (1.0 / x.shape[0])
        gh = np_.matmul(g2, np_.transpose(w2)) * (hp > 0)
        lr = 0.1
        return (w1 - lr * np_.matmul(np_.transpose(x), gh), b1 - lr * np_.sum(gh, axis=0),
                w2 - lr * np_.matmul(np_.transpose(h), g2), b2 - lr * np_.sum(g2, axis=0))

    return step


def _row(workload: str, fns: dict[str, Callable[[], Any]], repeats: int, extra: dict | None = None) -> Row:
    times = measure(fns, repeats=repeats, warmup=2, sync=_sync)
    return Row(SUITE, workload, times, extra or {})


def run(quick: bool) -> list[Row]:
    axle, anp, dev = _axle()
    jax = _jax()
    clib = _c_library()
    rng = np.random.default_rng(0)
    reps = 5 if quick else 21
    rows: list[Row] = []

    def impls(fn_maker: Callable[[Any], Callable[..., Any]], host_args: list[np.ndarray],
              c_fn: Callable[[], Any] | None = None) -> dict[str, Callable[[], Any]]:
        out: dict[str, Callable[[], Any]] = {}
        np_f = fn_maker(np)
        out["numpy"] = lambda: np_f(*host_args)
        ax_f = axle.jit(fn_maker(anp), device=dev)
        dargs = [axle.device_put(a, dev) for a in host_args]
        out["axle-cpu"] = lambda: ax_f(*dargs)
        if c_fn is not None:
            out["C (cc -O3, OpenMP)"] = c_fn
        if jax is not None:
            import jax.numpy as jnp

            jf = jax.jit(fn_maker(jnp))
            jargs = [jax.device_put(a) for a in host_args]
            out["jax.jit"] = lambda: jf(*jargs)
        return out

    for n in ((1 << 20,) if quick else (1 << 24, 1 << 20)):
        xs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
        c_fn = (lambda xs=xs, n=n: clib.seed(*(a.ctypes.data for a in xs), n)) if clib else None
        rows.append(_row(f"seed sum(x + y*z), N=2^{n.bit_length() - 1} f32", impls(seed_fn, xs, c_fn), reps))

    n = 1 << (20 if quick else 24)
    x = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    c_fn = (lambda: clib.gelu_tanh(x.ctypes.data, out.ctypes.data, n)) if clib else None
    rows.append(_row(f"x*(tanh(x*0.798+0.1)*0.5+0.5), N=2^{n.bit_length() - 1}", impls(gelu_fn, [x], c_fn), reps))

    for label, maker, shape, cname in (("row softmax", softmax_fn, (4096, 1024), "softmax_rows"),
                                       ("layer norm", layer_norm_fn, (8192, 1024), "layer_norm")):
        if quick:
            shape = (shape[0] // 8, shape[1])
        a = rng.standard_normal(shape).astype(np.float32)
        o = np.empty_like(a)
        c_fn = (lambda a=a, o=o, cname=cname, shape=shape: getattr(clib, cname)(a.ctypes.data, o.ctypes.data, *shape)) \
            if clib else None
        rows.append(_row(f"{label} {list(shape)} f32", impls(maker, [a], c_fn), reps))

    m = 256 if quick else 1024
    a = rng.standard_normal((m, m)).astype(np.float32)
    bm = rng.standard_normal((m, m)).astype(np.float32)
    row = _row(f"matmul {m}^3 f32", impls(lambda np_: np_.matmul, [a, bm]), reps)
    row.extra["GFLOP/s"] = {k: round(2 * m ** 3 / (t * 1e-3) / 1e9, 1) for k, t in row.times_ms.items()}
    rows.append(row)

    rows.append(_dense_row(axle, anp, dev, impls, rng, quick, reps))
    rows.append(_conv_row(axle, anp, dev, jax, rng, quick, max(reps // 3, 3)))

    x = rng.standard_normal((100, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 100)]
    w = np.zeros((784, 10), np.float32)
    b = np.zeros(10, np.float32)
    rows.append(_row("softmax-regression SGD step x[100,784]", impls(sgd_softmax_regression, [w, b, x, y]), reps * 4))

    x = rng.standard_normal((128, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
    params = [(rng.standard_normal((784, 512)) * 0.05).astype(np.float32), np.zeros(512, np.float32),
              (rng.standard_normal((512, 10)) * 0.05).astype(np.float32), np.zeros(10, np.float32)]
    rows.append(_row("MLP 784-512-10 SGD step, batch 128", impls(sgd_mlp, [*params, x, y]), reps * 2))

    rows.append(_mnist_from_scratch_row(axle, anp, dev, jax, rng, reps * 2))
    rows += _gemm_class_rows(axle, anp, dev, rng, quick, reps)
    rows += _embedding_rows(axle, dev, jax, rng, reps * 4)
    rows += _rnn_rows(axle, dev, jax, reps * 4)
    rows.append(_first_call(axle, anp, dev, jax, 3 if quick else 7))
    return rows


def dense_relu(np_: Any) -> Callable[..., Any]:
    return lambda x, w, b: np_.maximum(np_.matmul(x, w) + b, 0.0)


def _dense_row(axle: Any, anp: Any, dev: Any, impls: Callable[..., dict[str, Callable[[], Any]]],
               rng: np.random.Generator, quick: bool, reps: int) -> Row:
    """relu(x @ w + b): the GEMM finishing its tiles with the bias add and relu (one
    ``output`` fusion), against the same with the epilogue as a kernel of its own (the dot
    and the epilogue jitted apart: one more pass over C, and one more call)."""
    m, k, n = (64, 256, 256) if quick else (256, 1024, 1024)
    host = [rng.standard_normal((m, k)).astype(np.float32), (rng.standard_normal((k, n)) * 0.03).astype(np.float32),
            rng.standard_normal(n).astype(np.float32)]
    fns = impls(dense_relu, host)
    dot = axle.jit(lambda x, w: anp.matmul(x, w), device=dev)
    epi = axle.jit(lambda c, b: anp.maximum(c + b, 0.0), device=dev)
    dx, dw, db = (axle.device_put(a, dev) for a in host)
    fns["axle-cpu (epilogue apart)"] = lambda: epi(dot(dx, dw), db)
    row = _row(f"dense relu(x @ w + b) [{m},{k}]x[{k},{n}] f32", fns, reps)
    row.extra["GFLOP/s"] = {k_: round(2 * m * k * n / (t * 1e-3) / 1e9, 1) for k_, t in row.times_ms.items()}
    return row


# mnist-from-scratch and GEMM shape classes


def mnist_from_scratch(np_: Any, grad: Any, logsumexp: Any) -> Callable[..., Any]:
    """jax's examples/mnist_classifier_fromscratch.py training step: tanh MLP,
    log-softmax cross-entropy, gradients by autodiff, SGD."""

    def loss(params: Any, x: Any, y: Any) -> Any:
        a = x
        for w, b in params[:-1]:
            a = np_.tanh(np_.matmul(a, w) + b)
        w, b = params[-1]
        logits = np_.matmul(a, w) + b
        return -np_.mean(np_.sum((logits - logsumexp(logits, axis=1, keepdims=True)) * y, axis=1))

    def update(params: Any, x: Any, y: Any) -> Any:
        grads = grad(loss)(params, x, y)
        return [(w - 0.001 * dw, b - 0.001 * db) for (w, b), (dw, db) in zip(params, grads)]

    return update


def _mnist_from_scratch_row(axle: Any, anp: Any, dev: Any, jax: Any, rng: np.random.Generator, reps: int) -> Row:
    """784-1024-1024-10, batch 128, float32: axle.jit on cpu:0 against jax.jit."""
    from axle import nn

    sizes = [784, 1024, 1024, 10]
    params = [((rng.standard_normal((m, n)) * 0.05).astype(np.float32), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((128, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
    step = axle.jit(mnist_from_scratch(anp, axle.grad, nn.logsumexp), device=dev)
    dargs = axle.device_put((params, x, y), dev)
    flat = lambda r: np.concatenate([np.asarray(a).ravel() for wb in r for a in wb])  # noqa: E731
    fns: dict[str, Callable[[], Any]] = {"axle-cpu": lambda: flat(step(*dargs))}
    if jax is not None:
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp

        jstep = jax.jit(mnist_from_scratch(jnp, jax.grad, logsumexp))
        jargs = jax.device_put((params, x, y))
        fns["jax.jit"] = lambda: flat(jstep(*jargs))
        _checked(fns, fns["jax.jit"](), lambda r: r, "mnist step")
    times = measure(fns, repeats=reps, warmup=2)
    return Row(SUITE, "MNIST-from-scratch step 784-1024-1024-10, batch 128, tanh", times,
               baseline="jax.jit" if jax is not None else "axle-cpu")


#: the GEMM shape classes: (label, lhs shape, rhs shape, dot_general dims). Those of a
#: training step, and one of each class at a size where the kernel, not the call, is timed.
GEMM_CLASSES = (
    ("large square 1024^3", (1024, 1024), (1024, 1024), ((1,), (0,), (), ())),
    ("small M [16,1024]x[1024,1024]", (16, 1024), (1024, 1024), ((1,), (0,), (), ())),
    ("small M (forward, batch 128)", (128, 1024), (1024, 1024), ((1,), (0,), (), ())),
    ("transposed B (dx = dz w^T)", (128, 1024), (1024, 1024), ((1,), (1,), (), ())),
    ("transposed A (dw = x^T dz)", (128, 784), (128, 1024), ((0,), (0,), (), ())),
    ("tall-skinny (N=10 logits)", (128, 1024), (1024, 10), ((1,), (0,), (), ())),
    ("tall-skinny (M=65536, K=N=64)", (65536, 64), (64, 64), ((1,), (0,), (), ())),
    ("tall-skinny reduction [64,65536]x[65536,64]", (64, 65536), (65536, 64), ((1,), (0,), (), ())),
    ("batched 64 x 128^3", (64, 128, 128), (64, 128, 128), ((2,), (1,), (0,), (0,))),
    ("batched [16,128,64]x[16,64,128]", (16, 128, 64), (16, 64, 128), ((2,), (1,), (0,), (0,))),
    ("matrix-vector [4096,4096]x[4096]", (4096, 4096), (4096,), ((1,), (0,), (), ())),
    ("matrix-vector transposed [4096,4096]^T x[4096]", (4096, 4096), (4096,), ((0,), (0,), (), ())),
    ("vector-matrix [4096]x[4096,4096]", (4096,), (4096, 4096), ((0,), (0,), (), ())),
)
#: the dtypes each class is timed in (quick: the first three classes in float32)
GEMM_DTYPES = (np.float32, np.float64)


def _gemm_class_rows(axle: Any, anp: Any, dev: Any, rng: np.random.Generator, quick: bool, reps: int) -> list[Row]:
    """One dot_general per shape class and dtype, axle-cpu against NumPy's BLAS (np.matmul
    on transposed views, which BLAS reads with its transpose flags), in GFLOP/s and as a
    share of the FMA peak measured in the same run (float64's is half float32's: the same
    FMAs on half the lanes)."""
    rows = []
    peak32 = fma_peak_gflops()
    for dt in GEMM_DTYPES[:1] if quick else GEMM_DTYPES:
        for label, ls, rs, (lc, rc, lb, rb) in GEMM_CLASSES[:3] if quick else GEMM_CLASSES:
            a, b = rng.standard_normal(ls).astype(dt), rng.standard_normal(rs).astype(dt)
            fn = axle.jit(lambda x, w, d=(lc, rc, lb, rb): axle.lax.dot_general(x, w, *d), device=dev)
            da, db = axle.device_put(a, dev), axle.device_put(b, dev)
            av, bv = _as_matmul(a, lb, lc, True), _as_matmul(b, rb, rc, False)
            fns = {"numpy": lambda av=av, bv=bv: np.matmul(av, bv), "axle-cpu": lambda f=fn, da=da, db=db: f(da, db)}
            _close(np.asarray(fns["axle-cpu"]()), fns["numpy"](), label)
            row = _row(f"GEMM class: {label} {np.dtype(dt).name}", fns, reps)
            flops = 2 * a.size * b.size / math.prod(ls[d] for d in lc + lb)
            row.extra["GFLOP/s"] = {k: round(flops / (t * 1e-3) / 1e9, 1) for k, t in row.times_ms.items()}
            peak = peak32 * 4 / np.dtype(dt).itemsize
            row.extra["FMA peak GFLOP/s (measured)"] = round(peak, 1)
            row.extra["share of peak"] = {k: f"{100 * v / peak:.0f}%" for k, v in row.extra["GFLOP/s"].items()}
            rows.append(row)
    return rows


def gemm_rows(quick: bool = False) -> list[Row]:
    """The GEMM shape classes alone (``python benchmarks/bench_cpu.py --gemm``), each row
    with its share of the measured FMA peak."""
    axle, anp, dev = _axle()
    return _gemm_class_rows(axle, anp, dev, np.random.default_rng(0), quick, 5 if quick else 21)


def _as_matmul(x: np.ndarray, batch: tuple, contracting: tuple, lhs: bool) -> np.ndarray:
    """A view of a one-dim-per-group operand as [batch..., M, K] (lhs) or [batch..., K, N]."""
    free = [d for d in range(x.ndim) if d not in batch + contracting]
    return np.transpose(x, list(batch) + (free + list(contracting) if lhs else list(contracting) + free))


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max())):
        raise AssertionError(f"{what}: axle-cpu differs from numpy")


def fma_peak_gflops(seconds: float = 0.3) -> float:
    """The machine's measured float32 FMA peak: a JIT-compiled loop of independent vector
    fused multiply-adds (the host's widest vectors, more accumulators than the FMA latency
    needs) run on every thread of axle's pool at once, timed in each thread's CPU time."""
    from concurrent.futures import ThreadPoolExecutor

    from llvmlite import binding as llvm
    from llvmlite import ir

    from axle_cpu.target import host
    from axle_cpu.threads import thread_count

    lanes, accs = host().vector_bits // 32, 16
    vt = ir.VectorType(ir.FloatType(), lanes)
    mod = ir.Module("peak")
    fn = ir.Function(mod, ir.FunctionType(ir.FloatType(), [ir.IntType(64)]), "peak")
    fma = ir.Function(mod, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fma.v{lanes}f32")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(ir.IntType(64))
    i.add_incoming(ir.Constant(ir.IntType(64), 0), entry)
    phis = [b.phi(vt) for _ in range(accs)]
    x, y = (ir.Constant(vt, [ir.Constant(ir.FloatType(), v)] * lanes) for v in (0.999999, 1e-7))
    new = [b.call(fma, [p, x, y]) for p in phis]
    for k, (p, v) in enumerate(zip(phis, new)):
        p.add_incoming(ir.Constant(vt, [ir.Constant(ir.FloatType(), float(k))] * lanes), entry)
        p.add_incoming(v, loop)
    nxt = b.add(i, ir.Constant(ir.IntType(64), 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[0]), loop, done)
    b.position_at_end(done)
    total = new[0]
    for v in new[1:]:
        total = b.fadd(total, v)
    b.ret(b.extract_element(total, ir.Constant(ir.IntType(32), 0)))
    tm = llvm.Target.from_triple(host().triple).create_target_machine(cpu=host().cpu, features=host().features,
                                                                        opt=3)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), tm)
    engine.finalize_object()
    call = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(engine.get_function_address("peak"))
    n, threads = 1 << 16, thread_count()

    def one(n: int) -> float:  # the thread's own CPU time: a loaded machine's other
        t0 = time.thread_time()  # processes take turns on the core, not FMA throughput
        call(n)
        return time.thread_time() - t0

    def timed(n: int) -> float:  # ctypes releases the GIL: the threads run the loop at once
        with ThreadPoolExecutor(threads) as pool:
            return max(pool.map(one, [n] * threads))

    while timed(n) < seconds / 8:
        n *= 2
    # the best of a few runs: other processes on the machine only ever slow it down
    return max(2 * lanes * accs * n * threads / timed(n) / 1e9 for _ in range(8))


def _conv_row(axle: Any, anp: Any, dev: Any, jax: Any, rng: np.random.Generator, quick: bool, reps: int) -> Row:
    """A 3x3 convolution layer (stride 1, SAME padding, NHWC/HWIO float32): the native
    implicit GEMM against the core's im2col decomposition (slices, a concatenation and a
    dot: what the cpu ran before it claimed convolution) and jax.jit's
    conv_general_dilated, in GFLOP/s and as a share of the machine's measured FMA peak."""
    from axle import lax

    n, hw, c, o = (4, 28, 32, 32) if quick else (32, 56, 64, 64)
    x = rng.standard_normal((n, hw, hw, c)).astype(np.float32)
    w = (rng.standard_normal((3, 3, c, o)) * 0.05).astype(np.float32)
    native = axle.jit(lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "SAME",
                                                            dimension_numbers=("NHWC", "HWIO", "NHWC")), device=dev)
    dx, dw = axle.device_put(x, dev), axle.device_put(w, dev)
    fns: dict[str, Callable[[], Any]] = {"axle-cpu": lambda: native(dx, dw),
                                         "axle-cpu (im2col decomposition)": _decomposed_conv(axle, dev, dx, dw)}
    if jax is not None:
        jf = jax.jit(lambda a, k: jax.lax.conv_general_dilated(a, k, (1, 1), "SAME",
                                                               dimension_numbers=("NHWC", "HWIO", "NHWC")))
        jx, jw = jax.device_put(x), jax.device_put(w)
        fns["jax.jit"] = lambda: jf(jx, jw)
    row = _row(f"conv 3x3 NHWC x[{n},{hw},{hw},{c}] w[3,3,{c},{o}] f32", fns, reps)
    row.baseline = "axle-cpu (im2col decomposition)"
    flops = 2 * n * hw * hw * c * o * 9
    gflops = {k: round(flops / (t * 1e-3) / 1e9, 1) for k, t in row.times_ms.items()}
    peak = fma_peak_gflops()
    row.extra["GFLOP/s"] = gflops
    row.extra["FMA peak GFLOP/s (measured)"] = round(peak, 1)
    row.extra["share of peak"] = {k: f"{100 * v / peak:.0f}%" for k, v in gflops.items()}
    return row


def _decomposed_conv(axle: Any, dev: Any, dx: Any, dw: Any) -> Callable[[], Any]:
    """The same convolution as the core's im2col decomposition, compiled for ``dev``."""
    from axle.compiler import compile_module
    from axle.ir import Builder
    from axle.ir.conv import conv_dimension_numbers
    from axle.passes.expand import expand_extended

    b = Builder("conv_im2col")
    x, w = b.parameter(dx.buffer.type), b.parameter(dw.buffer.type)
    y = b.convolution(x, w, **conv_dimension_numbers("NHWC", "HWIO", "NHWC"), window_strides=(1, 1),
                      padding_low=(1, 1), padding_high=(1, 1), lhs_dilation=(1, 1), rhs_dilation=(1, 1))
    module, _ = expand_extended(b.build(y), lambda _node: False)
    exe = compile_module(module, dx.buffer.device)
    backend = axle.REGISTRY.backend_for(dx.buffer.device)
    return lambda: backend.to_host(exe.execute([dx.buffer, dw.buffer])[0])


def _embedding_rows(axle: Any, dev: Any, jax: Any, rng: np.random.Generator, repeats: int) -> list[Row]:
    """``wte[ids]`` with traced token ids from GPT-2's 50257 x 768 float32 table: a gather
    that reads ids x 768 floats (it was a one-hot select-and-sum over the whole table).
    ``jit floor``: the same jit call of ``ids + 1`` (what any call costs before its kernel)."""
    from axle import lax

    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
    table = rng.standard_normal((50257, 768)).astype(np.float32)
    lookup = axle.jit(lambda t, i: lax.gather(t, i[:, None], dn, (1, 768), mode="clip"), device=dev)
    floor = axle.jit(lambda i: i + 1, device=dev)
    dtable = axle.device_put(table, dev)
    rows = []
    for n in (8, 1024):
        ids = rng.integers(0, table.shape[0], n).astype(np.int32)
        dids = axle.device_put(ids, dev)
        fns: dict[str, Callable[[], Any]] = {
            "numpy": lambda ids=ids: np.take(table, ids, axis=0),
            "axle-cpu": lambda dids=dids: lookup(dtable, dids),
        }
        if jax is not None:
            jf = jax.jit(lambda t, i: t[i])
            jt, ji = jax.device_put(table), jax.device_put(ids)
            fns["jax.jit"] = lambda jt=jt, ji=ji: jf(jt, ji)
        row = _row(f"embedding lookup table[ids], table [50257,768] f32, {n} traced ids", fns, repeats)
        floor_ms = measure({"floor": lambda dids=dids: floor(dids)}, repeats=repeats, sync=_sync)["floor"]
        row.extra["axle-cpu jit floor ms"] = round(floor_ms, 4)
        row.extra["MB read"] = round(n * 768 * 4 / 1e6, 3)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- recurrent models (issue 16)


def _example(name: str) -> Any:
    """examples/<name>.py, loaded by path (examples are scripts, not a package)."""
    return load_example(name)


def _iofc(m: np.ndarray, h: int) -> np.ndarray:
    """The 4h gate columns of ``m`` from our order (i, f, g, o) to ONNX's (i, o, f, c)."""
    return np.concatenate([m[..., g * h:(g + 1) * h] for g in (0, 3, 1, 2)], axis=-1)


def _onnx_lstm(params: list[dict[str, np.ndarray]], steps: int, batch: int, inputs: int) -> Any:
    """An onnxruntime session of the stacked LSTM: one ONNX ``LSTM`` node per layer (gates
    reordered from i, f, g, o to ONNX's i, o, f, c; the bias as Wb with Rb = 0), a Squeeze
    of the direction axis between layers. None without onnx and onnxruntime."""
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    nodes, inits, x = [], [], "X"
    for k, layer in enumerate(params):
        h = layer["U"].shape[0]
        w, r = _iofc(layer["W"], h).T[None], _iofc(layer["U"], h).T[None]
        b = np.concatenate([_iofc(layer["b"], h), np.zeros(4 * h, np.float32)])[None]
        names = [f"W{k}", f"R{k}", f"B{k}"]
        inits += [numpy_helper.from_array(np.ascontiguousarray(a, np.float32), n) for a, n in zip((w, r, b), names)]
        nodes.append(helper.make_node("LSTM", [x, *names], [f"Y{k}"], hidden_size=h))
        nodes.append(helper.make_node("Squeeze", [f"Y{k}", "axis1"], [f"H{k}" if k < len(params) - 1 else "out"]))
        x = f"H{k}"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    units = params[-1]["U"].shape[0]
    graph = helper.make_graph(nodes, "stacked_lstm",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [steps, batch, inputs])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [steps, batch, units])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _jax_lstm(jax: Any) -> Callable[..., Any]:
    """examples/lstm.py's model in jax: the input projection before a lax.scan per layer."""
    import jax.numpy as jnp

    def forward(params: list[dict[str, Any]], xs: Any) -> Any:
        for layer in params:
            h = layer["U"].shape[0]
            t, b = xs.shape[0], xs.shape[1]
            xw = (xs.reshape(t * b, -1) @ layer["W"] + layer["b"]).reshape(t, b, 4 * h)

            def cell(carry: Any, xp: Any, u: Any = layer["U"], h: int = h) -> Any:
                hh, c = carry
                z = xp + hh @ u
                i, f, g, o = (z[:, k * h:(k + 1) * h] for k in range(4))
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                hh = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (hh, c), hh

            zero = jnp.zeros((b, h), xs.dtype)
            _, xs = jax.lax.scan(cell, (zero, zero), xw)
        return xs

    return jax.jit(forward)


def _jax_char_rnn_step(jax: Any, lr: float) -> Callable[..., Any]:
    """examples/char_rnn.py's jitted training step in jax (scan + value_and_grad + Adagrad)."""
    import jax.numpy as jnp

    def loss(p: dict[str, Any], hprev: Any, inputs: Any, targets: Any) -> Any:
        xw = jnp.take(p["Wxh"], inputs, axis=1, mode="clip").T

        def step(h: Any, x: Any) -> Any:
            h = jnp.tanh(x + p["Whh"] @ h + p["bh"][:, 0])
            return h, h

        h, hs = jax.lax.scan(step, hprev[:, 0], xw)
        logits = hs @ p["Why"].T + p["by"][:, 0]
        logp = logits - jnp.log(jnp.sum(jnp.exp(logits), axis=1, keepdims=True))
        return -jnp.sum(jnp.take_along_axis(logp, targets[:, None], axis=1, mode="clip")), h[:, None]

    def train_step(p: dict[str, Any], mems: dict[str, Any], hprev: Any, inputs: Any, targets: Any) -> Any:
        (value, h), grads = jax.value_and_grad(loss, has_aux=True)(p, hprev, inputs, targets)
        grads = {k: jnp.clip(g, -5, 5) for k, g in grads.items()}
        mems = {k: mems[k] + grads[k] * grads[k] for k in p}
        return {k: p[k] - lr * grads[k] / jnp.sqrt(mems[k] + 1e-8) for k in p}, mems, h, value

    return jax.jit(train_step)


def _aot_lstm(lstm: Any, params: list[dict[str, np.ndarray]], xs: np.ndarray) -> Callable[[], np.ndarray] | None:
    """examples/lstm.py's forward pass (the same math as the jitted column, the input
    projection hoisted before each layer's scan) compiled ahead of time by axle-cpu's AOT
    path, linked into a shared library with cc and called through ctypes: each call is
    the native ``lstm_run`` on the preallocated buffers, plus the ctypes call itself (about
    a microsecond). The per-layer params are stacked as the entry takes flat arrays.
    None without cc."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    from axle_cpu.aot import compile_aot

    def flat(xs_: Any, w: Any, u: Any, b: Any) -> Any:
        return lstm.lstm([{"W": w[k], "U": u[k], "b": b[k]} for k in range(len(params))], xs_)

    args = [np.ascontiguousarray(xs)] + [np.ascontiguousarray(np.stack([p[k] for p in params])) for k in "WUb"]
    with tempfile.TemporaryDirectory(prefix="axle_bench_aot_") as d:
        res = compile_aot(flat, [f"f32{list(a.shape)}".replace(" ", "") for a in args], d, name="lstm")
        lib = os.path.join(d, "liblstm.so")
        subprocess.run([cc, "-shared", "-o", lib, res.object_path, "-lm"], check=True, capture_output=True)
        run = ctypes.CDLL(lib).lstm_run
    (out_type,) = res.result_types
    # call() reads its result from bufs, which keeps alive the arrays the bare addresses point into
    bufs = [*args, np.empty(out_type.shape, np.float32)]
    ptrs = [ctypes.c_void_p(a.ctypes.data) for a in bufs]
    run.restype, run.argtypes = ctypes.c_int, [ctypes.c_void_p] * len(ptrs)

    def call() -> np.ndarray:
        if run(*ptrs) != 0:
            raise RuntimeError("lstm_run returned an error")
        return bufs[-1]

    return call


def _checked(fns: dict[str, Callable[[], Any]], want: Any, pick: Callable[[Any], Any], what: str) -> None:
    """Every implementation computes the same numbers before it is timed (float32 tolerance)."""
    for name, fn in fns.items():
        got = np.asarray(pick(fn()))
        if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
            raise AssertionError(f"{what}: {name} differs from numpy by {np.max(np.abs(got - want)):.3g}")


def _lstm_row(axle: Any, dev: Any, jax: Any, rng: np.random.Generator, repeats: int) -> Row:
    """The stacked LSTM forward of examples/lstm.py: NumPy, axle jit, jax.jit, the same
    program compiled ahead of time (``axle-aot``) and onnxruntime."""
    lstm = _example("lstm")
    params, xs = lstm.init_params(rng), lstm.sample_inputs(rng)
    fwd = lstm.compiled(dev)
    dparams, dxs = axle.device_put(params, dev), axle.device_put(xs, dev)
    fns: dict[str, Callable[[], Any]] = {"numpy": lambda: lstm.lstm_numpy(params, xs),
                                         "axle-cpu": lambda: fwd(dparams, dxs)}
    if jax is not None:
        jf = _jax_lstm(jax)
        jparams, jxs = jax.device_put(params), jax.device_put(xs)
        fns["jax.jit"] = lambda: jf(jparams, jxs)
    aot = _aot_lstm(lstm, params, xs)
    if aot is not None:
        fns["axle-aot"] = aot
    session = _onnx_lstm(params, *xs.shape)
    if session is not None:
        fns["onnxruntime"] = lambda: session.run(None, {"X": xs})[0]
    _checked(fns, lstm.lstm_numpy(params, xs), lambda r: r, "stacked LSTM")
    return _row(f"stacked LSTM forward {lstm.LAYERS}x{lstm.UNITS} units, {lstm.STEPS} steps, batch {lstm.BATCH} "
                f"(scan)", fns, repeats)


def _rnn_rows(axle: Any, dev: Any, jax: Any, repeats: int) -> list[Row]:
    """The seeds' stacked LSTM forward (3 x 60 units, 10 steps, batch 1) and one min-char-rnn
    training step (hidden 100, 25 steps), each as examples/ writes it with lax.scan: axle
    jit on cpu:0 against NumPy's Python loop, jax.jit and (the LSTM) onnxruntime and the
    same LSTM compiled ahead of time (``axle-aot``). They time whatever runs the loops on
    main (a native loop, or the host fallback)."""
    cr = _example("char_rnn")
    rng = np.random.default_rng(0)
    rows = [_lstm_row(axle, dev, jax, rng, repeats)]

    corpus, cfg = cr.Corpus.of(), cr.Config()
    inputs, targets, _ = cr.batches(corpus, cfg, 1)[0]
    host = cr.init_params(corpus.vocab, cfg.hidden)
    mems = {k: np.full_like(v, 0.01) for k, v in host.items()}
    hprev = (rng.standard_normal((cfg.hidden, 1)) * 0.1).astype(np.float32)
    onehot = np.eye(corpus.vocab, dtype=np.float32)[:, :, None]

    def numpy_step() -> Any:
        loss, grads, h = cr.loss_fun(np, host, inputs, targets, hprev, onehot)
        new, new_mems = cr.adagrad(np, host, grads, mems, cfg.lr)
        return new, new_mems, h, loss

    step = cr.make_train_step(cfg, dev)
    dargs = axle.device_put((host, mems, hprev, inputs, targets), dev)
    fns = {"numpy": numpy_step, "axle-cpu": lambda: step(*dargs)}
    if jax is not None:
        js = _jax_char_rnn_step(jax, cfg.lr)
        jargs = jax.device_put((host, mems, hprev, inputs, targets))
        fns["jax.jit"] = lambda: js(*jargs)
    _checked(fns, numpy_step()[0]["Whh"], lambda r: r[0]["Whh"], "char-RNN step")
    rows.append(_row(f"min-char-rnn training step, hidden {cfg.hidden}, {cfg.seq} steps, vocab {corpus.vocab} "
                     f"(scan + grad + Adagrad)", fns, repeats))
    return rows


def _first_call(axle: Any, anp: Any, dev: Any, jax: Any, repeats: int) -> Row:
    """Trace + optimize + compile + run of the seed example in a warm process; each sample
    uses a new size, so no compiled-code cache can answer it."""
    samples: dict[str, list[float]] = {"axle-cpu": []}
    if jax is not None:
        samples["jax.jit"] = []
    for k in range(repeats):
        n = 1000 + 37 * k + int(time.time_ns() % 1000)
        xs = [np.ones(n, np.float32)] * 3
        t0 = time.perf_counter()
        np.asarray(axle.jit(seed_fn(anp), device=dev)(*xs))
        samples["axle-cpu"].append((time.perf_counter() - t0) * 1e3)
        if jax is not None:
            import jax.numpy as jnp

            t0 = time.perf_counter()
            jax.jit(seed_fn(jnp))(*xs).block_until_ready()
            samples["jax.jit"].append((time.perf_counter() - t0) * 1e3)
    med = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
    return Row(SUITE, "first call of the seed example (trace+optimize+compile+run)", med,
               baseline="jax.jit" if jax is not None else "axle-cpu")


if __name__ == "__main__":
    import sys

    for r in (gemm_rows if "--gemm" in sys.argv else run)(quick="--quick" in sys.argv):
        base = r.times_ms.get(r.baseline)
        cells = ", ".join(f"{k}: {v:.3f} ms" + (f" ({base / v:.2f}x)" if base else "") for k, v in r.times_ms.items())
        print(f"{r.workload}: {cells} {r.extra or ''}")
