"""Process-wide counters: traces, compiles, cache hits/misses and kernel launches, per
function and per device. ``axle.stats()`` returns them; ``axle.reset_stats()`` clears."""
from __future__ import annotations

import sys
import threading
from collections import defaultdict
from typing import Any

from .forksafe import renew_in_child

_lock = threading.Lock()
renew_in_child(sys.modules[__name__], "_lock")
_counts: dict[tuple[str, str, str], int] = defaultdict(int)
TOTALS = ("traces", "compiles", "cache_hits", "cache_misses", "kernel_launches", "eager_ops", "executions",
          "clusters", "lazy_ops")


def record(what: str, n: int = 1, *, function: str = "", device: str = "") -> None:
    with _lock:
        _counts[(what, function, device)] += n


def record_run(kernels: int, *, function: str = "", device: str = "") -> None:
    """One execution of a compiled function and its kernel launches (the jit hot path)."""
    with _lock:
        _counts[("executions", function, device)] += 1
        _counts[("kernel_launches", function, device)] += kernels


def run_keys(function: str, device: str) -> tuple[tuple[str, str, str], ...]:
    """The counter keys a cached call updates (made once per compiled function)."""
    return (("cache_hits", function, device), ("executions", function, device), ("kernel_launches", function, device))


def record_cached_run(keys: tuple[tuple[str, str, str], ...], kernels: int) -> None:
    """A cache hit, its execution and its kernel launches under one lock (``run_keys``)."""
    with _lock:
        _counts[keys[0]] += 1
        _counts[keys[1]] += 1
        _counts[keys[2]] += kernels


def snapshot() -> dict[str, Any]:
    """Totals plus a per-function and per-device breakdown."""
    with _lock:
        items = list(_counts.items())
    totals: dict[str, Any] = {k: 0 for k in TOTALS}
    per_fn: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    per_dev: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (what, fn, dev), n in items:
        totals[what] = totals.get(what, 0) + n
        if fn:
            per_fn[fn][what] += n
        if dev:
            per_dev[dev][what] += n
    totals["per_function"] = {k: dict(v) for k, v in per_fn.items()}
    totals["per_device"] = {k: dict(v) for k, v in per_dev.items()}
    return totals


def reset() -> None:
    with _lock:
        _counts.clear()


def kernel_count(executable: Any) -> int:
    """Launches per call of an executable (its report's `kernels`, else 1)."""
    try:
        return int(executable.report().get("kernels", 1))
    except Exception:  # noqa: BLE001 - a report is informative only
        return 1
