"""From a module to a list of steps: which kernels to generate for each launch of the
shared kernel plan (axle.lowering.plan).

A fusion or an unfused op is one kernel (two for a reduction that needs a second pass), a
reshape outside a fusion is a free re-typing of its operand's buffer, a custom-call is a
host step."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from axle.ir.module import Computation, Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.lowering.plan import kernel_plan
from axle.lowering.schedule import Schedule, outputs_of, schedule

from .dots import dot_kernel, dot_kernel_cpu
from .kernels import DeviceInfo, Kernel, check_size, group_reduce_kernel, map_kernel, second_pass

Slot = int  # a buffer slot of the shared kernel plan


@dataclass
class KernelStep:
    kernel: Kernel
    inputs: list[Any]  # per kernel input: a Slot, a scratch index, or a host array (const)
    outputs: list[Any]  # per kernel output: a Slot or a scratch index
    scratch_types: dict[int, TensorType] = field(default_factory=dict)
    #: timeline name mapping back to the module (``fusion.3 [add, multiply, reduce]``);
    #: kernels are shared by source hash, so the name belongs to the step
    label: str = ""


@dataclass
class AliasStep:
    src: Slot
    dst: Slot
    type: TensorType


@dataclass
class HostStep:
    node: Node
    inputs: list[Slot]
    dst: Slot


@dataclass
class Plan:
    steps: list[Any]
    params: list[Slot]
    constants: dict[Slot, np.ndarray]
    results: list[tuple[Slot, TensorType]]


def plan_unit(comp: Computation, kind: str,
              dev: DeviceInfo) -> list[tuple[Kernel, list[Any], list[Any], dict[int, TensorType]]]:
    """Kernels for one launch of the shared plan, by the form of its shared schedule
    (axle.lowering.schedule). Inputs/outputs name ("param", i) / ("out", k) / ("scratch", j)."""
    for n in comp.nodes:
        if n.op is not Op.PARAMETER:
            check_size(n)
    s = schedule(comp, kind)
    outs = [(n, k) for k, n in enumerate(s.outputs) if n.tensor_type.size > 0]
    if not outs:
        return []
    nodes = [n for n, _ in outs]
    if s.form == "dot":
        d = nodes[0]
        k = (None if dev.is_gpu else dot_kernel_cpu(d, dev)) or dot_kernel(d, dev)
        k.inputs = [("param", o.attr["index"]) for o in d.operands]
        k.outputs = [("out", outs[0][1], d.tensor_type)]
        return [(k, k.inputs, k.outputs, {})]
    if s.form == "reduce" and _use_group_reduce(math.prod(s.row_shape), s.reduced, dev):
        return _group(comp, s, outs, dev)
    # a row kernel: per-row values first, then the row's elements (outputs of one shape each)
    if s.form in ("row", "reduce") and s.trailing and all(n.shape in (s.row_shape, s.iter_shape) for n in nodes):
        k = map_kernel(comp, outs, s.row_shape, dev, pre=list(s.reduces))
        return [(k, k.inputs, k.outputs, {})]
    shapes = {n.shape for n in nodes}
    if len(shapes) == 1:
        k = map_kernel(comp, outs, nodes[0].shape, dev)
        return [(k, k.inputs, k.outputs, {})]
    out: list[tuple[Kernel, list[Any], list[Any], dict[int, TensorType]]] = []
    for n, j in outs:
        k = map_kernel(comp, [(n, j)], n.shape, dev)
        out.append((k, k.inputs, k.outputs, {}))
    return out


def _use_group_reduce(kept: int, red: int, dev: DeviceInfo) -> bool:
    if dev.is_gpu:
        return red >= 64 and (red >= 512 or kept < dev.compute_units * 32)
    return red >= 1024 and kept < dev.compute_units * 8


def _group(comp: Computation, s: Schedule, outs: list[tuple[Node, int]], dev: DeviceInfo) -> list:
    """Work-group tree reductions, split in two passes (the schedule's split) when the
    kept outputs alone leave the device's compute units idle."""
    if dev.is_gpu:
        L = 1 << min(8, int(math.log2(max(1, dev.max_work_group))))
        target = dev.compute_units * 8
    else:
        L = 4 if dev.max_work_group >= 4 else 1
        target = dev.compute_units * 4
    splits = s.split_parts(target, L * 2048)
    k1 = group_reduce_kernel(comp, outs, dev, splits, L)
    if splits == 1:
        return [(k1, k1.inputs, k1.outputs, {})]
    scratch = {j: t for (_, j, t) in k1.outputs}
    k1.outputs = [("scratch", j, t) for (_, j, t) in k1.outputs]
    comp2 = second_pass(outs, splits)
    k2 = map_kernel(comp2, [(n, j) for n, (_, j) in zip(outputs_of(comp2), outs)], outs[0][0].shape, dev,
                    pre=[n for n in comp2.nodes if n.op is Op.REDUCE])
    k2.inputs = [("scratch", i) for i in range(len(outs))]
    return [(k1, k1.inputs, k1.outputs, scratch), (k2, k2.inputs, k2.outputs, {})]


def plan_module(module: Module, dev: DeviceInfo) -> Plan:
    """The steps of ``module``'s shared kernel plan (:mod:`axle.lowering.plan`)."""
    kp = kernel_plan(module, assign_buffers=False)
    steps: list[Any] = []
    for launch in kp.launches:
        if launch.is_bitcast:
            steps.append(AliasStep(launch.inputs[0], launch.outputs[0], launch.output_types[0]))
        elif launch.kind == "custom-call":
            steps.append(HostStep(launch.node, list(launch.inputs), launch.outputs[0]))
        else:
            for kernel, kin, kout, scratch in plan_unit(launch.computation, launch.kind, dev):
                inputs = [launch.inputs[v] if kind == "param" else (("const", v) if kind == "const" else ("scratch", v))
                          for kind, v in ((x[0], x[1]) for x in kin)]
                outputs = [launch.outputs[j] if kind == "out" else ("scratch", j) for kind, j, _ in kout]
                steps.append(KernelStep(kernel, inputs, outputs, scratch, launch.label))
    return Plan(steps, list(range(kp.n_params)), kp.constants, list(zip(kp.results, kp.result_types)))
