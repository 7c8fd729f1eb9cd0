"""Locks after ``fork``: a forked child has only the thread that forked, so a lock some
other parent thread held at that moment would stay locked forever in the child. Every
process-wide lock of axle is re-created in the child with :func:`renew_in_child` (caches,
which are many, do the same through their own registries: lru.py, diskcache.py)."""
from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any


def renew_in_child(owner: Any, attr: str, factory: Callable[[], Any] = threading.Lock) -> None:
    """In a forked child, ``owner.attr`` becomes a fresh ``factory()`` (owner: a module or
    a long-lived object, held weakly)."""
    ref = weakref.ref(owner)

    def renew() -> None:
        obj = ref()
        if obj is not None:
            setattr(obj, attr, factory())

    os.register_at_fork(after_in_child=renew)
