"""axle-opencl against pyopencl (array op-by-op, Elementwise/ReductionKernel), a
hand-written fused OpenCL kernel and NumPy, on opencl:0 (PoCL in CI).

    python benchmarks/bench_opencl.py [--quick] [--only=softmax]

Each workload is built with the IR builder and compiled by axle; until the optimizer
forms fusions on its own, the module is fused by hand (one fusion node, as the
optimizer would make it)."""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, measure

SUITE = "opencl"


def _fuse(module: Any, kind: str) -> Any:
    """One fusion node holding the whole entry computation (what the optimizer builds)."""
    from axle.ir.builder import Builder, make_node
    from axle.ir.module import Module
    from axle.ir.ops import Op

    entry = module.entry
    inner = Builder(module.name + "_fused")
    env = {p.uid: inner.parameter(p.tensor_type) for p in entry.parameters}
    for n in entry.nodes:
        if n.op is not Op.PARAMETER:
            env[n.uid] = make_node(n.op, [env[o.uid] for o in n.operands], dict(n.attrs))
    outer = Builder(module.name)
    ps = [outer.parameter(p.tensor_type) for p in entry.parameters]
    f = outer.fusion(*ps, kind=kind, computation=inner.computation(env[entry.root.uid]))
    return Module(module.name, outer.computation(f))


def _axle_fn(module: Any, kind: str, inputs: list[np.ndarray]) -> tuple[Callable[[], Any], Callable[[Any], Any], int]:
    import axle
    from axle.compiler import compile_module
    from axle.frontend.device_put import to_buffer

    dev = axle.device("opencl:0")
    backend = axle.REGISTRY.backend_for(dev)
    exe = compile_module(module, dev)
    if exe.report().get("kernels", 0) > 1:  # no optimizer yet: fuse by hand
        exe = compile_module(_fuse(module, kind), dev, optimize=False)
    bufs = [to_buffer(x, dev) for x in inputs]
    return (lambda: exe.execute(bufs)[0]), (lambda out: backend.to_host(out)), exe.report()["kernels"]


def _ctx() -> tuple[Any, Any]:
    import axle

    dev = axle.device("opencl:0")
    rt = axle.REGISTRY.backend_for(dev).runtime(dev)
    rt.release()  # eager launches still held back (runtime.py, hold) would block the baselines' own waits
    return rt.context, rt.queue


def _hand(src: str, name: str) -> Any:
    import pyopencl as cl

    ctx, _ = _ctx()
    return cl.Kernel(cl.Program(ctx, src).build(), name)


HAND_SEED = """
__kernel void seed(__global const float* x, __global const float* y, __global const float* z,
                   __global float* part, const int n, const int chunk) {
  const int s = get_global_id(0) * chunk, e = min(s + chunk, n);
  float8 acc = (float8)(0.0f); int i = s;
  for (; i + 8 <= e; i += 8) acc += vload8(0, x + i) + vload8(0, y + i) * vload8(0, z + i);
  float r = acc.s0 + acc.s1 + acc.s2 + acc.s3 + acc.s4 + acc.s5 + acc.s6 + acc.s7;
  for (; i < e; i++) r += x[i] + y[i] * z[i];
  part[get_global_id(0)] = r;
}"""
HAND_TANH = """
inline float8 tanh8(float8 x) {  /* odd rational approximation, clamped */
  x = clamp(x, -9.0f, 9.0f); float8 x2 = x * x;
  float8 p = x * (135135.0f + x2 * (17325.0f + x2 * (378.0f + x2)));
  float8 q = 135135.0f + x2 * (62370.0f + x2 * (3150.0f + x2 * 28.0f));
  return clamp(p / q, -1.0f, 1.0f);
}
__kernel void chain(__global const float* x, __global float* o, const int n, const int chunk) {
  const int s = get_global_id(0) * chunk, e = min(s + chunk, n);
  int i = s;
  for (; i + 8 <= e; i += 8) { float8 v = vload8(0, x + i);
    vstore8(v * (tanh8(v * 0.798f + 0.1f) * 0.5f + 0.5f), 0, o + i); }
  for (; i < e; i++) { float v = x[i]; o[i] = v * (tanh(v * 0.798f + 0.1f) * 0.5f + 0.5f); }
}"""
# Row kernels as one would write them by hand for a CPU device: one work-item per row,
# float16 vectors (AVX-512: PoCL's preferred float width is 16), vector accumulators with
# one horizontal combine per row, the builtin exp (PoCL vectorizes it through SLEEF),
# exp computed once (stored, then scaled in place) and a multiply by the reciprocal.
HAND_SOFTMAX = """
__kernel void softmax(__global const float* x, __global float* o, const int cols) {
  const int r = get_global_id(0); __global const float* row = x + r * cols; __global float* out = o + r * cols;
  float16 m16 = (float16)(-INFINITY); int j = 0;
  for (; j + 16 <= cols; j += 16) m16 = fmax(m16, vload16(0, row + j));
  float8 m8 = fmax(m16.lo, m16.hi); float4 m4 = fmax(m8.lo, m8.hi); float2 m2 = fmax(m4.lo, m4.hi);
  float m = fmax(m2.lo, m2.hi);
  for (; j < cols; j++) m = fmax(m, row[j]);
  float16 s16 = (float16)(0.0f); j = 0;
  for (; j + 16 <= cols; j += 16) { float16 e = exp(vload16(0, row + j) - m); s16 += e; vstore16(e, 0, out + j); }
  float8 s8 = s16.lo + s16.hi; float4 s4 = s8.lo + s8.hi; float2 s2 = s4.lo + s4.hi;
  float s = s2.lo + s2.hi;
  for (; j < cols; j++) { float e = exp(row[j] - m); s += e; out[j] = e; }
  const float inv = 1.0f / s; j = 0;
  for (; j + 16 <= cols; j += 16) vstore16(vload16(0, out + j) * inv, 0, out + j);
  for (; j < cols; j++) out[j] *= inv;
}"""
HAND_LAYERNORM = """
__kernel void layernorm(__global const float* x, __global float* o, const int cols) {
  const int r = get_global_id(0); __global const float* row = x + r * cols; __global float* out = o + r * cols;
  float16 s16 = (float16)(0.0f), q16 = (float16)(0.0f); int j = 0;
  for (; j + 16 <= cols; j += 16) { float16 v = vload16(0, row + j); s16 += v; q16 += v * v; }
  float8 s8 = s16.lo + s16.hi, q8 = q16.lo + q16.hi; float4 s4 = s8.lo + s8.hi, q4 = q8.lo + q8.hi;
  float2 s2 = s4.lo + s4.hi, q2 = q4.lo + q4.hi; float s = s2.lo + s2.hi, q = q2.lo + q2.hi;
  for (; j < cols; j++) { s += row[j]; q += row[j] * row[j]; }
  const float mean = s / cols, inv = rsqrt(q / cols - mean * mean + 1e-5f); j = 0;
  for (; j + 16 <= cols; j += 16) vstore16((vload16(0, row + j) - mean) * inv, 0, out + j);
  for (; j < cols; j++) out[j] = (row[j] - mean) * inv;
}"""


def _seed(n: int, repeats: int) -> Row:
    import pyopencl as cl
    import pyopencl.array as cla
    from pyopencl.reduction import ReductionKernel

    from axle.ir.builder import Builder

    ctx, q = _ctx()
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    b = Builder("seed")
    p = [b.parameter(f"f32[{n}]") for _ in range(3)]
    module = b.build(b.reduce(b.add(p[0], b.mul(p[1], p[2])), kind="sum", axes=(0,)))
    run, host, kernels = _axle_fn(module, "input", [x, y, z])
    dx, dy, dz = (cla.to_device(q, a) for a in (x, y, z))
    red = ReductionKernel(ctx, np.float32, neutral="0", reduce_expr="a+b", map_expr="x[i] + y[i]*z[i]",
                          arguments="__global const float *x, __global const float *y, __global const float *z")
    hand = _hand(HAND_SEED, "seed")
    items = 64
    chunk = -(-n // items)
    part = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * items)
    hostpart = np.empty(items, np.float32)

    def hand_run() -> float:
        hand(q, (items,), (1,), dx.data, dy.data, dz.data, part, np.int32(n), np.int32(chunk))
        cl.enqueue_copy(q, hostpart, part)
        return float(hostpart.sum())

    fns = {
        "numpy": lambda: float(np.sum(x + y * z)),
        "pyopencl.array": lambda: cla.sum(dx + dy * dz).get(),
        "ReductionKernel": lambda: red(dx, dy, dz).get(),
        "hand-fused": hand_run,
        "axle-opencl": lambda: host(run()),
    }
    t = measure(fns, repeats=repeats)
    return Row(SUITE, f"seed sum(x+y*z) n=2^{int(math.log2(n))}", t, {"axle kernels": kernels}, baseline="hand-fused")


def _tanh_chain(n: int, repeats: int) -> Row:
    import pyopencl.array as cla
    import pyopencl.clmath as clmath
    from pyopencl.elementwise import ElementwiseKernel

    from axle.ir.builder import Builder

    ctx, q = _ctx()
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    b = Builder("tanh_chain")
    p = b.parameter(f"f32[{n}]")

    def c(v: float) -> Any:
        return b.broadcast_in_dim(b.constant(np.float32(v)), shape=(n,), broadcast_dimensions=())

    t = b.tanh(b.add(b.mul(p, c(0.798)), c(0.1)))
    module = b.build(b.mul(p, b.add(b.mul(t, c(0.5)), c(0.5))))
    run, host, kernels = _axle_fn(module, "loop", [x])
    dx = cla.to_device(q, x)
    out = cla.empty_like(dx)
    ew = ElementwiseKernel(ctx, "const float *x, float *o", "o[i] = x[i] * (tanh(x[i]*0.798f+0.1f)*0.5f+0.5f)")
    hand = _hand(HAND_TANH, "chain")
    items = 64
    chunk = -(-(-(-n // items)) // 8) * 8

    def hand_run() -> Any:
        hand(q, (-(-n // chunk),), (1,), dx.data, out.data, np.int32(n), np.int32(chunk))
        q.finish()

    fns = {
        "numpy": lambda: x * (np.tanh(x * np.float32(0.798) + np.float32(0.1)) * np.float32(0.5) + np.float32(0.5)),
        "pyopencl.array": lambda: (dx * (clmath.tanh(dx * 0.798 + 0.1) * 0.5 + 0.5)).finish(),
        "ElementwiseKernel": lambda: (ew(dx, out), q.finish()),
        "hand-fused": hand_run,
        "axle-opencl": lambda: (run(), axle_sync()),
    }
    t = measure(fns, repeats=repeats)
    return Row(SUITE, f"tanh chain n=2^{int(math.log2(n))}", t, {"axle kernels": kernels}, baseline="hand-fused")


def axle_sync() -> None:
    import axle

    dev = axle.device("opencl:0")
    axle.REGISTRY.backend_for(dev).synchronize(dev)


def _row_op(name: str, shape: tuple[int, int], build: Callable[[Any, Any], Any], np_fn: Callable[[np.ndarray], Any],
            hand_src: str, hand_name: str, repeats: int) -> Row:
    import pyopencl.array as cla

    from axle.ir.builder import Builder

    ctx, q = _ctx()
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    b = Builder(name.replace(" ", "_"))
    p = b.parameter(f"f32[{shape[0]},{shape[1]}]")
    module = b.build(build(b, p))
    run, host, kernels = _axle_fn(module, "row", [x])
    dx = cla.to_device(q, x)
    out = cla.empty_like(dx)
    hand = _hand(hand_src, hand_name)

    def hand_run() -> Any:
        hand(q, (shape[0],), None if shape[0] % 64 else (64,), dx.data, out.data, np.int32(shape[1]))
        q.finish()

    hand_run()
    want = np_fn(x)
    for impl, got in (("hand-fused", out.get()), ("axle-opencl", host(run()))):
        err = float(np.max(np.abs(got - want)))
        assert err < 1e-4 * max(1.0, float(np.max(np.abs(want)))), f"{name}: {impl} is off by {err}"
    fns = {"numpy": lambda: np_fn(x), "hand-fused": hand_run, "axle-opencl": lambda: (run(), axle_sync())}
    t = measure(fns, repeats=repeats)
    return Row(SUITE, f"{name} {list(shape)}", t, {"axle kernels": kernels}, baseline="hand-fused")


def _softmax(b: Any, p: Any) -> Any:
    shape = p.shape
    m = b.broadcast_in_dim(b.reduce(p, kind="max", axes=(1,)), shape=shape, broadcast_dimensions=(0,))
    e = b.exp(b.sub(p, m))
    s = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=(1,)), shape=shape, broadcast_dimensions=(0,))
    return b.div(e, s)


def _layernorm(b: Any, p: Any) -> Any:
    shape = p.shape
    inv_n = b.broadcast_in_dim(b.constant(np.float32(1.0 / shape[1])), shape=(shape[0],), broadcast_dimensions=())
    mean = b.mul(b.reduce(p, kind="sum", axes=(1,)), inv_n)
    msq = b.mul(b.reduce(b.mul(p, p), kind="sum", axes=(1,)), inv_n)
    eps = b.broadcast_in_dim(b.constant(np.float32(1e-5)), shape=(shape[0],), broadcast_dimensions=())
    inv = b.rsqrt(b.add(b.sub(msq, b.mul(mean, mean)), eps))
    mb = b.broadcast_in_dim(mean, shape=shape, broadcast_dimensions=(0,))
    ib = b.broadcast_in_dim(inv, shape=shape, broadcast_dimensions=(0,))
    return b.mul(b.sub(p, mb), ib)


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _np_layernorm(x: np.ndarray) -> np.ndarray:
    m = x.mean(axis=1, keepdims=True)
    return (x - m) / np.sqrt(x.var(axis=1, keepdims=True) + np.float32(1e-5))


def _matmul(n: int, repeats: int, rhs_transposed: bool = False, batch: int = 0) -> Row:
    """a @ c, or a @ c.T (c stored [n, k]: the x @ w.T of dense layers), square n; with
    ``batch``, that many independent products (a leading batch dim on both operands)."""
    from axle.ir.builder import Builder

    rng = np.random.default_rng(3)
    lead = (batch,) if batch else ()
    a, c = (rng.standard_normal(lead + (n, n)).astype(np.float32) for _ in range(2))
    b = Builder("matmul")
    spec = f"f32[{','.join(map(str, lead + (n, n)))}]"
    p, q = b.parameter(spec), b.parameter(spec)
    nb = len(lead)
    dims = dict(lhs_batch=(0,), rhs_batch=(0,)) if batch else {}
    k_rhs = nb + (1 if rhs_transposed else 0)
    module = b.build(b.dot_general(p, q, lhs_contracting=(nb + 1,), rhs_contracting=(k_rhs,), **dims))
    run, host, kernels = _axle_fn(module, "loop", [a, c])  # one dot: one kernel, never fused
    ct = np.swapaxes(c, -1, -2) if rhs_transposed else c
    want = a @ ct
    err = float(np.max(np.abs(host(run()) - want)))
    assert err < 1e-3 * n ** 0.5, f"matmul: axle-opencl is off by {err}"
    fns = {"numpy": lambda: a @ ct, "axle-opencl": lambda: (run(), axle_sync())}
    t = measure(fns, repeats=repeats)
    flops = 2 * n ** 3 * max(1, batch)
    name = f"matmul {f'{batch}x' if batch else ''}{n}x{n}" + (" @ w.T" if rhs_transposed else "")
    return Row(SUITE, name, t, {"GFLOP/s": {k: round(flops / (v * 1e6), 1) for k, v in t.items()}})


HAND_ADD = """
__kernel void add(__global const float* x, __global const float* y, __global float* o) {
  const int i = get_global_id(0); o[i] = x[i] + y[i];
}
__kernel void empty(__global float* o) {}"""


def _eager_add(repeats: int) -> Row:
    """Dispatch cost of one eager ``add`` on f32[8] (the result left on the device, as
    eager ops leave it) against pyopencl's own launch of the same kernel (a fresh output,
    set_args and enqueue) and the floor: enqueueing an empty kernel whose argument is
    already bound (what PoCL's clEnqueueNDRangeKernel itself costs)."""
    import pyopencl as cl

    import axle

    ctx, q = _ctx()
    dev = axle.device("opencl:0")
    a = axle.device_put(np.arange(8, dtype=np.float32), dev)
    b = axle.device_put(np.ones(8, np.float32), dev)
    prog = cl.Program(ctx, HAND_ADD).build()
    add, empty = cl.Kernel(prog, "add"), cl.Kernel(prog, "empty")
    da, db = (cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=v)
              for v in (np.arange(8, dtype=np.float32), np.ones(8, np.float32)))
    scratch = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 32)
    empty.set_args(scratch)
    assert np.array_equal(np.asarray(a + b), np.arange(8, dtype=np.float32) + 1)

    def hand() -> Any:
        add(q, (8,), None, da, db, cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 32))

    fns = {"pyopencl call": hand, "empty enqueue": lambda: cl.enqueue_nd_range_kernel(q, empty, (1,), None),
           "axle-opencl": lambda: a + b}
    t = measure(fns, repeats=repeats, warmup=20)
    _ctx()  # axle's last eager adds are still held back: let go before the queue is finished
    q.finish()
    return Row(SUITE, "eager add f32[8] dispatch", t, {"us": {k: round(v * 1e3, 2) for k, v in t.items()}},
               baseline="pyopencl call", kind="dispatch")


def _conv3x3(batch: int, ch: int, hw: int, repeats: int, layout: str = "NCHW") -> Row:
    """A 3x3 convolution layer (stride 1, SAME padding, ``ch`` -> ``ch`` features): the
    native kernel (convs.py) against the core's im2col decomposition on the same device."""
    import axle
    from axle.compiler import compile_module
    from axle.frontend.device_put import to_buffer
    from axle.ir.builder import Builder
    from axle.ir.conv import conv_dimension_numbers
    from axle.passes.expand import expand_extended

    rng = np.random.default_rng(5)
    kl = "OIHW" if layout == "NCHW" else "HWIO"
    xs = (batch, ch, hw, hw) if layout == "NCHW" else (batch, hw, hw, ch)
    ws = (ch, ch, 3, 3) if kl == "OIHW" else (3, 3, ch, ch)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = Builder("conv3x3")
    p, q = b.parameter(f"f32[{','.join(map(str, xs))}]"), b.parameter(f"f32[{','.join(map(str, ws))}]")
    module = b.build(b.convolution(p, q, **conv_dimension_numbers(layout, kl, layout), window_strides=(1, 1),
                                   padding_low=(1, 1), padding_high=(1, 1), lhs_dilation=(1, 1),
                                   rhs_dilation=(1, 1), feature_group_count=1, batch_group_count=1))
    dev = axle.device("opencl:0")
    backend = axle.REGISTRY.backend_for(dev)
    native = compile_module(module, dev)
    decomposed = compile_module(expand_extended(module, lambda n: False)[0], dev)
    bufs = [to_buffer(a, dev) for a in (x, w)]
    got, want = (backend.to_host(e.execute(bufs)[0]) for e in (native, decomposed))
    err = float(np.max(np.abs(got - want)))
    assert err < 1e-3 * (9 * ch) ** 0.5, f"conv3x3: the native kernel is off the decomposition by {err}"
    fns = {"decomposition": lambda: (decomposed.execute(bufs), axle_sync()),
           "axle-opencl": lambda: (native.execute(bufs), axle_sync())}
    t = measure(fns, repeats=repeats)
    flops = 2 * batch * ch * ch * 9 * hw * hw
    return Row(SUITE, f"conv 3x3 {layout} {batch}x{ch}x{hw}x{hw}", t,
               {"GFLOP/s": {k: round(flops / (v * 1e6), 1) for k, v in t.items()}}, baseline="decomposition")


def run(quick: bool, only: str = "") -> list[Row]:
    """Every workload of the suite (those whose name contains ``only``); ``quick``
    shrinks sizes and repeats."""
    try:
        import mako  # noqa: F401
    except ImportError:
        raise SystemExit("bench_opencl: pyopencl's array/Elementwise/ReductionKernel baselines need mako: "
                         "pip install 'axle-opencl[bench]' (or mako)") from None
    reps = 3 if quick else 15
    big = 2 ** 20 if quick else 2 ** 24
    work: dict[str, Callable[[], Row]] = {
        "seed": lambda: _seed(big, reps),
        "tanh": lambda: _tanh_chain(big, reps),
        "softmax": lambda: _row_op("softmax", (512, 1024) if quick else (4096, 1024), _softmax, _np_softmax,
                                   HAND_SOFTMAX, "softmax", reps),
        "layer norm": lambda: _row_op("layer norm", (1024, 1024) if quick else (8192, 1024), _layernorm,
                                      _np_layernorm, HAND_LAYERNORM, "layernorm", reps),
        "matmul": lambda: _matmul(128 if quick else 512, reps),
        "matmul 1024": lambda: _matmul(256 if quick else 1024, max(3, reps // 3)),
        "matmul 1024 @ w.T": lambda: _matmul(256 if quick else 1024, max(3, reps // 3), rhs_transposed=True),
        "matmul 2048": lambda: _matmul(512 if quick else 2048, 3),
        "matmul batched": lambda: _matmul(64 if quick else 256, reps, batch=16),
        "eager add": lambda: _eager_add(200 if quick else 2000),
        "conv 3x3 NCHW": lambda: _conv3x3(2 if quick else 8, 64, 16 if quick else 32, max(3, reps // 3)),
        "conv 3x3 NHWC": lambda: _conv3x3(2 if quick else 8, 64, 16 if quick else 32, max(3, reps // 3), "NHWC"),
    }
    return [fn() for name, fn in work.items() if only in name]


def main() -> None:
    quick = "--quick" in sys.argv
    only = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), "")
    for row in run(quick, only):
        parts = [f"{k}={v:.3f}ms" for k, v in row.times_ms.items()]
        ratio = row.times_ms["axle-opencl"] / row.times_ms[row.baseline]
        print(f"{row.workload:<28} " + "  ".join(parts) + f"  axle/{row.baseline}={ratio:.2f}x  {row.extra}")


if __name__ == "__main__":
    main()
