"""Eager ops on every backend through the hot path (frontend/eager.py ``launch_cached``,
``Executable.launcher``): a signature's second call, which skips placement, type rules and
the executable lookup, gives what the jitted program gives on the interpreter, for ops with
and without attributes, several dtypes, scalars and size-0 arrays; bad input still raises
the axle error naming the op, even right after a hot signature of the same op; and the hot
path's cache stays within ``--jit_cache_size``."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.errors import DeviceError, DTypeError, OpAttributeError, ShapeError
from axle.frontend import eager
from axle.ir.ops import Op
from axle.testing import require_backend

BACKENDS = ("cpu", "opencl", "template", "interpreter")
F32 = np.array([1.5, -2.0, np.nan, np.inf, -0.0], np.float32)

#: (name, function, operands): one compiled signature each per backend, so few and distinct
CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
    ("add f32 nan/inf", anp.add, (F32, F32[::-1].copy())),
    ("multiply s32 wraps", anp.multiply, (np.array([2**30, -7, 3], np.int32), np.array([4, 3, -1], np.int32))),
    ("exp f32 scalar", anp.exp, (np.array(0.5, np.float32),)),
    ("exp s32 (float64, as NumPy)", anp.exp, (np.array([0, 1, -2], np.int32),)),
    ("add f32 size 0", anp.add, (np.zeros(0, np.float32), np.zeros(0, np.float32))),
    ("sum f32 every axis", anp.sum, (np.arange(6, dtype=np.float32).reshape(3, 2) / 3,)),
    ("sum s16 (an int64 accumulator, as NumPy)", anp.sum, (np.array([30000, 30000, -7], np.int16),)),
    ("sum f64 axis 1 (attributes)", lambda x: anp.sum(x, axis=1), (np.arange(6, dtype=np.float64).reshape(2, 3),)),
    ("matmul f32 (dot_general)", anp.matmul, (np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
                                              np.arange(8, dtype=np.float32).reshape(4, 2) - 3)),
    ("reshape u8", lambda x: anp.reshape(x, (3, 2)), (np.arange(6, dtype=np.uint8),)),
    ("astype f32 -> s32", lambda x: x.astype(np.int32), (np.array([1.9, -1.9, 0.0], np.float32),)),
]


def _check(got: Any, want: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{what}: {got.dtype}{got.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hot_path_results_equal_the_interpreter(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = require_backend(backend)
    slow: list[Op] = []
    full_path = eager.executable_for
    monkeypatch.setattr(eager, "executable_for", lambda op, *a: (slow.append(op), full_path(op, *a))[1])
    for name, fn, arrays in CASES:
        want = np.asarray(axle.jit(fn, device="interpreter:0")(*arrays))
        args = [axle.device_put(a, dev) for a in arrays]
        first = fn(*args)  # the full path, which fills the hot path
        slow.clear()
        again = fn(*args)
        assert not slow, f"{name} on {dev}: the second call took the full path for {slow}"
        for out in (first, again):
            _check(out, want, f"{name} on {dev}")
            assert out.device == dev and out.committed


@pytest.mark.parametrize("backend", ["interpreter", "template"])
def test_numpy_backends_launch_without_execute(backend: str) -> None:
    """The interpreter's launcher is the op's reference bound to its attributes, the
    template's its one kernel launch: the hot path calls them instead of execute."""
    dev = require_backend(backend)
    x = axle.device_put(np.arange(4, dtype=np.float32), dev)
    x * x
    hit = eager._launchers.peek(eager._signature(Op.MUL, (x, x)))
    assert hit is not None and hit.launch is not None
    (out,) = hit.launch([x.buffer, x.buffer])
    assert out.type == x.aval and out.device == dev
    np.testing.assert_array_equal(np.asarray(axle.Array(out)), [0, 1, 4, 9])


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_input_after_a_hot_signature_still_raises(backend: str) -> None:
    dev = require_backend(backend)
    other = "cpu:0" if backend == "interpreter" else "interpreter:0"
    x = axle.device_put(np.ones(3, np.float32), dev)
    lax.add(x, x)
    lax.reduce(x, "sum", (0,))
    lax.broadcast_in_dim(x, (2, 3), (1,))
    with pytest.raises(DTypeError, match="add: .*f32\\[3\\], s32\\[3\\]"):
        lax.add(x, axle.device_put(np.ones(3, np.int32), dev))
    with pytest.raises(ShapeError, match="add: .*f32\\[3\\], f32\\[4\\]"):
        lax.add(x, axle.device_put(np.ones(4, np.float32), dev))
    with pytest.raises(ShapeError, match="reduce: axes \\(1,\\)"):
        lax.reduce(x, "sum", (1,))
    # (True,) == (1,) and hashes alike: attributes key the hot path with their exact types
    with pytest.raises(OpAttributeError, match="broadcast.*True is a bool"):
        lax.broadcast_in_dim(x, (2, 3), (True,))
    with pytest.raises(DeviceError, match="committed to different devices"):
        lax.add(x, axle.device_put(np.ones(3, np.float32), other))


def test_hot_path_cache_is_bounded() -> None:
    """The hot path holds at most --jit_cache_size signatures (and the one-op executables
    as many): a program feeding ever new shapes does not grow it."""
    dev = require_backend("interpreter")
    eager._launchers.clear()
    old = axle.config.jit_cache_size
    try:
        axle.config.update(jit_cache_size=4)
        for n in range(1, 12):
            x = axle.device_put(np.full(n, 2.0, np.float32), dev)
            np.testing.assert_array_equal(np.asarray(x + x), np.full(n, 4.0))
            assert len(eager._launchers) <= 4 and len(eager._cache) <= 4
        np.testing.assert_array_equal(np.asarray(x + x), np.full(11, 4.0))  # an entry evicted and filled again
    finally:
        axle.config.update(jit_cache_size=old)


def test_profiling_takes_execute() -> None:
    """While the profiler records, a hot signature runs through execute (one kernel event
    per launch), not the launcher."""
    dev = require_backend("interpreter")
    x = axle.device_put(np.ones(2, np.float32), dev)
    x - x
    with axle.profiler.trace() as events:
        np.asarray(x - x)
    assert [e for e in axle.profiler.kernels(events) if e.get("args", {}).get("op") == "subtract"]


def test_out_of_memory_on_the_hot_path_is_an_axle_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An allocation failing in a launcher (axle.numpy calls the hot path outside bind)
    gives the full path's BackendError naming the op and operands, not a raw MemoryError."""
    dev = require_backend("interpreter")
    x = axle.device_put(np.ones(3, np.float32), dev)
    x + x
    key = eager._signature(Op.ADD, (x, x))

    def oom(args: Any) -> Any:
        raise MemoryError("no room")

    monkeypatch.setitem(eager._launchers._data, key, eager._launchers.peek(key)._replace(launch=oom, execute=oom))
    monkeypatch.setattr(eager, "executable_for", lambda *a: type("Oom", (), {"execute": staticmethod(oom)})())
    with pytest.raises(axle.errors.BackendError, match=r"add: out of memory: no room \(operands: f32\[3\], f32\[3\]\)"):
        anp.add(x, x)
