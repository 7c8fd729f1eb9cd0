"""``axle.custom_jvp``: a function whose derivative is a rule the user gives.

A call of a ``custom_jvp`` function outside any transformation (eagerly, inside ``jit``,
inside a loop body) simply runs the function: the forward is the primitives it is made of,
fused and compiled like any other code. Inside a transformation's private trace (capture.py:
``grad``, ``vjp``, ``jvp``, ``linearize``, ``vmap`` and their Jacobians) the call is recorded
as one marker node, a custom-call of target :data:`TARGET` whose operands are the call's
array arguments; the function is traced once alongside only to learn its output types.
Every replay turns the marker back into a call of the function in its caller's mode, so
the marker never reaches a compiled module, and a nested transformation records the call
again in its own trace. The rule tables then use the user's rule:

- forward mode (jvp.py): the rule, called with the primal values and the tangents;
- reverse mode (rules.py): the VJP of the rule's tangent output with respect to the
  tangents (the tangent output is linear in the tangents, so this is its transpose: jax
  transposes the linearized rule the same way);
- vmap (batching.py): a new ``custom_jvp`` whose function and rule are the ``vmap`` of the
  old ones, called in the caller's mode (so ``grad(vmap(f))`` still uses the rule).

Arguments are pytrees; their leaves that are arrays (axle arrays, tracers, NumPy data) or
Python numbers are differentiable inputs, any other leaf is passed to the function and to
the rule unchanged (and as ``None`` among the tangents).
"""
from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import numpy as anp
from ..errors import ArgumentError, DTypeError, ShapeError, TracingError
from ..frontend.array import Array
from ..frontend.control_flow import CUSTOM_OUTPUTS, SubTrace
from ..frontend.device_put import to_buffer
from ..frontend.pytree import TreeDef, flatten, unflatten
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, aval_of, current_trace, is_weak
from ..ir import module as ir_module
from ..ir.module import Node, make_node
from ..ir.ops import Op
from ..ir.types import TensorType
from ..placement import resolve
from .capture import CUSTOM_CALLS, CaptureTrace, CustomOutput
from .control import VJP_FN
from .control_batching import VMAP_FN

__all__ = ["custom_jvp", "custom_vjp", "TARGET"]

#: the custom-call target of the marker nodes (never registered: nothing may run it)
TARGET = "axle.custom_jvp"

_local = threading.local()  # .inline: record no marker (tracing a function for its types)


def _is_dynamic(x: Any) -> bool:
    """A leaf that is a (differentiable) input rather than a static value."""
    return isinstance(x, (Array, Tracer, np.ndarray, np.generic, bool, int, float))


def _inlining() -> bool:
    return bool(getattr(_local, "inline", 0))


class _inline:
    def __enter__(self) -> None:
        _local.inline = getattr(_local, "inline", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _local.inline -= 1


def _takes(fn: Callable[..., Any], n: int, what: str, owner: str) -> None:
    """A clear error where ``fn`` (a user's rule) cannot be called with ``n`` positional
    arguments, rather than Python's TypeError from inside the transformation; a callable
    without a signature (a builtin) is called as it is."""
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError as e:
        raise ArgumentError(f"{owner}: {what} must take {n} positional argument{'s' * (n != 1)} ({e})",
                            where=user_location()) from None
    except ValueError:
        pass


def _call_custom(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A call of a custom_jvp or custom_vjp function: recorded inside a transformation's
    trace or a loop body's, else the function itself."""
    if kwargs:  # by name: resolved to positions, as the rules get a tuple of arguments
        bound = inspect.signature(self.fun).bind(*args, **kwargs)
        if bound.kwargs:
            raise ArgumentError(f"{self.kind} {self.name}: keyword-only arguments "
                                f"({', '.join(bound.kwargs)}) are not supported", where=user_location())
        args = bound.args
    missing = self.missing()
    if missing is not None:
        raise ArgumentError(f"{self.kind} {self.name}: {missing}", where=user_location())
    trace = current_trace()
    if isinstance(trace, CaptureTrace) and not _inlining():
        return _record(self, trace, args)
    if isinstance(trace, SubTrace) and not _inlining():
        return _record_in_sub(self, trace, args)
    return self.fun(*args)


class custom_jvp:
    """A function with a user-given JVP rule, honoured by ``grad``, ``vjp``, ``jvp``,
    ``linearize``, ``vmap`` (and the Jacobians), inside or outside ``jit``::

        @axle.custom_jvp
        def f(x):
            return anp.maximum(x, 0)

        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            y = f(x)
            return y, anp.where(y > 0, t, 0)

    The rule gets the tuple of arguments and a tuple of tangents of the same structure
    (zeros for non-float arrays, None for non-array leaves) and returns ``(out, t_out)``
    with ``t_out`` shaped like ``out``; ``t_out`` must be linear in the tangents (reverse
    mode transposes it). Derivatives flow only through the arguments: values the function
    closes over are constants to the rule.
    """

    def __init__(self, fun: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.jvp: Callable[..., Any] | None = None
        self.name: str = getattr(fun, "__name__", "custom_jvp")

    kind = "custom_jvp"

    def missing(self) -> str | None:
        return None if self.jvp is not None else f"no JVP rule defined; give one with @{self.name}.defjvp"

    def defjvp(self, jvp: Callable[..., Any]) -> Callable[..., Any]:
        """Sets the rule ``jvp(primals, tangents) -> (out, t_out)``; returns it (a decorator)."""
        _takes(jvp, 2, "the JVP rule jvp(primals, tangents)", f"custom_jvp {self.name}")
        self.jvp = jvp
        return jvp

    def defjvps(self, *rules: Callable[..., Any] | None) -> None:
        """One rule per positional argument, ``rule(t_i, out, *args) -> t_out`` (None: the
        output does not depend on that argument); the tangents are summed."""
        def jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
            if len(rules) != len(primals):
                raise ArgumentError(f"custom_jvp {self.name}: defjvps got {len(rules)} rules for "
                                    f"{len(primals)} arguments", where=user_location())
            out = self.fun(*primals)
            total = None
            for i, (rule, t) in enumerate(zip(rules, tangents)):
                if rule is None or t is None:
                    continue
                _takes(rule, 2 + len(primals), f"defjvps rule {i}, rule(t, out, *args),", f"custom_jvp {self.name}")
                part = rule(t, out, *primals)
                total = part if total is None else total + part
            if total is None:
                total = _zeros_like_tree(out)
            return out, total
        self.jvp = jvp

    __call__ = _call_custom

    def __repr__(self) -> str:
        return f"custom_jvp({self.name})"


class custom_vjp:
    """A function with a user-given VJP, honoured by ``grad``, ``vjp``, ``jacrev`` and
    ``vmap`` (forward mode has no rule: a clear error)::

        @axle.custom_vjp
        def clip_gradient(x):
            return x

        def fwd(x):
            return x, None                       # (output, residuals for bwd)

        def bwd(res, ct):
            return (anp.clip(ct, -1.0, 1.0),)    # one cotangent per argument (None: zero)

        clip_gradient.defvjp(fwd, bwd)

    ``fwd`` takes the function's arguments and returns ``(out, residuals)``, a pytree of
    arrays the backward pass reads; ``bwd(residuals, ct)`` gets the output's cotangent and
    returns a tuple with one entry per argument, shaped like it (None for no cotangent).
    """

    kind = "custom_vjp"

    def __init__(self, fun: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self.name: str = getattr(fun, "__name__", "custom_vjp")

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Sets ``fwd(*args) -> (out, residuals)`` and ``bwd(residuals, ct) -> tuple``."""
        _takes(bwd, 2, "bwd(residuals, ct)", f"custom_vjp {self.name}")
        self.fwd, self.bwd = fwd, bwd

    def missing(self) -> str | None:
        return None if self.bwd is not None else f"no VJP rule defined; give one with {self.name}.defvjp(fwd, bwd)"

    __call__ = _call_custom

    def __repr__(self) -> str:
        return f"custom_vjp({self.name})"


def _zeros_like_tree(tree: Any) -> Any:
    leaves, td = flatten(tree)
    return unflatten(td, [anp.zeros_like(x) for x in leaves])


class _Call(CustomOutput):
    """One recorded call: the function, where its array arguments sit among the leaves of
    its arguments, the static leaves, and the output structure and types."""

    def __init__(self, fn: Any, in_tree: TreeDef, leaves: Sequence[Any], dynamic: Sequence[int],
                 out_tree: TreeDef, out_types: Sequence[TensorType], where: str | None) -> None:
        self.fn = fn
        self.in_tree = in_tree
        self.dynamic = list(dynamic)
        self.weak = [is_weak(leaves[i]) for i in dynamic]
        # static leaves kept; the dynamic ones (tracers of the recording trace) are given per call
        self.leaves = [None if i in set(dynamic) else x for i, x in enumerate(leaves)]
        self.out_tree = out_tree
        self.out_types = list(out_types)
        self.where = where
        self._memo: tuple[Any, list[Any], list[Any]] | None = None
        self._batched: tuple[Any, tuple[Any, int], list[Any], Any] | None = None  # batch_rule's

    def args(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """The call's arguments with ``values`` as its dynamic leaves."""
        leaves = list(self.leaves)
        for i, v, weak in zip(self.dynamic, values, self.weak):
            if weak and (isinstance(v, (bool, int, float)) or isinstance(v, np.ndarray) and v.ndim == 0):
                # a Python number's value, replayed eagerly: a weakly typed array (the
                # function was traced with an array for it, and may read .dtype or .shape)
                v = Array(to_buffer(v, resolve(None)), weak=True)
            leaves[i] = v
        return unflatten(self.in_tree, leaves)

    def tangents(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """The tangent tuple for the dynamic leaves' ``values`` (None for static leaves)."""
        leaves: list[Any] = [None] * len(self.leaves)
        for i, v in zip(self.dynamic, values):
            leaves[i] = v
        return unflatten(self.in_tree, leaves)

    def outputs(self, values: Sequence[Any]) -> list[Any]:
        """The function's output leaves for the dynamic leaves ``values``, in the caller's
        mode (one evaluation per replayed call, however many outputs read it)."""
        memo, trace = self._memo, current_trace()
        if (memo is not None and memo[0] is trace and len(memo[1]) == len(values)
                and all(a is b for a, b in zip(memo[1], values))):
            return memo[2]
        out = self.fn(*self.args(values))
        leaves, td = flatten(out)
        self._check(td, leaves, "the function", "output")
        # host values (the function ran on Python numbers or NumPy data) become arrays, as
        # every other replayed node's value is
        leaves = [x if isinstance(x, (Array, Tracer)) else anp.asarray(x, dtype=t.dtype.np)
                  for x, t in zip(leaves, self.out_types)]
        self._memo = (trace, list(values), leaves)
        return leaves

    def value(self, n: Node, values: Sequence[Any]) -> Any:
        return self.outputs(values)[_index(n)]

    def rule(self, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """The user's rule on the dynamic leaves' primal values and tangents, checked: the
        output leaves and their tangents."""
        assert self.fn.jvp is not None
        res = self.fn.jvp(self.args(primals), self.tangents(tangents))
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            raise TracingError(f"custom_jvp {self.fn.name}: the JVP rule must return a pair (out, tangent_out), "
                               f"got {type(res).__name__}", where=self.where)
        outs, out_td = flatten(res[0])
        self._check(out_td, outs, "the JVP rule", "primal output")
        touts, t_td = flatten(res[1])
        self._check(t_td, touts, "the JVP rule", "tangent output")
        return outs, touts

    def forward(self, primals: Sequence[Any]) -> tuple[list[Any], Any]:
        """custom_vjp: ``fwd`` on the dynamic leaves' values, checked: the output leaves and
        the residuals."""
        args = self.args(primals)
        _takes(self.fn.fwd, len(args), "fwd, called with the function's arguments,", f"custom_vjp {self.fn.name}")
        res = self.fn.fwd(*args)
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            raise TracingError(f"custom_vjp {self.fn.name}: fwd must return a pair (out, residuals), got "
                               f"{type(res).__name__}", where=self.where)
        outs, td = flatten(res[0])
        self._check(td, outs, "fwd", "output")
        return outs, res[1]

    def backward(self, residuals: Any, cts: Sequence[Any], types: Sequence[TensorType]) -> list[Any]:
        """custom_vjp: ``bwd`` for the output leaves' cotangents ``cts``, checked: one
        cotangent (or None) per dynamic leaf, whose types are ``types``."""
        where, name = self.where, f"custom_vjp {self.fn.name}"
        got = self.fn.bwd(residuals, unflatten(self.out_tree, list(cts)))
        n_args = len(self.in_tree.children)
        if not (isinstance(got, (tuple, list)) and len(got) == n_args):
            raise ShapeError(f"{name}: bwd must return a tuple with one cotangent per argument ({n_args}), got "
                             f"{type(got).__name__}{f' of {len(got)}' if isinstance(got, (tuple, list)) else ''}",
                             where=where)
        leaves: list[Any] = []
        for i, (g, td) in enumerate(zip(got, self.in_tree.children)):
            if g is None:
                leaves += [None] * td.num_leaves
                continue
            gl, gtd = flatten(g)
            if gtd != td:
                raise ShapeError(f"{name}: bwd's cotangent {i} has structure {gtd}, argument {i} {td}", where=where)
            leaves += gl
        out = []
        for i, t in zip(self.dynamic, types):
            g = leaves[i]
            if g is not None:
                gt = aval_of(g)
                if gt.shape != t.shape or (t.dtype.is_float and gt.dtype != t.dtype):
                    raise (ShapeError if gt.shape != t.shape else DTypeError)(
                        f"{name}: bwd's cotangent for leaf {i} of the arguments is {gt}, the argument is {t}; "
                        f"they must have the same shape and dtype", where=where)
            out.append(g)
        return out

    def _check(self, td: TreeDef, leaves: Sequence[Any], who: str, what: str) -> None:
        name = f"{self.fn.kind} {self.fn.name}"
        if td != self.out_tree:
            raise ShapeError(f"{name}: {who}'s {what} has structure {td}, the function's output "
                             f"{self.out_tree}", where=self.where)
        for k, (x, t) in enumerate(zip(leaves, self.out_types)):
            got = aval_of(x)
            if got.shape != t.shape:
                raise ShapeError(f"{name}: {who}'s {what} {k} is {got}, the function's output is {t}; "
                                 f"they must have the same shape", where=self.where)
            if got.dtype != t.dtype:
                raise DTypeError(f"{name}: {who}'s {what} {k} is {got}, the function's output is {t}; "
                                 f"they must have the same dtype", where=self.where)


def _index(n: Node) -> int:
    return int(n.attr["config"].rsplit(":", 1)[1])


def _record(fn: Any, trace: CaptureTrace, args: tuple[Any, ...]) -> Any:
    """The call recorded into a transformation's trace: one marker node per output leaf."""
    where = user_location()
    leaves, in_tree = flatten(args)
    dynamic = [i for i, x in enumerate(leaves) if _is_dynamic(x)]
    nodes = [trace.to_node(leaves[i], fn.name) for i in dynamic]
    first = next(ir_module._ids)  # nodes made from here on are the function's own
    traced = list(leaves)
    for i, node in zip(dynamic, nodes):
        traced[i] = Tracer(trace, node, weak=is_weak(leaves[i]))
    with _inline():  # only its types are needed: no marker inside
        out = fn.fun(*unflatten(in_tree, traced))
    out_leaves, out_tree = flatten(out)
    out_nodes = [trace.to_node(o, fn.name) for o in out_leaves]
    _check_closure(fn, trace, out_nodes, set(nodes), first, where)
    call = _Call(fn, in_tree, leaves, dynamic, out_tree, [o.tensor_type for o in out_nodes], where)
    outs = []
    for k, (o, leaf) in enumerate(zip(out_nodes, out_leaves)):
        t = o.tensor_type
        marker = make_node(Op.CUSTOM_CALL, nodes, {"target": TARGET, "shape": t.shape, "dtype": t.dtype,
                                                    "config": f"{fn.name}:{k}"}, loc=where)
        CUSTOM_CALLS[marker] = call
        outs.append(Tracer(trace, marker, weak=is_weak(leaf)))
    return unflatten(out_tree, outs)


def _free_values(outs: Sequence[Node], args: set[Node], first: int) -> list[Node]:
    """The values made before the call (not constants, not its arguments) that the nodes
    the function made read: the values it closes over."""
    seen: set[Node] = set()
    free: list[Node] = []
    stack = list(outs)
    while stack:
        v = stack.pop()
        if v in seen or v in args:
            continue
        seen.add(v)
        if v.uid > first and v.op is not Op.PARAMETER:  # made by the function
            stack.extend(v.operands)
        # (a parameter made during the call stands for a value of an enclosing trace that
        # the function read: a sub-trace captures it on first use)
        elif v.op is not Op.CONSTANT:
            free.append(v)
    return free


def _check_closure(fn: Any, trace: CaptureTrace, outs: Sequence[Node], args: set[Node], first: int,
                   where: str | None) -> None:
    """Refuses a function that closes over a value traced inside the transformed function:
    the replays call the function again, where that tracer no longer exists."""
    outer = {node for node, _ in trace.captured}
    for v in _free_values(outs, args, first):
        if v not in outer:
            raise TracingError(f"{fn.kind} {fn.name}: the function closes over a value computed inside the "
                               f"transformed function ({v.type}, made by {v.op.value}); pass it as an argument",
                               where=where)


class _InSub:
    """One output of a call traced into a loop body or branch (as the function's
    primitives): when a transformation replays the sub-computation (the control-flow
    rules do, with ``call_computation``), the function is called again there, so that the
    transformation records it and applies its rule."""

    def __init__(self, call: _Call, inputs: Sequence[Node], index: int) -> None:
        self.call, self.inputs, self.index = call, list(inputs), index

    def moved(self, copies: dict[int, Node]) -> _InSub:
        """The same for a copy of the sub-computation (``copies``: node uid -> its copy)."""
        return _InSub(self.call, [copies.get(i.uid, i) for i in self.inputs], self.index)

    def replay(self, n: Node, env: dict[int, Any]) -> Any:
        if not isinstance(current_trace(), CaptureTrace) or _inlining():
            return None  # not inside a transformation: the primitives, as traced
        if any(i.uid not in env for i in self.inputs):
            return None
        return self.call.outputs([env[i.uid] for i in self.inputs])[self.index]


def _record_in_sub(fn: Any, trace: SubTrace, args: tuple[Any, ...]) -> Any:
    """The call traced into a loop body or branch as the function's primitives, its outputs
    remembered (control_flow.CUSTOM_OUTPUTS) for the transformations that replay it."""
    where = user_location()
    leaves, in_tree = flatten(args)
    dynamic = [i for i, x in enumerate(leaves) if _is_dynamic(x)]
    nodes = [trace.to_node(leaves[i], fn.name) for i in dynamic]
    first = next(ir_module._ids)
    traced = list(leaves)
    for i, node in zip(dynamic, nodes):
        traced[i] = Tracer(trace, node, weak=is_weak(leaves[i]))
    out = fn.fun(*unflatten(in_tree, traced))
    out_leaves, out_tree = flatten(out)
    out_nodes = [trace.to_node(o, fn.name) for o in out_leaves]
    # a value of the body it closes over (or of an enclosing trace) would be gone when the
    # rules replay the body: such a call stays its primitives
    if _free_values(out_nodes, set(nodes), first):
        return out
    call = _Call(fn, in_tree, leaves, dynamic, out_tree, [o.tensor_type for o in out_nodes], where)
    outs = []
    for k, (o, leaf) in enumerate(zip(out_nodes, out_leaves)):
        if o.uid <= first or o in nodes or o in CUSTOM_OUTPUTS or o.op is Op.CONSTANT:
            # not a node of its own (an argument passed through, as clip_gradient's identity
            # forward, a value made before the call, a constant, which the replay reads as it
            # is, another call's output): the hook goes on a same-dtype convert of it
            # (simplify removes it when compiling)
            o = make_node(Op.CONVERT, (o,), {"dtype": o.tensor_type.dtype}, loc=where)
            leaf = Tracer(trace, o, weak=is_weak(leaf))
        CUSTOM_OUTPUTS[o] = _InSub(call, nodes, k)
        outs.append(leaf)
    return unflatten(out_tree, outs)


# ------------------------------------------------------------------ the rule tables' entries


def is_custom(n: Node) -> bool:
    return n.op is Op.CUSTOM_CALL and n in CUSTOM_CALLS


def _call(n: Node) -> _Call:
    call = CUSTOM_CALLS[n]
    assert isinstance(call, _Call)
    return call


def _zeros(x: Any, n: Node, weak: bool) -> Any:
    """A zero tangent for operand value ``x`` of node ``n``: a Python zero for a weakly
    typed operand (a Python number), so that it promotes as the number does."""
    t = n.tensor_type
    if weak and t.rank == 0:
        return t.dtype.np.type(0).item()
    return anp.zeros(t.shape, t.dtype.np) if not isinstance(x, (Array, Tracer)) else anp.zeros_like(x)


def jvp_rule(n: Node, xs: Sequence[Any], ts: Sequence[Any], out: Any) -> Any:
    """Forward mode: the user's rule, zeros for the operands without a tangent."""
    call = _call(n)
    if call.fn.kind == "custom_vjp":
        raise TracingError(f"custom_vjp {call.fn.name}: forward-mode differentiation (jvp, linearize, jacfwd, "
                           f"hessian) has no rule for a custom_vjp function (as in jax); use custom_jvp",
                           where=call.where)
    full = [t if t is not None else _zeros(x, o, w) for x, t, o, w in zip(xs, ts, n.operands, call.weak)]
    return call.rule(xs, full)[1][_index(n)]


def vjp_call_outputs(n: Node) -> _Call | None:
    """The recorded custom_vjp call whose output marker ``n`` is, else None (reverse mode
    gives such a call all its outputs' cotangents at once: :func:`vjp_call_rule`)."""
    if n.op is not Op.CUSTOM_CALL:
        return None
    call = CUSTOM_CALLS.get(n)
    return call if isinstance(call, _Call) and call.fn.kind == "custom_vjp" else None


def vjp_call_rule(markers: Sequence[Node], xs: Sequence[Any], cts: dict[int, Any]) -> list[Any]:
    """A custom_vjp call's cotangents of its operands ``xs``: ``bwd`` called once, with
    the cotangent of every output leaf (``cts``: by marker uid; zeros where absent)."""
    n = markers[0]
    call = _call(n)
    by_index = {_index(m): cts[m.uid] for m in markers if m.uid in cts}
    _, residuals = call.forward(xs)
    full = [by_index[j] if j in by_index else anp.zeros(t.shape, t.dtype.np) for j, t in enumerate(call.out_types)]
    grads = call.backward(residuals, full, [o.tensor_type for o in n.operands])
    return [g if o.tensor_type.dtype.is_float else None for g, o in zip(grads, n.operands)]


def vjp_rule(n: Node, xs: Sequence[Any], out: Any, ct: Any) -> list[Any]:
    """Reverse mode: the cotangent pulled back through the rule's tangent output, a linear
    function of the tangents of the float operands."""
    vjp = VJP_FN[0]  # the package's reverse mode (set by it: it imports this module)
    call, k = _call(n), _index(n)
    floats = [j for j, o in enumerate(n.operands) if o.tensor_type.dtype.is_float]
    if call.fn.kind == "custom_vjp":
        _, residuals = call.forward(xs)
        cts = [ct if j == k else anp.zeros(t.shape, t.dtype.np) for j, t in enumerate(call.out_types)]
        grads = call.backward(residuals, cts, [o.tensor_type for o in n.operands])
        return [g if j in floats else None for j, g in enumerate(grads)]

    def tangent_out(*ts: Any) -> Any:
        full = [_zeros(x, o, w) for x, o, w in zip(xs, n.operands, call.weak)]
        for j, t in zip(floats, ts):
            full[j] = t
        return call.rule(xs, full)[1][k]

    _, pull = vjp(tangent_out, *[_zeros(xs[j], n.operands[j], call.weak[j]) for j in floats])
    cts = pull(ct)
    res: list[Any] = [None] * len(xs)
    for j, g in zip(floats, cts):
        res[j] = g
    return res


def batch_rule(n: Node, xs: Sequence[Any], flags: Sequence[bool], size: int) -> Any:
    """vmap: a ``custom_jvp`` of the batched function with the batched rule, called in the
    caller's mode (the batch at dimension 0 of every output)."""
    vmap = VMAP_FN[0]
    call = _call(n)
    axes = tuple(0 if f else None for f in flags)

    def fun(*values: Any) -> Any:
        with _inline():  # the forward only: its derivatives are the batched rule's
            return vmap(lambda *v: tuple(call.outputs(v)), in_axes=axes, axis_size=size)(*values)

    # one batched call for all the call's outputs (a custom_vjp's bwd then gets all their
    # cotangents at once, as it would unbatched), as outputs() is one call for all
    memo, trace = call._batched, current_trace()
    if (memo is not None and memo[0] is trace and memo[1] == (axes, size) and len(memo[2]) == len(xs)
            and all(a is b for a, b in zip(memo[2], xs))):
        return memo[3][_index(n)]
    if call.fn.kind == "custom_vjp":
        outs = _batch_vjp(call, fun, axes, xs, size)
        call._batched = (trace, (axes, size), list(xs), outs)
        return outs[_index(n)]
    batched = custom_jvp(fun)
    batched.name = call.fn.name

    @batched.defjvp
    def _(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        def one(p: tuple[Any, ...], t: tuple[Any, ...]) -> tuple[Any, Any]:
            outs, touts = call.rule(p, t)
            return tuple(outs), tuple(touts)
        return vmap(one, in_axes=(axes, axes), axis_size=size)(tuple(primals), tuple(tangents))

    outs = batched(*xs)
    call._batched = (trace, (axes, size), list(xs), outs)
    return outs[_index(n)]


def _batch_vjp(call: _Call, fun: Callable[..., Any], axes: tuple[int | None, ...], xs: Sequence[Any],
               size: int) -> Any:
    """vmap of a custom_vjp call: a custom_vjp of the batched function, whose fwd and bwd
    are the batched ones (an unbatched argument's cotangent summed over the batch)."""
    vmap = VMAP_FN[0]
    batched = custom_vjp(fun)
    batched.name = call.fn.name
    types = [aval_of(x) for x in xs]  # per example: the batch dimension dropped below

    def fwd(*values: Any) -> tuple[Any, Any]:
        def one(*v: Any) -> tuple[Any, Any]:
            outs, res = call.forward(v)
            return tuple(outs), res
        return vmap(one, in_axes=axes, axis_size=size)(*values)

    def bwd(res: Any, cts: tuple[Any, ...]) -> tuple[Any, ...]:
        per_example = [TensorType(t.dtype, t.shape[1:]) if a == 0 else t for t, a in zip(types, axes)]

        def one(r: Any, c: tuple[Any, ...]) -> tuple[Any, ...]:
            gs = call.backward(r, c, per_example)
            return tuple(g if g is not None else anp.zeros(t.shape, t.dtype.np) for g, t in zip(gs, per_example))
        gs = vmap(one, in_axes=(0, 0), axis_size=size)(res, tuple(cts))
        return tuple(g if a == 0 else anp.sum(g, axis=0) for g, a in zip(gs, axes))

    batched.defvjp(fwd, bwd)
    return batched(*xs)
