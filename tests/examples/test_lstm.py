"""examples/lstm.py: the seeds' stacked LSTM written with scan equals its NumPy reference
on cpu, opencl and the interpreter, and each layer stays one loop (not 10 unrolled cells)."""
from __future__ import annotations

import numpy as np
import pytest
from example_loader import load_example

import axle
from axle.ir.ops import Op

lstm = load_example("lstm")


@pytest.fixture(scope="module")
def seeds_lstm() -> tuple[list[dict], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    params, xs = lstm.init_params(rng), lstm.sample_inputs(rng)
    return params, xs, lstm.lstm_numpy(params, xs)


@pytest.mark.parametrize("device", ["cpu:0", "opencl:0", "interpreter:0"])
def test_stacked_lstm_matches_numpy(seeds_lstm, device: str) -> None:
    params, xs, want = seeds_lstm
    got = np.asarray(lstm.compiled(device)(params, xs))
    assert got.shape == (lstm.STEPS, lstm.BATCH, lstm.UNITS) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_stacked_lstm_in_float64_is_exact_to_rounding() -> None:
    """float64 leaves no room for a wrong gate order or a step read twice to hide in float32 noise."""
    rng = np.random.default_rng(8)
    params = lstm.init_params(rng, dtype=np.float64)
    xs = lstm.sample_inputs(rng, steps=6, batch=3, dtype=np.float64)
    got = np.asarray(lstm.compiled("interpreter:0")(params, xs))
    np.testing.assert_allclose(got, lstm.lstm_numpy(params, xs), rtol=1e-12, atol=1e-14)


def test_each_layer_is_one_loop_over_the_steps(seeds_lstm) -> None:
    params, xs, _ = seeds_lstm
    module = axle.jit(lstm.lstm, device="interpreter:0").lower(params, xs).optimize()
    loops = [n for n in module.entry.nodes if n.op is Op.WHILE]
    assert len(loops) == lstm.LAYERS
