"""Advanced indexing and functional updates (``x.at[idx].set(v)``) on the ``gather`` and
``scatter`` primitives.

Basic indices (ints, slices of any step, None, Ellipsis) become slice / reverse / reshape;
outside a trace, one holding an int is a dynamic slice (an update: a dynamic update slice)
with its starts as data (see :func:`_starts_in_data`).
Integer arrays (NumPy data or traced), traced integer scalars and boolean masks (NumPy
data only: the result's shape depends on their values) follow NumPy's advanced indexing:
the index arrays broadcast together and their dims replace the indexed dims, in place when
the advanced indices are adjacent in the index, first otherwise; one ``gather`` reads the
result and one ``scatter`` writes an update, at O(result) cost (no one-hot).

Out-of-range indices: known ones (NumPy data, constants) raise as in NumPy. Traced ones
follow jax: a negative index counts from the end once; then reads (``x[i]``,
``.at[i].get()``) clamp into bounds, ``take``/``take_along_axis`` fill (nan, the most
negative int, True) or clip (``mode="clip"``), and updates (``.at[i].set/add/multiply/min/
max``) drop out-of-range entries. Duplicate indices in an update combine in index order:
``set`` keeps the last, ``add``/``multiply``/``min``/``max`` accumulate them all (as jax,
unlike NumPy's ``x[i] += v``). ``--check_indices`` turns a traced out-of-range index into
an error.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Any

import numpy as _np

from .. import lax
from ..errors import ArgumentError
from ..frontend import checks
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, aval_of, constant_value, current_trace
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
    maximum,
    minimum,
    multiply,
    reshape,
    where,
)

ArrayLike = Any
_I64 = _np.dtype(_np.int64)


def getitem(x: ArrayLike, idx: Any) -> Any:
    """NumPy indexing: basic indices are a slice / reverse / reshape; integer-array,
    traced-scalar and boolean-mask indices a gather (see the module docstring)."""
    x = asarray(x) if not _is_array(x) else x
    if not isinstance(idx, tuple):
        idx = (idx,)
    if not builtins.all(_is_basic_index(i) for i in idx):
        return advanced_getitem(x, idx)
    return _basic_getitem(x, idx)


def _basic_getitem(x: Any, idx: tuple) -> Any:
    start, limit, stride, flips, out_shape = _basic_plan(x, idx)
    if _starts_in_data(x, idx, stride, flips):
        sizes = [hi - lo for lo, hi in zip(start, limit)]
        return reshape(lax.dynamic_slice(x, [_np.int64(k) for k in start], sizes), out_shape)
    out = x
    if (tuple(start), tuple(limit), tuple(stride)) != ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        out = lax.slice(out, start, limit, stride)
    if flips:
        out = lax.reverse(out, flips)
    return reshape(out, out_shape)


def _starts_in_data(x: Any, idx: tuple, stride: list[int], flips: list[int]) -> bool:
    """Whether ``x[idx]`` takes its starts as operands (a dynamic slice) rather than as
    attributes: outside a trace, for an index holding an integer, as jax does. ``x[t]`` in
    a Python loop then runs one compiled slice for every ``t``, eagerly and in a lazy
    cluster (whose key would otherwise hold ``t``: one compile per value, see
    frontend/lazy.py). Traced code keeps static slices, which the optimizer folds."""
    return (current_trace() is None and not isinstance(x, Tracer) and x.size > 0 and not flips
            and builtins.all(s == 1 for s in stride)
            and builtins.any(isinstance(i, (int, _np.integer)) for i in idx))


def _static(i: Any) -> Any:
    """The index as NumPy data when its value is known (a constant captured while
    tracing counts), else None (a traced index)."""
    if isinstance(i, Tracer):
        return constant_value(i)
    if _is_array(i):
        return _np.asarray(i)
    return _np.asarray(i) if i is not None else _np.asarray(i)  # None as an index array: refused as a non-integer


def _normalize_traced(k: Any, n: int, op: str = "", x: Any = None, ax: int = 0) -> Any:
    """A traced index with negatives wrapped once, Python-style (-1 is the last); under
    --check_indices a flag records whether any is still outside [0, n)."""
    k = _to_value(k, _I64)
    k = where(k < 0, k + n, k)
    if op and checks.enabled():
        checks.add_index_check((k < 0) | (k >= n), f"{op}: an index is out of range for axis {ax} of size {n} "
                               f"(operand {aval_of(x)}, indices {aval_of(k)})")
    return k


def fill_value_for(dt: _np.dtype) -> Any:
    """JAX's fill for out-of-range gathers: nan, the most negative int, True."""
    return lax.fill_value_of(_np.dtype(dt))


def _static_indices(st: Any, n: int, op: str, x: Any, ax: int) -> _np.ndarray:
    """Concrete indices, checked now (NumPy raises for them), negatives wrapped."""
    k = _np.asarray(st)
    if k.dtype.kind not in "iu":
        raise _fail(op, f"indices must be integers, got {k.dtype}", x)
    if k.size and (k.min() < -n or k.max() >= n):
        bad = int(k.max()) if k.max() >= n else int(k.min())
        raise _fail(op, f"index {bad} is out of bounds for axis {ax} with size {n}", x)
    return _np.where(k < 0, k + n, k).astype(_np.int64)


def _indices_on_axis(op: str, x: Any, indices: Any, ax: int) -> tuple[Any, Any]:
    """(indices with negatives wrapped, known ones checked; whether each traced one is in
    range, None when they are known)."""
    n = x.shape[ax]
    st = _static(indices)
    if st is not None:
        return _static_indices(st, n, op, x, ax), None
    if indices.dtype.kind not in "iu":
        raise _fail(op, f"indices must be integers, got {indices.dtype}", x, indices)
    k = _normalize_traced(indices, n, op, x, ax)
    return k, (k >= 0) & (k < n)


def _shape_of(k: Any) -> tuple[int, ...]:
    return tuple(k.shape) if _is_array(k) else tuple(_np.shape(k))


def _gather_axis(x: Any, k: Any, ax: int) -> Any:
    """x[..., k, ...] along ``ax`` (k: int64 indices of any shape; out of range: clamped)."""
    kd = len(_shape_of(k))
    offsets = tuple(range(ax)) + tuple(range(ax + kd, x.ndim - 1 + kd))
    dn = lax.GatherDimensionNumbers(offset_dims=offsets, collapsed_slice_dims=(ax,), start_index_map=(ax,))
    sizes = tuple(1 if d == ax else s for d, s in enumerate(x.shape))
    k = k[..., None] if not _is_array(k) else reshape(k, _shape_of(k) + (1,))
    return lax.gather(x, k, dn, sizes, mode="clip")


_MODES = ("fill", "clip")


def _fill(x: Any, out: Any, valid: Any, fill_value: Any, kdims: tuple[int, ...]) -> Any:
    fill = fill_value_for(x.dtype) if fill_value is None else _np.asarray(fill_value).astype(x.dtype)
    mask = lax.broadcast_in_dim(valid, out.shape, kdims)
    return lax.select(mask, out, broadcast_to(fill, out.shape))


def take(x: ArrayLike, indices: ArrayLike, axis: int | None = None, mode: str | None = None,
         fill_value: Any = None) -> Any:
    """Elements of x at integer ``indices`` along ``axis`` (flattened when None): a gather.

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
    k, valid = _indices_on_axis(op, x, indices, ax)
    ks = _shape_of(k)
    shape = x.shape[:ax] + ks + x.shape[ax + 1:]
    if x.shape[ax] == 0:  # nothing to read: every (traced) index is out of range
        zero = broadcast_to(_np.asarray(0, x.dtype), shape)
        return zero if mode == "clip" else _fill(x, zero, broadcast_to(_np.asarray(False), ks), fill_value,
                                                 tuple(range(ax, ax + len(ks))))
    out = _gather_axis(x, k, ax)
    if valid is not None and mode == "fill":
        out = _fill(x, out, valid, fill_value, tuple(range(ax, ax + len(ks))))
    return out


def take_along_axis(x: ArrayLike, indices: ArrayLike, axis: int = -1, mode: str | None = None,
                    fill_value: Any = None) -> Any:
    """out[..., i, ...] = x[..., indices[..., i, ...], ...] (same rank), as in NumPy: a
    gather of single elements. Out-of-range indices: as :func:`take`."""
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
    k = broadcast_to(k, shape)
    if n == 0 or math.prod(shape) == 0:
        out = broadcast_to(_np.asarray(0, x.dtype), shape)
    else:
        xb = broadcast_to(x, shape[:ax] + (n,) + shape[ax + 1:])
        r = len(shape)
        pos = [k if d == ax else lax.iota(_np.int64, shape, d) for d in range(r)]
        vec = lax.concatenate([lax.reshape(p, shape + (1,)) for p in pos], r)
        dn = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=tuple(range(r)),
                                        start_index_map=tuple(range(r)))
        out = lax.gather(xb, vec, dn, (1,) * r, mode="clip")
    if st is None and mode == "fill":
        out = _fill(x, out, (k >= 0) & (k < n), fill_value, tuple(range(len(shape))))
    return out


# ------------------------------------------------------------- advanced indexing


def _traced_bool(i: Any) -> bool:
    return isinstance(i, Tracer) and constant_value(i) is None and i.dtype == _np.bool_


def _expand(x: Any, idx: tuple, what: str) -> tuple[Any, list[Any]]:
    """x with a size-1 axis for each None, and the index with Ellipsis expanded, each None
    a full slice and each boolean mask (NumPy data) its integer arrays (``nonzero``): one
    entry per dim of the x returned."""
    if builtins.sum(1 for i in idx if i is Ellipsis) > 1:
        raise _fail(what, "an index can only have a single ellipsis", x)
    for i in idx:
        if _traced_bool(i):
            raise _fail(what, "a traced boolean mask cannot index inside jit (the result's shape would depend "
                        "on traced values); use axle.numpy.where, or pass the mask as NumPy data", x, i)
    masks: dict[int, _np.ndarray] = {}  # position in idx -> a boolean mask given as data
    for n, i in enumerate(idx):
        k = None if _is_basic_index(i) else _static(i)
        if k is not None and k.dtype == _np.bool_:
            masks[n] = k
    consumed = builtins.sum((masks[n].ndim if n in masks else 1) for n, i in enumerate(idx)
                            if i is not None and i is not Ellipsis)
    if consumed > x.ndim:
        raise _fail(what, f"too many indices ({consumed}) for an array of rank {x.ndim}", x)
    full = builtins.slice(None)
    entries: list[Any] = []
    shape: list[int] = []
    dim = 0
    for n, i in enumerate(idx):
        if i is Ellipsis:
            rest = x.ndim - consumed
            entries += [full] * rest
            shape += list(x.shape[dim:dim + rest])
            dim += rest
        elif i is None:
            entries.append(full)
            shape.append(1)
        elif n in masks:
            m = masks[n]
            if m.shape != x.shape[dim:dim + m.ndim]:
                raise _fail(what, f"bad index: a boolean mask of shape {list(m.shape)} does not match the indexed "
                            f"dims {list(x.shape[dim:dim + m.ndim])}", x)
            entries += list(_np.nonzero(m)) if m.ndim else [_np.zeros(int(m), _np.int64)]
            if not m.ndim:  # a scalar bool: a new axis of size 1 (True) or 0 (False)
                shape.append(1)
                continue
            shape += list(x.shape[dim:dim + m.ndim])
            dim += m.ndim
        else:
            entries.append(i)
            shape.append(x.shape[dim])
            dim += 1
    entries += [full] * (x.ndim - dim)
    shape += list(x.shape[dim:])
    return (reshape(x, tuple(shape)) if tuple(shape) != x.shape else x), entries


@dataclass
class _Plan:
    """An advanced index on ``x`` (after _expand): the gather / scatter that applies it."""

    basic: tuple  # the slices (advanced entries replaced by full slices)
    axes: tuple[int, ...]  # the advanced dims, in index order
    indices: Any  # int64[S..., len(axes)]
    batch: tuple[int, ...]  # S, the broadcast shape of the index arrays
    at: int  # where S goes in the result
    sizes: tuple[int, ...]  # the sliced operand's shape

    @property
    def result(self) -> tuple[int, ...]:
        rest = [s for d, s in enumerate(self.sizes) if d not in self.axes]
        return tuple(rest[:self.at]) + self.batch + tuple(rest[self.at:])

    @property
    def window_dims(self) -> tuple[int, ...]:
        """The result dims that are not index (batch) dims."""
        nb = len(self.batch)
        return tuple(d for d in range(len(self.result)) if not self.at <= d < self.at + nb)


def _plan(x: Any, entries: list[Any], what: str) -> _Plan:
    adv = [d for d, i in enumerate(entries) if not isinstance(i, builtins.slice)]
    basic = tuple(builtins.slice(None) if d in adv else i for d, i in enumerate(entries))
    sizes = tuple(_basic_plan(x, basic)[4])
    ks = []
    for d in adv:
        i = entries[d]
        st = _static(i)
        if st is not None:
            if st.dtype.kind not in "iu":
                shown = repr(i) if st.ndim == 0 else f"an array of {st.dtype}{list(st.shape)}"
                raise _fail(what, f"bad index {shown}: only integers, slices, None, Ellipsis and integer or "
                            f"boolean arrays are valid indices", x)
            n = x.shape[d]
            if st.size and (st.min() < -n or st.max() >= n):
                bad = int(st.max()) if st.max() >= n else int(st.min())
                raise _fail(what, f"bad index: index {bad} is out of bounds for axis {d} with size {n}", x)
            ks.append(_np.where(st < 0, st + n, st).astype(_np.int64))
        else:
            if i.dtype.kind not in "iu":
                raise _fail(what, f"indices must be integers, got {i.dtype}", x, i)
            ks.append(_normalize_traced(i, x.shape[d], what, x, d))
    try:
        batch = broadcast_shapes(*[_shape_of(k) for k in ks])
    except ValueError:
        shapes = ", ".join(str(list(_shape_of(k))) for k in ks)
        raise _fail(what, f"bad index: the index arrays' shapes {shapes} cannot be broadcast together", x) from None
    at = adv[0] if adv == list(range(adv[0], adv[0] + len(adv))) else 0
    if builtins.all(not _is_array(k) for k in ks):
        vec: Any = _np.stack([_np.broadcast_to(k, batch) for k in ks], -1)
    else:
        cols = [reshape(broadcast_to(k, batch), batch + (1,)) for k in ks]
        vec = cols[0] if len(cols) == 1 else lax.concatenate(cols, len(batch))
    return _Plan(basic, tuple(adv), vec, tuple(batch), at, sizes)


def advanced_getitem(x: Any, idx: tuple) -> Any:
    x2, entries = _expand(x, idx, "getitem")
    plan = _plan(x2, entries, "getitem")
    y = _basic_getitem(x2, plan.basic)
    if math.prod(plan.result) == 0:
        return broadcast_to(_np.asarray(0, x.dtype), plan.result)
    empty = [d for d in plan.axes if y.shape[d] == 0]
    if empty:  # only traced indices get here: known ones were checked
        raise _fail("getitem", f"index out of bounds: axis {empty[0]} has size 0", x)
    dn = lax.GatherDimensionNumbers(offset_dims=plan.window_dims, collapsed_slice_dims=tuple(sorted(plan.axes)),
                                    start_index_map=plan.axes)
    sizes = tuple(1 if d in plan.axes else s for d, s in enumerate(y.shape))
    return lax.gather(y, plan.indices, dn, sizes, mode="clip")


#: .at[] method -> scatter kind
_SCATTER_KIND = {"set": "replace", "add": "add", "multiply": "mul", "min": "min", "max": "max"}
#: .at[] method -> the combine of a basic-index update (no duplicates: read, combine, write)
_COMBINE = {"multiply": multiply, "min": minimum, "max": maximum}


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
        return self._update(v, "multiply")

    mul = multiply

    def min(self, v: ArrayLike) -> Any:
        return self._update(v, "min")

    def max(self, v: ArrayLike) -> Any:
        return self._update(v, "max")

    def _update(self, v: ArrayLike, mode: str) -> Any:
        x = asarray(self.x) if not _is_array(self.x) else self.x
        idx = self.idx
        if builtins.all(_is_basic_index(i) for i in idx):
            if mode in _COMBINE:
                return _update_basic(x, idx, _COMBINE[mode](_basic_getitem(x, idx), v), "set")
            return _update_basic(x, idx, v, mode)
        what = f"at[].{mode}"
        x2, entries = _expand(x, idx, what)
        plan = _plan(x2, entries, what)
        if builtins.all(s == builtins.slice(None) for s in plan.basic):
            return reshape(_scatter(x2, plan, v, mode), x.shape)
        # slices too: update the sliced view, then write the view back (a bijection)
        y = _basic_getitem(x2, plan.basic)
        return reshape(_update_basic(x2, plan.basic, _scatter(y, plan, v, mode), "set"), x.shape)


def _scatter(y: Any, plan: _Plan, v: ArrayLike, mode: str) -> Any:
    vv = broadcast_to(_to_value(v, y.dtype), plan.result)
    dn = lax.ScatterDimensionNumbers(update_window_dims=plan.window_dims,
                                     inserted_window_dims=tuple(sorted(plan.axes)),
                                     scatter_dims_to_operand_dims=plan.axes)
    fn = {"replace": lax.scatter, "add": lax.scatter_add, "mul": lax.scatter_mul, "min": lax.scatter_min,
          "max": lax.scatter_max}[_SCATTER_KIND[mode]]
    return fn(y, plan.indices, vv, dn)


def _update_basic(x: Any, idx: tuple, v: ArrayLike, mode: str) -> Any:
    """Basic-index updates are a pad of the values into place: no gather needed."""
    start, limit, stride, flips, out_shape = _basic_plan(x, idx)
    sliced = tuple((l - s + st - 1) // st if l > s else 0 for s, l, st in zip(start, limit, stride))
    if 0 in sliced:
        return x
    vv = reshape(broadcast_to(_to_value(v, x.dtype), tuple(out_shape)), sliced)
    if _starts_in_data(x, idx, stride, flips):  # x[t] = v in a Python loop: one compile for every t
        return _update_in_data(x, vv, start, mode)
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


def _update_in_data(x: Any, vv: Any, start: list[int], mode: str) -> Any:
    """A basic-index update as a dynamic update slice whose starts are data (O(slice)
    work, where the pad and select of :func:`_update_basic` are O(x)); ``add`` reads the
    slice first (no duplicates in a basic index)."""
    starts = [_np.int64(k) for k in start]
    if mode == "add":
        old = lax.dynamic_slice(x, starts, vv.shape)
        vv = lax.or_(old, vv) if x.dtype == _np.bool_ else lax.add(old, vv)
    return lax.dynamic_update_slice(x, vv, starts)


class _AtIndexer:
    def __init__(self, x: Any) -> None:
        self.x = x

    def __getitem__(self, idx: Any) -> _AtRef:
        return _AtRef(self.x, idx)


__all__ = ["getitem", "take", "take_along_axis", "_AtIndexer", "advanced_getitem"]
