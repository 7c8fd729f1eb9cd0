"""NaN, +-inf, +-0, huge, tiny and subnormal values through every inlined math function,
conversion and arithmetic op inside a fusion on cpu:0, against the interpreter (issue 12,
finding 2).

Each op runs twice: on a parameter (values known only at run time) and on scalar
constants broadcast inside the fusion, which LLVM folds through the whole inlined
expression. The second form is what exposed ``exp(NaN)`` as garbage: the inlined exp
converted the NaN quotient x/ln2 with fptosi, which is poison for NaN, and LLVM folded the
poison to an arbitrary value once it could prove the NaN."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from axle.compiler import compile_module
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Op
from axle.ir.parser import parse_module
from axle.testing.cases import assert_close, tolerance
from test_cpu_kernels import fused_module, run

FLOATS = {DType.FLOAT16: "f16", DType.FLOAT32: "f32", DType.FLOAT64: "f64"}
INTS = {DType.INT32: "s32", DType.INT64: "s64"}

UNARY = {"exp": Op.EXP, "log": Op.LOG, "tanh": Op.TANH, "logistic": Op.LOGISTIC, "sqrt": Op.SQRT,
         "rsqrt": Op.RSQRT, "floor": Op.FLOOR, "ceil": Op.CEIL, "sign": Op.SIGN, "abs": Op.ABS, "neg": Op.NEG,
         "sin": Op.SIN, "cos": Op.COS,
         # elementwise completeness
         "tan": Op.TAN, "expm1": Op.EXPM1, "log1p": Op.LOG1P, "cbrt": Op.CBRT, "erf": Op.ERF,
         "round_nearest_even": Op.ROUND_NEAREST_EVEN, "is_finite": Op.IS_FINITE}
BINARY = {"pow": Op.POW, "div": Op.DIV, "rem": Op.REM, "max": Op.MAX, "min": Op.MIN}
FLOAT_BINARY = {"atan2": Op.ATAN2, "next_after": Op.NEXT_AFTER}
#: bit operations: shift amounts among the edge values include 63, 64, -1 and INT_MIN
INT_BINARY = ("xor", "shift_left", "shift_right_logical", "shift_right_arithmetic")
CONVERT_TO = ("pred", "s32", "s64", "f16", "f32", "f64")

#: sin/cos reduce their argument accurately only up to about 2^13 (f32) for now
#: (issue 12, finding 5, is fixed separately): they get the specials below that size
SINCOS_MAX = 8192.0


def special_floats(dt: DType) -> np.ndarray:
    f = np.finfo(dt.np)
    v = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 1e-3, -1e-3,
         float(f.max), -float(f.max), float(f.tiny), -float(f.tiny), float(f.smallest_subnormal),
         -float(f.smallest_subnormal), 2.0 ** 20, -(2.0 ** 20), 3e4, -3e4, 1e30, -1e30, 1e300, 1e-300, 1e-320,
         # the edges of exp's clamps (f32 [-104, 89], f64 [-746, 710]) and of tanh's and expm1's ranges
         88.7, 89.5, -103.9, -110.0, 709.9, 710.5, -745.5, -750.0, 0.3465, -0.3466, 9.5, -9.5, 20.5]
    with np.errstate(all="ignore"):
        # (duplicates where the type rounds values together are harmless; np.unique would
        # turn float16 NaN into a signaling NaN)
        return np.array(v, np.float64).astype(dt.np)


def special_ints(dt: DType) -> np.ndarray:
    i = np.iinfo(dt.np)
    return np.array([0, 1, -1, 2, -2, 7, -7, 63, 64, i.min, i.max, i.min + 1, i.max - 1], dt.np)


def check_both_ways(name: str, dt: DType, fn, inputs: list[np.ndarray], op: Op | None, cpu,  # noqa: ANN001
                    signs: bool = True, folded: list[np.ndarray] | None = None) -> None:
    """``fn(builder, operands)`` on parameters holding ``inputs``, then on each element of
    ``folded`` (default: ``inputs``) as a folded constant; every result must match the
    interpreter (with ``signs``, also the sign of every zero and infinity)."""
    n = inputs[0].size
    t = (FLOATS | INTS)[dt]
    rtol, atol = tolerance(dt, op) if dt.is_float else (0.0, 0.0)
    m = fused_module(name, [f"{t}[{n}]"] * len(inputs), fn, "loop")
    got, _ = run(m, inputs, cpu)
    want = evaluate(m, *inputs)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, rtol, atol, f"{name}({t}) on parameters {inputs}")
        if signs:
            _same_signs_where_exact(g, w, f"{name}({t}) on parameters")

    consts = folded if folded is not None else inputs
    n = consts[0].size

    def constants(b: Builder, _: list):  # noqa: ANN202
        outs = []
        for i in range(n):
            r = fn(b, [b.broadcast_in_dim(b.constant(np.array(x[i], dt.np)), shape=(2,), broadcast_dimensions=())
                       for x in consts])
            outs.extend(r if isinstance(r, tuple) else (r,))
        return tuple(outs)

    mc = fused_module(name + "_const", [], constants, "loop")
    got, _ = run(mc, [], cpu)
    per = len(got) // n
    for k, (g, w) in enumerate(zip(got, evaluate(mc), strict=True)):
        what = f"{name}({t}) on the constant(s) {[x[k // per] for x in consts]}"
        assert_close(g, w, rtol, atol, what)
        if signs:
            _same_signs_where_exact(g, w, what)


def _same_signs_where_exact(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """-0.0 vs +0.0 and -inf vs +inf: exact results carry the right sign."""
    if want.dtype.kind != "f":
        return
    exact = (want == 0) | np.isinf(want)
    assert np.array_equal(np.signbit(got[exact]), np.signbit(want[exact])), f"{what}: signs differ"


@pytest.mark.parametrize("dt", list(FLOATS), ids=list(FLOATS.values()))
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math_on_special_values(name: str, dt: DType, cpu) -> None:  # noqa: ANN001
    x = special_floats(dt)
    if name in ("sin", "cos"):
        x = x[~(np.abs(x.astype(np.float64)) > SINCOS_MAX)]
    check_both_ways(name, dt, lambda b, p: getattr(b, name)(p[0]), [x], UNARY[name], cpu)


@pytest.mark.parametrize("dt", list(FLOATS), ids=list(FLOATS.values()))
@pytest.mark.parametrize("to", CONVERT_TO)
def test_float_conversions_of_special_values(to: str, dt: DType, cpu) -> None:  # noqa: ANN001
    """Saturating float -> int (NaN -> 0), float -> bool (NaN -> true), narrowing to f16."""
    check_both_ways(f"convert_{to}", dt, lambda b, p: b.convert(p[0], dtype=to), [special_floats(dt)],
                    Op.CONVERT, cpu)


#: the values whose pairs binary ops also get as folded constants (a kernel per pair of
#: all the specials would take seconds to compile)
FOLDED_PAIRS = 8


def _pairs(x: np.ndarray) -> list[np.ndarray]:
    a, b = zip(*itertools.product(x, x))
    return [np.array(a, x.dtype), np.array(b, x.dtype)]


@pytest.mark.parametrize("dt", list(FLOATS), ids=list(FLOATS.values()))
@pytest.mark.parametrize("name", [*BINARY, *FLOAT_BINARY])
def test_float_binary_ops_on_special_values(name: str, dt: DType, cpu) -> None:  # noqa: ANN001
    keep = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, float(np.finfo(dt.np).max),
            float(np.finfo(dt.np).tiny), float(np.finfo(dt.np).smallest_subnormal), 3e4]
    with np.errstate(all="ignore"):
        x = np.array(keep).astype(dt.np)
    # The zero of max/min(-0.0, +0.0) is unspecified (docs/ir.md): NumPy itself returns the
    # second operand for float32/64 and the first for float16.
    check_both_ways(name, dt, lambda b, p: getattr(b, name)(p[0], p[1]), _pairs(x), (BINARY | FLOAT_BINARY)[name],
                    cpu, signs=name not in ("max", "min"), folded=_pairs(x[:FOLDED_PAIRS]))


@pytest.mark.parametrize("dt", list(INTS), ids=list(INTS.values()))
@pytest.mark.parametrize("name", [*BINARY, "add", "sub", "mul", *INT_BINARY])
def test_integer_binary_ops_on_edge_values(name: str, dt: DType, cpu) -> None:  # noqa: ANN001
    """x/0, x%0, INT_MIN/-1, INT_MIN%-1 never trap and follow the interpreter; overflow wraps."""
    x = special_ints(dt)
    check_both_ways(name, dt, lambda b, p: getattr(b, name)(p[0], p[1]), _pairs(x), None, cpu,
                    folded=_pairs(x[[0, 1, 2, 5, 6, 9, 10]]))


@pytest.mark.parametrize("dt", list(INTS), ids=list(INTS.values()))
@pytest.mark.parametrize("name", ["abs", "neg", "sign", "convert", "popcnt", "clz"])
def test_integer_unary_ops_on_edge_values(name: str, dt: DType, cpu) -> None:  # noqa: ANN001
    fn = {"convert": lambda b, p: tuple(b.convert(p[0], dtype=to) for to in CONVERT_TO)}.get(
        name, lambda b, p: getattr(b, name)(p[0]))
    check_both_ways(name, dt, fn, [special_ints(dt)], None, cpu)


#: issue 12, finding 2 (random_module(100475, 26)): a NaN made inside the fusion
#: (log(0 - 0) ... - ...) reaches exp, which returned 0.0, 1.39e18 or -5.8e26
NAN_INTO_EXP = """module @r
entry %r () -> f32[3] {
  %iota = f32[3,1] iota(), dimension=0, dtype=f32, shape=[3,1]
  %sign = f32[3,1] sign(%iota)
  %constant = f32[] constant(-1.0)
  %broadcast = f32[3,1] broadcast(%constant), broadcast_dimensions={}, shape=[3,1]
  %divide = f32[3,1] divide(%sign, %broadcast)
  %subtract = f32[3,1] subtract(%sign, %divide)
  %log = f32[3,1] log(%subtract)
  %add = f32[3,1] add(%log, %divide)
  %add.1 = f32[3,1] add(%add, %log)
  %subtract.2 = f32[3,1] subtract(%add.1, %add)
  %e2 = f32[3,1] exponential(%subtract.2)
  ROOT %r = f32[3] reshape(%e2), shape=[3]
}
"""


def test_nan_made_inside_a_fusion_stays_nan_through_exp(cpu) -> None:  # noqa: ANN001
    m = parse_module(NAN_INTO_EXP)
    got = np.asarray(compile_module(m, cpu, optimize=True).execute([])[0].handle)
    want = evaluate(m)[0]
    assert np.isnan(want[0])
    assert_close(got, want, *tolerance(DType.FLOAT32, Op.EXP), "exp of a NaN made in the fusion")
