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

Value = Any
BatchRule = Callable[[Node, Sequence[Value], Sequence[bool], int], Value]


def batched_like(x: Value, t: TensorType, size: int) -> Value:
    """An unbatched value of type ``t`` broadcast along a new leading batch dimension."""
    return lax.broadcast_in_dim(x, (size,) + t.shape, tuple(range(1, t.rank + 1)))


def _all_batched(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> list[Value]:
    return [x if b else batched_like(x, o.tensor_type, size) for x, b, o in zip(xs, bs, n.operands)]


def _shift(dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(d + 1 for d in dims)


def move_axis(x: Value, src: int, dst: int, rank: int) -> Value:
    """``x`` with its dimension ``src`` moved to position ``dst`` (a transpose, or x itself)."""
    if src == dst:
        return x
    perm = [d for d in range(rank) if d != src]
    perm.insert(dst, src)
    return lax.transpose(x, perm)


def _elementwise(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return bind(n.op, *_all_batched(n, xs, bs, size), **n.attr)


def _reduce(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return lax.reduce(xs[0], n.attr["kind"], _shift(n.attr["axes"]))


def _dot(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    lhs, rhs = xs
    d = DotDims.of(n)
    lb, rb, lc, rc = d.lhs_batch, d.rhs_batch, d.lhs_contracting, d.rhs_contracting
    if bs[0] and bs[1]:  # a new batch dimension, first of the result's batch group
        return lax.dot_general(lhs, rhs, _shift(lc), _shift(rc), (0,) + _shift(lb), (0,) + _shift(rb))
    if bs[0]:  # the batch is lhs's first free dimension: result position len(batch)
        out = lax.dot_general(lhs, rhs, _shift(lc), rc, _shift(lb), rb)
        at = len(lb)
    else:  # rhs's first free dimension: after the batch and lhs free groups
        out = lax.dot_general(lhs, rhs, lc, _shift(rc), lb, _shift(rb))
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


def _sort(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return bind(n.op, *_all_batched(n, xs, bs, size), **{**n.attr, "dimension": n.attr["dimension"] + 1})


BATCH: dict[Op, BatchRule] = {
    **{op: _elementwise for op, d in OPS.items() if d.traits.elementwise},
    Op.REDUCE: _reduce,
    Op.DOT_GENERAL: _dot,
    Op.SORT: _sort,
    Op.BROADCAST_IN_DIM: _broadcast,
    Op.RESHAPE: lambda n, xs, bs, size: lax.reshape(xs[0], (size,) + n.attr["shape"]),
    Op.TRANSPOSE: lambda n, xs, bs, size: lax.transpose(xs[0], (0,) + _shift(n.attr["permutation"])),
    Op.SLICE: _slice,
    Op.PAD: _pad,
    Op.CONCATENATE: _concatenate,
    Op.REVERSE: lambda n, xs, bs, size: lax.reverse(xs[0], _shift(n.attr["dimensions"])),
    Op.RNG_BIT_GENERATOR: _per_example,
    Op.CUSTOM_CALL: _per_example,
    # indexing: once per example (a batched gather/scatter would add the batch to the
    # dimension numbers: not yet)
    Op.GATHER: _per_example,
    Op.SCATTER: _per_example,
    Op.DYNAMIC_SLICE: _per_example,
    Op.DYNAMIC_UPDATE_SLICE: _per_example,
}

#: The op table's ops without a batching rule, and why none is needed.
NOT_BATCHED: dict[Op, str] = {
    Op.PARAMETER: "an input: vmap batches it by moving its in_axes dimension to the front",
    Op.CONSTANT: "no operands: never depends on a batched value",
    Op.IOTA: "no operands: never depends on a batched value",
    Op.TUPLE: "plumbing made by the core after tracing; never in a traced graph",
    Op.GET_TUPLE_ELEMENT: "plumbing made by the core after tracing; never in a traced graph",
    Op.FUSION: "made by the optimizer's fusion pass; never in a traced graph",
    # control flow
    Op.WHILE: "no batching rule yet: vmap over a loop that reads a batched value raises",
    Op.CONDITIONAL: "no batching rule yet: vmap over a conditional that reads a batched value raises",
}
