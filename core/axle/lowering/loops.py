"""What a backend needs to know about a loop before running it: its trip count, when the
program fixes it.

A backend that runs a ``while`` from the host (opencl, the template) must otherwise read the
condition's pred back from the device once per trip, which drains the device's queue each
time. The fori_loop pattern (a counter carry started at a constant, grown by a constant and
compared ``lt`` with a constant bound: ``fori_loop`` with int bounds, ``scan``) fixes the
count at compile time; the backend then runs the body exactly that many times and never
evaluates the condition.
"""
from __future__ import annotations

from ..ir.module import Node
from ..passes.control import static_trip_count


def known_trip_count(loop: Node) -> int | None:
    """The number of times ``loop`` (a ``while`` node, optimized or not: the increment and
    the compare may sit in fusions) runs its body when the program fixes it; None when it
    depends on data, or when the counter would wrap around its dtype before reaching the
    bound: the backend then evaluates the condition every trip. The optimizer's own reading
    of a counted loop (:func:`axle.passes.control.static_trip_count`), so the backends and
    the passes (reverse mode's stacked residuals) agree on it."""
    return static_trip_count(loop)
