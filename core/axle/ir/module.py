"""Nodes, computations and modules.

A :class:`Node` is immutable. Its structural identity is ``node.key``: the op, the
operand *nodes*, the attributes and the type. Because operands are themselves canonical
nodes after a bottom-up rebuild, CSE is one dict lookup per node (hash-consing), while
ordinary dicts keyed by nodes stay cheap identity lookups.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError, AxleError, ShapeError
from .computation import Computation, called_computations, post_order
from .dot import module_to_dot
from .fusion_record import FusionRecord, carry_records
from .ops import OPS, Op, Traits, canonical_attrs, check_arity, infer_type
from .printer import print_module
from .types import TensorType, Type

if TYPE_CHECKING:
    from .dtypes import DType

__all__ = ["Computation", "Module", "Node", "make_node", "post_order"]

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Node:
    op: Op
    operands: tuple[Node, ...]
    attrs: tuple[tuple[str, Any], ...]
    type: Type
    # Not part of the structure: the user's source line and a readable name.
    loc: str | None = field(default=None, compare=False)
    name: str | None = field(default=None, compare=False)
    uid: int = field(default_factory=lambda: next(_ids), compare=False, repr=False)

    @cached_property
    def key(self) -> tuple:
        return (self.op, self.operands, self.attrs, self.type)

    @cached_property
    def attr(self) -> dict[str, Any]:
        return dict(self.attrs)

    @property
    def traits(self) -> Traits:
        return OPS[self.op].traits

    @property
    def tensor_type(self) -> TensorType:
        if not isinstance(self.type, TensorType):
            raise ShapeError(f"{self.op.value}: the value has tuple type {self.type}, not an array type")
        return self.type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.tensor_type.shape

    @property
    def dtype(self) -> DType:
        return self.tensor_type.dtype

    def replace(self, **changes: Any) -> Node:
        """A copy with some fields changed (a fresh node, new uid)."""
        fields: dict[str, Any] = dict(op=self.op, operands=self.operands, attrs=self.attrs, type=self.type,
                      loc=self.loc, name=self.name)
        fields.update(changes)
        return Node(**fields)

    def __repr__(self) -> str:
        return f"<{self.op.value} {self.type} #{self.uid}>"


def make_node(op: Op, operands: Sequence[Node], attrs: dict[str, Any] | None = None, *,
              loc: str | None = None, name: str | None = None,
              type: Type | None = None) -> Node:  # noqa: A002 - the keyword names Node.type for every caller
    """Creates a checked node. ``type`` is given only for parameters."""
    attrs = dict(attrs or {})
    try:
        check_arity(op, len(operands))
        for k, o in enumerate(operands):
            if not isinstance(o, Node):
                raise ArgumentError(f"{op.value}: operand {k} is a {o.__class__.__name__}, not a node "
                                    f"(build operands with the Builder's methods; pass several as separate arguments)")
        canon = canonical_attrs(op, attrs)
        if op is Op.PARAMETER:
            if not isinstance(type, TensorType):
                raise ShapeError(f"parameter: needs an array type, got {type!r}")
            t = type
        elif op is Op.CONSTANT:
            t = dict(canon)["value"].type
        else:
            t = infer_type(op, [o.type for o in operands], dict(canon))
    except AxleError as e:
        if loc and not e.where:
            raise e.__class__(e.message, where=loc) from None
        raise
    return Node(op, tuple(operands), canon, t, loc=loc, name=name)


@dataclass(frozen=True, eq=False)
class Module:
    """A compilation unit: the entry computation and, through fusion nodes, its callees.

    ``fusion_records``: the fusion pass's decisions (:mod:`axle.ir.fusion_record`), one per
    fusion it formed. ``with_entry`` carries them to the new entry and drops those whose
    fusion is gone; they are not part of the text form (a parsed module has none) and not
    part of a module's identity."""

    name: str
    entry: Computation
    fusion_records: tuple[FusionRecord, ...] = field(default=(), compare=False, repr=False)

    def computations(self) -> list[Computation]:
        """Callees before callers, entry last; each computation once."""
        out: list[Computation] = []
        seen: set[int] = set()

        def visit(c: Computation) -> None:
            if id(c) in seen:
                return
            seen.add(id(c))
            for n in c.nodes:
                for sub in called_computations(n):
                    visit(sub)
            out.append(c)

        visit(self.entry)
        return out

    def with_entry(self, entry: Computation) -> Module:
        return Module(self.name, entry, carry_records(self.fusion_records, entry))

    def fusion_record(self, fusion: Node) -> FusionRecord | None:
        """The fusion pass's record of a fusion node, of the entry or of a computation a loop or
        conditional calls (None: not formed by the pass)."""
        name = fusion.attr["computation"].name if fusion.op is Op.FUSION else None
        return next((r for r in self.fusion_records if r.fusion == name), None)

    def as_text(self) -> str:
        return print_module(self)

    def as_dot(self) -> str:
        return module_to_dot(self)

    def __str__(self) -> str:
        return self.as_text()
