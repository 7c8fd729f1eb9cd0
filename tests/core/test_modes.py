"""Execution modes: eager, explicit jit / axle.compile, manual clustering (jit_scope) and
auto-clustering (jit_level="auto"); kernel counts observable through axle.stats()."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.frontend import eager, lazy
from axle.ir.ops import Op

DEV = "interpreter:0"


def model_fn(x, y, z):
    return anp.sum(x + y * z)


@pytest.fixture
def seed_inputs():
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]
    with axle.device(DEV):
        yield axle.device_put(tuple(host), DEV), host


@pytest.fixture
def auto_mode():
    previous = axle.config.jit_level
    axle.config.update(jit_level="auto")
    yield
    axle.config.update(jit_level=previous)


def test_eager_launches_one_kernel_per_primitive(seed_inputs):
    (x, y, z), host = seed_inputs
    axle.reset_stats()
    out = model_fn(x, y, z)
    s = axle.stats()
    assert s["kernel_launches"] == 3 and s["eager_ops"] == 3
    assert not out.is_pending
    np.testing.assert_allclose(float(out), np.sum(host[0] + host[1] * host[2]), rtol=1e-5)


def test_auto_mode_runs_the_seed_as_one_cluster(seed_inputs, auto_mode):
    (x, y, z), host = seed_inputs
    model_fn(x, y, z)  # warm the cluster cache
    float(model_fn(x, y, z))
    axle.reset_stats()
    out = model_fn(x, y, z)
    assert out.is_pending and axle.stats()["kernel_launches"] == 0 and axle.stats()["eager_ops"] == 0
    value = float(out)  # materialization flushes the cluster
    s = axle.stats()
    info = lazy.last_flush()
    assert s["clusters"] == 1 and s["eager_ops"] == 0
    assert info.ops == 3 and info.outputs == 1  # the temporaries x+y*z, y*z were dropped: not outputs
    # kernels launched by the flush = what the compiled cluster reports
    assert s["kernel_launches"] == info.kernels == info.executable.report()["kernels"]
    # ...and the same count as the explicitly jitted function compiles to
    assert info.kernels == axle.jit(model_fn, device=DEV).lower(x, y, z).compile().report()["kernels"]
    assert info.cache_hit and s["compiles"] == 0
    assert s["kernel_launches"] == 1  # where eager launches three: fusion made it one kernel
    np.testing.assert_allclose(value, np.sum(host[0] + host[1] * host[2]), rtol=1e-5)


def test_jit_scope_records_then_runs_at_scope_end(seed_inputs):
    (x, y, z), host = seed_inputs
    axle.reset_stats()
    with axle.jit_scope():
        a = x + x
        b = model_fn(a, y, z)
        assert a.is_pending and b.is_pending
        assert axle.stats()["kernel_launches"] == 0
        assert a.shape == (64,) and a.dtype == np.float32  # metadata never forces
    assert not a.is_pending and not b.is_pending  # the scope end ran one cluster for both
    assert axle.stats()["clusters"] == 1
    assert lazy.last_flush().outputs == 2
    np.testing.assert_allclose(np.asarray(a), host[0] * 2)
    np.testing.assert_allclose(float(b), np.sum(2 * host[0] + host[1] * host[2]), rtol=1e-5)


def test_jit_scope_flushes_when_a_value_is_needed(seed_inputs):
    (x, y, z), _ = seed_inputs
    axle.reset_stats()
    with axle.jit_scope():
        s = anp.sum(x)
        if s > -1e9:  # bool() on a pending value: the cluster so far runs now
            t = s + 1
        assert axle.stats()["clusters"] == 1
        assert t.is_pending
    assert axle.stats()["clusters"] == 2
    np.testing.assert_allclose(float(t), float(np.sum(np.asarray(x))) + 1, rtol=1e-6)


@pytest.mark.parametrize("materialize", [np.asarray, float, bool, str, repr, lambda v: v.item(), lambda v: v.tolist()])
def test_auto_mode_materialization_points(seed_inputs, auto_mode, materialize):
    (x, y, z), _ = seed_inputs
    v = anp.sum(x * y)
    assert v.is_pending
    materialize(v)
    assert not v.is_pending


def test_auto_mode_print_flushes(seed_inputs, auto_mode, capsys):
    (x, y, z), _ = seed_inputs
    v = anp.max(x)
    print(v)
    assert not v.is_pending and capsys.readouterr().out.strip() == str(np.max(np.asarray(x)))


def test_auto_mode_feeds_jit_and_other_clusters(seed_inputs, auto_mode):
    (x, y, z), host = seed_inputs
    a = x * 2
    out = axle.jit(model_fn, device=DEV)(a, y, z)  # passing a pending value to jit forces it
    assert not a.is_pending
    b = out + 1
    assert b.is_pending
    np.testing.assert_allclose(float(b), np.sum(2 * host[0] + host[1] * host[2]) + 1, rtol=1e-5)


def test_auto_mode_cuts_clusters_at_loop_iterations(seed_inputs, auto_mode):
    """A loop that never reads a value runs one cluster per iteration, compiled once."""
    (x, _, _), host = seed_inputs
    acc = x
    for _ in range(2):  # warm the cache
        acc = acc * 0.5 + 1.0
    float(anp.sum(acc))
    axle.reset_stats()
    acc = x
    for _ in range(25):
        acc = acc * 0.5 + 1.0
    assert axle.stats()["clusters"] == 24  # the 25th iteration is still pending
    assert axle.stats()["compiles"] == 0 and axle.stats()["cache_hits"] == 24
    want = host[0].copy()
    for _ in range(25):
        want = want * np.float32(0.5) + np.float32(1.0)
    np.testing.assert_allclose(np.asarray(acc), want, rtol=1e-6)


def test_auto_mode_bounds_cluster_size(seed_inputs, auto_mode, monkeypatch):
    (x, _, _), host = seed_inputs
    monkeypatch.setattr(lazy, "MAX_CLUSTER_OPS", 10)
    axle.reset_stats()
    # straight-line code (every op from a different place): only the size bound cuts it
    program = "\n".join(f"acc = acc + {i}.0" for i in range(24))
    scope = {"acc": x}
    exec(compile(program, "<generated>", "exec"), scope)
    assert axle.stats()["clusters"] >= 2 and scope["acc"].is_pending
    assert lazy.last_flush().ops <= 10
    np.testing.assert_allclose(np.asarray(scope["acc"]), host[0] + sum(range(24)), rtol=1e-6)


def test_auto_mode_errors_name_the_op_and_line(auto_mode):
    with axle.device(DEV):
        a = axle.device_put(np.ones(3, np.float32))
        b = axle.device_put(np.ones(4, np.float32))
        with pytest.raises(axle.errors.ShapeError, match=r"add.*f32\[3\].*f32\[4\]") as e:
            a + b
    assert "test_modes.py" in str(e.value)


def test_auto_mode_from_axle_flags_environment():
    code = ("import numpy as np, axle, axle.numpy as anp\n"
            "assert axle.config.jit_level == 'auto'\n"
            "x = axle.device_put(np.arange(4.0), 'interpreter:0')\n"
            "with axle.device('interpreter:0'):\n"
            "    y = anp.sum(x * x + 1)\n"
            "    assert y.is_pending\n"
            "    print(float(y), axle.stats()['clusters'], axle.stats()['eager_ops'])\n")
    env = dict(os.environ, AXLE_FLAGS="--jit_level=auto")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["18.0", "1", "0"]


def test_compile_function_and_should_use_switch(seed_inputs):
    (x, y, z), host = seed_inputs
    want = np.sum(host[0] + host[1] * host[2])
    axle.reset_stats()
    out = axle.compile(model_fn, [x, y, z])
    axle.compile(model_fn, [x, y, z])
    assert axle.stats()["traces"] == 1 and axle.stats()["cache_hits"] == 1
    np.testing.assert_allclose(float(out), want, rtol=1e-5)
    for should_use_axle in (True, False):
        fn = axle.jit(model_fn) if should_use_axle else model_fn
        np.testing.assert_allclose(float(fn(x, y, z)), want, rtol=1e-5)


def test_jit_inside_jit_is_inlined():
    inner = axle.jit(lambda a: a * 2)
    outer = axle.jit(lambda a: inner(a) + 1, device=DEV)
    np.testing.assert_allclose(np.asarray(outer(np.arange(3.0))), [1.0, 3.0, 5.0])
    assert inner.trace_count == 0  # traced as part of outer, never compiled on its own


# ---- integer indices and Python loops in the lazy modes (issue 16, item 6)


def _fresh_caches() -> None:
    """Empty executable caches (eager and lazy), so the compile counters count from zero."""
    lazy._exe_cache.clear()
    eager._cache.clear()
    axle.reset_stats()


def test_auto_mode_integer_indices_keep_the_cluster_structure(auto_mode):
    """x[t] in a Python loop records the same cluster for every t (the starts are data, not
    attributes): one compile for the loop, not one per value of t."""
    host = np.arange(24, dtype=np.float32).reshape(6, 4)
    with axle.device(DEV):
        x = axle.device_put(host)
        _fresh_caches()
        got = [float(anp.sum(x[t] * 2.0) + x[t - 3, 1]) for t in range(6)]  # float(): one flush per t
    assert axle.stats()["compiles"] == 1 and axle.stats()["clusters"] == 6
    np.testing.assert_allclose(got, [2 * host[t].sum() + host[t - 3, 1] for t in range(6)])


def test_auto_mode_python_starts_of_dynamic_slices_are_data(auto_mode):
    """lax.dynamic_slice with Python int starts, negative ones included (wrapped on the
    host, not by recorded ops over a literal): one compile for every start."""
    host = np.arange(10, dtype=np.float32)
    with axle.device(DEV):
        x = axle.device_put(host)
        _fresh_caches()
        got = [np.asarray(lax.dynamic_slice_in_dim(x, t, 3) + 0.0) for t in (-4, -1, 0, 2, 9)]
    assert axle.stats()["compiles"] == 1
    want = [host[6:9], host[7:10], host[0:3], host[2:5], host[7:10]]  # -1 is 9, clamped so 3 fit: 7
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_eager_integer_indices_share_one_executable():
    host = np.arange(30, dtype=np.float32).reshape(5, 6)
    x = axle.device_put(host, DEV)
    _fresh_caches()
    for t in range(-5, 5):
        np.testing.assert_array_equal(np.asarray(x[t, 1:4]), host[t, 1:4])
    compiled = {k: v["compiles"] for k, v in axle.stats()["per_function"].items() if v.get("compiles")}
    assert compiled == {"eager:dynamic-slice": 1, "eager:reshape": 1}


def test_traced_integer_indices_stay_static_slices():
    """Inside jit an integer index is a static slice (the optimizer folds it), as before."""
    lowered = axle.jit(lambda v: v[2, 1:3], device=DEV).lower(np.ones((4, 5), np.float32))
    ops = {n.op for n in lowered.module.entry.nodes}
    assert Op.SLICE in ops and Op.DYNAMIC_SLICE not in ops


def test_auto_mode_integer_index_updates_keep_the_cluster_structure(auto_mode):
    """out = out.at[t].set(row) (and x[t] = v) in a Python loop: a dynamic update slice
    with the starts as data, the same cluster for every t."""
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    with axle.device(DEV):
        out = axle.device_put(np.zeros((4, 3), np.float32))
        _fresh_caches()
        for t in range(4):
            out = out.at[t].set(rows[t] * 2.0)
            out = out.at[t - 4, 1].add(1.0)
            float(anp.sum(out))  # one flush per iteration
    assert axle.stats()["compiles"] == 1 and axle.stats()["clusters"] == 4
    want = rows * 2
    want[:, 1] += 1
    np.testing.assert_array_equal(np.asarray(out), want)


def test_eager_integer_index_updates_share_one_executable():
    x = axle.device_put(np.zeros((5, 2), np.float32), DEV)
    _fresh_caches()
    for t in range(5):
        x = x.at[t].set(np.float32(t))
    np.testing.assert_array_equal(np.asarray(x), np.repeat(np.arange(5, dtype=np.float32)[:, None], 2, 1))
    compiled = {k: v["compiles"] for k, v in axle.stats()["per_function"].items() if v.get("compiles")}
    assert compiled.get("eager:dynamic-update-slice") == 1 and not any("pad" in k for k in compiled)
