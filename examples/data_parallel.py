"""Data-parallel training of an MLP on the digits over several local devices, and a
tensor-parallel MLP layer with shard_map.

    AXLE_FLAGS=--cpu_device_count=4 python examples/data_parallel.py            # 4 cpu devices
    AXLE_FLAGS=--cpu_device_count=4 python examples/data_parallel.py --check    # vs one device
    AXLE_FLAGS=--cpu_device_count=2 mpirun -n 2 python examples/data_parallel.py --mpi --devices 2 --check
                                    # 2 processes x 2 devices: 4 replicas over MPI

Data parallel (``axle.pmap``): the parameters are replicated, each device takes a quarter of
every batch, and the gradients are averaged with ``axle.lax.pmean`` before the update, so
every replica applies the same update and the losses equal one device's on the whole
batch (to float rounding). Tensor parallel (``axle.shard_map``): a layer's weight is split
by rows over the devices, each computes a partial product and ``axle.lax.psum`` adds them.
Without --cpu_device_count the replicas share cpu:0 (same results, no speed-up).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

import axle
from axle import nn
from axle.sharding import Mesh
from axle.sharding import PartitionSpec as P

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnist_softmax import load_digits

Params = dict[str, Any]


def init_params(features: int, hidden: int = 32, classes: int = 10, seed: int = 0) -> Params:
    rng = np.random.default_rng(seed)
    return {"W1": (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32),
            "b1": np.zeros(hidden, np.float32),
            "W2": (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32),
            "b2": np.zeros(classes, np.float32)}


def loss_fn(params: Params, x: Any, y: Any) -> Any:
    h = nn.relu(x @ params["W1"] + params["b1"])
    return nn.cross_entropy(h @ params["W2"] + params["b2"], y)


def sgd(params: Params, grads: Params, lr: float) -> Params:
    return {k: params[k] - lr * grads[k] for k in params}


def single_step(params: Params, x: Any, y: Any) -> tuple[Params, Any]:
    loss, grads = axle.value_and_grad(loss_fn)(params, x, y)
    return sgd(params, grads, 0.5), loss


def parallel_step(params: Params, x: Any, y: Any) -> tuple[Params, Any]:
    """One replica's step on its shard of the batch: the gradients and the loss are
    averaged over the replicas (equal shards: the mean over the whole batch)."""
    loss, grads = axle.value_and_grad(loss_fn)(params, x, y)
    grads = axle.lax.pmean(grads, "batch")
    return sgd(params, grads, 0.5), axle.lax.pmean(loss, "batch")


def local_devices(n: int) -> list[axle.Device]:
    """n cpu devices: cpu:0..n-1 under --cpu_device_count=n, else cpu:0 n times."""
    cpus = [d for d in axle.devices() if d.backend == "cpu"] or [axle.default_device()]
    return [cpus[i % len(cpus)] for i in range(n)]


def batches(x: np.ndarray, y: np.ndarray, batch: int, steps: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        idx = rng.choice(len(x), batch, replace=False)
        out.append((x[idx], y[idx]))
    return out


def train(n_devices: int, steps: int = 20, batch: int = 128) -> tuple[list[float], float]:
    """The losses of ``steps`` steps over ``n_devices`` replicas (1: plain jit), and the
    time per step after the first (which compiles). In a multi-process run
    (axle.distributed), ``n_devices`` per process, each process taking its share of the batch."""
    data = load_digits()
    procs, rank = axle.distributed.process_count(), axle.distributed.process_index()
    params = init_params(data.features)
    work = batches(data.x_train, data.y_train, batch, steps)
    losses, t0 = [], 0.0
    if n_devices == 1:
        step = axle.jit(single_step)
        for i, (x, y) in enumerate(work):
            params, loss = step(params, x, y)
            losses.append(float(loss))
            t0 = t0 or (time.perf_counter() if i == 0 else 0.0)
    else:
        step = axle.pmap(parallel_step, axis_name="batch", devices=local_devices(n_devices))
        replicated = {k: np.stack([v] * n_devices) for k, v in params.items()}
        for i, (x, y) in enumerate(work):
            part = batch // procs  # this process's rows of the batch
            x, y = x[rank * part:(rank + 1) * part], y[rank * part:(rank + 1) * part]
            shard = (n_devices, part // n_devices)
            replicated, loss = step(replicated, x.reshape(shard + x.shape[1:]), y.reshape(shard))
            losses.append(float(np.asarray(loss)[0]))
            t0 = t0 or (time.perf_counter() if i == 0 else 0.0)
    per_step = (time.perf_counter() - t0) / max(steps - 1, 1)
    return losses, per_step


def tensor_parallel_layer(x: np.ndarray, w: np.ndarray, b: np.ndarray, n_devices: int) -> np.ndarray:
    """relu(x @ w + b) with w split by rows (the contracted dimension) over the devices:
    each device multiplies its columns of x by its rows of w, psum adds the partial products."""
    mesh = Mesh(np.array(local_devices(n_devices)), ("model",))

    def layer(xs: Any, ws: Any, bias: Any) -> Any:
        return nn.relu(axle.lax.psum(xs @ ws, "model") + bias)

    f = axle.shard_map(layer, mesh, in_specs=(P(None, "model"), P("model", None), P()), out_specs=P())
    return np.asarray(f(x, w, b))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--check", action="store_true", help="compare the losses with one device's")
    ap.add_argument("--mpi", action="store_true", help="join the processes of an mpirun launch (axle.distributed)")
    args = ap.parse_args(argv)
    if args.mpi:
        axle.distributed.initialize()
    losses, per_step = train(args.devices, args.steps)
    procs = axle.distributed.process_count()
    where = ", ".join(d.name for d in local_devices(args.devices))
    print(f"process {axle.distributed.process_index()} of {procs}: {args.devices} replicas on {where}")
    if procs > 1:  # the tensor-parallel layer is a one-process shard_map
        one, _ = train(1, args.steps) if args.check else (losses, 0.0)
        diff = float(np.max(np.abs(np.array(losses) - np.array(one))))
        print("losses: " + " ".join(f"{v:.5f}" for v in losses))
        print(f"max loss difference vs one device: {diff:.2e}")
        return 0 if diff <= 1e-4 else 1
    print("losses: " + " ".join(f"{v:.5f}" for v in losses))
    print(f"time per step: {per_step * 1e3:.2f} ms")
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 12), (12,)))
    err = float(np.abs(tensor_parallel_layer(x, w, b, args.devices) - np.maximum(x @ w + b, 0)).max())
    print(f"tensor-parallel layer: max error vs one device {err:.2e}")
    if args.check:
        one, _ = train(1, args.steps)
        diff = float(np.max(np.abs(np.array(losses) - np.array(one))))
        print(f"max loss difference vs one device: {diff:.2e}")
        return 0 if diff <= 1e-4 and err <= 1e-4 else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
