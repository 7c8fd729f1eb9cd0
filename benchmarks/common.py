"""Shared benchmark helpers: interleaved repeated timing, medians, result rows.

A benchmark module ``benchmarks/bench_<name>.py`` defines ``run(quick: bool) -> list[Row]``.
``benchmarks/run.py`` runs every module, prints the tables and writes docs/benchmarks.md.
Figures are always compared within one run (ratios), never against stored absolute times.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import statistics
import sys
import time

# OpenBLAS (under NumPy) keeps its threads spinning for ~0.1 s after a call and libgomp
# (under the C loops and torch) for milliseconds: longer than many calls last, so an
# interleaved round would time the next library beside them. They are told to wait
# passively (read when those libraries load, so this module is imported before NumPy).
# Other pools (onnxruntime's) keep their defaults: ``measure`` settles them.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass
class Row:
    """One workload measured with several implementations (ms per call, median)."""

    suite: str
    workload: str
    times_ms: dict[str, float]
    #: e.g. {"GFLOP/s": {...}} for matmul; free-form extra columns
    extra: dict[str, Any] = field(default_factory=dict)
    #: the implementation the others are compared with (ratios = baseline / impl)
    baseline: str = "numpy"
    #: "speed" (plotted as ratios against the baseline) or "dispatch" (a per-call overhead,
    #: plotted in microseconds on an axis of its own)
    kind: str = "speed"

    def ratio(self, impl: str) -> float:
        return self.times_ms[self.baseline] / self.times_ms[impl]


def measure(fns: dict[str, Callable[[], Any]], repeats: int = 15, warmup: int = 2,
            sync: Callable[[Any], Any] | None = None,
            before: dict[str, Callable[[], Any]] | None = None, settle: int = 1,
            settle_ms: float = 0.0) -> dict[str, float]:
    """Median milliseconds per call of each function, timed interleaved (round-robin, the
    order rotated every round) so that machine noise hits every implementation alike.

    Each timed call follows ``settle`` untimed calls of the same function, so that it runs
    in that library's own steady state and not beside the threads another library keeps
    spinning after its call, and goes on until ``settle_ms`` have passed: onnxruntime's
    pool spins for tens of milliseconds after a call (a ResNet-18 forward of 17 ms on
    axle-cpu took 20-22 ms after one settle call of its own, 17.2-17.4 after three).

    ``sync`` waits for a result (e.g. np.asarray on a device array) and is included in
    the time; ``before[name]``, when given, runs untimed before each of that function's
    timed samples (e.g. draining a device queue, to time only the enqueueing)."""
    done = sync or (lambda r: r)
    for fn in fns.values():
        for _ in range(warmup):
            done(fn())
    samples: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(repeats):
        # Rotated each round, so every implementation follows every other one equally
        # often (caches and the machine's noise hit them all alike).
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(settle):
                done(fn())
            while (time.perf_counter() - t0) * 1e3 < settle_ms:
                done(fn())
            if before and name in before:
                before[name]()
            t0 = time.perf_counter()
            done(fn())
            samples[name].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in samples.items()}


def machine() -> str:
    """A one-line description of this machine (CPU model, SIMD, cores, memory, Python and
    the versions of the libraries compared)."""
    cpu, simd, mem = platform.processor() or platform.machine(), "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not simd:
                    flags = set(line.split(":", 1)[1].split())
                    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.0f} GiB"
    except OSError:
        pass
    versions = []
    for mod in ("numpy", "llvmlite", "pyopencl", "jax"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except Exception:  # noqa: BLE001 - optional peers
            pass
    parts = [cpu, simd, f"{os.cpu_count()} cores", mem, f"Python {platform.python_version()}", *versions]
    return ", ".join(p for p in parts if p)


def load_example(name: str) -> ModuleType:
    """examples/<name>.py, loaded by path once (examples are scripts, not a package)."""
    key = f"_axle_example_{name}"
    if key in sys.modules:
        return sys.modules[key]
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(key, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    spec.loader.exec_module(mod)
    return mod
