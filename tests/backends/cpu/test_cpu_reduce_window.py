"""Native reduce_window on cpu (axle_cpu/emitter.py ``_reduce_window``: a loop kernel, one
output element per iteration, a loop over the window positions with the padding and
dilation holes as bounds checks) against the interpreter: every attribute class (1-D/2-D/
3-D, strides, padding low/high/negative, base and window dilation, size-1 and odd sizes,
windows larger than the input, empty windows and operands), every reduce kind and the
dtypes each takes, NaN and infinities for max/min; gradients of nn.max_pool/avg_pool
through the native path against finite differences in float64. The window is combined in
the reference's row-major order without reassociation, so every comparison is exact."""
from __future__ import annotations

import numpy as np
import pytest
from test_cpu_conv import directional_fd

import axle
import axle.numpy as anp
from axle import lax, nn
from axle.backend import CompileOptions
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Module
from axle.ir.module import Computation
from axle.ir.opcodes import Op
from axle.ir.types import TensorType
from axle.testing.cases import random_input

RNG = np.random.default_rng(4)


def _attrs(n: int, win, strides=None, low=None, high=None, base=None, wdil=None) -> dict:  # noqa: ANN001
    return {"window_dimensions": tuple(win), "window_strides": tuple(strides or (1,) * n),
            "padding_low": tuple(low or (0,) * n), "padding_high": tuple(high or (0,) * n),
            "base_dilations": tuple(base or (1,) * n), "window_dilations": tuple(wdil or (1,) * n)}


# name: operand shape, attributes
CONFIGS = [
    ("1d-valid", (11,), _attrs(1, (3,))),
    ("1d-strided-padded", (2, 13), _attrs(2, (1, 4), (1, 3), (0, 2), (0, 1))),
    ("2d-resnet-maxpool-nchw", (2, 3, 9, 9), _attrs(4, (1, 1, 3, 3), (1, 1, 2, 2), (0, 0, 1, 1), (0, 0, 1, 1))),
    ("2d-nhwc-2x2", (2, 8, 6, 3), _attrs(4, (1, 2, 2, 1), (1, 2, 2, 1))),
    ("2d-odd-asym", (1, 2, 7, 10), _attrs(4, (1, 1, 3, 4), (1, 1, 2, 3), (0, 0, 2, 0), (0, 0, 0, 3))),
    ("2d-negative-pad", (2, 2, 8, 7), _attrs(4, (1, 1, 2, 3), None, (0, 0, -1, 1), (0, 0, 1, -2))),
    ("2d-window-dilation", (1, 2, 9, 8), _attrs(4, (1, 1, 3, 2), (1, 1, 1, 2), (0, 0, 1, 0), None, None, (1, 1, 2, 3))),
    ("2d-base-dilation", (2, 5, 4), _attrs(3, (1, 3, 2), (1, 1, 2), (0, 2, 1), (0, 1, 2), (1, 2, 3))),
    ("2d-both-dilations", (1, 6, 5), _attrs(3, (1, 2, 3), (1, 2, 1), (0, 1, 0), (0, 0, 3), (1, 2, 1), (1, 1, 2))),
    ("3d-pool", (1, 2, 5, 4, 6), _attrs(5, (1, 1, 2, 3, 2), (1, 1, 2, 1, 2), (0, 0, 1, 0, 1), (0, 0, 0, 1, 0))),
    ("window-larger-than-input", (2, 3), _attrs(2, (4, 5), None, (2, 1), (1, 2))),
    ("whole-array-window", (3, 4), _attrs(2, (3, 4))),
    ("size-1-everything", (1, 1, 1), _attrs(3, (1, 1, 1))),
    ("overlapping-global", (4, 5), _attrs(2, (2, 5), (1, 1), (1, 0), (1, 0))),
    ("empty-window-dim", (3, 4), _attrs(2, (0, 2))),
    ("empty-operand-padded", (0, 3), _attrs(2, (1, 2), None, (2, 0), (1, 0))),
    ("empty-output", (2, 0, 3), _attrs(3, (1, 1, 2))),
    # 72 window positions (> UNROLL_WINDOW): a loop per window dim of size > 1
    ("big-window-loops", (2, 12, 11), _attrs(3, (1, 9, 8), (1, 2, 1), (0, 3, 2), (0, 1, 4), (1, 1, 2))),
    # 64 x 64 outputs: rows long enough that the pool splits the kernel by columns too
    ("big-rows", (3, 66, 130), _attrs(3, (1, 3, 3), (1, 1, 2), (0, 0, 1), (0, 0, 1))),
]

FLOATS = [DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16]
INTS = [DType.INT8, DType.UINT8, DType.INT32, DType.INT64, DType.UINT32]
#: the dtypes each kind takes (reduce_window_dtype)
KIND_DTYPES = {"sum": FLOATS + INTS, "prod": FLOATS + INTS, "max": FLOATS + INTS + [DType.BOOL],
               "min": FLOATS + INTS + [DType.BOOL], "and": INTS + [DType.BOOL], "or": INTS + [DType.BOOL]}
#: the configurations that run every (kind, dtype); every other one runs each kind once, its
#: dtype rotating through the kind's list with the configuration (the window geometry and
#: the combine are separate code paths: each pair of them is met without the whole product)
EVERY_DTYPE = frozenset({"2d-resnet-maxpool-nchw", "2d-odd-asym", "big-window-loops", "empty-output"})


def _grid() -> list[tuple[tuple, str, DType]]:
    out = []
    for i, cfg in enumerate(CONFIGS):
        for j, (kind, dts) in enumerate(KIND_DTYPES.items()):
            chosen = dts if cfg[0] in EVERY_DTYPE else [dts[(i + j) % len(dts)]]
            out += [(cfg, kind, d) for d in chosen]
    return out


def rw_module(shape: tuple[int, ...], attrs: dict, kind: str, dt: DType) -> Module:
    b = Builder("rw")
    x = b.parameter(TensorType(dt, shape))
    return b.build(b.reduce_window(x, kind=kind, **attrs))


def inputs(shape: tuple[int, ...], kind: str, dt: DType) -> np.ndarray:
    """Small values for products (no overflow to compare); NaN and infinities scattered
    through float operands for max and min."""
    t = TensorType(dt, shape)
    x = random_input(RNG, t, special=False, small=kind == "prod" or dt.is_half)
    if dt.is_float and kind in ("max", "min") and x.size >= 8:
        flat = x.reshape(-1)
        at = RNG.choice(x.size, size=max(x.size // 6, 4), replace=False)
        flat[at] = RNG.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dt.np), size=at.size)
    return x


def native_windows(comp: Computation) -> int:
    """reduce_window nodes left in an optimized computation: the ones the device runs natively."""
    return sum(1 if n.op is Op.REDUCE_WINDOW else native_windows(n.attr["computation"]) if n.op is Op.FUSION else 0
               for n in comp.nodes)


def run_native(m: Module, x: np.ndarray, cpu) -> np.ndarray:  # noqa: ANN001
    be = axle.REGISTRY.backend("cpu")
    exe = be.compile(m, cpu, CompileOptions(optimized=False))
    kernels = [s.comp for s in exe.plan.kernels.values()]
    assert sum(native_windows(c) for c in kernels) == 1, f"{m.name}: not one native reduce_window kernel"
    return be.to_host(exe.execute([be.to_device(x, cpu)])[0])


@pytest.mark.parametrize("cfg,kind,dt", _grid(), ids=lambda v: getattr(v, "value", v[0] if isinstance(v, tuple) else v))
def test_native_reduce_window_matches_interpreter(cfg, kind: str, dt: DType, cpu) -> None:  # noqa: ANN001
    name, shape, attrs = cfg
    m = rw_module(shape, attrs, kind, dt)
    x = inputs(shape, kind, dt)
    (want,) = evaluate(m, x)
    got = run_native(m, x, cpu)
    assert got.shape == want.shape and got.dtype == want.dtype
    # exact, NaN where the interpreter has NaN: the same combines in the same order
    # (floats compared as float64: NumPy's tests see a bfloat16 NaN as no NaN)
    as_cmp = (lambda a: a.astype(np.float64)) if dt.is_float else (lambda a: a)
    np.testing.assert_array_equal(as_cmp(got), as_cmp(want), err_msg=f"{name} {kind} {dt.value}")


def test_reduce_window_is_claimed_not_decomposed() -> None:
    """Through jit: no decomposition in the placement summary, the op itself in the module."""
    f = axle.jit(lambda a: nn.max_pool(a, 3, 2, ((1, 1), (1, 1))), device="cpu:0")
    x = RNG.standard_normal((2, 4, 11, 11)).astype(np.float32)
    comp = f.lower(x).compile()
    assert Op.REDUCE_WINDOW.value not in comp.placement().decomposed
    assert native_windows(comp.module.entry) == 1
    with axle.device("interpreter:0"):
        want = np.asarray(nn.max_pool(x, 3, 2, ((1, 1), (1, 1))))
    np.testing.assert_array_equal(np.asarray(comp(x)), want)


@pytest.mark.parametrize("pool,layout,window,stride,padding", [
    ("max", "NCHW", 3, 2, ((1, 1), (1, 1))),
    ("max", "NHWC", 2, 1, "VALID"),
    ("max", "NCW", 3, 2, "SAME"),
    ("avg", "NCHW", 3, 2, ((1, 1), (1, 1))),
    ("avg", "NHWC", (2, 3), (2, 1), "SAME"),
    ("avg", "NCDHW", 2, 1, "VALID"),
], ids=str)
def test_pool_gradients_native_finite_differences(pool: str, layout: str, window, stride, padding) -> None:  # noqa: ANN001
    """Gradients of nn.max_pool/avg_pool in float64 on cpu, the forward (and the sum
    window of avg_pool's backward pass) run natively, against central finite differences
    along random directions."""
    ns = len(layout) - 2
    sp = {1: (9,), 2: (7, 8), 3: (4, 5, 4)}[ns]
    shape = (2, 3, *sp) if layout.index("C") == 1 else (2, *sp, 3)
    x = RNG.standard_normal(shape)  # distinct values: max pool's gradient is well defined
    fn = nn.max_pool if pool == "max" else nn.avg_pool
    cw = RNG.standard_normal(np.asarray(fn(x, window, stride, padding, layout)).shape)

    def loss(xa):  # noqa: ANN001, ANN202
        return anp.sum(anp.tanh(fn(xa, window, stride, padding, layout)) * cw)

    compiled = axle.jit(axle.grad(loss), device="cpu:0").lower(x).compile()
    assert native_windows(compiled.module.entry) >= 1
    assert Op.REDUCE_WINDOW.value not in compiled.placement().decomposed
    g = np.asarray(compiled(x))

    def f_np(xa: np.ndarray) -> float:
        with axle.device("interpreter:0"):
            return float(np.asarray(loss(xa)))

    for _ in range(3):
        v = RNG.standard_normal(g.shape)
        np.testing.assert_allclose(float(np.sum(g * v)), directional_fd(f_np, [x], 0, v), rtol=1e-6, atol=1e-7)


def test_padded_window_vectorizes(cpu) -> None:  # noqa: ANN001
    """A padded stride-1 max pool over rows longer than 64 (a short row's constant-trip
    column loop is left scalar by LLVM here): the loads under the bounds check become the
    host's vectors (masked loads), not scalar code or gathers at clamped indices."""
    from test_cpu_kernels import loop_float_lanes

    m = rw_module((2, 3, 20, 100), _attrs(4, (1, 1, 3, 3), None, (0, 0, 1, 1), (0, 0, 1, 1)), "max", DType.FLOAT32)
    exe = axle.REGISTRY.backend("cpu").compile(m, cpu, CompileOptions(optimized=False))
    assert loop_float_lanes(exe.optimized_ir())


@pytest.mark.parametrize("target", ["host", "generic"])
def test_reduce_window_aot(target: str, tmp_path) -> None:  # noqa: ANN001
    """AOT: a padded max pool (the masked loads) and a dilated window sum in one object
    file for this host or generic x86-64, run from C: the interpreter's values exactly."""
    from test_cpu_aot import build_and_run

    from axle.device_compile import optimize_for
    from axle_cpu.aot import compile_aot

    pool = next(c for c in CONFIGS if c[0] == "2d-resnet-maxpool-nchw")
    dil = next(c for c in CONFIGS if c[0] == "2d-both-dilations")
    b = Builder("windows")
    x1, x2 = b.parameter(TensorType(DType.FLOAT32, pool[1])), b.parameter(TensorType(DType.FLOAT64, dil[1]))
    m = b.build(b.reduce_window(x1, kind="max", **pool[2]), b.reduce_window(x2, kind="sum", **dil[2]))
    assert native_windows(optimize_for(m, axle.REGISTRY.backend("cpu").devices()[0]).entry) == 2
    types = [p.type for p in m.entry.parameters]
    res = compile_aot(m, types, str(tmp_path), name="windows", cpu="generic" if target == "generic" else None)
    xs = [inputs(pool[1], "max", DType.FLOAT32), inputs(dil[1], "sum", DType.FLOAT64)]
    for got, want in zip(build_and_run(res, xs, tmp_path), evaluate(m, *xs)):
        np.testing.assert_array_equal(got, want)


def test_reduce_window_inside_a_native_loop() -> None:
    """A max pool in a fori_loop body runs natively inside the loop (no fallback, no
    decomposition), with the interpreter's values."""
    x = RNG.standard_normal((2, 3, 9, 9)).astype(np.float32)

    def f(a):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, 3, lambda i, v: anp.tanh(nn.max_pool(v, 3, 1, ((1, 1), (1, 1)))), a)

    compiled = axle.jit(f, device="cpu:0").lower(x).compile()
    summary = compiled.placement()
    assert summary is None or not summary.fallback
    assert not (summary.decomposed if summary is not None else {})
    with axle.device("interpreter:0"):
        want = np.asarray(f(x))
    np.testing.assert_allclose(np.asarray(compiled(x)), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["2d-resnet-maxpool-nchw", "2d-negative-pad", "big-rows", "big-window-loops"])
def test_reduce_window_disjoint_ranges(name: str) -> None:
    """Thread splits: disjoint pieces of the outer (rows) and inner (columns) ranges give
    exactly the single-call result, the interpreter's."""
    from test_cpu_gemm import _call

    from axle_cpu.executable import KFUNC, compile_kernels
    from axle_cpu.plan import build_plan

    _, shape, attrs = next(c for c in CONFIGS if c[0] == name)
    m = rw_module(shape, attrs, "max", DType.FLOAT32)
    (spec,) = build_plan(m, arena=False).kernels.values()
    jit = compile_kernels([spec], f"rw_{name.replace('-', '_')}")
    fn = KFUNC(jit.address(spec.name))
    outer, inner = spec.loop_sizes
    x = inputs(shape, "max", DType.FLOAT32)
    (want,) = evaluate(m, x)
    whole = np.full(want.shape, 99, np.float32)
    _call(fn, [x], whole, [(0, outer, 0, inner)])
    np.testing.assert_array_equal(whole, want)
    cuts = sorted({0, 1, outer // 3, outer // 3 + 1, outer})
    pieces = np.full(want.shape, 99, np.float32)
    _call(fn, [x], pieces, [(a, b, 0, inner) for a, b in zip(cuts, cuts[1:]) if a < b])
    np.testing.assert_array_equal(pieces, whole)
    if not spec.fixed_columns:  # (a short constant row is split by rows only)
        cuts = sorted({0, min(3, inner), inner // 2, inner})
        pieces = np.full(want.shape, 99, np.float32)
        _call(fn, [x], pieces, [(0, outer, a, b) for a, b in zip(cuts, cuts[1:]) if a < b])
        np.testing.assert_array_equal(pieces, whole)
