"""Functions to compile ahead of time with ``axle aot`` (see docs/aot.md):

    axle aot examples/aot/models.py:mlp --arg f32[100,784] --arg f32[784,128] --arg f32[128] \\
        --arg f32[128,10] --arg f32[10] -o build/mlp
    axle aot examples/aot/models.py:seed --arg f32[1048576] --arg f32[1048576] --arg f32[1048576] -o build/seed
"""
from __future__ import annotations

import axle.numpy as anp


def seed(x, y, z):  # noqa: ANN001, ANN201
    """The seed example: sum(x + y*z)."""
    return anp.sum(x + y * z)


def mlp(x, w1, b1, w2, b2):  # noqa: ANN001, ANN201
    """A 2-layer MLP forward pass: softmax(relu(x @ w1 + b1) @ w2 + b2) over the last axis."""
    h = anp.maximum(anp.matmul(x, w1) + b1, 0.0)
    logits = anp.matmul(h, w2) + b2
    e = anp.exp(logits - anp.max(logits, axis=1, keepdims=True))
    return e / anp.sum(e, axis=1, keepdims=True)
