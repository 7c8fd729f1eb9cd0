"""The cpu executable's one-native-call path (axle_cpu/fastcall.py): taken once the
schedule is fixed, with the argument checks of the general path, and output blocks reused
only when no caller holds a result, a view of one or its buffer."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.errors import BackendError
from axle.ir.dtypes import DType
from axle.ir.types import TensorType

WARM = 6  # calls after which every kernel's threading is measured and the schedule fixed


def _exe(f):  # noqa: ANN001, ANN202
    (entry,) = f._cache.values()
    return entry.executable


def _warm(f, *args):  # noqa: ANN001, ANN002, ANN202
    for _ in range(WARM):
        f(*args)
    exe = _exe(f)
    assert exe._fast is not None, "a plan of single-threaded kernels takes the fast path"
    return exe


def test_fast_path_is_taken_and_matches_the_interpreter(cpu) -> None:  # noqa: ANN001
    def fn(x, y):  # noqa: ANN001, ANN202
        return anp.tanh(x) * y + anp.sum(x), (x - y).T

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((5, 3)).astype(np.float32) for _ in range(2))
    f = axle.jit(fn, device=cpu)
    _warm(f, x, y)
    want = axle.jit(fn, device="interpreter:0")(x, y)
    for _ in range(3):
        got = f(axle.device_put(x, cpu), axle.device_put(y, cpu))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_kept_results_are_never_overwritten(cpu) -> None:  # noqa: ANN001
    """Each way a caller can keep a result (the Array, its host values, a slice of those,
    the buffer, the buffer's array) keeps its values through later calls."""
    f = axle.jit(lambda x: x * 2.0, device=cpu)
    _warm(f, np.zeros(4, np.float32))

    def call(v: float) -> axle.Array:
        return f(axle.device_put(np.full(4, v, np.float32), cpu))

    kept_array = call(1.0)
    kept_host = np.asarray(call(2.0))
    kept_slice = np.asarray(call(3.0))[1:]
    kept_buffer = call(4.0).buffer
    kept_handle = call(5.0).buffer.handle
    gc.collect()
    for v in range(6, 12):
        np.testing.assert_array_equal(np.asarray(call(float(v))), 2.0 * v)
    np.testing.assert_array_equal(np.asarray(kept_array), 2.0)
    np.testing.assert_array_equal(kept_host, 4.0)
    np.testing.assert_array_equal(kept_slice, 6.0)
    np.testing.assert_array_equal(kept_buffer.handle, 8.0)
    np.testing.assert_array_equal(kept_handle, 10.0)


def test_an_unheld_block_is_reused(cpu) -> None:  # noqa: ANN001
    f = axle.jit(lambda x: x + 1.0, device=cpu)
    x = axle.device_put(np.zeros(8, np.float32), cpu)
    fast = _warm(f, x)._fast
    f(x)
    block = id(fast.frames[0].block)
    for _ in range(3):
        f(x)  # nothing kept: the same block serves every call
    assert id(fast.frames[0].block) == block
    kept = f(x)
    for _ in range(3):
        f(x)  # kept holds the block: these calls use another frame's
    assert {id(fr.block) for fr in fast.frames} >= {block} and len(fast.frames) == 2
    assert np.asarray(kept)[0] == 1.0


def test_a_loop_keeping_each_result_alternates_two_blocks(cpu, monkeypatch) -> None:  # noqa: ANN001
    """``y = f(y)`` holds the last result until the next call returns: the ring's second
    frame serves every other call, so the loop allocates no output block after two."""
    from axle_cpu import fastcall
    f = axle.jit(lambda x: x + 1.0, device=cpu)
    y = axle.device_put(np.zeros(8, np.float32), cpu)
    _warm(f, y)
    made = []
    new_outputs = fastcall._Frame.new_outputs
    monkeypatch.setattr(fastcall._Frame, "new_outputs", lambda fr, fast: (made.append(fr), new_outputs(fr, fast)))
    for _ in range(8):
        y = f(y)
    np.testing.assert_array_equal(np.asarray(y), 8.0)
    assert len(made) <= 2, f"{len(made)} output blocks allocated for 8 calls"


def test_repeated_and_multiple_results(cpu) -> None:  # noqa: ANN001
    """A result slot returned twice gives two buffers over one array, as the general path."""
    f = axle.jit(lambda x: (x * 2.0, x * 2.0, x + 1.0), device=cpu)
    x = np.arange(3, dtype=np.float32)
    _warm(f, x)
    for _ in range(2):
        a, b, c = f(x)
        np.testing.assert_array_equal(np.asarray(a), x * 2)
        np.testing.assert_array_equal(np.asarray(b), x * 2)
        np.testing.assert_array_equal(np.asarray(c), x + 1)


def test_fast_path_checks_its_arguments(cpu) -> None:  # noqa: ANN001
    f = axle.jit(lambda x: x - 1.0, device=cpu)
    x = axle.device_put(np.ones(4, np.float32), cpu)
    exe = _warm(f, x)
    with pytest.raises(BackendError, match="takes 1 argument"):
        exe.execute([x.buffer, x.buffer])
    wrong = axle.device_put(np.ones(5, np.float32), cpu).buffer
    with pytest.raises(BackendError, match=r"argument 0 is f32\[5\], the module expects f32\[4\]"):
        exe.execute([wrong])
    assert wrong.type == TensorType(DType.FLOAT32, (5,))
    np.testing.assert_array_equal(np.asarray(f(x)), 0.0)  # a refused call leaves the path working


def test_profiling_takes_the_general_path(cpu, tmp_path) -> None:  # noqa: ANN001
    from axle import profiler

    f = axle.jit(lambda x: anp.exp(x) * 2.0, device=cpu)
    x = axle.device_put(np.zeros(3, np.float32), cpu)
    _warm(f, x)
    with profiler.trace(str(tmp_path / "t.json")) as events:
        np.testing.assert_array_equal(np.asarray(f(x)), 2.0)
    assert profiler.kernels(events), "each kernel still shows on the timeline"


def test_threaded_kernels_and_host_steps_keep_the_general_path(cpu, monkeypatch) -> None:  # noqa: ANN001
    from axle_cpu import executable as ex

    f = axle.jit(lambda x: x * 3.0, device=cpu)
    x = np.ones(64, np.float32)
    for _ in range(WARM):
        f(x)
    exe = _exe(f)
    exe._fast, exe._fast_checked = None, False
    launch = next(launch for launch, _ in exe._steps if launch is not None)
    monkeypatch.setattr(launch, "parallel", True)
    exe._segments = (2, [("step", launch, launch.step)])
    assert ex.FastCall.build(exe, exe._segments[1]) is None


def test_concurrent_calls_keep_their_own_results(cpu) -> None:  # noqa: ANN001
    f = axle.jit(lambda x: x * 2.0 + 1.0, device=cpu)
    _warm(f, np.zeros(16, np.float32))
    errors: list[str] = []

    def work(k: int) -> None:
        xs = [axle.device_put(np.full(16, 1000.0 * k + i, np.float32), cpu) for i in range(200)]
        kept = []
        for i, x in enumerate(xs):  # every call its own values: an overwrite would show
            r = f(x)
            if i % 7 == 0:
                kept.append((i, r))
            if not np.all(np.asarray(r) == 2.0 * (1000.0 * k + i) + 1.0):
                errors.append(f"thread {k} call {i}")
                return
        if any(not np.all(np.asarray(r) == 2.0 * (1000.0 * k + i) + 1.0) for i, r in kept):
            errors.append(f"thread {k}: a kept result changed")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_jit_array_from_another_device_is_transferred(cpu) -> None:  # noqa: ANN001
    f = axle.jit(lambda x: x * 3, device=cpu)
    x = np.arange(3, dtype=np.int32)
    f(axle.device_put(x, cpu))
    out = f(axle.device_put(x, "interpreter:0"))
    assert out.device == cpu
    np.testing.assert_array_equal(np.asarray(out), x * 3)
    assert f.trace_count == 1 and f.cache_hits == 1


def test_plain_buffers_are_read_at_their_array_address(cpu) -> None:  # noqa: ANN001
    """A Buffer that is not a CpuBuffer (no remembered address), e.g. one another layer
    made around a read-only NumPy array, is addressed from its array on every call."""
    from axle.backend import Buffer

    f = axle.jit(lambda x: x + 0.5, device=cpu)
    x = np.arange(6, dtype=np.float32)
    exe = _warm(f, x)
    for v in (1.0, 2.0):
        arr = np.full(6, v, np.float32)
        arr.flags.writeable = False
        (out,) = exe.execute([Buffer(cpu, TensorType(DType.FLOAT32, (6,)), arr)])
        np.testing.assert_array_equal(out.handle, v + 0.5)
