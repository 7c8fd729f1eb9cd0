"""The CPU executable's call path: the native step runner, output memory, concurrency."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import axle
import axle.numpy as anp


def _entry(f):  # noqa: ANN001, ANN202
    (entry,) = f._cache.values()
    return entry.executable


def test_consecutive_kernels_run_in_one_native_call(cpu) -> None:  # noqa: ANN001
    def step(w, b, x):  # noqa: ANN001, ANN202
        logits = x @ w + b
        e = anp.exp(logits - anp.max(logits, axis=1, keepdims=True))
        p = e / anp.sum(e, axis=1, keepdims=True)
        return w - 0.1 * (x.T @ p), b - 0.1 * anp.sum(p, axis=0)

    rng = np.random.default_rng(0)
    args = [rng.standard_normal((30, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32),
            rng.standard_normal((11, 30)).astype(np.float32)]
    f = axle.jit(step, device=cpu)
    want = axle.jit(step, device="interpreter:0")(*args)
    for _ in range(3):  # the first calls time each kernel, later ones use the schedule
        got = f(*args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)
    exe = _entry(f)
    kernels = sum(1 for launch, _ in exe._steps if launch is not None)
    assert kernels > 2
    segments = exe._segments[1]
    assert [s[0] for s in segments] == ["run"] and segments[0][2] == kernels


def test_repeated_calls_reuse_output_mappings(cpu) -> None:  # noqa: ANN001
    from axle_cpu.memory import POOL

    f = axle.jit(lambda x: x * 2.0 + 1.0, device=cpu)
    x = axle.device_put(np.ones(1 << 20, np.float32), cpu)
    def calls(n: int) -> None:
        r = None
        for _ in range(n):
            r = f(x)  # the previous result is alive during the call: two mappings alternate
            assert float(np.asarray(r)[0]) == 3.0

    calls(3)
    mapped = POOL.stats["mapped"]
    calls(10)
    assert POOL.stats["mapped"] == mapped  # no fresh (page-faulting) mapping per call


def test_pooled_bfloat16_buffers_keep_their_dtype(cpu) -> None:  # noqa: ANN001
    """Buffers of 256 KB and more come from the mapping pool, whose array interface cannot
    name bfloat16: they were void arrays ('V2'), so a transfer raised a raw TypeError and a
    kernel's output came back untyped."""
    from axle.ir.types import DType

    bf16 = DType.BFLOAT16.np
    host = (np.arange(512 * 512) % 251).astype(np.float32).astype(bf16).reshape(512, 512)
    x = axle.device_put(host, cpu)
    assert np.asarray(x).dtype == bf16
    np.testing.assert_array_equal(np.asarray(x).astype(np.float32), host.astype(np.float32))
    f = axle.jit(lambda a: (a.astype(np.float32) * 2.0).astype(bf16).T, device=cpu)
    out = np.asarray(f(x))
    assert out.dtype == bf16 and out.shape == (512, 512)
    np.testing.assert_array_equal(out.astype(np.float32), host.astype(np.float32).T * 2.0)


def test_small_outputs_share_one_block_and_stay_valid(cpu) -> None:  # noqa: ANN001
    f = axle.jit(lambda x: (x + 1.0, x * 3.0, anp.sum(x)), device=cpu)
    a, b, s = f(np.arange(5, dtype=np.float32))
    del f
    np.testing.assert_array_equal(np.asarray(a), np.arange(5) + 1.0)
    np.testing.assert_array_equal(np.asarray(b), np.arange(5) * 3.0)
    assert float(s) == 10.0


def test_concurrent_calls_of_one_executable(cpu) -> None:  # noqa: ANN001
    f = axle.jit(lambda x, y: anp.tanh(x) * y + anp.sum(x * y), device=cpu)
    rng = np.random.default_rng(1)
    pairs = [(rng.standard_normal(999).astype(np.float32), rng.standard_normal(999).astype(np.float32))
             for _ in range(8)]
    f(*pairs[0])
    errors: list[str] = []

    def work(k: int) -> None:
        x, y = pairs[k]
        want = np.tanh(x) * y + np.sum(x * y, dtype=np.float64)
        for _ in range(50):
            got = np.asarray(f(x, y))
            if not np.allclose(got, want, rtol=1e-4, atol=1e-3):
                errors.append(f"thread {k}")
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_split_kernels_never_wait_for_a_busy_worker(cpu, monkeypatch) -> None:  # noqa: ANN001
    """Chunks are claimed dynamically: with the pool's workers gone (as in a forked child
    before it restarts them, or when another library's spinning threads hold the cores),
    the caller runs every chunk itself instead of waiting for them."""
    from axle_cpu import runner, threads

    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    pool = threads.pool()
    x = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    f = axle.jit(lambda a: a * 2.0 + 1.0, device=cpu)
    for _ in range(2 * 2 + 1):
        f(x)
    (launch,) = [launch for launch, _ in _entry(f)._steps if launch is not None]
    out = np.empty_like(x)
    table = np.array([x.ctypes.data, out.ctypes.data], np.uint64)
    threads._stop()  # no worker left: a job is run whole by its caller
    assert pool.alive() == 0
    pool.run(launch.addr, table.ctypes.data, launch.outer, launch.inner, "rows", 16)
    np.testing.assert_array_equal(out, x * 2.0 + 1.0)
    assert runner.pool_function("axle_pool_workers")() == 0
    assert threads.pool().alive() == 1  # started again on the next use


def test_a_split_is_tried_then_kept_only_when_faster(cpu, monkeypatch) -> None:  # noqa: ANN001
    """Threading is decided by measurement: one-thread launches and split trials in turn,
    and the split stays only if it beat one thread (SPLIT_GAIN) — here forced either way."""
    from axle_cpu import executable, threads

    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    monkeypatch.setattr(threads, "SPLIT_FACTOR", 0.0)  # every kernel is worth a trial
    monkeypatch.setattr(executable, "LONG_FACTOR", float("inf"))  # none long (a loaded machine's timing)
    x = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    for gain, kept in ((0.0, False), (1e9, True)):
        monkeypatch.setattr(executable, "SPLIT_GAIN", gain)
        f = axle.jit(lambda a: a * 2.0 + 1.0, device=cpu)
        for _ in range(executable._Launch.LAUNCHES):
            np.testing.assert_array_equal(np.asarray(f(x)), x * 2.0 + 1.0)
        (launch,) = [launch for launch, _ in _entry(f)._steps if launch is not None]
        assert launch.parallel is kept


#: split_verdict(one-thread us, split us, overlap, wake-up us) -> (split, conclusive), with
#: SPLIT_GAIN 0.85, LONG_FACTOR 64 (long from 640 us at a 10 us wake-up), LONG_SLOWER 1.05,
#: OVERLAP 0.5
VERDICTS = [
    ((100.0, 60.0, 0.9, 10.0), (True, True)),  # a win, the threads ran at once
    ((100.0, 60.0, 0.1, 10.0), (True, False)),  # a win on busy cores (one-thread runs preempted?)
    ((100.0, 95.0, 0.9, 10.0), (False, True)),  # short, no win, the threads ran at once
    ((100.0, 95.0, 0.1, 10.0), (False, False)),  # short, the other cores busy: measured again
    ((1000.0, 990.0, 0.1, 10.0), (True, False)),  # long, cores busy: split for now, measured again
    ((1000.0, 1200.0, 0.1, 10.0), (False, False)),  # long, cores busy and the split slower: not for now
    ((1000.0, 1040.0, 0.9, 10.0), (True, True)),  # long, memory-bound: a split costs nothing
    # long and measured slower with both threads: something else ran on the cores (a
    # second thread claiming chunks cannot slow a long kernel down): measured again
    ((1000.0, 1100.0, 0.9, 10.0), (False, False)),
    ((1000.0, 1100.0, 0.1, 10.0), (False, False)),
    ((100.0, 110.0, 1.0, 10.0), (False, True)),  # short and slower split: conclusive
]


@pytest.mark.parametrize(("times", "want"), VERDICTS)
def test_the_split_verdict(times: tuple[float, float, float, float], want: tuple[bool, bool]) -> None:
    from axle_cpu import executable

    assert (executable.SPLIT_GAIN, executable.LONG_FACTOR, executable.LONG_SLOWER, executable.OVERLAP) == \
        (0.85, 64.0, 1.05, 0.5)
    assert executable.split_verdict(*times) == want


def test_one_thread_and_split_launches_alternate(cpu, monkeypatch) -> None:  # noqa: ANN001
    """The measurement runs one thread twice (the first launch is cold), then split and
    one thread as S O O S S O O S: each kind as often first after a foreign call as
    second after its own (benchmarks' measure runs every other call right after another
    library's); a kernel too short to repay a wake-up is decided at its first launch,
    untried."""
    from axle_cpu import executable, threads

    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    monkeypatch.setattr(threads, "SPLIT_FACTOR", 0.0)
    x = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    f = axle.jit(lambda a: a * 2.0 + 1.0, device=cpu)
    f(x)
    (launch,) = [launch for launch, _ in _entry(f)._steps if launch is not None]
    order = []
    run_parallel = launch._run_parallel
    monkeypatch.setattr(launch, "_run_parallel", lambda *a: (order.append("S"), run_parallel(*a)))
    fn = launch.fn
    monkeypatch.setattr(launch, "fn", lambda *a: (order.append("O"), fn(*a)))
    while launch.parallel is None:
        np.testing.assert_array_equal(np.asarray(f(x)), x * 2.0 + 1.0)
    assert "O" + "".join(order) == "OOSOOSSOOS" == executable._Launch.ORDER
    assert len(order) + 1 == executable._Launch.LAUNCHES and executable._Launch.TIMED == 4
    # measure's pattern (a call after another library's, then one after its own): pairs
    # from the third launch on; each kind as often first in its pair as second
    pairs = ["OOSOOSSOOS"[k:k + 2] for k in range(2, 10, 2)]
    assert [p[0] for p in pairs].count("S") == [p[1] for p in pairs].count("S") == 2
    monkeypatch.setattr(threads, "SPLIT_FACTOR", float("inf"))
    pool = threads.pool()
    monkeypatch.setattr(pool, "_wake_us", threads.WAKE_FLOOR_US)
    monkeypatch.setattr(pool, "_woken_at", float("inf"))  # (not measured again here)
    g = axle.jit(lambda a: a * 3.0, device=cpu)
    g(x)
    (short,) = [launch for launch, _ in _entry(g)._steps if launch is not None]
    assert short.parallel is False and short.conclusive


def test_too_short_against_an_inflated_wake_up_cost_is_not_conclusive(cpu, monkeypatch) -> None:  # noqa: ANN001
    """A kernel found too short to split against a wake-up cost that a busy moment
    inflated (above WAKE_TRUSTED_US) is not split in this process, and measured again
    (stored as null): 56.8 us, measured once at load 4, made every kernel under 227 us
    too short for good."""
    from axle_cpu import threads

    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    monkeypatch.setattr(threads, "SPLIT_FACTOR", float("inf"))  # every kernel too short
    x = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    pool = threads.pool()
    monkeypatch.setattr(pool, "_woken_at", float("inf"))
    for wake, conclusive in ((56.8, False), (threads.WAKE_TRUSTED_US, True), (threads.WAKE_FLOOR_US, True)):
        monkeypatch.setattr(pool, "_wake_us", wake)
        g = axle.jit(lambda a: a * 3.0 + wake, device=cpu)
        np.testing.assert_array_equal(np.asarray(g(x)), x * np.float32(3.0) + np.float32(wake))
        (short,) = [launch for launch, _ in _entry(g)._steps if launch is not None]
        assert (short.parallel, short.conclusive) == (False, conclusive), wake


def test_to_device_types_copies_and_alignment(cpu, monkeypatch) -> None:  # noqa: ANN001
    """to_device remembers array types by (dtype, shape): each buffer still gets its own
    type, a 64-byte aligned copy of the values (0-d, empty, bfloat16 included) and its
    address, also once the bounded memo is cleared."""
    import ml_dtypes

    import axle_cpu
    from axle.ir.dtypes import dtype

    backend = axle.REGISTRY.backend_for(cpu)
    monkeypatch.setattr(axle_cpu, "_TYPES", {})
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(6, dtype=np.int64).reshape(3, 2),
              np.float64(2.5), np.zeros((0, 4), np.int8), np.arange(5).astype(ml_dtypes.bfloat16),
              np.arange(6, dtype=np.float32).reshape(3, 2).T]
    for _ in range(2):
        for a in arrays:
            buf = backend.to_device(a, cpu)
            assert buf.type.shape == np.shape(a) and buf.type.dtype is dtype(np.asarray(a).dtype)
            assert buf.handle.flags.c_contiguous and buf.addr % 64 == 0 and buf.addr == buf.handle.ctypes.data
            assert not np.shares_memory(buf.handle, a)
            np.testing.assert_array_equal(buf.handle, a)
        monkeypatch.setattr(axle_cpu, "_TYPES", {k: v for k, v in list(axle_cpu._TYPES.items())[:1]})
