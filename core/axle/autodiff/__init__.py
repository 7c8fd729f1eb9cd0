"""Reverse-mode automatic differentiation: ``axle.vjp``, ``axle.grad``, ``axle.value_and_grad``.

How it works (in the style of a jaxpr-based VJP):

1. The function is traced into a graph of primitives (a private trace; closed-over arrays
   and tracers of an enclosing ``jit``/``grad`` become extra inputs, never constants).
2. The graph is re-evaluated op by op with ``bind`` in the *caller's* mode, so the forward
   values are eager arrays, lazy cluster values or tracers of an enclosing ``jit``.
3. The backward pass walks the graph in reverse, applying each primitive's VJP rule
   (``autodiff/rules.py``) in the same mode and summing cotangents per node.

Hence ``jit(grad(f))`` compiles forward and backward into one module, ``grad`` in auto
mode forms clusters, and ``grad(grad(f))`` works because the rules are ordinary primitives.
Gradients flow only through floating-point values.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax
from .. import numpy as anp
from ..errors import DTypeError, ShapeError, TracingError
from ..frontend import checks
from ..frontend.array import Array
from ..frontend.bind import bind
from ..frontend.control_flow import bind_control
from ..frontend.pytree import TreeDef, flatten, unflatten
from ..frontend.source import user_location
from ..frontend.tracing import Trace, Tracer, aval_of, leaf_aval, trace_context
from ..ir.module import Node, post_order
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType
from .control import CONTROL_VJP, VJP_FN
from .rules import VJP, full

__all__ = ["vjp", "grad", "value_and_grad"]


class _CaptureTrace(Trace):
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


def _leaf_type(x: Any) -> tuple[TensorType, bool]:
    return leaf_aval(x)


class _Linearized:
    """A traced function, its forward values, and what the backward pass needs."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], wrt: Sequence[int], has_aux: bool) -> None:
        trace = _CaptureTrace(getattr(fn, "__name__", "fn"))
        self.arg_trees: list[TreeDef] = []
        self.arg_params: list[list[Node]] = []
        inputs: dict[int, Any] = {}
        with trace_context(trace):
            traced = []
            for a in args:
                leaves, td = flatten(a)
                tracers = []
                for leaf in leaves:
                    t, weak = _leaf_type(leaf)
                    tr = trace.new_arg(t, f"p{len(inputs)}", weak)
                    inputs[tr.node.uid] = leaf
                    tracers.append(tr)
                self.arg_trees.append(td)
                self.arg_params.append([tr.node for tr in tracers])
                traced.append(unflatten(td, tracers))
            out = fn(*traced)
            aux = None
            if has_aux:
                if not (isinstance(out, (tuple, list)) and len(out) == 2):
                    raise TracingError("has_aux=True: the function must return a pair (output, aux)",
                                       where=user_location())
                out, aux = out
            out_leaves, self.out_tree = flatten(out)
            self.out_nodes = [trace.to_node(o) for o in out_leaves]
            aux_leaves, self.aux_tree = flatten(aux)
            aux_nodes = [trace.to_node(a) for a in aux_leaves]
            # --check_indices flags of traced indices: replayed with the forward pass
            index_checks = [(trace.to_node(flag), message, where) for flag, message, where in trace.index_checks]
        for node, value in trace.captured:
            inputs[node.uid] = value
        # Forward replay in the caller's mode.
        self.order = post_order(self.out_nodes + aux_nodes + [c[0] for c in index_checks])
        self.env: dict[int, Any] = {}
        for n in self.order:
            if n.op is Op.PARAMETER:
                self.env[n.uid] = inputs[n.uid]
            elif n.op is Op.CONSTANT:
                self.env[n.uid] = np.asarray(n.attr["value"].array)
            elif n.traits.control:  # a loop or branch: its values, a tuple of them for a tuple
                self.env[n.uid] = bind_control(n.op, [self.env[o.uid] for o in n.operands], n.attr)
            elif n.op is Op.GET_TUPLE_ELEMENT and isinstance(self.env[n.operands[0].uid], tuple):
                self.env[n.uid] = self.env[n.operands[0].uid][n.attr["index"]]
            else:
                self.env[n.uid] = bind(n.op, *[self.env[o.uid] for o in n.operands], **n.attr)
        for node, message, where in index_checks:
            checks.replayed(self.env[node.uid], message, where)
        self.outputs = unflatten(self.out_tree, [self._value(n) for n in self.out_nodes])
        self.aux = unflatten(self.aux_tree, [self._value(n) for n in aux_nodes])
        # Which nodes depend on a differentiated input: only they get cotangents.
        self.wrt = list(wrt)
        active = {p.uid for i in self.wrt for p in self.arg_params[i] if p.dtype.is_float}
        for n in self.order:
            if n.traits.control and any(o.uid in active for o in n.operands):
                if n.op not in CONTROL_VJP:  # a zero cotangent would be a silently wrong gradient
                    raise TracingError(f"reverse-mode differentiation through {n.op.value} is not supported: it "
                                       f"reads a differentiated value (operands "
                                       f"{', '.join(str(o.type) for o in n.operands)} -> {n.type})",
                                       where=n.loc or user_location())
                active.add(n.uid)  # its tuple: get-tuple-element reads the values
            if n.op is Op.PARAMETER or not _is_float(n):
                continue
            if any(o.uid in active for o in n.operands):
                active.add(n.uid)
        self.active = active

    def _value(self, n: Node) -> Any:
        v = self.env[n.uid]
        if isinstance(v, np.ndarray):  # an output that is a constant: give an axle value
            return anp.asarray(v)
        return v

    def backward(self, cts: Sequence[Any]) -> list[Any]:
        """Cotangents of the differentiated arguments, given the outputs' cotangents."""
        acc: dict[int, Any] = {}
        parts: dict[int, list[Any]] = {}  # a control node's tuple: one cotangent per element
        for n, ct in zip(self.out_nodes, cts):
            if ct is not None and n.uid in self.active:
                _accumulate(acc, n, ct)
        for n in reversed(self.order):
            if n.traits.control and n.uid in self.active:
                self._control_backward(n, acc, parts)
                continue
            ct = acc.get(n.uid)
            if ct is None or n.op in (Op.PARAMETER, Op.CONSTANT):
                continue
            if n.op is Op.GET_TUPLE_ELEMENT and n.operands[0].uid in self.active:
                elements = parts.setdefault(n.operands[0].uid, [None] * len(n.operands[0].type.elements))  # type: ignore[union-attr]  # a tuple
                i = n.attr["index"]
                elements[i] = ct if elements[i] is None else lax.add(elements[i], ct)
                continue
            rule = VJP.get(n.op)
            if rule is None:
                continue
            xs = [self.env[o.uid] for o in n.operands]
            outs = rule(n, xs, self.env[n.uid], ct)
            for o, g in zip(n.operands, outs):
                if g is not None and o.uid in self.active:
                    _accumulate(acc, o, g)
        grads = []
        for i in self.wrt:
            leaves = []
            for p in self.arg_params[i]:
                g = acc.get(p.uid)
                leaves.append(g if g is not None else full(0, p))
            grads.append(unflatten(self.arg_trees[i], leaves))
        return grads


    def _control_backward(self, n: Node, acc: dict[int, Any], parts: dict[int, list[Any]]) -> None:
        """A loop's or conditional's rule, given its results' cotangents (from the
        get-tuple-elements that read its tuple, or its own for an array result)."""
        cts = parts.get(n.uid) if isinstance(n.type, TupleType) else [acc.get(n.uid)]
        if cts is None or all(c is None for c in cts):
            return
        outs = CONTROL_VJP[n.op](n, [self.env[o.uid] for o in n.operands], self.env[n.uid], cts)
        for o, g in zip(n.operands, outs):
            if g is not None and o.uid in self.active:
                _accumulate(acc, o, g)


def _is_float(n: Node) -> bool:
    return n.type.__class__ is TensorType and n.tensor_type.dtype.is_float


def _accumulate(acc: dict[int, Any], n: Node, g: Any) -> None:
    t = n.tensor_type
    gt = _aval(g)
    assert gt == t, f"VJP rule produced {gt} for {n.op.value} operand of type {t}"
    prev = acc.get(n.uid)
    acc[n.uid] = g if prev is None else lax.add(prev, g)


def _aval(x: Any) -> TensorType:
    return aval_of(x)


def _ct_like(out: Any, ct: Any) -> Any:
    o = _aval(out)
    c = anp.asarray(ct) if not isinstance(ct, (Array, Tracer)) else ct
    if _aval(c).shape != o.shape:
        raise ShapeError(f"vjp: cotangent shape {_aval(c)} does not match output {o}", where=user_location())
    return c if _aval(c).dtype == o.dtype else lax.convert(c, o.dtype)


def vjp(fn: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """``(out, vjp_fn)`` or ``(out, vjp_fn, aux)``: ``vjp_fn(ct)`` returns one cotangent per
    primal (same pytree structure), for a cotangent ``ct`` shaped like ``out``."""
    lin = _Linearized(fn, primals, range(len(primals)), has_aux)

    def vjp_fn(ct: Any) -> tuple[Any, ...]:
        ct_leaves, td = flatten(ct)
        if td != lin.out_tree:
            raise ShapeError("vjp: the cotangent's structure does not match the output's", where=user_location())
        out_leaves = flatten(lin.outputs)[0]
        return tuple(lin.backward([_ct_like(o, c) for o, c in zip(out_leaves, ct_leaves)]))

    return (lin.outputs, vjp_fn, lin.aux) if has_aux else (lin.outputs, vjp_fn)


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
                   has_aux: bool = False) -> Callable[..., Any]:
    """A function returning ``(value, grad)`` (``((value, aux), grad)`` with has_aux) where
    ``grad`` is the gradient of the scalar float output with respect to the argument(s)
    ``argnums`` (a tuple of gradients when argnums is a sequence)."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        for i in nums:
            if not -len(args) <= i < len(args):
                raise TracingError(f"grad: argnums {argnums} out of range for {len(args)} arguments",
                                   where=user_location())
        idx = [i % len(args) for i in nums]
        for i in idx:
            for leaf in flatten(args[i])[0]:
                if not _leaf_type(leaf)[0].dtype.is_float:
                    raise DTypeError(f"grad: argument {i} has a non-float leaf ({_leaf_type(leaf)[0]}); "
                                     f"gradients exist only for float inputs", where=user_location())
        lin = _Linearized(fn, args, idx, has_aux)
        out = lin.outputs
        if not isinstance(out, (Array, Tracer)) or out.shape != () or out.dtype.kind != "f":
            desc = _aval(out) if isinstance(out, (Array, Tracer)) else type(out).__name__
            raise ShapeError(f"grad: the function must return a float scalar, got {desc}; use vjp for "
                             f"other outputs", where=user_location())
        grads = lin.backward([full(1, lin.out_nodes[0])])
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        return ((out, lin.aux) if has_aux else out), g

    return wrapped


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The gradient of a scalar-valued function (see :func:`value_and_grad`); with has_aux
    it returns ``(grad, aux)``."""
    vg = value_and_grad(fn, argnums, has_aux)

    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        (value, g) = vg(*args)
        if has_aux:
            return g, value[1]
        return g

    return wrapped



VJP_FN[:] = [vjp]  # the control-flow rules differentiate sub-computations with it
