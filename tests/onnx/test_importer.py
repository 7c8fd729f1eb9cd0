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
    f = ao.load(_mlp(), device="cpu:0", constants=False)
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


def test_relu_gradient_is_zero_at_zero_as_onnxruntime_training() -> None:
    # Relu straight on the input: exact zeros (and a padded row of them) reach it
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    f = ao.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu:0")
    x = np.array([[0.0, -0.0, 2.0], [-1.0, 0.0, np.inf]], np.float32)
    for grad in (axle.grad(lambda v: axle.numpy.sum(f(v)[0])),
                 axle.jit(axle.grad(lambda v: axle.numpy.sum(f(v)[0])))):
        np.testing.assert_array_equal(np.asarray(grad(x)), [[0, 0, 1], [0, 0, 1]])


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


def test_axle_run_initializers_as_constants(tmp_path: object, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = f"{tmp_path}/mlp.onnx"
    onnx.save(_mlp(), path)
    made = []
    real = ao.OnnxFunction.__init__

    def spy(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        real(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(ao.OnnxFunction, "__init__", spy)
    assert main(["run", path, "--device", "cpu:0", "--initializers-as-constants", "--compare", "onnxruntime"]) == 0
    assert ": ok" in capsys.readouterr().out
    assert main(["run", path, "--device", "cpu:0"]) == 0
    assert [(f.constants, len(f._params)) for f in made] == [(True, 0), (False, 2)]


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


def _opset(g: onnx.GraphProto) -> onnx.ModelProto:
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ref(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator
    return list(ReferenceEvaluator(model).run(None, feeds))


def test_if_on_a_traced_predicate_is_a_conditional() -> None:
    f32 = TensorProto.FLOAT
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", f32, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", f32, [3])])
    g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                           helper.make_node("Greater", ["s", "zero"], ["p"]),
                           helper.make_node("If", ["p"], ["y"], then_branch=then_g, else_branch=else_g)],
                          "if", [helper.make_tensor_value_info("x", f32, [3])],
                          [helper.make_tensor_value_info("y", f32, [3])],
                          [numpy_helper.from_array(np.float32(0), "zero")])
    m = _opset(g)
    f = ao.load(m, device="cpu:0")
    for x in (np.array([1, 2, 3], np.float32), np.array([-1, -2, 0.5], np.float32)):
        np.testing.assert_allclose(np.asarray(f(x)[0]), _ref(m, {"x": x})[0])
    assert len(f._jits) == 1  # one compile for both branches: a conditional, not a host decision


def test_loop_with_a_traced_trip_count_is_a_while_loop() -> None:
    f32, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c2"]),
                              helper.make_node("Mul", ["v", "two"], ["v2"])], "body",
                             [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("c", b, []),
                              helper.make_tensor_value_info("v", f32, [2])],
                             [helper.make_tensor_value_info("c2", b, []), helper.make_tensor_value_info("v2", f32, [2])])
    g = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], "loop",
                          [helper.make_tensor_value_info("n", i64, []), helper.make_tensor_value_info("x", f32, [2])],
                          [helper.make_tensor_value_info("y", f32, [2])],
                          [numpy_helper.from_array(np.float32(2), "two")])
    m = _opset(g)
    f = ao.load(m, device="cpu:0")
    x = np.array([1, 3], np.float32)
    for n in (0, 3, 5):  # x doubled n times (one compile: the trip count is a traced value)
        np.testing.assert_allclose(np.asarray(f(np.int64(n), x)[0]), x * 2.0 ** n)
    assert len(f._jits) == 1


def test_scan_over_an_axis_with_a_state() -> None:
    f32 = TensorProto.FLOAT
    body = helper.make_graph([helper.make_node("Add", ["s", "xi"], ["s2"]),
                              helper.make_node("Identity", ["s2"], ["y"])], "body",
                             [helper.make_tensor_value_info("s", f32, [2]), helper.make_tensor_value_info("xi", f32, [2])],
                             [helper.make_tensor_value_info("s2", f32, [2]), helper.make_tensor_value_info("y", f32, [2])])
    g = helper.make_graph([helper.make_node("Scan", ["s0", "x"], ["sT", "ys"], body=body, num_scan_inputs=1,
                                            scan_input_directions=[1])], "scan",
                          [helper.make_tensor_value_info("s0", f32, [2]), helper.make_tensor_value_info("x", f32, [4, 2])],
                          [helper.make_tensor_value_info("sT", f32, [2]), helper.make_tensor_value_info("ys", f32, [4, 2])])
    m = _opset(g)
    f = ao.load(m, device="cpu:0")
    feeds = {"s0": np.zeros(2, np.float32), "x": np.arange(8, dtype=np.float32).reshape(4, 2)}
    # scanned from the last row (direction 1), the outputs stacked in scan order
    ys = np.cumsum(feeds["x"][::-1], axis=0)
    s_t, ys_got = f(**feeds)
    np.testing.assert_allclose(np.asarray(s_t), ys[-1])
    np.testing.assert_allclose(np.asarray(ys_got), ys)


def test_a_malformed_node_is_an_axle_error_naming_it() -> None:
    g = helper.make_graph([helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s")], "bad",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    f = ao.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu:0")
    with pytest.raises(ao.OnnxImportError, match="node 'd2s' \\(DepthToSpace, opset 17\\): invalid node"):
        f(np.zeros((1, 1, 4, 4), np.float32))


def test_einsum_ellipsis_is_spelled_out() -> None:
    from axle.onnx.ops_nn import expand_ellipsis
    # right-aligned, as broadcasting aligns the ellipsis dims; NumPy agrees on the result
    assert expand_ellipsis("...ij,...jk->...ik", [4, 3]) == "ABij,Bjk->ABik"
    assert expand_ellipsis("i...,i...", [2, 2]) == "iA,iA->A"
    a, b = np.ones((2, 3, 4, 5)), np.arange(90.0).reshape(3, 5, 6)
    np.testing.assert_array_equal(np.einsum("ABij,Bjk->ABik", a, b), np.einsum("...ij,...jk->...ik", a, b))
