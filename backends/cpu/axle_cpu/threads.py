"""Splitting a kernel's iteration space across cores: the native worker pool.

The workers are native threads started once per process by the step runner's module
(pool_ir.py, compiled with runner.py): parked on a futex after a short spin, woken in
microseconds, they claim chunks of a kernel's range with an atomic counter beside the
calling thread (a worker that wakes late finds nothing left, so the caller never waits for
a thread the OS has not scheduled). Python calls the pool for split kernels through
ctypes (:meth:`NativePool.run`, GIL released); the step runner calls it directly for split
kernels in its runs, loops included. Whether a kernel is split is measured
(executable._Launch): one-thread launches and split trials in turn, a kernel no slower
than ``SPLIT_FACTOR`` times the pool's measured wake-up cost never tried, and the split
stays if it was faster (or, for a long kernel, not slower), judged only from trials whose
threads ran at once (an executable measures an inconclusive decision again, a few times per
process). Kernels inside loops cannot be timed from Python: they split when their work
reaches ``LOOP_SPLIT_ELEMENTS``. ``AXLE_CPU_THREADS`` (or ``AXLE_FLAGS=--cpu_threads=N``)
sets the number of threads (1 disables splitting).
"""
from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import time

from axle.config import config
from axle.errors import AxleError
from axle.forksafe import renew_in_child

from . import decisions, runner
from .pool_ir import ARCHES

#: try a split when the single-thread time exceeds this many times the pool's wake-up cost
SPLIT_FACTOR = 4.0
#: a kernel inside a loop (never timed) is split when its largest array has this many elements
LOOP_SPLIT_ELEMENTS = 1 << 16
#: how long a new pool waits for its workers to run (NativePool._wait_started)
_START_WAIT_S = 1.0
#: the least wake-up cost taken (a single timed launch is noisy by microseconds)
WAKE_FLOOR_US = 5.0
#: a kernel found too short to split against a wake-up cost above this is decided for the
#: process only (executable._Launch): free cores give 2-7 us (the floor), a busy moment 20-60
WAKE_TRUSTED_US = 2 * WAKE_FLOOR_US
#: the wake-up cost is measured again (NativePool.refresh_wake) at most once in this many seconds
WAKE_REFRESH_S = 1.0
#: the pool's chunk modes (pool_ir.py)
MODES = {"rows": 0, "columns": 1, "reduction": 2}


def thread_count() -> int:
    """``AXLE_CPU_THREADS``, else the ``--cpu_threads`` flag, else the cores this process may use."""
    env = os.environ.get("AXLE_CPU_THREADS", "").strip()
    name = "AXLE_CPU_THREADS"
    if not env:
        env, name = config.backend_flags.get("cpu_threads", "").strip(), "--cpu_threads"
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise AxleError(f"{name} must be a positive integer, got {env!r}") from None
    return _cores()


def device_count() -> int:
    """How many cpu devices the host is split into (``AXLE_FLAGS=--cpu_device_count=N``, 1
    by default): each gets its share of the threads, so that N replicas running side by
    side (``axle.pmap``) do not oversubscribe the cores."""
    raw = config.backend_flags.get("cpu_device_count", "1")
    try:
        n = int(raw)
        if n < 1:
            raise ValueError
    except ValueError:
        raise AxleError(f"--cpu_device_count must be a positive integer, got {raw!r}") from None
    return n


def device_threads() -> int:
    """The threads of one cpu device: its share of ``thread_count()`` (at least 1)."""
    return max(1, thread_count() // device_count())


@functools.cache
def _cores() -> int:
    """The cores this process may run on (read once: a system call)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class NativePool:
    """The process's native workers (``n - 1`` of them: the caller is the n-th thread)."""

    def __init__(self, n: int) -> None:
        self._run = runner.pool_function("axle_pool_run")
        self._alive = runner.pool_function("axle_pool_alive")
        self._helped = runner.pool_function("axle_pool_helped")
        arch = runner.host().triple.split("-")[0]
        started = runner.pool_function("axle_pool_start")(n - 1) if n > 1 and arch in ARCHES else 0
        self.n = started + 1
        self._wait_started(started)
        self._wake_us: float | None = None
        self._woken_at = -float("inf")  # when the wake-up cost was last measured (time.monotonic)
        self._wake_unsaved = False  # measured lower than the compile cache holds (save_wake)

    def _wait_started(self, workers: int) -> None:
        """Returns once the workers run (tens of microseconds; the wake-up probe used to
        wait for them), or after ``_START_WAIT_S``: a worker the OS has not scheduled yet
        delays nothing (chunks are claimed), this only keeps ``alive`` exact after a start."""
        deadline = time.monotonic() + _START_WAIT_S
        while self.alive() < workers and time.monotonic() < deadline:
            time.sleep(0)

    @property
    def wake_us(self) -> float:
        """The pool's wake-up cost in microseconds: asked only while a kernel's split is
        being measured (a cached first call whose decisions were stored never asks). It is
        measured then, once per process (20 probes: tens of microseconds on free cores),
        and the least of that and the cost the compile cache holds for this machine is
        taken (and stored with the next decisions stored, save_wake): load only ever slows
        a probe down, and a cost read back alone kept what one busy moment measured for
        good (56.8 us at load 4, where free cores give 2-7 us)."""
        if self._wake_us is None:
            self.refresh_wake()
        assert self._wake_us is not None
        return self._wake_us

    def refresh_wake(self) -> None:
        """Measures the wake-up cost again (wake_us), keeping the least known; not again
        within WAKE_REFRESH_S (every executable measuring a decision again asks)."""
        if self.n == 1:
            self._wake_us = float("inf")
            return
        now = time.monotonic()
        if self._wake_us is not None and now - self._woken_at < WAKE_REFRESH_S:
            return
        self._woken_at = now
        stored = decisions.load_wake(decisions.wake_key(self.n))
        us = min(self._measure_wake(), self._wake_us or float("inf"))
        self._wake_unsaved = stored is None or us < stored
        self._wake_us = us if self._wake_unsaved or stored is None else stored

    def probe_wake(self) -> None:
        """One more probe, at another moment than the first 20 (after a split trial, the
        worker still awake as after any split): the least kept. Probes made back to back
        all meet the same moment of the machine, and a busy one inflates them all."""
        if self.n > 1 and self._wake_us is not None:
            t0 = time.perf_counter()
            ran = runner.pool_function("axle_pool_probe")()  # (0: another caller holds the pool)
            us = max((time.perf_counter() - t0) * 1e6, WAKE_FLOOR_US)
            if ran and us < self._wake_us:
                self._wake_us, self._wake_unsaved = us, True  # (lower than the stored cost too)

    def save_wake(self) -> None:
        """Stores the wake-up cost if it is lower than the stored one (called when an
        executable stores its decisions: a process that stores nothing else, such as a
        cached first call measuring a decision again, writes nothing)."""
        if self._wake_unsaved and self._wake_us is not None:
            decisions.store_wake(decisions.wake_key(self.n), self._wake_us)
            self._wake_unsaved = False

    def run(self, fn: int, bufs: int, outer: int, inner: int, mode: str, nchunks: int,
            stride: int = 0, extent: int = 0) -> None:
        """Calls kernel ``fn`` over ``nchunks`` chunks of its rows, columns or (``extent``
        long) first reduced axis, chunk k's pointer array at ``bufs + k * stride``."""
        extent = extent or (outer if mode == "rows" else inner)
        self._run(fn, bufs, stride, outer, inner, extent, MODES[mode], nchunks)

    def alive(self) -> int:
        """Workers running now (each counts itself in when it starts, out when it stops)."""
        return int(self._alive())

    def helped(self) -> int:
        """Chunks the workers (not the callers) have run so far: how a split trial tells
        that its threads ran at once (executable._Launch)."""
        return int(self._helped())

    def _measure_wake(self) -> float:
        """The least time for every worker to pick up a job (the cost a split must repay),
        of 20 probes: other processes on the machine only ever delay a worker, and a cost
        measured under load is kept with the machine's other decisions (a median taken on
        a busy machine kept every kernel below a few milliseconds from being tried)."""
        probe = runner.pool_function("axle_pool_probe")
        samples = []
        for _ in range(100):  # (a probe that found the pool taken by another caller ran nothing)
            t0 = time.perf_counter()
            if probe():
                samples.append((time.perf_counter() - t0) * 1e6)
                if len(samples) == 20:
                    break
        # at least 5 us: a single timed launch is noisy by microseconds on a busy machine, and
        # kernels of a few microseconds gain nothing from a split
        return max(min(samples, default=WAKE_FLOOR_US), WAKE_FLOOR_US)


_POOL: NativePool | None = None
_POOL_KEY: tuple[str | None, ...] | None = None
_LOCK = threading.Lock()
renew_in_child(sys.modules[__name__], "_LOCK")


def pool(device: int = 0) -> NativePool:
    """The process-wide native pool, sized by :func:`device_threads` (re-created when that
    changes). Every cpu device (--cpu_device_count) shares it: a replica that finds it
    taken runs its chunks on its own thread, so N replicas side by side never run more
    than N callers plus the pool's workers."""
    global _POOL, _POOL_KEY
    key = (os.environ.get("AXLE_CPU_THREADS"), config.backend_flags.get("cpu_threads"),
           config.backend_flags.get("cpu_device_count"))
    current = _POOL
    if current is not None and key == _POOL_KEY:  # every kernel launch: three lookups
        return current
    n = device_threads()
    with _LOCK:
        if _POOL is None or _POOL.n != n:
            _stop()
            _POOL = NativePool(n)
        _POOL_KEY = key
        return _POOL


def _stop(tries: int = 1 << 30) -> None:
    """Joins the workers of the pool (waiting for a job in flight to finish)."""
    global _POOL
    if _POOL is not None and _POOL.n > 1:
        runner.pool_function("axle_pool_stop")(tries)
    _POOL = None


@atexit.register
def _shutdown() -> None:
    """Clean exit: the workers leave their futex and are joined (unless a thread is still
    inside a split kernel after a thousand yields: then the OS ends them)."""
    _stop(1000)


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's worker threads: the native pool is marked
    empty and free, and as many workers as the parent had are started now (an executable
    whose schedule is fixed runs natively, without asking :func:`pool` again)."""
    global _POOL, _POOL_KEY
    if runner.compiled():
        runner.pool_function("axle_pool_forget")()
        if _POOL is not None and _POOL.n > 1 and runner.pool_function("axle_pool_start")(_POOL.n - 1) == _POOL.n - 1:
            return  # the same pool object: its thread count and wake-up cost hold
    _POOL, _POOL_KEY = None, None


os.register_at_fork(after_in_child=_after_fork_in_child)


def chunks(lo: int, hi: int, n: int) -> list[tuple[int, int]]:
    """[lo, hi) cut into at most n nearly equal, non-empty ranges."""
    total = hi - lo
    n = max(1, min(n, total))
    step, extra = divmod(total, n)
    out, s = [], lo
    for k in range(n):
        e = s + step + (1 if k < extra else 0)
        out.append((s, e))
        s = e
    return out
