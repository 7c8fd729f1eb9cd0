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
from ..errors import ArgumentError
from ..frontend import checks
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, aval_of, constant_value
from ._core import (
    _basic_plan,
    _fail,
    _is_array,
    _is_basic_index,
    _norm_axis,
    _to_value,
    asarray,
    broadcast_shapes,
    broadcast_to,
    moveaxis,
    multiply,
    reshape,
    where,
)

ArrayLike = Any



def getitem(x: ArrayLike, idx: Any) -> Any:
    """NumPy indexing. Basic (integers, slices of any step, None, Ellipsis) becomes slice /
    reverse / reshape; integer-array and boolean-mask indices (advanced_getitem, below) become
    a one-hot gather, with static shapes."""
    x = asarray(x) if not _is_array(x) else x
    if not isinstance(idx, tuple):
        idx = (idx,)
    if not builtins.all(_is_basic_index(i) for i in idx):
        return advanced_getitem(x, idx)
    start, limit, stride, flips, out_shape = _basic_plan(x, idx)
    out = x
    if (tuple(start), tuple(limit), tuple(stride)) != ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        out = lax.slice(out, start, limit, stride)
    if flips:
        out = lax.reverse(out, flips)
    return reshape(out, out_shape)


def _static(i: Any) -> Any:
    """The index as NumPy data when its value is known (a constant captured while
    tracing counts), else None (a traced index)."""
    if isinstance(i, Tracer):
        return constant_value(i)
    if _is_array(i):
        return _np.asarray(i)
    return i if i is not None else _np.asarray(i)  # None as an index array: refused as a non-integer


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


def _normalize_traced(k: Any, n: int, op: str = "", x: Any = None, ax: int = 0) -> Any:
    """A traced index with negatives wrapped once, Python-style (-1 is the last); under
    --check_indices a flag records whether any is still outside [0, n)."""
    k = _to_value(k, _np.dtype(_np.int64))
    k = where(k < 0, k + n, k)
    if op and checks.enabled():
        checks.add_index_check((k < 0) | (k >= n), f"{op}: an index is out of range for axis {ax} of size {n} "
                               f"(operand {aval_of(x)}, indices {aval_of(k)})")
    return k


def _in_range(k: Any, n: int) -> Any:
    return (k >= 0) & (k < n)


def _clamped(k: Any, n: int) -> Any:
    """JAX's gather semantics: out-of-range (normalized) indices clamp to [0, n - 1]."""
    hi = _np.asarray(builtins.max(n - 1, 0), _np.int64)
    return lax.min(lax.max(k, _zeros(k.shape, _np.dtype(_np.int64))), broadcast_to(hi, k.shape))


def fill_value_for(dt: _np.dtype) -> Any:
    """JAX's fill for out-of-range gathers: nan, the most negative int, True."""
    if dt.kind == "f":
        return _np.asarray(_np.nan, dt)
    if dt.kind == "b":
        return _np.asarray(True)
    return _np.asarray(_np.iinfo(dt).min, dt)


def _static_indices(st: Any, n: int, op: str, x: Any, ax: int) -> _np.ndarray:
    """Concrete indices, checked now (NumPy raises for them), negatives wrapped."""
    k = _np.asarray(st)
    if k.dtype.kind not in "iu":
        raise _fail(op, f"indices must be integers, got {k.dtype}", x)
    if k.size and (k.min() < -n or k.max() >= n):
        bad = int(k.max()) if k.max() >= n else int(k.min())
        raise _fail(op, f"index {bad} is out of bounds for axis {ax} with size {n}", x)
    return _np.where(k < 0, k + n, k).astype(_np.int64)


_MODES = ("fill", "clip")


def take(x: ArrayLike, indices: ArrayLike, axis: int | None = None, mode: str | None = None,
         fill_value: Any = None) -> Any:
    """Elements of x at integer ``indices`` along ``axis`` (flattened when None).

    Concrete indices out of range raise, as in NumPy. Traced ones (inside jit) follow
    JAX: ``mode="fill"`` (the default) gives ``fill_value`` (nan, the most negative int,
    True) where an index is out of range, ``mode="clip"`` clamps it; negative indices in
    [-n, 0) count from the end in both."""
    x = asarray(x) if not _is_array(x) else x
    mode = mode or "fill"
    if mode not in _MODES:
        raise ArgumentError(f"take: mode must be one of {_MODES}, got {mode!r}", where=user_location())
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return _take_named("take", x, indices, axis, mode, fill_value)


def _take_named(op: str, x: Any, indices: Any, axis: int, mode: str, fill_value: Any = None) -> Any:
    """take on behalf of ``op`` (take, getitem), which its errors and checks name."""
    ax = _norm_axis(axis, x.ndim, op, x)
    n = x.shape[ax]
    st = _static(indices)
    valid = None
    if st is not None:
        k = _static_indices(st, n, op, x, ax)
    else:
        if indices.dtype.kind not in "iu":
            raise _fail(op, f"indices must be integers, got {indices.dtype}", x, indices)
        k = _normalize_traced(indices, n, op, x, ax)
        valid = _in_range(k, n) if mode == "fill" else None
        k = _clamped(k, n) if n else k
    moved = moveaxis(x, ax, 0) if ax else x
    out = _take0(moved, k)
    kd = _np.ndim(k) if not _is_array(k) else k.ndim
    if valid is not None:
        fill = fill_value_for(x.dtype) if fill_value is None else _np.asarray(fill_value).astype(x.dtype)
        mask = lax.broadcast_in_dim(valid, out.shape, tuple(range(kd)))
        out = lax.select(mask, out, broadcast_to(fill, out.shape))
    if ax:  # result dims: k dims, then the others; put the k dims back at position ax
        perm = list(range(kd, kd + ax)) + list(range(kd)) + list(range(kd + ax, out.ndim))
        out = lax.transpose(out, perm)
    return out


def take_along_axis(x: ArrayLike, indices: ArrayLike, axis: int = -1, mode: str | None = None,
                    fill_value: Any = None) -> Any:
    """out[..., i, ...] = x[..., indices[..., i, ...], ...] (same rank), as in NumPy.
    Out-of-range indices: as :func:`take` (concrete ones raise; traced ones fill or clip)."""
    x = asarray(x) if not _is_array(x) else x
    mode = mode or "fill"
    if mode not in _MODES:
        raise ArgumentError(f"take_along_axis: mode must be one of {_MODES}, got {mode!r}", where=user_location())
    ax = _norm_axis(axis, x.ndim, "take_along_axis", x)
    n = x.shape[ax]
    st = _static(indices)
    idx = asarray(_static_indices(st, n, "take_along_axis", x, ax)) if st is not None else indices
    if idx.dtype.kind not in "iu":
        raise _fail("take_along_axis", f"indices must be integers, got {idx.dtype}", x, idx)
    if idx.ndim != x.ndim:
        raise _fail("take_along_axis", f"indices must have the rank of the array ({x.ndim})", x, idx)
    try:
        other = broadcast_shapes(x.shape[:ax] + x.shape[ax + 1:], idx.shape[:ax] + idx.shape[ax + 1:])
    except ValueError:
        raise _fail("take_along_axis", "shapes cannot be broadcast together outside the axis", x, idx) from None
    shape = other[:ax] + (idx.shape[ax],) + other[ax:]
    k = _normalize_traced(idx, n, "take_along_axis" if st is None else "", x, ax)
    valid = _in_range(k, n) if st is None and mode == "fill" else None
    if st is None and n:
        k = _clamped(k, n)
    out = _take_along(x, broadcast_to(k, shape), ax, n, shape)
    if valid is not None:
        fill = fill_value_for(x.dtype) if fill_value is None else _np.asarray(fill_value).astype(x.dtype)
        out = lax.select(broadcast_to(valid, shape), out, broadcast_to(fill, shape))
    return out


def _take_along(x: Any, k: Any, ax: int, n: int, shape: tuple[int, ...]) -> Any:
    """The one-hot gather of take_along_axis for in-range indices k of the result's shape."""
    full = shape[:ax + 1] + (n,) + shape[ax + 1:]
    kb = lax.broadcast_in_dim(k, full, tuple(i for i in range(len(full)) if i != ax + 1))
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
        shown = ", ".join(repr(i) if not isinstance(i, _np.ndarray) else f"array of {i.dtype}{list(i.shape)}"
                          for i in static)
        raise _fail(what, f"bad index ({shown}): {e}", x) from None


def advanced_getitem(x: Any, idx: tuple) -> Any:
    traced = _traced_axis(x, idx)
    if traced is not None and traced[1].dtype == _np.bool_:
        raise _fail("getitem", "a traced boolean mask cannot index inside jit (the result's shape would depend "
                    "on traced values); use axle.numpy.where, or pass the mask as NumPy data", x, traced[1])
    if traced is not None:  # JAX's indexing: out-of-range traced indices clamp
        return _take_named("getitem", x, traced[1], traced[0], "clip")
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
        return getitem(self.x, self.idx)

    def set(self, v: ArrayLike) -> Any:
        return self._update(v, "set")

    def add(self, v: ArrayLike) -> Any:
        return self._update(v, "add")

    def multiply(self, v: ArrayLike) -> Any:
        return self.set(multiply(getitem(self.x, self.idx), v))

    def _update(self, v: ArrayLike, mode: str) -> Any:
        x = self.x
        idx = self.idx
        if builtins.all(_is_basic_index(i) for i in idx):
            return _update_basic(x, idx, v, mode)
        traced = _traced_axis(x, idx)
        if traced is not None and traced[0] == 0 and traced[1].ndim == 1:
            # JAX's scatter: out-of-range updates are dropped (no one-hot position matches)
            k = _normalize_traced(traced[1], x.shape[0], f"at[].{mode}", x)
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


__all__ = ["getitem", "take", "take_along_axis", "_AtIndexer", "advanced_getitem"]
