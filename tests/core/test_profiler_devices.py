"""The timeline contract on every installed device: the seed example shows three kernel
events eagerly and as many as the executable reports (one fused kernel) under jit; the
file validates; `axle explain` lists the backend's generated code."""
from __future__ import annotations

import json

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import profiler

DEVICES = [d.name for d in axle.devices()]
#: what each reference backend's generated code must contain (`Executable.kernel_sources`)
SOURCE_MARKERS = {"cpu": "define", "opencl": "__kernel"}
#: the in-tree backends that emit one kernel event per launch (profiling events are
#: optional in the backend contract, so other plugins are only checked for a valid file)
PROFILED = {"interpreter", "cpu", "opencl"}


def model_fn(x, y, z):
    return anp.sum(x + y * z)


@pytest.fixture(params=DEVICES)
def dev(request):
    return axle.device(request.param)


def _inputs(dev):
    rng = np.random.default_rng(1)
    host = [rng.standard_normal(4096).astype(np.float32) for _ in range(3)]
    return host, axle.device_put(tuple(host), dev)


def test_seed_eager_three_kernels_jit_as_reported(dev, tmp_path):
    host, (xs, ys, zs) = _inputs(dev)
    f = axle.jit(model_fn, device=dev)
    f(xs, ys, zs).block_until_ready()
    with dev:
        model_fn(xs, ys, zs).block_until_ready()  # compile the eager ops outside the trace
    path = tmp_path / "t.json"
    with profiler.trace(str(path)) as events:
        with dev:
            eager = model_fn(xs, ys, zs)
            eager.block_until_ready()
        mark = len(events)
        out = f(xs, ys, zs)
        out.block_until_ready()
    eager_k = profiler.kernels(events[:mark])
    jit_k = profiler.kernels(events[mark:])
    assert profiler.validate(json.loads(path.read_text())) == []
    assert f.lower(xs, ys, zs).compile().report()["kernels"] == 1
    if dev.backend in PROFILED:
        assert len(eager_k) == 3, [k["name"] for k in eager_k]
        assert len(jit_k) == 1, [k["name"] for k in jit_k]
        # the box names map back to the module: the fusion and the ops inside it
        assert jit_k[0]["name"].endswith("[add, multiply, reduce]"), jit_k[0]["name"]
        assert sorted(k["name"].split(".")[0] for k in eager_k) == ["add", "multiply", "reduce"]
        assert all(k["tid"] == f"device {dev.name}" for k in eager_k + jit_k)
    want = float(np.sum(host[0].astype(np.float64) + host[1].astype(np.float64) * host[2]))
    assert abs(float(out) - want) <= 1e-3 * max(1.0, abs(want))


def test_explain_lists_generated_code(dev):
    x = np.ones(256, np.float32)
    expl = axle.jit(model_fn, device=dev).lower(x, x, x).explain()
    assert len(expl.kernels) == 1 and expl.kernels[0].kind == "input"
    marker = SOURCE_MARKERS.get(dev.backend)
    if marker is not None:
        assert expl.kernel_sources, f"{dev.backend} returned no kernel sources"
        assert any(marker in src for src in expl.kernel_sources.values())
        assert marker in str(expl)
