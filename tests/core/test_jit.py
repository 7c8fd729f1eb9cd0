"""Tracing jit, the seed example, softmax, caching and retracing, placement, errors."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.errors import DeviceError, ShapeError, TracingError

INTERP = "interpreter:0"


def model_fn(x, y, z):
    return anp.sum(x + y * z)


def softmax(x):
    e = anp.exp(x - anp.max(x, axis=-1, keepdims=True))
    return e / anp.sum(e, axis=-1, keepdims=True)


@pytest.mark.parametrize("n", [0, 1, 7, 1024])
def test_seed_example_on_interpreter(n):
    f = axle.jit(model_fn, device=INTERP)
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    out = f(x, y, z)
    assert isinstance(out, axle.Array) and out.device.name == INTERP
    assert out.shape == () and out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out), np.sum(x + y * z), rtol=1e-5, atol=1e-5)


def test_seed_text():
    x = np.ones(1024, np.float32)
    text = axle.jit(model_fn).lower(x, x, x).as_text()
    assert "%multiply = f32[1024] multiply(%y, %z)" in text
    assert "ROOT %reduce = f32[] reduce(%add), axes={0}, kind=sum" in text
    assert axle.jit(model_fn).lower(x, x, x).as_dot().startswith("digraph")


@pytest.mark.parametrize("shape", [(4, 10), (1, 1), (3, 7, 5)])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_decomposed_softmax(shape, dt):
    x = (np.random.default_rng(1).standard_normal(shape) * 5).astype(dt)
    got = np.asarray(axle.jit(softmax, device=INTERP)(x))
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-6 if dt == np.float32 else 1e-12)
    assert got.dtype == dt


def test_no_retrace_for_same_shapes_retrace_for_new():
    f = axle.jit(model_fn, device=INTERP)
    a = np.ones(8, np.float32)
    f(a, a, a)
    f(a + 1, a, a)
    assert f.trace_count == 1 and f.cache_hits == 1
    b = np.ones(9, np.float32)
    f(b, b, b)
    assert f.trace_count == 2
    f(a.astype(np.float64), a.astype(np.float64), a.astype(np.float64))
    assert f.trace_count == 3


def test_static_argnums():
    def power_sum(x, n):
        out = x
        for _ in range(n - 1):
            out = out * x
        return anp.sum(out)

    f = axle.jit(power_sum, static_argnums=1, device=INTERP)
    x = np.arange(4.0)
    assert float(f(x, 2)) == 14.0
    assert float(f(x, 3)) == 36.0
    assert f.trace_count == 2
    f(x, 3)
    assert f.trace_count == 2


def test_pytrees_in_and_out():
    @axle.jit
    def f(params, x):
        return {"y": x @ params["w"] + params["b"], "n": (anp.sum(x),)}

    p = {"w": np.ones((3, 2)), "b": np.zeros(2)}
    out = f(p, np.ones((4, 3)))
    np.testing.assert_array_equal(np.asarray(out["y"]), np.full((4, 2), 3.0))
    assert float(out["n"][0]) == 12.0


def test_weak_python_scalars_keep_array_dtype():
    f = axle.jit(lambda x: x * 2.0 + 1)
    assert f(np.ones(3, np.float32)).dtype == np.float32
    g = axle.jit(lambda x, s: x * s)
    assert g(np.ones(3, np.float32), 2.0).dtype == np.float32
    assert g(np.ones(3, np.int32), 2).dtype == np.int32
    # NumPy 2 promotion: an int array times a Python float is float64
    assert g(np.ones(3, np.int32), 2.5).dtype == np.float64


def test_numpy_promotion_and_broadcasting():
    f = axle.jit(lambda a, b: a + b)
    out = f(np.ones((3, 1), np.int32), np.ones(4, np.float32))
    assert out.shape == (3, 4) and out.dtype == np.float64
    assert f(np.ones(2, np.float16), np.ones(2, np.float32)).dtype == np.float32


def test_array_api():
    a = axle.device_put(np.arange(6.0).reshape(2, 3), INTERP)
    assert a.device.name == INTERP and a.shape == (2, 3) and a.dtype == np.float64 and a.ndim == 2
    assert "Array([[0., 1., 2.]" in repr(a) and "device='interpreter:0'" in repr(a)
    np.testing.assert_array_equal(np.asarray(a.T @ a), np.arange(6.0).reshape(2, 3).T @ np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(a[:, ::-2]), np.arange(6.0).reshape(2, 3)[:, ::-2])
    assert float(a.sum()) == 15.0 and a.sum(axis=0).shape == (3,)
    host = np.asarray(a)
    with pytest.raises(ValueError):
        host[0, 0] = 5  # device arrays are immutable


def test_placement_context_and_device_put():
    assert any(d.name == INTERP for d in axle.devices())
    with axle.device(INTERP) as d:
        assert axle.default_device() == d
        out = axle.jit(model_fn)(np.ones(3), np.ones(3), np.ones(3))
        assert out.device == d
    moved = axle.device_put({"a": np.ones(2), "b": [np.zeros(1)]}, INTERP)
    assert moved["b"][0].device.name == INTERP


def test_unknown_device_errors():
    with pytest.raises(DeviceError, match=r"unknown device 'gpu:7'; available devices: .*interpreter:0"):
        axle.jit(model_fn, device="gpu:7")(np.ones(1), np.ones(1), np.ones(1))


def test_errors_name_op_shapes_and_user_line():
    f = axle.jit(lambda x, y: x + y)
    with pytest.raises(ShapeError) as ei:
        f(np.ones(3), np.ones(4))
    msg = str(ei.value)
    assert "add" in msg and "f64[3]" in msg and "f64[4]" in msg and "test_jit.py" in msg

    @axle.jit
    def branchy(x):
        if anp.sum(x) > 0:
            return x
        return -x

    with pytest.raises(TracingError, match=r"(?s)Python control flow.*test_jit.py"):
        branchy(np.ones(3))
    with pytest.raises(ShapeError, match=r"axis 2 is out of bounds"):
        axle.jit(lambda x: anp.sum(x, axis=2))(np.ones((2, 2)))


def test_leaked_tracer_is_an_error():
    leaked = []

    @axle.jit
    def f(x):
        leaked.append(x)
        return x

    f(np.ones(2))
    with pytest.raises(TracingError, match="escaped"):
        axle.jit(lambda y: y + leaked[0])(np.ones(2))


def test_eager_ops_outside_jit():
    with axle.device(INTERP):
        x = anp.asarray(np.arange(4.0))
        y = anp.exp(x) * 2 - 1
        assert isinstance(y, axle.Array)
        np.testing.assert_allclose(np.asarray(y), np.exp(np.arange(4.0)) * 2 - 1)
        np.testing.assert_allclose(np.asarray(softmax(x)), np.exp(np.arange(4.0)) / np.exp(np.arange(4.0)).sum())


def test_stats_count_traces_hits_and_launches():
    axle.reset_stats()
    f = axle.jit(model_fn, device=INTERP)
    a = np.ones(4, np.float32)
    f(a, a, a)
    f(a, a, a)
    s = axle.stats()
    assert s["traces"] == 1 and s["cache_hits"] == 1 and s["cache_misses"] == 1
    assert s["per_function"]["model_fn"]["executions"] == 2
    axle.reset_stats()
    with axle.device(INTERP):
        model_fn(*axle.device_put((a, a, a)))
    assert axle.stats()["eager_ops"] == 3  # mul, add, reduce: one launch each


def test_results_are_freed_without_the_garbage_collector():
    """A jit call must not put its arguments or results in a reference cycle: backends
    recycle output buffers as soon as the last reference goes (the CPU backend's pool),
    which a cycle would delay to the next collection (a fresh 32 MB buffer every call)."""
    import gc
    import weakref

    f = axle.jit(lambda t: {"a": (t["x"] * 2.0, [t["x"] + 1.0])})
    x = np.ones(16, np.float32)
    f({"x": x})
    gc.disable()
    try:
        out = f({"x": x})
        refs = [weakref.ref(out["a"][0]), weakref.ref(out["a"][1][0])]
        np.asarray(out["a"][0])
        del out
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_tree_definitions_are_interned():
    from axle.frontend.pytree import flatten, unflatten

    leaves, td = flatten({"b": [1, (2, None)], "a": 3})
    assert leaves == [3, 1, 2]
    assert flatten({"a": 0, "b": [0, (0, None)]})[1] is td
    assert unflatten(td, [7, 8, 9]) == {"a": 7, "b": [8, (9, None)]}
    assert flatten((1,))[1] is not flatten([1])[1]
