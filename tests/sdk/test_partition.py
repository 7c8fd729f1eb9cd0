"""The partitioner: clusters, cycle-free merging, the cost guard, transfers, fallback on
compile failure, strict placement and the placement summary (on the template backend,
whose default capabilities leave dot, transpose, slice... to the host)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.compiler import compile_module
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.partition import PlacementWarning, partition, placement_of
from axle.frontend.device_put import to_buffer
from axle.testing import require_backend
from axle.testing.cases import assert_program_close

F32 = DType.FLOAT32


@pytest.fixture
def dev():
    return require_backend("template")


def run(module, device, *inputs):
    exe = compile_module(module, device)
    backend = axle.REGISTRY.backend_for(device)
    outs = [np.asarray(backend.to_host(b)) for b in exe.execute([to_buffer(x, device) for x in inputs])]
    # the kit's comparison for whole programs: the device computes tanh with its own math
    # library (within an ulp or two of NumPy's), and a chain of adds can cancel
    assert_program_close(module, outs, evaluate(module, *inputs))
    return exe, outs


def host_dev():
    """Where fallback work runs: cpu:0 when the cpu backend is installed, else interpreter:0."""
    from axle.partition import host_devices

    return host_devices(axle.device("template:0"))[0]


def caps(device):
    return axle.REGISTRY.backend_for(device).capabilities(device)


def test_diamond_does_not_merge_across_the_host(dev):
    # a = exp(x) [dev]; t = transpose(a) [host]; out = a + transpose(t) ... a and the final
    # add both run on the device, but merging them would put the host cluster in a cycle.
    b = Builder("diamond")
    x = b.parameter(TensorType(F32, (3, 3)))
    a = b.exp(x)
    t = b.transpose(b.transpose(a, permutation=(1, 0)), permutation=(1, 0))
    out = b.add(a, b.mul(t, a))
    m = b.build(out)
    host = host_dev()
    clusters = partition(m, dev, caps(dev), host)
    assert [c.device.name for c in clusters] == ["template:0", host_dev().name, "template:0"]
    # every cluster's operands come from earlier clusters (a valid run order)
    done: set[int] = {p.uid for p in m.entry.parameters}
    for c in clusters:
        for n in c.nodes:
            assert all(o.uid in done or o.op is Op.CONSTANT or any(o is k for k in c.nodes) for o in n.operands)
        done |= {n.uid for n in c.nodes}
    run(m, dev, np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32))


def test_independent_same_device_clusters_merge(dev):
    b = Builder("siblings")
    x = b.parameter(TensorType(F32, (4, 4)))
    h1 = b.transpose(x, permutation=(1, 0))
    h2 = b.reverse(x, dimensions=(0,))
    out = b.add(b.exp(h1), b.exp(h2))
    m = b.build(out)
    clusters = partition(m, dev, caps(dev), host_dev())
    assert [c.device.name for c in clusters] == [host_dev().name, "template:0"]
    run(m, dev, np.ones((4, 4), np.float32))


def test_cost_guard_keeps_shape_only_ops_between_host_ops_on_the_host(dev):
    b = Builder("bounce")
    x = b.parameter(TensorType(F32, (2, 6)))
    t = b.transpose(x, permutation=(1, 0))          # host
    r = b.reshape(t, shape=(12,))                    # claimed, but shape-only between host ops
    s = b.reverse(r, dimensions=(0,))                # host
    m = b.build(b.exp(s))
    clusters = partition(m, dev, caps(dev), host_dev())
    assert [c.device.name for c in clusters] == [host_dev().name, "template:0"]
    assert "cost guard" in clusters[0].reason
    exe, _ = run(m, dev, np.arange(12, dtype=np.float32).reshape(2, 6))
    assert placement_of(exe).ops_on(host_dev().name)["reshape"] == 1


def test_placement_summary_counts_bytes(dev):
    f = axle.jit(lambda x, w: anp.tanh(x @ w) + 1.0, device=dev)
    x, w = np.ones((4, 5), np.float32), np.ones((5, 3), np.float32)
    np.testing.assert_allclose(f(x, w).numpy(), np.tanh(x @ w) + 1.0, rtol=1e-6)
    compiled = f.lower(x, w).compile()
    s = compiled.placement()
    assert s.fallback and s.ops_on(host_dev().name) == {"dot": 1}
    assert s.ops_on("template:0")["tanh"] == 1
    assert s.bytes_crossed == x.nbytes + w.nbytes + 4 * 3 * 4
    text = str(s)
    assert "host fallback" in text and "dot" in text and f"{s.bytes_crossed} bytes" in text
    assert compiled.report()["placement"]["bytes_crossed"] == s.bytes_crossed


def test_fully_claimed_module_has_a_single_cluster_summary(dev):
    f = axle.jit(lambda x: anp.exp(x) * 2.0, device=dev)
    s = f.lower(np.ones(3, np.float32)).compile().placement()
    assert not s.fallback and s.bytes_crossed == 0 and [c.device for c in s.clusters] == ["template:0"]


def test_strict_placement_names_the_op(dev, monkeypatch):
    monkeypatch.setattr(axle.config, "strict_placement", True)
    f = axle.jit(lambda x, w: anp.tanh(x @ w), device=dev)
    with pytest.raises(axle.errors.PlacementError, match=r"strict placement: 'dot' \(f32\[4,5\], f32\[5,3\]\)") as e:
        f(np.ones((4, 5), np.float32), np.ones((5, 3), np.float32))
    assert "template:0" in str(e.value) and "test_partition.py" in str(e.value)  # the user's line


def test_strict_placement_from_axle_flags():
    import subprocess
    import sys

    code = ("import numpy as np, axle, axle.numpy as anp\n"
            "f = axle.jit(lambda x: anp.transpose(x), device='template:0')\n"
            "f(np.ones((2, 3), np.float32))\n")
    env = {"PATH": "/usr/bin:/bin", "AXLE_FLAGS": "--strict_placement"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "PlacementError" in r.stderr and "'transpose'" in r.stderr


def test_per_dtype_capabilities(dev):
    b = Builder("f16sum")
    x = b.parameter(TensorType(DType.FLOAT16, (5,)))
    m = b.build(b.reduce(b.exp(x), kind="sum", axes=(0,)))
    exe, _ = run(m, dev, np.ones(5, np.float16))
    s = placement_of(exe)
    assert s.ops_on(host_dev().name) == {"reduce": 1} and "f16" in str(s)


def test_compile_failure_falls_back_with_a_warning(dev, monkeypatch):
    import axle_template.backend as tb

    def broken(self, module, device, options):
        raise RuntimeError("out of instruction memory")

    monkeypatch.setattr(tb.TemplateBackend, "compile", broken)
    b = Builder("will_fail")
    x = b.parameter(TensorType(F32, (3,)))
    m = b.build(b.add(x, x))
    with pytest.warns(PlacementWarning, match=r"will_fail \(add\) failed to compile for template:0.*instruction memory"):
        exe, outs = run(m, dev, np.arange(3, dtype=np.float32))
    s = placement_of(exe)
    assert s.clusters[0].device == host_dev().name and "instruction memory" in s.clusters[0].reason
    monkeypatch.setattr(axle.config, "strict_placement", True)
    with pytest.raises(axle.errors.PlacementError, match=r"failed to compile for template:0.*'add'"):
        compile_module(m, dev)


def test_failing_cluster_of_a_partitioned_module_falls_back(dev, monkeypatch):
    import axle_template.backend as tb

    monkeypatch.setattr(tb.TemplateBackend, "compile",
                        lambda self, module, device, options: (_ for _ in ()).throw(ValueError("no")))
    f = axle.jit(lambda x, w: anp.exp(x @ w), device=dev)
    x, w = np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        np.testing.assert_allclose(f(x, w).numpy(), np.exp(x @ w), rtol=1e-6)
    assert any(issubclass(r.category, PlacementWarning) and "exponential" in str(r.message) for r in rec)


def test_multi_output_and_passthrough_results(dev):
    b = Builder("multi")
    x = b.parameter(TensorType(F32, (3, 4)))
    y = b.parameter(TensorType(F32, (4,)))
    t = b.transpose(x, permutation=(1, 0))                    # host
    s = b.reduce(b.exp(t), kind="sum", axes=(1,))              # device
    c = b.constant(np.arange(4, dtype=np.float32))
    m = b.build(s, y, c, b.add(s, y))
    rng = np.random.default_rng(1)
    exe, outs = run(m, dev, rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32))
    assert len(outs) == 4 and all(o.device == dev for o in exe.execute(
        [to_buffer(np.ones((3, 4), np.float32), dev), to_buffer(np.ones(4, np.float32), dev)]))


def test_no_host_backend_is_a_clear_error(dev, monkeypatch):
    monkeypatch.setenv("AXLE_BACKENDS", "template")
    b = Builder("nohost")
    x = b.parameter(TensorType(F32, (2, 3)))
    m = b.build(b.transpose(x, permutation=(1, 0)))
    with pytest.raises(axle.errors.PlacementError, match="no host backend.*AXLE_BACKENDS"):
        compile_module(m, dev)


def test_optimized_fusions_with_unclaimed_ops_go_to_the_host(dev):
    from axle.ir.module import Computation, Module
    from axle.ir.builder import make_node

    inner = Builder("fused")
    p = inner.parameter(TensorType(F32, (2, 3)))
    body = inner.build(inner.exp(inner.transpose(p, permutation=(1, 0)))).entry
    b = Builder("outer")
    x = b.parameter(TensorType(F32, (2, 3)))
    fus = make_node(Op.FUSION, [x], {"kind": "loop", "computation": Computation("fused", body.parameters, body.root)})
    m = Module("outer", Computation("outer", (x,), b.add(fus, fus)))
    exe = compile_module(m, dev, optimize=False)
    s = placement_of(exe)
    assert s.ops_on(host_dev().name) == {"fusion": 1} and s.ops_on("template:0") == {"add": 1}
    out = exe.execute([to_buffer(np.ones((2, 3), np.float32), dev)])
    np.testing.assert_allclose(axle.REGISTRY.backend_for(dev).to_host(out[0]), 2 * np.exp(np.ones((3, 2))), rtol=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_match_the_interpreter(dev, seed):
    """Random DAGs mixing claimed (exp, add, mul, reduce) and unclaimed (transpose,
    reverse, slice...) ops: every partition runs in a valid order and gets the right answer."""
    rng = np.random.default_rng(seed)
    b = Builder(f"random{seed}")
    n = 4
    params = [b.parameter(TensorType(F32, (n, n))) for _ in range(3)]
    values = list(params)
    for _ in range(int(rng.integers(5, 40))):
        pick = lambda: values[int(rng.integers(len(values)))]  # noqa: E731
        kind = int(rng.integers(6))
        if kind == 0:
            v = b.add(pick(), pick())
        elif kind == 1:
            v = b.mul(pick(), b.tanh(pick()))
        elif kind == 2:
            v = b.transpose(pick(), permutation=(1, 0))
        elif kind == 3:
            v = b.reverse(pick(), dimensions=(int(rng.integers(2)),))
        elif kind == 4:
            v = b.broadcast_in_dim(b.reduce(pick(), kind="max", axes=(1,)), shape=(n, n), broadcast_dimensions=(0,))
        else:
            v = b.reshape(b.reshape(pick(), shape=(n * n,)), shape=(n, n))
        values.append(v)
    outs = values[-1:] if seed % 2 else values[-3:]
    m = b.build(*outs) if len(outs) > 1 else b.build(outs[0])
    clusters = partition(m, dev, caps(dev), host_dev())
    done = {p.uid for p in m.entry.parameters}
    for c in clusters:
        inside = {x.uid for x in c.nodes}
        for x in c.nodes:
            assert all(o.uid in done or o.uid in inside or o.op is Op.CONSTANT for o in x.operands)
        done |= inside
    inputs = [rng.standard_normal((n, n)).astype(np.float32) for _ in range(3)]
    run(m, dev, *inputs)


def test_buffer_limit_sends_big_ops_to_the_host(dev, monkeypatch):
    import dataclasses

    import axle_template.backend as tb

    base = tb.TemplateBackend.capabilities
    monkeypatch.setattr(tb.TemplateBackend, "capabilities",
                        lambda self, d: dataclasses.replace(base(self, d), limits={"max_buffer_bytes": 64}))
    b = Builder("limits")
    small = b.parameter(TensorType(F32, (4,)))
    big = b.parameter(TensorType(F32, (100,)))
    m = b.build(b.exp(small), b.exp(big))
    exe, _ = run(m, dev, np.ones(4, np.float32), np.ones(100, np.float32))
    s = placement_of(exe)
    assert s.ops_on("template:0") == {"exponential": 1} and s.ops_on(host_dev().name) == {"exponential": 1}
    assert "400-byte buffer, above the device's max_buffer_bytes=64" in str(s)


def test_eager_ops_fall_back_and_stay_on_the_device(dev):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with axle.device(dev):
        a = axle.device_put(x)
        t = anp.transpose(a)          # not claimed: runs on the host, result comes back
        y = anp.exp(t) * 2.0          # claimed
    assert t.device == dev and y.device == dev
    np.testing.assert_allclose(y.numpy(), np.exp(x.T) * 2.0, rtol=1e-6)


def test_cached_executables_respect_strict_placement(dev, monkeypatch):
    """The jit and eager caches key on the compile flags: turning strict placement on after
    a fallback executable was cached must still refuse the call."""
    f = axle.jit(lambda x: anp.transpose(x), device=dev)
    x = np.ones((2, 3), np.float32)
    f(x)
    with axle.device(dev):
        a = axle.device_put(x)
        anp.transpose(a)
    monkeypatch.setattr(axle.config, "strict_placement", True)
    with pytest.raises(axle.errors.PlacementError, match="'transpose'"):
        f(x)
    with pytest.raises(axle.errors.PlacementError, match="'transpose'"):
        anp.transpose(a)
