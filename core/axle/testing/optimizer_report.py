"""Before/after table of the optimizer on the standard programs.

    python -m axle.testing.optimizer_report              # core default policy
    python -m axle.testing.optimizer_report --device cpu:0   # under that device's backend policy

For the seed example, a decomposed softmax, layer norm and a 2-layer MLP (forward, and a
hand-written backward), it prints kernels per call and temporary / peak bytes (from
buffer assignment) as traced and as optimized. The numbers are deterministic (no
timing), so docs/optimizer.md records them and a test checks they are current."""
from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import numpy as anp
from ..compiler import optimize_for
from ..frontend.jit import trace_function
from ..ir.module import Module
from ..passes import optimize as core_optimize
from ..passes.buffers import assign
from ..placement import resolve


def _programs() -> list[tuple[str, Callable[..., Any], list[np.ndarray]]]:
    def seed(x: Any, y: Any, z: Any) -> Any:
        return anp.sum(x + y * z)

    def softmax(x: Any) -> Any:
        e = anp.exp(x - anp.max(x, axis=-1, keepdims=True))
        return e / anp.sum(e, axis=-1, keepdims=True)

    def layer_norm(x: Any, gamma: Any, beta: Any) -> Any:
        mean = anp.mean(x, axis=-1, keepdims=True)
        var = anp.mean((x - mean) ** 2, axis=-1, keepdims=True)
        return (x - mean) / anp.sqrt(var + 1e-5) * gamma + beta

    def mlp_forward(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
        h = anp.maximum(x @ w1 + b1, 0.0)
        return h @ w2 + b2

    def mlp_backward(x: Any, w1: Any, b1: Any, w2: Any, g: Any) -> Any:
        # d(logits) = g given; gradients of both layers, written out by hand
        z1 = x @ w1 + b1
        h = anp.maximum(z1, 0.0)
        dw2 = anp.transpose(h) @ g
        db2 = anp.sum(g, axis=0)
        dh = g @ anp.transpose(w2)
        dz1 = anp.where(z1 > 0, dh, 0.0)
        dw1 = anp.transpose(x) @ dz1
        db1 = anp.sum(dz1, axis=0)
        return dw1, db1, dw2, db2

    f32 = np.float32
    z = lambda *s: np.zeros(s, f32)  # noqa: E731 - only shapes matter
    return [
        ("seed sum(x + y*z) [1024]", seed, [z(1024)] * 3),
        ("softmax [256,1000]", softmax, [z(256, 1000)]),
        ("layer norm [256,1024]", layer_norm, [z(256, 1024), z(1024), z(1024)]),
        ("MLP forward 784-256-10, batch 64", mlp_forward, [z(64, 784), z(784, 256), z(256), z(256, 10), z(10)]),
        ("MLP backward 784-256-10, batch 64", mlp_backward, [z(64, 784), z(784, 256), z(256), z(256, 10), z(64, 10)]),
    ]


@dataclass
class Row:
    program: str
    kernels_before: int
    kernels_after: int
    temp_before: int
    temp_after: int
    peak_before: int
    peak_after: int


def measure(optimize: Callable[[Module], Module] | None = None) -> list[Row]:
    """The table's rows; ``optimize`` defaults to the core pipeline without a backend."""
    opt = optimize or core_optimize
    rows = []
    for name, fn, args in _programs():
        module, _ = trace_function(fn, args, {}, (), fn.__name__)
        before, after = assign(module), assign(opt(module))
        rows.append(Row(name, before.kernels, after.kernels, before.temp_bytes, after.temp_bytes,
                        before.peak_bytes, after.peak_bytes))
    return rows


def table(rows: list[Row]) -> str:
    """Markdown table of the rows."""
    head = ("| program | kernels before | kernels after | temp bytes before | temp bytes after "
            "| peak bytes before | peak bytes after |\n|---|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        lines.append(f"| {r.program} | {r.kernels_before} | {r.kernels_after} | {r.temp_before:,} | {r.temp_after:,} "
                     f"| {r.peak_before:,} | {r.peak_after:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m axle.testing.optimizer_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", help="optimize under this device's backend (passes and fusion policy)")
    args = ap.parse_args(argv)
    opt = None
    if args.device:
        device = resolve(args.device)
        opt = functools.partial(optimize_for, device=device)
    print(table(measure(opt)))


if __name__ == "__main__":
    main()
