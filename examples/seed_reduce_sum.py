"""The seed example ``reduce_sum(x + y*z)`` in axle's four execution modes.

    eager       op by op: one kernel per primitive (multiply, add, reduce)
    jit         axle.jit(fn) / axle.compile(fn, inputs): traced, optimized, compiled once
    jit_scope   with axle.jit_scope(): eager code recorded and run as one cluster
    auto        axle.config.update(jit_level="auto"): all eager code clustered lazily

For each mode it prints the result, the kernels launched per call (from ``axle.stats()``)
and the best wall time of a few calls.

    python examples/seed_reduce_sum.py [--device NAME] [--n 1048576] [--repeats 5]
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import axle
import axle.numpy as anp


def model_fn(x: Any, y: Any, z: Any) -> Any:
    return anp.sum(x + y * z)


def run_mode(mode: str, x: Any, y: Any, z: Any) -> float:
    """One call of the seed computation in ``mode``; returns the result as a float."""
    if mode == "eager":
        return float(model_fn(x, y, z))
    if mode == "jit":
        return float(axle.compile(model_fn, [x, y, z]))
    if mode == "jit_scope":
        with axle.jit_scope():
            out = model_fn(x, y, z)
        return float(out)
    if mode == "auto":
        previous = axle.config.jit_level
        axle.config.update(jit_level="auto")
        try:
            return float(model_fn(x, y, z))  # float() materializes: the cluster runs here
        finally:
            axle.config.update(jit_level=previous)
    raise ValueError(mode)


MODES = ("eager", "jit", "jit_scope", "auto")


def measure(mode: str, x: Any, y: Any, z: Any, repeats: int) -> tuple[float, int, float]:
    """(result, kernels launched by one warm call, best seconds per call)."""
    run_mode(mode, x, y, z)  # warm-up: compile and cache
    axle.reset_stats()
    result = run_mode(mode, x, y, z)
    kernels = axle.stats()["kernel_launches"]
    best = min(_timed(lambda: run_mode(mode, x, y, z)) for _ in range(repeats))
    return result, kernels, best


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, tuple[float, int, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="device name, e.g. cpu:0 (default: the default device)")
    ap.add_argument("--n", type=int, default=1 << 20, help="vector length")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    dev = axle.device(args.device) if args.device else axle.default_device()
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(args.n).astype(np.float32) for _ in range(3)]
    want = float(np.sum(host[0].astype(np.float64) + host[1].astype(np.float64) * host[2]))
    results = {}
    with dev:
        x, y, z = axle.device_put(tuple(host), dev)
        print(f"reduce_sum(x + y*z), n = {args.n} float32, device {dev.name}")
        print(f"{'mode':<11}{'result':>16}{'kernels':>9}{'ms/call':>10}")
        for mode in MODES:
            result, kernels, best = measure(mode, x, y, z, args.repeats)
            results[mode] = (result, kernels, best)
            print(f"{mode:<11}{result:>16.4f}{kernels:>9}{best * 1e3:>10.3f}")
    print(f"NumPy (float64) reference: {want:.4f}")
    return results


if __name__ == "__main__":
    main()
