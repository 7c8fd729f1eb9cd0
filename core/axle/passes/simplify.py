"""Algebraic simplification: table-driven local rewrites that keep results bit-exact.

Every rewrite here preserves the interpreter's result exactly (NaN-aware), so the
optimizer never changes what a program computes. That rules out some classic rewrites
on floats: ``x * 0 -> 0`` (NaN, inf, -0.0), ``x + 0.0 -> x`` (it would turn -0.0 into
+0.0; ``x + (-0.0) -> x`` is exact and is done), ``x - x -> 0`` (NaN, inf) and
``select(a > b, a, b) -> max`` (NaN) are done for integers only, and ``pow(x, 2)`` stays a
power: the reference's float ``pow`` is not always the correctly rounded ``x * x``.

The tables below are keyed by op; the rules consult op traits and element types, never
op names."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.dtypes import DType
from ..ir.module import Module, Node
from ..ir.ops import Op
from ..ir.reductions import REDUCE_KINDS
from .pipeline import Pass
from .rewrite import full_like, is_splat, like, rebuild_module, splat

Rule = Callable[[Node], "Node | None"]


# ------------------------------------------------------------------------ identities


def _lowest(dt: DType) -> object:
    return -np.inf if dt.is_float else (False if dt.is_bool else np.iinfo(dt.np).min)


def _highest(dt: DType) -> object:
    return np.inf if dt.is_float else (True if dt.is_bool else np.iinfo(dt.np).max)


#: op(x, e) == x for every x (bitwise). Floats: x + (-0.0) and x - (+0.0) are exact,
#: x + (+0.0) is not.
RIGHT_IDENTITY: dict[Op, Callable[[DType], object]] = {
    Op.ADD: lambda d: -0.0 if d.is_float else 0,
    Op.SUB: lambda d: 0,
    Op.MUL: lambda d: 1,
    Op.DIV: lambda d: 1,
    Op.POW: lambda d: 1,
    Op.MAX: _lowest,
    Op.MIN: _highest,
    Op.AND: lambda d: True if d.is_bool else -1,
    Op.OR: lambda d: False if d.is_bool else 0,
}

#: op(x, z) == z for every x; integers and bools only (floats have NaN and inf).
INT_ANNIHILATOR: dict[Op, Callable[[DType], object]] = {
    Op.MUL: lambda d: 0,
    Op.AND: lambda d: False if d.is_bool else 0,
    Op.OR: lambda d: True if d.is_bool else -1,
}

#: op(x, x) == x (max(NaN, NaN) is NaN, so this holds for floats too).
IDEMPOTENT_BINARY = frozenset({Op.MAX, Op.MIN, Op.AND, Op.OR})
#: op(x, x) == 0 for integers.
INT_SELF_ZERO = frozenset({Op.SUB})
#: f(f(x)) == x (negation wraps INT_MIN onto itself, so ints are fine).
INVOLUTION = frozenset({Op.NEG, Op.NOT})
#: f(f(x)) == f(x)
IDEMPOTENT_UNARY = frozenset({Op.ABS, Op.FLOOR, Op.CEIL, Op.SIGN})
#: f(g(x)) == f(x): abs ignores a negation (signed and float values only)
ABSORBS = {Op.ABS: frozenset({Op.NEG})}
#: compare(x, x, dir) for integers and bools
SELF_COMPARE = {"eq": True, "le": True, "ge": True, "ne": False, "lt": False, "gt": False}
#: select(compare(a, b, dir), a, b) for integers: which binary op it is
SELECT_AS = {"gt": Op.MAX, "ge": Op.MAX, "lt": Op.MIN, "le": Op.MIN}

#: conversions that lose nothing: a value survives src -> dst -> src unchanged
_EXACT_CONVERT = {
    (DType.BOOL, d) for d in DType
} | {
    (DType.INT32, DType.INT64), (DType.FLOAT16, DType.FLOAT32),
    (DType.FLOAT16, DType.FLOAT64), (DType.FLOAT32, DType.FLOAT64),
}


def squeeze(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _binary_rules(n: Node) -> Node | None:
    x, y = n.operands
    dt = x.dtype
    ident = RIGHT_IDENTITY.get(n.op)
    if ident is not None:
        e = ident(dt)
        if is_splat(y, e):
            return x
        if n.traits.commutative and is_splat(x, e):
            return y
    ann = INT_ANNIHILATOR.get(n.op)
    if ann is not None and not dt.is_float:
        z = ann(dt)
        if is_splat(y, z) or is_splat(x, z):
            return full_like(n, z)
    if x is y:
        if n.op in IDEMPOTENT_BINARY:
            return x
        if n.op in INT_SELF_ZERO and not dt.is_float:
            return full_like(n, 0)
    return None


def _unary_rules(n: Node) -> Node | None:
    (x,) = n.operands
    if x.op is n.op and n.op in INVOLUTION:
        return x.operands[0]
    if x.op is n.op and n.op in IDEMPOTENT_UNARY:
        return x
    if x.op in ABSORBS.get(n.op, ()) and not n.dtype.is_unsigned:  # unsigned abs(-x) is -x, wrapped
        return like(n, n.op, x.operands)
    return None


def _compare(n: Node) -> Node | None:
    x, y = n.operands
    if x is y and not x.dtype.is_float:
        return full_like(n, SELF_COMPARE[n.attr["direction"]])
    return None


def _select(n: Node) -> Node | None:
    p, a, b = n.operands
    if a is b:
        return a
    if is_splat(p, True):
        return a
    if is_splat(p, False):
        return b
    if p.op is Op.NOT:  # select(!p, a, b) = select(p, b, a): one op fewer
        return like(n, Op.SELECT, (p.operands[0], b, a))
    if p.op is Op.COMPARE and not a.dtype.is_float and p.operands[0].dtype == a.dtype:
        c0, c1 = p.operands
        op = SELECT_AS.get(p.attr["direction"])
        if op is not None and ((c0, c1) == (a, b)):
            return like(n, op, (a, b))
        if op is not None and ((c0, c1) == (b, a)):  # select(b > a, a, b) = min(a, b)
            return like(n, Op.MIN if op is Op.MAX else Op.MAX, (a, b))
    return None


# ----------------------------------------------------------------------- data movement


def _reshape(n: Node) -> Node | None:
    (x,) = n.operands
    if x.shape == n.shape:
        return x
    if x.op is Op.RESHAPE:
        return like(n, Op.RESHAPE, x.operands, shape=n.shape)
    if x.op is Op.BROADCAST_IN_DIM and x.operands[0].shape == ():  # a splat stays a splat
        return like(n, Op.BROADCAST_IN_DIM, x.operands, shape=n.shape, broadcast_dimensions=())
    return None


def _transpose(n: Node) -> Node | None:
    (x,) = n.operands
    perm = n.attr["permutation"]
    if perm == tuple(range(len(perm))):
        return x
    if x.op is Op.TRANSPOSE:
        inner = x.attr["permutation"]
        return like(n, Op.TRANSPOSE, x.operands, permutation=tuple(inner[p] for p in perm))
    return None


def _broadcast(n: Node) -> Node | None:
    (x,) = n.operands
    dims = n.attr["broadcast_dimensions"]
    if x.shape == n.shape and dims == tuple(range(len(dims))):
        return x
    if x.op is Op.RESHAPE and 1 not in x.operands[0].shape and squeeze(x.shape) == x.operands[0].shape:
        # broadcast(reshape(y)) where the reshape only adds unit dims (keepdims=True):
        # broadcast y directly, mapping its dims where the reshape put them.
        y = x.operands[0]
        nonunit = [dims[j] for j, d in enumerate(x.shape) if d != 1]
        return like(n, Op.BROADCAST_IN_DIM, (y,), shape=n.shape, broadcast_dimensions=tuple(nonunit))
    if x.op is Op.BROADCAST_IN_DIM:
        inner = x.attr["broadcast_dimensions"]
        return like(n, Op.BROADCAST_IN_DIM, x.operands, shape=n.shape,
                    broadcast_dimensions=tuple(dims[d] for d in inner))
    return None


def _convert(n: Node) -> Node | None:
    (x,) = n.operands
    to = n.attr["dtype"]
    if x.dtype is to:
        return x
    if x.op is Op.CONVERT:
        src = x.operands[0]
        if (src.dtype, x.dtype) in _EXACT_CONVERT:
            return src if src.dtype is to else like(n, Op.CONVERT, (src,), dtype=to)
    return None


def _slice(n: Node) -> Node | None:
    (x,) = n.operands
    a = n.attr
    if all(s == 0 for s in a["start"]) and a["limit"] == x.shape and all(s == 1 for s in a["stride"]):
        return x
    return None


def _pad(n: Node) -> Node | None:
    a = n.attr
    if not any(a["low"] + a["high"] + a["interior"]):
        return n.operands[0]
    return None


def _reverse(n: Node) -> Node | None:
    (x,) = n.operands
    if all(x.shape[d] <= 1 for d in n.attr["dimensions"]):
        return x
    if x.op is Op.REVERSE and x.attr["dimensions"] == n.attr["dimensions"]:
        return x.operands[0]
    return None


def _concatenate(n: Node) -> Node | None:
    live = [o for o in n.operands if o.shape[n.attr["dimension"]] > 0]
    if len(live) == 1:
        return live[0]
    if len(live) < len(n.operands) and live:
        return like(n, Op.CONCATENATE, live, dimension=n.attr["dimension"])
    return None


def _reduce(n: Node) -> Node | None:
    """A reduction over no axes returns its operand bit for bit, except a float sum: it
    adds its identity +0.0, which turns -0.0 into +0.0."""
    x = n.operands[0]
    if not n.attr["axes"] and (REDUCE_KINDS[n.attr["kind"]].combiner is not Op.ADD or not x.dtype.is_float):
        return x
    return None


RULES: dict[Op, tuple[Rule, ...]] = {
    Op.COMPARE: (_compare,),
    Op.SELECT: (_select,),
    Op.RESHAPE: (_reshape,),
    Op.TRANSPOSE: (_transpose,),
    Op.BROADCAST_IN_DIM: (_broadcast,),
    Op.CONVERT: (_convert,),
    Op.SLICE: (_slice,),
    Op.PAD: (_pad,),
    Op.REVERSE: (_reverse,),
    Op.CONCATENATE: (_concatenate,),
    Op.REDUCE: (_reduce,),
}


def _rules_for(n: Node) -> tuple[Rule, ...]:
    own = RULES.get(n.op, ())
    t = n.traits
    if t.elementwise and len(n.operands) == 2 and n.op is not Op.COMPARE:
        return (_binary_rules,) + own
    if t.elementwise and len(n.operands) == 1:
        return (_unary_rules,) + own
    return own


def simplify_node(n: Node) -> Node | None:
    """The first rule's rewrite of ``n`` (operands already simplified), or None."""
    if n.traits.side_effect or n.traits.structural:
        return None
    for rule in _rules_for(n):
        r = rule(n)
        if r is not None and r is not n:
            return r
    return None


class AlgebraicSimplifier(Pass):
    """Local rewrites that make the graph smaller without changing any result."""

    name = "simplify"

    def run(self, module: Module) -> tuple[Module, bool]:
        out = rebuild_module(module, simplify_node)
        return out, out is not module


__all__ = ["AlgebraicSimplifier", "simplify_node", "RULES", "splat"]
