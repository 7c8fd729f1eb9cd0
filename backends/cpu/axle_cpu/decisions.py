"""Measured threading decisions kept across processes, in the cpu backend's compile cache
(``--compile_cache``, subdirectory ``cpu``; docs/backend-cpu.md, "Persistent compile cache").

Whether a kernel is split across the worker pool is measured on its first launches
(executable._Launch: runs on one thread and split in turn): a new process's first call of a
cached program would run every kernel on one thread while it measures, and measure the
pool's wake-up cost first (threads.NativePool). Both results are stored once known:

- the split decisions of an executable, keyed by the optimized module's digest (the plan
  and its kernels are made from that module alone), the settings, the thread count and
  everything the object code's key holds (``target.object_key``: the CPU's name and
  features, the code of axle and this backend...), so another CPU, thread count or code
  is another key;
- the pool's wake-up cost, keyed by the thread count and the same machine description.

A decision measured while the other cores were busy (its split trials' threads did not run
at once: ``_Launch.conclusive``) is stored as ``null``: the next process measures that
kernel again (a split measured not to pay on a loaded machine stayed off for good before).

Entries are JSON, parsed strictly (nothing evaluated); one that does not parse, or does not
fit the executable it is loaded for, is ignored and counted as corrupt
(``disk_cache_corrupt``), and the measurement runs again (and rewrites it)."""
from __future__ import annotations

import json
import math

from axle import counters

from .target import DISK, object_key

#: bumped when an entry's layout changes
FORMAT = "axle-cpu-threads-3"


def split_key(module_digest: str, name: str, settings: str, nthreads: int) -> bytes:
    """The key of the split decisions of the plan of the optimized module ``module_digest``."""
    return object_key(f"{FORMAT}\0split\0{module_digest}\0{name}\0{settings}\0threads={nthreads}", False)


def wake_key(nthreads: int) -> bytes:
    """The key of the wake-up cost of a pool of ``nthreads`` threads on this machine."""
    return object_key(f"{FORMAT}\0wake\0threads={nthreads}", False)


def load_splits(key: bytes, count: int) -> list[bool | None] | None:
    """The ``count`` split decisions stored under ``key``, each a boolean or None (measure
    again) (None: none, or not ``count`` of them)."""
    raw = _load(key)
    if raw is None:
        return None
    splits = raw.get("split") if isinstance(raw, dict) else None
    if not (isinstance(splits, list) and len(splits) == count and all(s is None or isinstance(s, bool)
                                                                          for s in splits)):
        counters.record("disk_cache_corrupt")
        return None
    return splits


def store_splits(key: bytes, splits: list[bool | None]) -> None:
    DISK.put(key, json.dumps({"split": splits}).encode())


def load_wake(key: bytes) -> float | None:
    """The wake-up cost in microseconds stored under ``key`` (None: none, or not a finite
    positive number)."""
    raw = _load(key)
    if raw is None:
        return None
    us = raw.get("wake_us") if isinstance(raw, dict) else None
    if not (isinstance(us, float) and math.isfinite(us) and us > 0):
        counters.record("disk_cache_corrupt")
        return None
    return us


def store_wake(key: bytes, us: float) -> None:
    DISK.put(key, json.dumps({"wake_us": float(us)}).encode())


def _load(key: bytes) -> object:
    data = DISK.get(key)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:  # checksummed by the disk cache: only a format change gets here
        counters.record("disk_cache_corrupt")
        return None
