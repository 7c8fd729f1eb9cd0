"""Functions to compile ahead of time with ``axle aot`` (see docs/aot.md):

    axle aot examples/aot/models.py:mlp --arg f32[100,784] --arg f32[784,128] --arg f32[128] \\
        --arg f32[128,10] --arg f32[10] -o build/mlp
    axle aot examples/aot/models.py:seed --arg f32[1048576] --arg f32[1048576] --arg f32[1048576] -o build/seed
    axle aot examples/aot/models.py:lstm --arg f32[10,1,60] --arg f32[3,60,240] --arg f32[3,60,240] \
        --arg f32[3,240] -o build/lstm
"""
from __future__ import annotations

import numpy as np

import axle.numpy as anp
from axle import lax


def seed(x, y, z):  # noqa: ANN001, ANN201
    """The seed example: sum(x + y*z)."""
    return anp.sum(x + y * z)


def mlp(x, w1, b1, w2, b2):  # noqa: ANN001, ANN201
    """A 2-layer MLP forward pass: softmax(relu(x @ w1 + b1) @ w2 + b2) over the last axis."""
    h = anp.maximum(anp.matmul(x, w1) + b1, 0.0)
    logits = anp.matmul(h, w2) + b2
    e = anp.exp(logits - anp.max(logits, axis=1, keepdims=True))
    return e / anp.sum(e, axis=1, keepdims=True)


# the seeds' stacked LSTM: LAYERS layers of UNITS units, batch 1, a loop over the sequence
LAYERS, UNITS = 3, 60


def lstm(xs, w, u, bias):  # noqa: ANN001, ANN201
    """A stacked LSTM over the sequence ``xs`` [T, 1, UNITS] with ``lax.scan`` (one native
    loop): per layer, gates ``x @ w[k] + h @ u[k] + bias[k]`` in the order input, forget,
    output, cell. Returns the top layer's output at every step, [T, 1, UNITS]."""
    h_ = UNITS

    def cell(carry, x):  # noqa: ANN001, ANN202
        hs, cs = carry
        inp, new_h, new_c = x, [], []
        for k in range(LAYERS):
            g = inp @ w[k] + hs[k] @ u[k] + bias[k]
            i, f, o = (1 / (1 + anp.exp(-g[:, j * h_:(j + 1) * h_])) for j in range(3))
            c = f * cs[k] + i * anp.tanh(g[:, 3 * h_:])
            inp = o * anp.tanh(c)
            new_h.append(inp)
            new_c.append(c)
        return (anp.stack(new_h), anp.stack(new_c)), inp

    z = anp.zeros((LAYERS, 1, UNITS), anp.float32)
    _, ys = lax.scan(cell, (z, z), xs)
    return ys


def lstm_numpy(xs, w, u, bias):  # noqa: ANN001, ANN201
    """:func:`lstm` in NumPy (the reference)."""
    h_ = UNITS
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    hs, cs = np.zeros((LAYERS, 1, h_), np.float32), np.zeros((LAYERS, 1, h_), np.float32)
    ys = []
    for x in xs:
        inp = x
        for k in range(LAYERS):
            g = inp @ w[k] + hs[k] @ u[k] + bias[k]
            cs[k] = sig(g[:, h_:2 * h_]) * cs[k] + sig(g[:, :h_]) * np.tanh(g[:, 3 * h_:])
            hs[k] = sig(g[:, 2 * h_:3 * h_]) * np.tanh(cs[k])
            inp = hs[k].copy()
        ys.append(inp)
    return np.stack(ys)


def lstm_inputs(steps: int = 10, seed: int = 0) -> list[np.ndarray]:
    """Random inputs of :func:`lstm`: a sequence of ``steps`` and weights of scale 0.2."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((steps, 1, UNITS)).astype(np.float32),
            (rng.standard_normal((LAYERS, UNITS, 4 * UNITS)) * 0.2).astype(np.float32),
            (rng.standard_normal((LAYERS, UNITS, 4 * UNITS)) * 0.2).astype(np.float32),
            (rng.standard_normal((LAYERS, 4 * UNITS)) * 0.2).astype(np.float32)]
