"""The cyclic garbage collector held off while a program compiles.

A compile (trace, optimizer passes, planning, backend compile) allocates tens of
thousands of small objects that mostly survive it (IR nodes, types, kernel specs).
Allocations in that number trip the collector's generation thresholds, and depending on
where its counters stand one of them is a full collection over every object the imports
made: about 19 ms of CPU (65 ms wall on the shared 2-core machine) in a process with the
cpu and opencl backends loaded, landing in a first call that otherwise takes about 50 ms
of CPU (MNIST MLP step, cpu:0, cached). Holding the collector off for the duration
changes no result: reference counting still frees everything acyclic at once, and cycles
made meanwhile are found by later collections. It defers that work to the block's end (still
inside the first call); what removes most of it is that the imports' objects are frozen
(axle/gcfreeze.py), so that a full collection no longer scans them.
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
