"""The cpu plan in the persistent compile cache (axle_cpu/plan_cache.py): a jit call whose
optimized module, plan and object code are cached builds its executable from them alone
(no parse, no plan, no kernel emitted) and computes the same bits, a loop's control steps
and a constant included; an entry reads back to the same plan; a damaged entry is read
once, planned again and rewritten; a plan with a host step is not stored. The new-process
case (two concurrent writers, then a process that parses nothing) is
test_cpu_module_cache.py's."""
from __future__ import annotations

import json

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import module_cache
from axle.compiler import compile_module, compile_optimized
from axle.errors import BackendError
from axle.ir.dtypes import DType
from axle.ir.types import TensorType
from axle_cpu import executable, plan, plan_cache

DEV = "cpu:0"
X = np.random.default_rng(0).standard_normal((6, 33)).astype(np.float32)
SCALE = np.linspace(0.5, 2.0, 33, dtype=np.float32)  # an array constant of the module


def _program(x):  # noqa: ANN001, ANN202
    e = anp.exp(x * SCALE - anp.max(x, axis=1, keepdims=True))
    s = e / anp.sum(e, axis=1, keepdims=True)
    return axle.lax.fori_loop(0, 3, lambda i, v: v * 0.5 + s, s)  # a loop: control steps, a region


def _traced():  # noqa: ANN202
    return axle.jit(_program, device=DEV).lower(X).module


def _run(exe) -> bytes:  # noqa: ANN001
    dev = axle.device(DEV)
    backend = axle.REGISTRY.backend_for(dev)
    return backend.to_host(exe.execute([backend.to_device(X, dev)])[0]).tobytes()


def _new_process() -> None:
    """Forgets what this process compiled (as a new process would not have it)."""
    backend = axle.REGISTRY.backend_for(axle.device(DEV))
    backend._cache.clear()
    backend._kernel_cache.clear()


def _no(what: str):  # noqa: ANN202
    def fail(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError(f"{what} on a cached executable")

    return fail


def _plan_key() -> bytes:
    _, optimized = compile_optimized(_traced(), axle.device(DEV))
    return plan_cache.plan_key(module_cache.entry(optimized)[1], executable._settings())


def test_a_hit_parses_plans_and_emits_nothing_and_computes_the_same(compile_cache, monkeypatch) -> None:
    _new_process()
    exe = compile_module(_traced(), axle.device(DEV))
    want = _run(exe)
    assert any(isinstance(s, plan.ControlStep) for s in exe.plan.steps) and exe.plan.regions
    _new_process()
    monkeypatch.setattr(module_cache, "parse_module", _no("parsed"))
    monkeypatch.setattr(plan, "build_plan", _no("planned"))
    monkeypatch.setattr(executable, "llvm_module", _no("emitted"))
    axle.reset_stats()
    exe2 = compile_module(_traced(), axle.device(DEV))
    assert isinstance(exe2, executable.CpuExecutable)  # (not the host fallback of a failed compile)
    assert axle.stats()["disk_cache_corrupt"] == 0 and axle.stats()["disk_cache_writes"] == 0
    assert all(isinstance(s.spec, plan_cache.LaunchFacts) for s in exe2.plan.steps if isinstance(s, plan.KernelStep))
    assert _run(exe2) == want
    with pytest.raises(BackendError, match="not kept"):  # its LLVM IR was never made here
        exe2.kernel_sources()


def test_an_entry_reads_back_to_the_same_plan(compile_cache) -> None:
    exe = compile_module(_traced(), axle.device(DEV))
    payload = plan_cache.entry(exe.plan, "m", True)
    assert payload is not None
    back = plan_cache._cached(json.loads(payload))
    assert plan_cache.entry(back.plan, back.name, back.interleave) == payload
    assert any(np.array_equal(c, SCALE) for c in back.plan.constants.values())
    for a, b in zip(exe.plan.steps, back.plan.steps):
        if isinstance(a, plan.KernelStep):
            assert isinstance(b, plan.KernelStep)
            assert (a.spec.loop_sizes, a.spec.largest_array, a.spec.combine_kinds) == \
                (b.spec.loop_sizes, b.spec.largest_array, b.spec.combine_kinds)


@pytest.mark.parametrize("bad", [b"{not json", b'{"kernels": [], "steps": [{"t": "mystery"}]}', b"[]"])
def test_a_damaged_entry_is_read_once_planned_again_and_rewritten(compile_cache, monkeypatch, bad: bytes) -> None:
    _new_process()  # (kernels compiled by other tests are not recompiled, nor their plan stored)
    want = _run(compile_module(_traced(), axle.device(DEV)))
    key = _plan_key()
    assert plan_cache.load(key) is not None
    plan_cache.store(key, bad)
    _new_process()
    planned = []
    real = plan.build_plan
    monkeypatch.setattr(plan, "build_plan", lambda *a, **k: planned.append(1) or real(*a, **k))
    axle.reset_stats()
    exe = compile_module(_traced(), axle.device(DEV))
    assert planned and axle.stats()["disk_cache_corrupt"] == 1
    assert _run(exe) == want
    assert plan_cache.load(key) is not None  # rewritten


def test_a_plan_with_a_host_step_is_not_stored() -> None:
    t = TensorType(DType.FLOAT32, (2,))
    p = plan.Plan(1, [t], {}, [plan.HostStep(lambda i, o: None, [0], [1], [t], "host")], [1], [t], 2)
    assert plan_cache.entry(p, "m", True) is None


def _scatter(x, i, u):  # noqa: ANN001, ANN202
    dn = axle.lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))
    return axle.lax.scatter(x * 2, i, u, dn) + 1


def test_an_update_kernel_whose_kind_is_no_reduce_kind_is_a_hit(compile_cache, monkeypatch) -> None:
    """A scatter's ``kind`` ("replace") is not a reduce kind: its kernel's combine kind is
    stored as none, and the entry reads back (a hit, not a corrupt entry)."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    i = np.array([[2], [0]], np.int32)
    u = np.full((2, 3), -1.0, np.float32)
    dev = axle.device(DEV)
    backend = axle.REGISTRY.backend_for(dev)

    def run(exe) -> bytes:  # noqa: ANN001
        return backend.to_host(exe.execute([backend.to_device(a, dev) for a in (x, i, u)])[0]).tobytes()

    _new_process()
    traced = axle.jit(_scatter, device=DEV).lower(x, i, u).module
    want = run(compile_module(traced, dev))
    _new_process()
    monkeypatch.setattr(plan, "build_plan", _no("planned"))
    axle.reset_stats()
    exe = compile_module(traced, dev)
    assert isinstance(exe, executable.CpuExecutable)  # (not the host fallback of a failed compile)
    assert axle.stats()["disk_cache_corrupt"] == 0 and run(exe) == want
