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
KB). ``AXLE_FLAGS=--no_gc_freeze`` leaves the collector as it is.
"""
from __future__ import annotations

import gc

from .config import config


def freeze_long_lived() -> None:
    """Moves every object the collector tracks now into its permanent generation (unless
    ``--no_gc_freeze``): called when axle's import and each loading of backends end."""
    if config.gc_freeze:
        gc.freeze()
