"""What a backend needs to know about a loop before running it: its trip count, when the
program fixes it.

A backend that runs a ``while`` from the host (opencl, the template) must otherwise read the
condition's pred back from the device once per trip, which drains the device's queue each
time. The fori_loop pattern (a counter carry started at a constant, grown by a constant and
compared ``lt`` with a constant bound) fixes the count at compile time; the backend then runs
the body exactly that many times and never evaluates the condition.
"""
from __future__ import annotations

import numpy as np

from ..ir.computation import Computation, inline
from ..ir.module import Node, make_node
from ..ir.ops import Op
from ..passes.control import static_trip_count


def _unfused(n: Node) -> Node:
    """``n`` with a fusion it is (or reads one result of) spelled out as the nodes it fuses,
    over the fusion's operands: the counter's increment or the bound's compare may sit in a
    fusion once the optimizer fuses inside loop bodies."""
    if n.op is Op.FUSION:
        return inline(n.attr["computation"], n.operands)
    src = n.operands[0] if n.op is Op.GET_TUPLE_ELEMENT else None
    if src is not None and src.op is Op.FUSION:
        root = inline(src.attr["computation"], src.operands)
        if root.op is Op.TUPLE:
            return root.operands[n.attr["index"]]
    return n


def _without_fusions(loop: Node) -> Node:
    """The loop with the condition's root, the body's results and the initial carry unfused."""
    cond, body = loop.attr["condition"], loop.attr["body"]
    root = make_node(Op.TUPLE, [_unfused(r) for r in body.root.operands], loc=body.root.loc)
    attrs = {"condition": Computation(cond.name, cond.parameters, _unfused(cond.root)),
             "body": Computation(body.name, body.parameters, root)}
    return make_node(Op.WHILE, [_unfused(o) for o in loop.operands], attrs, loc=loop.loc)


def _counter_stays_in_range(loop: Node, trips: int) -> bool:
    """Whether the counter's value after the last trip fits its dtype: a counter that wraps
    past its largest value comes back below the bound and the loop goes on (then the count
    is not the formula's)."""
    test = loop.attr["condition"].root
    k = test.operands[0].attr["index"]
    step = next(o for o in loop.attr["body"].root.operands[k].operands if o.op is Op.CONSTANT)
    start = int(loop.operands[k].attr["value"].array)
    last = start + trips * int(step.attr["value"].array)
    return last <= int(np.iinfo(test.operands[0].dtype.np).max)


def known_trip_count(loop: Node) -> int | None:
    """The number of times ``loop`` (a ``while`` node) runs its body, when the program fixes
    it (:func:`axle.passes.control.static_trip_count`, looking through fusions); None when it
    depends on data: the backend evaluates the condition every trip."""
    if loop.attr["body"].root.op is not Op.TUPLE:  # a carry computed whole (by a nested loop): not counted
        return None
    plain = _without_fusions(loop)
    trips = static_trip_count(plain)
    if trips is None or (trips > 0 and not _counter_stays_in_range(plain, trips)):
        return None
    return trips
