"""Trace events (Chrome trace / Perfetto JSON).

Backends and the core call :func:`span` around work (tracing, passes, codegen, compiles,
transfers) and :func:`kernel_event` for each kernel launch (with device timestamps where
the device gives them). Both cost one check when no trace is being recorded.

    with axle.profiler.trace("timeline.json"):
        f(x)

or for a whole process ``AXLE_FLAGS=--trace_to=timeline.json`` (written at exit). The
file opens in ui.perfetto.dev and chrome://tracing. Kernel events are named after the
module's printed names, fusions with the ops inside (``fusion.3 [add, multiply, reduce]``),
so a box on the timeline maps back to a line of ``fn.lower(...).explain()``.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .config import config
from .forksafe import renew_in_child
from .ir.ops import Op
from .ir.printer import _node_names

if TYPE_CHECKING:
    from .ir.module import Node

_lock = threading.Lock()
renew_in_child(sys.modules[__name__], "_lock")
#: every active recorder (nested ``trace`` blocks and the process-wide trace) gets each event
_sinks: list[list[dict[str, Any]]] = []
_PID = os.getpid()

#: the process-wide trace (``config.trace_to``): its path, its events, written at exit
_process_path = ""
_process_events: list[dict[str, Any]] | None = None
_atexit_registered = False

#: categories the core uses; backends may add their own
CATEGORIES = ("trace", "pass", "optimize", "codegen", "compile", "transfer", "execute", "kernel", "retrace")


def _sync_process_trace() -> None:
    """Starts, retargets or stops the process-wide trace to follow ``config.trace_to``."""
    global _process_path, _process_events, _atexit_registered
    with _lock:
        path = config.trace_to
        if path == _process_path:
            return
        if _process_events is not None and not path:
            # Switched off: write what was recorded so far and stop recording.
            events, _process_events = _process_events, None
            _sinks.remove(events)
            old, _process_path = _process_path, ""
            _write_unlocked(old, events)
            return
        if _process_events is None:
            _process_events = []
            _sinks.append(_process_events)
        _process_path = path
        if not _atexit_registered:
            atexit.register(_write_process_trace)
            _atexit_registered = True


def _write_process_trace() -> None:
    if _process_events is not None and _process_path:
        with _lock:
            events = list(_process_events)
        try:
            _write_unlocked(_process_path, events)
        except OSError as e:  # at exit a traceback helps nobody; say what was lost
            print(f"axle: could not write the trace to {_process_path!r} (--trace_to): {e}", file=sys.stderr)


def enabled() -> bool:
    """True while events are being recorded (a ``trace`` block or ``trace_to`` is set)."""
    if config.trace_to != _process_path:
        _sync_process_trace()
    return bool(_sinks)


def _now_us() -> float:
    return time.perf_counter_ns() / 1e3


def now_us() -> float:
    """The clock :func:`kernel_event` expects (microseconds on ``time.perf_counter``)."""
    return _now_us()


def _emit(ev: dict[str, Any]) -> None:
    with _lock:
        for sink in _sinks:
            sink.append(ev)


def _args(args: Mapping[str, Any]) -> dict[str, Any]:
    # Numbers stay numbers (Perfetto can aggregate them); everything else is shown as text.
    return {k: v if isinstance(v, (int, float, bool)) else str(v) for k, v in args.items()}


@contextlib.contextmanager
def span(name: str, cat: str, **args: Any) -> Iterator[None]:
    """A host-side duration event around the block (category e.g. 'trace', 'pass',
    'codegen', 'compile', 'transfer', 'execute')."""
    if not enabled():
        yield
        return
    t0 = _now_us()
    try:
        yield
    finally:
        _emit({"name": name, "cat": cat, "ph": "X", "ts": t0, "dur": _now_us() - t0, "pid": _PID,
               "tid": threading.get_ident() % 2**31, "args": _args(args)})


def kernel_event(name: str, device: str, start_us: float, dur_us: float, **args: Any) -> None:
    """One kernel execution, drawn on the track of ``device``.

    ``start_us`` is on the :func:`now_us` clock; a backend with device timestamps (e.g.
    OpenCL event profiling) maps them onto it and passes ``clock="device"``. Use
    :func:`kernel_name` for ``name`` so it matches the printed module."""
    if not enabled():
        return
    _emit({"name": name, "cat": "kernel", "ph": "X", "ts": start_us, "dur": max(0.0, dur_us), "pid": _PID,
           "tid": f"device {device}", "args": _args(args)})


def instant(name: str, cat: str, **args: Any) -> None:
    """A point in time on the calling thread's track (e.g. a retrace)."""
    if not enabled():
        return
    _emit({"name": name, "cat": cat, "ph": "i", "s": "t", "ts": _now_us(), "pid": _PID,
           "tid": threading.get_ident() % 2**31, "args": _args(args)})


def kernel_name(node: Node, name: str | None = None) -> str:
    """The timeline name of a launched node: ``add.4`` for a single op, and for a fusion
    its name plus the distinct ops inside, e.g. ``fusion.3 [add, multiply, reduce]``."""
    label = name or node.name or node.op.value
    if node.op is not Op.FUSION:
        return label
    inner = sorted({n.op.value for n in node.attr["computation"].nodes
                    if not n.traits.structural and n.op is not Op.CONSTANT})
    return f"{label} [{', '.join(inner)}]"


def kernel_names(module: Any) -> dict[int, str]:
    """Timeline names for every node of ``module``'s entry (by node uid), from the printed
    module's names: what a backend should pass to :func:`kernel_event` so that its boxes
    match ``axle explain`` (call it once at compile time)."""
    comp = module.entry
    names = _node_names(comp)
    return {n.uid: kernel_name(n, names[n.uid]) for n in comp.nodes}


def start() -> None:
    """Starts a recording (nested recordings each get every event). Prefer :func:`trace`."""
    with _lock:
        _sinks.append([])


def stop() -> list[dict[str, Any]]:
    """Ends the innermost recording started by :func:`start` and returns its events."""
    with _lock:
        for i in range(len(_sinks) - 1, -1, -1):
            if _sinks[i] is not _process_events:
                return _sinks.pop(i)
    return []


def to_json(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The JSON object (trace-event format) for recorded events: device tracks get
    integer thread ids and names, and the process is named 'axle'."""
    meta: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": _PID, "tid": 0,
                                   "args": {"name": "axle"}}]
    # Chrome's viewer wants integer tids; device tracks get their own, named explicitly,
    # and sort after the host threads.
    tids: dict[str, int] = {}
    for ev in events:
        tid = ev["tid"]
        if isinstance(tid, str) and tid not in tids:
            tids[tid] = 10_000 + len(tids)
            meta.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": tids[tid], "args": {"name": tid}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": tids[tid],
                         "args": {"sort_index": tids[tid]}})
    out = [dict(ev, tid=tids.get(ev["tid"], ev["tid"])) for ev in events]
    return {"traceEvents": meta + out, "displayTimeUnit": "ms", "otherData": {"producer": "axle"}}


def _write_unlocked(path: str, events: Sequence[dict[str, Any]]) -> None:
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        json.dump(to_json(events), f)


def write(path: str, events: Sequence[dict[str, Any]]) -> None:
    """Writes events as a trace-event JSON file."""
    _write_unlocked(path, events)


@contextlib.contextmanager
def trace(path: str | None = None) -> Iterator[list[dict[str, Any]]]:
    """Records every event inside the block and writes them to ``path`` (if given).

    Yields the live event list, so tests and tools can inspect it without a file."""
    with _lock:
        events: list[dict[str, Any]] = []
        _sinks.append(events)
    try:
        yield events
    finally:
        with _lock:
            _sinks.remove(events)
        if path:
            write(path, events)


# ---------------------------------------------------------------------------------------
# Reading traces back: a format check and a summary.

_PHASES_WITH_DUR = {"X"}
_KNOWN_PHASES = set("BEXiIMCbnesftPONDR") | {"(", ")"}


def validate(obj: Any) -> list[str]:
    """Problems that keep ``obj`` from being a valid trace-event file (empty: valid).

    Checks the JSON object or array form of the Trace Event Format: each event has a
    string name, a known phase, integer pid/tid, numeric microsecond timestamps,
    non-negative durations for complete events, object args, and balanced B/E pairs."""
    problems: list[str] = []
    if isinstance(obj, dict):
        events = obj.get("traceEvents")
        if not isinstance(events, list):
            return ["top-level object has no 'traceEvents' list"]
        unit = obj.get("displayTimeUnit", "ms")
        if unit not in ("ms", "ns"):
            problems.append(f"displayTimeUnit must be 'ms' or 'ns', got {unit!r}")
    elif isinstance(obj, list):
        events = obj
    else:
        return [f"a trace is a JSON object or array, got {type(obj).__name__}"]
    open_b: dict[tuple[Any, Any], int] = defaultdict(int)
    for i, ev in enumerate(events):
        where = f"event {i}"
        if not isinstance(ev, dict):
            problems.append(f"{where}: not an object")
            continue
        ph = ev.get("ph")
        if ph not in _KNOWN_PHASES:
            problems.append(f"{where}: unknown phase {ph!r}")
            continue
        if not isinstance(ev.get("name", ""), str) or (ph != "E" and "name" not in ev):
            problems.append(f"{where}: missing or non-string 'name'")
        for key in ("pid", "tid"):
            if key in ev and (not isinstance(ev[key], int) or isinstance(ev[key], bool)):
                problems.append(f"{where}: {key} must be an integer, got {ev[key]!r}")
        if "pid" not in ev:
            problems.append(f"{where}: missing 'pid'")
        if ph != "M":
            ts = ev.get("ts")
            if not isinstance(ts, (int, float)) or isinstance(ts, bool):
                problems.append(f"{where}: 'ts' must be a number (microseconds), got {ts!r}")
        if ph in _PHASES_WITH_DUR:
            dur = ev.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                problems.append(f"{where}: complete event needs a non-negative 'dur', got {dur!r}")
        if "args" in ev and not isinstance(ev["args"], dict):
            problems.append(f"{where}: 'args' must be an object")
        if ph == "B":
            open_b[(ev.get("pid"), ev.get("tid"))] += 1
        elif ph == "E":
            k = (ev.get("pid"), ev.get("tid"))
            if open_b[k] == 0:
                problems.append(f"{where}: 'E' without a matching 'B'")
            else:
                open_b[k] -= 1
    return problems


def load(path: str) -> list[dict[str, Any]]:
    """The events of a trace file (metadata events left out)."""
    with open(path) as f:
        obj = json.load(f)
    events = obj["traceEvents"] if isinstance(obj, dict) else obj
    return [e for e in events if e.get("ph") != "M"]


def kernels(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kernel-launch events, in time order."""
    return sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def summary(events: Sequence[dict[str, Any]]) -> str:
    """A text table: time per category, and launches and time per kernel name."""
    by_cat: dict[str, float] = defaultdict(float)
    count: Counter[str] = Counter()
    by_kernel: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") != "X":
            continue
        dur = e.get("dur", 0.0)
        by_cat[e.get("cat", "?")] += dur
        if e.get("cat") == "kernel":
            count[e["name"]] += 1
            by_kernel[e["name"]] += dur
    lines = ["category        total ms"]
    lines += [f"{c:<14}{t / 1e3:>10.3f}" for c, t in sorted(by_cat.items(), key=lambda kv: -kv[1])]
    if count:
        lines += ["", f"{'kernel':<48}{'launches':>9}{'total ms':>11}"]
        for name, t in sorted(by_kernel.items(), key=lambda kv: -kv[1]):
            lines.append(f"{name[:47]:<48}{count[name]:>9}{t / 1e3:>11.3f}")
    return "\n".join(lines)

