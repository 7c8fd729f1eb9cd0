"""JVP rules of the control-flow ops, which differentiate their sub-computations forward.

A rule gets the node, its operand values, their tangents (None: zero) and its output
value, and returns one tangent per result (None: zero). Like the VJP rules of control.py,
the tangent computation is itself a ``while`` or ``conditional`` staged into the current
trace (eagerly, a jit function), so it is jitted, batched by ``vmap`` (``jacfwd``) or
differentiated again like any other code.

- ``while``: a loop over the primal carry and the tangents of the carries that can have
  one: float carries that start with a tangent, and those the body makes read one (a fixed
  point over the body's dependencies, as jax's). Its condition reads the primal carry only,
  so a trip count that depends on data is fine: the tangent carry rides along. The body is
  the JVP of the body. The loop carries the primal again (the original loop still gives
  the primal results): a loop's tangents need its primal values at every trip.
- ``conditional``: a conditional over the same index whose branch k returns the tangents
  of branch k's results (each branch differentiated with ``axle.jvp``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..frontend.control_flow import _staged, _switch_impl, _while_impl, call_computation, results_of
from ..ir.module import Computation, Node
from ..ir.ops import Op
from ..ir.types import TensorType
from .control import _zeros, result_types

#: ``axle.jvp`` (forward.py sets it: it imports the JVP table, which imports this module)
JVP_FN: list[Callable[..., Any]] = []

ControlJvpRule = Callable[[Node, Sequence[Any], Sequence[Any], Any], list[Any]]


def depends(comp: Computation, inputs: set[int]) -> set[int]:
    """The results of ``comp`` (its root tuple's elements) whose value reads one of the
    parameters numbered ``inputs``."""
    marked = {comp.parameters[i].uid for i in inputs}
    reads: dict[int, bool] = {}
    for n in comp.nodes:
        reads[n.uid] = n.uid in marked or any(reads[o.uid] for o in n.operands)
    return {j for j, r in enumerate(results_of(comp.root)) if reads[r.uid]}


def _floats(indices: set[int], types: Sequence[TensorType]) -> set[int]:
    return {j for j in indices if types[j].dtype.is_float}


def carried_tangents(body: Computation, types: Sequence[TensorType], start: set[int]) -> list[int]:
    """The carries of a loop that have a tangent: ``start`` and every float carry the body
    makes read one, trip after trip (a fixed point)."""
    active = set(start)
    while more := _floats(depends(body, active), types) - active:
        active |= more
    return sorted(active)


def jvp_of(comp: Computation, primals: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any],
           out: Sequence[int]) -> tuple[list[Any], list[Any]]:
    """``comp``'s results at ``primals`` and the tangents of its results ``out`` along the
    ``tangents`` of its parameters ``wrt`` (the other parameters are held fixed)."""
    def f(*xs: Any) -> tuple[Any, ...]:
        args = list(primals)
        for j, x in zip(wrt, xs, strict=True):
            args[j] = x
        return tuple(call_computation(comp, args))

    values, t_out = JVP_FN[0](f, tuple(primals[j] for j in wrt), tuple(tangents))
    return list(values), [t_out[j] for j in out]


def _while(n: Node, xs: Sequence[Any], ts: Sequence[Any], out: Any) -> list[Any]:
    cond: Computation = n.attr["condition"]
    body: Computation = n.attr["body"]
    types = result_types(n)
    k = len(types)
    active = carried_tangents(body, types, _floats({j for j, t in enumerate(ts) if t is not None}, types))

    def impl(*a: Any) -> tuple[Any, ...]:
        def step(state: Any) -> Any:
            primal, tangent = state
            return jvp_of(body, primal, active, tangent, active)

        _, tangents = _while_impl(lambda s: call_computation(cond, s[0])[0], step, (list(a[:k]), list(a[k:])),
                                  name="while_loop")
        return tuple(tangents)

    start = [ts[j] if ts[j] is not None else _zeros(types[j]) for j in active]
    found = _staged(impl, *xs, *start)
    tangents: list[Any] = [None] * k
    for j, t in zip(active, found, strict=True):
        tangents[j] = t
    return tangents


def _conditional(n: Node, xs: Sequence[Any], ts: Sequence[Any], out: Any) -> list[Any]:
    index, ops, t_ops = xs[0], list(xs[1:]), list(ts[1:])
    branches: tuple[Computation, ...] = n.attr["branches"]
    types = result_types(n)
    m = len(ops)
    wrt = [j for j, t in enumerate(t_ops) if t is not None]
    hit = sorted(_floats(set().union(*(depends(c, set(wrt)) for c in branches)), types))
    tangents: list[Any] = [None] * len(types)
    if not hit:
        return tangents
    fns = [lambda *a, c=c: tuple(jvp_of(c, a[:m], wrt, a[m:], hit)[1]) for c in branches]
    found = _staged(lambda i, *a: _switch_impl(i, fns, a, name="cond"), index, *ops, *[t_ops[j] for j in wrt])
    for j, t in zip(hit, found, strict=True):
        tangents[j] = t
    return tangents


#: the control ops' JVP rules (jvp.py puts them in its table)
CONTROL_JVP: dict[Op, ControlJvpRule] = {
    Op.WHILE: _while,
    Op.CONDITIONAL: _conditional,
}
