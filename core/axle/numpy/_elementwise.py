"""The elementwise functions of the array API standard (2024.12) and their NumPy names:
primitives where the IR has one (tan, expm1, log1p, cbrt, atan2, nextafter, rint, isfinite,
the bit operations), otherwise decompositions in the style of StableHLO's CHLO (asinh via
log1p for small |x|, acos via atan2, sinh via expm1...), written so that NaN, ±inf, ±0.0
and huge or tiny inputs give NumPy's results."""
from __future__ import annotations

import math
from typing import Any

import numpy as _np

from .. import lax
from ..errors import DTypeError
from ..frontend.source import user_location
from ..frontend.validate import finite_number
from ..ir.dtypes import is_float_numpy as _is_float
from ._core import (
    _binary,
    _check_int_or_bool,
    _finish,
    _float_result,
    _float_signbit,
    _full_like_value,
    _is_array,
    _prepare,
    _to_value,
    _unary_float,
    _unary_float_dtype,
    asarray,
    astype,
    full,
    maximum,
    minimum,
)

ArrayLike = Any


def _arr(x: ArrayLike) -> Any:
    return x if _is_array(x) else asarray(x)


def _c(v: float, like: Any) -> Any:
    """The scalar v in ``like``'s shape and dtype."""
    return _full_like_value(like, v)


# ------------------------------------------------------------------ primitives

tan = _unary_float(lax.tan, "tan")
expm1 = _unary_float(lax.expm1, "expm1")
log1p = _unary_float(lax.log1p, "log1p")
cbrt = _unary_float(lax.cbrt, "cbrt")
atan2 = _binary(lax.atan2, "atan2", _float_result)
arctan2 = atan2
nextafter = _binary(lax.next_after, "nextafter", _float_result)


def isfinite(x: ArrayLike) -> Any:
    x = _arr(x)
    if not _is_float(x.dtype):
        return full(x.shape, True, bool)
    return lax.is_finite(x)


def _float_or_same(x: ArrayLike) -> Any:
    x = _arr(x)
    return x, _is_float(x.dtype)


def round(x: ArrayLike, decimals: int = 0) -> Any:
    """Round half to even (NumPy's round/around/rint); integers with decimals >= 0 are
    returned as they are. decimals != 0 scales by 10**decimals first, as NumPy does."""
    finite_number(decimals, "round", "decimals")
    x, is_float = _float_or_same(x)
    if not is_float:
        if decimals >= 0:
            return x
        scale = 10 ** (-decimals)
        return lax.mul(_rint_div(x, scale), _c(scale, x))
    if decimals == 0:
        return _finish(lax.round_nearest_even(x), x)
    s = _c(10.0 ** abs(decimals), x)
    if decimals > 0:
        return _finish(lax.div(lax.round_nearest_even(lax.mul(x, s)), s), x)
    return _finish(lax.mul(lax.round_nearest_even(lax.div(x, s)), s), x)


def _rint_div(x: Any, scale: int) -> Any:
    """x / scale rounded half to even, for integers (NumPy's round with decimals < 0)."""
    xf = astype(x, _np.float64)
    return astype(lax.round_nearest_even(lax.div(xf, _c(float(scale), xf))), x.dtype)


around = round
rint = _unary_float(lax.round_nearest_even, "rint")


def trunc(x: ArrayLike) -> Any:
    """Toward zero; -0.5 gives -0.0 and NaN stays NaN as in NumPy; integers as they are."""
    x, is_float = _float_or_same(x)
    if not is_float:
        return x
    neg = lax.compare(x, _c(0, x), "lt")
    return _finish(lax.select(neg, lax.ceil(x), lax.floor(x)), x)


fix = trunc


# ------------------------------------------------------------------ sign bits


def signbit(x: ArrayLike) -> Any:
    """The sign bit (set for -0.0 and for negative NaNs, as NumPy); False for unsigned
    integers and bools."""
    x = _arr(x)
    if x.dtype.kind == "b":
        return full(x.shape, False, bool)
    if x.dtype.kind in "iu":
        return lax.compare(x, _c(0, x), "lt") if x.dtype.kind == "i" else full(x.shape, False, bool)
    return _float_signbit(x)


def copysign(x: ArrayLike, y: ArrayLike) -> Any:
    a, b = _prepare("copysign", x, y, dtype=_float_result(x, y))
    mag = lax.abs(a)
    return _finish(lax.select(signbit(b), lax.neg(mag), mag), x, y)


def _with_sign_of(r: Any, x: Any) -> Any:
    """r (non-negative or NaN) with x's sign."""
    return lax.select(signbit(x), lax.neg(r), r)


# ------------------------------------------------------------------ logs and hyperbolics

_LN2 = math.log(2.0)


def _log_scaled(name: str, scale: float) -> Any:
    def f(x: ArrayLike) -> Any:
        x = _arr(x)
        xf = _to_value(x, _unary_float_dtype(x.dtype))
        return _finish(lax.mul(lax.log(xf), _c(scale, xf)), x)

    f.__name__ = name
    return f


log2 = _log_scaled("log2", 1.0 / _LN2)
log10 = _log_scaled("log10", 1.0 / math.log(10.0))


def _float_value(x: ArrayLike) -> tuple[Any, Any]:
    x = _arr(x)
    return _to_value(x, _unary_float_dtype(x.dtype)), x


#: above this |x|, e^-|x| is below half an ulp of e^|x| in float64: sinh = cosh = e^|x|/2
_HYPERBOLIC_BIG = 22.0


def _half_exp(a: Any) -> Any:
    """e^a / 2 as (e^(a/2) / 2) * e^(a/2): finite up to the largest sinh/cosh, where e^a
    itself overflows (a/2 is exact)."""
    h = lax.exp(lax.mul(a, _c(0.5, a)))
    return lax.mul(lax.mul(h, _c(0.5, a)), h)


def sinh(x: ArrayLike) -> Any:
    """(e - 1/e)/2 from u = expm1(|x|) as (u + u/(u + 1))/2: no cancellation near 0."""
    xf, orig = _float_value(x)
    a = lax.abs(xf)
    u = lax.expm1(a)
    small = lax.mul(_c(0.5, a), lax.add(u, lax.div(u, lax.add(u, _c(1, a)))))
    r = lax.select(lax.compare(a, _c(_HYPERBOLIC_BIG, a), "lt"), small, _half_exp(a))
    return _finish(_with_sign_of(r, xf), orig)


def cosh(x: ArrayLike) -> Any:
    xf, orig = _float_value(x)
    a = lax.abs(xf)
    e = lax.exp(a)
    mid = lax.add(lax.mul(_c(0.5, a), e), lax.div(_c(0.5, a), e))
    return _finish(lax.select(lax.compare(a, _c(_HYPERBOLIC_BIG, a), "lt"), mid, _half_exp(a)), orig)


def _big(xf: Any) -> Any:
    """sqrt(largest finite): above it x*x overflows and asinh/acosh(x) = log(x) + log 2."""
    return _c(math.sqrt(float(_np.finfo(xf.dtype).max)), xf)


def asinh(x: ArrayLike) -> Any:
    """CHLO's form: log1p(a + a^2/(1 + sqrt(1 + a^2))) for a = |x|, log(a) + log 2 for
    huge a; the sign of x copied back (asinh(-0.0) = -0.0)."""
    xf, orig = _float_value(x)
    a = lax.abs(xf)
    a2 = lax.mul(a, a)
    mid = lax.log1p(lax.add(a, lax.div(a2, lax.add(_c(1, a), lax.sqrt(lax.add(_c(1, a), a2))))))
    huge = lax.add(lax.log(a), _c(_LN2, a))
    r = lax.select(lax.compare(a, _big(xf), "gt"), huge, mid)
    return _finish(_with_sign_of(r, xf), orig)


def acosh(x: ArrayLike) -> Any:
    """log1p(t + sqrt(t (t + 2))) with t = x - 1 (no cancellation near 1); log(x) + log 2
    for huge x; NaN below 1."""
    xf, orig = _float_value(x)
    t = lax.sub(xf, _c(1, xf))
    mid = lax.log1p(lax.add(t, lax.sqrt(lax.mul(t, lax.add(t, _c(2, xf))))))
    huge = lax.add(lax.log(xf), _c(_LN2, xf))
    r = lax.select(lax.compare(xf, _big(xf), "gt"), huge, mid)
    # below 1 t (t + 2) is negative, unless it overflows (x = -1e4 in float16)
    return _finish(lax.select(lax.compare(xf, _c(1, xf), "lt"), _c(math.nan, xf), r), orig)


def atanh(x: ArrayLike) -> Any:
    """log1p(2a / (1 - a)) / 2 for a = |x| (log1p's argument stays positive, where it is
    well conditioned), the sign of x copied back: ±inf at ±1, NaN beyond."""
    xf, orig = _float_value(x)
    a = lax.abs(xf)
    r = lax.mul(lax.log1p(lax.div(lax.add(a, a), lax.sub(_c(1, a), a))), _c(0.5, a))
    return _finish(_with_sign_of(r, xf), orig)


def atan(x: ArrayLike) -> Any:
    xf, orig = _float_value(x)
    return _finish(lax.atan2(xf, _c(1, xf)), orig)


def _one_minus_square(xf: Any) -> Any:
    return lax.mul(lax.sub(_c(1, xf), xf), lax.add(_c(1, xf), xf))  # (1-x)(1+x): exact near |x| = 1


def asin(x: ArrayLike) -> Any:
    """CHLO: 2 atan2(x, 1 + sqrt(1 - x^2))."""
    xf, orig = _float_value(x)
    d = lax.add(_c(1, xf), lax.sqrt(_one_minus_square(xf)))
    return _finish(lax.mul(_c(2, xf), lax.atan2(xf, d)), orig)


def acos(x: ArrayLike) -> Any:
    """CHLO: 2 atan2(sqrt(1 - x^2), 1 + x), and pi at x = -1 (where that is atan2(0, 0))."""
    xf, orig = _float_value(x)
    r = lax.mul(_c(2, xf), lax.atan2(lax.sqrt(_one_minus_square(xf)), lax.add(_c(1, xf), xf)))
    return _finish(lax.select(lax.compare(xf, _c(-1, xf), "eq"), _c(math.pi, xf), r), orig)


arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh


def hypot(x: ArrayLike, y: ArrayLike) -> Any:
    """m sqrt(1 + (n/m)^2) with m = max(|x|, |y|), n the other: no overflow or underflow
    of the squares; 0 for two zeros; inf if either is infinite, even beside a NaN."""
    a, b = (lax.abs(v) for v in _prepare("hypot", x, y, dtype=_float_result(x, y)))
    m, n = lax.max(a, b), lax.min(a, b)
    zero = lax.compare(m, _c(0, m), "eq")
    r = lax.div(n, lax.select(zero, _c(1, m), m))
    out = lax.select(zero, m, lax.mul(m, lax.sqrt(lax.add(_c(1, m), lax.mul(r, r)))))
    inf = lax.or_(lax.compare(a, _c(math.inf, a), "eq"), lax.compare(b, _c(math.inf, b), "eq"))
    return _finish(lax.select(inf, _c(math.inf, m), out), x, y)


# ------------------------------------------------------------------ logic and bits


def logical_xor(x: ArrayLike, y: ArrayLike) -> Any:
    a, b = _prepare("logical_xor", astype(_arr(x), bool), astype(_arr(y), bool))
    return lax.xor(a, b)


def bitwise_xor(x: ArrayLike, y: ArrayLike) -> Any:
    _check_int_or_bool("bitwise_xor", x, y)
    a, b = _prepare("bitwise_xor", x, y)
    return _finish(lax.xor(a, b), x, y)


def _shift(name: str, signed_op: Any, unsigned_op: Any) -> Any:
    def f(x: ArrayLike, y: ArrayLike) -> Any:
        _check_int_or_bool(name, x, y)
        a, b = _prepare(name, x, y)
        if a.dtype.kind == "b":
            raise DTypeError(f"{name}: needs integer operands, got bool arrays {a.shape}", where=user_location())
        op = signed_op if a.dtype.kind == "i" else unsigned_op
        return _finish(op(a, b), x, y)  # amounts >= the width: 0, or the sign fill (as NumPy)

    f.__name__ = name
    return f


bitwise_left_shift = _shift("bitwise_left_shift", lax.shift_left, lax.shift_left)
left_shift = bitwise_left_shift
bitwise_right_shift = _shift("bitwise_right_shift", lax.shift_right_arithmetic, lax.shift_right_logical)
right_shift = bitwise_right_shift


def bitwise_invert(x: ArrayLike) -> Any:
    _check_int_or_bool("bitwise_invert", x)
    return lax.not_(_arr(x))


bitwise_not = bitwise_invert


def bitwise_count(x: ArrayLike) -> Any:
    """Set bits of |x| (NumPy 2's bitwise_count), as uint8 in NumPy: here int32, axle
    having no uint8 yet."""
    _check_int_or_bool("bitwise_count", x)
    x = _arr(x)
    if x.dtype.kind == "b":
        return astype(x, _np.int32)
    return astype(lax.popcnt(lax.abs(x) if x.dtype.kind == "i" else x), _np.int32)


# ------------------------------------------------------------------ the rest


def positive(x: ArrayLike) -> Any:
    x = _arr(x)
    if x.dtype.kind == "b":
        raise DTypeError(f"positive: not defined for bool arrays (as in NumPy), got bool{list(x.shape)}",
                         where=user_location())
    return x


def pow(x: ArrayLike, y: ArrayLike) -> Any:
    a, b = _prepare("pow", x, y)
    return _finish(lax.pow(a, b), x, y)


def clip(x: ArrayLike, min: ArrayLike = None, max: ArrayLike = None, *,  # noqa: A002 - the standard's names
         a_min: ArrayLike = None, a_max: ArrayLike = None) -> Any:
    """min(max(x, min), max), the standard's names (NumPy's a_min/a_max accepted too); a
    NaN in x stays NaN. Where min > max the result is max, as in NumPy."""
    lo = min if min is not None else a_min
    hi = max if max is not None else a_max
    out = _arr(x)
    if lo is not None:
        out = maximum(out, lo)
    if hi is not None:
        out = minimum(out, hi)
    return out
