"""Decompositions of the extended primitives into core primitives.

An extended primitive (``Traits.extended``) carries one of these in its op-table entry
(``OpDef.decomposition``). A device that does not claim the op gets the decomposition,
expanded by the core before partitioning (passes/expand.py); the NumPy reference stays
the specification, and each decomposition must match it exactly (bit for bit), except
for the summation order of a floating-point scatter ``add``/``mul`` with duplicate
indices (documented in docs/ir.md).

A decomposition is ``fn(b, node) -> Node``: ``b`` is a :class:`~axle.ir.builder.Builder`
(its ``op``/``constant`` make nodes), ``node`` the extended op to replace; it returns a
node of ``node``'s type built from ``node``'s operands.

The indexing ops decompose into one-hot masks: ``iota`` + ``compare`` build, per indexed
dim, the mask "position j is start + i", and ``select`` + ``reduce`` pick (or place) the
values. Values not picked are replaced by the lowest value and the reduction is a
``max`` (IEEE 754-2019 maximum: ``max(x, -inf)`` is x for every x, ``-0.0`` and NaN
included, where a sum would turn ``-0.0`` into ``+0.0``), so picking is exact.
Cost: O(batch x window x axis length) per indexed dim, the price of running an indexed
load on a device that has none.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .dtypes import DType
from .opcodes import Op
from .reductions import REDUCE_KINDS

if TYPE_CHECKING:
    from .builder import Builder
    from .module import Node

#: ``fn(builder, node) -> replacement`` (see the module docstring)
Decomposition = Callable[["Builder", "Node"], "Node"]

S64 = DType.INT64


# ------------------------------------------------------------------------- helpers


def neutral(kind: str, dt: DType) -> Any:
    """The value a masked-out element takes in a ``kind`` reduction: its identity."""
    return np.asarray(REDUCE_KINDS[kind].identity(dt), dt.np)


#: the reduction that picks the one unmasked value exactly (see the module docstring)
PICK = "max"


def full(b: Builder, value: Any, dt: DType, shape: Sequence[int]) -> Node:
    c = b.constant(np.asarray(value).astype(dt.np))
    return c if tuple(shape) == () else b.broadcast_in_dim(c, shape=tuple(shape), broadcast_dimensions=())


def bcast(b: Builder, x: Node, shape: Sequence[int], dims: Sequence[int]) -> Node:
    shape, dims = tuple(shape), tuple(dims)
    if x.shape == shape and dims == tuple(range(len(shape))):
        return x
    return b.broadcast_in_dim(x, shape=shape, broadcast_dimensions=dims)


def iota(b: Builder, shape: Sequence[int], dim: int) -> Node:
    return b.iota(shape=tuple(shape), dtype=S64, dimension=dim)


def s64(b: Builder, x: Node) -> Node:
    return x if x.dtype is S64 else b.convert(x, dtype=S64)


def clamp(b: Builder, s: Node, hi: int) -> Node:
    """``s`` (s64) clamped to [0, hi]."""
    return b.min(b.max(s, full(b, 0, S64, s.shape)), full(b, hi, S64, s.shape))


def pick(b: Builder, t: Node, axis: int, start: Node, size: int, nb: int) -> Node:
    """``t`` (shape ``bs + R``, ``nb = len(bs)`` leading batch dims) with dim ``axis`` of
    ``R`` cut to ``size`` elements from ``start`` (s64, shape ``bs``, in bounds)."""
    j = nb + axis
    n = t.shape[j]
    shape = t.shape[:j] + (size, n) + t.shape[j + 1:]
    tb = bcast(b, t, shape, [i for i in range(len(shape)) if i != j])
    target = b.add(bcast(b, start, shape, range(nb)), iota(b, shape, j))
    mask = b.compare(iota(b, shape, j + 1), target, direction="eq")
    picked = b.select(mask, tb, full(b, neutral(PICK, t.dtype), t.dtype, shape))
    return b.reduce(picked, kind=PICK, axes=(j + 1,))


def place(b: Builder, u: Node, axis: int, start: Node, n: int, nb: int) -> Node:
    """The inverse of :func:`pick`: ``u``'s dim ``axis`` (after ``nb`` batch dims) spread
    over ``n`` positions, element i at ``start + i``; other positions hold the lowest
    value."""
    j = nb + axis
    w = u.shape[j]
    shape = u.shape[:j] + (n, w) + u.shape[j + 1:]
    ub = bcast(b, u, shape, [i for i in range(len(shape)) if i != j])
    target = b.add(bcast(b, start, shape, range(nb)), iota(b, shape, j + 1))
    mask = b.compare(iota(b, shape, j), target, direction="eq")
    placed = b.select(mask, ub, full(b, neutral(PICK, u.dtype), u.dtype, shape))
    return b.reduce(placed, kind=PICK, axes=(j + 1,))


def in_window(b: Builder, start: Node, size: int, n: int, nb: int) -> Node:
    """bool[bs + (n,)]: position p of a dim of ``n`` lies in [start, start + size)."""
    shape = start.shape + (n,)
    p = iota(b, shape, nb)
    s = bcast(b, start, shape, range(nb))
    return b.and_(b.compare(p, s, direction="ge"),
                  b.compare(p, b.add(s, full(b, size, S64, shape)), direction="lt"))


def index_vectors(b: Builder, indices: Node, ivd: int) -> tuple[Node, tuple[int, ...]]:
    """The indices as s64[B, k] (B: the batch elements in row-major order) and the batch
    shape."""
    idx = s64(b, indices)
    if ivd == len(idx.shape):
        idx = b.reshape(idx, shape=idx.shape + (1,))
    elif ivd != len(idx.shape) - 1:
        perm = [d for d in range(len(idx.shape)) if d != ivd] + [ivd]
        idx = b.transpose(idx, permutation=tuple(perm))
    batch, k = idx.shape[:-1], idx.shape[-1]
    return b.reshape(idx, shape=(math.prod(batch), k)), batch


def column(b: Builder, vec: Node, c: int) -> Node:
    rows = vec.shape[0]
    return b.reshape(b.slice(vec, start=(0, c), limit=(rows, c + 1), stride=(1, 1)), shape=(rows,))


# ------------------------------------------------------------------ dynamic slices


def dynamic_slice(b: Builder, node: Node) -> Node:
    x, *starts = node.operands
    sizes = node.attr["slice_sizes"]
    if math.prod(sizes) == 0:
        return full(b, 0, node.dtype, sizes)
    t = x
    for d, (s, z) in enumerate(zip(starts, sizes)):
        n = x.shape[d]
        if z != n:  # a full-size slice always starts at 0 once clamped
            t = pick(b, t, d, clamp(b, s64(b, s), n - z), z, 0)
    return t


def dynamic_update_slice(b: Builder, node: Node) -> Node:
    x, u, *starts = node.operands
    if u.shape == x.shape or math.prod(u.shape) == 0:
        return u if u.shape == x.shape else x
    placed, inside = u, None
    for d, s in enumerate(starts):
        n, w = x.shape[d], u.shape[d]
        if w == n:
            continue
        s = clamp(b, s64(b, s), n - w)
        placed = place(b, placed, d, s, n, 0)
        m = bcast(b, in_window(b, s, w, n, 0), x.shape, (d,))
        inside = m if inside is None else b.and_(inside, m)
    assert inside is not None  # some dim is smaller than the operand's
    return b.select(inside, placed, x)


# -------------------------------------------------------------------------- gather


def gather(b: Builder, node: Node) -> Node:
    operand, indices = node.operands
    a = node.attr
    sizes, index_map = a["slice_sizes"], a["start_index_map"]
    if math.prod(node.shape) == 0:
        return full(b, 0, node.dtype, node.shape)
    vec, batch = index_vectors(b, indices, a["index_vector_dim"])
    nb = vec.shape[0]
    # dims no index reaches start at 0: a static slice
    static = [sizes[d] if d not in index_map else operand.shape[d] for d in range(len(sizes))]
    t = operand
    if tuple(static) != operand.shape:
        t = b.slice(t, start=(0,) * len(static), limit=tuple(static), stride=(1,) * len(static))
    t = bcast(b, t, (nb,) + t.shape, range(1, len(static) + 1))
    for c, d in enumerate(index_map):
        n, z = operand.shape[d], sizes[d]
        if z != n:
            t = pick(b, t, d, clamp(b, column(b, vec, c), n - z), z, 1)
    offsets = tuple(s for d, s in enumerate(sizes) if d not in a["collapsed_slice_dims"])
    t = b.reshape(t, shape=tuple(batch) + offsets)
    offset_dims = a["offset_dims"]
    perm, bi = [], 0
    for d in range(len(node.shape)):
        if d in offset_dims:
            perm.append(len(batch) + offset_dims.index(d))
        else:
            perm.append(bi)
            bi += 1
    return t if perm == sorted(perm) else b.transpose(t, permutation=tuple(perm))


# ------------------------------------------------------------------------- scatter


def _scatter_windows(b: Builder, node: Node) -> tuple[Node, Node]:
    """(placed, cover), both of shape (B,) + operand shape: update window b spread over
    the operand at its start, and where it lands (False for a dropped window)."""
    operand, indices, updates = node.operands
    a = node.attr
    window_dims, to_operand = a["update_window_dims"], a["scatter_dims_to_operand_dims"]
    vec, _ = index_vectors(b, indices, a["index_vector_dim"])
    nb, rank = vec.shape[0], len(operand.shape)
    window = [1] * rank
    kept = [d for d in range(rank) if d not in a["inserted_window_dims"]]
    for wd, od in zip(window_dims, kept):
        window[od] = updates.shape[wd]
    scatter_dims = [d for d in range(len(updates.shape)) if d not in window_dims]
    upd = updates
    if scatter_dims + list(window_dims) != list(range(len(updates.shape))):
        upd = b.transpose(upd, permutation=tuple(scatter_dims + list(window_dims)))
    placed = b.reshape(upd, shape=(nb,) + tuple(window))
    full_shape = (nb,) + operand.shape
    cover = None
    for d in range(rank):
        n, w = operand.shape[d], window[d]
        if d in to_operand:
            s = column(b, vec, to_operand.index(d))
            ok = b.and_(b.compare(s, full(b, 0, S64, (nb,)), direction="ge"),
                        b.compare(s, full(b, n - w, S64, (nb,)), direction="le"))
            m = bcast(b, ok, full_shape, (0,))
            if w != n:
                # a kept window has s in [0, n - w]: placing at the clamped start changes only
                # dropped windows, and keeps start + i free of integer overflow
                s = clamp(b, s, n - w)
                placed = place(b, placed, d, s, n, 1)
                m = b.and_(m, bcast(b, in_window(b, s, w, n, 1), full_shape, (0, d + 1)))
        elif w != n:  # no index reaches this dim: the window sits at 0
            pads = [0] * (rank + 1)
            pads[d + 1] = n - w
            placed = b.pad(placed, b.constant(neutral(PICK, operand.dtype)), low=(0,) * (rank + 1), high=tuple(pads),
                           interior=(0,) * (rank + 1))
            m = bcast(b, b.compare(iota(b, (n,), 0), full(b, w, S64, (n,)), direction="lt"), full_shape, (d + 1,))
        else:
            continue
        cover = m if cover is None else b.and_(cover, m)
    if cover is None:
        cover = full(b, True, DType.BOOL, full_shape)
    return placed, cover


def _combined(b: Builder, placed: Node, cover: Node, kind: str) -> Node:
    """The windows' values at each operand position, combined by reduce ``kind``."""
    masked = b.select(cover, placed, full(b, neutral(kind, placed.dtype), placed.dtype, placed.shape))
    return b.reduce(masked, kind=kind, axes=(0,))


#: scatter kind -> (the reduce kind over the windows, the op that meets the operand)
_SCATTER_COMBINE: dict[str, tuple[str, Op]] = {
    "add": ("sum", Op.ADD), "mul": ("prod", Op.MUL), "min": ("min", Op.MIN), "max": ("max", Op.MAX)}
#: the same on bool, whose add/max are logical or and mul/min logical and
_BOOL_COMBINE: dict[str, tuple[str, Op]] = {
    "add": ("or", Op.OR), "mul": ("and", Op.AND), "min": ("and", Op.AND), "max": ("or", Op.OR)}


def scatter(b: Builder, node: Node) -> Node:
    operand, _, updates = node.operands
    if math.prod(updates.shape) == 0 or math.prod(operand.shape) == 0:
        return operand
    placed, cover = _scatter_windows(b, node)
    kind = node.attr["kind"]
    if kind in _SCATTER_COMBINE:
        reduce_kind, op = (_BOOL_COMBINE if operand.dtype.is_bool else _SCATTER_COMBINE)[kind]
        combined = b.op(op, operand, _combined(b, placed, cover, reduce_kind))
        # positions no window reaches keep the operand as it is (-0.0 + 0.0 would be +0.0)
        hit = b.reduce(cover, kind="or", axes=(0,))
        return b.select(hit, combined, operand)
    # replace: the last window (in index order) covering a position wins
    order = iota(b, placed.shape, 0)
    last = b.reduce(b.select(cover, order, full(b, -1, S64, placed.shape)), kind="max", axes=(0,))
    won = b.and_(cover, b.compare(order, bcast(b, last, placed.shape, range(1, len(placed.shape))),
                                  direction="eq"))
    value = _combined(b, placed, won, PICK)
    return b.select(b.compare(last, full(b, 0, S64, last.shape), direction="ge"), value, operand)


__all__ = ["Decomposition", "dynamic_slice", "dynamic_update_slice", "gather", "scatter"]
