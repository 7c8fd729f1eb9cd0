"""A small convolutional network trained on scikit-learn's 8x8 digits with axle.

    x [N, 1, 8, 8] -> conv 3x3 (16) -> relu -> max pool 2 -> conv 3x3 (32) -> relu
                   -> max pool 2 -> dense (128 -> 10)

Adam (learning rate 0.01) on the softmax cross-entropy, batches of 64, 8 epochs; the whole
step (forward, gradient, update) is one ``axle.jit`` function. The same data split as
examples/mnist_softmax.py (1497 train / 300 test images): 98 to 99% test accuracy.

    python examples/digits_cnn.py                        # the default device
    python examples/digits_cnn.py --device opencl:0 --epochs 4
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import axle
import axle.numpy as anp
from axle import nn
from axle.optimizers import adam

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling examples
from mnist_softmax import DataError, Dataset, load_digits  # noqa: F401 - DataError: for callers

Params = dict[str, Any]


def init(seed: int = 0, c1: int = 16, c2: int = 32, classes: int = 10) -> Params:
    """He-initialized convolution kernels (OIHW), zero biases, a Glorot dense layer."""
    rng = np.random.default_rng(seed)

    def he(shape: tuple[int, ...]) -> np.ndarray:
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    flat = c2 * 2 * 2
    return {"w1": he((c1, 1, 3, 3)), "b1": np.zeros(c1, np.float32),
            "w2": he((c2, c1, 3, 3)), "b2": np.zeros(c2, np.float32),
            "w3": (rng.standard_normal((flat, classes)) * np.sqrt(2.0 / (flat + classes))).astype(np.float32),
            "b3": np.zeros(classes, np.float32)}


def logits_fn(params: Params, x: Any) -> Any:
    """x [N, 1, 8, 8] -> logits [N, 10]."""
    h = nn.max_pool(nn.relu(nn.conv(x, params["w1"], params["b1"], padding=1)), 2)
    h = nn.max_pool(nn.relu(nn.conv(h, params["w2"], params["b2"], padding=1)), 2)
    return anp.reshape(h, (h.shape[0], -1)) @ params["w3"] + params["b3"]


def loss_fn(params: Params, x: Any, labels: Any) -> Any:
    return nn.cross_entropy(logits_fn(params, x), labels)


def images(flat: np.ndarray) -> np.ndarray:
    """[N, 64] rows of the digits data -> [N, 1, 8, 8] NCHW images."""
    return flat.reshape(-1, 1, 8, 8)


@dataclass
class Result:
    accuracy: float
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train(data: Dataset, *, device: str | None = None, epochs: int = 8, batch_size: int = 64,
          learning_rate: float = 1e-2, seed: int = 0) -> Result:
    """Trains the CNN; returns the test accuracy, every step's loss and the training time."""
    dev = axle.device(device) if device else axle.default_device()
    opt = adam(learning_rate)

    def step(params: Params, state: Any, x: Any, labels: Any) -> tuple[Params, Any, Any]:
        loss, grads = axle.value_and_grad(loss_fn)(params, x, labels)
        params, state = opt.update(grads, state, params)
        return params, state, loss

    jstep = axle.jit(step, device=dev)
    predict = axle.jit(lambda params, x: anp.argmax(logits_fn(params, x), axis=1), device=dev)
    x_train, x_test = images(data.x_train), images(data.x_test)
    with dev:
        params = axle.device_put(init(seed), dev)
        state = opt.init(params)
        rng = np.random.default_rng(seed)
        n = len(x_train) - len(x_train) % batch_size  # whole batches only: one compiled shape
        losses: list[Any] = []
        t0 = time.perf_counter()
        for _ in range(epochs):
            order = rng.permutation(len(x_train))[:n].reshape(-1, batch_size)
            for idx in order:
                params, state, loss = jstep(params, state, x_train[idx], data.y_train[idx])
                losses.append(loss)
        values = [float(v) for v in losses]  # materialize at the end: no per-step sync
        seconds = time.perf_counter() - t0
        pred = np.asarray(predict(params, axle.device_put(x_test, dev)))
    return Result(float(np.mean(pred == data.y_test)), values, seconds)


def main(argv: list[str] | None = None) -> Result:
    ap = argparse.ArgumentParser(description="A small CNN on scikit-learn's 8x8 digits.")
    ap.add_argument("--device", default=None, help="device name, e.g. cpu:0, opencl:0, template:0")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-2)
    args = ap.parse_args(argv)
    data = load_digits()
    res = train(data, device=args.device, epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.lr)
    print(f"digits CNN: {len(data.x_train)} train / {len(data.x_test)} test, {args.epochs} epochs, "
          f"{len(res.losses)} steps in {res.seconds:.1f} s (first step compiles)")
    print(f"final loss {res.losses[-1]:.4f}")
    print(f"test accuracy: {res.accuracy:.4f}")
    return res


if __name__ == "__main__":
    main()
