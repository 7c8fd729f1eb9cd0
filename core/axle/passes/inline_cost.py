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

import math
from collections import defaultdict
from collections.abc import Collection, Sequence

from ..ir.module import Node, post_order
from ..ir.ops import OPS, Op

#: ops that are free to evaluate at any index (no kernel ever materializes them)
CHEAP_LEAVES = (Op.PARAMETER, Op.CONSTANT, Op.IOTA)
#: ops that read their operands at their own index (when the shapes match)
_ELEMENTWISE = frozenset(op for op, d in OPS.items() if d.traits.elementwise)


def op_weight(op: Op, is_float: bool = True) -> int:
    """The cost of evaluating one element of ``op`` (on floats or not), relative to an add."""
    if op is Op.POW and not is_float:
        return 64  # up to 63 square-and-multiply rounds per element
    return 30 if OPS[op].traits.transcendental else 1


def _weight(n: Node) -> int:
    return op_weight(n.op, n.op is not Op.POW or n.dtype.is_float)


def group_order(roots: Sequence[Node], inside: Collection[int] | None = None) -> list[Node]:
    """The nodes a group's kernel evaluates, operands first: members reachable from
    ``roots`` and the outside values they read (not looked through). ``inside=None``: a
    whole computation (everything reachable)."""
    return post_order(roots, None if inside is None else (lambda n: n.uid in inside))


def _is_member(n: Node, inside: Collection[int] | None) -> bool:
    return inside is None or n.uid in inside


def _outputs(roots: Sequence[Node]) -> list[Node]:
    return [o for r in roots for o in (r.operands if r.op is Op.TUPLE else (r,))]


def _evaluations(order: list[Node], outputs: set[int], inside: Collection[int] | None) -> dict[int, int]:
    same: dict[int, int] = defaultdict(int)
    moved: dict[int, int] = defaultdict(int)
    est: dict[int, int] = {}
    for n in reversed(order):
        uid = n.uid
        e = max(same[uid], 1 if uid in outputs else 0) + moved[uid]
        est[uid] = e
        if inside is not None and uid not in inside:
            continue  # read from memory: its operands are not evaluated here
        shape = n.type.shape if n.op in _ELEMENTWISE else None  # type: ignore[union-attr]  # elementwise: an array
        for o in n.operands:
            if shape is not None and o.type.shape == shape:  # type: ignore[union-attr]  # an elementwise operand
                if same[o.uid] < e:
                    same[o.uid] = e
            else:
                moved[o.uid] += e
    return est


def evaluations(roots: Sequence[Node], inside: Collection[int] | None = None) -> dict[int, int]:
    """Estimated evaluations of each node of the group per output element."""
    outs = _outputs(roots)
    return _evaluations(group_order(outs, inside), {r.uid for r in outs}, inside)


def inline_cost(roots: Sequence[Node], inside: Collection[int] | None = None) -> int:
    """Weighted evaluations of the group: the size of the kernel that inlines it."""
    outs = _outputs(roots)
    order = group_order(outs, inside)
    est = _evaluations(order, {r.uid for r in outs}, inside)
    return sum(est[n.uid] * (_weight(n) if _is_member(n, inside) else 1) for n in order)


def padded_transcendental(roots: Sequence[Node], inside: Collection[int] | None = None) -> Node | None:
    """A member that is the operand of a member ``pad`` and has transcendental functions
    among its members upstream, or None. A pad evaluates its operand at clamped indices for
    every padding element too, and LLVM was seen to take minutes optimizing transcendental
    chains under a padded index: such an operand is computed by a kernel of its own."""
    for n in group_order(_outputs(roots), inside):
        if n.op is not Op.PAD or not _is_member(n, inside):
            continue
        x = n.operands[0]
        if x.op in CHEAP_LEAVES or not _is_member(x, inside):
            continue
        if any(m.traits.transcendental and _is_member(m, inside) for m in group_order([x], inside)):
            return x
    return None


#: elementwise ops that are not transcendental but take a vector unit many times an add's
#: time (a divider or square-root unit: ~10-20 cycles per vector against 0.5)
SLOW_ARITHMETIC = frozenset({Op.DIV, Op.REM, Op.SQRT, Op.RSQRT})


def slow(n: Node) -> bool:
    """Whether ``n`` is a transcendental or one of the ``SLOW_ARITHMETIC`` ops."""
    return n.traits.transcendental or n.op in SLOW_ARITHMETIC


def broadcast_recompute(roots: Sequence[Node], inside: Collection[int] | None, min_elements: int) -> Node | None:
    """A member read by a member ``broadcast_in_dim`` of at least ``min_elements`` elements
    that repeats it along the broadcast's innermost non-unit dim (the operand varies along
    that dim), with slow ops (:func:`slow`: a transcendental, a division, a square root)
    among its members upstream, or None. A loop kernel or a GEMM epilogue hoists what
    depends on its outer indices only, never what varies along the innermost one: there
    the broadcast re-evaluates those ops for every element (an NHWC batch norm's
    per-feature ``rsqrt(var + eps)``, once per pixel). Such an operand is computed by a
    kernel of its own, which the readers load."""
    for n in group_order(_outputs(roots), inside):
        if n.op is not Op.BROADCAST_IN_DIM or not _is_member(n, inside):
            continue
        x = n.operands[0]
        if x.op in CHEAP_LEAVES or not _is_member(x, inside):
            continue
        shape, xshape = n.type.shape, x.type.shape  # type: ignore[union-attr]  # broadcasts are of arrays
        if math.prod(shape) < min_elements:
            continue
        inner = max((d for d in range(len(shape)) if shape[d] > 1), default=-1)
        if not any(d == inner and xshape[i] > 1 for i, d in enumerate(n.attr["broadcast_dimensions"])):
            continue  # constant along the innermost dim: hoisted out of the inner loop
        if any(slow(m) and _is_member(m, inside) for m in group_order([x], inside)):
            return x
    return None
