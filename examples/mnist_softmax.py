"""The seed tutorial: softmax regression on MNIST, trained with gradient descent.

    logits = x @ W + b,  loss = cross-entropy(softmax(logits), labels)
    W, b  -= 0.5 * grad(loss)          batches of 100, 1000 steps

    python examples/mnist_softmax.py --data-dir ~/mnist        # real MNIST (784 -> 10)
    python examples/mnist_softmax.py                           # scikit-learn's 8x8 digits (64 -> 10)
    python examples/mnist_softmax.py --no-jit --device cpu:0   # op by op, on another device

``--data-dir`` holds the standard IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,
t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte), gzipped (.gz) or not. Without it the
example uses scikit-learn's bundled digits (``pip install 'axle[examples]'``).
Prints the test accuracy and training steps per second.
"""
from __future__ import annotations

import argparse
import gzip
import os
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import axle
import axle.numpy as anp
from axle import nn

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


class DataError(Exception):
    """Missing or malformed training data."""


def read_idx(path: str) -> np.ndarray:
    """An IDX file (the MNIST format): 2 zero bytes, a type code, the rank, big-endian
    uint32 dims, then the row-major data. Gzipped files are read transparently."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise DataError(f"{path}: not an IDX file (bad magic number)")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dt = np.dtype(_IDX_TYPES[data[2]])
    body = data[4 + 4 * ndim:]
    if len(body) != int(np.prod(dims)) * dt.itemsize:
        raise DataError(f"{path}: expected {int(np.prod(dims))} items of {dt} for dims {dims}, "
                        f"found {len(body)} bytes")
    return np.frombuffer(body, dtype=dt).reshape(dims)


def _find(data_dir: str, stem: str) -> str:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise DataError(f"{data_dir}: no {stem} (or {stem}.gz)")


@dataclass
class Dataset:
    name: str
    x_train: np.ndarray  # float32 [n, features] in [0, 1]
    y_train: np.ndarray  # int32 [n]
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def features(self) -> int:
        return self.x_train.shape[1]


def load_mnist(data_dir: str) -> Dataset:
    parts = {k: read_idx(_find(data_dir, v)) for k, v in _FILES.items()}

    def images(a: np.ndarray) -> np.ndarray:
        return (a.reshape(a.shape[0], -1).astype(np.float32) / 255.0).astype(np.float32)

    return Dataset("mnist", images(parts["train_images"]), parts["train_labels"].astype(np.int32),
                   images(parts["test_images"]), parts["test_labels"].astype(np.int32))


def load_digits() -> Dataset:
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError:
        raise DataError("no --data-dir given and scikit-learn is not installed: install it "
                        "(pip install 'axle[examples]') to train on its bundled 8x8 digits, or pass "
                        "--data-dir with the MNIST IDX files") from None
    d = sk_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    split = len(x) * 5 // 6
    return Dataset("digits", x[:split], y[:split], x[split:], y[split:])


def loss_fn(params: dict[str, Any], x: Any, y: Any) -> Any:
    logits = x @ params["W"] + params["b"]
    return nn.cross_entropy(logits, y)


def train_step(params: dict[str, Any], x: Any, y: Any, lr: float) -> tuple[dict[str, Any], Any]:
    loss, grads = axle.value_and_grad(loss_fn)(params, x, y)
    new = {k: params[k] - lr * grads[k] for k in params}
    return new, loss


def accuracy(params: dict[str, Any], x: Any, y: np.ndarray) -> float:
    logits = x @ params["W"] + params["b"]
    pred = np.asarray(anp.argmax(logits, axis=1))
    return float(np.mean(pred == y))


@dataclass
class Result:
    accuracy: float
    losses: list[float] = field(default_factory=list)
    steps_per_second: float = 0.0


def train(data: Dataset, *, use_jit: bool = True, steps: int = 1000, batch_size: int = 100,
          lr: float = 0.5, device: str | None = None, seed: int = 0) -> Result:
    """Trains softmax regression; returns the test accuracy and the loss of every step."""
    dev = axle.device(device) if device else axle.default_device()
    step = axle.jit(train_step, static_argnums=3, device=dev) if use_jit else train_step
    classes = 10
    with dev:
        params = axle.device_put({"W": np.zeros((data.features, classes), np.float32),
                                  "b": np.zeros((classes,), np.float32)}, dev)
        rng = np.random.default_rng(seed)
        n = len(data.x_train)
        order = rng.permutation(n)
        at = 0
        losses: list[Any] = []
        t0 = time.perf_counter()
        for _ in range(steps):
            if at + batch_size > n:
                order, at = rng.permutation(n), 0
            idx = order[at:at + batch_size]
            at += batch_size
            params, loss = step(params, data.x_train[idx], data.y_train[idx], lr)
            losses.append(loss)
        values = [float(v) for v in losses]  # materialize at the end: no per-step sync
        elapsed = time.perf_counter() - t0
        acc = accuracy(params, axle.device_put(data.x_test, dev), data.y_test)
    return Result(acc, values, steps / elapsed if elapsed > 0 else float("inf"))


def main(argv: list[str] | None = None) -> Result:
    ap = argparse.ArgumentParser(description="Softmax regression on MNIST (the seed tutorial).")
    ap.add_argument("--jit", action=argparse.BooleanOptionalAction, default=True,
                    help="compile the training step with axle.jit (default) or run it op by op")
    ap.add_argument("--device", default=None, help="device name, e.g. cpu:0, opencl:0, interpreter:0")
    ap.add_argument("--data-dir", default=None, help="folder with the MNIST IDX files (gz or not)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.5)
    args = ap.parse_args(argv)
    try:
        data = load_mnist(args.data_dir) if args.data_dir else load_digits()
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"data: {data.name}, {len(data.x_train)} train / {len(data.x_test)} test, "
          f"{data.features} features; {'jit' if args.jit else 'no-jit (eager)'}")
    res = train(data, use_jit=args.jit, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                device=args.device)
    print(f"final loss {res.losses[-1]:.4f}")
    print(f"test accuracy: {res.accuracy:.4f}")
    print(f"steps/second: {res.steps_per_second:.1f}")
    return res


if __name__ == "__main__":
    main()
