"""How much code a fused kernel that inlines its producers would emit.

A fused kernel computes its outputs by evaluating producers at the index each consumer asks
for. Values read at the same index by elementwise users are shared, but a value read through
index-changing ops (reverse, transpose, slice, pad, concatenate, broadcast, reduce...) at
several different indices is evaluated once per index pattern; chains of those grow a kernel
exponentially (``add(x, reverse(x))`` nested k times evaluates x 2^k times). The estimate
below counts those evaluations, weighted by the cost of each op, as XLA's fusion cost checks
do. The fusion pass does not form a group over its policy's ``max_inline_cost``, and the
kernel plan splits a fusion written by hand that is over it (axle.lowering.fission).

A group is given by its exported values (``roots``) and the uids of its members (``inside``):
values from outside are read from memory like parameters (one evaluation each, weight 1).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence

from ..ir.module import Node, post_order
from ..ir.ops import Op

#: ops that are free to evaluate at any index (no kernel ever materializes them)
CHEAP_LEAVES = (Op.PARAMETER, Op.CONSTANT, Op.IOTA)


def _weight(n: Node) -> int:
    if n.op is Op.POW and not n.dtype.is_float:
        return 64  # up to 63 square-and-multiply rounds per element
    return 30 if n.traits.transcendental else 1


def group_order(roots: Sequence[Node], inside: Collection[int] | None = None) -> list[Node]:
    """The nodes a group's kernel evaluates, operands first: members reachable from
    ``roots`` and the outside values they read (not looked through). ``inside=None``: a
    whole computation (everything reachable)."""
    return post_order(roots, None if inside is None else (lambda n: n.uid in inside))


def _is_member(n: Node, inside: Collection[int] | None) -> bool:
    return inside is None or n.uid in inside


def evaluations(roots: Sequence[Node], inside: Collection[int] | None = None) -> dict[int, int]:
    """Estimated evaluations of each node of the group per output element."""
    roots = [o for r in roots for o in (r.operands if r.op is Op.TUPLE else (r,))]
    outputs = {r.uid for r in roots}
    same: dict[int, int] = defaultdict(int)
    moved: dict[int, int] = defaultdict(int)
    est: dict[int, int] = {}
    for n in reversed(group_order(roots, inside)):
        e = max(same[n.uid], 1 if n.uid in outputs else 0) + moved[n.uid]
        est[n.uid] = e
        if not _is_member(n, inside):
            continue  # read from memory: its operands are not evaluated here
        for o in n.operands:
            if n.traits.elementwise and o.shape == n.shape:
                same[o.uid] = max(same[o.uid], e)
            else:
                moved[o.uid] += e
    return est


def inline_cost(roots: Sequence[Node], inside: Collection[int] | None = None) -> int:
    """Weighted evaluations of the group: the size of the kernel that inlines it."""
    est = evaluations(roots, inside)
    roots = [o for r in roots for o in (r.operands if r.op is Op.TUPLE else (r,))]
    return sum(est[n.uid] * (_weight(n) if _is_member(n, inside) else 1) for n in group_order(roots, inside))


def padded_transcendental(roots: Sequence[Node], inside: Collection[int] | None = None) -> Node | None:
    """A member that is the operand of a member ``pad`` and has transcendental functions
    among its members upstream, or None. A pad evaluates its operand at clamped indices for
    every padding element too, and LLVM was seen to take minutes optimizing transcendental
    chains under a padded index: such an operand is computed by a kernel of its own."""
    roots = [o for r in roots for o in (r.operands if r.op is Op.TUPLE else (r,))]
    for n in group_order(roots, inside):
        if n.op is not Op.PAD or not _is_member(n, inside):
            continue
        x = n.operands[0]
        if x.op in CHEAP_LEAVES or not _is_member(x, inside):
            continue
        if any(m.traits.transcendental and _is_member(m, inside) for m in group_order([x], inside)):
            return x
    return None
