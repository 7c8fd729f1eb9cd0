"""The OpenCL program caches: on disk (private, headered binaries, no pickle; the rules
themselves are tested in tests/core/test_diskcache.py) and in memory (bounded by
--jit_cache_size, evicted programs released)."""
from __future__ import annotations

import gc
import os
import stat
import weakref

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.diskcache import MAGIC, CacheWarning
from axle_opencl import runtime


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(axle.config, "compile_cache", str(tmp_path / "compile-cache"))
    return tmp_path / "compile-cache" / "opencl"


def _fresh_runtime(dev):  # noqa: ANN001, ANN202
    backend = axle.REGISTRY.backend_for(dev)
    return runtime.DeviceRuntime(backend._cl[dev.index])


def _kernel(dev, op: str):  # noqa: ANN001, ANN202
    from axle.ir.builder import Builder
    from axle_opencl.plan import plan_module

    b = Builder("k")
    x = b.parameter("f32[37]")
    module = b.build(getattr(b, op)(b.exp(x), x))
    plan = plan_module(module, _fresh_runtime(dev).info)
    return next(s.kernel for s in plan.steps if hasattr(s, "kernel"))


def test_binaries_written_private_with_header_and_reloaded(ocl, cache_dir) -> None:
    k = _kernel(ocl, "add")
    first = _fresh_runtime(ocl)
    first.kernel(k)
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o700
    (entry,) = os.listdir(cache_dir)
    assert open(cache_dir / entry, "rb").read(8) == MAGIC
    assert stat.S_IMODE(os.stat(cache_dir / entry).st_mode) == 0o600

    loads = []
    real_get = runtime.DiskCache.get

    def counting_get(self, key):  # noqa: ANN001, ANN202
        out = real_get(self, key)
        loads.append(out is not None)
        return out

    second = _fresh_runtime(ocl)
    runtime.DiskCache.get = counting_get
    try:
        second.kernel(k)
    finally:
        runtime.DiskCache.get = real_get
    assert loads == [True]  # built from the cached binary


def test_unsafe_directory_disables_the_cache_but_programs_still_run(ocl, cache_dir) -> None:
    cache_dir.mkdir(parents=True)
    os.chmod(cache_dir, 0o777)
    with pytest.warns(CacheWarning, match="writable by group or others"):
        _fresh_runtime(ocl).kernel(_kernel(ocl, "mul"))
    assert os.listdir(cache_dir) == []


def test_compile_cache_off_stores_and_loads_nothing(ocl, cache_dir, monkeypatch) -> None:
    monkeypatch.setattr(axle.config, "compile_cache", "off")
    axle.reset_stats()
    k = _kernel(ocl, "sub")
    _fresh_runtime(ocl).kernel(k)
    _fresh_runtime(ocl).kernel(k)
    assert not cache_dir.exists()
    s = axle.stats()
    assert (s["disk_cache_hits"], s["disk_cache_misses"], s["disk_cache_writes"]) == (0, 0, 0)


def test_a_corrupt_binary_is_built_again_from_source(ocl, cache_dir) -> None:
    k = _kernel(ocl, "max")
    _fresh_runtime(ocl).kernel(k)
    (entry,) = os.listdir(cache_dir)
    data = bytearray((cache_dir / entry).read_bytes())
    data[-1] ^= 0xFF
    (cache_dir / entry).write_bytes(bytes(data))
    axle.reset_stats()
    _fresh_runtime(ocl).kernel(k)
    s = axle.stats()
    assert (s["disk_cache_corrupt"], s["disk_cache_writes"]) == (1, 1)
    axle.reset_stats()
    _fresh_runtime(ocl).kernel(k)
    assert axle.stats()["disk_cache_hits"] == 1


def test_pyopencl_pickle_cache_is_not_used(ocl, cache_dir, monkeypatch) -> None:
    """Even on a driver pyopencl would cache for (PoCL caches itself, so pyopencl skips
    its cache there: pretend it is another driver)."""
    import pyopencl.cache
    import pyopencl.characterize

    monkeypatch.setattr(pyopencl.characterize, "has_src_build_cache", lambda dev: None)

    def refuse(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("pyopencl's pickle-based binary cache was consulted")

    monkeypatch.setattr(pyopencl.cache, "create_built_program_from_source_cached", refuse)
    _fresh_runtime(ocl).kernel(_kernel(ocl, "sub"))


def test_kernel_cache_bounded_and_evicted_programs_freed(ocl, monkeypatch) -> None:
    """OpenCL kernels take their sizes as arguments, so new shapes reuse a program; new
    programs come from new computations (here: a new constant each time)."""
    monkeypatch.setattr(axle.config, "jit_cache_size", 4)
    rt = axle.REGISTRY.backend_for(ocl).runtime(ocl)
    rt._programs.clear()  # the bound is enforced on insertion: start from what this test inserts
    x = np.linspace(0, 1, 37, dtype=np.float32)
    first, names = None, []
    for i in range(30):
        c = 1.0 + i / 64
        f = axle.jit(lambda x, c=c: anp.exp(x) * c, device=ocl)
        np.testing.assert_allclose(np.asarray(f(x)), np.exp(x) * np.float32(c), rtol=1e-5)
        if i == 0:
            (entry,) = f._cache.values()
            first = weakref.ref(entry.executable)  # (pyopencl kernels take no weak references)
            names = list(entry.executable._kernels)
            del entry
        del f
        assert len(rt._programs) <= 8
    gc.collect()
    # nothing holds the first executable's kernels any more: their programs are released
    assert first is not None and first() is None
    assert names and not any(n in rt._programs for n in names)
