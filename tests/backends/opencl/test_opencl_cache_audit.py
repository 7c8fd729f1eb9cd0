"""Findings of the compile caches' audit on OpenCL: every plan the backend makes reads back
from its cache entry (a sort's scratch buffers included)."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.device_compile import compile_on_device
from axle_opencl import plan
from ocl_fusing import opencl_device

X = np.random.default_rng(1).standard_normal((4, 50)).astype(np.float32)


@pytest.fixture(scope="module")
def ocl():  # noqa: ANN201
    return opencl_device()


def _compile(dev):  # noqa: ANN001, ANN202
    return compile_on_device(axle.jit(lambda x: anp.sort(x, axis=1) * 2.0, device=dev).lower(X).module, dev)[0]


def test_a_plan_with_a_sort_is_read_back_from_the_cache(ocl, compile_cache, monkeypatch) -> None:
    # the sort kernel's scratch outputs are named by tuples, which the entry holds as JSON
    # lists and the loader refused: such a plan was counted corrupt, planned again and
    # rewritten by every process
    exe = _compile(ocl)
    assert any(isinstance(s, plan.KernelStep) and s.kernel.what == "sort" for s in exe.plan.steps)
    backend = axle.REGISTRY.backend_for(ocl)
    want = backend.to_host(exe.execute([backend.to_device(X, ocl)])[0])
    np.testing.assert_array_equal(want, np.sort(X, axis=1) * 2.0)

    def planned(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("planned again")

    monkeypatch.setattr(plan, "plan_module", planned)
    axle.reset_stats()
    exe2 = _compile(ocl)
    assert axle.stats()["disk_cache_corrupt"] == 0
    np.testing.assert_array_equal(backend.to_host(exe2.execute([backend.to_device(X, ocl)])[0]), want)
