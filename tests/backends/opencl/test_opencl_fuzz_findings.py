"""Wrong answers on opencl:0 found by issue 12's differential sweep over random programs
and by special values run through it: PoCL math library results (tanh, vector sin/cos)
and a row kernel that recomputed a reduction from a spill buffer it was overwriting."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from axle.interpreter import evaluate
from axle.ir import Builder
from axle.ir.parser import parse_module
from axle.testing.cases import OpCase, assert_close, run_case


@pytest.mark.parametrize("dt", ["f16", "f32", "f64"])
@pytest.mark.parametrize("n", [12, 400], ids=["scalar", "vector"])
def test_tanh_saturates_to_exactly_one(dt: str, n: int, ocl, strategy) -> None:  # noqa: ANN001
    """PoCL's float tanh returned 0.99999994 for +-inf and every |x| > 9: tanh(-inf)
    must be -1 exactly (C99), and so must any x whose tanh rounds to -1."""
    x = np.resize(np.array([np.inf, -np.inf, 9.02, -9.5, 20.0, -1e30, 9.0, 0.5, np.nan, -0.0, 1e-30, 3.0]),
                  n).astype({"f16": np.float16, "f32": np.float32, "f64": np.float64}[dt])
    b = Builder("tanh")
    m = b.build(b.tanh(b.parameter(f"{dt}[{n}]")))
    got = run_case(OpCase("tanh", m, [x]), ocl, optimize=False)[0]
    want = evaluate(m, x)[0]
    # beyond these, tanh rounds to +-1 (float: 13 ln 2 = 9.011; double: 27.5 ln 2 = 19.06)
    big = np.abs(x.astype(np.float64)) > (19.1 if dt == "f64" else 9.02)
    np.testing.assert_array_equal(got[big], np.sign(x[big]))
    assert_close(got, want, 4e-6, 1e-6, "tanh")


#: random_module(400366, 7) and (400020, 21): tanh(-inf) = -0.99999994 made pow(t, t) NaN
#: instead of -1 and ceil(t) -0.0 instead of -1
TANH_OF_INF = """module @r
entry %r (p0: f32[3,1]) -> (f32[3,1], f32[3,1]) {
  %p0 = f32[3,1] parameter(0)
  %tanh = f32[3,1] tanh(%p0)
  %power = f32[3,1] power(%tanh, %tanh)
  %ceil = f32[3,1] ceil(%tanh)
  ROOT %tuple = (f32[3,1], f32[3,1]) tuple(%power, %ceil)
}
"""


@pytest.mark.parametrize("optimize", [False, True])
def test_fuzz_tanh_of_inf_feeds_pow_and_ceil(optimize: bool, ocl) -> None:  # noqa: ANN001
    m = parse_module(TANH_OF_INF)
    x = np.array([[5.06611], [1.0764257], [-np.inf]], np.float32)
    got = run_case(OpCase("r", m, [x]), ocl, optimize=optimize)
    for g, w in zip(got, evaluate(m, x), strict=True):
        assert_close(g, w, 1e-5, 1e-6, "pow/ceil of tanh")


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_sin_cos_of_small_arguments_beside_huge_ones(op: str, ocl) -> None:  # noqa: ANN001
    """PoCL's float16-vector sin/cos got the small lanes wrong when another lane of the
    vector was huge (sin(1e-30) = 0.0099 beside 1e30): such kernels stay scalar."""
    x = np.resize(np.array([1e-3, 1e-30, 0.5, 3.0, 1e30, 2e5, 7.0, -1e-3], np.float32), 64)
    b = Builder(op)
    m = b.build(getattr(b, op)(b.parameter("f32[64]")))
    got = run_case(OpCase(op, m, [x]), ocl, optimize=False)[0]
    assert_close(got, evaluate(m, x)[0], 1e-5, 1e-6, op)


#: random_module(400027, 28), reduced: a row fusion whose row max reaches the outputs
#: through reshape [2,1] -> [2,1,1] and a broadcast. The output loop re-spelled the row
#: index through the reshape, missed the row max computed by the reduction loop and
#: recomputed it from the spilled cos values in out0, which it was overwriting.
ROW_MAX_THROUGH_RESHAPE = """module @r
entry %r (p0: f32[2,1,4]) -> f32[2,1,4] {
  %p0 = f32[2,1,4] parameter(0)
  %exponential = f32[2,1,4] exponential(%p0)
  %cosine = f32[2,1,4] cosine(%exponential)
  %reduce = f32[2,1] reduce(%cosine), axes={2}, kind=max
  %reshape = f32[2,1,1] reshape(%reduce), shape=[2,1,1]
  %broadcast = f32[2,1,4] broadcast(%reshape), broadcast_dimensions={0,1,2}, shape=[2,1,4]
  %add = f32[2,1,4] add(%cosine, %broadcast)
  ROOT %logistic = f32[2,1,4] logistic(%add)
}
"""


def test_fuzz_row_value_through_reshape_is_not_recomputed_from_a_spill(ocl) -> None:  # noqa: ANN001
    m = parse_module(ROW_MAX_THROUGH_RESHAPE)
    x = np.linspace(-1, 1.5, 8, dtype=np.float32).reshape(2, 1, 4)
    got = run_case(OpCase("r", m, [x]), ocl, optimize=True)[0]
    assert_close(got, evaluate(m, x)[0], 1e-5, 1e-6, "row max through a reshape")


def test_float16_interior_pads_with_nan_and_inf(ocl, strategy) -> None:  # noqa: ANN001
    """Issue 12, finding 8 (a float16 interior pad with -inf and NaN swapped, unoptimized)
    did not reproduce on this tree; this covers what it describes: 24 float16 pads with
    low, high and interior padding of every random-program shape, NaN/+-inf/-0.0 in the
    operand and as the padding value, one kernel each."""
    rng = np.random.default_rng(12)
    shapes = [(), (1,), (3,), (2, 3), (3, 1), (2, 1, 4), (0, 3), (4, 3), (5, 7)]
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0], np.float16)
    b = Builder("pads")
    inputs, outs = [], []
    for k in range(24):
        shape = shapes[k % len(shapes)]
        lo, hi, it = ([int(v) for v in rng.integers(0, 3, len(shape))] for _ in range(3))
        x = (rng.standard_normal(shape) * 3).astype(np.float16)
        x = np.where(rng.random(shape) < 0.4, specials[rng.integers(8, size=shape)], x).astype(np.float16)
        inputs.append(x)
        pv = b.constant(np.array(specials[k % 8], np.float16))
        outs.append(b.pad(b.parameter((shape, "f16")), pv, low=lo, high=hi, interior=it))
    m = b.build(*outs)
    got = run_case(OpCase("pads", m, inputs), ocl, optimize=False)
    for g, w in zip(got, evaluate(m, *inputs), strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", ["pow", "rem"])
def test_double_pow_and_rem_at_the_extremes(op: str, ocl) -> None:  # noqa: ANN001
    """PoCL's vector (double2..8) pow and fmod went wrong at the extremes where the scalar
    builtins are right (pow(5e-324, 1) = 4.6e-305, fmod(-1, 5e-324) = NaN): double pow
    and rem stay scalar."""
    f = np.finfo(np.float64)
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, f.max, f.tiny, f.smallest_subnormal,
                  1e-3, 3e4])
    a, c = (np.array(x) for x in zip(*itertools.product(v, v)))
    b = Builder(op)
    m = b.build(getattr(b, op)(b.parameter(f"f64[{a.size}]"), b.parameter(f"f64[{a.size}]")))
    got = run_case(OpCase(op, m, [a, c]), ocl, optimize=False)[0]
    assert_close(got, evaluate(m, a, c)[0], 1e-12, 0.0, op)


#: random_module(1, 24) with the round-nearest-even primitive: a NaN that PoCL's compiler
#: can see (here a constant the optimizer leaves in the kernel) reached rint, which PoCL
#: folded to -0.0 (also for +-inf); expm1(NaN) folded to -0.0 as well
NAN_INTO_RINT = """module @r
entry %r (p0: f64[2,3]) -> (f64[2,3], f64[2,3], f64[2,3], f64[2,3]) {
  %p0 = f64[2,3] parameter(0)
  %n = f64[] constant(nan)
  %nan = f64[2,3] broadcast(%n), broadcast_dimensions={}, shape=[2,3]
  %i = f64[] constant(inf)
  %bi = f64[2,3] broadcast(%i), broadcast_dimensions={}, shape=[2,3]
  %r = f64[2,3] round-nearest-even(%nan)
  %e = f64[2,3] exponential-minus-one(%nan)
  %ri = f64[2,3] round-nearest-even(%bi)
  %a = f64[2,3] add(%r, %r)
  %b = f64[2,3] add(%e, %e)
  %c = f64[2,3] add(%ri, %ri)
  ROOT %tuple = (f64[2,3], f64[2,3], f64[2,3], f64[2,3]) tuple(%a, %b, %c, %p0)
}
"""


@pytest.mark.parametrize("dt", ["f16", "f32", "f64"])
@pytest.mark.parametrize("optimize", [False, True])
def test_rint_and_expm1_of_a_folded_nan_or_inf(dt: str, optimize: bool, ocl) -> None:  # noqa: ANN001
    m = parse_module(NAN_INTO_RINT.replace("f64", dt))
    x = np.ones((2, 3), {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dt])
    got = run_case(OpCase("r", m, [x]), ocl, optimize=optimize)
    for g, w in zip(got, evaluate(m, x), strict=True):
        np.testing.assert_array_equal(g, w)  # NaN, NaN, inf, the input


def test_update_of_an_empty_operand_that_stays_live(ocl, strategy) -> None:  # noqa: ANN001
    """random_module(60038, 9, control=True): a dynamic-update-slice of an empty s32[0,3]
    whose operand is still read (so the update copies it first) made a copy kernel of 0
    elements, whose launch shape divided by a chunk of 0 (a raw ZeroDivisionError)."""
    b = Builder("empty_update")
    x = b.parameter("s32[0,3]")
    upd = b.dynamic_update_slice(x, b.parameter("s32[0,2]"), b.parameter("s32[]"), b.parameter("s32[]"))
    m = b.build(upd, b.abs(x))
    xs = [np.zeros((0, 3), np.int32), np.zeros((0, 2), np.int32), np.int32(0), np.int32(1)]
    got = run_case(OpCase("empty_update", m, xs), ocl, optimize=False)
    for g, w in zip(got, evaluate(m, *xs)):
        assert g.shape == w.shape == (0, 3) and g.dtype == w.dtype
