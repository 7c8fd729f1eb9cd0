"""axle's front door: the devices, the seed example ``sum(x + y*z)`` on each of them,
compiled (fused) versus op by op, fused kernels, and real programs: the stacked LSTM of
examples/lstm.py (a loop in the IR), a convolution layer with its epilogue, and the small
CNN of examples/digits_cnn.py trained on the digits."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import axle
import axle.numpy as anp
from axle import nn
from axle.cli import cmd_devices

sys.path.insert(0, str(Path(__file__).parent))
import digits_cnn as cnn  # noqa: E402 - examples/digits_cnn.py, beside this file
import lstm  # noqa: E402 - examples/lstm.py, beside this file

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
    fused_kernels(rng)
    real_programs(rng)
    digits_cnn()


def softmax(x):
    e = anp.exp(x - anp.max(x, axis=1, keepdims=True))
    return e / anp.sum(e, axis=1, keepdims=True)


def fused_kernels(rng: np.random.Generator) -> None:
    """A row softmax (one fused kernel: max, exp, sum, divide) and a matmul (the backend's
    GEMM) on every compiling device, against NumPy."""
    x = rng.standard_normal((2048, 1024)).astype(np.float32)
    a, b = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    np_soft = best_ms(lambda: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True))
    np_mm = best_ms(lambda: a @ b)
    print(f"\n== fused kernels: softmax [2048, 1024] and matmul 512^3 float32 ==")
    print(f"{'device':<16}{'softmax kernels':>16}{'ms':>8}{'vs NumPy':>10}{'matmul GFLOP/s':>16}{'vs NumPy':>10}")
    print(f"{'numpy':<16}{'':>16}{np_soft:>8.2f}{'1.00x':>10}{2 * 512**3 / np_mm / 1e6:>16.0f}{'1.00x':>10}")
    for dev in axle.devices():
        if dev.backend in ("interpreter", "template"):
            continue  # NumPy underneath: nothing to compare
        f = axle.jit(softmax, device=dev)
        g = axle.jit(lambda p, q: p @ q, device=dev)
        xs, as_, bs = axle.device_put((x, a, b), dev)
        f(xs), g(as_, bs)
        soft_ms = best_ms(lambda: f(xs))
        mm_ms = best_ms(lambda: g(as_, bs))
        k = kernels(f.lower(xs).compile().report())
        print(f"{dev.name:<16}{k:>16}{soft_ms:>8.2f}{np_soft / soft_ms:>9.1f}x"
              f"{2 * 512**3 / mm_ms / 1e6:>16.0f}{np_mm / mm_ms:>9.1f}x")


def conv_layer(x, w, b):
    return anp.maximum(nn.conv(x, w, padding="SAME", layout="NHWC") + b, 0.0)


def placed(compiled) -> str:
    """Where a compiled function ran: its device, or the host fallback's."""
    summary = compiled.placement()
    return "host fallback" if summary is not None and summary.fallback else "native"


def real_programs(rng: np.random.Generator) -> None:
    """The stacked LSTM (3 x 60, 10 steps: one scan per layer, a while loop in the IR) and a
    3x3 convolution layer relu(conv(x, w) + b) (one kernel where the device claims
    convolution), on every device, against NumPy."""
    params, xs = lstm.init_params(rng), lstm.sample_inputs(rng)
    want = lstm.lstm_numpy(params, xs)
    np_ms = best_ms(lambda: lstm.lstm_numpy(params, xs), repeats=20)
    print(f"\n== real programs: stacked LSTM with scan ({lstm.LAYERS} x {lstm.UNITS}, {lstm.STEPS} steps), "
          f"relu(conv3x3 + b) NHWC [8,32,32,64] ==")
    print(f"{'device':<16}{'lstm loop':>14}{'max err':>10}{'ms':>8}{'vs NumPy':>10}{'conv kernels':>14}{'conv ms':>9}")
    x = rng.standard_normal((8, 32, 32, 64)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 64, 64)) * 0.05).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    for dev in axle.devices():
        f = lstm.compiled(dev)
        p_dev, x_dev = axle.device_put((params, xs), dev)
        err = float(np.max(np.abs(np.asarray(f(p_dev, x_dev)) - want)))
        ms = best_ms(lambda: f(p_dev, x_dev), repeats=20)
        where = placed(f.lower(p_dev, x_dev).compile())
        g = axle.jit(conv_layer, device=dev)
        args = axle.device_put((x, w, b), dev)
        g(*args)
        conv_ms = best_ms(lambda: g(*args), repeats=3)
        k = kernels(g.lower(*args).compile().report())
        ok = "ok" if err <= 1e-4 else "WRONG"
        print(f"{dev.name:<16}{where:>14}{err:>10.1e}{ms:>8.3f}{np_ms / ms:>9.1f}x{k:>14}{conv_ms:>9.2f}  {ok}")
    print(f"{'numpy':<16}{'':>14}{'':>10}{np_ms:>8.3f}{'1.00x':>10}")


def digits_cnn() -> None:
    """examples/digits_cnn.py, trained once on the first compiling device (every device
    reaches the same accuracy: tests/examples/test_digits_cnn.py)."""
    dev = next((d for d in axle.devices() if d.backend not in ("interpreter", "template")), axle.default_device())
    print(f"\n== a small CNN on scikit-learn's digits (examples/digits_cnn.py), on {dev.name} ==")
    try:
        data = cnn.load_digits()
    except cnn.DataError as e:
        print(f"not run: {e}")
        return
    res = cnn.train(data, device=dev.name)
    print(f"{len(res.losses)} training steps in {res.seconds:.1f} s (the first compiles), "
          f"loss {res.losses[0]:.3f} -> {res.losses[-1]:.3f}, test accuracy {res.accuracy:.4f}")


if __name__ == "__main__":
    main()
