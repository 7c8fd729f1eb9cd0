"""Recompilation warnings and per-function / per-device statistics."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import profiler
from axle.recompile import RecompilationWarning, signature, traces

DEV = "interpreter:0"


@pytest.fixture
def threshold():
    old = axle.config.retrace_warning_threshold
    axle.config.update(retrace_warning_threshold=2)
    yield 2
    axle.config.update(retrace_warning_threshold=old)


def step(x, y):
    return anp.sum(x * y)


def test_warns_after_threshold_naming_function_and_argument(threshold):
    f = axle.jit(step, device=DEV)
    y = np.float32(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompilationWarning)
        f(np.ones(1, np.float32), y)
        f(np.ones(2, np.float32), y)
        f(np.ones(2, np.float32), y)  # a cache hit is not a trace
    with pytest.warns(RecompilationWarning) as rec:
        f(np.ones(3, np.float32), y)
    msg = str(rec[0].message)
    assert "'step'" in msg and "traced 3 times (threshold 2)" in msg
    assert "'x' changed f32[2] -> f32[3]" in msg
    assert rec[0].filename == __file__  # points at the user's call
    assert f.trace_count == 3 and len(traces(f)) == 3


def test_dtype_change_is_named(threshold):
    f = axle.jit(step, device=DEV)
    x = np.ones(4, np.float32)
    f(x, np.ones(4, np.float32))
    f(x, np.ones(4, np.int32))
    with pytest.warns(RecompilationWarning, match=r"'y' changed s32\[4\] -> f64\[4\]"):
        f(x, np.ones(4, np.float64))


def test_static_and_pytree_arguments_are_named(threshold):
    def g(params, n):
        return params[0] * n + params[1]

    f = axle.jit(g, device=DEV, static_argnums=1)
    p = (np.ones(3, np.float32), np.ones(3, np.float32))
    f(p, 1)
    f(p, 2)
    with pytest.warns(RecompilationWarning, match=r"'n' changed static 2 -> static 3"):
        f(p, 3)
    p2 = (np.ones(5, np.float32), np.ones(5, np.float32))
    with pytest.warns(RecompilationWarning, match=r"'params\[1\]' changed f32\[3\] -> f32\[5\]"):
        f(p2, 3)


def test_no_warning_at_or_below_threshold():
    f = axle.jit(step, device=DEV)
    n = axle.config.retrace_warning_threshold
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompilationWarning)
        for i in range(1, n + 1):
            f(np.ones(i, np.float32), np.float32(1))
    assert f.trace_count == n


def test_signature_describes_weak_scalars_and_kwargs():
    sig = signature(step, (np.ones((2, 3), np.float32), 1.5), {"z": np.ones(2, np.int64)})
    assert sig == {"x": "f32[2,3]", "y": "weak f64[]", "z": "s64[2]"}


def test_retrace_shows_on_the_timeline():
    f = axle.jit(step, device=DEV)
    f(np.ones(2, np.float32), np.float32(1))
    with profiler.trace() as events:
        f(np.ones(5, np.float32), np.float32(1))
    (ev,) = [e for e in events if e["cat"] == "retrace"]
    assert ev["name"] == "retrace step" and "f32[2] -> f32[5]" in ev["args"]["changes"]


def test_stats_per_function_and_device():
    axle.reset_stats()

    def h(x):
        return x + 1

    f = axle.jit(h, device=DEV)
    f(np.ones(2, np.float32))
    f(np.ones(2, np.float32))
    f(np.ones(3, np.float32))
    s = axle.stats()
    per = s["per_function"]["h"]
    assert per["traces"] == 2 and per["compiles"] == 2
    assert per["cache_misses"] == 2 and per["cache_hits"] == 1
    dev = s["per_device"][DEV]
    assert dev["traces"] >= 2 and dev["cache_hits"] >= 1
    assert s["traces"] == 2 and s["cache_hits"] == 1


@pytest.fixture
def small_cache(monkeypatch):
    monkeypatch.setattr(axle.config, "jit_cache_size", 3)
    monkeypatch.setattr(axle.config, "retrace_warning_threshold", 0)


def _retrace_reason(f, x) -> str:  # noqa: ANN001
    with pytest.warns(RecompilationWarning) as rec:
        f(x, np.float32(1))
    (w,) = [r for r in rec if r.category is RecompilationWarning]
    return str(w.message)


def test_retrace_history_is_bounded_and_counts_every_trace(small_cache):
    # 2 x jit_cache_size signatures are kept, however many shapes the function sees (it
    # kept one per trace for ever: memory and the time to explain a retrace grew with them)
    f = axle.jit(step, device=DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompilationWarning)
        for n in range(1, 41):
            f(np.ones(n, np.float32), np.float32(1))
    assert f.trace_count == 40
    assert [s["x"] for s in traces(f)] == [f"f32[{n}]" for n in range(35, 41)]
    msg = _retrace_reason(f, np.ones(41, np.float32))
    assert "traced 41 times" in msg and "'x' changed f32[40] -> f32[41]" in msg


def test_evicted_shape_coming_back_is_reported_as_dropped(small_cache):
    # a cache of 3 cycled through 4 shapes: each retrace is an eviction, not a new shape
    f = axle.jit(step, device=DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompilationWarning)
        for n in (1, 2, 3, 4):
            f(np.ones(n, np.float32), np.float32(1))
    msg = _retrace_reason(f, np.ones(1, np.float32))
    assert "dropped from the cache" in msg and "'x' changed" not in msg
    # one that left the kept history too is compared with the closest kept signature
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompilationWarning)
        for n in range(10, 17):
            f(np.ones(n, np.float32), np.float32(1))
    msg = _retrace_reason(f, np.ones(2, np.float32))
    assert "'x' changed f32[16] -> f32[2]" in msg
