"""From a module to a list of steps: which kernels to generate for each launch of the
shared kernel plan (axle.lowering.plan).

A fusion or an unfused op is one kernel (a reduction split by the plan is two launches), a
reshape outside a fusion is a free re-typing of its operand's buffer, a sort the shared
merge sort kernel (sort.py), a custom-call is a host step."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from axle.ir.module import Computation, Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.lowering.plan import kernel_plan
from axle.lowering.schedule import schedule

from .dots import dot_kernel, dot_kernel_cpu
from .kernels import DeviceInfo, Kernel, check_size, group_reduce_kernel, map_kernel
from .sort import sort_launch

Slot = int  # a buffer slot of the shared kernel plan


@dataclass
class KernelStep:
    kernel: Kernel
    inputs: list[Any]  # per kernel input: a Slot, or ("const", array) uploaded once
    outputs: list[Slot]
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


def plan_unit(comp: Computation, kind: str, dev: DeviceInfo) -> list[Kernel]:
    """Kernels for one launch of the shared plan, by the form of its shared schedule
    (axle.lowering.schedule). Their inputs and outputs name ("param", i) / ("const", a) /
    ("out", k)."""
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
        return [k]
    if s.form == "reduce" and _use_group_reduce(math.prod(s.row_shape), s.reduced, dev):
        return [group_reduce_kernel(comp, outs, dev)]
    # a row kernel: per-row values first, then the row's elements (outputs of one shape each)
    if s.form in ("row", "reduce") and s.trailing and all(n.shape in (s.row_shape, s.iter_shape) for n in nodes):
        return [map_kernel(comp, outs, s.row_shape, dev, pre=list(s.reduces))]
    shapes = {n.shape for n in nodes}
    if len(shapes) == 1:
        return [map_kernel(comp, outs, nodes[0].shape, dev)]
    return [map_kernel(comp, [(n, j)], n.shape, dev) for n, j in outs]


def _use_group_reduce(kept: int, red: int, dev: DeviceInfo) -> bool:
    if dev.is_gpu:
        return red >= 64 and (red >= 512 or kept < dev.compute_units * 32)
    return red >= 1024 and kept < dev.compute_units * 8


def plan_module(module: Module, dev: DeviceInfo) -> Plan:
    """The steps of ``module``'s shared kernel plan (:mod:`axle.lowering.plan`)."""
    kp = kernel_plan(module, assign_buffers=False, split_reductions=dev.split_reductions)
    steps: list[Any] = []
    for launch in kp.launches:
        if launch.is_bitcast:
            steps.append(AliasStep(launch.inputs[0], launch.outputs[0], launch.output_types[0]))
        elif launch.kind == "sort":
            sk = sort_launch(launch)
            if sk is not None:
                steps.append(KernelStep(sk[0], list(launch.inputs), sk[1], launch.label))
        elif launch.kind == "custom-call":
            steps.append(HostStep(launch.node, list(launch.inputs), launch.outputs[0]))
        else:
            for kernel in plan_unit(launch.computation, launch.kind, dev):
                inputs = [launch.inputs[v] if kind == "param" else ("const", v) for kind, v in kernel.inputs]
                outputs = [launch.outputs[j] for _, j, _ in kernel.outputs]
                steps.append(KernelStep(kernel, inputs, outputs, launch.label))
    return Plan(steps, list(range(kp.n_params)), kp.constants, list(zip(kp.results, kp.result_types)))
