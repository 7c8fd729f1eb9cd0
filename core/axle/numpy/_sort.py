"""Sorting and what is built on it: sort, argsort, searchsorted, the unique family,
median/quantile/percentile (and their nan variants), partition/argpartition.

Everything is the ``sort`` primitive (stable; NaN last, -0.0 equal to +0.0, as NumPy) plus
elementwise ops: an inverse permutation is a second sort keyed by the permutation, so no
scatter is needed, and positions a traced count decides are read by take_along_axis.
Results whose size depends on the values (unique) take a static ``size=`` under jit, as
jax does, or are computed from concrete inputs eagerly."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as _np

from .. import lax
from ..errors import ArgumentError
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, current_trace
from ..ir.dtypes import is_float_numpy as _is_float
from ._core import (
    ArrayLike,
    _fail,
    _is_array,
    _norm_axes,
    _norm_axis,
    add,
    asarray,
    astype,
    broadcast_to,
    equal,
    floor,
    floor_divide,
    greater,
    greater_equal,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    moveaxis,
    multiply,
    not_equal,
    reshape,
    subtract,
    sum,
    true_divide,
    where,
)
from ._index import take, take_along_axis
from ._math import isnan
from ._shape import concatenate

__all__ = [
    "sort", "argsort", "searchsorted", "unique", "unique_values", "unique_counts", "unique_inverse", "unique_all",
    "median", "quantile", "percentile", "nanmedian", "nanquantile", "nanpercentile", "partition", "argpartition",
]


# ------------------------------------------------------------------- sort, argsort


def _value(x: ArrayLike) -> Any:
    return x if _is_array(x) else asarray(x)


def _flat_or_axis(x: Any, axis: int | None, name: str) -> tuple[Any, int]:
    """(x, axis) with ``axis=None`` meaning the flattened array, as NumPy."""
    if axis is None:
        return reshape(x, (-1,)), 0
    if x.ndim == 0:
        raise _fail(name, f"axis {axis} is out of bounds for a 0-d array", x)
    return x, _norm_axis(axis, x.ndim, name, x)


def _check_sort_args(name: str, kind: Any, order: Any, stable: Any) -> None:
    if order is not None:
        raise ArgumentError(f"{name}: order= (structured arrays) is not supported", where=user_location())
    if stable is False:
        # NumPy allows an unstable sort; a stable one is a valid answer to it.
        return
    if kind not in (None, "stable", "mergesort", "quicksort", "heapsort"):
        raise ArgumentError(f"{name}: kind={kind!r} is not one of quicksort, mergesort, heapsort, stable",
                            where=user_location())


def sort(a: ArrayLike, axis: int | None = -1, *, kind: Any = None, order: Any = None, stable: Any = True,
         descending: bool = False) -> Any:
    """Sorted copy along ``axis`` (None: the flattened array). NaN sort last (first when
    ``descending``); the sort is always stable, so ``kind`` only picks NumPy's name."""
    _check_sort_args("sort", kind, order, stable)
    x, ax = _flat_or_axis(_value(a), axis, "sort")
    return lax.sort_one([x], ax, 1, descending, 0)


def argsort(a: ArrayLike, axis: int | None = -1, *, kind: Any = None, order: Any = None, stable: Any = True,
            descending: bool = False) -> Any:
    """int64 indices that sort ``a`` along ``axis`` (None: flattened), stable: equal
    elements keep their order, also when ``descending`` (as jnp.argsort)."""
    _check_sort_args("argsort", kind, order, stable)
    x, ax = _flat_or_axis(_value(a), axis, "argsort")
    return _argsort(x, ax, descending)


def _argsort(x: Any, ax: int, descending: bool = False) -> Any:
    return lax.sort_one([x, lax.iota(_np.int64, x.shape, ax)], ax, 1, descending, 1)


def _inverse(perm: Any, ax: int) -> Any:
    """The inverse permutation along ``ax``: a sort keyed by ``perm`` carrying an iota."""
    return lax.sort_one([perm, lax.iota(_np.int64, perm.shape, ax)], ax, 1, False, 1)


def _kth(kth: Any, n: int, name: str, x: Any) -> None:
    ks = _np.atleast_1d(_np.asarray(kth))
    if ks.dtype.kind not in "iu":
        raise ArgumentError(f"{name}: kth must be integers, got {kth!r}", where=user_location())
    if _np.any((ks < -n) | (ks >= n)):
        raise _fail(name, f"kth {kth!r} is out of bounds for an axis of length {n}", x)


def partition(a: ArrayLike, kth: Any, axis: int | None = -1) -> Any:
    """A partition of ``a`` around ``kth``: here a full (stable) sort, which is one."""
    x, ax = _flat_or_axis(_value(a), axis, "partition")
    _kth(kth, x.shape[ax], "partition", x)
    return lax.sort_one([x], ax, 1, False, 0)


def argpartition(a: ArrayLike, kth: Any, axis: int | None = -1) -> Any:
    """Indices partitioning ``a`` around ``kth``: here the stable argsort, which is one."""
    x, ax = _flat_or_axis(_value(a), axis, "argpartition")
    _kth(kth, x.shape[ax], "argpartition", x)
    return _argsort(x, ax)


# ------------------------------------------------------------------- searchsorted


def searchsorted(a: ArrayLike, v: ArrayLike, side: str = "left", sorter: ArrayLike = None) -> Any:
    """Insertion points of ``v`` into the sorted 1-D ``a`` (int64, v's shape), in NumPy's
    order (NaN last; -0.0 equal to +0.0). One merged stable sort of a and v, O((n + m)
    log(n + m)): a v element's position in it minus its rank among the v elements is the
    number of a elements before it."""
    if side not in ("left", "right"):
        raise ArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}", where=user_location())
    x = _value(a)
    if x.ndim != 1:
        raise _fail("searchsorted", "a must be 1-D", x)
    if sorter is not None:
        x = take(x, sorter)
    vv = _value(v)
    dt = _np.result_type(x.dtype, vv.dtype)
    x, vv = astype(x, dt), astype(vv, dt)
    n, shape = x.shape[0], vv.shape
    flat = reshape(vv, (-1,))
    m = flat.shape[0]
    if m == 0 or n == 0:
        return broadcast_to(_np.asarray(0, _np.int64), shape)
    keys = concatenate([x, flat])
    # ties: "left" puts v before equal a's (counts a < v), "right" after them (a <= v)
    a_tag, v_tag = (1, 0) if side == "left" else (0, 1)
    tag = asarray(_np.concatenate([_np.full(n, a_tag, _np.int32), _np.full(m, v_tag, _np.int32)]))
    merged = lax.sort_one([keys, tag, lax.iota(_np.int64, (n + m,), 0)], 0, 2, False, 2)
    pos = lax.slice(_inverse(merged, 0), (n,), (n + m,))
    rank = _inverse(_argsort(flat, 0), 0)
    return reshape(subtract(pos, rank), shape)


# ------------------------------------------------------------------------ unique


def _concrete(count: Any, name: str) -> int:
    """The value of a count the result's size depends on: only known for concrete data."""
    if isinstance(count, Tracer) or current_trace() is not None:
        raise ArgumentError(f"{name}: the result's size depends on the values, which are traced here; pass a "
                            f"static size= (and fill_value=) as jax does under jit", where=user_location())
    return int(_np.asarray(count))


class _Unique:
    """The pieces of a flattened unique: the stable sort, which sorted positions start a
    group of equal values, and their count."""

    def __init__(self, x: Any, equal_nan: bool) -> None:
        self.flat = reshape(x, (-1,))
        self.n = n = self.flat.shape[0]
        self.perm = _argsort(self.flat, 0)
        self.sorted = lax.sort_one([self.flat], 0, 1, False, 0)
        if n == 0:
            self.first = self.flat
            self.count: Any = _np.int64(0)
            return
        s = self.sorted
        head, tail = lax.slice(s, (1,), (n,)), lax.slice(s, (0,), (n - 1,))
        new = not_equal(head, tail)
        if equal_nan and _is_float(s.dtype):
            new = logical_and(new, logical_not(logical_and(isnan(head), isnan(tail))))
        self.first = concatenate([asarray(_np.ones(1, bool)), new])
        self.count = sum(self.first, dtype=_np.int64)

    def compact(self, values: Any) -> Any:
        """``values`` (in sorted order) at the group starts first, in order, then the rest."""
        not_first = lax.convert(logical_not(self.first), _np.int32)
        return lax.sort_one([not_first, values], 0, 1, False, 1)

    def starts(self) -> Any:
        """Sorted positions of the group starts, ascending, then n for the other entries."""
        k = lax.iota(_np.int64, (self.n,), 0)
        return where(lax.compare(k, broadcast_to(asarray_i64(self.count), (self.n,)), "lt"),
                     self.compact(k), _np.int64(self.n))

    def counts(self) -> Any:
        p = self.starts()
        nxt = concatenate([lax.slice(p, (1,), (self.n,)), asarray(_np.array([self.n], _np.int64))])
        return subtract(nxt, p)

    def inverse(self) -> Any:
        """For each element, its group's index: the group starts at or before its sorted
        position, minus one, sent back to original order by sorting on the permutation."""
        group = subtract(searchsorted(self.starts(), lax.iota(_np.int64, (self.n,), 0), side="right"),
                         _np.int64(1))
        return lax.sort_one([self.perm, group], 0, 1, False, 1)


def asarray_i64(v: Any) -> Any:
    return v if _is_array(v) else asarray(_np.asarray(v, _np.int64))


def _fit(values: Any, count: Any, size: int, fill: Any) -> Any:
    """``values`` cut or padded to ``size`` entries, those from ``count`` on set to ``fill``."""
    n = values.shape[0]
    if size <= n:
        out = lax.slice(values, (0,), (size,))
    else:
        pad = broadcast_to(astype(fill, values.dtype), (size - n,))
        out = concatenate([values, pad])
    keep = lax.compare(lax.iota(_np.int64, (size,), 0), broadcast_to(asarray_i64(count), (size,)), "lt")
    return where(keep, out, broadcast_to(astype(fill, values.dtype), (size,)))


def _unique(x: ArrayLike, *, want: Sequence[str], equal_nan: bool, size: Any, fill_value: Any,
            name: str) -> dict[str, Any]:
    u = _Unique(_value(x), equal_nan)
    if size is None:
        size = _concrete(u.count, name)
    elif isinstance(size, bool) or not isinstance(size, (int, _np.integer)) or size < 0:
        raise ArgumentError(f"{name}: size must be a non-negative int, got {size!r}", where=user_location())
    size = int(size)
    if u.n == 0:
        # nothing to pick from: every entry is the fill (NumPy and jax give empty results)
        fill = _np.asarray(0 if fill_value is None else fill_value)
        empty = {"values": broadcast_to(astype(asarray(fill), u.flat.dtype), (size,)),
                 "counts": broadcast_to(_np.int64(0), (size,)), "indices": broadcast_to(_np.int64(0), (size,)),
                 "inverse": reshape(astype(u.flat, _np.int64), _value(x).shape)}
        return {k: empty[k] for k in want}
    # jax's default fill: the smallest value
    fill = lax.slice(u.sorted, (0,), (1,)) if fill_value is None else _np.asarray(fill_value)
    fill = reshape(fill, ()) if _is_array(fill) else fill
    out: dict[str, Any] = {}
    for k in want:
        if k == "values":
            out[k] = _fit(u.compact(u.sorted), u.count, size, fill)
        elif k == "counts":
            out[k] = _fit(u.counts(), u.count, size, _np.int64(0))
        elif k == "indices":
            out[k] = _fit(u.compact(u.perm), u.count, size, _np.int64(0))
        else:
            out[k] = reshape(u.inverse(), _value(x).shape)
    return out


class UniqueCountsResult(NamedTuple):
    values: Any
    counts: Any


class UniqueInverseResult(NamedTuple):
    values: Any
    inverse_indices: Any


class UniqueAllResult(NamedTuple):
    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any


def unique_values(x: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The distinct values, sorted (array API: NaNs are distinct). ``size``: as jax."""
    return _unique(x, want=("values",), equal_nan=False, size=size, fill_value=fill_value,
                   name="unique_values")["values"]


def unique_counts(x: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> UniqueCountsResult:
    r = _unique(x, want=("values", "counts"), equal_nan=False, size=size, fill_value=fill_value,
                name="unique_counts")
    return UniqueCountsResult(r["values"], r["counts"])


def unique_inverse(x: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> UniqueInverseResult:
    r = _unique(x, want=("values", "inverse"), equal_nan=False, size=size, fill_value=fill_value,
                name="unique_inverse")
    return UniqueInverseResult(r["values"], r["inverse"])


def unique_all(x: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> UniqueAllResult:
    r = _unique(x, want=("values", "indices", "inverse", "counts"), equal_nan=False, size=size,
                fill_value=fill_value, name="unique_all")
    return UniqueAllResult(r["values"], r["indices"], r["inverse"], r["counts"])


def unique(ar: ArrayLike, return_index: bool = False, return_inverse: bool = False, return_counts: bool = False,
           axis: int | None = None, *, equal_nan: bool = True, size: int | None = None,
           fill_value: Any = None) -> Any:
    """np.unique over the flattened array (``axis`` must be None), with jax's static
    ``size``/``fill_value`` for use under jit."""
    if axis is not None:
        raise ArgumentError("unique: axis= is not supported; only the flattened array (axis=None)",
                            where=user_location())
    want = ["values"] + [k for k, on in (("indices", return_index), ("inverse", return_inverse),
                                         ("counts", return_counts)) if on]
    r = _unique(ar, want=want, equal_nan=equal_nan, size=size, fill_value=fill_value, name="unique")
    out = tuple(r[k] for k in want)
    return out[0] if len(out) == 1 else out


# -------------------------------------------------------------- median, quantile

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")
#: methods that pick one value of the data (no interpolation): the result keeps its dtype
_DISCRETE = ("lower", "higher", "nearest")


def _reduce_axes_last(x: Any, axis: Any, name: str) -> tuple[Any, tuple[int, ...]]:
    """x with the reduced axes moved last and merged into one, and those axes."""
    axes = _norm_axes(axis, x.ndim, name, x)
    if x.ndim == 0:
        return reshape(x, (1,)), ()
    keep = [i for i in range(x.ndim) if i not in axes]
    moved = lax.transpose(x, keep + list(axes)) if keep + list(axes) != list(range(x.ndim)) else x
    n = 1
    for a in axes:
        n *= x.shape[a]
    return reshape(moved, tuple(x.shape[i] for i in keep) + (n,)), axes


def _keepdims(out: Any, x: Any, axes: tuple[int, ...], qdims: int) -> Any:
    shape = tuple(out.shape[:qdims]) + tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return reshape(out, shape)


def _float_dtype(dt: _np.dtype) -> _np.dtype:
    return dt if _is_float(dt) else _np.dtype(_np.float64)


def _lerp(a: Any, b: Any, t: Any) -> Any:
    # NumPy's _lerp: exact at both ends, monotonic in t
    diff = subtract(b, a)
    return where(greater_equal(t, 0.5), subtract(b, multiply(diff, subtract(1.0, t))), add(a, multiply(diff, t)))


def _fraction_rule(method: str, lo: Any, t: Any) -> tuple[Any, Any]:
    """(index, weight of the next value) of a method, from the virtual index's floor ``lo``
    and fraction ``t`` (NumPy's definitions; 'nearest' rounds half to even)."""
    zero = multiply(t, 0.0)
    if method == "lower":
        return lo, zero
    if method == "higher":
        return where(greater(t, 0.0), add(lo, 1.0), lo), zero
    if method == "nearest":
        odd = not_equal(lax.rem(lo, broadcast_to(_np.asarray(2.0, lo.dtype), lo.shape)), 0.0)
        up = logical_or(greater(t, 0.5), logical_and(equal(t, 0.5), odd))
        return where(up, add(lo, 1.0), lo), zero
    if method == "midpoint":
        return lo, where(greater(t, 0.0), add(zero, 0.5), zero)
    return lo, t


def _row_has_nan(s: Any) -> Any:
    """Per row of the sorted ``s`` (last axis), whether it holds a NaN: NaN sort last."""
    n, batch = s.shape[-1], tuple(s.shape[:-1])
    return isnan(lax.slice(s, (0,) * len(batch) + (n - 1,), batch + (n,)))


def _q_dtype(xdt: _np.dtype, q: Any, percent: bool) -> _np.dtype:
    """The result dtype NumPy 2 gives: a Python number (and, for quantile, integer q) keeps
    the data's float dtype; float q arrays promote with it; integer percentiles are
    divided by 100 in float64 first."""
    if isinstance(q, (int, float)) and not isinstance(q, bool):
        return xdt
    qdt = q.dtype if _is_array(q) else _np.asarray(q).dtype
    if qdt.kind in "biu":
        return _np.dtype(_np.float64) if percent and not _is_array(q) else xdt
    return _np.result_type(xdt, qdt)


def _quantile(a: ArrayLike, q: ArrayLike, axis: Any, method: str, keepdims: bool, name: str,
              ignore_nan: bool, percent: bool = False) -> Any:
    if method not in _METHODS:
        raise ArgumentError(f"{name}: method={method!r} is not supported; use one of {_METHODS}",
                            where=user_location())
    x = _value(a)
    dt = _q_dtype(_float_dtype(x.dtype), q, percent)
    top = 100 if percent else 1
    if _is_array(q):
        qv = astype(q, dt)
        qv = true_divide(qv, 100.0) if percent else qv
    else:
        qa = _np.asarray(q, _np.float64)
        if _np.any(qa < 0) or _np.any(qa > top) or _np.any(_np.isnan(qa)):
            raise ArgumentError(f"{name}: {'percentiles' if percent else 'quantiles'} must be in the range "
                                f"[0, {top}], got {q!r}", where=user_location())
        qv = (qa / top).astype(dt)
    rows, axes = _reduce_axes_last(x, axis, name)
    n = rows.shape[-1]
    if n == 0:
        raise _fail(name, "cannot take a quantile of an empty axis", x)
    s = lax.sort_one([rows], rows.ndim - 1, 1, False, 0)  # (converting after sorting: the same order)
    batch = tuple(s.shape[:-1])
    qflat = reshape(astype(qv, _np.float64), (-1,))
    nq = qflat.shape[0]
    floats = _is_float(s.dtype)
    # the count of values each row ranks: n, or its non-NaN values (NaN sort last)
    nv = (sum(logical_not(isnan(s)), axis=-1, keepdims=True, dtype=_np.int64) if ignore_nan and floats
          else broadcast_to(_np.int64(n), batch + (1,)))
    last = astype(subtract(maximum(nv, 1), 1), _np.float64)  # index of the last ranked value
    g = multiply(broadcast_to(qflat, batch + (nq,)), last)  # the virtual index, in float64 as NumPy
    lo = floor(g)
    lo, t = _fraction_rule(method, lo, subtract(g, lo))
    lo_i = astype(lo, _np.int64)
    lo_v = take_along_axis(s, lo_i, axis=-1)
    if method in _DISCRETE:
        out = lo_v  # a value of the data, in its dtype (as NumPy)
        dt = x.dtype
    else:
        hi_v = take_along_axis(s, minimum(add(lo_i, 1), astype(last, _np.int64)), axis=-1)
        out = _lerp(astype(lo_v, dt), astype(hi_v, dt), astype(t, dt))
    if floats:
        empty = equal(nv, 0) if ignore_nan else _row_has_nan(s)  # a NaN anywhere gives NaN
        out = where(broadcast_to(empty, out.shape), _np.asarray(_np.nan, dt), out)
    out = moveaxis(out, -1, 0)  # the quantiles' dims come first, as NumPy
    qshape = tuple(qv.shape)
    out = reshape(out, qshape + batch)
    return _keepdims(out, x, axes, len(qshape)) if keepdims else out


def quantile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False) -> Any:
    """q-th quantiles (q in [0, 1]) along ``axis``, NumPy's methods linear (default), lower,
    higher, midpoint, nearest; a NaN in a row gives NaN."""
    _no_out("quantile", out)
    return _quantile(a, q, axis, method, keepdims, "quantile", ignore_nan=False)


def nanquantile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
                method: str = "linear", keepdims: bool = False) -> Any:
    """quantile ignoring NaN (an all-NaN row gives NaN)."""
    _no_out("nanquantile", out)
    return _quantile(a, q, axis, method, keepdims, "nanquantile", ignore_nan=True)


def percentile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
               method: str = "linear", keepdims: bool = False) -> Any:
    _no_out("percentile", out)
    return _quantile(a, q, axis, method, keepdims, "percentile", ignore_nan=False, percent=True)


def nanpercentile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
                  method: str = "linear", keepdims: bool = False) -> Any:
    _no_out("nanpercentile", out)
    return _quantile(a, q, axis, method, keepdims, "nanpercentile", ignore_nan=True, percent=True)


def _no_out(name: str, out: Any) -> None:
    if out is not None:
        raise ArgumentError(f"{name}: out= is not supported (axle arrays are immutable)", where=user_location())


def median(a: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Any:
    """The median along ``axis``: the middle value, or the mean of the two middle ones
    (as NumPy); a NaN in a row gives NaN."""
    _no_out("median", out)
    return _median(a, axis, keepdims, "median", ignore_nan=False)


def nanmedian(a: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
              keepdims: bool = False) -> Any:
    """median ignoring NaN (an all-NaN row gives NaN)."""
    _no_out("nanmedian", out)
    return _median(a, axis, keepdims, "nanmedian", ignore_nan=True)


def _median(a: ArrayLike, axis: Any, keepdims: bool, name: str, ignore_nan: bool) -> Any:
    x = _value(a)
    dt = _float_dtype(x.dtype)
    rows, axes = _reduce_axes_last(astype(x, dt), axis, name)
    n = rows.shape[-1]
    if n == 0:
        raise _fail(name, "cannot take the median of an empty axis", x)
    s = lax.sort_one([rows], rows.ndim - 1, 1, False, 0)
    batch = tuple(s.shape[:-1])
    nv = (sum(logical_not(isnan(s)), axis=-1, keepdims=True, dtype=_np.int64) if ignore_nan
          else broadcast_to(_np.int64(n), batch + (1,)))
    lo_i = floor_divide(maximum(subtract(nv, 1), 0), 2)
    hi_i = minimum(floor_divide(nv, 2), n - 1)
    lo_v, hi_v = take_along_axis(s, lo_i, axis=-1), take_along_axis(s, hi_i, axis=-1)
    # the middle value, or the mean of the two middle ones as NumPy's mean computes it
    mid = where(equal(lo_i, hi_i), lo_v, true_divide(add(lo_v, hi_v), 2.0))
    empty = equal(nv, 0) if ignore_nan else _row_has_nan(s)
    mid = reshape(where(empty, _np.asarray(_np.nan, dt), mid), batch)
    return _keepdims(mid, x, axes, 0) if keepdims else mid
