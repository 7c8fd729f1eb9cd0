"""Executable caches are bounded (--jit_cache_size) and evicted native code is freed.

300 new shapes through one jitted function, eager ops and lazy clusters with a bound of
20: every cache stays at the bound, and the first executables, their LLVM engines and
their contexts die as soon as they are evicted, without a garbage collection (so no
reference cycle keeps them alive). The RSS figure over 10,000 shapes is measured by
tools/rss_check.py (docs/reliability.md), not asserted here.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.frontend import eager, lazy

BOUND = 20
SHAPES = 300


@pytest.fixture
def small_caches(monkeypatch):
    monkeypatch.setattr(axle.config, "jit_cache_size", BOUND)
    monkeypatch.setattr(axle.config, "retrace_warning_threshold", -1)
    gc.disable()  # what dies must die by reference counting alone
    try:
        yield axle.REGISTRY.backend("cpu")
    finally:
        gc.enable()


def _engines(exe) -> list[weakref.ref]:  # noqa: ANN001
    """The native code of ``exe``'s modules: shared libraries, or MCJIT engines without ``ld``."""
    return [weakref.ref(ck.jit._lib if ck.jit._lib is not None else ck.jit._engine) for ck in exe._modules()]


def test_jit_cache_bounded_and_evicted_engines_freed(small_caches) -> None:
    backend = small_caches
    f = axle.jit(lambda x: anp.tanh(x) * 2.0 + 1.0, device="cpu:0")
    first: list[weakref.ref] = []
    for n in range(1, SHAPES + 1):
        x = np.linspace(-1, 1, n, dtype=np.float32)
        np.testing.assert_allclose(np.asarray(f(x)), np.tanh(x) * 2.0 + 1.0, rtol=1e-5, atol=1e-6)
        if n == 1:
            (entry,) = f._cache.values()
            first = [weakref.ref(entry.executable), *_engines(entry.executable)]
            del entry
        assert len(f._cache) <= BOUND
        assert len(backend._cache) <= BOUND and len(backend._kernel_cache) <= 2 * BOUND
    assert len(f._cache) == BOUND and f._cache.evictions == SHAPES - BOUND
    assert len(first) >= 2 and all(r() is None for r in first), "an evicted executable or engine is still alive"
    # the most recent shapes are still cached: no recompilation
    traces = f.trace_count
    f(np.zeros(SHAPES, np.float32))
    assert f.trace_count == traces


def test_eager_and_lazy_caches_bounded(small_caches) -> None:
    for n in range(1, 3 * BOUND):
        a = axle.device_put(np.full((n,), 2.0, np.float32), "cpu:0")
        np.testing.assert_allclose(np.asarray(anp.exp(a)), np.exp(np.full((n,), 2.0, np.float32)), rtol=1e-6)
        with axle.jit_scope():
            b = anp.sqrt(a) * anp.exp(a)
        np.testing.assert_allclose(np.asarray(b), np.sqrt(2.0) * np.exp(2.0) * np.ones(n), rtol=1e-5)
        assert len(eager._cache) <= BOUND and len(lazy._exe_cache) <= BOUND
    assert eager._cache.evictions > 0 and lazy._exe_cache.evictions > 0


def test_lowering_the_bound_shrinks_on_the_next_miss(small_caches, monkeypatch) -> None:
    f = axle.jit(lambda x: x + 1.0, device="cpu:0")
    for n in range(1, BOUND + 1):
        f(np.ones(n, np.float32))
    monkeypatch.setattr(axle.config, "jit_cache_size", 5)
    f(np.ones(BOUND + 1, np.float32))
    assert len(f._cache) == 5
