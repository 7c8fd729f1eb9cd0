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


def test_the_wake_up_cost_is_read_back_not_measured(compile_cache, two_threads, monkeypatch) -> None:
    pool = threads.pool()
    assert pool.n == 2
    key = decisions.wake_key(pool.n)
    decisions.store_wake(key, 123.0)

    def no_measuring(*a):  # noqa: ANN002, ANN202
        raise AssertionError("measured although stored")

    monkeypatch.setattr(pool, "_wake_us", None)
    monkeypatch.setattr(threads.NativePool, "_measure_wake", no_measuring)
    assert pool.wake_us == 123.0
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
