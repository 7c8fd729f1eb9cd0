"""One fresh process's first call of a program (trace + optimize + compile + run), then
its warm call and its trace alone: run by ``bench_core.py`` in subprocesses, once with an
empty persistent compile cache (``--compile_cache=DIR`` of a new directory, or ``off``)
and once with the cache the first run filled. Prints one JSON line: wall-clock times
(``*_ms``) and the process's CPU times (``*_cpu_ms``: ``time.process_time``, every thread
of the process; the warm call and the trace the best of 5), which a loaded machine
disturbs less. Modules the workload uses (``axle.nn``) are imported before the first
call: it is compared with warm calls, both after the imports.

The process that fills the cache passes ``--then N``: after the measurements it runs the
program N more times, untimed, as a program run for a while does, so that the cache also
holds what a backend measures over a program's first launches (the cpu's thread-split
decisions take 10) and the processes after it find that too.

``python benchmarks/first_call.py WORKLOAD DEVICE [--then N]`` (WORKLOAD: mnist_mlp or
softmax)."""
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


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, process CPU) milliseconds of one call of ``fn``, its result waited for."""
    t0, c0 = time.perf_counter(), time.process_time()
    _sync(fn())
    return (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3


def _median_and_best(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    """The median wall-clock and the best CPU milliseconds of ``n`` calls."""
    walls, cpus = zip(*(_timed(fn) for _ in range(n)))
    return sorted(walls)[n // 2], min(cpus)


def main(workload: str, device: str, then: int = 0) -> dict[str, Any]:
    import axle
    import axle.nn  # noqa: F401 - imported before the first call, which is compared with warm calls
    import axle.numpy as anp

    dev = axle.device(device)
    fn, args = WORKLOADS[workload](axle, anp)
    jf = axle.jit(fn, device=dev)
    dev_args = [axle.device_put(a, dev) if isinstance(a, np.ndarray) else [axle.device_put(p, dev) for p in a]
                for a in args]
    first, first_cpu = _timed(lambda: jf(*dev_args))
    warm, warm_cpu = _median_and_best(lambda: jf(*dev_args), 5)
    trace, trace_cpu = _median_and_best(lambda: jf.lower(*dev_args), 5)
    for _ in range(then):
        _sync(jf(*dev_args))
    s = axle.stats()
    return {"first_ms": first, "warm_ms": warm, "trace_ms": trace, "first_cpu_ms": first_cpu,
            "warm_cpu_ms": warm_cpu, "trace_cpu_ms": trace_cpu,
            **{k: s[k] for k in ("disk_cache_hits", "disk_cache_misses", "disk_cache_writes")}}


if __name__ == "__main__":
    argv = sys.argv[1:]
    then = int(argv[argv.index("--then") + 1]) if "--then" in argv else 0
    print(json.dumps(main(argv[0], argv[1], then)))
