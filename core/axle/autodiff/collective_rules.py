"""VJP, JVP and batching rules of the collectives (ir/collectives.py).

Every replica differentiates its own copy of the SPMD program, so a rule's cotangent is
this replica's and the transpose of a collective is again a collective over the same
groups: all_reduce(sum) -> all_reduce(sum), all_gather -> reduce_scatter(sum) and back,
all_to_all -> all_to_all with split and concat swapped, collective_permute -> the inverse
permutation. max/min share the cotangent evenly between the replicas holding the extreme
(as ``reduce``'s rule does between elements); prod divides by the operand (undefined
where it is 0, as ``reduce``'s prod rule).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import lax
from ..errors import CollectiveError
from ..frontend.bind import bind
from ..frontend.tracing import aval_of
from ..ir.collectives import inverse_pairs
from ..ir.computation import called_computations
from ..ir.dtypes import DType
from ..ir.module import Node
from ..ir.ops import Op
from .axes import move_axis

Value = Any
Tangent = Value | None
BatchRule = Callable[[Node, Sequence[Value], Sequence[bool], int], Value]


def full(v: float, node: Node) -> Value:
    """The scalar v broadcast to the type of ``node`` (rules.full; rules.py imports this file)."""
    t = node.tensor_type
    return lax.broadcast_in_dim(np.asarray(v, t.dtype.np), t.shape, ())


def _groups(n: Node) -> dict[str, Any]:
    return {"replica_groups": n.attr["replica_groups"], "group_size": n.attr["group_size"]}


def _psum(n: Node, v: Value) -> Value:
    return bind(Op.ALL_REDUCE, v, kind="sum", **_groups(n))


def _gather(n: Node, v: Value) -> Value:
    return bind(Op.ALL_GATHER, v, dimension=n.attr["dimension"], **_groups(n))


def _scatter_sum(n: Node, v: Value) -> Value:
    return bind(Op.REDUCE_SCATTER, v, kind="sum", dimension=n.attr["dimension"], **_groups(n))


def _extreme_share(n: Node, x: Value, full_out: Value, total: Callable[[Value], Value], ct: Value) -> Value:
    """max/min: the replicas whose element equals the extreme share ``ct`` evenly;
    ``total`` sums a per-replica value over the group into the result's layout."""
    hit = lax.compare(x, full_out, "eq")
    cnt = total(lax.convert(hit, n.operands[0].dtype))
    return lax.select(hit, lax.div(ct, cnt), full(0, n.operands[0]))


# ------------------------------------------------------------------ VJP


def _all_reduce_vjp(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    kind, x = n.attr["kind"], xs[0]
    summed = _psum(n, ct)  # every replica's output depends on this replica's operand
    if kind == "sum":
        return [summed]
    if kind == "prod":
        return [lax.div(_psum(n, lax.mul(ct, out)), x)]
    hit = lax.compare(x, out, "eq")
    cnt = _psum(n, lax.convert(hit, n.operands[0].dtype))
    return [lax.select(hit, lax.div(summed, cnt), full(0, n.operands[0]))]


def _reduce_scatter_vjp(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    kind, x = n.attr["kind"], xs[0]
    spread = _gather(n, ct)  # this replica's operand reaches every member's block
    if kind == "sum":
        return [spread]
    if kind == "prod":
        return [lax.div(_gather(n, lax.mul(ct, out)), x)]
    return [_extreme_share(n, x, _gather(n, out), lambda v: _psum(n, v), spread)]


def _all_to_all_vjp(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    return [bind(Op.ALL_TO_ALL, ct, split_dimension=n.attr["concat_dimension"],
                 concat_dimension=n.attr["split_dimension"], **_groups(n))]


COLLECTIVE_VJP: dict[Op, Callable[[Node, Sequence[Value], Value, Value], list]] = {
    Op.ALL_REDUCE: _all_reduce_vjp,
    Op.ALL_GATHER: lambda n, xs, out, ct: [_scatter_sum(n, ct)],
    Op.REDUCE_SCATTER: _reduce_scatter_vjp,
    Op.ALL_TO_ALL: _all_to_all_vjp,
    Op.COLLECTIVE_PERMUTE: lambda n, xs, out, ct: [
        bind(Op.COLLECTIVE_PERMUTE, ct, source_target_pairs=inverse_pairs(n.attr["source_target_pairs"]))],
}


# ------------------------------------------------------------------ JVP


def _tangent(n: Node, ts: Sequence[Tangent]) -> Value:
    return ts[0] if ts[0] is not None else full(0, n.operands[0])


def _linear(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    return bind(n.op, _tangent(n, ts), **n.attr)


def _all_reduce_jvp(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    kind, x, t = n.attr["kind"], xs[0], _tangent(n, ts)
    if kind == "sum":
        return _psum(n, t)
    if kind == "prod":
        return _psum(n, lax.div(lax.mul(t, out), x))
    hit = lax.compare(x, out, "eq")
    zero = full(0, n.operands[0])
    return lax.div(_psum(n, lax.select(hit, t, zero)), _psum(n, lax.convert(hit, n.operands[0].dtype)))


def _reduce_scatter_jvp(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    kind, x, t = n.attr["kind"], xs[0], _tangent(n, ts)
    if kind == "sum":
        return _scatter_sum(n, t)
    whole = _gather(n, out)  # the group's reduction, as this replica's operand is laid out
    if kind == "prod":
        return _scatter_sum(n, lax.div(lax.mul(t, whole), x))
    hit = lax.compare(x, whole, "eq")
    zero = full(0, n.operands[0])
    return lax.div(_scatter_sum(n, lax.select(hit, t, zero)),
                   _scatter_sum(n, lax.convert(hit, n.operands[0].dtype)))


COLLECTIVE_JVP: dict[Op, Callable[[Node, Sequence[Value], Sequence[Tangent], Value], Value]] = {
    Op.ALL_REDUCE: _all_reduce_jvp,
    Op.ALL_GATHER: _linear,
    Op.REDUCE_SCATTER: _reduce_scatter_jvp,
    Op.ALL_TO_ALL: _linear,
    Op.COLLECTIVE_PERMUTE: _linear,
}


# ------------------------------------------------------------------ batching (vmap inside a replica)

#: the attributes naming operand dimensions, shifted by the new leading batch dimension
_DIM_ATTRS = ("dimension", "split_dimension", "concat_dimension")


def _batched(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    # The only operand is batched (a rule runs only then); each example is exchanged with
    # the same example of the other replicas.
    attrs = {k: (v + 1 if k in _DIM_ATTRS else v) for k, v in n.attr.items()}
    return bind(n.op, xs[0], **attrs)


COLLECTIVE_BATCH: dict[Op, Callable[[Node, Sequence[Value], Sequence[bool], int], Value]] = {
    op: _batched for op in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL, Op.COLLECTIVE_PERMUTE)
}


# ------------------------------------------------------------------ replicas as a batch (pmap inside a trace)
#
# ``pmap`` called inside jit, grad, vmap or a loop body runs its replicas as one batch of
# the enclosing computation (vectorize.vmap_replicas): value r of dimension 0 is replica r.
# A collective then exchanges between rows of that batch instead of between threads, so
# it becomes plain array ops (static row picks, reshapes, a reduce), which every
# transformation already differentiates and batches. These rules replace the ones above
# while such a replay runs (``replicas_as_batch``).

_REPLICAS = threading.local()


@contextlib.contextmanager
def replicas_as_batch(count: int) -> Iterator[None]:
    """Within the body, vmap's replay (vectorize._run) reads the batch as ``count`` replicas."""
    prev = getattr(_REPLICAS, "count", None)
    _REPLICAS.count = count
    try:
        yield
    finally:
        _REPLICAS.count = prev


def replica_batch_rules() -> dict[Op, BatchRule] | None:
    """The rules for collectives over the batch, while a replicas-as-batch replay runs."""
    return REPLICA_BATCH if getattr(_REPLICAS, "count", None) is not None else None


def reads_replicas(n: Node) -> bool:
    """Whether a loop or conditional runs a collective or replica-id somewhere inside: its
    results then differ between replicas whatever its operands (the replay batches them all)."""
    return any(m.op in REPLICA_BATCH or reads_replicas(m) for c in called_computations(n) for m in c.nodes)


def _rows(x: Value, idx: Sequence[int]) -> Value:
    """The rows ``idx`` of ``x`` along dimension 0, in that order (static picks)."""
    if list(idx) == list(range(aval_of(x).shape[0])):
        return x
    shape = aval_of(x).shape
    return lax.concatenate([lax.slice(x, (i,) + (0,) * (len(shape) - 1), (i + 1,) + shape[1:]) for i in idx], 0)


class _Groups:
    """A collective's replica groups over a batch of ``size`` replicas."""

    def __init__(self, n: Node, size: int) -> None:
        flat = n.attr["replica_groups"]
        if len(flat) != size:
            raise CollectiveError(f"{n.op.value}: its replica groups cover {len(flat)} replica(s), but the pmap "
                                  f"around it runs {size} (operand: {n.operands[0].type})")
        self.flat, self.g = tuple(flat), int(n.attr["group_size"])
        self.count = size // self.g
        self.group_of = [self.flat.index(r) // self.g for r in range(size)]
        self.inverse = [self.flat.index(r) for r in range(size)]  # row of replica r in group-major order

    def grouped(self, x: Value, shape: tuple[int, ...]) -> Value:
        """[groups, group_size, *shape]: the operands of each group in group order."""
        return lax.reshape(_rows(x, self.flat), (self.count, self.g) + shape)


def _operand(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> tuple[Value, tuple[int, ...]]:
    t = n.operands[0].tensor_type
    return (xs[0] if bs[0] else lax.broadcast_in_dim(xs[0], (size,) + t.shape, tuple(range(1, t.rank + 1))),
            t.shape)


def _move(x: Value, src: int, dst: int) -> Value:
    return move_axis(x, src, dst, len(aval_of(x).shape))


def _replica_all_reduce(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    x, shape = _operand(n, xs, bs, size)
    g = _Groups(n, size)
    return _rows(lax.reduce(g.grouped(x, shape), n.attr["kind"], (1,)), g.group_of)


def _replica_all_gather(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    x, shape = _operand(n, xs, bs, size)
    g, d = _Groups(n, size), n.attr["dimension"]
    moved = _move(g.grouped(x, shape), 1, 1 + d)  # the members just before dimension d
    merged = shape[:d] + (g.g * shape[d],) + shape[d + 1:]
    return _rows(lax.reshape(moved, (g.count,) + merged), g.group_of)


def _replica_reduce_scatter(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    x, shape = _operand(n, xs, bs, size)
    g, d = _Groups(n, size), n.attr["dimension"]
    red = lax.reduce(g.grouped(x, shape), n.attr["kind"], (1,))  # [groups, *shape]
    split = lax.reshape(red, (g.count,) + shape[:d] + (g.g, shape[d] // g.g) + shape[d + 1:])
    blocks = _move(split, 1 + d, 1)  # [groups, block, ...]: block p goes to member p
    out = shape[:d] + (shape[d] // g.g,) + shape[d + 1:]
    return _rows(lax.reshape(blocks, (size,) + out), g.inverse)


def _replica_all_to_all(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    x, shape = _operand(n, xs, bs, size)
    g, sd, cd = _Groups(n, size), n.attr["split_dimension"], n.attr["concat_dimension"]
    part = shape[:sd] + (shape[sd] // g.g,) + shape[sd + 1:]
    split = lax.reshape(g.grouped(x, shape), (g.count, g.g) + shape[:sd] + (g.g, shape[sd] // g.g) + shape[sd + 1:])
    by_block = _move(split, 2 + sd, 1)  # [groups, block (receiver), member (sender), *part]
    at_concat = _move(by_block, 2, 2 + cd)  # the senders just before the concat dimension, in member order
    out = part[:cd] + (g.g * part[cd],) + part[cd + 1:]
    return _rows(lax.reshape(at_concat, (size,) + out), g.inverse)


def _replica_permute(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    x, shape = _operand(n, xs, bs, size)
    pairs = n.attr["source_target_pairs"]
    if any(r >= size for r in pairs):
        raise CollectiveError(f"{n.op.value}: source_target_pairs {tuple(pairs)} name a replica >= the {size} "
                              "replica(s) of the pmap around it")
    zero = lax.broadcast_in_dim(np.zeros((), n.operands[0].dtype.np), (1,) + shape, ())
    src = {pairs[i + 1]: pairs[i] for i in range(0, len(pairs), 2)}
    return _rows(lax.concatenate([x, zero], 0), [src.get(r, size) for r in range(size)])


def _replica_id(n: Node, xs: Sequence[Value], bs: Sequence[bool], size: int) -> Value:
    return lax.iota(DType.INT32, (size,), 0)


#: the collectives (and replica-id) read over a batch of replicas
REPLICA_BATCH: dict[Op, BatchRule] = {
    Op.ALL_REDUCE: _replica_all_reduce,
    Op.ALL_GATHER: _replica_all_gather,
    Op.REDUCE_SCATTER: _replica_reduce_scatter,
    Op.ALL_TO_ALL: _replica_all_to_all,
    Op.COLLECTIVE_PERMUTE: _replica_permute,
    Op.REPLICA_ID: _replica_id,
}
