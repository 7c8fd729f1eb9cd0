"""Trace events (Chrome trace / Perfetto JSON).

Backends and the core call :func:`span` around work (passes, codegen, compiles,
transfers) and :func:`kernel_event` for device-timed kernels. Both cost one attribute
check when no trace is being recorded.

    with axle.profiler.trace("timeline.json"):
        f(x)
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_events: list[dict[str, Any]] | None = None
_PID = os.getpid()


def enabled() -> bool:
    return _events is not None


def _now_us() -> float:
    return time.perf_counter_ns() / 1e3


def _emit(ev: dict[str, Any]) -> None:
    with _lock:
        if _events is not None:
            _events.append(ev)


@contextlib.contextmanager
def span(name: str, cat: str, **args: Any) -> Iterator[None]:
    """A host-side duration event (category e.g. 'trace', 'pass', 'codegen', 'compile',
    'transfer', 'launch')."""
    if _events is None:
        yield
        return
    t0 = _now_us()
    try:
        yield
    finally:
        _emit({"name": name, "cat": cat, "ph": "X", "ts": t0, "dur": _now_us() - t0, "pid": _PID,
               "tid": threading.get_ident() % 2**31, "args": {k: str(v) for k, v in args.items()}})


def kernel_event(name: str, device: str, start_us: float, dur_us: float, **args: Any) -> None:
    """A kernel execution on a device timeline; ``start_us`` on the perf_counter clock in
    microseconds (backends with device timestamps map them onto it)."""
    if _events is None:
        return
    _emit({"name": name, "cat": "kernel", "ph": "X", "ts": start_us, "dur": dur_us, "pid": _PID,
           "tid": f"device {device}", "args": {k: str(v) for k, v in args.items()}})


def now_us() -> float:
    """The clock kernel_event expects."""
    return _now_us()


def start() -> None:
    global _events
    with _lock:
        _events = []


def stop() -> list[dict[str, Any]]:
    global _events
    with _lock:
        out, _events = _events or [], None
    return out


def write(path: str, events: list[dict[str, Any]]) -> None:
    meta = [{"name": "process_name", "ph": "M", "pid": _PID, "args": {"name": "axle"}}]
    # Chrome's trace viewer wants integer tids per thread; name device tracks explicitly.
    tids: dict[Any, int] = {}
    for ev in events:
        tid = ev["tid"]
        if isinstance(tid, str):
            if tid not in tids:
                tids[tid] = 10_000 + len(tids)
                meta.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": tids[tid], "args": {"name": tid}})
    out = [dict(ev, tid=tids.get(ev["tid"], ev["tid"])) for ev in events]
    with open(path, "w") as f:
        json.dump({"traceEvents": meta + out, "displayTimeUnit": "ms"}, f)


@contextlib.contextmanager
def trace(path: str) -> Iterator[None]:
    """Records every event inside the block and writes them to ``path``."""
    start()
    try:
        yield
    finally:
        write(path, stop())
