"""Nodes, computations and modules.

A :class:`Node` is immutable. Its structural identity is ``node.key``: the op, the
operand *nodes*, the attributes and the type. Because operands are themselves canonical
nodes after a bottom-up rebuild, CSE is one dict lookup per node (hash-consing), while
ordinary dicts keyed by nodes stay cheap identity lookups.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..errors import ShapeError, VerifierError
from .fusion_record import FusionRecord, carry_records
from .ops import OPS, Op, Traits
from .types import TensorType, TupleType, Type

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Node:
    op: Op
    operands: tuple["Node", ...]
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
    def dtype(self):  # noqa: ANN201 - DType
        return self.tensor_type.dtype

    def replace(self, **changes: Any) -> "Node":
        """A copy with some fields changed (a fresh node, new uid)."""
        fields = dict(op=self.op, operands=self.operands, attrs=self.attrs, type=self.type,
                      loc=self.loc, name=self.name)
        fields.update(changes)
        return Node(**fields)

    def __repr__(self) -> str:
        return f"<{self.op.value} {self.type} #{self.uid}>"


def post_order(roots: Sequence[Node], through: Callable[[Node], bool] | None = None) -> list[Node]:
    """Every node reachable from roots, operands before users (iterative: deep graphs are
    fine). ``through``: whether to look through a node to its operands (default: always);
    a node it refuses is listed, but not its operands for its sake."""
    seen: set[int] = set()
    order: list[Node] = []
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node.uid in seen:
            continue
        seen.add(node.uid)
        stack.append((node, True))
        if through is None or through(node):
            for o in reversed(node.operands):
                if o.uid not in seen:
                    stack.append((o, False))
    return order


@dataclass(frozen=True, eq=False)
class Computation:
    """A function: parameter nodes (in index order) and a root."""

    name: str
    parameters: tuple[Node, ...]
    root: Node

    def __post_init__(self) -> None:
        for i, p in enumerate(self.parameters):
            if p.op is not Op.PARAMETER or p.attr.get("index") != i:
                raise VerifierError(f"computation %{self.name}: parameter {i} is {p}, not parameter({i})")

    @cached_property
    def nodes(self) -> list[Node]:
        """Topological order; parameters first, even unused ones."""
        rest = [n for n in post_order([self.root]) if n.op is not Op.PARAMETER]
        return list(self.parameters) + rest

    @cached_property
    def users(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {n.uid: [] for n in self.nodes}
        for n in self.nodes:
            for o in n.operands:
                if n not in out[o.uid]:
                    out[o.uid].append(n)
        return out

    @property
    def parameter_types(self) -> list[Type]:
        return [p.type for p in self.parameters]

    @property
    def result_types(self) -> list[Type]:
        t = self.root.type
        return list(t.elements) if isinstance(t, TupleType) else [t]

    @cached_property
    def structural_key(self) -> tuple:
        """Equal for computations that compute the same thing (names ignored)."""
        index = {n.uid: i for i, n in enumerate(self.nodes)}
        return tuple(
            (n.op, tuple(index[o.uid] for o in n.operands),
             tuple((k, v.structural_key if isinstance(v, Computation) else v) for k, v in n.attrs), n.type)
            for n in self.nodes
        ) + (index[self.root.uid],)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Computation) and self.structural_key == other.structural_key

    def __hash__(self) -> int:
        return hash(self.structural_key)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def with_root(self, root: Node) -> "Computation":
        return Computation(self.name, self.parameters, root)


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
                for _, v in n.attrs:
                    if isinstance(v, Computation):
                        visit(v)
            out.append(c)

        visit(self.entry)
        return out

    def with_entry(self, entry: Computation) -> "Module":
        return Module(self.name, entry, carry_records(self.fusion_records, entry))

    def fusion_record(self, fusion: Node) -> FusionRecord | None:
        """The fusion pass's record of an entry fusion node (None: not formed by the pass)."""
        name = fusion.attr["computation"].name if fusion.op is Op.FUSION else None
        return next((r for r in self.fusion_records if r.fusion == name), None)

    def as_text(self) -> str:
        from .printer import print_module

        return print_module(self)

    def as_dot(self) -> str:
        from .dot import module_to_dot

        return module_to_dot(self)

    def __str__(self) -> str:
        return self.as_text()
