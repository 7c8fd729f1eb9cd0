"""The OpenCL kernel plan in the persistent compile cache (axle_opencl/plan_cache.py): a
later compile of the same optimized module plans and renders nothing and computes the
same bits (constants and a loop's sub-plans included); a damaged entry is planned again;
a plan with a host step is not stored; a new process's first call of a cached program
parses, optimizes and plans nothing, and imports no module of axle's."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.device_compile import compile_on_device
from axle.ir.dtypes import DType
from axle.ir.types import TensorType
from axle_opencl import kernels, plan, plan_cache
from ocl_fusing import opencl_device

X = np.random.default_rng(0).standard_normal((6, 33)).astype(np.float32)
SCALE = np.linspace(0.5, 2.0, 33, dtype=np.float32)  # an array constant of the module


def _program(x):  # noqa: ANN001, ANN202
    e = anp.exp(x * SCALE - anp.max(x, axis=1, keepdims=True))
    s = e / anp.sum(e, axis=1, keepdims=True)
    return axle.lax.fori_loop(0, 3, lambda i, v: v * 0.5 + s, s)  # a loop step: sub-plans


@pytest.fixture(scope="module")
def ocl():  # noqa: ANN201
    return opencl_device()


def _compile(dev):  # noqa: ANN001, ANN202
    return compile_on_device(axle.jit(_program, device=dev).lower(X).module, dev)[0]


def _run(exe, dev) -> bytes:  # noqa: ANN001
    backend = axle.REGISTRY.backend_for(dev)
    return backend.to_host(exe.execute([backend.to_device(X, dev)])[0]).tobytes()


def _no(what: str):  # noqa: ANN202
    def fail(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError(f"{what} on a cached plan")

    return fail


def test_a_hit_plans_and_renders_nothing_and_computes_the_same(ocl, compile_cache, monkeypatch) -> None:
    exe = _compile(ocl)
    want = _run(exe, ocl)
    assert any(isinstance(s, plan.LoopStep) for s in exe.plan.steps)
    monkeypatch.setattr(plan, "plan_module", _no("planned"))
    monkeypatch.setattr(kernels, "_finish", _no("rendered"))
    axle.reset_stats()
    exe2 = _compile(ocl)
    assert axle.stats()["disk_cache_corrupt"] == 0
    assert _run(exe2, ocl) == want


def test_an_entry_reads_back_to_the_same_plan(ocl, compile_cache) -> None:
    exe = _compile(ocl)
    p = plan.plan_module(axle.jit(_program, device=ocl).lower(X).optimize(), exe.rt.info)
    payload = plan_cache.entry(p)
    assert payload is not None
    back = plan_cache._plan(json.loads(payload))
    assert plan_cache.entry(back) == payload
    consts = [v for s in back.steps if isinstance(s, plan.KernelStep) for v in s.inputs if isinstance(v, tuple)]
    consts += list(back.constants.values())
    assert any(np.array_equal(c[1] if isinstance(c, tuple) else c, SCALE) for c in consts)


@pytest.mark.parametrize("bad", [b"{not json", b'{"steps": [{"t": "mystery"}]}', b"[]",
                                 b'{"steps": [], "params": [true], "constants": [], "results": [], '
                                 b'"consumed": [], "param_types": []}'])
def test_a_damaged_entry_is_planned_again(ocl, compile_cache, monkeypatch, bad: bytes) -> None:
    want = _run(_compile(ocl), ocl)
    key = None
    real_key = plan_cache.plan_key

    def remember(*a):  # noqa: ANN002, ANN202
        nonlocal key
        key = real_key(*a)
        return key

    monkeypatch.setattr(plan_cache, "plan_key", remember)
    _compile(ocl)
    assert key is not None
    plan_cache.store(key, bad)
    planned = []
    real_plan = plan.plan_module
    monkeypatch.setattr(plan, "plan_module", lambda *a: planned.append(1) or real_plan(*a))
    axle.reset_stats()
    exe = _compile(ocl)
    assert planned and axle.stats()["disk_cache_corrupt"] == 1
    assert _run(exe, ocl) == want
    assert plan_cache.load(key) is not None  # rewritten


def test_a_plan_with_a_host_step_is_not_stored() -> None:
    t = TensorType(DType.FLOAT32, (2,))
    p = plan.Plan([plan.HostStep(None, [0], 1)], [0], {}, [(1, t)], frozenset(), [t])  # type: ignore[arg-type]  # no node needed
    assert plan_cache.entry(p) is None


def test_a_damaged_plan_behind_a_cached_module_is_read_once_and_planned_again(ocl, compile_cache,
                                                                             monkeypatch) -> None:
    """The path of a jit call (compile_module: the optimized module is not kept): the
    optimized module is cached, its plan is damaged, so ``cached_executable`` finds nothing;
    the module is then parsed and planned, the damaged entry counted once (``compile`` does
    not read it again) and rewritten, and the bits are those of the first compile."""
    from axle.compiler import compile_module

    traced = axle.jit(_program, device=ocl).lower(X).module
    want = _run(compile_module(traced, ocl), ocl)
    keys: list[bytes] = []
    real_key = plan_cache.plan_key
    monkeypatch.setattr(plan_cache, "plan_key", lambda *a: keys.append(real_key(*a)) or keys[-1])
    assert _run(compile_module(traced, ocl), ocl) == want  # a hit: the key is looked up
    plan_cache.store(keys[-1], b'{"steps": [{"t": "mystery"}]}')
    planned = []
    real_plan = plan.plan_module
    monkeypatch.setattr(plan, "plan_module", lambda *a: planned.append(1) or real_plan(*a))
    axle.reset_stats()
    exe = compile_module(traced, ocl)
    assert planned and axle.stats()["disk_cache_corrupt"] == 1
    assert _run(exe, ocl) == want
    assert plan_cache.load(keys[-1]) is not None  # rewritten


PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import axle, axle.numpy as anp
    x = np.random.default_rng(0).standard_normal((6, 33)).astype(np.float32)
    scale = np.linspace(0.5, 2.0, 33, dtype=np.float32)

    def program(x):
        e = anp.exp(x * scale - anp.max(x, axis=1, keepdims=True))
        s = e / anp.sum(e, axis=1, keepdims=True)
        return axle.lax.fori_loop(0, 3, lambda i, v: v * 0.5 + s, s)

    xd = axle.device_put(x, "opencl:0")  # the device's runtime is made here, before the first call
    before = set(sys.modules)
    got = np.asarray(axle.jit(program, device="opencl:0")(xd))
    late = sorted(m for m in set(sys.modules) - before if m.startswith("axle"))
    s = axle.stats()
    print(json.dumps({"out": got.tobytes().hex(), **calls, "imported_in_first_call": late,
                      **{k: s[k] for k in s if k.startswith("disk_cache_")}}))
""")
BACKENDS = "opencl,interpreter"


def test_two_writers_then_a_new_process_parses_plans_and_optimizes_nothing(ocl, tmp_path,
                                                                          python_processes) -> None:
    """Two processes filling an empty cache at once (each that misses writes the optimized
    module, the plan and the program binary: one whole entry of each stays); then a new process's first
    call: the same bits, every entry a hit, and no module parsed, optimized or planned (the
    executable comes from the plan under the module's digest: ``cached_executable``)."""
    cache = str(tmp_path / "c")
    run = python_processes
    program = run.counting(("axle.module_cache", "parse_module", "parse"), ("axle.passes", "optimize", "optimize"),
                           ("axle_opencl.plan", "plan_module", "plan")) + PROGRAM
    fills = [run.answer(p) for p in [run.start(program, cache, BACKENDS), run.start(program, cache, BACKENDS)]]
    hit = run.answer(run.start(program, cache, BACKENDS))
    assert fills[0]["out"] == fills[1]["out"] == hit["out"]
    # (the second may start after the first wrote: it then hits what was written)
    assert any(f["optimize"] and f["plan"] and f["disk_cache_writes"] >= 3 for f in fills)
    assert all(f["disk_cache_corrupt"] == 0 for f in fills)
    assert hit["parse"] == hit["optimize"] == hit["plan"] == 0
    assert hit["disk_cache_hits"] == 3 and hit["disk_cache_misses"] == 0
    assert hit["disk_cache_writes"] == 0 and hit["disk_cache_corrupt"] == 0
    # the compile path's modules come with the runtime: importing them in the first call
    # was about 5 ms of it (the plan's dataclasses)
    assert hit["imported_in_first_call"] == [], hit["imported_in_first_call"]
