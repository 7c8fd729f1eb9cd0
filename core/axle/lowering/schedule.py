"""Schedules: how a launch's computation walks its index space, per fusion kind.

A kernel plan (:mod:`axle.lowering.plan`) says *what* each launch computes; its schedule says
*how*: the index space walked, its split into outer rows and inner columns, whether it is a
flat 1-D range, which reductions are computed once per row and kept (cached) for the
row's elements, whether a reduction walks its reduced axes inside (row form) or outside
(column form, when the last axis is kept: memory streams along it), and along which axis a
large reduction may split at run time into parts whose partial results are combined.

Every backend reads the same :class:`Schedule` and only chooses *within* a form what its
device does best (a work-group tree reduction, vector lanes, threads): no backend
re-derives a fusion's form from its nodes.

Forms, decided in this order:

``dot``
    a lone dot_general over parameters (an unfused dot): a GEMM kernel or library call;
    or an ``output`` fusion: that dot (``dot``) and its epilogue (a claimed convolution,
    the other ``contraction``, takes the same two forms), elementwise ops over the
    dot's output (reading other parameters at the same index or through broadcasts) that
    finish each output tile in registers before it is stored (``epilogue`` is true). The
    fusion's one output has the dot's shape; its dtype may differ (a convert).
``row``
    a row fusion (kind ``row``): reductions over the trailing axes of one shape ``S``
    (``reduces``), computed once per row of ``S`` before the row's elements; outputs
    hold one element per row (shape ``row_shape``, or it with unit dims) or one per
    element of ``S``.
``reduce``
    every output is a reduction of one operand shape over the same axes (kind ``input``,
    or an unfused reduce): one output element per kept index, the reduced elements
    (``reduced`` of them) walked inside; ``column`` when the operand's last axis is kept.
``loop``
    everything else: one value per output element over the largest output's shape;
    ``flat`` when every node is elementwise over that one shape.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..ir.module import Computation, Node
from ..ir.opcodes import Op
from ..ir.types import squeeze

FORMS = ("dot", "row", "reduce", "loop")


def outputs_of(comp: Computation) -> tuple[Node, ...]:
    """The computation's results: the root, or the root tuple's elements."""
    r = comp.root
    return tuple(r.operands) if r.op is Op.TUPLE else (r,)


def _trailing(axes: tuple[int, ...], rank: int) -> bool:
    return bool(axes) and tuple(sorted(axes)) == tuple(range(rank - len(axes), rank))


@dataclass(frozen=True, eq=False)
class Schedule:
    comp: Computation
    form: str
    outputs: tuple[Node, ...]
    #: the index space walked: row form the shape its reductions read, else the largest output
    iter_shape: tuple[int, ...]
    #: row form: the reductions computed once per row; reduce form: the outputs
    reduces: tuple[Node, ...] = ()
    #: row and reduce forms: the shape of one element per row / per kept index
    row_shape: tuple[int, ...] = ()
    #: dot form: the contraction (the output itself, or the producer of an epilogue)
    dot: Node | None = None

    @property
    def epilogue(self) -> bool:
        """Dot form: the output is the dot's epilogue, not the dot itself."""
        return self.dot is not None and self.outputs[0] is not self.dot

    @cached_property
    def flat(self) -> bool:
        """Pure elementwise over one shape (scalar constants and broadcasts of scalars
        aside): the loop nest is a flat 1-D range."""
        if self.form != "loop":
            return False
        s = self.iter_shape
        for n in self.comp.nodes:
            if n.op is Op.TUPLE:
                continue
            if n.op in (Op.PARAMETER, Op.CONSTANT) or n.traits.elementwise:
                if n.shape != s and not (n.op is Op.CONSTANT and n.shape == ()):
                    return False
            elif not (n.op is Op.BROADCAST_IN_DIM and n.operands[0].shape == ()):
                return False
        return all(o.shape == s for o in self.outputs)

    @property
    def rows(self) -> int:
        """Outer loop trips: every axis of the index space but the last (1 when flat)."""
        s = self.iter_shape
        return 1 if self.flat or not s else math.prod(s[:-1])

    @property
    def cols(self) -> int:
        """Inner loop trips: the last axis (the whole space when flat)."""
        s = self.iter_shape
        return math.prod(s) if self.flat else (s[-1] if s else 1)

    @property
    def reduce_axes(self) -> tuple[int, ...]:
        return tuple(sorted(self.reduces[0].attr["axes"])) if self.reduces else ()

    @property
    def reduced(self) -> int:
        """Elements each reduction combines per output element (reduce and row forms)."""
        if not self.reduces:
            return 0
        x = self.reduces[0].operands[0].shape
        return math.prod(x[a] for a in self.reduce_axes)

    @property
    def trailing(self) -> bool:
        """The reduced axes are the operand's last ones (each output element reads one
        contiguous run): true of every row form."""
        return bool(self.reduces) and _trailing(self.reduce_axes, len(self.reduces[0].operands[0].shape))

    @property
    def column(self) -> bool:
        """A reduction keeping the operand's last axis (column sums, bias gradients): walk
        the reduced axes outside and the columns inside, so that memory streams."""
        if self.form != "reduce":
            return False
        shape = self.reduces[0].operands[0].shape
        return len(shape) >= 2 and len(shape) - 1 not in self.reduce_axes and shape[-1] > 1

    @property
    def split_extent(self) -> int:
        """Where a large reduction into few outputs may split at run time into parts (each
        reducing a slice into partial results that the host combines, as the CPU backend's
        threads do): the extent of the first reduced axis, when every output is a
        reduction with the same first reduced axis (0: not splittable). A split decided
        at compile time is two launches of the plan instead (axle.lowering.split)."""
        outs = self.outputs
        if not all(o.op is Op.REDUCE and o.attr["axes"] for o in outs):
            return 0
        first = {(o.operands[0].shape, min(o.attr["axes"])) for o in outs}
        if len(first) != 1:
            return 0
        shape, ax = first.pop()
        return shape[ax]


def schedule(comp: Computation, kind: str) -> Schedule:
    """The schedule of a launch computing ``comp`` as fusion kind ``kind`` (a launch's
    ``kind`` in the kernel plan: ``loop``, ``input``, ``row``, ``dot``...)."""
    outs = outputs_of(comp)
    if len(outs) == 1 and outs[0].traits.contraction and all(o.op is Op.PARAMETER for o in outs[0].operands):
        return Schedule(comp, "dot", outs, outs[0].shape, dot=outs[0])
    if kind == "output":
        (d,) = (n for n in comp.nodes if n.traits.contraction)
        assert len(outs) == 1 and outs[0].shape == d.shape, "an output fusion has one output of its dot's shape"
        return Schedule(comp, "dot", outs, d.shape, dot=d)
    reduces = tuple(n for n in comp.nodes if n.op is Op.REDUCE and n.attr["axes"])
    if kind == "row" and reduces:
        forms = {(r.operands[0].shape, r.shape) for r in reduces}
        if len(forms) == 1 and all(_trailing(tuple(r.attr["axes"]), len(r.operands[0].shape)) for r in reduces):
            ((full, kshape),) = forms
            if all(o.shape == full or squeeze(o.shape) == squeeze(kshape) for o in outs):
                return Schedule(comp, "row", outs, full, reduces, kshape)
    if all(o.op is Op.REDUCE and o.attr["axes"] for o in outs) and \
            len({(o.operands[0].shape, tuple(sorted(o.attr["axes"]))) for o in outs}) == 1:
        return Schedule(comp, "reduce", outs, outs[0].shape, outs, outs[0].shape)
    return Schedule(comp, "loop", outs, max(outs, key=lambda o: math.prod(o.shape)).shape)
