"""Process-wide counters: traces, compiles, cache hits/misses and kernel launches, per
function and per device. ``axle.stats()`` returns them; ``axle.reset_stats()`` clears."""
from __future__ import annotations

import itertools
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .forksafe import renew_in_child

_lock = threading.Lock()
renew_in_child(sys.modules[__name__], "_lock")
_counts: dict[tuple[str, str, str], int] = defaultdict(int)
TOTALS = ("traces", "compiles", "cache_hits", "cache_misses", "kernel_launches", "eager_ops", "executions",
          "clusters", "lazy_ops",
          # the on-disk compile caches (axle.diskcache), every backend's together
          "disk_cache_hits", "disk_cache_misses", "disk_cache_writes", "disk_cache_corrupt", "disk_cache_evictions")


def record(what: str, n: int = 1, *, function: str = "", device: str = "") -> None:
    with _lock:
        _counts[(what, function, device)] += n


def record_run(kernels: int, *, function: str = "", device: str = "") -> None:
    """One execution of a compiled function and its kernel launches (the jit hot path)."""
    with _lock:
        _counts[("executions", function, device)] += 1
        _counts[("kernel_launches", function, device)] += kernels


def run_counter(function: str, device: str, kernels: int) -> Callable[[], int]:
    """A counter of the cached calls of a compiled function: each call of the returned
    function counts one cache hit, one execution and ``kernels`` launches. It takes no
    lock (the jit hot path): it is ``next`` of an ``itertools.count``, one C call, atomic
    under the GIL. Counters are shared per (function, device, kernels), so their number
    stays bounded by those names, not by the executables compiled."""
    key = (function, device, kernels)
    with _lock:
        count = _ticks.get(key)
        if count is None:
            count = _ticks[key] = itertools.count()
    return count.__next__


def _ticked(count: itertools.count) -> int:
    return int(repr(count)[len("count("):-1])  # how many times it was called (reading it does not count)


def _tick_items() -> list[tuple[tuple[str, str, str], int]]:
    """The run counters as counter items (called under the lock)."""
    items = []
    for (fn, dev, kernels), count in _ticks.items():
        n = _ticked(count) - _tick_base.get((fn, dev, kernels), 0)
        if n and kernels == EAGER:
            items += [(("eager_ops", "", dev), n), (("kernel_launches", fn, dev), n)]
        elif n:
            items += [(("cache_hits", fn, dev), n), (("executions", fn, dev), n),
                      (("kernel_launches", fn, dev), n * kernels)]
    return items


_ticks: dict[tuple[str, str, int], itertools.count] = {}
_tick_base: dict[tuple[str, str, int], int] = {}  # each counter's reading at the last reset
#: what one tick of a counter counts, by its kernels field: a jit call (cache_hits, executions
#: and ``kernels`` launches) or, for EAGER, one eager op and its one launch
EAGER = -1


def eager_counter(function: str, device: str) -> Callable[[], int]:
    """Like :func:`run_counter`, for the eager hot path: each call counts one eager op
    and one kernel launch of ``function`` on ``device``."""
    return run_counter(function, device, EAGER)


def snapshot() -> dict[str, Any]:
    """Totals plus a per-function and per-device breakdown."""
    with _lock:
        items = list(_counts.items()) + _tick_items()
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
        for key, count in _ticks.items():
            _tick_base[key] = _ticked(count)


def kernel_count(executable: Any) -> int:
    """Launches per call of an executable (its report's `kernels`, else 1)."""
    try:
        return int(executable.report().get("kernels", 1))
    except Exception:  # noqa: BLE001 - a report is informative only
        return 1
