"""Computations: a function as parameter nodes (in index order) and a root, and the
walk that orders a graph's nodes. Apart from :mod:`axle.ir.module` (which re-exports both)
so that the op table, whose attribute schema checks computation-valued attributes, needs
no node class: nodes read their traits from the op table.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..errors import VerifierError
from .literal import BIG_BYTES, Literal
from .opcodes import Op
from .types import TupleType, Type

if TYPE_CHECKING:
    from .module import Node


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


def _attr_key(v: Any) -> Any:
    """An attribute value as structure: computations by what they compute, not by name; a
    big constant by its digest (a key that held the array kept every weight of a compiled
    model alive a second time in the backends' caches, which keep such keys)."""
    if isinstance(v, Literal) and v.array.nbytes >= BIG_BYTES:
        return ("literal", v.array.dtype.str, v.array.shape, v.digest())
    if isinstance(v, Computation):
        return v.structural_key
    if isinstance(v, tuple) and v and all(isinstance(c, Computation) for c in v):
        return tuple(c.structural_key for c in v)
    return v


def called_computations(n: Node) -> list[Computation]:
    """The computations a node calls through its attributes (a fusion's, a loop's condition
    and body, a conditional's branches), in attribute order."""
    out: list[Computation] = []
    for _, v in n.attrs:
        if isinstance(v, Computation):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend(c for c in v if isinstance(c, Computation))
    return out


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
             tuple((k, _attr_key(v)) for k, v in n.attrs), n.type)
            for n in self.nodes
        ) + (index[self.root.uid],)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Computation) and self.structural_key == other.structural_key

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:  # a tuple does not cache its hash: the interpreter's program cache asks often
        return hash(self.structural_key)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def with_root(self, root: Node) -> Computation:
        return Computation(self.name, self.parameters, root)


def inline(comp: Computation, args: Sequence[Node], env: dict[int, Node] | None = None) -> Node:
    """``comp``'s root with its parameters replaced by ``args`` (new nodes where an operand
    changed; locations kept): how a pass or the frontend splices a computation in. ``env``,
    when given, is filled with each of ``comp``'s nodes' uid -> the node standing for it."""
    if env is None:
        env = {}
    env.update({p.uid: a for p, a in zip(comp.parameters, args, strict=True)})
    for n in comp.nodes:
        if n.uid not in env:
            ops = tuple(env[o.uid] for o in n.operands)
            env[n.uid] = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
    return env[comp.root.uid]
