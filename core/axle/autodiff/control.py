"""VJP rules of the control-flow ops, which differentiate their sub-computations.

A rule gets the node, its operand values, its output value and one cotangent per result
(None: zero), and returns one cotangent per operand (None for the non-float ones). The
rules run in the caller's mode like every VJP rule: the backward loop or branch is itself
a ``while`` or ``conditional`` staged into the current trace (eagerly, a jit function).

- ``conditional``: a conditional over the same index whose branch k is the pullback of
  branch k (each branch traced once, with ``axle.vjp`` of the branch replayed op by op).
- ``while`` with a static trip count N (a counted loop: ``fori_loop`` with Python int
  bounds, ``scan``): a forward loop stacks the carry each trip starts with (N rows per
  carry), then a backward loop runs the body's pullback from trip N-1 down to 0 on the
  stacked rows. A loop whose trip count depends on data has no reverse mode (as in jax).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import TracingError
from ..frontend.bind import bind
from ..frontend.control_flow import _read_row, _staged, _switch_impl, _while_impl, _write_row, call_computation
from ..frontend.source import user_location
from ..ir.module import Computation, Node
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType
from ..passes.control import static_trip_count

#: ``axle.vjp`` (autodiff/__init__.py sets it: it imports this module)
VJP_FN: list[Callable[..., Any]] = []

ControlRule = Callable[[Node, Sequence[Any], Any, Sequence[Any]], list[Any]]


def result_types(n: Node) -> list[TensorType]:
    t = n.type
    return list(t.elements) if isinstance(t, TupleType) else [t]


def _zeros(t: TensorType) -> Any:
    return bind(Op.BROADCAST_IN_DIM, np.zeros((), t.dtype.np), shape=t.shape, broadcast_dimensions=())


def _filled(cts: Sequence[Any], types: Sequence[TensorType]) -> list[Any]:
    return [c if c is not None else _zeros(t) for c, t in zip(cts, types, strict=True)]


def pullback(comp: Computation, primals: Sequence[Any], cts: Sequence[Any]) -> list[Any]:
    """Cotangents of ``comp``'s parameters at ``primals`` for cotangents ``cts`` of its
    results (zeros for the integer parameters)."""
    _, pull = VJP_FN[0](lambda *p: tuple(call_computation(comp, p)), *primals)
    return list(pull(tuple(cts)))


def _float_only(n: Node, grads: Sequence[Any], skip: int) -> list[Any]:
    """One cotangent per operand of ``n``: None for the first ``skip`` and the non-float ones."""
    out: list[Any] = [None] * skip
    for o, g in zip(n.operands[skip:], grads, strict=True):
        out.append(g if isinstance(o.type, TensorType) and o.dtype.is_float else None)
    return out


def _conditional(n: Node, xs: Sequence[Any], out: Any, cts: Sequence[Any]) -> list[Any]:
    index, ops = xs[0], list(xs[1:])
    m = len(ops)
    branches: tuple[Computation, ...] = n.attr["branches"]
    fns = [lambda *a, c=c: tuple(pullback(c, a[:m], a[m:])) for c in branches]
    grads = _staged(lambda i, *a: _switch_impl(i, fns, a, name="cond"), index, *ops,
                    *_filled(cts, result_types(n)))
    return _float_only(n, list(grads), 1)


def _while(n: Node, xs: Sequence[Any], out: Any, cts: Sequence[Any]) -> list[Any]:
    trips = static_trip_count(n)
    if trips is None:
        raise TracingError("reverse-mode differentiation of a while_loop whose trip count depends on data is not "
                           "supported (as in jax): use fori_loop with Python int bounds, or scan",
                           where=n.loc or user_location())
    body: Computation = n.attr["body"]
    types = result_types(n)
    k = len(types)
    # carries the body passes through unchanged (closed-over values) are the same every
    # trip: only the others are stacked
    varying = [j for j, (p, r) in enumerate(zip(body.parameters, body.root.operands)) if r is not p]

    def impl(*a: Any) -> tuple[Any, ...]:
        init, ct0 = list(a[:k]), list(a[k:])
        stacks0 = [bind(Op.BROADCAST_IN_DIM, np.zeros((), types[j].dtype.np), shape=(trips,) + types[j].shape,
                        broadcast_dimensions=()) for j in varying]

        def forward(state: Any) -> Any:  # the varying carries each trip starts with, stacked by trip
            t, carry, stacks = state
            stacks = [_write_row(s, t, carry[j]) for s, j in zip(stacks, varying)]
            return t + 1, call_computation(body, carry), stacks

        _, _, stacks = _while_impl(lambda s: s[0] < np.int32(trips), forward, (np.int32(0), init, stacks0),
                                   name="while_loop")

        def backward(state: Any) -> Any:  # step t undoes trip N-1-t; counting up keeps it a counted loop
            t, ct = state
            carry = list(init)
            for s, j in zip(stacks, varying):
                carry[j] = _read_row(s, (trips - 1) - t)
            return t + 1, pullback(body, carry, ct)

        _, ct = _while_impl(lambda s: s[0] < np.int32(trips), backward, (np.int32(0), ct0), name="while_loop")
        return tuple(ct)

    filled = _filled(cts, types)
    grads = filled if trips == 0 else list(_staged(impl, *xs, *filled))
    return _float_only(n, grads, 0)


#: the control ops' VJP rules (the op table's other rules are in rules.py)
CONTROL_VJP: dict[Op, ControlRule] = {
    Op.CONDITIONAL: _conditional,
    Op.WHILE: _while,
}
