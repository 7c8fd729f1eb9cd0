"""Batching rules of the control-flow ops: ``vmap`` through loops and conditionals.

A rule gets the node, its operand values, which of them are batched (the batch at
dimension 0) and the batch size, and returns one ``(value, batched)`` pair per result. The
batched loop or conditional is itself staged into the current trace (eagerly, a jit
function), its sub-computations batched with ``vmap``, so the kernel count does not grow
with the batch (jax's ``_while_loop_batching_rule`` and ``_cond_batching_rule``):

- ``while``: the batched carries are those batched on entry and those the body makes read
  one, trip after trip (a fixed point). When the condition reads none of them, the loop is
  the same loop over the batched body. When it reads one (a batched predicate, a trip
  count per example), every carry is batched and the loop runs while any example's
  predicate holds; an example whose predicate is false keeps its carry (a select per
  carry), so each one ends with the carry of its own last trip. The condition is then
  computed twice a trip (for the loop and for the select), as jax does.
- ``conditional`` with an unbatched index: the same conditional over the batched branches
  (a result batched in one branch is batched in all). With a batched index (a predicate
  per example): every branch runs on the whole batch and each example selects its own
  branch's results, the index read as the op reads it (out of range: the last branch).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax
from ..frontend.control_flow import _staged, _switch_impl, _while_impl, call_computation
from ..ir.dtypes import DType
from ..ir.module import Computation, Node
from ..ir.ops import Op
from ..ir.types import TensorType
from .control import result_types
from .control_jvp import depends

#: ``axle.vmap`` (vectorize.py sets it: it imports the batching table, which imports this module)
VMAP_FN: list[Callable[..., Any]] = []

ControlBatchRule = Callable[[Node, Sequence[Any], Sequence[bool], int], list[tuple[Any, bool]]]


def batched_carries(body: Computation, start: set[int]) -> set[int]:
    """The carries of a loop that are batched: ``start`` and every carry the body makes
    read a batched one, trip after trip (a fixed point)."""
    batched = set(start)
    while more := depends(body, batched) - batched:
        batched |= more
    return batched


def vmapped(comp: Computation, args: Sequence[Any], in_b: Sequence[bool], out_b: Sequence[bool],
            size: int) -> list[Any]:
    """``comp`` applied to each example: argument j is batched (at dimension 0) where
    ``in_b[j]``; result j is batched where ``out_b[j]`` (broadcast if it reads no batched
    value), else unbatched (it must read none)."""
    def f(*a: Any) -> tuple[Any, ...]:
        return tuple(call_computation(comp, list(a)))

    in_axes = tuple(0 if b else None for b in in_b)
    out_axes = tuple(0 if b else None for b in out_b)
    return list(VMAP_FN[0](f, in_axes=in_axes, out_axes=out_axes, axis_size=size)(*args))


def _lanes(mask: Any, t: TensorType, size: int) -> Any:
    """A per-example pred[size] broadcast over the per-example type ``t``."""
    return lax.broadcast_in_dim(mask, (size,) + t.shape, (0,))


def _broadcast(x: Any, t: TensorType, size: int) -> Any:
    return lax.broadcast_in_dim(x, (size,) + t.shape, tuple(range(1, t.rank + 1)))


def _while(n: Node, xs: Sequence[Any], bs: Sequence[bool], size: int) -> list[tuple[Any, bool]]:
    cond: Computation = n.attr["condition"]
    body: Computation = n.attr["body"]
    types = result_types(n)
    batched = batched_carries(body, {j for j, b in enumerate(bs) if b})
    per_lane = bool(depends(cond, batched))  # a batched predicate: each example stops on its own
    flags = [per_lane or j in batched for j in range(len(types))]
    init = [x if b or not f else _broadcast(x, t, size) for x, b, f, t in zip(xs, bs, flags, types)]

    def impl(*carry: Any) -> tuple[Any, ...]:
        def pred(c: list[Any]) -> Any:
            return vmapped(cond, c, flags, [per_lane], size)[0]

        def step(c: list[Any]) -> list[Any]:
            new = vmapped(body, c, flags, flags, size)
            if not per_lane:
                return new
            going = pred(c)
            return [lax.select(_lanes(going, t, size), a, b) for a, b, t in zip(new, c, types)]

        def any_lane(c: list[Any]) -> Any:
            return lax.reduce(pred(c), "or", (0,)) if per_lane else pred(c)

        return tuple(_while_impl(any_lane, step, list(carry), name="while_loop"))

    return list(zip(_staged(impl, *init), flags))


def _select_branch(index: Any, results: list[list[Any]], types: Sequence[TensorType], size: int) -> list[Any]:
    """Each example's results from the branch its index picks (out of range: the last)."""
    i = lax.convert(index, DType.INT32) if np.dtype(index.dtype) == np.bool_ else index
    chosen = results[-1]
    for k in reversed(range(len(results) - 1)):
        hit = lax.compare(i, lax.broadcast_in_dim(np.asarray(k, np.dtype(i.dtype)), (size,), ()), "eq")
        chosen = [lax.select(_lanes(hit, t, size), a, b) for a, b, t in zip(results[k], chosen, types)]
    return chosen


def _conditional(n: Node, xs: Sequence[Any], bs: Sequence[bool], size: int) -> list[tuple[Any, bool]]:
    index, ops = xs[0], list(xs[1:])
    branches: tuple[Computation, ...] = n.attr["branches"]
    types = result_types(n)
    in_b = list(bs[1:])
    if bs[0]:  # a branch per example: all of them on the whole batch, then a select
        every = [True] * len(types)

        def each(i: Any, *a: Any) -> tuple[Any, ...]:
            return tuple(_select_branch(i, [vmapped(c, a, in_b, every, size) for c in branches], types, size))

        return [(v, True) for v in _staged(each, index, *ops)]
    hit = set().union(*(depends(c, {j for j, b in enumerate(in_b) if b}) for c in branches))
    flags = [j in hit for j in range(len(types))]
    fns = [lambda *a, c=c: tuple(vmapped(c, a, in_b, flags, size)) for c in branches]
    outs = _staged(lambda i, *a: _switch_impl(i, fns, a, name="cond"), index, *ops)
    return list(zip(outs, flags))


#: the control ops' batching rules (batching.py puts them in its table)
CONTROL_BATCH: dict[Op, ControlBatchRule] = {
    Op.WHILE: _while,
    Op.CONDITIONAL: _conditional,
}
