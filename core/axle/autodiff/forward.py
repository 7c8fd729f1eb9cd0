"""Forward-mode automatic differentiation: ``axle.jvp`` and ``axle.linearize``.

The function is traced into a graph (capture.py) and its primal values are computed by a
replay in the caller's mode, as reverse mode does; the tangent pass then walks the graph
forward applying each primitive's JVP rule (jvp.py) to the tangents of its operands.
``linearize`` keeps the primal values and runs only the tangent pass per call. Tangents
flow only through float values; a None tangent is a zero that is never materialized
until an output needs it.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from .. import numpy as anp
from ..errors import ArgumentError, ShapeError
from ..frontend.array import Array
from ..frontend.pytree import flatten, unflatten
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, aval_of, leaf_aval
from ..ir.module import Node
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType
from .capture import Graph, replay, trace_graph
from .control import result_types
from .control_jvp import JVP_FN
from .jvp import JVP, Tangent
from .rules import full

__all__ = ["jvp", "linearize"]


def _is_float(n: Node) -> bool:
    return isinstance(n.type, TensorType) and n.tensor_type.dtype.is_float


class Forward:
    """A traced function with its primal values at ``primals`` (a tuple of arguments)."""

    def __init__(self, fn: Callable[..., Any], primals: Sequence[Any], has_aux: bool, what: str) -> None:
        self.leaves, self.args_tree = flatten(tuple(primals))
        self.graph: Graph = trace_graph(fn, self.args_tree, [leaf_aval(x) for x in self.leaves], has_aux, what)
        self.order = self.graph.order
        self.env = replay(self.graph, self.leaves)
        self.what = what

    def outputs(self) -> Any:
        return unflatten(self.graph.out_tree, [_axle(self.env[n.uid]) for n in self.graph.out_nodes])

    def aux(self) -> Any:
        return unflatten(self.graph.aux_tree, [_axle(self.env[n.uid]) for n in self.graph.aux_nodes])

    def tangent_leaves(self, tangents: Sequence[Any]) -> list[Tangent]:
        """The tangent arguments checked against the primals: same structure, shapes and
        (for float primals) dtypes; tangents of non-float primals are zero."""
        if not isinstance(tangents, (tuple, list)):
            raise ArgumentError(f"{self.what}: tangents must be a tuple or list with one entry per primal, "
                                f"got {type(tangents).__name__}", where=user_location())
        t_leaves, t_tree = flatten(tuple(tangents))
        if t_tree is not self.args_tree:
            raise ShapeError(f"{self.what}: the tangents' structure {t_tree} does not match the primals' "
                             f"{self.args_tree}", where=user_location())
        out: list[Tangent] = []
        for i, (p, t) in enumerate(zip(self.graph.params, t_leaves)):
            pt = p.tensor_type
            # a Python scalar takes the primal's dtype (weak); arrays keep theirs, checked below
            tv = t if isinstance(t, (Array, Tracer)) else anp.asarray(
                t, dtype=pt.dtype.np if isinstance(t, (bool, int, float)) else None)
            tt = aval_of(tv)
            if tt.shape != pt.shape or (pt.dtype.is_float and tt.dtype != pt.dtype):
                raise ShapeError(f"{self.what}: tangent {i} is {tt}, its primal is {pt}; a tangent has its "
                                 f"primal's shape and dtype", where=user_location())
            out.append(tv if pt.dtype.is_float else None)
        return out

    def push(self, tangents: Sequence[Tangent]) -> list[Any]:
        """The output tangents (zeros materialized) for the argument leaves' tangents."""
        tan: dict[int, Any] = {p.uid: t for p, t in zip(self.graph.params, tangents) if t is not None}
        parts: dict[int, list[Tangent]] = {}  # a loop's or conditional's tangents, one per result
        for n in self.order:
            if n.traits.control:
                self._control(n, tan, parts)
                continue
            if n.op is Op.GET_TUPLE_ELEMENT and n.operands[0].uid in parts:
                t = parts[n.operands[0].uid][n.attr["index"]]
                if t is not None:
                    tan[n.uid] = t
                continue
            if n.op in (Op.PARAMETER, Op.CONSTANT) or not _is_float(n):
                continue
            ts = [tan.get(o.uid) for o in n.operands]
            rule = JVP.get(n.op)
            if rule is None or all(t is None for t in ts):
                continue  # NO_JVP: a zero tangent
            t = rule(n, [self.env[o.uid] for o in n.operands], ts, self.env[n.uid])
            assert aval_of(t) == n.tensor_type, f"JVP rule of {n.op.value} gave {aval_of(t)}, not {n.tensor_type}"
            tan[n.uid] = t
        return [tan[n.uid] if n.uid in tan else full(0, n) for n in self.graph.out_nodes]

    def _control(self, n: Node, tan: dict[int, Any], parts: dict[int, list[Tangent]]) -> None:
        """A loop's or conditional's rule (control_jvp.py), when an operand has a tangent."""
        ts = [tan.get(o.uid) for o in n.operands]
        if all(t is None for t in ts):
            return
        found = JVP[n.op](n, [self.env[o.uid] for o in n.operands], ts, self.env[n.uid])
        for t, rt in zip(found, result_types(n), strict=True):
            assert t is None or aval_of(t) == rt, f"JVP rule of {n.op.value} gave {aval_of(t)}, not {rt}"
        if isinstance(n.type, TupleType):
            parts[n.uid] = found
        elif found[0] is not None:
            tan[n.uid] = found[0]

    def tangent_out(self, tangents: Sequence[Any]) -> Any:
        return unflatten(self.graph.out_tree, self.push(self.tangent_leaves(tangents)))


def _axle(v: Any) -> Any:
    return anp.asarray(v) if not isinstance(v, (Array, Tracer)) else v


def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False) -> Any:
    """``(fn(*primals), tangent_out)`` (``(out, tangent_out, aux)`` with has_aux): the
    directional derivative of ``fn`` at ``primals`` along ``tangents`` (a tuple shaped like
    ``primals``), in one forward pass. Outputs that do not depend on a float input get zero
    tangents of their own dtype."""
    if not isinstance(primals, (tuple, list)):
        raise ArgumentError(f"jvp: primals must be a tuple or list of arguments, got {type(primals).__name__}",
                            where=user_location())
    fw = Forward(fn, primals, has_aux, "jvp")
    t_out = fw.tangent_out(tangents)
    return (fw.outputs(), t_out, fw.aux()) if has_aux else (fw.outputs(), t_out)


def linearize(fn: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """``(fn(*primals), f_jvp)`` (``(out, f_jvp, aux)`` with has_aux) where
    ``f_jvp(*tangents)`` is the JVP at ``primals``: the primal values are computed once and
    kept, each call runs only the tangent pass."""
    fw = Forward(fn, primals, has_aux, "linearize")

    @functools.wraps(fn)
    def f_jvp(*tangents: Any) -> Any:
        return fw.tangent_out(tangents)

    return (fw.outputs(), f_jvp, fw.aux()) if has_aux else (fw.outputs(), f_jvp)


JVP_FN[:] = [jvp]  # the control-flow rules differentiate sub-computations with it
