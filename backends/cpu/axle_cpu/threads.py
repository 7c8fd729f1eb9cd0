"""Splitting a kernel's iteration space across cores.

Compiled kernels are called through ctypes, which releases the GIL, so plain Python
threads run them truly in parallel. Waking a worker costs tens of microseconds, so a
kernel is split only when measured to be worth it (executable._Launch): one-thread
launches first; a kernel slower than ``SPLIT_FACTOR`` times the pool's measured wake-up
cost gets split trials, and the split stays only if it was faster. A split job's chunks
are claimed dynamically (``_Job``). ``AXLE_CPU_THREADS`` sets the number of threads (1
disables splitting).
"""
from __future__ import annotations

import functools
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable

#: try a split when the single-thread time exceeds this many times the pool's wake-up cost
SPLIT_FACTOR = 4.0


def thread_count() -> int:
    env = os.environ.get("AXLE_CPU_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            from axle.errors import AxleError

            raise AxleError(f"AXLE_CPU_THREADS must be a positive integer, got {env!r}") from None
    return _cores()


def device_count() -> int:
    """How many cpu devices the host is split into (``AXLE_FLAGS=--cpu_device_count=N``, 1
    by default): each gets its share of the threads, so that N replicas running side by
    side (``axle.pmap``) do not oversubscribe the cores."""
    from axle.config import config  # here, as thread_count imports axle.errors: this module stays light

    raw = config.backend_flags.get("cpu_device_count", "1")
    try:
        n = int(raw)
        if n < 1:
            raise ValueError
    except ValueError:
        from axle.errors import AxleError

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


class _Job:
    """``nchunks`` calls ``fn(k)``, claimed one by one by whoever is free: the caller and
    any worker that wakes in time. A worker that wakes late finds nothing left and leaves,
    so the caller never waits for a thread the OS has not scheduled (another process's
    spinning threads can hold a core for a whole time slice); it waits only for chunks
    already running."""

    def __init__(self, fn: Callable[[int], None], nchunks: int) -> None:
        self.fn = fn
        self.nchunks = nchunks
        self._claim = itertools.count()  # next() is atomic under the GIL
        self._done = itertools.count(1)
        self.finished = threading.Event()
        self.error: BaseException | None = None

    def work(self) -> None:
        while (k := next(self._claim)) < self.nchunks:
            try:
                self.fn(k)
            except BaseException as e:  # noqa: BLE001 - re-raised by the caller
                self.error = e
            if next(self._done) == self.nchunks:
                self.finished.set()


class WorkerPool:
    """Persistent workers that help the calling thread through a job's chunks."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, daemon=True, name=f"axle-cpu-{i}")
                         for i in range(n - 1)]
        for t in self._threads:
            t.start()
        self.wake_us = self._measure_wake()

    def _work(self) -> None:
        while True:
            self._q.get().work()

    def run(self, fn: Callable[[int], None], nchunks: int) -> None:
        """Calls ``fn(k)`` for every k in range(nchunks), spread over the pool; returns when
        all are done (re-raising the first error)."""
        if nchunks <= 1 or self.n == 1:
            for k in range(nchunks):
                fn(k)
            return
        job = _Job(fn, nchunks)
        for _ in range(min(self.n - 1, nchunks - 1)):
            self._q.put(job)
        job.work()
        job.finished.wait()
        if job.error is not None:
            raise job.error

    def _measure_wake(self) -> float:
        """Median time for a worker to pick up a job (the cost a split must repay)."""
        if self.n == 1:
            return float("inf")
        samples = []
        for _ in range(20):
            started = threading.Event()
            t0 = time.perf_counter()
            self._q.put(_Job(lambda k: started.set(), 1))  # noqa: B023 - run and awaited in this iteration
            started.wait()
            samples.append((time.perf_counter() - t0) * 1e6)
        samples.sort()
        return max(samples[len(samples) // 2], 5.0)


_POOL: WorkerPool | None = None
_LOCK = threading.Lock()


_POOL_ENV: str | None = None


def pool(device: int = 0) -> WorkerPool:
    """Device ``device``'s pool (the process-wide one when the host is one device), sized
    by AXLE_CPU_THREADS split between the --cpu_device_count devices (re-created when
    that changes)."""
    global _POOL, _POOL_ENV
    env = os.environ.get("AXLE_CPU_THREADS")
    current = _POOL if device == 0 else _DEVICE_POOLS.get(device)
    if current is not None and env == _POOL_ENV and current.n == device_threads():  # one lookup per launch
        return current
    n = device_threads()
    with _LOCK:
        if device:
            if device not in _DEVICE_POOLS or _DEVICE_POOLS[device].n != n:
                _DEVICE_POOLS[device] = WorkerPool(n)
            _POOL_ENV = env
            return _DEVICE_POOLS[device]
        if _POOL is None or _POOL.n != n:
            _POOL = WorkerPool(n)
        _POOL_ENV = env
        return _POOL


#: the pools of cpu devices 1..N-1 (--cpu_device_count); device 0 has _POOL
_DEVICE_POOLS: dict[int, WorkerPool] = {}


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's worker threads: forget the pool (the next
    split creates one) and re-create its lock, which a parent thread may have held."""
    global _POOL, _POOL_ENV, _LOCK
    _POOL, _POOL_ENV, _LOCK = None, None, threading.Lock()
    _DEVICE_POOLS.clear()


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
