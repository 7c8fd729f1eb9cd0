"""The cached-call path of jit (frontend/jit.py): a call with Array arguments is keyed from
its buffers' types without flattening, and shares the cache with every other call; the
checks and counters of a general call hold on it too."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.errors import DeviceError, OutOfBoundsError
from axle.registry import Registry

INTERP = "interpreter:0"


def _put(x: object) -> axle.Array:
    return axle.device_put(x, INTERP)


def test_array_call_shares_the_entry_of_a_numpy_call() -> None:
    f = axle.jit(lambda x: x * 2.0, device=INTERP)
    x = np.arange(4, dtype=np.float32)
    f(x)  # compiled from NumPy data (the general path)
    out = f(_put(x))  # the same signature from an Array: the short path, same entry
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    assert f.trace_count == 1 and f.cache_hits == 1


def test_array_calls_count_hits_executions_and_launches() -> None:
    f = axle.jit(lambda x: anp.exp(x) + 1.0, device=INTERP)
    x = _put(np.ones(3, np.float32))
    f(x)
    axle.reset_stats()
    for _ in range(3):
        f(x)
    per_fn = axle.stats()["per_function"][f.name]
    assert per_fn["cache_hits"] == 3 and per_fn["executions"] == 3
    assert per_fn["kernel_launches"] == 3 * f._cache.values()[0].kernels
    assert per_fn.get("traces", 0) == 0 and f.cache_hits == 3


@pytest.mark.parametrize("other", [np.ones(3, np.float64), np.ones(4, np.float32), np.ones((3, 1), np.float32)],
                         ids=["dtype", "length", "rank"])
def test_a_new_type_is_a_new_entry(other: np.ndarray) -> None:
    f = axle.jit(lambda x: x + 1, device=INTERP)
    x = _put(np.ones(3, np.float32))
    f(x)
    f(x)
    out = f(_put(other))
    assert out.shape == other.shape and out.dtype == other.dtype
    assert f.trace_count == 2


def test_weak_and_strong_arrays_are_different_entries() -> None:
    """A Python scalar put on a device stays weakly typed: it must not answer for an
    explicit float32 (nor the reverse), as the general path keys them."""
    f = axle.jit(lambda x, y: x + y, device=INTERP)
    half = _put(np.ones(2, np.float16))
    weak = _put(2.0)
    strong = _put(np.float32(2.0))
    assert f(half, weak).dtype == np.float16
    assert f(half, strong).dtype == np.float32
    assert f(half, weak).dtype == np.float16  # the last entry kept beside the cache is per key
    assert f.trace_count == 2


def test_flag_changes_and_clear_cache_retrace() -> None:
    f = axle.jit(lambda x: x - 1, device=INTERP)
    x = _put(np.ones(2, np.float32))
    f(x)
    try:
        axle.config.update(optimize=False)
        np.testing.assert_array_equal(np.asarray(f(x)), [0, 0])
        assert f.trace_count == 2  # the flags are part of the key of the short path too
    finally:
        axle.config.update(optimize=True)
    f(x)
    assert f.trace_count == 2
    f.clear_cache()
    f(x)
    assert f.trace_count == 3


def test_check_indices_holds_on_cached_array_calls() -> None:
    axle.config.update(check_indices=True)
    try:
        f = axle.jit(lambda x, i: x[i], device=INTERP)
        x = _put(np.arange(6, dtype=np.float32))
        fine, bad = _put(np.array([1, 2])), _put(np.array([1, 9]))
        np.testing.assert_array_equal(np.asarray(f(x, fine)), [1, 2])
        np.testing.assert_array_equal(np.asarray(f(x, fine)), [1, 2])
        for _ in range(2):  # cached: the flag is still read on every call
            with pytest.raises(OutOfBoundsError, match="check_indices"):
                f(x, bad)
        assert f.trace_count == 1
    finally:
        axle.config.update(check_indices=False)


def test_tuple_and_dict_results_on_the_short_path() -> None:
    f = axle.jit(lambda x: {"a": x + 1, "b": (x, x * 2)}, device=INTERP)
    x = _put(np.ones(2, np.float32))
    for _ in range(2):
        out = f(x)
        assert set(out) == {"a", "b"}
        np.testing.assert_array_equal(np.asarray(out["b"][1]), [2, 2])


def test_device_names_resolve_once_and_reset_forgets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AXLE_BACKENDS", "interpreter")
    reg = Registry()  # a registry of its own: resetting the process's would reload every plugin
    dev = reg.device(INTERP)
    assert reg.device(INTERP) is dev and reg.default_device() is dev
    for _ in range(2):  # failures are never remembered: they raise every time
        with pytest.raises(DeviceError, match="unknown device"):
            reg.device("interpreter:7")
    monkeypatch.setenv("AXLE_BACKENDS", "template")
    with pytest.raises(DeviceError):  # a name resolved before is looked up again under a new selection
        reg.device(INTERP)
    monkeypatch.setenv("AXLE_BACKENDS", "interpreter")
    assert reg.device(INTERP) is dev
    reg.reset()
    again = reg.device(INTERP)
    assert again == dev and again is not dev  # the plugins were loaded again, and so was the name


def test_run_counters_are_exact_across_threads_and_resets() -> None:
    import threading

    def counted_square(x: axle.Array) -> axle.Array:  # a name no other test uses
        return x * x

    f = axle.jit(counted_square, device=INTERP)
    x = _put(np.ones(2, np.float32))
    f(x)
    axle.reset_stats()
    f(x)

    def work() -> None:
        for _ in range(50):
            f(x)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = axle.stats()
    assert stats["per_function"][f.name]["executions"] == 201  # the counters take no lock, and lose no call
    assert stats["per_device"][INTERP]["cache_hits"] >= 201
    axle.reset_stats()
    assert f.name not in axle.stats()["per_function"]  # a reset zeroes the lock-free counters too
    f(x)
    assert axle.stats()["per_function"][f.name]["executions"] == 1
