"""The stacked LSTM of the seeds (3 layers of 60 units over a 10-step sequence, batch 1),
written with ``axle.lax.scan``: each layer is one loop over the time steps, not an
unrolled chain of 10 cells.

    python examples/lstm.py                          # every device, against NumPy
    python examples/lstm.py --device cpu:0 --repeats 200

It prints, per device, the largest difference from the NumPy reference below and the
median time of one jitted forward pass.

The cell is the standard one (gate order i, f, g, o as in TensorFlow's and ONNX's LSTMs,
no peepholes, forget bias added by the caller)::

    z = x @ W + h @ U + b;  i, f, g, o = split(z, 4)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)

The input projection ``x @ W + b`` does not depend on the carry, so it is computed for all
steps at once before the loop (one [T*B, I] x [I, 4H] matmul), as cuDNN does; the loop body
keeps only the recurrent ``h @ U``.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import axle
import axle.numpy as anp
from axle import lax

LAYERS, UNITS, STEPS, BATCH = 3, 60, 10, 1

Params = list[dict[str, np.ndarray]]


def init_params(rng: np.random.Generator, inputs: int = UNITS, units: int = UNITS, layers: int = LAYERS,
                dtype: Any = np.float32) -> Params:
    """Per layer: W [I, 4H], U [H, 4H], b [4H] (Glorot-scaled normal weights, forget bias 1)."""
    params = []
    for k in range(layers):
        n_in = inputs if k == 0 else units
        b = np.zeros(4 * units)
        b[units:2 * units] = 1.0
        params.append({"W": rng.standard_normal((n_in, 4 * units)) / np.sqrt(n_in + units),
                       "U": rng.standard_normal((units, 4 * units)) / np.sqrt(2 * units),
                       "b": b})
    return [{k: v.astype(dtype) for k, v in layer.items()} for layer in params]


def sample_inputs(rng: np.random.Generator, steps: int = STEPS, batch: int = BATCH, inputs: int = UNITS,
                  dtype: Any = np.float32) -> np.ndarray:
    """A [T, B, I] input sequence."""
    return rng.standard_normal((steps, batch, inputs)).astype(dtype)


def _sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + anp.exp(-x))


def lstm_layer(layer: dict[str, Any], xs: Any) -> Any:
    """One LSTM layer over xs [T, B, I] from zero state: the hidden states [T, B, H]."""
    units = layer["U"].shape[0]
    t, b = xs.shape[0], xs.shape[1]
    xw = anp.reshape(anp.matmul(anp.reshape(xs, (t * b, -1)), layer["W"]) + layer["b"], (t, b, 4 * units))

    def cell(carry: tuple[Any, Any], x_proj: Any) -> tuple[tuple[Any, Any], Any]:
        h, c = carry
        z = x_proj + anp.matmul(h, layer["U"])
        i, f, g, o = (z[:, k * units:(k + 1) * units] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * anp.tanh(g)
        h = _sigmoid(o) * anp.tanh(c)
        return (h, c), h

    zero = anp.zeros((b, units), xs.dtype)
    _, hs = lax.scan(cell, (zero, zero), xw)
    return hs


def lstm(params: list[dict[str, Any]], xs: Any) -> Any:
    """The stacked LSTM: each layer reads the hidden states of the one below; returns the
    top layer's hidden states [T, B, H]."""
    for layer in params:
        xs = lstm_layer(layer, xs)
    return xs


def lstm_numpy(params: Params, xs: np.ndarray) -> np.ndarray:
    """The NumPy reference: the same cell, one Python step at a time."""
    def sigmoid(v: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-v))

    for layer in params:
        units = layer["U"].shape[0]
        h = np.zeros((xs.shape[1], units), xs.dtype)
        c = np.zeros_like(h)
        out = []
        for x in xs:
            z = x @ layer["W"] + h @ layer["U"] + layer["b"]
            i, f, g, o = (z[:, k * units:(k + 1) * units] for k in range(4))
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            out.append(h)
        xs = np.stack(out)
    return xs


def compiled(device: Any = None) -> Any:
    """The forward pass jitted for ``device``."""
    return axle.jit(lstm, device=device)


def time_call(fn: Any, args: tuple, repeats: int) -> float:
    """Median milliseconds of ``np.asarray(fn(*args))``, after one warm-up call."""
    np.asarray(fn(*args))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.asarray(fn(*args))
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="a device (repeatable); default: every device")
    ap.add_argument("--repeats", type=int, default=100)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    params, xs = init_params(rng), sample_inputs(rng)
    want = lstm_numpy(params, xs)
    print(f"stacked LSTM: {LAYERS} layers x {UNITS} units, {STEPS} steps, batch {BATCH}")
    print(f"  numpy          {time_call(lstm_numpy, (params, xs), args.repeats):8.3f} ms")
    for dev in args.device or [d.name for d in axle.devices()]:
        fn = compiled(dev)
        d_params = axle.device_put(params, dev)
        d_xs = axle.device_put(xs, dev)
        err = float(np.max(np.abs(np.asarray(fn(d_params, d_xs)) - want)))
        ms = time_call(fn, (d_params, d_xs), args.repeats)
        print(f"  {dev:<14} {ms:8.3f} ms   max |axle - numpy| = {err:.2e}")


if __name__ == "__main__":
    main()
