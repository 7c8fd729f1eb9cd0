"""Where ResNet-18's training step (examples/resnet.py, the CIFAR variant: SGD with
momentum, batch norm in training mode) spends its time on axle-cpu: every kernel's CPU time,
grouped (forward convolutions, input gradients, weight gradients, batch norm and other
reductions, transposes, the optimizer's update and other parameter-shaped arithmetic, other
elementwise kernels), and the largest kernels, named as the timeline and ``axle explain``
name them.

Not a ``bench_*`` module (``make bench`` does not run it): a tool for working on the step.
The kernels run one by one as under a timeline (``axle.profiler.trace``), whose clock is
replaced by the calling thread's CPU clock, on one thread by default: a machine loaded by
other jobs then slows nothing this measures (wall time would count their turns)::

    python benchmarks/train_step_kernels.py [--batch 32] [--size 32] [--repeats 3] [--top 25]

A convolution is forward when it comes before the loss (the first as many as the model has
kernels, in the schedule's order: every gradient convolution depends on the loss); a
weight gradient when its kernel operand (the output gradient) has more window positions
than its result (the kernel's 3x3 or 1x1); else an input gradient.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

os.environ.setdefault("AXLE_CPU_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# after the thread settings, which the libraries read when they load
import bench_models  # type: ignore[import-not-found]  # noqa: E402  - a script beside this one
import numpy as np  # noqa: E402

import axle  # noqa: E402
from axle import profiler  # noqa: E402
from axle.ir import Node, Op  # noqa: E402
from axle.ir.types import TupleType  # noqa: E402
from axle.tree_util import tree_leaves  # noqa: E402

#: ops of the optimizer's update (a parameter-shaped elementwise kernel of these alone)
UPDATE_OPS = {Op.ADD, Op.SUB, Op.MUL, Op.BROADCAST_IN_DIM}


def _ops(n: Node) -> list[Node]:
    return list(n.attr["computation"].nodes) if n.op is Op.FUSION else [n]


def _conv_group(conv: Node, forward: bool) -> str:
    if forward:
        return "conv forward"
    a = conv.attr
    window = np.prod([conv.operands[1].shape[d] for d in a["kernel_spatial_dimensions"]])
    result = np.prod([conv.shape[d] for d in a["output_spatial_dimensions"]])
    return "conv weight gradient" if window > result else "conv input gradient"


def _group(n: Node, forward: bool, param_shapes: set[tuple[int, ...]]) -> str:
    inner = [m for m in _ops(n) if not m.traits.structural and m.op is not Op.CONSTANT]
    ops = {m.op for m in inner}
    conv = next((m for m in inner if m.op is Op.CONVOLUTION), None)
    if conv is not None:
        return _conv_group(conv, forward)
    if Op.DOT_GENERAL in ops:
        return "dot (classifier)"
    if any(m.traits.reduction for m in inner):
        return "batch norm, reductions" + (" (with a transpose)" if Op.TRANSPOSE in ops else "")
    if ops and all(m.traits.movement for m in inner):
        return "transposes, weight flips"
    outs = [t.shape for t in (n.type.elements if isinstance(n.type, TupleType) else [n.type])]
    if ops <= UPDATE_OPS and all(s in param_shapes for s in outs):
        return "optimizer update, parameter-shaped"
    return "elementwise" + (" (with a transpose)" if Op.TRANSPOSE in ops else "")


def _groups(module: axle.ir.Module, n_forward: int, param_shapes: set[tuple[int, ...]]) -> dict[str, str]:
    """Timeline name -> group, for every node of the compiled module's entry."""
    names = profiler.kernel_names(module)
    convs = [n.uid for n in module.entry.nodes if any(m.op is Op.CONVOLUTION for m in _ops(n))]
    forward = set(convs[:n_forward])
    return {names[n.uid]: _group(n, n.uid in forward, param_shapes) for n in module.entry.nodes}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="traced steps; each kernel's best is kept")
    ap.add_argument("--top", type=int, default=25, help="largest kernels listed")
    args = ap.parse_args(argv)
    R = bench_models._example()
    cfg = R.CIFAR
    params, state = R.init(cfg, seed=0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, cfg.in_channels, args.size, args.size)).astype(np.float32)
    labels = rng.integers(0, cfg.num_classes, args.batch).astype(np.int32)
    dev = axle.device("cpu:0")
    call = (*axle.device_put((params, state, R.init_velocity(params)), dev), x, labels)
    compiled = R.make_train_step(cfg, device=dev, **bench_models.HYPER).lower(*call).compile()
    weights = [p for p in tree_leaves(params) if p.ndim == 4]
    groups = _groups(compiled.module, len(weights), {p.shape for p in tree_leaves(params)})
    for _ in range(2):  # the split decisions and the caches settle
        compiled(*call)
    profiler.now_us = lambda: time.thread_time_ns() / 1e3  # the kernels' CPU time, not the wall's
    best: dict[str, float] = {}
    for _ in range(args.repeats):
        with profiler.trace() as events:
            compiled(*call)
        for e in profiler.kernels(events):
            best[e["name"]] = min(best.get(e["name"], float("inf")), e["dur"] / 1e3)
    by_group: dict[str, list[float]] = defaultdict(list)
    for name, ms in best.items():
        by_group[groups.get(name, "other")].append(ms)
    total = sum(best.values())
    print(f"ResNet-18 training step {args.size}x{args.size} batch {args.batch} on cpu:0, "
          f"{os.environ['AXLE_CPU_THREADS']} thread(s): {len(best)} kernels, {total:.1f} ms CPU")
    print(f"{'group':<40}{'kernels':>8}{'ms':>10}{'share':>8}")
    for g, ms in sorted(by_group.items(), key=lambda kv: -sum(kv[1])):
        print(f"{g:<40}{len(ms):>8}{sum(ms):>10.2f}{sum(ms) / total:>8.1%}")
    print(f"\n{'ms':>8}  {'group':<36}kernel")
    for name, ms in sorted(best.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{ms:>8.2f}  {groups.get(name, 'other'):<36}{name[:90]}")


if __name__ == "__main__":
    main()
