"""axle-cpu against NumPy, a C loop compiled with ``cc`` and (when importable) jax.jit.

Every row is timed interleaved (benchmarks/common.py ``measure``) and reported as ratios
within one run. ``quick`` shrinks repeats (and the biggest sizes) for a smoke run.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

try:  # first: it sets the thread-waiting policy of the libraries NumPy loads
    from benchmarks.common import Row, measure
except ImportError:  # run as a script from benchmarks/
    from common import Row, measure  # type: ignore[no-redef]

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
    d = tempfile.mkdtemp(prefix="axle_bench_c_")
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

    rows += _embedding_rows(axle, dev, jax, rng, reps * 4)
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


def fma_peak_gflops(seconds: float = 0.3) -> float:
    """The machine's measured float32 FMA peak: a JIT-compiled loop of independent vector
    fused multiply-adds (the host's widest vectors, more accumulators than the FMA latency
    needs) run on every thread of axle's pool at once."""
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

    def timed(n: int) -> float:  # ctypes releases the GIL: the threads run the loop at once
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(call, [n] * threads))
        return time.perf_counter() - t0

    while timed(n) < seconds:
        n *= 4
    # the best of a few runs: other processes on the machine only ever slow it down
    return max(2 * lanes * accs * n * threads / timed(n) / 1e9 for _ in range(3))


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

    for r in run(quick="--quick" in sys.argv):
        base = r.times_ms.get(r.baseline)
        cells = ", ".join(f"{k}: {v:.3f} ms" + (f" ({base / v:.2f}x)" if base else "") for k, v in r.times_ms.items())
        print(f"{r.workload}: {cells} {r.extra or ''}")
