"""The renderer: a table from op to an OpenCL C expression over operand expressions.

Operands are always temporaries or literals (the code generator assigns every node to a
variable), so an expression may mention an operand more than once. The same strings
serve scalar code and, for the float ops the vectorizer accepts, ``floatN`` code:
comparisons and ``isnan`` give all-ones masks on vectors and ``?:`` selects per lane.

Semantics follow the interpreter exactly: XLA integer division (x/0 = -1, no traps),
wrapping integer arithmetic (done in unsigned types because signed overflow is undefined
in C), NaN-propagating max/min (``fmax`` would drop NaNs), saturating float->int
converts with NaN -> 0."""
from __future__ import annotations

from collections.abc import Callable

from axle.ir.dtypes import DType
from axle.ir.numerics import TANH_SATURATION_F32
from axle.ir.ops import Op
from axle.lowering.c import OpenCLC, helpers

from .ctypes_ import REG, UNSIGNED, literal

Expr = str
Helpers = set[str]

# ------------------------------------------------------------------- helper functions
#: OpenCL C functions emitted into a program only when a kernel uses them (the shared
#: dialect's: integer division, remainder, power and abs, half rounding, the RNG).
HELPERS: dict[str, str] = helpers(OpenCLC)


def _nan_guard(f: Callable[[DType, Expr], Expr]) -> Callable[[DType, Expr], Expr]:
    """PoCL (LLVM 15) folds exp/tanh/floor/ceil of a NaN known at compile time (e.g. a
    NaN constant in a fused program) to garbage; passing NaN through explicitly is
    exact and costs one compare-select."""
    return lambda dt, x: f"(isnan({x}) ? {x} : {f(dt, x)})"




def _saturated_tanh(x: Expr) -> Expr:
    """PoCL's float tanh never returns +-1, not even for +-inf (0.99999994): +-1 where
    the correctly rounded tanh is +-1 (tanh(-inf) = -1 feeds pow, ceil... exactly)."""
    return f"(fabs({x}) > {TANH_SATURATION_F32!r}f ? copysign(1.0f, {x}) : tanh({x}))"


def _f(dt: DType, v: float) -> str:
    return literal(v, dt)


def _wrap(dt: DType, op: str) -> Callable[[Expr, Expr], Expr]:
    u, t = UNSIGNED[dt], REG[dt]
    return lambda a, b: f"(({t})(({u}){a} {op} ({u}){b}))"


# ---------------------------------------------------------------------------- tables
# Each entry: (dtype -> expression builder). Float entries see float/double registers.
FloatUnary = Callable[[DType, Expr], Expr]
FLOAT_UNARY: dict[Op, FloatUnary] = {
    Op.NEG: lambda dt, x: f"(-{x})",
    Op.ABS: lambda dt, x: f"fabs({x})",
    Op.EXP: lambda dt, x: f"exp({x})",
    Op.LOG: lambda dt, x: f"log({x})",
    Op.SQRT: lambda dt, x: f"sqrt({x})",
    Op.RSQRT: lambda dt, x: f"({_f(dt, 1)} / sqrt({x}))",
    Op.TANH: lambda dt, x: f"tanh({x})" if dt is DType.FLOAT64 else _saturated_tanh(x),
    Op.LOGISTIC: lambda dt, x: f"({_f(dt, 1)} / ({_f(dt, 1)} + exp(-{x})))",
    Op.SIN: lambda dt, x: f"sin({x})",
    Op.COS: lambda dt, x: f"cos({x})",
    Op.FLOOR: lambda dt, x: f"floor({x})",
    Op.CEIL: lambda dt, x: f"ceil({x})",
    # OpenCL's sign(-0.0) is -0.0; the IR's (NumPy's) is +0.0: adding +0.0 turns -0.0 into
    # +0.0 and changes nothing else (no fast-math build option lets the compiler drop it)
    Op.SIGN: lambda dt, x: f"(isnan({x}) ? {x} : sign({x}) + {literal(0.0, dt)})",
}
for _op in (Op.EXP, Op.TANH, Op.LOGISTIC, Op.FLOOR, Op.CEIL):
    FLOAT_UNARY[_op] = _nan_guard(FLOAT_UNARY[_op])
FLOAT_BINARY: dict[Op, Callable[[DType, Expr, Expr], Expr]] = {
    Op.ADD: lambda dt, a, b: f"({a} + {b})",
    Op.SUB: lambda dt, a, b: f"({a} - {b})",
    Op.MUL: lambda dt, a, b: f"({a} * {b})",
    Op.DIV: lambda dt, a, b: f"({a} / {b})",
    Op.REM: lambda dt, a, b: f"fmod({a}, {b})",
    Op.POW: lambda dt, a, b: f"pow({a}, {b})",
    # IEEE 754-2019 maximum/minimum: NaN-propagating (fmax/fmin return the non-NaN
    # operand) and -0.0 < +0.0 (on a tie of zeros: max keeps a unless a is -0.0, min keeps
    # a unless a is +0.0). Written for scalars and vectors alike (&&, signbit and the
    # ternary act per lane on vectors).
    Op.MAX: lambda dt, a, b: f"(({a} > {b} || isnan({a}) || ({a} == {b} && !signbit({a}))) ? {a} : {b})",
    Op.MIN: lambda dt, a, b: f"(({a} < {b} || isnan({a}) || ({a} == {b} && signbit({a}))) ? {a} : {b})",
}
INT_UNARY: dict[Op, Callable[[DType, Expr], tuple[Expr, str | None]]] = {
    Op.NEG: lambda dt, x: (f"(({REG[dt]})(0 - ({UNSIGNED[dt]}){x}))", None),
    Op.ABS: lambda dt, x: (f"axle_abs_{REG[dt]}({x})", f"axle_abs_{REG[dt]}"),
    Op.SIGN: lambda dt, x: (f"(({REG[dt]})(({x} > 0) - ({x} < 0)))", None),
    Op.NOT: lambda dt, x: (f"(~{x})", None),
}
INT_BINARY: dict[Op, Callable[[DType, Expr, Expr], tuple[Expr, str | None]]] = {
    Op.ADD: lambda dt, a, b: (_wrap(dt, "+")(a, b), None),
    Op.SUB: lambda dt, a, b: (_wrap(dt, "-")(a, b), None),
    Op.MUL: lambda dt, a, b: (_wrap(dt, "*")(a, b), None),
    Op.DIV: lambda dt, a, b: (f"axle_div_{REG[dt]}({a}, {b})", f"axle_div_{REG[dt]}"),
    Op.REM: lambda dt, a, b: (f"axle_rem_{REG[dt]}({a}, {b})", f"axle_rem_{REG[dt]}"),
    Op.POW: lambda dt, a, b: (f"axle_pow_{REG[dt]}({a}, {b})", f"axle_pow_{REG[dt]}"),
    Op.MAX: lambda dt, a, b: (f"({a} > {b} ? {a} : {b})", None),
    Op.MIN: lambda dt, a, b: (f"({a} < {b} ? {a} : {b})", None),
    Op.AND: lambda dt, a, b: (f"({a} & {b})", None),
    Op.OR: lambda dt, a, b: (f"({a} | {b})", None),
}
BOOL_UNARY: dict[Op, Callable[[Expr], Expr]] = {Op.NOT: lambda x: f"(!{x})"}
BOOL_BINARY: dict[Op, Callable[[Expr, Expr], Expr]] = {
    Op.AND: lambda a, b: f"({a} & {b})",
    Op.OR: lambda a, b: f"({a} | {b})",
    Op.MAX: lambda a, b: f"({a} | {b})",
    Op.MIN: lambda a, b: f"({a} & {b})",
}
COMPARE: dict[str, str] = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

#: float ops the vectorizer may emit on floatN values (everything else stays scalar)
#: Ops rendered on floatN as well. Not sin/cos: PoCL's vector sin/cos lose the small
#: lanes of a vector that also holds a huge argument (sin(1e-30) came out 0.0099 beside
#: 1e30, on the CPU strategy's float16 vectors); the scalar builtins are right.
VECTOR_OK: frozenset[Op] = (frozenset(FLOAT_UNARY) | frozenset(FLOAT_BINARY)) - {Op.SIGN, Op.SIN, Op.COS}


def round_half(expr: Expr, helpers: Helpers) -> Expr:
    helpers.add("axle_rh")
    return f"axle_rh({expr})"


def unary(op: Op, dt: DType, x: Expr, helpers: Helpers) -> Expr:
    """Register expression of a unary elementwise op (result has dtype ``dt``)."""
    if dt.is_float:
        e = FLOAT_UNARY[op](dt, x)
        return round_half(e, helpers) if dt is DType.FLOAT16 else e
    if dt.is_bool:
        return BOOL_UNARY[op](x)
    e, helper = INT_UNARY[op](dt, x)
    if helper:
        helpers.add(helper)
    return e


def binary(op: Op, dt: DType, a: Expr, b: Expr, helpers: Helpers) -> Expr:
    """Register expression of a binary elementwise op on two values of dtype ``dt``."""
    if dt.is_float:
        e = FLOAT_BINARY[op](dt, a, b)
        # max/min pick an operand: already representable, no rounding needed.
        return round_half(e, helpers) if dt is DType.FLOAT16 and op not in (Op.MAX, Op.MIN) else e
    if dt.is_bool:
        if op in BOOL_BINARY:
            return BOOL_BINARY[op](a, b)
        raise KeyError(op)
    e, helper = INT_BINARY[op](dt, a, b)
    if helper:
        helpers.add(helper)
    return e


def compare(direction: str, a: Expr, b: Expr) -> Expr:
    return f"({a} {COMPARE[direction]} {b})"


_SAT = {DType.INT32: "convert_int_sat_rtz", DType.INT64: "convert_long_sat_rtz"}


def convert(x: Expr, src: DType, dst: DType, helpers: Helpers) -> Expr:
    """Element conversion: float->int saturates (NaN -> 0), anything->pred is != 0,
    ints wrap, f16 results are rounded once from the source value."""
    if src is dst:
        return x
    if dst is DType.BOOL:
        return f"({x} != 0)"
    if dst.is_int:
        if src.is_float:
            return f"{_SAT[dst]}({x})"
        return f"(({REG[dst]}){x})"
    # float destination
    if dst is DType.FLOAT16:
        if src is DType.FLOAT64:
            helpers.add("axle_rh_d")  # round once from double, as NumPy does
            return f"axle_rh_d({x})"
        # ints go through float (exact for |x| < 2^24, far beyond f16's range of exact ints)
        return round_half(x if src is DType.FLOAT32 else f"convert_float({x})", helpers)
    if dst is DType.FLOAT32:
        return x if src is DType.FLOAT16 else f"convert_float({x})"
    return f"convert_double({x})"
