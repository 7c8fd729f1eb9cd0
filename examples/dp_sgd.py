"""Differentially private SGD (Abadi et al. 2016), as in jax's ``differentially_private_sgd``
example: per-example gradients with ``vmap(grad(loss))``, each clipped to an L2 norm, summed,
noised and averaged, the whole step in one ``jit``.

    python examples/dp_sgd.py                       # default device
    python examples/dp_sgd.py --device cpu:0 --batch 64

The data is a synthetic two-class problem, so the example needs nothing to download. It
prints the loss every few steps and the kernels one step launches (the same for any batch
size: the per-example gradients are one batched computation, not a Python loop).
"""
from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import axle
import axle.numpy as anp
from axle import tree_util


def init_params(rng: np.random.Generator, sizes: tuple[int, ...] = (8, 16, 2)) -> list[dict[str, np.ndarray]]:
    return [{"w": rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m), "b": np.zeros(n, np.float32)}
            for m, n in zip(sizes[:-1], sizes[1:])]


def predict(params: list[dict[str, Any]], x: Any) -> Any:
    for layer in params[:-1]:
        x = anp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss(params: list[dict[str, Any]], x: Any, y: Any) -> Any:
    """Cross-entropy of one example (x: features, y: one-hot label)."""
    logits = predict(params, x)
    return -anp.sum(y * (logits - anp.log(anp.sum(anp.exp(logits)))))


def private_grad(params: list[dict[str, Any]], xs: Any, ys: Any, noise: list[dict[str, Any]],
                 clip: float, sigma: float) -> Any:
    """The mean of the per-example gradients clipped to L2 norm ``clip``, plus Gaussian
    noise of scale ``sigma * clip`` (``noise``: standard normal, shaped like params)."""
    grads = axle.vmap(axle.grad(loss), in_axes=(None, 0, 0))(params, xs, ys)
    leaves = tree_util.tree_leaves(grads)
    norms = anp.sqrt(sum(anp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))
    scale = 1.0 / anp.maximum(1.0, norms / clip)
    n = xs.shape[0]
    return tree_util.tree_map(
        lambda g, z: (anp.sum(g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), axis=0) + sigma * clip * z) / n,
        grads, noise)


def make_step(lr: float, clip: float, sigma: float, device: Any = None) -> Any:
    def step(params: Any, xs: Any, ys: Any, noise: Any) -> Any:
        g = private_grad(params, xs, ys, noise, clip, sigma)
        return tree_util.tree_map(lambda p, d: p - lr * d, params, g)

    return axle.jit(step, device=device)


def synthetic_data(rng: np.random.Generator, n: int, dim: int = 8) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    label = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    return x, np.eye(2, dtype=np.float32)[label]


def mean_loss(params: Any, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.asarray(axle.vmap(loss, in_axes=(None, 0, 0))(params, x, y))))


def train(steps: int = 60, batch: int = 32, lr: float = 0.5, clip: float = 1.0, sigma: float = 0.5,
          device: Any = None, seed: int = 0) -> tuple[Any, list[float], int]:
    """Returns (params, loss every 10 steps, kernels per step)."""
    rng = np.random.default_rng(seed)
    params = init_params(rng)
    x, y = synthetic_data(rng, 1024)
    step = make_step(lr, clip, sigma, device)
    losses = []
    for i in range(steps):
        idx = rng.choice(len(x), batch, replace=False)
        noise = tree_util.tree_map(lambda p: rng.standard_normal(p.shape).astype(np.float32), params)
        if i % 10 == 0:
            losses.append(mean_loss(params, x, y))
        params = step(params, x[idx], y[idx], noise)
    losses.append(mean_loss(params, x, y))
    kernels = step.lower(params, x[:batch], y[:batch], noise).compile().report()["kernels"]
    return params, losses, kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    _, losses, kernels = train(args.steps, args.batch, device=args.device)
    for i, value in enumerate(losses):
        print(f"step {min(10 * i, args.steps):4d}  loss {value:.4f}")
    print(f"kernels per step: {kernels} (batch {args.batch})")


if __name__ == "__main__":
    main()
