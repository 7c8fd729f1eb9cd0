"""axle's front door: the devices, and the seed example ``sum(x + y*z)`` on each of them,
compiled (fused) versus op by op."""
from __future__ import annotations

import time

import numpy as np

import axle
import axle.numpy as anp
from axle.cli import cmd_devices

N = 1 << 20


def model_fn(x, y, z):
    return anp.sum(x + y * z)


def best_ms(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        np.asarray(out)  # wait for the value
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def kernels(report: dict) -> str:
    return str(report.get("kernels", "?"))


def main() -> None:
    print("== axle devices ==")
    cmd_devices(None)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(N).astype(np.float32) for _ in range(3))
    want = float(np.sum(x.astype(np.float64) + y.astype(np.float64) * z))
    print(f"\n== seed example: sum(x + y*z), N = {N} float32 ==")
    print(axle.jit(model_fn).lower(x, y, z).as_text())
    print(f"{'device':<16}{'result':>14}{'kernels jit':>13}{'ms jit':>9}{'kernels eager':>15}{'ms eager':>10}")
    for dev in axle.devices():
        f = axle.jit(model_fn, device=dev)
        xs, ys, zs = axle.device_put((x, y, z), dev)
        out = float(f(xs, ys, zs))
        jit_ms = best_ms(lambda: f(xs, ys, zs))
        report = f.lower(xs, ys, zs).compile().report()
        with dev:
            axle.reset_stats()
            model_fn(xs, ys, zs)
            eager_kernels = axle.stats()["kernel_launches"]
            eager_ms = best_ms(lambda: model_fn(xs, ys, zs))
        ok = "ok" if abs(out - want) <= 1e-3 * max(1.0, abs(want)) else "WRONG"
        print(f"{dev.name:<16}{out:>14.3f}{kernels(report):>13}{jit_ms:>9.2f}{eager_kernels:>15}{eager_ms:>10.2f}  {ok}")
    print(f"\nNumPy reference: {want:.3f}")


if __name__ == "__main__":
    main()
