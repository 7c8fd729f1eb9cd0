"""benchmarks/bench_onnx.py in quick mode: every row runs, every implementation was checked
against onnxruntime before it was timed (no timing assertions)."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("bench_onnx.py")


def test_quick_rows_check_every_implementation_against_onnxruntime(bench: ModuleType) -> None:
    rows = bench.run(quick=True)
    assert [r.workload.split()[0] for r in rows] == ["ResNet", "LSTM", "GPT-2-style"]
    for r in rows:
        assert r.baseline == "onnxruntime" and "axle-cpu (axle.onnx)" in r.times_ms
        assert all(t > 0 for t in r.times_ms.values())
        assert float(r.extra["max rel. diff vs onnxruntime"]) < bench.REL_TOL
    assert "axle-cpu (examples/lstm.py)" in rows[1].times_ms
    has_jax = importlib.util.find_spec("jax") is not None
    assert all(("jax.jit" in r.times_ms) == has_jax for r in rows)


def test_onnx_lstm_weights_map_onto_examples_lstm(bench: ModuleType) -> None:
    """The gate reordering (ONNX i, o, f, c -> examples/lstm.py's i, f, g, o) and the summed
    biases: examples/lstm.py's NumPy reference gives onnxruntime's last hidden state."""
    from onnx import numpy_helper

    ex, lstm = bench.load_example("onnx_models"), bench.load_example("lstm")
    model = ex.lstm(input_size=3, hidden=5, steps=4)
    bias_name = next(n for n in model.graph.node if n.op_type == "LSTM").input[3]
    b = next(i for i in model.graph.initializer if i.name == bias_name)
    rng = np.random.default_rng(1)
    b.CopyFrom(numpy_helper.from_array(rng.standard_normal((1, 40)).astype(np.float32), b.name))
    x = ex.inputs_for(model)["x"]
    want = bench._ort_session(model).run(None, {"x": x})[0]
    got = lstm.lstm_numpy([bench._lstm_params(model)], x)[-1:]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_jax_attrs_decode_string_attributes(bench: ModuleType) -> None:
    """onnx gives string attributes as bytes: Gelu's approximate="tanh" must select the
    tanh form in the jax version (it compared equal to the exact form's bytes before)."""
    from onnx import helper

    node = helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")
    assert bench._attrs(node) == {"approximate": "tanh"}


def test_a_wrong_implementation_is_refused_before_timing(bench: ModuleType) -> None:
    want = np.ones((2, 3), np.float32)
    with pytest.raises(AssertionError, match="wrong differs from onnxruntime"):
        bench._check({"right": lambda: [want], "wrong": lambda: [want * 1.01]}, want, "w")
