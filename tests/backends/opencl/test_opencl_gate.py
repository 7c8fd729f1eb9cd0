"""Eager launches on opencl:0 wait on a user event (runtime.py, ``DeviceRuntime.hold``: a barrier on a user event)
that every wait on the queue lets go first: values read back stay right, freed results
stay safe to reuse, and nothing that waits (a read, block_until_ready, a loop's
condition, the profiler) can block on a held kernel."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import axle
import axle.numpy as anp
from axle import lax, profiler
from axle_opencl import runtime as rtmod


def _rt(dev: Any) -> Any:
    return axle.REGISTRY.backend_for(dev).runtime(dev)


def _within(fn: Callable[[], Any], seconds: float = 60.0) -> Any:
    """fn() in a thread: a wait that never returns fails the test instead of hanging it."""
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert box, "a wait on the queue did not return: a gated launch was never let go"
    return box[0]


def test_only_cpu_devices_gate_and_ungated_launches_read_right(ocl, monkeypatch) -> None:  # noqa: ANN001
    """A GPU's eager launches are never held (NVIDIA's driver crashed running held kernels
    whose argument buffers had been released meanwhile): PoCL's device here, told it is not
    gated, launches and frees with no gate, and the values read back are right."""
    rt = _rt(ocl)
    assert rt.gates_eager == (ocl.kind == "cpu")
    monkeypatch.setattr(rt, "gates_eager", False)
    x = axle.device_put(np.arange(16, dtype=np.float32), ocl)
    y = x
    for i in range(rtmod.GATE_DEPTH + 5):
        y = (y + x) * 1.0 if i % 2 else y + x  # the intermediate results freed as they go
        assert rt._gate is None
    np.testing.assert_array_equal(np.asarray(y), np.arange(16, dtype=np.float32) * (rtmod.GATE_DEPTH + 6))


def test_eager_launches_are_held_until_a_read_and_counted_per_gate(ocl) -> None:  # noqa: ANN001
    rt = _rt(ocl)
    x = axle.device_put(np.arange(16, dtype=np.float32), ocl)
    np.asarray(x + x)  # compiled, the hot path filled, the gate let go by the read
    assert rt._gate is None
    y = x
    for _ in range(5):
        y = y + x  # each reads the one before: held kernels run in queue order
    if not rt.gates_eager:  # a GPU (test_only_cpu_devices_gate...): nothing held
        assert rt._gate is None
        np.testing.assert_array_equal(np.asarray(y), np.arange(16, dtype=np.float32) * 6)
        return
    assert rt._gate is not None and rt._gated == 5
    np.testing.assert_array_equal(_within(lambda: np.asarray(y)), np.arange(16, dtype=np.float32) * 6)
    assert rt._gate is None
    for _ in range(rtmod.GATE_DEPTH + 3):  # past the depth: a new gate, the full one let go
        y = y - x
    assert rt._gated == 3
    np.testing.assert_array_equal(_within(lambda: np.asarray(y)), np.arange(16, dtype=np.float32) * (3 - rtmod.GATE_DEPTH))


def test_freed_results_and_every_kind_of_wait(ocl) -> None:  # noqa: ANN001
    rt = _rt(ocl)
    base = np.linspace(-1, 1, 33, dtype=np.float32)
    x = axle.device_put(base, ocl)
    np.asarray(anp.exp(x)), np.asarray(x * x)
    kept = anp.exp(x)
    for _ in range(10):
        dropped = x * x  # freed at once: its pooled buffer goes to the next launch
        del dropped
    again = x * x
    _within(lambda: again.block_until_ready())  # synchronize lets the gate go
    assert rt._gate is None
    np.testing.assert_allclose(np.asarray(kept), np.exp(base), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(again), base * base)
    # a jit call queued behind held eager launches, then a loop reading its condition back
    f = axle.jit(lambda v: lax.fori_loop(0, 3, lambda i, a: a * 2.0, v), device=ocl)
    np.asarray(f(x))
    held = x + x
    out = _within(lambda: np.asarray(f(held)))
    np.testing.assert_array_equal(out, base * 2 * 8)
    # the profiler waits for the last kernel's event
    held = x + x
    with profiler.trace() as events:
        traced = _within(lambda: np.asarray(held - x))
    np.testing.assert_array_equal(traced, base)
    assert events


def test_threads_reading_while_others_launch(ocl) -> None:  # noqa: ANN001
    """A read in one thread never waits on a launch another thread gates after it."""
    a = axle.device_put(np.ones(64, np.float32), ocl)
    np.asarray(a + a)
    errors: list[str] = []

    def launcher_thread() -> None:
        y = a
        for _ in range(200):
            y = y + a
        if float(np.asarray(y)[0]) != 201.0:
            errors.append("launcher")

    def reader_thread() -> None:
        for k in range(50):
            if float(np.asarray(a * float(k))[3]) != float(k):
                errors.append("reader")

    threads = [threading.Thread(target=t) for t in (launcher_thread, reader_thread, launcher_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread hung on a held launch"
    assert not errors


def test_only_small_launches_are_held(ocl) -> None:  # noqa: ANN001
    """A single launch is held back only when its arguments and results come to at most
    HOLD_BYTES: a larger one lets the gate go (the small ones held before it start with it)
    and starts at once, and the next small launch opens a new gate."""
    rt = _rt(ocl)
    n = rtmod.HOLD_BYTES // 8  # a unary op on f32[n]: n*4 bytes in, n*4 out, HOLD_BYTES in all
    at = axle.device_put(np.linspace(-1, 1, n, dtype=np.float32), ocl)
    over = axle.device_put(np.linspace(-1, 1, n + 1, dtype=np.float32), ocl)
    small = axle.device_put(np.arange(16, dtype=np.float32), ocl)
    np.asarray(-at), np.asarray(-over), np.asarray(small + small)  # compiled, the gate let go by the reads
    assert rt._gate is None
    y = small + small
    y = y + small
    held_at = -at  # exactly HOLD_BYTES: held with the small ones
    if rt.gates_eager:
        assert rt._gate is not None and rt._gated == 3
    started = -over  # 8 bytes more: the gate let go, this one not held
    assert rt._gate is None
    z = small * small  # a new gate
    if rt.gates_eager:
        assert rt._gate is not None and rt._gated == 1
    else:
        assert rt._gate is None
    np.testing.assert_array_equal(_within(lambda: np.asarray(y)), np.arange(16, dtype=np.float32) * 3)
    np.testing.assert_array_equal(np.asarray(held_at), -np.linspace(-1, 1, n, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(started), -np.linspace(-1, 1, n + 1, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(z), np.arange(16, dtype=np.float32) ** 2)


def test_large_plans_of_several_kernels_let_the_gate_go(ocl) -> None:  # noqa: ANN001
    """A plan of several kernels whose parameters and results come to more than HOLD_BYTES
    starts at once, and the eager launches held before it with it; a small one waits
    behind the gate with them."""
    rt = _rt(ocl)
    f = axle.jit(lambda v: anp.sort(v) * 2.0, device=ocl)
    n = rtmod.HOLD_BYTES // 8  # f32[n] in and out: HOLD_BYTES, at the bound
    at = np.linspace(1, -1, n, dtype=np.float32)
    over = np.linspace(1, -1, n + 1, dtype=np.float32)
    small = np.arange(16, dtype=np.float32)[::-1].copy()
    xs = [axle.device_put(v, ocl) for v in (at, over, small)]
    for v, x in zip((at, over, small), xs, strict=True):
        assert f.lower(x).compile().report()["kernels"] == 2
        np.testing.assert_array_equal(np.asarray(f(x)), np.sort(v) * 2)
    x_at, x_over, x_small = xs
    held = x_small + x_small
    if rt.gates_eager:
        assert rt._gate is not None
    gate = rt._gate
    behind = [f(held), f(x_at)]  # small enough: behind the same gate
    assert rt._gate is gate
    out = f(x_over)
    assert rt._gate is None
    np.testing.assert_array_equal(_within(lambda: np.asarray(behind[0])), np.sort(small) * 4)
    np.testing.assert_array_equal(np.asarray(behind[1]), np.sort(at) * 2)
    np.testing.assert_array_equal(np.asarray(out), np.sort(over) * 2)


def test_small_plans_of_several_kernels_count_toward_the_bound(ocl) -> None:  # noqa: ANN001
    """A small plan of several kernels waits behind a closed gate with the eager launches,
    and its kernels count toward GATE_DEPTH (DeviceRuntime.count): a loop of jitted calls
    after one eager op let the gate go after GATE_DEPTH kernels, not at the program's next
    wait (uncounted, 3000 calls of a 2-kernel plan stayed held, 6000 kernels, until the
    read)."""
    rt = _rt(ocl)
    f = axle.jit(lambda v: anp.sort(v) * 2.0, device=ocl)
    v = np.arange(64, dtype=np.float32)[::-1].copy()
    x = axle.device_put(v, ocl)
    assert f.lower(x).compile().report()["kernels"] == 2
    np.asarray(f(x)), np.asarray(x + x)  # compiled, the gate let go by the reads
    held = x + x
    if not rt.gates_eager:
        assert rt._gate is None
        return
    gate = rt._gate
    assert gate is not None and rt._gated == 1
    outs = [f(x) for _ in range(rtmod.GATE_DEPTH // 2 - 1)]  # 1 + 2 * 511 = 1023 launches: held
    assert rt._gate is gate and rt._gated == rtmod.GATE_DEPTH - 1
    outs.append(f(held))  # its first kernel the 1024th: the gate let go
    assert rt._gate is None
    np.testing.assert_array_equal(_within(lambda: np.asarray(outs[-1])), np.sort(v) * 4)
    np.testing.assert_array_equal(np.asarray(outs[0]), np.sort(v) * 2)
