"""The elementwise-completeness primitives on cpu:0 (tan, expm1, log1p, cbrt, erf, atan2,
next-after): accuracy in ulps over every binade, and the float16 chains that once crashed.
Special values are in test_cpu_special_values.py, the kit's cases in the conformance run."""
from __future__ import annotations

import numpy as np
import pytest

from axle.interpreter import evaluate
from axle.ir import Builder, DType, Op
from axle.ir.parser import parse_module
from axle.ir.types import TensorType
from axle.testing.accuracy import Sweep, measure
from axle.testing.cases import OpCase, assert_close, random_input, run_case, tolerance
from test_cpu_kernels import run

#: max ulp error on cpu:0 (docs/reliability.md has the 64-per-binade figures); float64
#: is measured against the platform libm, itself within about an ulp
ULP_BOUND = {
    Op.TAN: {DType.FLOAT16: 0.5, DType.FLOAT32: 2.5, DType.FLOAT64: 3.0},
    Op.EXPM1: {DType.FLOAT16: 0.5, DType.FLOAT32: 3.5, DType.FLOAT64: 3.5},
    Op.LOG1P: {DType.FLOAT16: 0.5, DType.FLOAT32: 4.0, DType.FLOAT64: 4.0},
    Op.CBRT: {DType.FLOAT16: 0.5, DType.FLOAT32: 0.5, DType.FLOAT64: 1.5},
    Op.ERF: {DType.FLOAT16: 0.5, DType.FLOAT32: 0.5, DType.FLOAT64: 1.0},
    Op.ATAN2: {DType.FLOAT16: 0.5, DType.FLOAT32: 2.5, DType.FLOAT64: 2.5},
}


@pytest.mark.parametrize("dt", [DType.FLOAT16, DType.FLOAT32, DType.FLOAT64], ids=lambda d: d.value)
@pytest.mark.parametrize("op", list(ULP_BOUND), ids=lambda o: o.value)
def test_accuracy_in_ulps_over_every_binade(op: Op, dt: DType, cpu) -> None:  # noqa: ANN001
    m = measure(cpu, Sweep.make(op, dt, per_binade=8))
    assert m.max_ulp <= ULP_BOUND[op][dt], f"{op.value} {dt.value}: {m.max_ulp} ulp at {m.worst_input}"


#: cbrt of cbrt in float16, then a remainder: the double -> float truncation ending cbrt
#: met the float -> half rounding, and LLVM merged them into a call to __truncdfhf2,
#: which the JIT process does not have (a segfault); now a fence keeps them apart
F16_CBRT_CHAIN = """module @r
entry %r (p0: f16[4,3], p1: f16[4,3]) -> f16[4,3] {
  %p0 = f16[4,3] parameter(0)
  %p1 = f16[4,3] parameter(1)
  %c1 = f16[4,3] cbrt(%p0)
  %c2 = f16[4,3] cbrt(%c1)
  ROOT %r = f16[4,3] remainder(%c2, %p1)
}
"""


@pytest.mark.parametrize("fn", ["cbrt", "erf", "atan2"])
def test_float16_chains_through_double_do_not_call_missing_libcalls(fn: str, cpu) -> None:  # noqa: ANN001
    args = {"cbrt": ("%p0", "%c1"), "erf": ("%p0", "%c1"), "atan2": ("%p0, %p1", "%c1, %p1")}[fn]
    text = F16_CBRT_CHAIN.replace("cbrt(%p0)", f"{fn}({args[0]})").replace("cbrt(%c1)", f"{fn}({args[1]})")
    m = parse_module(text)
    rng = np.random.default_rng(0)
    xs = [random_input(rng, TensorType(DType.FLOAT16, (4, 3))) for _ in range(2)]
    got = run_case(OpCase(fn, m, xs), cpu, optimize=True)
    assert_close(got[0], evaluate(m, *xs)[0], *tolerance(DType.FLOAT16, Op.ERF), fn)


def test_next_after_steps_in_the_operands_format(cpu) -> None:  # noqa: ANN001
    """float16 next-after steps one half ulp (a float step would round back to x), up to
    inf past the largest half, and from zero to the smallest subnormal with y's sign."""
    x = np.array([1.0, 1.0, 0.0, 0.0, 65504.0, 2.0 ** -14, 2.0 ** -24, -0.0, 0.0, 1.0], np.float16)
    y = np.array([2.0, 0.0, -1.0, 1.0, np.inf, 0.0, 0.0, 0.0, -0.0, 1.0], np.float16)
    want = np.array([1.0 + 2.0 ** -10, 1.0 - 2.0 ** -11, -(2.0 ** -24), 2.0 ** -24, np.inf, 2.0 ** -14 - 2.0 ** -24,
                     0.0, 0.0, -0.0, 1.0], np.float16)
    b = Builder("next_after")
    p = [b.parameter(TensorType(DType.FLOAT16, x.shape)) for _ in range(2)]
    m = b.build(b.next_after(*p))
    got, _ = run(m, [x, y], cpu)
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(want))
    np.testing.assert_array_equal(evaluate(m, x, y)[0], want)
