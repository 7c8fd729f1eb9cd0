"""Common-subexpression elimination: one dict lookup per node.

Nodes are hash-consed on their structural key (op, canonical operands, attributes,
type); commutative ops use their operands in a canonical order for the lookup (float
max/min included: IEEE 754-2019 orders -0.0 < +0.0, so they are bit-commutative). Ops with
side effects (rng-bit-generator, custom-call) are never merged: two random draws are two
draws. Fusion nodes compare their fused computations structurally, so identical
fusions merge too."""
from __future__ import annotations

from ..ir.module import Module, Node
from ..ir.ops import Op
from .pipeline import Pass
from .rewrite import rebuild_module


def _lookup_key(n: Node) -> tuple:
    operands = n.operands
    if n.traits.commutative:
        operands = tuple(sorted(operands, key=lambda o: o.uid))
    return (n.op, operands, n.attrs, n.type)


class CSE(Pass):
    """Merges structurally identical nodes."""

    name = "cse"

    def run(self, module: Module) -> tuple[Module, bool]:
        table: dict[tuple, Node] = {}

        def visit(n: Node) -> Node | None:
            if n.traits.side_effect or n.op is Op.PARAMETER:
                return None
            key = _lookup_key(n)
            seen = table.get(key)
            if seen is not None:
                return seen
            table[key] = n
            return None

        out = rebuild_module(module, visit)
        return out, out is not module
