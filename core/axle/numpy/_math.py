"""Elementwise math and reductions built from primitives (decompositions, never new ops)."""
from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as _np

from .. import lax
from ..errors import ArgumentError
from ..frontend.source import user_location
from ..frontend.validate import finite_number
from ..ir.dtypes import is_float_numpy as _is_float
from ._core import (
    _fail,
    _finish,
    _float_result,
    _full_like_value,
    _is_array,
    _norm_axes,
    _norm_axis,
    _prepare,
    _reduce,
    asarray,
    astype,
    equal,
    exp,
    full,
    maximum,
    mean,
    multiply,
    not_equal,
    reshape,
    sqrt,
    subtract,
    sum,
    true_divide,
    where,
)
from ._core import abs as _abs
from ._elementwise import log1p

ArrayLike = Any


def _scalar(v: Any, like: Any) -> Any:
    return _full_like_value(like, v)


def square(x: ArrayLike) -> Any:
    return multiply(x, x)


def reciprocal(x: ArrayLike) -> Any:
    return true_divide(1.0, x)


def isnan(x: ArrayLike) -> Any:
    return not_equal(x, x)


def isinf(x: ArrayLike) -> Any:
    x = asarray(x) if not _is_array(x) else x
    if not _is_float(x.dtype):
        return full(x.shape, False, bool)
    return equal(lax.abs(x), _scalar(math.inf, x))


def var(x: ArrayLike, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False,
        _name: str = "var", *, correction: float | None = None) -> Any:
    """Two-pass variance (mean of squared deviations), numerically safer than E[x^2]-E[x]^2.
    ``correction`` is the array API standard's name for NumPy's ``ddof`` (give one)."""
    x = asarray(x) if not _is_array(x) else x
    if correction is not None:
        if ddof:
            raise ArgumentError(f"{_name}: give ddof or correction, not both", where=user_location())
        ddof = correction
    axes = _norm_axes(axis, x.ndim, _name, x)
    finite_number(ddof, _name, "ddof")
    dt = _np.dtype(dtype) if dtype is not None else (x.dtype if _is_float(x.dtype) else _np.dtype(_np.float64))
    xf = astype(x, dt)
    d = subtract(xf, mean(xf, axis=axes, keepdims=True))
    n = math.prod(x.shape[a] for a in axes) - ddof
    s = sum(multiply(d, d), axis=axes, keepdims=keepdims)
    return true_divide(s, _np.asarray(builtins.max(n, 0), dtype=dt))


def std(x: ArrayLike, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False, *,
        correction: float | None = None) -> Any:
    return sqrt(var(x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, _name="std", correction=correction))


def all(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    return _bool_reduce("and", "all", x, axis, keepdims)


def any(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    return _bool_reduce("or", "any", x, axis, keepdims)


def _bool_reduce(kind: str, name: str, x: ArrayLike, axis: Any, keepdims: bool) -> Any:
    x = asarray(x) if not _is_array(x) else x
    _norm_axes(axis, x.ndim, name, x)  # errors name x, not its bool copy
    return _reduce(kind, name, astype(x, bool), axis, keepdims)


def _arg_reduce(kind: str, name: str, x: ArrayLike, axis: Any, keepdims: bool) -> Any:
    """First index of the max/min (a NaN counts as the extreme, as in NumPy): reduce to
    the extreme, mark matching positions, then take the smallest marked index."""
    x = asarray(x) if not _is_array(x) else x
    if axis is None:
        flat = reshape(x, (-1,))
        out = _arg_reduce(kind, name, flat, 0, False)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    ax = _norm_axis(axis, x.ndim, name, x)
    n = x.shape[ax]
    if n == 0:
        raise _fail(name, "attempt to get argmax/argmin of an empty sequence", x)
    work = astype(x, _np.int32) if x.dtype == _np.bool_ else x
    ext = _reduce(kind, name, work, ax, True)
    hit = equal(work, ext)
    if _is_float(work.dtype):
        hit = hit | isnan(work)
    idx = lax.iota(_np.int64, work.shape, ax)
    cand = where(hit, idx, _np.asarray(n, _np.int64))
    return _reduce("min", name, cand, ax, keepdims)


def argmax(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    return _arg_reduce("max", "argmax", x, axis, keepdims)


def argmin(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    return _arg_reduce("min", "argmin", x, axis, keepdims)


def logaddexp(x: ArrayLike, y: ArrayLike) -> Any:
    """log(exp(x) + exp(y)) without overflow: max + log1p(exp(-|x - y|)). Where x == y
    (both +inf or both -inf included, where x - y would be nan) it is x + log(2), as in
    NumPy; a nan in either operand gives nan."""
    a, b = _prepare("logaddexp", x, y, dtype=_float_result(x, y))
    spread = maximum(a, b) + log1p(exp(-abs_(subtract(a, b))))
    same = lax.add(a, _scalar(math.log(2.0), a))
    return _finish(where(equal(a, b), same, spread), x, y)


def abs_(x: ArrayLike) -> Any:
    return _abs(x)


def _scan(x: Any, ax: int, op: Any, identity: Any) -> Any:
    """Inclusive scan along ``ax`` in ceil(log2 n) steps (Hillis-Steele): at step k every
    element combines with the one 2^k before it (the identity before the start). Each step
    is a pad and a slice, so infinities and NaNs stay where they are."""
    n = x.shape[ax]
    shift = 1
    ident = _np.asarray(identity, x.dtype)
    while shift < n:
        limit = list(x.shape)
        limit[ax] = n - shift
        low = [0] * x.ndim
        low[ax] = shift
        head = lax.slice(x, [0] * x.ndim, limit)
        prev = lax.pad(head, ident, low, [0] * x.ndim, [0] * x.ndim)
        x = op(x, prev)
        shift *= 2
    return x


def cumsum(x: ArrayLike, axis: int | None = None) -> Any:
    """Inclusive prefix sum along ``axis`` (flattened when None), a log-depth scan. (It was
    a triangular matmul, O(n^2) per row, where an infinity made every earlier sum nan.)"""
    x = asarray(x) if not _is_array(x) else x
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    ax = _norm_axis(axis, x.ndim, "cumsum", x)
    if x.dtype.kind in "biu" and x.dtype.itemsize < 8:
        x = astype(x, _np.uint64 if x.dtype.kind == "u" else _np.int64)
    return _scan(x, ax, lax.add, 0) if x.shape[ax] else x
