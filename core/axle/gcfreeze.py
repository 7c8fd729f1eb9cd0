"""The objects of axle's imports and of its backends' loading kept out of the cyclic
garbage collector's full collections (``gc.freeze``).

Importing axle and loading the backends (llvmlite, pyopencl, NumPy...) leaves about 45k
objects the collector tracks (functions, classes, modules, their dicts), and CPython runs
the process's first full collection a fixed number of young collections after them: in
the first call of the first compiled program, whatever that call does. On this project's
2-core Xeon that collection cost 10 to 13 ms of CPU (``gc.collect()`` right after
``import axle`` and ``axle.device("cpu:0")``), a third of a cached first call of the MNIST
MLP step (docs/reliability.md, "Persistent compile cache"), and every later full
collection scans those objects again. They live as long as the process (modules, the op
table, the backends), so the collector can never free them: frozen, they are moved to its
permanent generation and no collection visits them again.

``gc.freeze`` takes every object tracked at that moment, the program's own included (what
it made before importing axle). Reference counting still frees each of them once it is
unreachable; only a reference cycle among them that becomes unreachable later is never
freed (what the collector found unreachable at import: about 200 objects, a few tens of
KB). Backends load at the program's first device use, which may come after it has built
state of its own: the loading freezes only when the program has made at most
``LOAD_FREEZE_MAX_NEW`` tracked objects since the last freeze (a first device use right
after the imports: about 270), else it freezes nothing and the collector keeps scanning
the backends' objects (about 7k for cpu, 13k with opencl: 3-4 ms the first full
collection). ``AXLE_FLAGS=--no_gc_freeze`` leaves the collector as it is.
"""
from __future__ import annotations

import gc

from .config import config

#: the loading of backends freezes what the collector tracks only when the program has
#: made at most this many tracked objects since the last freeze (``loading_may_freeze``)
LOAD_FREEZE_MAX_NEW = 2000


def freeze_long_lived() -> None:
    """Moves every object the collector tracks now into its permanent generation (unless
    ``--no_gc_freeze``): called when axle's import ends, and when a loading of backends
    ends if ``loading_may_freeze`` said so before it."""
    if config.gc_freeze:
        gc.freeze()


def loading_may_freeze() -> bool:
    """Whether a loading of backends about to start may freeze what is tracked when it
    ends: the program has made few objects since the last freeze (``LOAD_FREEZE_MAX_NEW``;
    ``gc.get_objects`` lists only those outside the permanent generation). Otherwise the
    program's own state, which it may drop later in reference cycles, would be frozen
    with the backends' modules and never freed."""
    return config.gc_freeze and len(gc.get_objects()) <= LOAD_FREEZE_MAX_NEW
