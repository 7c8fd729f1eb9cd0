"""Initializers as compile-time constants (axle.onnx's default; docs/onnx.md, "Initializers"):
results equal to onnxruntime's and to the argument path (``constants=False``) on small
models, a Conv -> BatchNormalization pair folded into the convolution, an initializer that
is also a graph output or read twice, and the compile cache's round trip of large
constants through a second process (their bytes beside the entries; a corrupt or
truncated side file detected and compiled again)."""
from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import axle.onnx as ao
from axle.ir import Op
from axle.onnx.fold import fold_batch_norms
from axle.testing import require_backend

_PATH = Path(__file__).resolve().parents[2] / "examples" / "onnx_models.py"
_SPEC = importlib.util.spec_from_file_location("onnx_models_example_consts", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
models = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(models)

DEV = "cpu:0"


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    s = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _conv_bn_relu(bias: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    c, k = 3, 8
    inits = [numpy_helper.from_array(rng.standard_normal((k, c, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 2, k).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "shift"),
             numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2, k).astype(np.float32), "var")]
    conv_in = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    g = helper.make_graph(nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, 10, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _x(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def _both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(outputs with initializers as constants, as arguments)."""
    consts = [np.asarray(o) for o in ao.load(model, device=DEV, constants=True)(**feeds)]
    args = [np.asarray(o) for o in ao.load(model, device=DEV, constants=False)(**feeds)]
    return consts, args


@pytest.mark.parametrize("bias", [True, False])
def test_conv_bn_relu_equals_onnxruntime_and_the_argument_path(bias: bool) -> None:
    require_backend("cpu")
    m = _conv_bn_relu(bias)
    feeds = {"x": _x((1, 3, 10, 10))}
    (want,) = _ort(m, feeds)
    (c,), (a,) = _both(m, feeds)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)


def test_batch_norm_is_folded_into_the_convolution() -> None:
    require_backend("cpu")
    m = _conv_bn_relu()
    f = ao.load(m, device=DEV, constants=True)
    assert [n.op_type for n in f._graph.node] == ["Conv", "Relu"]
    # the BatchNormalization's parameters and the unscaled weight are not kept
    assert sorted(f._consts) == ["n.bias", "w.bn_folded"]
    optimized = f.lower(x=_x((1, 3, 10, 10))).optimize()
    ops = {n.op for c in optimized.computations() for n in c.nodes}
    # the convolution's epilogue adds the folded bias and applies the ReLU: no multiply,
    # subtract, divide or square root of a batch normalization is left
    assert Op.CONVOLUTION in ops
    assert not ops & {Op.MUL, Op.SUB, Op.DIV, Op.SQRT, Op.RSQRT}, sorted(o.value for o in ops)
    # the argument path keeps the normalization (its parameters are not known when compiled)
    args = ao.load(m, device=DEV, constants=False).lower(x=_x((1, 3, 10, 10))).optimize()
    assert Op.MUL in {n.op for c in args.computations() for n in c.nodes}


def test_batch_norm_read_twice_or_in_training_mode_is_not_folded() -> None:
    m = _conv_bn_relu()
    consts = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    g = onnx.GraphProto()
    g.CopyFrom(m.graph)
    g.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))  # the conv's output read twice
    assert fold_batch_norms(g, consts) is None
    # a parameter that is not a constant (a graph input) keeps the pair
    assert fold_batch_norms(m.graph, {k: v for k, v in consts.items() if k != "mean"}) is None
    assert fold_batch_norms(m.graph, consts) is not None


def test_gpt2_block_equals_onnxruntime_and_the_argument_path() -> None:
    require_backend("cpu")
    m = models.SMALL["gpt2"]()
    feeds = models.inputs_for(m)
    (want,) = _ort(m, feeds)
    (c,), (a,) = _both(m, feeds)
    scale = float(np.max(np.abs(want)))
    assert float(np.max(np.abs(c - want))) / scale < 1e-5
    assert float(np.max(np.abs(a - want))) / scale < 1e-5


def _shared_initializer_model() -> onnx.ModelProto:
    """``w`` is a graph output as it is and read by two nodes; ``b`` read twice."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("MatMul", ["hb", "w"], ["h2"]), helper.make_node("Mul", ["h2", "b"], ["y"])]
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_initializer_that_is_an_output_and_read_twice() -> None:
    require_backend("cpu")
    m = _shared_initializer_model()
    feeds = {"x": _x((2, 4))}
    want = _ort(m, feeds)
    consts, args = _both(m, feeds)
    for got in (consts, args):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got[1], want[1])  # the initializer itself, bit for bit
    # the output is a copy: writing to it leaves the model's constant as it was
    f = ao.load(m, device=DEV, constants=True)
    out = np.array(f(**feeds)[1])
    out[:] = 0
    np.testing.assert_array_equal(np.asarray(f(**feeds)[1]), want[1])


def test_a_model_read_here_drops_its_copy_of_the_weights_and_a_given_one_is_kept() -> None:
    require_backend("cpu")
    m = _conv_bn_relu()
    x = {"x": _x((1, 3, 10, 10))}
    (want,) = _ort(m, x)
    f = ao.load(m.SerializeToString(), device=DEV, constants=True)
    np.testing.assert_allclose(np.asarray(f(**x)[0]), want, rtol=1e-5, atol=1e-5)
    assert all(not t.raw_data and not t.float_data for t in f.model.graph.initializer)
    g = ao.load(m, device=DEV, constants=True)  # the caller's ModelProto: not changed
    assert g.model is m and all(numpy_helper.to_array(t).size for t in m.graph.initializer)
    np.testing.assert_allclose(np.asarray(g(**x)[0]), want, rtol=1e-5, atol=1e-5)


def test_the_argument_path_passes_weights_and_the_constant_path_bakes_them() -> None:
    require_backend("cpu")
    m = _conv_bn_relu()
    x = _x((1, 3, 10, 10))
    traced = ao.load(m, device=DEV, constants=True).lower(x=x).module
    assert len(traced.entry.parameters) == 1  # x alone
    assert any(n.op is Op.CONSTANT and n.shape == (8, 3, 3, 3) for n in traced.entry.nodes)
    args = ao.load(m, device=DEV, constants=False).lower(x=x).module
    assert len(args.entry.parameters) == 1 + 6 and not any(
        n.op is Op.CONSTANT and len(n.shape) == 4 for n in args.entry.nodes)


# ------------------------------------------------------------- the compile cache, across processes

_PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import onnx
    import axle, axle.onnx
    model = onnx.load(sys.argv[1])
    x = np.load(sys.argv[2])
    f = axle.onnx.load(model, device="cpu:0", constants=sys.argv[3] == "1")
    y = np.asarray(f(x=x)[0])
    np.save(sys.argv[4], y)
    s = axle.stats()
    print(json.dumps({k: s[k] for k in s if k.startswith("disk_cache_")}))
""")


def _big_model() -> onnx.ModelProto:
    """A 128x128x3x3 convolution (576 KiB of weights: stored beside the cache's entries)
    with a batch norm, and a 256x256 MatMul weight."""
    rng = np.random.default_rng(5)
    k = 128
    inits = [numpy_helper.from_array((rng.standard_normal((k, k, 3, 3)) * 0.05).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 2, k).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "shift"),
             numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2, k).astype(np.float32), "var"),
             numpy_helper.from_array((rng.standard_normal((64, 256)) * 0.05).astype(np.float32), "m"),
             numpy_helper.from_array(np.array([1, k * 4 * 4 // 64, 64], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["r2"]),
             helper.make_node("MatMul", ["r2", "m"], ["y"])]
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 256])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(python_processes, tmp_path: Path, cache: Path, consts: bool = True) -> tuple[dict, np.ndarray]:  # noqa: ANN001
    """A new process's call of the model saved in ``tmp_path``: (its disk cache counts, output)."""
    out = tmp_path / "y.npy"
    argv = [str(tmp_path / "m.onnx"), str(tmp_path / "x.npy"), "1" if consts else "0", str(out)]
    p = python_processes.start(f"import sys\nsys.argv[1:] = {argv!r}\n" + _PROGRAM, str(cache), "cpu")
    counts = python_processes.answer(p)
    return {k[len("disk_cache_"):]: v for k, v in counts.items()}, np.load(out)


def _side_files(cache: Path) -> list[Path]:
    d = cache / "const"
    return sorted(d / n for n in os.listdir(d) if n.endswith(".bin")) if d.exists() else []


def test_large_constants_round_trip_through_the_compile_cache(python_processes, tmp_path: Path) -> None:  # noqa: ANN001
    require_backend("cpu")
    m = _big_model()
    onnx.save(m, str(tmp_path / "m.onnx"))
    x = _x((1, 128, 4, 4))
    np.save(tmp_path / "x.npy", x)
    (want,) = _ort(m, {"x": x})
    cache = tmp_path / "cache"
    first, y1 = _run(python_processes, tmp_path, cache)
    np.testing.assert_allclose(y1, want, rtol=1e-4, atol=1e-4)
    assert first["writes"] >= 1 and first["corrupt"] == 0
    files = _side_files(cache)
    assert files, "no large constant was stored beside the entries"
    # the entries hold digests, not the weights' bytes (576 KiB of weights as base64: 770 KB)
    for sub in ("module", "cpu"):
        assert all(os.path.getsize(cache / sub / n) < 200_000 for n in os.listdir(cache / sub)), sub
    second, y2 = _run(python_processes, tmp_path, cache)
    np.testing.assert_array_equal(y2, y1)
    assert second["hits"] >= 1 and second["corrupt"] == 0 and second["writes"] == 0, second
    # a truncated and a bit-flipped side file: detected, compiled again, the same results
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])
    for f in files[1:]:
        raw = bytearray(f.read_bytes())
        raw[-1] ^= 0x40
        f.write_bytes(bytes(raw))
    third, y3 = _run(python_processes, tmp_path, cache)
    np.testing.assert_array_equal(y3, y1)
    assert third["corrupt"] >= 1 and third["writes"] >= 1, third
    # the constants were written again: a fourth process reads everything back whole
    fourth, y4 = _run(python_processes, tmp_path, cache)
    np.testing.assert_array_equal(y4, y1)
    assert fourth["corrupt"] == 0 and fourth["writes"] == 0, fourth


def test_the_argument_path_stores_no_constants(python_processes, tmp_path: Path) -> None:  # noqa: ANN001
    require_backend("cpu")
    m = _big_model()
    onnx.save(m, str(tmp_path / "m.onnx"))
    x = _x((1, 128, 4, 4))
    np.save(tmp_path / "x.npy", x)
    cache = tmp_path / "cache"
    counts, y = _run(python_processes, tmp_path, cache, consts=False)
    (want,) = _ort(m, {"x": x})
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    assert counts["corrupt"] == 0 and _side_files(cache) == []
