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
from ..frontend.array import Array
from ..frontend.pytree import TreeDef, flatten, unflatten
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, aval_of, leaf_aval
from ..ir.dtypes import is_float_numpy
from ..ir.module import Node
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType
from . import custom
from .capture import replay, trace_graph
from .control import CONTROL_VJP, VJP_FN
from .forward import Forward
from .rules import VJP, full
from .vectorize import vmap

__all__ = ["vjp", "grad", "value_and_grad", "jacfwd", "jacrev", "hessian"]


def _leaf_type(x: Any) -> tuple[TensorType, bool]:
    return leaf_aval(x)


class _Linearized:
    """A traced function, its forward values, and what the backward pass needs."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], wrt: Sequence[int], has_aux: bool) -> None:
        leaves, args_tree = flatten(tuple(args))
        graph = trace_graph(fn, args_tree, [_leaf_type(leaf) for leaf in leaves], has_aux, "grad")
        self.arg_trees: list[TreeDef] = list(args_tree.children)
        self.arg_params: list[list[Node]] = graph.arg_params()
        self.out_tree, self.aux_tree = graph.out_tree, graph.aux_tree
        self.out_nodes, aux_nodes = graph.out_nodes, graph.aux_nodes
        # Forward replay in the caller's mode.
        self.order = graph.order
        self.env: dict[int, Any] = replay(graph, leaves)
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
        # A custom_vjp call's outputs (one marker each): its bwd runs once, with every
        # output's cotangent, where the backward walk reaches the last of them (every
        # reader of any of them is behind it by then): marker uid -> the call's markers
        self.vjp_calls: dict[int, list[Node]] = {}
        for n in self.order:
            if (group := custom.vjp_call_outputs(n)) is not None:
                self.vjp_calls.setdefault(id(group), []).append(n)
        self.vjp_calls = {n.uid: ms for ms in self.vjp_calls.values() for n in ms}

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
            if self.vjp_calls and n.uid in self.vjp_calls:
                self._custom_vjp_backward(n, acc)
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


    def _custom_vjp_backward(self, n: Node, acc: dict[int, Any]) -> None:
        """A custom_vjp call's bwd, once, with all its outputs' cotangents: at the marker the
        walk reaches last (the first in order), none before (bwd need not be linear in
        them, as clip_gradient's is not: one call per output would clip each part)."""
        markers = self.vjp_calls[n.uid]
        if n is not markers[0]:
            return
        cts = {m.uid: acc[m.uid] for m in markers if acc.get(m.uid) is not None}
        if not cts:
            return
        outs = custom.vjp_call_rule(markers, [self.env[o.uid] for o in n.operands], cts)
        for o, g in zip(n.operands, outs):
            if g is not None and o.uid in self.active:
                _accumulate(acc, o, g)

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


def _float_argnums(argnums: int | Sequence[int], args: Sequence[Any], what: str) -> list[int]:
    """The differentiated arguments' indices, each checked: in range, float leaves only."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not -len(args) <= i < len(args):
            raise TracingError(f"{what}: argnums {argnums} out of range for {len(args)} arguments",
                               where=user_location())
    idx = [i % len(args) for i in nums]
    for i in idx:
        for leaf in flatten(args[i])[0]:
            if not _leaf_type(leaf)[0].dtype.is_float:
                raise DTypeError(f"{what}: argument {i} has a non-float leaf ({_leaf_type(leaf)[0]}); "
                                 f"derivatives exist only for float inputs", where=user_location())
    return idx


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
                   has_aux: bool = False) -> Callable[..., Any]:
    """A function returning ``(value, grad)`` (``((value, aux), grad)`` with has_aux) where
    ``grad`` is the gradient of the scalar float output with respect to the argument(s)
    ``argnums`` (a tuple of gradients when argnums is a sequence)."""
    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        idx = _float_argnums(argnums, args, "grad")
        lin = _Linearized(fn, args, idx, has_aux)
        out = lin.outputs
        if not isinstance(out, (Array, Tracer)) or out.shape != () or not is_float_numpy(out.dtype):
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



# ------------------------------------------------------------------ Jacobians


def _basis(types: Sequence[TensorType]) -> list[np.ndarray]:
    """The standard basis of the flattened leaves ``types``, split per leaf: leaf j's part
    has shape (N, *shape_j) for N the total size, so row r is the r-th unit vector."""
    sizes = [t.size for t in types]
    eye = np.eye(sum(sizes))
    out, at = [], 0
    for t, s in zip(types, sizes):
        out.append(eye[:, at:at + s].reshape((len(eye),) + t.shape).astype(t.dtype.np))
        at += s
    return out


def _blocks(rows: Any, row_types: Sequence[TensorType], col_shape: tuple[int, ...]) -> list[Any]:
    """A batched result (N, *col_shape) cut into one (*row_shape_j, *col_shape) block per leaf."""
    out, at = [], 0
    for t in row_types:
        block = lax.slice(rows, (at,) + (0,) * len(col_shape), (at + t.size,) + col_shape)
        out.append(lax.reshape(block, t.shape + col_shape))
        at += t.size
    return out


def _jacobian_tree(out_tree: TreeDef, arg_trees: Sequence[TreeDef], blocks: list[list[Any]],
                   argnums: int | Sequence[int]) -> Any:
    """jax's layout: the output's tree holding, per output leaf, the argument(s)' tree of
    blocks d out / d arg leaf."""
    per_out = []
    for row in blocks:
        args, at = [], 0
        for td in arg_trees:
            args.append(unflatten(td, row[at:at + td.num_leaves]))
            at += td.num_leaves
        per_out.append(args[0] if isinstance(argnums, int) else tuple(args))
    return unflatten(out_tree, per_out)


def jacfwd(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The Jacobian of ``fn`` with respect to argument(s) ``argnums`` by forward mode: one
    JVP per input element, batched by ``vmap`` into one computation. Each block has shape
    ``out.shape + arg.shape`` (with has_aux: ``(jacobian, aux)``)."""
    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        idx = _float_argnums(argnums, args, "jacfwd")
        fw = Forward(fn, args, has_aux, "jacfwd")
        arg_params = fw.graph.arg_params()
        wrt = [p for i in idx for p in arg_params[i]]
        in_types = [p.tensor_type for p in wrt]
        slots = {p.uid: k for k, p in enumerate(wrt)}

        def push(*basis: Any) -> list[Any]:
            return fw.push([basis[slots[p.uid]] if p.uid in slots else None for p in fw.graph.params])

        cols = vmap(push)(*_basis(in_types))
        blocks = []
        for n, col in zip(fw.graph.out_nodes, cols):
            t = n.tensor_type
            parts = _blocks(col, in_types, t.shape)  # (*in_shape, *out_shape) each
            blocks.append([_move_axes_last(b, len(p.shape), t.rank) for b, p in zip(parts, in_types)])
        jac = _jacobian_tree(fw.graph.out_tree, [fw.args_tree.children[i] for i in idx], blocks, argnums)
        return (jac, fw.aux()) if has_aux else jac

    return wrapped


def _move_axes_last(x: Any, k: int, rest: int) -> Any:
    """(*a[k], *b[rest]) -> (*b, *a)."""
    return lax.transpose(x, list(range(k, k + rest)) + list(range(k))) if k and rest else x


def jacrev(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The Jacobian of ``fn`` with respect to argument(s) ``argnums`` by reverse mode: one
    VJP per output element, batched by ``vmap`` into one computation. Each block has shape
    ``out.shape + arg.shape`` (with has_aux: ``(jacobian, aux)``)."""
    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        idx = _float_argnums(argnums, args, "jacrev")
        lin = _Linearized(fn, args, idx, has_aux)
        out_types = [n.tensor_type for n in lin.out_nodes]
        for t in out_types:
            if not t.dtype.is_float:
                raise DTypeError(f"jacrev: the function has a non-float output ({t}); reverse mode "
                                 f"differentiates float outputs only", where=user_location())

        def pull(*cts: Any) -> list[Any]:
            return [leaf for g in lin.backward(cts) for leaf in flatten(g)[0]]

        rows = vmap(pull)(*_basis(out_types))  # per input leaf: (N, *in_shape)
        per_in = [_blocks(r, out_types, tuple(aval_of(r).shape[1:])) for r in rows]
        blocks = [[per_in[j][k] for j in range(len(per_in))] for k in range(len(out_types))]
        jac = _jacobian_tree(lin.out_tree, [lin.arg_trees[i] for i in idx], blocks, argnums)
        return (jac, lin.aux) if has_aux else jac

    return wrapped


def hessian(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The Hessian of a scalar function: ``jacfwd(jacrev(fn))`` (forward over reverse)."""
    return jacfwd(jacrev(fn, argnums, has_aux), argnums, has_aux)


VJP_FN[:] = [vjp]  # the control-flow rules differentiate sub-computations with it
