"""Regression tests for the frontend findings of issue 12: values never change silently
(refused dtypes), logaddexp and friends at +-inf, argument validation naming the user's
function and line, traced index semantics and --check_indices, retrace reasons."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import nn
from axle.recompile import RecompilationWarning

from conftest import require_backend

BACKENDS = ("interpreter", "cpu", "opencl", "template")


@pytest.fixture(params=BACKENDS)
def device(request):
    return require_backend(request.param)


# ---------------------------------------------------------------- finding 10: logaddexp at +-inf

SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0, 1.0, -3.5, 1e30], np.float64)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_logaddexp_matches_numpy_at_inf_and_nan(device, dt):
    x, y = (v.astype(dt) for v in np.meshgrid(SPECIAL, SPECIAL))
    with device, np.errstate(all="ignore"):
        got = np.asarray(anp.logaddexp(x, y))
        jitted = np.asarray(axle.jit(anp.logaddexp)(x, y))
        want = np.logaddexp(x, y)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(jitted, want, rtol=1e-6)
    assert got[0, 0] == np.inf and got[1, 1] == -np.inf  # the cases that gave nan


def test_logsumexp_softmax_softplus_with_infinities(device):
    rows = np.array([[np.inf, 1], [-np.inf, -np.inf], [np.nan, 1], [1, 2], [-np.inf, 3]])
    with device, np.errstate(all="ignore"):
        lse = np.log(np.sum(np.exp(rows), axis=1))
        np.testing.assert_allclose(np.asarray(nn.logsumexp(rows, axis=1)), lse)
        np.testing.assert_allclose(np.asarray(nn.log_softmax(rows)), rows - lse[:, None])
        np.testing.assert_allclose(np.asarray(nn.softmax(rows)),
                                   np.exp(rows) / np.exp(rows).sum(1, keepdims=True))
        np.testing.assert_allclose(np.asarray(nn.softplus(SPECIAL)), np.logaddexp(SPECIAL, 0))


# ---------------------------------------------------------------- finding 14: retrace reasons

@pytest.fixture
def threshold():
    old = axle.config.retrace_warning_threshold
    axle.config.update(retrace_warning_threshold=1)
    yield
    axle.config.update(retrace_warning_threshold=old)


def test_retrace_names_a_changed_pytree_structure(threshold):
    f = axle.jit(lambda p: anp.sum(p[0]), device="interpreter:0")
    f([np.ones(2)])
    with pytest.warns(RecompilationWarning, match=r"argument 'p \(structure\)' changed list\(leaf\) -> tuple\(leaf\)"):
        f((np.ones(2),))


def test_retrace_names_the_device_and_flags(threshold):
    f = axle.jit(lambda x: x + 1)
    with axle.device("interpreter:0"):
        f(np.ones(2))
    with axle.device(require_backend("cpu")), pytest.warns(RecompilationWarning,
                                                            match=r"the device changed interpreter:0 -> cpu:0"):
        f(np.ones(2))
    axle.config.update(optimize=False)
    try:
        with axle.device("interpreter:0"), pytest.warns(RecompilationWarning,
                                                         match=r"compile flags changed \(optimize=True.*optimize=False"):
            f(np.ones(2))
    finally:
        axle.config.update(optimize=True)


def test_retrace_after_clear_cache_says_so(threshold):
    f = axle.jit(lambda x: x + 1, device="interpreter:0")
    f(np.ones(2))
    f.clear_cache()
    with pytest.warns(RecompilationWarning, match="dropped from the cache") as rec:
        f(np.ones(2))
    assert "device or flags" not in str(rec[0].message)


def test_retrace_for_a_new_shape_names_the_argument_and_shape(threshold):
    f = axle.jit(lambda x: x + 1, device="interpreter:0")
    f(np.ones(2, np.float32))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        f(np.ones(3, np.float32))
    (w,) = [r for r in rec if r.category is RecompilationWarning]
    assert "argument 'x' changed f32[2] -> f32[3]" in str(w.message)
