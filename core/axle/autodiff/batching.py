"""Batching rules for ``axle.vmap``: one entry per primitive of the op table.

A rule gets the primitive's node (attributes, per-example operand and result types), the
operand values, which of them are batched, and the batch size. A batched value carries the
batch as its dimension 0 (``vmap`` moves each input's batch axis there, and the output's
to ``out_axes``), so a rule returns the batched result with the batch at dimension 0. A
rule runs only when at least one operand is batched; an op whose operands are all
unbatched is applied as it is.

The model is jax's ``batching.py``: elementwise ops broadcast the unbatched side; movement,
reductions and ``dot_general`` shift their dimension attributes by one (``dot_general``
with both sides batched adds a batch dimension, with one side batched the batch is a free
dimension moved to the front). ``rng_bit_generator`` (one scalar key) and ``custom_call``
(an opaque function) have no batched form: they run once per example (a cost that grows
with the batch, stated in docs/autodiff.md).

Every op of the op table is in :data:`BATCH` or in :data:`NOT_BATCHED` with the reason
(``tests/core/test_transforms.py`` enumerates the op table).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax
from ..frontend.bind import bind
from ..ir.dotdims import DotDims
from ..ir.dtypes import DType
from ..ir.module import Node
from ..ir.ops import OPS, Op
from ..ir.types import TensorType
from . import custom
from .axes import move_axis
from .collective_rules import COLLECTIVE_BATCH
from .control_batching import CONTROL_BATCH

Value = Any
BatchRule = Callable[[Node, Sequence[Value], Sequence[bool], int], Value]


def batched_like(x: Value, t: TensorType, size: int) -> Value:
    """An unbatched value of type ``t`` broadcast along a new leading batch dimension."""
    return lax.broadcast_in_dim(x, (size,) + t.shape, tuple(range(1, t.rank + 1)))


def _all_batched(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> list[Value]:
    return [x if b else batched_like(x, o.tensor_type, size) for x, b, o in zip(xs, bs, n.operands)]


def _shift(dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(d + 1 for d in dims)


def _elementwise(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return bind(n.op, *_all_batched(n, xs, bs, size), **n.attr)


def _reduce(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return lax.reduce(xs[0], n.attr["kind"], _shift(n.attr["axes"]))


def _dot(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    lhs, rhs = xs
    d = DotDims.of(n)
    lb, rb, lc, rc = d.lhs_batch, d.rhs_batch, d.lhs_contracting, d.rhs_contracting
    pref = n.attr["preferred_element_type"]  # kept: int8 operands still accumulate in int32
    if bs[0] and bs[1]:  # a new batch dimension, first of the result's batch group
        return lax.dot_general(lhs, rhs, _shift(lc), _shift(rc), (0,) + _shift(lb), (0,) + _shift(rb), pref)
    if bs[0]:  # the batch is lhs's first free dimension: result position len(batch)
        out = lax.dot_general(lhs, rhs, _shift(lc), rc, _shift(lb), rb, pref)
        at = len(lb)
    else:  # rhs's first free dimension: after the batch and lhs free groups
        out = lax.dot_general(lhs, rhs, lc, _shift(rc), lb, _shift(rb), pref)
        at = len(lb) + len(d.lhs_free)
    return move_axis(out, at, 0, n.tensor_type.rank + 1)


def _broadcast(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return lax.broadcast_in_dim(xs[0], (size,) + n.attr["shape"], (0,) + _shift(n.attr["broadcast_dimensions"]))


def _slice(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return lax.slice(xs[0], (0,) + n.attr["start"], (size,) + n.attr["limit"], (1,) + n.attr["stride"])


def _pad(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    x, pv = xs
    xt = n.operands[0].tensor_type
    if not bs[0]:
        x = batched_like(x, xt, size)
    low, high, interior = ((0,) + n.attr[k] for k in ("low", "high", "interior"))
    if not bs[1]:
        return lax.pad(x, pv, low, high, interior)
    # one padding value per example: pad with any value, then select the padding
    # positions (a mask padded from an all-false operand) from the broadcast values
    zero = np.zeros((), xt.dtype.np)
    padded = lax.pad(x, zero, low, high, interior)
    inside = lax.broadcast_in_dim(np.zeros((), np.bool_), xt.shape, ())
    mask = lax.pad(inside, np.ones((), np.bool_), n.attr["low"], n.attr["high"], n.attr["interior"])
    shape = (size,) + n.tensor_type.shape
    return lax.select(batched_like(mask, TensorType(DType.BOOL, n.tensor_type.shape), size),
                      lax.broadcast_in_dim(pv, shape, (0,)), padded)


def _concatenate(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return lax.concatenate(_all_batched(n, xs, bs, size), n.attr["dimension"] + 1)


def _example(x: Value, i: int, t: TensorType) -> Value:
    """Example ``i`` of a batched value of per-example type ``t``."""
    one = lax.slice(x, (i,) + (0,) * t.rank, (i + 1,) + t.shape)
    return lax.reshape(one, t.shape)


def _per_example(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    """No batched form: the primitive once per example, results stacked."""
    t = n.tensor_type
    if size == 0:
        return lax.broadcast_in_dim(np.zeros((), t.dtype.np), (0,) + t.shape, ())
    outs = []
    for i in range(size):
        args = [_example(x, i, o.tensor_type) if b else x for x, b, o in zip(xs, bs, n.operands)]
        outs.append(lax.reshape(bind(n.op, *args, **n.attr), (1,) + t.shape))
    return lax.concatenate(outs, 0)


def _custom_call(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    """An axle.custom_jvp call batched with its rule (custom.py); any other target once
    per example."""
    if custom.is_custom(n):
        return custom.batch_rule(n, xs, bs, size)
    return _per_example(n, xs, bs, size)


def _merge_batch(x: Value, d: int, rank: int, major: bool) -> Value:
    """A batched value (batch at 0) with the batch merged into its per-example dim ``d``,
    as the major (index b*size + i) or minor (i*B + b) part."""
    at = d if major else d + 1
    x = move_axis(x, 0, at, rank + 1)
    shape = list(x.shape)
    shape[d:d + 2] = [shape[d] * shape[d + 1]]
    return lax.reshape(x, shape)


def _split_batch(y: Value, d: int, size: int, major: bool) -> Value:
    """The inverse of _merge_batch on a result: dim ``d`` split and the batch moved to 0."""
    shape = list(y.shape)
    shape[d:d + 1] = [size, shape[d] // size] if major else [shape[d] // size, size]
    y = lax.reshape(y, shape)
    return move_axis(y, d if major else d + 1, 0, len(shape))


def _convolution(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    """The batch folded into the convolution's own dims (jax's rule): a batched input joins
    its batch dim (minor, so batch groups stay whole), a batched kernel its output
    features; both batched make each example a feature group (or a batch group)."""
    lhs, rhs = xs
    a = dict(n.attr)
    lr, of = n.operands[0].tensor_type.rank, a["output_feature_dimension"]
    if bs[0] and bs[1]:
        ko = a["kernel_output_feature_dimension"]
        rhs = _merge_batch(rhs, ko, lr, major=True)
        if a["batch_group_count"] == 1:
            lhs = _merge_batch(lhs, a["input_feature_dimension"], lr, major=True)
            a["feature_group_count"] *= size
        else:
            lhs = _merge_batch(lhs, a["input_batch_dimension"], lr, major=True)
            a["batch_group_count"] *= size
        return _split_batch(bind(n.op, lhs, rhs, **a), of, size, major=True)
    if bs[0]:
        lhs = _merge_batch(lhs, a["input_batch_dimension"], lr, major=False)
        return _split_batch(bind(n.op, lhs, rhs, **a), a["output_batch_dimension"], size, major=False)
    rhs = _merge_batch(rhs, a["kernel_output_feature_dimension"], lr, major=False)
    return _split_batch(bind(n.op, lhs, rhs, **a), of, size, major=False)


def _reduce_window(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    a = n.attr
    ones = {k: (1,) + a[k] for k in ("window_dimensions", "window_strides", "base_dilations", "window_dilations")}
    zeros = {k: (0,) + a[k] for k in ("padding_low", "padding_high")}
    return bind(n.op, xs[0], kind=a["kind"], **ones, **zeros)


def _sort(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return bind(n.op, *_all_batched(n, xs, bs, size), **{**n.attr, "dimension": n.attr["dimension"] + 1})


# ------------------------------------------------------------------ indexing


def _index_vectors(idx: Value, ivd: int, rank: int, size: int) -> tuple[Value, int]:
    """Batched indices (batch at 0) with an explicit index-vector dim and, prepended to
    each vector, the example's own index b (an iota): (indices, their index_vector_dim)."""
    if ivd == rank:  # implicit trailing vector of one entry: make it explicit
        idx = lax.reshape(idx, tuple(idx.shape) + (1,))
    vd = ivd + 1
    shape = list(idx.shape)
    shape[vd] = 1
    ids = lax.iota(idx.dtype, shape, 0)
    return lax.concatenate([ids, idx], vd), vd


def _gather_batched(operand: Value, idx: Value, ob: bool, ib: bool, size: int, a: dict[str, Any],
                    idx_rank: int) -> Value:
    """gather with a batched operand and/or indices (batch at 0), result batch at 0."""
    offset, collapsed, smap = a["offset_dims"], a["collapsed_slice_dims"], a["start_index_map"]
    ivd, sizes = a["index_vector_dim"], a["slice_sizes"]
    if ob and not ib:  # the batch is one more window dim, placed first
        return bind(Op.GATHER, operand, idx, offset_dims=(0,) + _shift(offset), collapsed_slice_dims=_shift(collapsed),
                    start_index_map=_shift(smap), index_vector_dim=ivd, slice_sizes=(size,) + sizes)
    if ib and not ob:  # the batch is the indices' first batch dim
        return bind(Op.GATHER, operand, idx, offset_dims=_shift(offset), collapsed_slice_dims=collapsed,
                    start_index_map=smap, index_vector_dim=ivd + 1, slice_sizes=sizes)
    # both: each example indexes its own slice of the operand (an iota index into dim 0)
    idx, vd = _index_vectors(idx, ivd, idx_rank, size)
    return bind(Op.GATHER, operand, idx, offset_dims=_shift(offset), collapsed_slice_dims=(0,) + _shift(collapsed),
                start_index_map=(0,) + _shift(smap), index_vector_dim=vd, slice_sizes=(1,) + sizes)


def _gather(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return _gather_batched(xs[0], xs[1], bs[0], bs[1], size, dict(n.attr), n.operands[1].tensor_type.rank)


def _scatter_batched(operand: Value, idx: Value, upd: Value, size: int, a: dict[str, Any], idx_rank: int) -> Value:
    """scatter with all three batched (batch at 0): the batch is an inserted window dim of
    the operand, indexed by each example's own index, and a scatter dim of the updates, so
    every example's updates land in its own slice in their own order."""
    idx, vd = _index_vectors(idx, a["index_vector_dim"], idx_rank, size)
    return bind(Op.SCATTER, operand, idx, upd, update_window_dims=_shift(a["update_window_dims"]),
                inserted_window_dims=(0,) + _shift(a["inserted_window_dims"]),
                scatter_dims_to_operand_dims=(0,) + _shift(a["scatter_dims_to_operand_dims"]), index_vector_dim=vd,
                kind=a["kind"])


def _scatter(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    operand, idx, upd = _all_batched(n, xs, bs, size)
    return _scatter_batched(operand, idx, upd, size, dict(n.attr), n.operands[1].tensor_type.rank)


def _starts_vector(starts: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    """The scalar starts as one batched index vector [size, rank] (s64)."""
    cols = []
    for s, b in zip(starts, bs):
        s = lax.convert(s, DType.INT64)
        cols.append(lax.reshape(s, (size, 1)) if b else lax.broadcast_in_dim(s, (size, 1), ()))
    return lax.concatenate(cols, 1)


def _dynamic_slice(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    operand, *starts = xs
    sizes = n.attr["slice_sizes"]
    if not any(bs[1:]):  # the batch is one more sliced dim, taken whole
        zero = np.zeros((), n.operands[1].tensor_type.dtype.np) if starts else np.zeros((), np.int64)
        return bind(Op.DYNAMIC_SLICE, operand, zero, *starts, slice_sizes=(size,) + sizes)
    # per-example starts: a gather of one window per example (gather clamps as dynamic-slice does)
    r = len(sizes)
    idx = _starts_vector(starts, bs[1:], size)
    attrs = dict(offset_dims=tuple(range(r)), collapsed_slice_dims=(), start_index_map=tuple(range(r)),
                 index_vector_dim=0, slice_sizes=sizes)
    return _gather_batched(operand, idx, bs[0], True, size, attrs, 1)


def _dynamic_update_slice(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    operand, update, *starts = xs
    ot, ut = n.operands[0].tensor_type, n.operands[1].tensor_type
    operand = operand if bs[0] else batched_like(operand, ot, size)
    update = update if bs[1] else batched_like(update, ut, size)
    if not any(bs[2:]):
        zero = np.zeros((), n.operands[2].tensor_type.dtype.np) if starts else np.zeros((), np.int64)
        return bind(Op.DYNAMIC_UPDATE_SLICE, operand, update, zero, *starts)
    # per-example starts: clamp them as dynamic-update-slice does, then a scatter (which
    # would drop, not clamp, an out-of-bounds window) writes each example's window
    clamped = []
    for s, o, dim, u in zip(starts, n.operands[2:], ot.shape, ut.shape):
        def splat(v: int, s: Value = s, dt: np.dtype = o.tensor_type.dtype.np) -> Value:
            return lax.broadcast_in_dim(np.asarray(v, dt), tuple(s.shape), ())
        clamped.append(lax.max(lax.min(s, splat(dim - u)), splat(0)))
    r = ot.rank
    idx = _starts_vector(clamped, bs[2:], size)
    attrs = dict(update_window_dims=tuple(range(r)), inserted_window_dims=(), scatter_dims_to_operand_dims=tuple(
        range(r)), index_vector_dim=0, kind="replace")
    upd = lax.reshape(update, (size,) + ut.shape)
    return _scatter_batched(operand, idx, upd, size, attrs, 1)


BATCH: dict[Op, BatchRule] = {
    **{op: _elementwise for op, d in OPS.items() if d.traits.elementwise},
    Op.REDUCE: _reduce,
    Op.DOT_GENERAL: _dot,
    Op.CONVOLUTION: _convolution,
    Op.REDUCE_WINDOW: _reduce_window,
    Op.SORT: _sort,
    Op.BROADCAST_IN_DIM: _broadcast,
    Op.RESHAPE: lambda n, xs, bs, size: lax.reshape(xs[0], (size,) + n.attr["shape"]),
    Op.TRANSPOSE: lambda n, xs, bs, size: lax.transpose(xs[0], (0,) + _shift(n.attr["permutation"])),
    Op.SLICE: _slice,
    Op.PAD: _pad,
    Op.CONCATENATE: _concatenate,
    Op.REVERSE: lambda n, xs, bs, size: lax.reverse(xs[0], _shift(n.attr["dimensions"])),
    Op.GATHER: _gather,
    Op.SCATTER: _scatter,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Op.RNG_BIT_GENERATOR: _per_example,
    Op.CUSTOM_CALL: _custom_call,
    # indexing: once per example (a batched gather/scatter would add the batch to the
    # dimension numbers: not yet)
    # control flow: rules over their sub-computations (control_batching.py); each returns
    # one (value, batched) pair per result of the loop or conditional
    **CONTROL_BATCH,
    # collectives (collective_rules.py)
    **COLLECTIVE_BATCH,
}

#: The op table's ops without a batching rule, and why none is needed.
NOT_BATCHED: dict[Op, str] = {
    Op.PARAMETER: "an input: vmap batches it by moving its in_axes dimension to the front",
    Op.CONSTANT: "no operands: never depends on a batched value",
    Op.IOTA: "no operands: never depends on a batched value",
    Op.TUPLE: "plumbing made by the core after tracing; never in a traced graph",
    Op.GET_TUPLE_ELEMENT: "plumbing made by the core after tracing; never in a traced graph",
    Op.FUSION: "made by the optimizer's fusion pass; never in a traced graph",
    # collectives
    Op.REPLICA_ID: "no operands: never depends on a batched value",
}
