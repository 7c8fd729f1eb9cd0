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

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax
from ..frontend.bind import bind
from ..ir.collectives import inverse_pairs
from ..ir.module import Node
from ..ir.ops import Op

Value = Any
Tangent = Value | None


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
