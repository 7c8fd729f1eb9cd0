"""Building modules directly, op by op (like XlaBuilder).

    b = Builder("seed")
    x, y, z = (b.parameter(f32[1024]) for _ in range(3))   # or b.parameter("f32[1024]")
    r = b.reduce(b.add(x, b.mul(y, z)), kind="sum", axes=(0,))
    module = b.build(r)

Every op of the table is a method: ``b.add(x, y)``, ``b.op(Op.ADD, x, y)``.
Shape and dtype errors are raised here, naming the op, the operands and the source line.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import VerifierError
from .dtypes import DType
from .dtypes import dtype as to_dtype
from .literal import Literal
from .module import Computation, Module, Node, make_node
from .ops import OPS, Op, as_int
from .parser import parse_type
from .types import TensorType, TupleType
from .verifier import verify

# Method names for ops whose enum value is not a Python identifier or is long.
_ALIASES: dict[str, Op] = {
    "neg": Op.NEG, "exp": Op.EXP, "sin": Op.SIN, "cos": Op.COS, "sub": Op.SUB, "mul": Op.MUL,
    "div": Op.DIV, "rem": Op.REM, "pow": Op.POW, "max": Op.MAX, "min": Op.MIN,
    "and_": Op.AND, "or_": Op.OR, "not_": Op.NOT, "dot_general": Op.DOT_GENERAL,
    "broadcast_in_dim": Op.BROADCAST_IN_DIM, "get_tuple_element": Op.GET_TUPLE_ELEMENT,
    "rng_bit_generator": Op.RNG_BIT_GENERATOR, "custom_call": Op.CUSTOM_CALL,
}
for _op in Op:
    _ALIASES.setdefault(_op.name.lower(), _op)

# Attributes that name a set of dims. The op table takes them only sorted ascending (one
# spelling, so parsed text is canonical); the builder and lax sort them, so no user is
# refused for the order they wrote.
SET_ATTRS: dict[Op, str] = {Op.REDUCE: "axes"}


def sorted_dims(value: Any) -> Any:
    """A set of dims in canonical (ascending) order. A value that is not a sequence of
    integers is returned as given, for the op table to refuse with its own message."""
    try:
        dims = [as_int(v) for v in value]
    except TypeError:
        return value
    return tuple(sorted(dims))


class Builder:
    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.params: list[Node] = []
        self.loc: str | None = None  # source line attached to nodes built next

    def parameter(self, t: TensorType | str | tuple[Sequence[int], Any], name: str | None = None) -> Node:
        if isinstance(t, str):
            t = parse_type(t)
        elif not isinstance(t, TensorType):
            shape, dt = t
            t = TensorType(to_dtype(dt), tuple(int(s) for s in shape))
        node = make_node(Op.PARAMETER, (), {"index": len(self.params)}, type=t,
                         name=name or f"p{len(self.params)}", loc=self.loc)
        self.params.append(node)
        return node

    def constant(self, value: object, dtype: DType | str | None = None) -> Node:
        lit = value if isinstance(value, Literal) else Literal(value, None if dtype is None else to_dtype(dtype))
        return make_node(Op.CONSTANT, (), {"value": lit}, loc=self.loc)

    def op(self, op: Op, *operands: Node, **attrs: Any) -> Node:
        name = SET_ATTRS.get(op)
        if name in attrs:
            attrs[name] = sorted_dims(attrs[name])
        return make_node(op, operands, attrs, loc=self.loc)

    def __getattr__(self, name: str) -> Any:
        op = _ALIASES.get(name)
        if op is None:
            raise AttributeError(f"Builder has no op {name!r}")

        def build(*operands: Node, **attrs: Any) -> Node:
            return self.op(op, *operands, **attrs)

        build.__name__ = name
        build.__doc__ = OPS[op].doc
        return build

    def computation(self, *roots: Node, name: str | None = None) -> Computation:
        if not roots:
            raise VerifierError(f"Builder {self.name!r}: a computation needs at least one root value")
        for i, r in enumerate(roots):
            if not isinstance(r, Node):
                raise VerifierError(f"Builder {self.name!r}: root {i} is a {type(r).__name__}, not a value "
                                    "made by a Builder")
        root = roots[0] if len(roots) == 1 else make_node(Op.TUPLE, roots)
        return Computation(name or self.name, tuple(self.params), root)

    def build(self, *roots: Node) -> Module:
        """The module whose entry returns ``roots`` (a tuple when there are several)."""
        module = Module(self.name, self.computation(*roots))
        verify(module)
        return module


def constant_like(value: object, t: TensorType) -> Literal:
    return Literal(np.full(t.shape, value, dtype=t.dtype.np))


__all__ = ["Builder", "make_node", "sorted_dims", "SET_ATTRS", "TensorType", "TupleType", "constant_like"]
