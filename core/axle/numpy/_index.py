"""Advanced indexing and functional updates (``x.at[idx].set(v)``).

The IR has no gather/scatter primitive, so both are one-hot decompositions along one axis:
``take`` compares the indices with an iota, selects and sums; ``scatter`` does the same the
other way round. Cost is O(indices x axis length), fine for the label / row selections
these are used for. Indices whose values are known (NumPy data, concrete arrays) are
resolved on the host with NumPy itself, so every NumPy indexing rule (mixed slices,
several index arrays, broadcasting, boolean masks, bounds errors) holds exactly; the
result then is a gather from the flattened array at static positions. Traced index arrays
(inside jit/grad) are supported for the common form ``x[idx]`` / ``x.at[idx]`` along the
first axis (or any axis via :func:`take`); their shape is static, their values are not.
"""
from __future__ import annotations

import builtins
from typing import Any

import numpy as _np

from .. import lax
from ..frontend.tracing import Tracer
from . import (_basic_plan, _fail, _is_array, _is_basic_index, _norm_axis, _to_value, asarray, broadcast_to, moveaxis,
               reshape, where)

ArrayLike = Any


def _static(i: Any) -> Any:
    """The index as NumPy data when its value is known, else None (a traced index)."""
    if isinstance(i, Tracer):
        return None
    if _is_array(i):
        return _np.asarray(i)
    return i


def _one_hot_axis0(k: Any, n: int) -> Any:
    """bool[k.shape + (n,)]: entry [..., j] is k[...] == j (negative k never matches)."""
    kv = asarray(k) if not _is_array(k) else k
    kv = _to_value(kv, _np.dtype(_np.int64))
    shape = tuple(kv.shape) + (n,)
    kb = lax.broadcast_in_dim(kv, shape, tuple(range(kv.ndim)))
    return lax.compare(kb, lax.iota(_np.int64, shape, len(shape) - 1), "eq")


def _zeros(shape: tuple[int, ...], dt: _np.dtype) -> Any:
    return broadcast_to(_np.asarray(0, dt), shape)


def _take0(x: Any, k: Any) -> Any:
    """x[k] for x of shape (n, *rest) and integer k of any shape (in range, static or traced)."""
    n, rest = x.shape[0], x.shape[1:]
    ks = tuple(_np.shape(k)) if not _is_array(k) else k.shape
    oh = _one_hot_axis0(k, n)
    full = ks + (n,) + rest
    ohf = lax.broadcast_in_dim(oh, full, tuple(range(len(ks) + 1)))
    xf = lax.broadcast_in_dim(x, full, tuple(range(len(ks), len(full))))
    picked = lax.select(ohf, xf, _zeros(full, x.dtype))
    kind = "or" if x.dtype == _np.bool_ else "sum"
    return lax.reduce(picked, kind, (len(ks),))


def _scatter0(x: Any, k: Any, v: Any, mode: str) -> Any:
    """x with rows k (shape (m,)) set to / increased by v (shape (m, *rest)); a negative
    k means 'no update' (used to drop overwritten duplicates)."""
    n, rest = x.shape[0], x.shape[1:]
    m = _np.shape(k)[0] if not _is_array(k) else k.shape[0]
    oh = _one_hot_axis0(k, n)  # (m, n)
    full = (m, n) + rest
    ohf = lax.broadcast_in_dim(oh, full, (0, 1))
    vf = lax.broadcast_in_dim(v, full, (0,) + tuple(range(2, len(full))))
    kind = "or" if x.dtype == _np.bool_ else "sum"
    contrib = lax.reduce(lax.select(ohf, vf, _zeros(full, x.dtype)), kind, (0,))
    if mode == "add":
        return lax.or_(x, contrib) if x.dtype == _np.bool_ else lax.add(x, contrib)
    hit = lax.reduce(lax.broadcast_in_dim(oh, full, (0, 1)), "or", (0,))
    return lax.select(hit, contrib, x)


def _normalize_traced(k: Any, n: int) -> Any:
    k = _to_value(k, _np.dtype(_np.int64))
    return where(k < 0, k + n, k)


def take(x: ArrayLike, indices: ArrayLike, axis: int | None = None) -> Any:
    """Elements of x at integer ``indices`` along ``axis`` (flattened when None)."""
    x = asarray(x) if not _is_array(x) else x
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    ax = _norm_axis(axis, x.ndim, "take", x)
    n = x.shape[ax]
    st = _static(indices)
    if st is not None:
        k = _np.asarray(st)
        if k.dtype.kind not in "iu":
            raise _fail("take", f"indices must be integers, got {k.dtype}", x)
        if k.size and (k.min() < -n or k.max() >= n):
            raise _fail("take", f"index out of bounds for axis {ax} with size {n}", x)
        k = _np.where(k < 0, k + n, k).astype(_np.int64)
    else:
        if indices.dtype.kind not in "iu":
            raise _fail("take", f"indices must be integers, got {indices.dtype}", x, indices)
        k = _normalize_traced(indices, n)
    moved = moveaxis(x, ax, 0) if ax else x
    out = _take0(moved, k)
    kd = _np.ndim(k) if not _is_array(k) else k.ndim
    if ax:  # result dims: k dims, then the others; put the k dims back at position ax
        perm = list(range(kd, kd + ax)) + list(range(kd)) + list(range(kd + ax, out.ndim))
        out = lax.transpose(out, perm)
    return out


def take_along_axis(x: ArrayLike, indices: ArrayLike, axis: int) -> Any:
    """out[..., i, ...] = x[..., indices[..., i, ...], ...] (same rank), as in NumPy."""
    x = asarray(x) if not _is_array(x) else x
    ax = _norm_axis(axis, x.ndim, "take_along_axis", x)
    idx = asarray(indices) if not _is_array(indices) else indices
    n = x.shape[ax]
    k = _normalize_traced(idx, n)
    shape = tuple(builtins.max(a, b) if i != ax else b for i, (a, b) in enumerate(zip(x.shape, idx.shape)))
    full = shape[:ax + 1] + (n,) + shape[ax + 1:]
    kb = lax.broadcast_in_dim(broadcast_to(k, shape), full, tuple(i for i in range(len(full)) if i != ax + 1))
    oh = lax.compare(kb, lax.iota(_np.int64, full, ax + 1), "eq")
    xb_shape = shape[:ax] + (n,) + shape[ax + 1:]
    xb = broadcast_to(x, xb_shape)
    xf = lax.broadcast_in_dim(xb, full, tuple(i for i in range(len(full)) if i != ax))
    kind = "or" if x.dtype == _np.bool_ else "sum"
    return lax.reduce(lax.select(oh, xf, _zeros(full, x.dtype)), kind, (ax + 1,))


def _traced_axis(x: Any, idx: tuple) -> tuple[int, Any] | None:
    """(axis, index) when idx is one traced integer array, other entries full slices."""
    arrays = [k for k, i in enumerate(idx) if isinstance(i, Tracer)]
    if len(arrays) != 1:
        return None
    k = arrays[0]
    rest = idx[:k] + idx[k + 1:]
    if builtins.any(not (isinstance(i, builtins.slice) and i == builtins.slice(None)) for i in rest):
        return None
    return k, idx[k]


def _positions(x: Any, idx: tuple, what: str) -> _np.ndarray:
    """Flat positions selected by a static index, computed by NumPy itself."""
    static = tuple(_static(i) for i in idx)
    try:
        return _np.arange(x.size, dtype=_np.int64).reshape(x.shape)[static]
    except (IndexError, TypeError, ValueError) as e:
        raise _fail(what, f"bad index: {e}", x) from None


def advanced_getitem(x: Any, idx: tuple) -> Any:
    traced = _traced_axis(x, idx)
    if traced is not None:
        return take(x, traced[1], axis=traced[0])
    if builtins.any(isinstance(i, Tracer) for i in idx):
        bad = next(i for i in idx if isinstance(i, Tracer))
        raise _fail("getitem", "a traced index array must be the only array in the index, with the other "
                    "entries full slices; boolean masks need concrete values (their result shape depends "
                    "on them)", x, bad)
    pos = _positions(x, idx, "getitem")
    return _take0(reshape(x, (-1,)), pos)


class _AtRef:
    """``x.at[idx]``: functional updates returning a new array (x itself never changes)."""

    def __init__(self, x: Any, idx: Any) -> None:
        self.x = x
        self.idx = idx if isinstance(idx, tuple) else (idx,)

    def get(self) -> Any:
        from . import getitem

        return getitem(self.x, self.idx)

    def set(self, v: ArrayLike) -> Any:
        return self._update(v, "set")

    def add(self, v: ArrayLike) -> Any:
        return self._update(v, "add")

    def multiply(self, v: ArrayLike) -> Any:
        from . import getitem, multiply

        return self.set(multiply(getitem(self.x, self.idx), v))

    def _update(self, v: ArrayLike, mode: str) -> Any:
        x = self.x
        idx = self.idx
        if builtins.all(_is_basic_index(i) for i in idx):
            return _update_basic(x, idx, v, mode)
        traced = _traced_axis(x, idx)
        if traced is not None and traced[0] == 0 and traced[1].ndim == 1:
            k = _normalize_traced(traced[1], x.shape[0])
            vv = broadcast_to(_to_value(v, x.dtype), (k.shape[0],) + x.shape[1:])
            return _scatter0(x, k, vv, mode)
        if builtins.any(isinstance(i, Tracer) for i in idx):
            raise _fail(f"at[].{mode}", "a traced index must be one 1-D integer array on the first axis", x)
        pos = _positions(x, idx, f"at[].{mode}")
        vv = reshape(broadcast_to(_to_value(v, x.dtype), pos.shape), (-1,))
        flat = pos.reshape(-1)
        if mode == "set":  # the last write wins, as in NumPy's x[idx] = v
            last = _np.full(x.size, -1, _np.int64)
            last[flat] = _np.arange(flat.size)
            flat = _np.where(last[flat] == _np.arange(flat.size), flat, -1)
        return reshape(_scatter0(reshape(x, (-1,)), flat, vv, mode), x.shape)


def _update_basic(x: Any, idx: tuple, v: ArrayLike, mode: str) -> Any:
    """Basic-index updates are a pad of the values into place: no one-hot needed."""
    start, limit, stride, flips, out_shape = _basic_plan(x, idx)
    sliced = tuple((l - s + st - 1) // st if l > s else 0 for s, l, st in zip(start, limit, stride))
    if 0 in sliced:
        return x
    vv = reshape(broadcast_to(_to_value(v, x.dtype), tuple(out_shape)), sliced)
    if flips:
        vv = lax.reverse(vv, flips)
    high = [n - (s + (c - 1) * st + 1) for n, s, c, st in zip(x.shape, start, sliced, stride)]
    interior = [st - 1 for st in stride]
    if mode == "add":
        if x.dtype == _np.bool_:
            return lax.or_(x, lax.pad(vv, _np.asarray(False), start, high, interior))
        return lax.add(x, lax.pad(vv, _np.asarray(0, x.dtype), start, high, interior))
    placed = lax.pad(vv, _np.asarray(0, x.dtype), start, high, interior)
    mask = lax.pad(broadcast_to(_np.asarray(True), sliced), _np.asarray(False), start, high, interior)
    return lax.select(mask, placed, x)


class _AtIndexer:
    def __init__(self, x: Any) -> None:
        self.x = x

    def __getitem__(self, idx: Any) -> _AtRef:
        return _AtRef(self.x, idx)


__all__ = ["take", "take_along_axis", "_AtIndexer", "advanced_getitem"]
