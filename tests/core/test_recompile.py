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
