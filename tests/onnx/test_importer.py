"""axle.onnx beyond the node suite: inputs by name and position, dict outputs, grad through
a model, initializers placed once, the report of unsupported nodes before anything runs,
and `axle run` / `axle explain` on a model file."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import axle
import axle.onnx as ao
from axle.cli import main


def _mlp(extra_nodes: list[onnx.NodeProto] = ()) -> onnx.ModelProto:  # type: ignore[assignment]
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
             helper.make_node("Relu", ["hb"], ["y"], name="relu"), *extra_nodes]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reference(x: np.ndarray, model: onnx.ModelProto) -> np.ndarray:
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    return np.maximum(x @ w + b, 0)


def test_call_by_position_name_and_dict() -> None:
    m = _mlp()
    f = ao.load(m, device="cpu:0")
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    (y,) = f(x)
    np.testing.assert_allclose(np.asarray(y), _reference(x, m), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(f(x=x, as_dict=True)["y"]), np.asarray(y))


def test_initializers_are_device_arrays_made_once() -> None:
    f = ao.load(_mlp(), device="cpu:0")
    params = list(f._params)
    x = np.ones((2, 4), np.float32)
    f(x)
    f(x)
    assert all(isinstance(p, axle.Array) for p in params) and len(params) == 2
    assert [id(p) for p in f._params] == [id(p) for p in params]


def test_grad_through_a_model() -> None:
    m = _mlp()
    f = ao.load(m, device="cpu:0")
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    g = axle.grad(lambda v: axle.numpy.sum(f(v)[0]))(x)
    w, b = (numpy_helper.to_array(t) for t in m.graph.initializer)
    mask = (x @ w + b > 0).astype(np.float32)
    np.testing.assert_allclose(np.asarray(g), mask @ w.T, rtol=1e-5, atol=1e-6)


def test_wrong_input_dtype_and_shape_are_axle_errors() -> None:
    f = ao.load(_mlp(), device="cpu:0")
    with pytest.raises(axle.errors.DTypeError, match="input 'x' must be float32"):
        f(np.ones((2, 4), np.int32))
    with pytest.raises(axle.errors.ArgumentError, match="declares"):
        f(np.ones((3, 4), np.float32))


def _unsupported_model() -> onnx.ModelProto:
    m = _mlp([helper.make_node("StringNormalizer", ["y"], ["s"], name="strings"),
              helper.make_node("Relu", ["y"], ["r"], name="old", domain="com.vendor")])
    return m


def test_every_unsupported_node_is_reported_before_running() -> None:
    with pytest.raises(ao.OnnxImportError) as e:
        ao.load(_unsupported_model())
    text = str(e.value)
    assert "node 'strings' (StringNormalizer, opset 17): unsupported op" in text
    assert "node 'old' (Relu, opset 17): unsupported domain 'com.vendor'" in text
    assert len(e.value.problems) == 2


def test_axle_run_check_lists_all(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = f"{tmp_path}/bad.onnx"
    onnx.save(_unsupported_model(), path)
    assert main(["run", path, "--check"]) == 1
    out = capsys.readouterr().out
    assert "StringNormalizer" in out and "com.vendor" in out and "2 problems" in out


def test_axle_run_compares_with_onnxruntime(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = f"{tmp_path}/mlp.onnx"
    onnx.save(_mlp(), path)
    assert main(["run", path, "--device", "cpu:0", "--bench", "2", "--compare", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    assert "output y: float32[2, 3]" in out and "kernels:" in out and "compare y:" in out and ": ok" in out


def test_axle_explain_accepts_a_model(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = f"{tmp_path}/mlp.onnx"
    onnx.save(_mlp(), path)
    assert main(["explain", path, "--device", "cpu:0", "--no-source"]) == 0
    assert "placement" in capsys.readouterr().out


def test_shape_input_is_taken_by_value() -> None:
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "r",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    f = ao.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu:0")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.asarray(f(x, np.array([3, 2]))[0]).shape == (3, 2)
    assert np.asarray(f(x, np.array([1, 6]))[0]).shape == (1, 6)
