"""One fresh process's first call of a program (trace + optimize + compile + run), then
its warm call and its trace alone: run by ``bench_core.py`` in subprocesses, once with an
empty persistent compile cache (``--compile_cache=DIR`` of a new directory, or ``off``)
and once with the cache the first run filled. Prints one JSON line.

``python benchmarks/first_call.py WORKLOAD DEVICE`` (WORKLOAD: mnist_mlp or softmax)."""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def mnist_mlp(axle: Any, anp: Any) -> tuple[Callable[..., Any], list[Any]]:
    """jax's MNIST-from-scratch training step: 784-1024-1024-10, tanh, log-softmax
    cross-entropy, SGD (float32, batch 128)."""
    sizes = [784, 1024, 1024, 10]
    rng = np.random.default_rng(0)
    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        params += [(rng.standard_normal((m, n)) * 0.1).astype(np.float32), (rng.standard_normal(n) * 0.1).astype(np.float32)]
    x = rng.standard_normal((128, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]

    def loss(ps: list[Any], x: Any, y: Any) -> Any:
        h = x
        for w, b in zip(ps[0:-2:2], ps[1:-2:2]):
            h = anp.tanh(h @ w + b)
        logits = h @ ps[-2] + ps[-1]
        preds = logits - axle.nn.logsumexp(logits, axis=1, keepdims=True)
        return -anp.mean(anp.sum(preds * y, axis=1))

    grad = axle.grad(loss)

    def step(ps: list[Any], x: Any, y: Any) -> list[Any]:
        return [p - 0.001 * g for p, g in zip(ps, grad(ps, x, y))]

    return step, [params, x, y]


def softmax(axle: Any, anp: Any) -> tuple[Callable[..., Any], list[Any]]:
    """Row softmax over [4096, 1024] float32."""
    x = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)

    def f(x: Any) -> Any:
        e = anp.exp(x - anp.max(x, axis=1, keepdims=True))
        return e / anp.sum(e, axis=1, keepdims=True)

    return f, [x]


WORKLOADS = {"mnist_mlp": mnist_mlp, "softmax": softmax}


def _sync(r: Any) -> None:
    for leaf in r if isinstance(r, (list, tuple)) else [r]:
        np.asarray(leaf)


def _median_ms(fn: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        _sync(fn())
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[n // 2]


def main(workload: str, device: str) -> dict[str, Any]:
    import axle
    import axle.numpy as anp

    dev = axle.device(device)
    fn, args = WORKLOADS[workload](axle, anp)
    jf = axle.jit(fn, device=dev)
    dev_args = [axle.device_put(a, dev) if isinstance(a, np.ndarray) else [axle.device_put(p, dev) for p in a]
                for a in args]
    t0 = time.perf_counter()
    _sync(jf(*dev_args))
    first = (time.perf_counter() - t0) * 1e3
    warm = _median_ms(lambda: jf(*dev_args), 5)
    trace = _median_ms(lambda: jf.lower(*dev_args), 5)
    s = axle.stats()
    return {"first_ms": first, "warm_ms": warm, "trace_ms": trace,
            **{k: s[k] for k in ("disk_cache_hits", "disk_cache_misses", "disk_cache_writes")}}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
