"""examples/dp_sgd.py: the jitted private step equals a per-example NumPy loop (clipping,
noise, mean), training lowers the loss, and the kernels per step do not depend on the batch."""
from __future__ import annotations

import numpy as np
from example_loader import load_example

import axle

dp = load_example("dp_sgd")


def _numpy_private_grad(params: list[dict], xs: np.ndarray, ys: np.ndarray, noise: list[dict], clip: float,
                        sigma: float) -> list[dict]:
    """Per-example gradients by hand (a tanh MLP with softmax cross-entropy), one at a time."""
    total = [{k: np.zeros_like(v, np.float64) for k, v in layer.items()} for layer in params]
    for x, y in zip(xs.astype(np.float64), ys.astype(np.float64)):
        acts, h = [x], x
        for layer in params[:-1]:
            h = np.tanh(h @ layer["w"] + layer["b"])
            acts.append(h)
        logits = h @ params[-1]["w"] + params[-1]["b"]
        p = np.exp(logits - logits.max())
        delta = p / p.sum() - y
        grads = []
        for i in range(len(params) - 1, -1, -1):
            grads.append({"w": np.outer(acts[i], delta), "b": delta})
            if i:
                delta = (delta @ params[i]["w"].T) * (1 - acts[i] ** 2)
        grads = grads[::-1]
        norm = np.sqrt(sum((g ** 2).sum() for layer in grads for g in layer.values()))
        scale = 1 / max(1.0, norm / clip)
        for t, g in zip(total, grads):
            for k in t:
                t[k] += scale * g[k]
    return [{k: (t[k] + sigma * clip * z[k]) / len(xs) for k in t} for t, z in zip(total, noise)]


def test_private_gradient_matches_a_per_example_loop() -> None:
    rng = np.random.default_rng(3)
    params = dp.init_params(rng)
    xs, ys = dp.synthetic_data(rng, 16)
    noise = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in layer.items()} for layer in params]
    got = axle.jit(dp.private_grad, static_argnums=(4, 5), device="interpreter:0")(params, xs, ys, noise, 0.3, 0.5)
    want = _numpy_private_grad(params, xs, ys, noise, 0.3, 0.5)
    for g, w in zip(got, want):
        for k in w:
            np.testing.assert_allclose(np.asarray(g[k]), w[k], rtol=2e-4, atol=2e-6)


def test_training_lowers_the_loss_with_kernels_independent_of_the_batch() -> None:
    _, losses, k8 = dp.train(steps=40, batch=8, device="interpreter:0")
    assert losses[-1] < 0.8 * losses[0], losses
    _, _, k64 = dp.train(steps=1, batch=64, device="interpreter:0")
    assert k8 == k64
