"""What one conformance-kit run shares across its checks: a compile cache and the record
of the kernel sources each check compiled.

Every case is compiled optimized and unoptimized, and later sections (inputs unchanged,
kernel counts, threads, late completion) run the same modules again: with a vendor
toolchain taking seconds per compile, the run keeps its executables, keyed by the module
text, the device, the optimize setting and every flag that changes compilation. The
cache is on only inside :func:`kit_session` (the kit's workers and ``--axle-in-process``
runs): a test calling ``run_check`` directly compiles anew, as it expects after it
monkeypatched a backend.

The record: each executable's ``kernel_sources()`` is taken right after compile and
before it runs, and (in a worker) sent to the parent at once, so that the sources of a
kernel that crashes the process still reach the failure report.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ..backend import Device, Executable
from ..compiler import compile_optimized, flags_key
from ..ir.module import Module
from ..lru import LRU
from . import workers

#: executables kept per run (per worker): enough for the checks that share a module, which
#: the kit's runner sends one after the other to one worker; small, since a JIT-compiled
#: executable may hold megabytes
CACHE_ENTRIES = 64

_lock = threading.Lock()  # the record is appended to by a check's threads
_cache: LRU[tuple[Executable, Module]] | None = None
_record: list[tuple[str, dict[str, str]]] | None = None


@contextlib.contextmanager
def kit_session() -> Iterator[None]:
    """Turns the run-wide compile cache on for the duration."""
    global _cache
    old, _cache = _cache, LRU(lambda: CACHE_ENTRIES)
    try:
        yield
    finally:
        _cache = old


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[str, dict[str, str]]]]:
    """Collects (label, kernel sources) of every executable compiled for a case meanwhile."""
    global _record
    old, _record = _record, []
    try:
        yield _record
    finally:
        _record = old


def sources_of(exe: Executable) -> dict[str, str]:
    """``kernel_sources()``, or why it could not be read (a broken backend's method)."""
    try:
        return dict(exe.kernel_sources())
    except Exception as e:  # noqa: BLE001 - reported instead of the sources
        return {"(kernel_sources() raised)": f"{type(e).__name__}: {e}"}


def compile_case(module: Module, device: Device, *, optimize: bool = True) -> tuple[Executable, Module]:
    """``compile_optimized`` through the run's cache; records the kernel sources (and, in
    a worker, sends them to the parent) before the caller runs the executable."""
    key = (module.as_text(), device.name, optimize, flags_key())
    hit = _cache.get(key) if _cache is not None else None
    if hit is None:
        hit = compile_optimized(module, device, optimize=optimize)
        if _cache is not None:
            hit = _cache.put(key, hit)
    label = f"{module.name} on {device.name}, {'optimized' if optimize else 'unoptimized'}"
    sources = sources_of(hit[0])
    if _record is not None:
        with _lock:
            _record.append((label, sources))
    workers.note((label, sources))
    return hit
