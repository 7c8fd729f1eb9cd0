"""The OpenCL program caches: on disk (private, headered binaries, no pickle; the rules
themselves are tested in tests/core/test_diskcache.py) and in memory (bounded by
--jit_cache_size, evicted programs released)."""
from __future__ import annotations

import gc
import os
import re
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



@pytest.mark.parametrize("how", ["from source", "from the cached binary", "in a batch"])
def test_kernel_objects_of_a_built_program_look_up_no_other_kernel(ocl, cache_dir, monkeypatch, how: str) -> None:
    """pyopencl's Kernel constructor reads its program's ``_source``: a program wrapped
    from a built one must hold it, else the program's ``__getattr__`` takes it for a
    kernel's name (a failed clCreateKernel and an exception per kernel object)."""
    import pyopencl as cl

    k = _kernel(ocl, "min")
    if how != "from source":
        _fresh_runtime(ocl).kernel(k)  # the binary on disk
    rt = _fresh_runtime(ocl)
    if how == "in a batch":
        rt.build_batch([k])
    looked_up: list[str] = []
    real_getattr = cl.Program.__getattr__
    monkeypatch.setattr(cl.Program, "__getattr__", lambda self, name: looked_up.append(name) or real_getattr(self, name))
    knl = rt.kernel(k)
    assert knl.function_name == k.name
    assert looked_up == []
    assert rt.program(k)._source.count(f" {k.name}(") == 1  # the program's own source

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


def test_programs_are_built_with_our_options_only(ocl, cache_dir) -> None:
    """The driver sees exactly ``build_options``: the language version, and correctly
    rounded float32 division and sqrt where the device offers them; pyopencl's ``Program.build`` adds ``-I`` and
    a path inside this environment, which PoCL hashes into its kernel cache key, so that
    a clean clone (a new environment: CI) found none of the kernels an earlier run built.
    Both ways to a program: from source, then from the binary that stored."""
    import pyopencl as cl

    k = _kernel(ocl, "add")
    for _ in range(2):
        rt = _fresh_runtime(ocl)
        program = rt.kernel(k).program
        exact = rt.cl_device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
        want = "-cl-std=CL1.2" + (" -cl-fp32-correctly-rounded-divide-sqrt" if exact else "")
        assert program.get_build_info(rt.cl_device, cl.program_build_info.OPTIONS).strip() == want
    assert len(os.listdir(cache_dir)) == 1


def test_a_failed_build_names_the_op_and_carries_the_build_log(ocl) -> None:
    """Built past pyopencl's wrapper: the driver's log still reaches the error."""
    from dataclasses import replace

    k = _kernel(ocl, "add")
    broken = replace(k, name="axle_broken", source=k.source.replace(k.name, "axle_broken").replace(
        "{", "{ undeclared_name;", 1))
    with pytest.raises(axle.errors.BackendError,
                       match=rf"(?s)building the kernel for {re.escape(k.what)}.*undeclared identifier 'undeclared_name'"):
        _fresh_runtime(ocl).kernel(broken)


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


def _scaled_exp(c: float):  # noqa: ANN202
    """A module whose kernel is its own (the constant is in the source)."""
    from axle.ir.builder import Builder

    b = Builder("scaled")
    x = b.parameter("f32[37]")
    return b.build(b.mul(b.exp(x), b.broadcast_in_dim(b.constant(np.float32(c)), shape=(37,), broadcast_dimensions=())))


def test_batched_builds_build_the_kernels_of_many_modules_as_one_program(ocl, monkeypatch) -> None:
    """Inside ``batched_builds`` compiling only plans (a placeholder that refuses to run);
    at its end every kernel is built in one program, and compiling the modules again
    builds nothing more."""
    from axle.compiler import compile_module

    backend = axle.REGISTRY.backend_for(ocl)
    rt = backend.runtime(ocl)
    modules = [_scaled_exp(1.0 + i / 1024 + np.random.default_rng().random() / 4096) for i in range(3)]
    built: list[str] = []
    real_build = runtime._build
    monkeypatch.setattr(runtime, "_build", lambda prg, dev: built.append("program") or real_build(prg, dev))
    with backend.batched_builds(ocl):
        placeholders = [compile_module(m, ocl) for m in modules]
        assert built == []
    assert built == ["program"]
    from axle.frontend.device_put import to_buffer

    x = to_buffer(np.linspace(-1, 1, 37, dtype=np.float32), ocl)
    with pytest.raises(axle.errors.BackendError, match="only gathers its kernels"):
        placeholders[0].execute([x])
    names = [n for p in placeholders for n in p.kernel_sources()]
    assert len({rt._programs.get(n).int_ptr for n in names}) == 1
    for m in modules:
        c = np.float32(next(n for n in m.entry.nodes if n.op.value == "constant").attr["value"].array)
        (out,) = compile_module(m, ocl).execute([x])
        np.testing.assert_allclose(backend.to_host(out),
                                   np.exp(np.linspace(-1, 1, 37, dtype=np.float32)) * np.float32(c), rtol=1e-6)
    assert built == ["program"]  # the executables found their kernels built


def test_a_batch_that_fails_to_build_caches_nothing(ocl) -> None:
    """Its kernels are built one by one afterwards, by the executables that need them:
    the failing one is reported with its own op, the others build."""
    from dataclasses import replace

    good = _kernel(ocl, "sub")
    broken = replace(good, name="axle_broken_in_batch", body=good.body.replace(good.name, "axle_broken_in_batch")
                     .replace("{", "{ undeclared_name;", 1))
    broken.source = good.source.replace(good.name, broken.name).replace("{", "{ undeclared_name;", 1)
    rt = _fresh_runtime(ocl)
    rt.build_batch([good, broken])
    assert rt._programs.get(good.name) is None and rt._programs.get(broken.name) is None
    rt.kernel(good)
    with pytest.raises(axle.errors.BackendError, match="undeclared_name"):
        rt.kernel(broken)


def test_prebuild_compiles_ahead_what_a_check_compiles(ocl, monkeypatch) -> None:
    """axle.testing.prebuild: the modules' kernels built in one batch; modules the device
    does not claim whole are left to their own compile, and nothing raises."""
    from axle.compiler import compile_module
    from axle.ir.ops import Op
    from axle.testing.cases import cases_for, device_claims
    from axle.testing.prebuild import prebuild

    unclaimed = cases_for(Op.ALL_REDUCE)[0].module  # collectives run on the host here
    assert not device_claims(unclaimed, ocl)
    modules = [_scaled_exp(3.0 + np.random.default_rng().random()) for _ in range(2)]
    built: list[str] = []
    real_build = runtime._build
    monkeypatch.setattr(runtime, "_build", lambda prg, dev: built.append("program") or real_build(prg, dev))
    prebuild([(m, True) for m in modules] + [(unclaimed, True)], ocl)
    assert built == ["program"]
    for m in modules:
        compile_module(m, ocl)
    assert built == ["program"]
