"""Layout assignment for dots: a dot computes the layout its consumers read.

A ``dot_general``'s result is ``[batch..., lhs free..., rhs free...]``. When every consumer
reads it through the same transpose, and that transpose only reorders the batch dims and
swaps the lhs-free and rhs-free groups (each kept in order), the dot can produce the
transposed layout itself: ``C^T = B^T A^T`` is the dot with its operands (and their
dimension numbers) swapped, and a batch order is just the order of the batch pairs. The
transpose then disappears, and with it the strided read a fusion would make of a large
matrix; the classic case is every weight gradient of a backward pass, ``(dy^T x)^T``
consumed by ``w - lr * dw``.

The transposes of the dot's operands that the swap leaves are absorbed afterwards by
transpose folding. Like transpose folding this is not bit-exact against the interpreter
(the reference dot may sum in another order for another operand order), so it is its own
pass, switchable by name (``--disable_passes=layout``).

The same pass gives each convolution the layout its device prefers (``conv_layout``, from
``Capabilities.conv_layout``; passes/conv_layout.py), before the dots: its transposes back
to the program's layout may then be read by a dot."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir.dotdims import DotDims
from ..ir.module import Module, Node
from ..ir.ops import Op
from .conv_layout import ConvLayout, assign_conv_layouts
from .pipeline import Pass
from .rewrite import like, rebuild_module


def transposed_dot(dot: Node, perm: Sequence[int]) -> Node | None:
    """``transpose(dot, perm)`` as one dot_general, or None when ``perm`` reorders dims
    within a free group (that needs an operand transpose, not a different dot)."""
    batch, lhs_free, rhs_free = (list(g) for g in DotDims.of(dot).result_groups)
    nb = len(batch)
    head, tail = list(perm[:nb]), list(perm[nb:])
    if sorted(head) != batch:
        return None
    if tail == lhs_free + rhs_free:
        sides = ("lhs", "rhs")
    elif tail == rhs_free + lhs_free:
        sides = ("rhs", "lhs")  # C^T = B^T A^T: the operands trade places
    else:
        return None
    a, attrs = dot.attr, dict(dot.attr)
    for new, old in zip(("lhs", "rhs"), sides):
        # result batch position i reads the old result's batch position head[i]
        attrs[f"{new}_batch"] = tuple(a[f"{old}_batch"][i] for i in head)
        attrs[f"{new}_contracting"] = a[f"{old}_contracting"]
    operands = [dot.operands[("lhs", "rhs").index(s)] for s in sides]
    return like(dot, Op.DOT_GENERAL, operands, **attrs)


def _transposed_dots(module: Module) -> set[int]:
    """Uids of the transposes to rewrite: each reads a dot whose every user is a transpose
    with that permutation, and which is no computation's result (so the dot dies)."""
    out: set[int] = set()
    for comp in module.computations():
        users = comp.users
        for n in comp.nodes:
            if n.op is not Op.DOT_GENERAL or n is comp.root:
                continue
            us = users[n.uid]
            if us and all(u.op is Op.TRANSPOSE and u.attr["permutation"] == us[0].attr["permutation"] for u in us):
                out.update(u.uid for u in us)
    return out


class LayoutAssignment(Pass):
    """Makes a dot produce the transposed layout its only consumers read, and each
    convolution run in the device's preferred layout (``conv_layout``; None or no field
    set: the program's own). ``claims``, when given, is the device's verdict on a
    rewritten convolution: one it refuses keeps the program's layout."""

    name = "layout"

    def __init__(self, conv_layout: ConvLayout | None = None, claims: Callable[[Node], bool] | None = None) -> None:
        self.conv_layout = conv_layout
        self.claims = claims

    def run(self, module: Module) -> tuple[Module, bool]:
        changed = False
        if self.conv_layout is not None:
            entry = assign_conv_layouts(module.entry, self.conv_layout, self.claims)
            if entry is not module.entry:
                module, changed = module.with_entry(entry), True
        # a rewrite gives a dot new uids downstream, so a chain of them takes several rounds
        while targets := _transposed_dots(module):
            def fn(n: Node) -> Node | None:
                if n.uid not in targets:
                    return None
                return transposed_dot(n.operands[0], n.attr["permutation"])

            out = rebuild_module(module, fn)
            if out is module:
                break
            module, changed = out, True
        return module, changed
