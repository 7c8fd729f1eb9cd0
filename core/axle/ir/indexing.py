"""Shape rules and NumPy references of the indexing primitives: ``gather``, ``scatter``,
``dynamic-slice`` and ``dynamic-update-slice``.

Semantics follow StableHLO (without its batching dimensions), made exact where StableHLO
leaves a choice, so that every backend can match the reference bit for bit:

- gather and dynamic-slice **clamp** each start index so the whole slice is in bounds
  (``start = clamp(start, 0, dim - size)``), as StableHLO does;
- scatter **drops** an update window whose clamped-free start is out of bounds
  (``start < 0`` or ``start + window > dim`` in any operand dim), as jax's default scatter
  mode does, and dynamic-update-slice clamps its start like dynamic-slice;
- scatter applies the updates in row-major order of the scatter (index) dims, so duplicate
  indices combine in that order: the last update wins for ``replace``, and a floating-point
  ``add`` sums in that order. Backends may parallelize over the update window, never across
  the updates of one window position.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import DTypeError, ShapeError
from .opcodes import Op
from .reductions import maximum, minimum
from .types import Shape, TensorType

#: scatter's combiners: how an update meets the value already at its position
SCATTER_KINDS = ("replace", "add", "mul", "min", "max")


def _err(op: Op, ts: Sequence[TensorType], why: str) -> ShapeError:
    return ShapeError(f"{op.value}: {why} (operands: {', '.join(str(t) for t in ts)})")


def _check_dims(op: Op, ts: Sequence[TensorType], dims: Sequence[int], rank: int, what: str,
                *, ordered: bool = False) -> None:
    if any(d < 0 or d >= rank for d in dims) or len(set(dims)) != len(dims):
        raise _err(op, ts, f"{what} {tuple(dims)} must be distinct and in [0, {rank})")
    if ordered and list(dims) != sorted(dims):
        raise _err(op, ts, f"{what} {tuple(dims)} must be sorted ascending")


def _index_dtype(op: Op, ts: Sequence[TensorType], t: TensorType, what: str) -> None:
    if not t.dtype.is_int:
        raise DTypeError(f"{op.value}: {what} must have an integer dtype, got {t} "
                         f"(operands: {', '.join(str(x) for x in ts)})")


def _index_batch_shape(op: Op, ts: Sequence[TensorType], indices: TensorType, index_vector_dim: int,
                       n_index: int) -> Shape:
    """The batch shape of an indices array (its shape without ``index_vector_dim``), after
    checking that the index vectors have ``n_index`` entries."""
    if not 0 <= index_vector_dim <= indices.rank:
        raise _err(op, ts, f"index_vector_dim {index_vector_dim} must be in [0, {indices.rank}]")
    vec = 1 if index_vector_dim == indices.rank else indices.shape[index_vector_dim]
    if vec != n_index:
        raise _err(op, ts, f"index vectors have {vec} entries (dim {index_vector_dim} of the indices) but "
                           f"{n_index} operand dims are indexed")
    return tuple(d for i, d in enumerate(indices.shape) if i != index_vector_dim)


# ---------------------------------------------------------------------------- gather


def gather_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    operand, indices = ts
    offset_dims, collapsed = attrs["offset_dims"], attrs["collapsed_slice_dims"]
    start_index_map, ivd = attrs["start_index_map"], attrs["index_vector_dim"]
    slice_sizes = attrs["slice_sizes"]
    _index_dtype(op, ts, indices, "start indices")
    if len(slice_sizes) != operand.rank:
        raise _err(op, ts, f"slice_sizes {slice_sizes} must give one size per operand dim ({operand.rank})")
    for d, (s, n) in enumerate(zip(slice_sizes, operand.shape)):
        if not 0 <= s <= n:
            raise _err(op, ts, f"slice_sizes[{d}] = {s} must be in [0, {n}]")
    _check_dims(op, ts, collapsed, operand.rank, "collapsed_slice_dims", ordered=True)
    for d in collapsed:
        if slice_sizes[d] != 1:
            raise _err(op, ts, f"collapsed dim {d} has slice size {slice_sizes[d]}; it must be 1")
    _check_dims(op, ts, start_index_map, operand.rank, "start_index_map")
    batch = _index_batch_shape(op, ts, indices, ivd, len(start_index_map))
    offsets = [s for d, s in enumerate(slice_sizes) if d not in collapsed]
    rank = len(batch) + len(offsets)
    if len(offset_dims) != len(offsets):
        raise _err(op, ts, f"offset_dims {offset_dims} must name {len(offsets)} result dims (one per "
                           f"operand dim not collapsed)")
    _check_dims(op, ts, offset_dims, rank, "offset_dims", ordered=True)
    out, bi, oi = [], iter(batch), iter(offsets)
    for d in range(rank):
        out.append(next(oi) if d in offset_dims else next(bi))
    return tuple(out)


def _start_vectors(indices: np.ndarray, ivd: int) -> np.ndarray:
    """The index vectors as an int64 [batch..., k] array (k on the last axis)."""
    idx = indices.astype(np.int64)
    if ivd == idx.ndim:
        return idx[..., None]
    return np.moveaxis(idx, ivd, -1)


def gather(operand: np.ndarray, indices: np.ndarray, *, offset_dims: tuple[int, ...],
           collapsed_slice_dims: tuple[int, ...], start_index_map: tuple[int, ...], index_vector_dim: int,
           slice_sizes: tuple[int, ...]) -> np.ndarray:
    vec = _start_vectors(indices, index_vector_dim)  # [batch..., k]
    batch_shape = vec.shape[:-1]
    starts = np.zeros(batch_shape + (operand.ndim,), np.int64)
    for k, d in enumerate(start_index_map):
        starts[..., d] = vec[..., k]
    hi = np.array([n - s for n, s in zip(operand.shape, slice_sizes)], np.int64)
    starts = np.clip(starts, 0, hi)
    # operand index of (batch b, window w) = starts[b] + w, as one advanced index
    nb, window = len(batch_shape), tuple(slice_sizes)
    picks = []
    for d in range(operand.ndim):
        w = np.arange(window[d]).reshape((1,) * nb + tuple(-1 if e == d else 1 for e in range(operand.ndim)))
        picks.append(starts[..., d].reshape(batch_shape + (1,) * operand.ndim) + w)
    empty = math.prod(batch_shape + window) == 0
    got = np.zeros(batch_shape + window, operand.dtype) if empty else operand[tuple(picks)]
    got = got.reshape(batch_shape + tuple(s for d, s in enumerate(window) if d not in collapsed_slice_dims))
    # got is [batch..., offsets...]: move the offsets to offset_dims
    src = list(range(nb, got.ndim))
    return np.moveaxis(got, src, list(offset_dims)).copy()


# --------------------------------------------------------------------------- scatter


def scatter_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    operand, indices, updates = ts
    window_dims, inserted = attrs["update_window_dims"], attrs["inserted_window_dims"]
    to_operand, ivd = attrs["scatter_dims_to_operand_dims"], attrs["index_vector_dim"]
    _index_dtype(op, ts, indices, "scatter indices")
    if updates.dtype is not operand.dtype:
        raise DTypeError(f"{op.value}: updates must have the operand's dtype (operands: "
                         f"{', '.join(str(t) for t in ts)})")
    _check_dims(op, ts, window_dims, updates.rank, "update_window_dims", ordered=True)
    _check_dims(op, ts, inserted, operand.rank, "inserted_window_dims", ordered=True)
    if len(window_dims) + len(inserted) != operand.rank:
        raise _err(op, ts, f"update_window_dims {window_dims} and inserted_window_dims {inserted} must "
                           f"together cover the operand's {operand.rank} dims")
    _check_dims(op, ts, to_operand, operand.rank, "scatter_dims_to_operand_dims")
    batch = _index_batch_shape(op, ts, indices, ivd, len(to_operand))
    scatter_dims = [d for d in range(updates.rank) if d not in window_dims]
    if tuple(updates.shape[d] for d in scatter_dims) != batch:
        raise _err(op, ts, f"the update scatter dims {tuple(scatter_dims)} must have the indices' batch "
                           f"shape {list(batch)}")
    kept = [d for d in range(operand.rank) if d not in inserted]
    for wd, od in zip(window_dims, kept):
        if updates.shape[wd] > operand.shape[od]:
            raise _err(op, ts, f"update window dim {wd} (size {updates.shape[wd]}) is larger than operand "
                               f"dim {od} (size {operand.shape[od]})")
    return operand.shape


_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "replace": lambda old, new: new,
    "add": np.add,
    "mul": np.multiply,
    "min": minimum,
    "max": maximum,
}


def scatter(operand: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, update_window_dims: tuple[int, ...],
            inserted_window_dims: tuple[int, ...], scatter_dims_to_operand_dims: tuple[int, ...],
            index_vector_dim: int, kind: str) -> np.ndarray:
    out = operand.copy()
    vec = _start_vectors(indices, index_vector_dim)
    batch_shape = vec.shape[:-1]
    scatter_dims = [d for d in range(updates.ndim) if d not in update_window_dims]
    # updates as [batch..., window...], the window in operand order with inserted dims of size 1
    upd = np.moveaxis(updates, scatter_dims, list(range(len(scatter_dims))))
    window = [1] * operand.ndim
    kept = [d for d in range(operand.ndim) if d not in inserted_window_dims]
    for wd, od in zip(update_window_dims, kept):
        window[od] = updates.shape[wd]
    upd = upd.reshape(batch_shape + tuple(window))
    combine = _COMBINE[kind]
    # explicit counts: with no index entries (k = 0) or no updates, -1 would be ambiguous
    flat_vec = vec.reshape(math.prod(batch_shape), vec.shape[-1])
    flat_upd = upd.reshape((math.prod(batch_shape),) + tuple(window))
    for b in range(flat_vec.shape[0]):
        start = [0] * operand.ndim
        for k, d in enumerate(scatter_dims_to_operand_dims):
            start[d] = int(flat_vec[b, k])
        if any(s < 0 or s + w > n for s, w, n in zip(start, window, operand.shape)):
            continue  # an out-of-bounds window is dropped
        region = tuple(slice(s, s + w) for s, w in zip(start, window))
        out[region] = np.asarray(combine(out[region], flat_upd[b])).astype(out.dtype, copy=False)
    return out


# ----------------------------------------------------------------- dynamic slices


def _dynamic_starts(op: Op, ts: Sequence[TensorType], operand: TensorType, starts: Sequence[TensorType]) -> None:
    if len(starts) != operand.rank:
        raise _err(op, ts, f"needs one start index per operand dim ({operand.rank}), got {len(starts)}")
    for t in starts:
        if t.rank != 0 or not t.dtype.is_int:
            raise DTypeError(f"{op.value}: start indices must be integer scalars, got {t} "
                             f"(operands: {', '.join(str(x) for x in ts)})")


def dynamic_slice_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    operand, *starts = ts
    sizes = attrs["slice_sizes"]
    _dynamic_starts(op, ts, operand, starts)
    if len(sizes) != operand.rank or any(not 0 <= s <= n for s, n in zip(sizes, operand.shape)):
        raise _err(op, ts, f"slice_sizes {sizes} must give one size in [0, dim] per operand dim")
    return tuple(sizes)


def clamped_starts(starts: Sequence[Any], shape: Sequence[int], sizes: Sequence[int]) -> list[int]:
    """The start indices clamped so that a window of ``sizes`` fits in ``shape``."""
    return [min(max(int(np.asarray(s).astype(np.int64)), 0), n - z) for s, n, z in zip(starts, shape, sizes)]


def dynamic_slice(operand: np.ndarray, *starts: np.ndarray, slice_sizes: tuple[int, ...]) -> np.ndarray:
    lo = clamped_starts(starts, operand.shape, slice_sizes)
    return operand[tuple(slice(s, s + z) for s, z in zip(lo, slice_sizes))].copy()


def dynamic_update_slice_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    operand, update, *starts = ts
    _dynamic_starts(op, ts, operand, starts)
    if update.dtype is not operand.dtype:
        raise DTypeError(f"{op.value}: the update must have the operand's dtype (operands: "
                         f"{', '.join(str(t) for t in ts)})")
    if update.rank != operand.rank or any(u > n for u, n in zip(update.shape, operand.shape)):
        raise _err(op, ts, "the update must have the operand's rank and fit inside it")
    return operand.shape


def dynamic_update_slice(operand: np.ndarray, update: np.ndarray, *starts: np.ndarray) -> np.ndarray:
    lo = clamped_starts(starts, operand.shape, update.shape)
    out = operand.copy()
    out[tuple(slice(s, s + z) for s, z in zip(lo, update.shape))] = update
    return out
