"""Tracing a function into a graph of primitives for a transformation to replay.

Every transformation of the autodiff package (``grad``/``vjp``, ``jvp``/``linearize``,
``vmap``) works the same way: trace the function privately over abstract arguments, then
walk the recorded graph calling ``bind`` in the *caller's* mode (eager, auto clusters, or
an enclosing ``jit``/transformation trace), applying a rule table per primitive. Values
from outside (closed-over arrays, tracers of an enclosing trace) become extra parameters
of the graph rather than constants, so the replay sees them as they are: that is what
makes the transformations nest (``vmap(grad(f))``, ``jacfwd(jacrev(f))``, ``jit(vmap(f))``).
"""
from __future__ import annotations

import abc
import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TracingError
from ..frontend import checks
from ..frontend.array import Array
from ..frontend.bind import bind
from ..frontend.control_flow import bind_control
from ..frontend.pytree import TreeDef, flatten, unflatten
from ..frontend.source import user_location
from ..frontend.tracing import Trace, Tracer, trace_context
from ..ir.module import Node, post_order
from ..ir.ops import Op
from ..ir.types import TensorType


class CustomOutput(abc.ABC):
    """What a ``custom_jvp`` call recorded into a graph stands for (custom.py): the replays
    call the function again in their caller's mode, the rule tables apply its rule."""

    @abc.abstractmethod
    def value(self, n: Node, values: Sequence[Any]) -> Any:
        """The value of marker ``n`` (one of the call's outputs) given the values of its
        operands, computed in the caller's mode."""


#: the marker nodes of ``custom_jvp`` calls in captured graphs (a custom-call of target
#: custom.TARGET, never compiled: every replay turns it back into a call of the function)
CUSTOM_CALLS: weakref.WeakKeyDictionary[Node, CustomOutput] = weakref.WeakKeyDictionary()


class CaptureTrace(Trace):
    """A trace that turns values from outside (concrete arrays, outer tracers) into extra
    parameters, so the forward pass can be replayed in the caller's mode."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.captured: list[tuple[Node, Any]] = []
        self._by_id: dict[int, Node] = {}

    def to_node(self, x: Any, fn: str = "grad") -> Node:
        if isinstance(x, Tracer) and x.trace is self:
            return x.node
        if isinstance(x, (Tracer, Array)):
            if isinstance(x, Tracer) and not x.trace.active:
                return super().to_node(x, fn)  # raises the 'escaped tracer' error
            node = self._by_id.get(id(x))
            if node is None:
                node = self.builder.parameter(x.aval, name=f"captured{len(self.captured)}")
                self._by_id[id(x)] = node
                self.captured.append((node, x))
            return node
        return super().to_node(x, fn)


@dataclass
class Graph:
    """A traced function: its argument parameters (one per leaf of the argument tuple), the
    output and aux nodes, and the values captured from outside (node uid -> value)."""

    in_tree: TreeDef
    params: list[Node]
    out_tree: TreeDef
    out_nodes: list[Node]
    aux_tree: TreeDef
    aux_nodes: list[Node]
    captured: dict[int, Any]
    #: --check_indices flags of traced indices: (flag node, message, where), replayed too
    index_checks: list[tuple[Node, str, str | None]]

    @functools.cached_property
    def order(self) -> list[Node]:
        """Every node the outputs, aux and checks need, operands first."""
        return post_order(self.out_nodes + self.aux_nodes + [c[0] for c in self.index_checks])

    def arg_params(self) -> list[list[Node]]:
        """The parameters of each positional argument."""
        out, at = [], 0
        for td in self.in_tree.children:
            out.append(self.params[at:at + td.num_leaves])
            at += td.num_leaves
        return out


def trace_graph(fn: Callable[..., Any], args_tree: TreeDef, avals: Sequence[tuple[TensorType, bool]],
                has_aux: bool, what: str) -> Graph:
    """Traces ``fn(*args)`` where ``args_tree`` is the structure of the argument tuple and
    ``avals`` the (type, weak) of each of its leaves."""
    trace = CaptureTrace(getattr(fn, "__name__", "fn"))
    with trace_context(trace):
        tracers = [trace.new_arg(t, f"p{i}", weak) for i, (t, weak) in enumerate(avals)]
        out = fn(*unflatten(args_tree, tracers))
        aux = None
        if has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TracingError(f"{what}: has_aux=True: the function must return a pair (output, aux)",
                                   where=user_location())
            out, aux = out
        out_leaves, out_tree = flatten(out)
        out_nodes = [trace.to_node(o) for o in out_leaves]
        aux_leaves, aux_tree = flatten(aux)
        aux_nodes = [trace.to_node(a) for a in aux_leaves]
        checks = [(trace.to_node(flag), message, where) for flag, message, where in trace.index_checks]
    return Graph(args_tree, [t.node for t in tracers], out_tree, out_nodes, aux_tree, aux_nodes,
                 {node.uid: value for node, value in trace.captured}, checks)


def constant_of(n: Node) -> np.ndarray:
    """The value of a constant node, as the replay hands it to ``bind``."""
    return np.asarray(n.attr["value"].array)


def apply(n: Node, values: Sequence[Any]) -> Any:
    """``n``'s op applied to ``values`` with ``bind``: a loop or conditional gives a tuple of
    values (read by its get-tuple-elements) for a tuple result."""
    if n.traits.control:
        return bind_control(n.op, values, n.attr)
    if n.op is Op.CUSTOM_CALL and n in CUSTOM_CALLS:
        return CUSTOM_CALLS[n].value(n, values)
    if n.op is Op.GET_TUPLE_ELEMENT and isinstance(values[0], tuple):
        return values[0][n.attr["index"]]
    return bind(n.op, *values, **n.attr)


def replay(graph: Graph, leaves: Sequence[Any]) -> dict[int, Any]:
    """Every node's value (uid -> value), computed with ``bind`` in the caller's mode from
    the argument ``leaves``; the traced index checks are checked (or joined to the
    caller's trace) on the way."""
    env: dict[int, Any] = {p.uid: leaf for p, leaf in zip(graph.params, leaves)}
    env.update(graph.captured)
    for n in graph.order:
        if n.op is Op.CONSTANT:
            env[n.uid] = constant_of(n)
        elif n.op is not Op.PARAMETER:
            env[n.uid] = apply(n, [env[o.uid] for o in n.operands])
    for node, message, where in graph.index_checks:
        checks.replayed(env[node.uid], message, where)
    return env
