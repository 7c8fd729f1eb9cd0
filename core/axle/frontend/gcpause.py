"""The cyclic garbage collector held off while a program compiles.

A compile (trace, optimizer passes, planning, backend compile) allocates tens of
thousands of small objects that mostly survive it (IR nodes, types, kernel specs).
Allocations in that number trip the collector's generation thresholds again and again,
and in a new process they promote everything into the oldest generation and set off a
full collection that walks every object the imports created: measured at 45-60 ms of a
cached first call's 180-250 ms (MNIST MLP step on cpu:0). Holding the collector off for
the duration changes no result: reference counting still frees everything acyclic at
once, and cycles made meanwhile are found by the next collection after the compile,
which then walks only the young objects (the compile's), not the whole heap.
"""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # nesting across threads: the collector is re-enabled when the last one leaves
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disables automatic collection inside the block (nested and concurrent blocks
    allowed); restores the state found on entry when the outermost block exits. A caller
    that disabled collection itself keeps it disabled."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
