"""Data-parallel training step (an MLP, value_and_grad + pmean of the gradients + SGD)
over 1, 2 and 4 local replicas, and the share of the step spent in communication.

Replicas go to cpu:0..N-1 when the host is split (AXLE_FLAGS=--cpu_device_count=4), else
share cpu:0 (then the rows show the cost of the SPMD machinery, not a speed-up). The
communication share is (step - the same step without the pmean) / step, per replica count."""
from __future__ import annotations

from typing import Any

import numpy as np
from common import Row, measure

import axle
from axle import nn

BATCH, FEATURES, HIDDEN, CLASSES = 512, 64, 256, 10


def _loss(p: dict[str, Any], x: Any, y: Any) -> Any:
    h = nn.relu(x @ p["W1"] + p["b1"])
    return nn.cross_entropy(h @ p["W2"] + p["b2"], y)


def _step(communicate: bool) -> Any:
    def step(p: dict[str, Any], x: Any, y: Any) -> Any:
        loss, g = axle.value_and_grad(_loss)(p, x, y)
        if communicate:
            g = axle.lax.pmean(g, "batch")
        return {k: p[k] - 0.1 * g[k] for k in p}, loss
    return step


def _devices(n: int) -> list[axle.Device]:
    cpus = [d for d in axle.devices() if d.backend == "cpu"] or [axle.default_device()]
    return [cpus[i % len(cpus)] for i in range(n)]


def run(quick: bool) -> list[Row]:
    rng = np.random.default_rng(0)
    p = {"W1": rng.standard_normal((FEATURES, HIDDEN)).astype(np.float32) * 0.1,
         "b1": np.zeros(HIDDEN, np.float32),
         "W2": rng.standard_normal((HIDDEN, CLASSES)).astype(np.float32) * 0.1,
         "b2": np.zeros(CLASSES, np.float32)}
    x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    fns: dict[str, Any] = {}
    local: dict[str, Any] = {}
    for n in (1, 2, 4):
        args = ({k: np.stack([v] * n) for k, v in p.items()}, x.reshape(n, BATCH // n, FEATURES),
                y.reshape(n, BATCH // n))
        name = f"{n} device{'s' if n > 1 else ''}"
        for table, comm in ((fns, True), (local, False)):
            f = axle.pmap(_step(comm), axis_name="batch", devices=_devices(n))
            table[name] = lambda f=f, args=args: f(*args)
    times = measure(fns, repeats=3 if quick else 10, sync=lambda r: np.asarray(r[1]))
    no_comm = measure(local, repeats=3 if quick else 10, sync=lambda r: np.asarray(r[1]))
    share = {k: f"{max(0.0, 1 - no_comm[k] / times[k]):.0%}" for k in times}
    where = ", ".join(d.name for d in _devices(4))
    return [Row("spmd", f"data-parallel MLP step, batch {BATCH} ({FEATURES}-{HIDDEN}-{CLASSES}) on {where}", times,
                extra={"communication share": share}, baseline="1 device")]
