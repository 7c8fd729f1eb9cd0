"""The native worker pool (pool_ir.py, threads.py): split kernels give the one-thread
answers, kernels inside native loops are split too, a forked child and many Python threads
use it safely, the thread count follows AXLE_CPU_THREADS and --cpu_threads."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.config import config
from axle.errors import AxleError
from axle.testing import IN_CI

WARM = 11  # calls after which every kernel's threading is measured (_Launch.LAUNCHES) and the schedule fixed
RNG = np.random.default_rng(7)


def _exe(f):  # noqa: ANN001, ANN202
    (entry,) = f._cache.values()
    return entry.executable


def _forced_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel is tried split, and the split is kept whatever the timing says, for
    good (conclusive even on busy cores: never measured again, executable.RECHECK)."""
    from axle_cpu import executable, threads

    monkeypatch.setattr(threads, "SPLIT_FACTOR", 0.0)
    monkeypatch.setattr(executable, "SPLIT_GAIN", 1e9)
    monkeypatch.setattr(executable, "OVERLAP", 0.0)


@functools.cache
def _programs() -> list[tuple]:
    """The same arrays on every call."""
    x = RNG.standard_normal((1 << 18,)).astype(np.float32)
    m = RNG.standard_normal((1024, 257)).astype(np.float32)
    thin = RNG.standard_normal((60001, 3))
    return [
        (lambda a: anp.sum(a * a + 1.0), (x,)),  # a full reduction: partials combined in Python
        (lambda a: anp.tanh(a) * 2.0, (x,)),  # elementwise: split by rows
        (lambda a: anp.exp(a - anp.max(a, axis=1, keepdims=True)), (m,)),  # row reductions
        (lambda a: anp.sum(a, axis=0), (thin,)),  # few columns: along the reduced axis
        (lambda a: anp.sum(a, axis=0), (m,)),  # column sums: split by columns
    ]


def _run_all(monkeypatch: pytest.MonkeyPatch, nt: str, calls: int) -> list[list[np.ndarray]]:
    monkeypatch.setenv("AXLE_CPU_THREADS", nt)
    out = []
    for fn, args in _programs():
        f = axle.jit(fn, device="cpu:0")
        out.append([np.asarray(f(*args)) for _ in range(calls)])
    return out


def test_split_kernels_match_one_thread_and_repeat_exactly(cpu, monkeypatch) -> None:  # noqa: ANN001
    """Split by rows or columns, every element is computed as on one thread (bitwise);
    split along a reduced axis the partial results are combined in chunk order, so every
    call gives the same bits whichever thread ran which chunk."""
    from axle_cpu import threads

    _forced_split(monkeypatch)
    one = _run_all(monkeypatch, "1", 2)
    two = _run_all(monkeypatch, "2", WARM + 10)
    assert threads.pool().n == 2 and threads.pool().alive() == 1
    for k, (a, b) in enumerate(zip(one, two)):
        for r in b[WARM:]:  # the first calls run on one thread, timed: split from then on
            np.testing.assert_array_equal(r, b[-1], err_msg=f"program {k}: split calls differ")
        if k in (1, 2, 4):
            np.testing.assert_array_equal(b[-1], a[-1], err_msg=f"program {k}")
        else:
            np.testing.assert_allclose(b[-1], a[-1], rtol=1e-5, err_msg=f"program {k}")


def test_kernels_inside_native_loops_are_split(cpu, monkeypatch) -> None:  # noqa: ANN001
    """A big kernel in a loop body is split by the native runner (its record carries the
    split mode), still in one native call, with the one-thread answers."""
    from axle_cpu.runner import SPLIT_SHIFT

    x = RNG.standard_normal((1 << 17,)).astype(np.float32)

    def fn(v, n):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, n, lambda i, c: anp.tanh(c * 0.9 + 0.1) + i.astype(anp.float32) * 1e-3, v)

    results = {}
    for nt in ("1", "2"):
        monkeypatch.setenv("AXLE_CPU_THREADS", nt)
        f = axle.jit(fn, device=cpu)
        for _ in range(WARM):
            got = np.asarray(f(x, np.int32(25)))
        results[nt] = got
        exe = _exe(f)
        assert any(int(code) >> SPLIT_SHIFT for code in exe._table["fn"]), "no kernel in the loop is split"
        assert [seg[0] for seg in exe._segments[1]] == ["run"], "the loop and its split kernel: one native call"
    np.testing.assert_array_equal(results["2"], results["1"])
    want = x
    for i in range(25):
        want = np.tanh(want * np.float32(0.9) + np.float32(0.1)) + np.float32(i) * np.float32(1e-3)
    np.testing.assert_allclose(results["2"], want, rtol=2e-5, atol=2e-6)


def test_many_python_threads_share_the_pool(cpu, monkeypatch) -> None:  # noqa: ANN001
    """Callers that find the pool taken run their chunks themselves: never a wait on
    another caller's job, never a wrong answer."""
    _forced_split(monkeypatch)
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    x = RNG.standard_normal((1 << 17,)).astype(np.float32)
    f = axle.jit(lambda a: anp.sum(anp.tanh(a)), device=cpu)
    g = axle.jit(lambda a: anp.tanh(a) * 3.0, device=cpu)
    for _ in range(WARM):  # timed on one thread first, then split
        want_f = np.asarray(f(x))
        g(x)
    want_g = np.tanh(x) * np.float32(3.0)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(30):
                np.testing.assert_array_equal(np.asarray(f(x)), want_f)
                np.testing.assert_allclose(np.asarray(g(x)), want_g, rtol=2e-6, atol=1e-6)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    workers = [threading.Thread(target=work) for _ in range(6)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert not any(t.is_alive() for t in workers), "a caller hung"
    assert not errors, errors[0]


def test_forked_child_restarts_the_pool(cpu, monkeypatch) -> None:  # noqa: ANN001
    """The child has none of the parent's workers: it starts as many at once (a child
    waiting on the parent's workers would hang; one left without workers would run a
    fixed schedule's split kernels on one thread for good)."""
    from axle_cpu import runner, threads

    _forced_split(monkeypatch)
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    x = RNG.standard_normal((1 << 17,)).astype(np.float32)
    f = axle.jit(lambda a: anp.tanh(a) * 2.0, device=cpu)
    for _ in range(WARM):
        want = np.asarray(f(x))
    assert threads.pool().alive() == 1
    pid = os.fork()
    if pid == 0:  # the child: any failure is its exit status
        code = 1
        try:
            workers = runner.pool_function("axle_pool_workers")()  # before any Python asks for the pool
            got = np.asarray(f(x))
            fresh = axle.jit(lambda a: anp.sum(a * 2.0), device=cpu)
            s = [np.asarray(fresh(x)) for _ in range(WARM)]
            total = 2 * x.sum(dtype=np.float64)
            # a float32 sum of 2^17 terms that nearly cancel (|total| about 2 against 2e5 for
            # sum |2x|): its rounding error is relative to the magnitudes, not to the total
            # (rtol=1e-4 alone failed on some of RNG's draws, on one thread and split alike)
            ok = np.array_equal(got, want) and threads.pool().alive() == 1 and \
                np.isclose(s[-1], total, rtol=1e-4, atol=1e-6 * 2 * np.abs(x).sum(dtype=np.float64))
            code = 0 if ok and workers == 1 else 2 + (workers != 1)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
    np.testing.assert_array_equal(np.asarray(f(x)), want)  # the parent's pool still works


def test_cpu_threads_flag_and_environment(cpu, monkeypatch) -> None:  # noqa: ANN001
    """AXLE_CPU_THREADS wins, else --cpu_threads; 1 thread starts no worker."""
    from axle_cpu import threads

    monkeypatch.delenv("AXLE_CPU_THREADS", raising=False)
    monkeypatch.setitem(config.backend_flags, "cpu_threads", "1")
    assert threads.thread_count() == 1 and threads.pool().n == 1 and threads.pool().alive() == 0
    x = RNG.standard_normal((1 << 16,)).astype(np.float32)
    f = axle.jit(lambda a: anp.sum(anp.exp(a)), device=cpu)
    for _ in range(WARM):
        np.testing.assert_allclose(np.asarray(f(x)), np.exp(x).sum(dtype=np.float64), rtol=1e-4)
    monkeypatch.setitem(config.backend_flags, "cpu_threads", "2")
    assert threads.pool().n == 2 and threads.pool().alive() == 1
    monkeypatch.setenv("AXLE_CPU_THREADS", "1")
    assert threads.pool().n == 1 and threads.pool().alive() == 0
    monkeypatch.delenv("AXLE_CPU_THREADS")
    monkeypatch.setitem(config.backend_flags, "cpu_threads", "two")
    with pytest.raises(AxleError, match="--cpu_threads must be a positive integer"):
        threads.thread_count()


def test_process_exits_cleanly_with_the_pool_running() -> None:
    """At exit the workers leave their futex and are joined."""
    script = ("import numpy as np, axle, axle.numpy as anp\n"
              "from axle_cpu import threads\n"
              "f = axle.jit(lambda a: anp.tanh(a), device='cpu:0')\n"
              "x = np.ones(1 << 16, np.float32)\n"
              "[f(x) for _ in range(8)]\n"
              "p = threads.pool(); assert p.alive() == 1, p.alive()\n"
              "threads._shutdown(); assert p.alive() == 0, p.alive()\n"
              "threads.pool(); print('ok')\n")
    env = {**os.environ, "AXLE_CPU_THREADS": "2", "AXLE_BACKENDS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_split_reduction_partials_are_the_chunks_of_threads_chunks(cpu, monkeypatch) -> None:  # noqa: ANN001
    """The native pool cuts a reduction as the Python pool did (threads.chunks): each
    partial result is bitwise the kernel run alone over that chunk, so a split sum keeps
    the answers it had."""
    from axle_cpu import threads
    from axle_cpu.executable import _ReductionSplit

    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    xs = [RNG.standard_normal(100_003).astype(np.float32) for _ in range(3)]
    f = axle.jit(lambda a, b, c: anp.sum(a + b * c), device=cpu)
    f(*xs)
    (launch,) = [la for la, _ in _exe(f)._steps if la is not None]
    out = np.zeros((), np.float32)
    split = _ReductionSplit(launch, [out], 8)
    split.ptrs[:, :3] = [a.ctypes.data for a in xs]
    row = 8 * launch.nbuf
    threads.pool().run(launch.addr, split.base, launch.outer, launch.inner, "reduction", 8, row, launch.rsize)
    pooled = split.partial[0].copy()
    split.partial[0][...] = np.nan
    for k, (lo, hi) in enumerate(threads.chunks(0, launch.rsize, 8)):  # one chunk at a time, on this thread
        launch.fn(split.base + k * row, 0, launch.outer, 0, launch.inner, lo, hi)
    np.testing.assert_array_equal(pooled, split.partial[0])
    want = (xs[0].astype(np.float64) + xs[1].astype(np.float64) * xs[2]).sum()
    np.testing.assert_allclose(pooled.sum(dtype=np.float64), want, rtol=1e-5)



def test_restarted_pool_never_runs_the_job_before_the_stop(cpu, monkeypatch) -> None:  # noqa: ANN001
    """Stopping publishes a new generation for the workers to leave by; a worker started
    later must find no chunk under it, never the last job's fields (a re-run of that
    kernel on pointers its caller may have freed, or on fields a new job is rewriting:
    test_cpu_runtime's stop-and-restart segfaulted about one run in eight). Here the last
    job's arrays stay alive and change, so a re-run would show in the output; the worker
    is started directly, with no probe job rewriting the fields first."""
    import time

    from axle_cpu import runner, threads

    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    pool = threads.pool()
    if pool.n < 2:  # x86_64 and aarch64 hosts (CI's) start workers: there this must run
        msg = "the native pool starts no worker on this architecture"
        pytest.fail(msg) if IN_CI else pytest.skip(msg)
    x = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    want = x * 2.0 + 1.0
    f = axle.jit(lambda a: a * 2.0 + 1.0, device=cpu)
    f(x)
    (launch,) = [launch for launch, _ in _exe(f)._steps if launch is not None]
    out = np.empty_like(x)
    table = np.array([x.ctypes.data, out.ctypes.data], np.uint64)
    pool.run(launch.addr, table.ctypes.data, launch.outer, launch.inner, "rows", 16)  # a job through the pool
    np.testing.assert_array_equal(out, want)
    threads._stop()
    x[:] = 7.0  # a re-run of that job would now write 15 into out
    try:
        assert runner.pool_function("axle_pool_start")(1) == 1
        for _ in range(1000):
            if pool.alive() == 1:
                break
            time.sleep(0.001)
        time.sleep(0.05)  # the new worker has looked at the claim word
        np.testing.assert_array_equal(out, want)
    finally:
        runner.pool_function("axle_pool_stop")(1 << 30)


def test_the_workers_chunks_are_counted(cpu, monkeypatch) -> None:  # noqa: ANN001
    """NativePool.helped counts the chunks the workers ran, never the caller's (how a split
    trial tells that its threads ran at once, executable._Launch): a probe job's chunks
    are all the workers', a job with no worker left is the caller's alone."""
    from axle_cpu import runner, threads

    monkeypatch.setenv("AXLE_CPU_THREADS", "3")
    pool = threads.pool()
    assert pool.n == 3
    before = pool.helped()
    assert runner.pool_function("axle_pool_probe")() == 1  # one no-op chunk per worker, none for the caller
    assert pool.helped() - before == 2
    f = axle.jit(lambda a: a * 2.0 + 1.0, device=cpu)
    x = np.arange(4096 * 4, dtype=np.float32).reshape(4096, 4)
    f(x)
    (launch,) = [launch for launch, _ in _exe(f)._steps if launch is not None]
    out = np.empty_like(x)
    table = np.array([x.ctypes.data, out.ctypes.data], np.uint64)
    threads._stop()  # no worker left: the caller runs every chunk
    before = pool.helped()
    pool.run(launch.addr, table.ctypes.data, launch.outer, launch.inner, "rows", 16)
    np.testing.assert_array_equal(out, x * 2.0 + 1.0)
    assert pool.helped() == before


def test_the_wake_up_cost_is_the_least_of_its_probes(cpu, monkeypatch) -> None:  # noqa: ANN001
    """Other processes only ever delay a worker: the cost kept (per machine, in the compile
    cache) is the least probe, not the median, which on a busy machine kept every kernel
    under a few milliseconds from being tried. A probe that found the pool taken by
    another caller ran nothing and is not counted (it took no time: it read as 5 us)."""
    import time

    from axle_cpu import runner, threads

    # most probes delayed (a busy machine); those of 0 s found the pool taken
    probes = iter([(0.0, 0)] * 5 + [(0.02, 1)] * 11 + [(0.0, 0)] * 30 + [(0.005, 1)] * 9)

    def probe() -> int:
        delay, ran = next(probes)
        if delay:
            time.sleep(delay)
        return ran

    real = runner.pool_function
    monkeypatch.setattr(runner, "pool_function", lambda name: probe if name == "axle_pool_probe" else real(name))
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    pool = threads.pool()
    us = pool._measure_wake()
    assert 5000.0 <= us < 20_000.0  # the least probe that ran (the median would be >= 20 ms)
    assert next(probes, None) is None  # 20 probes that ran, those that did not skipped
    # after a split trial, one more probe at another moment: the least is kept
    monkeypatch.setattr(pool, "_wake_us", us)
    monkeypatch.setattr(pool, "_wake_unsaved", False)
    probes = iter([(0.0, 0), (0.05, 1), (0.0, 1)])
    pool.probe_wake()  # the pool taken: nothing learnt
    assert pool.wake_us == us and not pool._wake_unsaved
    pool.probe_wake()  # slower: nothing learnt
    assert pool.wake_us == us and not pool._wake_unsaved
    pool.probe_wake()  # faster (no delay): kept, to be stored with the next decisions
    assert threads.WAKE_FLOOR_US <= pool.wake_us < 1000.0 and pool._wake_unsaved


def test_each_split_trial_probes_the_wake_up_cost_after_it(cpu, monkeypatch) -> None:  # noqa: ANN001
    from axle_cpu import executable, threads

    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    monkeypatch.setattr(threads, "SPLIT_FACTOR", 0.0)
    x = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    f = axle.jit(lambda a: a * 2.0 + 1.0, device=cpu)
    f(x)
    (launch,) = [la for la, _ in _exe(f)._steps if la is not None]
    order = []
    run_parallel = launch._run_parallel
    monkeypatch.setattr(launch, "_run_parallel", lambda *a: (order.append("S"), run_parallel(*a)))
    monkeypatch.setattr(threads.NativePool, "probe_wake", lambda self: order.append("p"))
    while launch.parallel is None:
        np.testing.assert_array_equal(np.asarray(f(x)), x * 2.0 + 1.0)
    assert "".join(order) == "Sp" * executable._Launch.TIMED


def test_warm_covers_the_measurement() -> None:
    from axle_cpu import executable

    assert WARM == executable._Launch.LAUNCHES + 1


#: programs with a reduction split along its reduced axis (partials combined on the host):
#: alone, feeding a later kernel (a temporary of the output block), float max (combined
#: with IEEE ties, not one ufunc), float16 partials (combined in float32), several outputs
def _split_reduction_programs() -> list[tuple]:
    rng = np.random.default_rng(18)  # (not RNG: the other tests' arrays stay as they were)
    x = rng.standard_normal(1 << 18).astype(np.float32)
    y = rng.standard_normal(1 << 18).astype(np.float32)
    h = (rng.standard_normal(1 << 17) * 0.1).astype(np.float16)
    return [
        (lambda a, b: anp.sum(a + a * b), (x, y)),
        (lambda a, b: anp.tanh(a[:8]) * anp.sum(a * b), (x, y)),
        (lambda a, b: anp.max(a * b), (x, y)),
        (lambda a: anp.sum(a * a), (h,)),
        (lambda a, b: (anp.sum(a * b), anp.min(a + b)), (x, y)),
    ]


@pytest.mark.parametrize("k", range(5))
def test_split_reductions_take_the_fast_path(cpu, monkeypatch, k: int) -> None:  # noqa: ANN001
    """A reduction split into partial results combined on the host runs in the one-call
    fast path (fastcall.py: the pointer table filled natively, the split and its combine
    between the native runs), with the general path's bits on every call, results kept by
    the caller untouched by later calls, and the one-thread answers."""
    _forced_split(monkeypatch)
    fn, args = _split_reduction_programs()[k]
    monkeypatch.setenv("AXLE_CPU_THREADS", "1")
    one = axle.jit(fn, device=cpu)(*args)
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    f = axle.jit(fn, device=cpu)
    dargs = [axle.device_put(a, cpu) for a in args]
    for _ in range(WARM):
        f(*dargs)
    exe = _exe(f)
    assert exe._fast is not None and exe._fast.segments is not None, exe._segments
    assert any(seg[0] == "step" and seg[1].splits_reduction(2) for seg in exe._fast.segments)
    general = [np.asarray(b.handle).copy() for b in exe._execute([d.buffer for d in dargs])]
    kept = [f(*dargs) for _ in range(4)]  # each kept: every call writes a fresh block
    for r in kept + [f(*dargs) for _ in range(4)]:
        got = [np.asarray(v) for v in (r if isinstance(r, tuple) else (r,))]
        for g, w, o in zip(got, general, one if isinstance(one, tuple) else (one,)):
            np.testing.assert_array_equal(g, w)
            np.testing.assert_allclose(g.astype(np.float64), np.asarray(o).astype(np.float64), rtol=2e-3, atol=1e-4)


def test_split_partials_combine_in_chunk_order(cpu) -> None:  # noqa: ANN001
    """Partial results combine left to right (one ufunc.accumulate), never pairwise as
    ufunc.reduce would for 8 rows: 1e8 + 1 - 1e8 + 1 + ... is 5 in order, 4 pairwise."""
    from axle_cpu.executable import _ReductionSplit

    xs = [np.linspace(-1.0, 1.0, 4096, dtype=np.float32)] * 2
    f = axle.jit(lambda a, b: (anp.sum(a * b), anp.max(a * b)), device=cpu)
    f(*xs)
    (launch,) = [la for la, _ in _exe(f)._steps if la is not None]
    outs = [np.zeros((), np.float32), np.zeros((), np.float32)]
    split = _ReductionSplit(launch, outs, 8)
    split.partial[0][...] = [1e8, 1, -1e8, 1, 1, 1, 1, 1]
    assert float(np.add.reduce(split.partial[0])) == 4.0  # (what a pairwise combine gives)
    split.partial[1][...] = [-0.0, 0.0, -0.0, -1.0, -0.0, -2.0, -0.0, -0.0]
    split.combine_into(outs)
    assert float(outs[0]) == 5.0
    assert float(outs[1]) == 0.0 and not np.signbit(outs[1])  # IEEE max: +0.0 over -0.0


def _every_kind() -> list[tuple]:
    """Reductions of every kind (sum, prod, max, min, and, or) over odd sizes (no chunk
    count divides them; some barely above the 2 chunks per thread a split needs), of
    several dtypes, each with NumPy's answer and whether it must be exact."""
    rng = np.random.default_rng(1825)
    f = rng.standard_normal(262151).astype(np.float32)  # 2^18 + 7
    d = rng.standard_normal(65537)
    i = rng.integers(-1000, 1000, 100003).astype(np.int32)
    near1 = (1.0 + rng.standard_normal(4099) * 1e-3).astype(np.float32)
    tiny = rng.standard_normal(5).astype(np.float32)  # 5 elements: barely 2 chunks per thread
    cols = rng.standard_normal((50001, 3)).astype(np.float32)
    return [
        ("sum f32", lambda a: anp.sum(a * 0.5 + 1.0), (f,), np.sum(f.astype(np.float64) * 0.5 + 1.0), False),
        ("sum f64", lambda a: anp.sum(a * a), (d,), np.sum(d * d), False),
        ("sum i32", lambda a: anp.sum(a * 3), (i,), np.sum(i * 3), True),  # (int64, as NumPy's)
        ("prod f32", lambda a: anp.prod(a), (near1,), np.prod(near1.astype(np.float64)), False),
        ("prod i32", lambda a: anp.prod(a | 1), (i,), np.prod(i | 1), True),  # wraps, exactly
        ("max f32", lambda a: anp.max(a * 2.0), (f,), np.max(f * 2.0), True),
        ("min f64", lambda a: anp.min(a - 1.0), (d,), np.min(d - 1.0), True),
        ("max i32", lambda a: anp.max(a), (i,), np.max(i), True),
        ("min i32", lambda a: anp.min(a), (i,), np.min(i), True),
        ("all", lambda a: anp.all(a < 4.9), (f,), np.all(f < 4.9), True),
        ("all false", lambda a: anp.all(a < 4.0), (f,), np.all(f < 4.0), True),
        ("any", lambda a: anp.any(a > 4.0), (f,), np.any(f > 4.0), True),
        ("any false", lambda a: anp.any(a > 100.0), (f,), np.any(f > 100.0), True),
        ("sum of 5", lambda a: anp.sum(a * a), (tiny,), np.sum(tiny.astype(np.float64) ** 2), False),
        ("max axis 0", lambda a: anp.max(a, axis=0), (cols,), np.max(cols, axis=0), True),
        ("sum axis 0", lambda a: anp.sum(a, axis=0), (cols,), np.sum(cols.astype(np.float64), axis=0), False),
    ]


@pytest.mark.parametrize("k", range(len(_every_kind())), ids=[c[0] for c in _every_kind()])
def test_split_reductions_of_every_kind_and_odd_size(cpu, monkeypatch, k: int) -> None:  # noqa: ANN001
    """A reduction of each kind split over two threads along its reduced axis (sizes no
    chunk count divides) gives NumPy's answer (exactly for integers, max/min and the
    logical kinds), through the general path and the fast path, the same bits each call."""
    _forced_split(monkeypatch)
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    name, fn, args, want, exact = _every_kind()[k]
    f = axle.jit(fn, device=cpu)
    dargs = [axle.device_put(a, cpu) for a in args]
    got = [np.asarray(f(*dargs)) for _ in range(WARM + 3)]
    launches = [la for la, _ in _exe(f)._steps if la is not None]
    assert any(la.splits_reduction(2) for la in launches), name  # split along the reduced axis
    for g in got[WARM:]:
        np.testing.assert_array_equal(g, got[-1])
    for g in (got[0], got[-1]):  # one thread (the first, measured) and split
        if exact:
            assert g.dtype == np.asarray(want).dtype, name
            np.testing.assert_array_equal(g, want, err_msg=name)
        else:  # float rounding: relative to the sum of the magnitudes
            scale = float(np.max(np.sum(np.abs(np.asarray(args[0], np.float64)), axis=0 if g.ndim else None)))
            np.testing.assert_allclose(g.astype(np.float64), want, rtol=2e-5, atol=2e-6 * scale, err_msg=name)



def test_a_call_reads_the_schedule_once(cpu, monkeypatch) -> None:  # noqa: ANN001
    """A call that measures inconclusive decisions again (executable.RECHECK) resets the
    executable's schedule to None while other Python threads may be in calls of their own:
    a call reads the schedule once. Here every read after the first returns None, as if
    another thread's recheck came in between (the second read, None, raised TypeError)."""
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    x = RNG.standard_normal((1 << 14,)).astype(np.float32)
    f = axle.jit(lambda a: anp.tanh(a) * 3.0, device=cpu)
    for _ in range(WARM):
        want = np.asarray(f(x))
    exe = _exe(f)
    assert exe._segments is not None, "the schedule is fixed after the measuring calls"

    class RecheckedMeanwhile(type(exe)):  # type: ignore[misc]  # the executable's own class
        @property
        def _segments(self):  # noqa: ANN202
            segments, self.__dict__["_segments"] = self.__dict__["_segments"], None
            return segments

        @_segments.setter
        def _segments(self, value) -> None:  # noqa: ANN001
            self.__dict__["_segments"] = value

    monkeypatch.setattr(exe, "__class__", RecheckedMeanwhile)
    exe._fast, exe._fast_checked = None, False  # the general path, which reads the schedule
    np.testing.assert_array_equal(np.asarray(f(x)), want)
    np.testing.assert_array_equal(np.asarray(f(x)), want)
