"""Split reductions: a launch that reduces a long axis into too few outputs to fill a
parallel device becomes two launches, as XLA's tree-reduction rewriter does.

The first launch is the launch's own computation with each root reduction made partial: one
reduced axis of extent ``E`` is padded with the reduction's identity to ``parts x chunk``
and reshaped so, and the chunk is reduced with the other reduced axes, which leaves
``kept x parts`` partial results; the second launch combines the ``parts`` partials of each
output. Both are ordinary computations (pad, reshape, reduce, convert), so every emitter
renders them as it renders any other launch; being part of the kernel plan, the split
serves optimized, unoptimized and eager modules alike.

Partial results of float16 sums and products are kept in float32 and rounded once at the
end, as an unsplit reduction does (``REDUCE_KINDS[kind].accumulator``). A split float sum adds in
another order than the unsplit one, so it agrees within the sum's rounding error; max, min,
integer and bool reductions are exact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.builder import make_node
from ..ir.dtypes import DType
from ..ir.literal import Literal
from ..ir.module import Computation, Node
from ..ir.opcodes import Op
from ..ir.reductions import REDUCE_KINDS
from ..ir.types import TensorType
from .schedule import outputs_of


@dataclass(frozen=True)
class Split:
    """``partials``: the launch's computation with partial reductions at its roots (same
    parameters); ``combine``: the partials (its parameters, in root order) to the results."""

    partials: Computation
    combine: Computation
    parts: int


def _identity(kind: str, t: TensorType) -> Node:
    """The reduction's identity, where a reduction starts (a float sum at +0.0, so a sum
    of negative zeros is +0.0 split or not, as the reference's)."""
    value = REDUCE_KINDS[kind].identity(t.dtype)
    return make_node(Op.CONSTANT, (), {"value": Literal(np.array(value, dtype=t.dtype.np))})


def split_reduction(comp: Computation, workers: int, min_part: int) -> Split | None:
    """The two launches for ``comp`` when every output is a reduction of one operand shape
    over the same axes, into fewer than ``workers`` elements, each part at least
    ``min_part`` elements; else None."""
    outs = outputs_of(comp)
    if not all(o.op is Op.REDUCE and o.attr["axes"] for o in outs):
        return None
    forms = {(o.operands[0].shape, tuple(sorted(o.attr["axes"]))) for o in outs}
    if len(forms) != 1:
        return None
    ((shape, axes),) = forms
    kept = math.prod(outs[0].shape)
    reduced = math.prod(shape[a] for a in axes)
    if kept >= workers or reduced < 2 * min_part:
        return None
    a = max(axes, key=lambda d: shape[d])  # the longest reduced axis is split
    parts = min(-(-workers // max(kept, 1)), reduced // min_part, shape[a])
    if parts < 2:
        return None
    chunk = -(-shape[a] // parts)
    split_shape = shape[:a] + (parts, chunk) + shape[a + 1:]
    first_axes = tuple(d + 1 if d >= a else d for d in axes)  # the chunk and the other reduced axes
    at = sum(1 for d in range(a) if d not in axes)  # the parts axis among the kept ones
    high = tuple(parts * chunk - shape[a] if d == a else 0 for d in range(len(shape)))
    split_operands: dict[tuple, Node] = {}  # sibling reductions of one value share its split

    def split_operand(x: Node, kind: str, acc: DType) -> Node:
        key = (x.uid, acc, kind if any(high) else "")
        if key not in split_operands:
            y = x if acc is x.dtype else make_node(Op.CONVERT, (x,), {"dtype": acc})
            if any(high):
                zeros = (0,) * len(shape)
                y = make_node(Op.PAD, (y, _identity(kind, y.tensor_type)),
                              {"low": zeros, "high": high, "interior": zeros})
            split_operands[key] = make_node(Op.RESHAPE, (y,), {"shape": split_shape})
        return split_operands[key]

    partials, finals = [], []
    for k, r in enumerate(outs):
        kind, acc = r.attr["kind"], REDUCE_KINDS[r.attr["kind"]].accumulator(r.dtype)
        y = split_operand(r.operands[0], kind, acc)
        p = make_node(Op.REDUCE, (y,), {"kind": kind, "axes": first_axes}, loc=r.loc)
        partials.append(p)
        param = make_node(Op.PARAMETER, (), {"index": k}, type=p.tensor_type, name=f"p{k}")
        f = make_node(Op.REDUCE, (param,), {"kind": kind, "axes": (at,)}, loc=r.loc)
        finals.append((param, f if acc is r.dtype else make_node(Op.CONVERT, (f,), {"dtype": r.dtype})))

    def root(nodes: list[Node]) -> Node:
        return nodes[0] if len(nodes) == 1 else make_node(Op.TUPLE, nodes)

    return Split(Computation(f"{comp.name}_partials", comp.parameters, root(partials)),
                 Computation(f"{comp.name}_combine", tuple(p for p, _ in finals), root([f for _, f in finals])),
                 parts)
