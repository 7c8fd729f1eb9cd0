"""Transpose folding: a transpose feeding a dot becomes part of the dot's dimension numbers.

``dot(transpose(a), b)`` reads ``a`` directly with renumbered contracting and batch dims,
when the transpose keeps the order of ``a``'s free dims (so the result layout is the
same). This saves a kernel and a temporary per transposed operand, e.g. in every
``x.T @ dy`` of a backward pass.

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


def _fold_all(n: Node) -> Node | None:
    out = n
    while out.op is Op.DOT_GENERAL and (r := fold_transpose_into_dot(out)) is not None:
        out = r  # both operands may be transposed
    return out if out is not n else None


class TransposeFolding(Pass):
    """Absorbs transposes of dot operands into the dot's dimension numbers."""

    name = "transpose-fold"

    def run(self, module: Module) -> tuple[Module, bool]:
        out = rebuild_module(module, _fold_all)
        return out, out is not module
