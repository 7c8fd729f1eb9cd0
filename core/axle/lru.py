"""A thread-safe, bounded, least-recently-used map: every cache of compiled code in axle.

Each cache of executables (a jit function's, a pmap's, the eager op cache, the lazy cluster
cache, and the backends' compile caches) is one of these, bounded by ``config.jit_cache_size``
(``AXLE_FLAGS=--jit_cache_size=N``) read at every insertion, so lowering the setting
shrinks the caches on their next miss. An evicted value is only dropped: the cache keeps
no other reference, so its native code (LLVM engines, OpenCL programs) is freed as soon
as the last executable using it is gone.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from .config import config

V = TypeVar("V")

#: every cache alive, so a forked child can re-create their locks (forksafe.py)
_ALL: weakref.WeakSet[LRU] = weakref.WeakSet()


def default_size() -> int:
    return config.jit_cache_size


class LRU(Generic[V]):
    """A map holding at most ``size()`` entries; the least recently used goes first."""

    def __init__(self, size: Callable[[], int] = default_size) -> None:
        self._size = size
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0
        _ALL.add(self)

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def peek(self, key: Hashable) -> V | None:
        """The value of ``key`` without marking it used and without the lock (one dict
        read, atomic under the GIL): for hot paths that can afford a hot entry being
        evicted as if unused, which only costs its next caller the slow path."""
        return self._data.get(key)

    def peeker(self) -> Callable[[Hashable], V | None]:
        """:meth:`peek` as the map's own bound ``get``: the same lookup without a Python
        call around it, for the hottest paths (eager dispatch)."""
        return self._data.get

    def put(self, key: Hashable, value: V) -> V:
        """Stores ``value`` unless another thread stored one for ``key`` first; returns the
        one kept, so racing first calls all use the same executable."""
        evicted = []  # dropped after the lock is released: freeing native code may take other locks
        with self._lock:
            kept = self._data.setdefault(key, value)
            self._data.move_to_end(key)
            limit = max(1, self._size())
            while len(self._data) > limit:
                evicted.append(self._data.popitem(last=False))
                self.evictions += 1
        del evicted
        return kept

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def values(self) -> list[V]:
        with self._lock:
            return list(self._data.values())

    def items(self) -> list[tuple[Hashable, V]]:
        with self._lock:
            return list(self._data.items())

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork


def all_caches() -> list[LRU]:
    return list(_ALL)


def _reset_locks_in_child() -> None:
    for cache in list(_ALL):
        cache._after_fork()


os.register_at_fork(after_in_child=_reset_locks_in_child)
