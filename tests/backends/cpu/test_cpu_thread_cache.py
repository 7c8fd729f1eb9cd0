"""Measured threading decisions in the persistent compile cache (axle_cpu/decisions.py): a
later executable of the same optimized module starts with the split decisions measured
before (nothing measured, results bit-identical); a damaged or mismatched entry is
ignored and measured again; another thread count or CPU is another key; the pool's
wake-up cost is read back instead of measured. A decision measured while the other cores
were busy is stored as null and measured again by the next process (executable._Launch)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.config import config
from axle.device_compile import compile_on_device
from axle_cpu import decisions, executable, target, threads

DEV = "cpu:0"
# big enough (256 rows of 1024) that the row kernel's split is measured on two threads
X = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
#: calls after which every kernel's split is decided and stored (by the next call's schedule)
MEASURED = executable._Launch.LAUNCHES + 1


def _softmax(x):  # noqa: ANN001, ANN202
    e = anp.exp(x - anp.max(x, axis=1, keepdims=True))
    return e / anp.sum(e, axis=1, keepdims=True)


def _compile():  # noqa: ANN202
    module = axle.jit(_softmax, device=DEV).lower(X).module
    return compile_on_device(module, axle.device(DEV))[0]


def _run(exe) -> np.ndarray:  # noqa: ANN001
    dev = axle.device(DEV)
    backend = axle.REGISTRY.backend_for(dev)
    return backend.to_host(exe.execute([backend.to_device(X, dev)])[0])


def _splits(exe) -> list[bool | None]:  # noqa: ANN001
    return [launch.parallel for launch in exe._timed_launches()]


@pytest.fixture
def two_threads(monkeypatch):  # noqa: ANN001, ANN201
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    # every split trial counts (on a loaded machine a trial's threads may not run at once,
    # and its decision would be measured again instead of stored: tested below)
    monkeypatch.setattr(executable, "OVERLAP", 0.0)
    # and no long kernel's split loses (one that does is measured again, never stored)
    monkeypatch.setattr(executable, "LONG_SLOWER", float("inf"))


def test_a_later_executable_starts_with_the_stored_splits(compile_cache, two_threads, monkeypatch) -> None:
    exe = _compile()
    assert _splits(exe) and all(s is None for s in _splits(exe))  # measured on the first calls
    want = [_run(exe) for _ in range(MEASURED)][-1]
    measured = _splits(exe)
    assert None not in measured

    def no_measuring(*a):  # noqa: ANN002, ANN202
        raise AssertionError("the wake-up cost was measured again")

    monkeypatch.setattr(threads.NativePool, "_measure_wake", no_measuring)
    axle.reset_stats()
    exe2 = _compile()
    assert _splits(exe2) == measured  # before any call
    assert exe2._schedule(threads.pool().n) is not None  # the first call runs the final schedule
    np.testing.assert_array_equal(_run(exe2), want)
    assert axle.stats()["disk_cache_corrupt"] == 0


@pytest.mark.parametrize("bad", [b"{not json", b'{"split": [true]}', b'{"split": ["yes"]}', b"[]"])
def test_a_damaged_or_mismatched_entry_is_measured_again(compile_cache, two_threads, bad: bytes) -> None:
    exe = _compile()
    key = exe._splits_key
    assert key is not None
    n = len(exe._timed_launches())
    target.DISK.put(key, bad if bad != b'{"split": [true]}' else json.dumps({"split": [True] * (n + 1)}).encode())
    axle.reset_stats()
    exe2 = _compile()
    assert all(s is None for s in _splits(exe2))
    assert axle.stats()["disk_cache_corrupt"] == 1
    for _ in range(MEASURED):
        _run(exe2)
    assert decisions.load_splits(key, n) == _splits(exe2)  # rewritten once measured


def test_off_stores_no_decisions(monkeypatch, two_threads) -> None:
    monkeypatch.setattr(config, "compile_cache", "off")
    exe = _compile()
    assert exe._splits_key is None


def test_the_key_changes_with_threads_cpu_and_module(monkeypatch) -> None:
    base = decisions.split_key("d" * 64, "m", "s", 2)
    assert base == decisions.split_key("d" * 64, "m", "s", 2)
    others = {decisions.split_key("d" * 64, "m", "s", 3), decisions.split_key("e" * 64, "m", "s", 2),
              decisions.split_key("d" * 64, "m", "t", 2)}
    wake = decisions.wake_key(2)
    h = target.host()
    monkeypatch.setattr(target, "host", lambda: dataclasses.replace(h, cpu=h.cpu + "-other"))
    others |= {decisions.split_key("d" * 64, "m", "s", 2)}
    assert base not in others and len(others) == 4
    assert decisions.wake_key(2) != wake


def test_the_wake_up_cost_is_the_least_known(compile_cache, two_threads, monkeypatch) -> None:
    """A process measures the wake-up cost once and keeps the least of that and the cost
    the compile cache holds, stored (when lower) with the next decisions stored: a cost
    measured on busy cores (56.8 us at load 4, against 2-7 us) no longer holds for good,
    one measured on free cores is not lost to a busy process, and a process that stores
    no decision writes nothing."""
    pool = threads.pool()
    assert pool.n == 2
    key = decisions.wake_key(pool.n)
    decisions.store_wake(key, 123.0)
    probes = iter([400.0, 40.0, 90.0, 30.0])
    monkeypatch.setattr(threads.NativePool, "_measure_wake", lambda self: next(probes))
    monkeypatch.setattr(pool, "_wake_us", None)
    assert pool.wake_us == 123.0  # a busy probe: the stored cost
    pool.save_wake()
    assert decisions.load_wake(key) == 123.0
    monkeypatch.setattr(pool, "_wake_us", None)  # (a new process)
    assert pool.wake_us == 40.0 and decisions.load_wake(key) == 123.0  # lower: kept, not yet stored
    pool.save_wake()  # (an executable stores its decisions)
    assert decisions.load_wake(key) == 40.0
    pool.refresh_wake()  # asked again at once (another executable's recheck): not measured
    assert pool.wake_us == 40.0 and next(probes) == 90.0
    monkeypatch.setattr(pool, "_woken_at", -float("inf"))  # (WAKE_REFRESH_S later)
    pool.refresh_wake()  # measured again in this process (CpuExecutable's recheck): a lower one kept
    assert pool.wake_us == 30.0
    exe = _compile()  # its decisions stored: the lower cost with them (or one its split trials probed)
    for _ in range(MEASURED):
        _run(exe)
    assert decisions.load_splits(exe._key, 1) is not None and decisions.load_wake(key) == pool.wake_us <= 30.0
    for bad in (b'{"wake_us": -1.0}', b'{"wake_us": "fast"}', b"\xff"):
        axle.reset_stats()
        target.DISK.put(key, bad)
        assert decisions.load_wake(key) is None
        assert axle.stats()["disk_cache_corrupt"] == 1


def test_a_plan_without_timed_kernels_keeps_nothing(compile_cache, two_threads) -> None:
    """Kernels inside a loop are never timed: no decisions, so no entry is written per process."""
    def loop(x):  # noqa: ANN001, ANN202
        return axle.lax.fori_loop(0, 3, lambda i, v: v * 0.5 + 1.0, x)

    exe = compile_on_device(axle.jit(loop, device=DEV).lower(X).module, axle.device(DEV))[0]
    assert not exe._timed_launches() and exe._splits_key is None
    axle.reset_stats()
    for _ in range(3):
        _run(exe)
    assert axle.stats()["disk_cache_writes"] == 0


def test_a_decision_measured_on_busy_cores_is_measured_again(compile_cache, two_threads, monkeypatch) -> None:
    """Split trials whose chunks the caller ran alone (no worker got a core) say nothing
    about a split: the decision holds for this process only, is stored as null, and the
    next executable of the module measures that kernel again (before, a split measured
    not to pay on a loaded machine stayed off for good)."""
    monkeypatch.setattr(executable, "OVERLAP", 0.5)
    monkeypatch.setattr(executable, "SPLIT_GAIN", 0.0)  # no split wins outright
    monkeypatch.setattr(threads, "SPLIT_FACTOR", 0.0)  # tried even if a loaded machine timed the wake-up long
    monkeypatch.setattr(threads.NativePool, "helped", lambda self: 0)  # the workers never ran a chunk
    exe = _compile()
    key = exe._splits_key
    want = [_run(exe) for _ in range(MEASURED)][-1]
    (launch,) = exe._timed_launches()
    assert launch.parallel is not None and not launch.conclusive
    assert decisions.load_splits(key, 1) == [None]
    exe2 = _compile()
    assert _splits(exe2) == [None] and exe2._splits_key == key  # measured again, then stored
    monkeypatch.undo()  # every worker's chunk counted, every trial counts again
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    monkeypatch.setattr(executable, "OVERLAP", 0.0)
    monkeypatch.setattr(executable, "LONG_SLOWER", float("inf"))
    for _ in range(MEASURED):
        np.testing.assert_array_equal(_run(exe2), want)
    (launch2,) = exe2._timed_launches()
    assert launch2.conclusive and decisions.load_splits(key, 1) == [launch2.parallel]


def test_a_stored_entry_may_hold_nulls_but_nothing_else(compile_cache) -> None:
    key = decisions.split_key("d" * 64, "m", "s", 2)
    decisions.store_splits(key, [True, None, False])
    assert decisions.load_splits(key, 3) == [True, None, False]
    for bad in ([True, 0, False], [True, "null", False]):
        axle.reset_stats()
        target.DISK.put(key, json.dumps({"split": bad}).encode())
        assert decisions.load_splits(key, 3) is None
        assert axle.stats()["disk_cache_corrupt"] == 1


def _busy_cores(monkeypatch) -> None:  # noqa: ANN001
    """Every split trial's workers run no chunk (no other core free): inconclusive; the
    verdict itself fixed (no split) whatever the timing."""
    monkeypatch.setattr(executable, "OVERLAP", 0.5)
    monkeypatch.setattr(executable, "SPLIT_GAIN", 0.0)
    monkeypatch.setattr(executable, "LONG_FACTOR", float("inf"))
    monkeypatch.setattr(threads, "SPLIT_FACTOR", 0.0)
    monkeypatch.setattr(threads.NativePool, "helped", lambda self: 0)


def test_an_inconclusive_decision_is_measured_again_in_the_process(compile_cache, two_threads, monkeypatch) -> None:
    """A decision measured on busy cores holds only until the executable has made
    RECHECK[0] more calls: then the kernel is measured again (and the wake-up cost with
    it), and a conclusive result is stored (before, a process whose first calls met a
    busy machine kept their decision to its end; make bench measures each row in one)."""
    _busy_cores(monkeypatch)
    monkeypatch.setattr(executable, "RECHECK", (3, 5))
    exe = _compile()
    key = exe._splits_key
    want = [_run(exe) for _ in range(MEASURED)][-1]
    (launch,) = exe._timed_launches()
    assert (launch.parallel, launch.conclusive, launch.measured) == (False, False, 1)
    assert decisions.load_splits(key, 1) == [None] and exe._recheck == 3
    segments = exe._segments
    for _ in range(2):
        np.testing.assert_array_equal(_run(exe), want)
    assert launch.parallel is False and exe._segments is segments is not None  # not yet
    refreshed = []
    monkeypatch.setattr(threads.NativePool, "refresh_wake", lambda self: refreshed.append(1))
    np.testing.assert_array_equal(_run(exe), want)  # the third: measured again from here
    assert launch.parallel is None and refreshed == [1]
    assert exe._segments is None and exe._fast is None  # the general path while measuring
    monkeypatch.setattr(executable, "OVERLAP", 0.0)  # the cores free now: every trial counts
    while launch.parallel is None:
        np.testing.assert_array_equal(_run(exe), want)
    np.testing.assert_array_equal(_run(exe), want)  # (the schedule made, the decision stored)
    assert (launch.parallel, launch.conclusive, launch.measured) == (False, True, 2)
    assert decisions.load_splits(key, 1) == [False] and exe._recheck == 0
    for _ in range(10):
        np.testing.assert_array_equal(_run(exe), want)
    assert launch.measured == 2 and exe._segments is not None


def test_a_decision_is_measured_again_at_most_len_recheck_times(compile_cache, two_threads, monkeypatch) -> None:
    """On cores that stay busy, the measurement is repeated after RECHECK[0], then
    RECHECK[1] more calls, and no more (each costs a few calls through the general path)."""
    _busy_cores(monkeypatch)
    monkeypatch.setattr(executable, "RECHECK", (2, 4))
    exe = _compile()
    want = _run(exe)
    (launch,) = exe._timed_launches()
    for _ in range(3 * MEASURED + 2 + 4 + 20):
        np.testing.assert_array_equal(_run(exe), want)
    assert (launch.parallel, launch.conclusive, launch.measured) == (False, False, 3)
    assert exe._recheck == 0 and exe._segments is not None
    assert decisions.load_splits(exe._key, 1) == [None]  # the next process measures it again
    # two threads' calls counting the last call down at once: one measures again, the
    # other finds the count spent (it was never left below zero, re-measuring on every call)
    exe._recheck = 1
    exe._count_recheck()
    assert launch.parallel is None and exe._rechecks == 3
    exe._count_recheck()  # (the second thread, past its check of the count)
    assert exe._recheck == 0 and exe._rechecks == 3


def test_a_conclusive_decision_is_not_measured_again(compile_cache, two_threads, monkeypatch) -> None:
    monkeypatch.setattr(executable, "RECHECK", (2, 4))
    exe = _compile()
    for _ in range(MEASURED + 20):
        _run(exe)
    (launch,) = exe._timed_launches()
    assert launch.conclusive and launch.measured == 1 and exe._recheck == 0


def test_a_split_reduction_measured_again_takes_the_fast_path_again(compile_cache, two_threads, monkeypatch) -> None:
    """The 2^20 seed's shape of program (a sum split into partials combined on the host,
    fastcall.py): measured on busy cores it runs on one thread through the fast path;
    measured again on free cores it is split, and the fast path is made again with the
    split reduction between its native runs, with the same answer."""
    _busy_cores(monkeypatch)
    monkeypatch.setattr(executable, "RECHECK", (3,))
    rng = np.random.default_rng(20)
    xs = [rng.standard_normal(1 << 16).astype(np.float32) for _ in range(3)]
    want = np.sum(xs[0].astype(np.float64) + xs[1].astype(np.float64) * xs[2])
    f = axle.jit(lambda x, y, z: anp.sum(x + y * z), device=DEV)
    dargs = [axle.device_put(a, DEV) for a in xs]
    got = [np.asarray(f(*dargs)) for _ in range(MEASURED + 1)]
    (entry,) = f._cache.values()
    exe = entry.executable
    (launch,) = exe._timed_launches()
    assert (launch.parallel, launch.conclusive) == (False, False)
    assert exe._fast is not None and exe._fast.segments is None  # one native call, one thread
    monkeypatch.setattr(executable, "OVERLAP", 0.0)  # the cores free: every trial counts
    monkeypatch.setattr(executable, "SPLIT_GAIN", 1e9)  # and the split wins
    got += [np.asarray(f(*dargs)) for _ in range(2 + MEASURED + 3)]
    assert (launch.parallel, launch.conclusive, launch.measured) == (True, True, 2)
    assert exe._fast is not None and exe._fast.segments is not None
    assert any(seg[0] == "step" and seg[1].splits_reduction(2) for seg in exe._fast.segments)
    for g in got:
        np.testing.assert_allclose(float(g), want, rtol=1e-5, atol=1e-3)
    for g in got[-3:]:  # split, through the fast path: the same bits every call
        np.testing.assert_array_equal(g, got[-1])
