"""maximum/minimum and reduce max/min follow IEEE 754-2019 on every backend: NaN-propagating
and -0.0 < +0.0, so max(-0.0, +0.0) = +0.0 and min(-0.0, +0.0) = -0.0 in either operand
order, alone, inside fusions, optimized and not. sign(+-0.0) is +0.0 everywhere (NumPy's). Checked against explicit expected values
(bit for bit, the sign of zero included), not only against the interpreter: the
interpreter itself used NumPy's maximum/minimum, which pick an arbitrary zero on a tie."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.module import Module
from axle.ir.ops import Op
from axle.ir.parser import parse_module
from axle.ir.types import TensorType
from axle.testing import require_backend
from axle.testing.cases import OpCase, run_case

BACKENDS = ("cpu", "opencl", "template", "interpreter")
FLOATS = (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64)
NAN, INF = np.nan, np.inf
# (a, b, max(a, b), min(a, b)): every order of the two zeros, both alike, with NaN
PAIRS = [
    (0.0, -0.0, 0.0, -0.0),
    (-0.0, 0.0, 0.0, -0.0),
    (0.0, 0.0, 0.0, 0.0),
    (-0.0, -0.0, -0.0, -0.0),
    (NAN, -0.0, NAN, NAN),
    (-0.0, NAN, NAN, NAN),
    (NAN, 0.0, NAN, NAN),
    (0.0, NAN, NAN, NAN),
    (1.0, -0.0, 1.0, -0.0),
    (-1.0, 0.0, 0.0, -1.0),
    (-0.0, -INF, -0.0, -INF),
    (INF, 0.0, INF, 0.0),
]
# (row, max(row), min(row)): reductions of sets holding both zeros, one zero kind, NaN
ROWS = [
    ([0.0, -0.0, -0.0], 0.0, -0.0),
    ([-0.0, -0.0, 0.0], 0.0, -0.0),
    ([-0.0, -0.0, -0.0], -0.0, -0.0),
    ([0.0, 0.0, 0.0], 0.0, 0.0),
    ([NAN, -0.0, 0.0], NAN, NAN),
    ([-0.0, 0.0, NAN], NAN, NAN),
    ([-1.0, -0.0, 0.0], 0.0, -1.0),
    ([0.0, 1.0, -0.0], 1.0, -0.0),
]


def same_bits(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Equal values, NaN where expected, and the same sign on every zero."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan, err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(actual[~nan], expected[~nan], err_msg=what)
    np.testing.assert_array_equal(np.signbit(actual[~nan]), np.signbit(expected[~nan]), err_msg=f"{what}: zero signs")


def run(module: Module, inputs: list[np.ndarray], backend: str, optimize: bool) -> list[np.ndarray]:
    dev = require_backend(backend)
    return run_case(OpCase(module.name, module, inputs), dev, optimize=optimize)


def build(name: str, types: list[TensorType], body: Callable[[Builder, list], object]) -> Module:
    b = Builder(name)
    params = [b.parameter(t, name=f"p{i}") for i, t in enumerate(types)]
    return b.build(body(b, params))


def pair_inputs(dt: DType, reps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The PAIRS repeated ``reps`` times (long enough for vector lanes and remainders)."""
    cols = [np.tile(np.array(c, dt.np), reps) for c in zip(*PAIRS)]
    return cols[0], cols[1], cols[2], cols[3]


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.value)
@pytest.mark.parametrize("reps", [1, 11])
@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_alone_and_fused(backend: str, reps: int, dt: DType, optimize: bool) -> None:
    a, b, mx, mn = pair_inputs(dt, reps)
    t = TensorType(dt, a.shape)
    for op, expected in ((Op.MAX, mx), (Op.MIN, mn)):
        alone = build(f"{op.value}_alone", [t, t], lambda bl, p, op=op: bl.op(op, p[0], p[1]))
        same_bits(run(alone, [a, b], backend, optimize)[0], expected, f"{op.value} {dt.value} on {backend}")
        # fused: 1 / max(a, b) turns the sign of a zero into the sign of an infinity
        fused = build(f"{op.value}_fused", [t, t, t], lambda bl, p, op=op: bl.op(Op.DIV, p[2], bl.op(op, p[0], p[1])))
        ones = np.ones_like(a)
        with np.errstate(divide="ignore", invalid="ignore"):
            want = (ones / expected).astype(dt.np)
        same_bits(run(fused, [a, b, ones], backend, optimize)[0], want, f"1/{op.value} {dt.value} on {backend}")


def row_inputs(dt: DType, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROWS, each padded to ``width`` with copies of its own elements (same max and min)."""
    x = np.array([(r * width)[:width] for r, _, _ in ROWS], dt.np)
    return x, np.array([m for _, m, _ in ROWS], dt.np), np.array([m for _, _, m in ROWS], dt.np)


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.value)
@pytest.mark.parametrize("width", [3, 67, 1030])
@pytest.mark.parametrize("backend", BACKENDS)
def test_reduce_alone_and_fused(backend: str, width: int, dt: DType, optimize: bool) -> None:
    x, mx, mn = row_inputs(dt, width)
    t = TensorType(dt, x.shape)
    for kind, expected in (("max", mx), ("min", mn)):
        for axis, xin in ((1, x), (0, np.ascontiguousarray(x.T))):  # rows and columns
            ti = TensorType(dt, xin.shape)
            alone = build(f"reduce_{kind}", [ti], lambda bl, p, k=kind, a=axis: bl.reduce(p[0], kind=k, axes=(a,)))
            same_bits(run(alone, [xin], backend, optimize)[0], expected,
                      f"reduce {kind} axis {axis} {dt.value}[{width}] on {backend}")
        # fused with an elementwise producer (x * 1 keeps every zero's sign) and a consumer
        fused = build(f"reduce_{kind}_fused", [t], lambda bl, p, k=kind: bl.op(
            Op.DIV, bl.constant(np.ones(len(ROWS), dt.np)),
            bl.reduce(bl.op(Op.MUL, p[0], bl.constant(np.ones(x.shape, dt.np))), kind=k, axes=(1,))))
        with np.errstate(divide="ignore", invalid="ignore"):
            want = (np.ones_like(expected) / expected).astype(dt.np)
        same_bits(run(fused, [x], backend, optimize)[0], want, f"1/reduce {kind} {dt.value}[{width}] on {backend}")


@pytest.mark.parametrize("kind, lone, expected", [("max", 0.0, 0.0), ("min", -0.0, -0.0)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_long_reduction_finds_one_winning_zero(backend: str, kind: str, lone: float, expected: float) -> None:
    """A million zeros of the losing sign and one of the winning sign near the end: long
    enough for cpu's threaded split reductions, whose partials are combined on the host."""
    x = np.full(1 << 20, -lone, np.float32)
    x[-3] = lone
    m = build(f"long_{kind}", [TensorType(DType.FLOAT32, x.shape)], lambda bl, p: bl.reduce(p[0], kind=kind, axes=(0,)))
    for optimize in (True, False):
        same_bits(run(m, [x], backend, optimize)[0], np.array(expected, np.float32), f"{kind} on {backend}")


FUZZ_REPRO = """
module @zeros
entry %zeros (p0: f16[12,7,3], p1: f16[12,7,3]) -> f16[12,7,3] {
  %p0 = f16[12,7,3] parameter(0)
  %p1 = f16[12,7,3] parameter(1)
  %reduce = f16[12,7] reduce(%p1), axes={2}, kind=min
  %broadcast = f16[12,7,3] broadcast(%reduce), broadcast_dimensions={0,1}, shape=[12,7,3]
  ROOT %divide = f16[12,7,3] divide(%p0, %broadcast)
}
"""


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_fuzz_repro_min_of_zeros_then_divide(backend: str, optimize: bool) -> None:
    """The fuzz finding: rows like {0.0, -0.0, -0.0} reduced by min, then divided by. The
    interpreter gave +inf on some rows (NumPy's f16 minimum kept the first zero) where cpu
    and opencl gave -inf."""
    m = parse_module(FUZZ_REPRO)
    rows = np.array([[0.0, -0.0, -0.0], [-0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [-0.0, -0.0, -0.0]], np.float16)
    p1 = np.resize(rows, (12 * 7, 3)).reshape(12, 7, 3)
    p0 = np.ones((12, 7, 3), np.float16)
    has_neg = (np.signbit(p1) & (p1 == 0)).any(axis=2, keepdims=True)
    want = np.broadcast_to(np.where(has_neg, -np.inf, np.inf), p0.shape).astype(np.float16)
    same_bits(evaluate(m, p0, p1)[0], want, "interpreter reference")
    same_bits(run(m, [p0, p1], backend, optimize)[0], want, f"fuzz repro on {backend}")


SIGNS = [(-0.0, 0.0), (0.0, 0.0), (-2.5, -1.0), (3.0, 1.0), (NAN, NAN), (-INF, -1.0), (INF, 1.0), (1e-7, 1.0)]


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.value)
@pytest.mark.parametrize("reps", [1, 11])
@pytest.mark.parametrize("backend", BACKENDS)
def test_sign_of_either_zero_is_plus_zero(backend: str, reps: int, dt: DType, optimize: bool) -> None:
    """OpenCL's builtin sign(-0.0) is -0.0: 1 / sign(-0.0) was -inf there and +inf elsewhere
    (the fuzz found it through a divide in float16)."""
    x = np.tile(np.array([v for v, _ in SIGNS], dt.np), reps)
    expected = np.tile(np.array([s for _, s in SIGNS], dt.np), reps)
    t = TensorType(dt, x.shape)
    alone = build("sign_alone", [t], lambda bl, p: bl.op(Op.SIGN, p[0]))
    same_bits(run(alone, [x], backend, optimize)[0], expected, f"sign {dt.value} on {backend}")
    fused = build("sign_fused", [t, t], lambda bl, p: bl.op(Op.DIV, p[1], bl.op(Op.SIGN, p[0])))
    ones = np.ones_like(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = (ones / expected).astype(dt.np)
    same_bits(run(fused, [x, ones], backend, optimize)[0], want, f"1/sign {dt.value} on {backend}")


SIGN_FUZZ_REPRO = """
module @random
entry %random () -> f16[3] {
  %constant = f16[3,1] constant({{0.87255859375}, {0.93798828125}, {0.9638671875}})
  %constant.1 = f16[3,1] constant({{-0.0}, {3.986328125}, {1.4951171875}})
  %sign = f16[3,1] sign(%constant.1)
  %divide = f16[3,1] divide(%constant, %sign)
  ROOT %reduce = f16[3] reduce(%divide), axes={1}, kind=max
}
"""


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_fuzz_repro_divide_by_sign_of_minus_zero(backend: str, optimize: bool) -> None:
    """make fuzz, random_module(8142, 22) minimized: opencl gave -inf for the first row."""
    m = parse_module(SIGN_FUZZ_REPRO)
    want = np.array([np.inf, 0.93798828125 / 1, 0.9638671875], np.float16)
    same_bits(evaluate(m)[0], want, "interpreter reference")
    same_bits(run(m, [], backend, optimize)[0], want, f"fuzz repro on {backend}")
