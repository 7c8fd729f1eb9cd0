"""Transpose folding: a transpose feeding a dot becomes part of the dot's dimension numbers.

``dot(transpose(a), b)`` reads ``a`` directly with renumbered contracting and batch dims,
when the transpose keeps the order of ``a``'s free dims (so the result layout is the
same). This saves a kernel and a temporary per transposed operand, e.g. in every
``x.T @ dy`` of a backward pass.

A weight broadcast along the batch dims (``matmul([B, M, K], [K, N])`` as NumPy's
broadcasting traces it) is folded the same way: ``dot(x, broadcast(w))`` becomes a plain
matrix product of ``x``'s rows with ``w``, the batch dims joining ``x``'s free dims, so the
weight is neither copied B times nor read as B small products. A transpose under that
broadcast (``x @ E.T`` against a tied embedding) is then folded in turn.

Unlike the other rewrites this one is not bit-exact against the interpreter: the
reference dot (NumPy's einsum) may sum in a different order for a different operand
layout, so results agree within the dot's summation tolerance only (as every backend's
dot does). It is therefore its own pass, so tests can switch it off by name."""
from __future__ import annotations

from ..ir.module import Module, Node
from ..ir.ops import Op
from .pipeline import Pass
from .rewrite import like, rebuild_module


def fold_transpose_into_dot(n: Node) -> Node | None:
    """dot(transpose(a), b) -> dot(a, b) with renumbered dims, when the transpose keeps
    the order of a's free dims (so the result layout is unchanged)."""
    a = n.attr
    for side in (0, 1):
        t = n.operands[side]
        if t.op is not Op.TRANSPOSE:
            continue
        perm = t.attr["permutation"]
        pre = ("lhs", "rhs")[side]
        batch, contract = a[f"{pre}_batch"], a[f"{pre}_contracting"]
        free = [d for d in range(len(perm)) if d not in batch + contract]
        if [perm[d] for d in free] != sorted(perm[d] for d in free):
            continue
        ops = list(n.operands)
        ops[side] = t.operands[0]
        attrs = dict(a)
        attrs[f"{pre}_batch"] = tuple(perm[d] for d in batch)
        attrs[f"{pre}_contracting"] = tuple(perm[d] for d in contract)
        return like(n, Op.DOT_GENERAL, ops, **attrs)
    return None


def fold_batch_broadcast_into_dot(n: Node) -> Node | None:
    """dot(x, broadcast(w)) -> dot(x, w) without batch dims, when the broadcast only adds
    the rhs batch dims (w's own dims keep their sizes and order) and x's batch dims come
    first, in order: then x's batch dims lead its free dims and the result is unchanged."""
    a, x, b = n.attr, n.operands[0], n.operands[1]
    if b.op is not Op.BROADCAST_IN_DIM or not a["rhs_batch"]:
        return None
    w, bdims = b.operands[0], tuple(b.attr["broadcast_dimensions"])
    if set(range(len(b.shape))) - set(bdims) != set(a["rhs_batch"]) or list(bdims) != sorted(bdims):
        return None  # a batch dim w has, or dims reordered
    if any(w.shape[i] != b.shape[d] for i, d in enumerate(bdims)):
        return None  # w is also stretched along a size-1 dim
    lb = list(a["lhs_batch"])
    free = [d for d in range(len(x.shape)) if d not in lb and d not in a["lhs_contracting"]]
    if lb != sorted(lb) or (free and lb[-1] > free[0]):
        return None  # x's batch dims would move when they become free dims
    attrs = dict(a, lhs_batch=(), rhs_batch=(), rhs_contracting=tuple(bdims.index(d) for d in a["rhs_contracting"]))
    return like(n, Op.DOT_GENERAL, [x, w], **attrs)


#: the operand folds, each tried until none applies (both operands may be transposed; a
#: broadcast may hide a transpose)
_FOLDS = (fold_batch_broadcast_into_dot, fold_transpose_into_dot)


def _fold_once(n: Node) -> Node | None:
    return next((r for fold in _FOLDS if (r := fold(n)) is not None), None)


def _fold_all(n: Node) -> Node | None:
    out = n
    while out.op is Op.DOT_GENERAL and (r := _fold_once(out)) is not None:
        out = r
    return out if out is not n else None


class TransposeFolding(Pass):
    """Absorbs transposes and batch broadcasts of dot operands into the dot's dimension
    numbers."""

    name = "transpose-fold"

    def run(self, module: Module) -> tuple[Module, bool]:
        out = rebuild_module(module, _fold_all)
        return out, out is not module
