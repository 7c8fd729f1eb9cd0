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
from axle.lowering.plan import KernelLaunch, KernelPlan, kernel_plan
from axle.lowering.schedule import schedule

from .convs import conv_kernel, conv_kernel_cpu
from .dots import DOT_DTYPES, Epilogue, dot_kernel, dot_kernel_cpu
from .kernels import DeviceInfo, Kernel, check_size, group_reduce_kernel, map_kernel, update_kernel
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
    #: the kernel writes into its outputs' buffers as they are (an update kernel after the
    #: operand was copied or handed over there), instead of into fresh ones
    in_place: bool = False


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
    # (a dot that widens its operands, preferred_element_type, or of a dtype the tiled
    # kernels do not take is a map kernel: a loop dot per output element)
    if s.form == "dot" and s.dot is not None and s.dot.op is Op.CONVOLUTION:
        c = s.dot  # a convolution, or a convolution and its epilogue (an output fusion)
        epi = Epilogue(comp, c) if s.epilogue else None
        k = (conv_kernel if dev.is_gpu else conv_kernel_cpu)(c, dev, epi)
        k.inputs = [("param", o.attr["index"]) for o in c.operands] + k.inputs[2:]
        k.outputs = [("out", outs[0][1], nodes[0].tensor_type)]
        return [k]
    if s.form == "dot" and s.dot is not None and s.dot.dtype in DOT_DTYPES and s.dot.operands[0].dtype is s.dot.dtype:
        d = s.dot  # a dot, or a dot and its epilogue (an output fusion)
        epi = Epilogue(comp, d) if s.epilogue else None
        k = (None if dev.is_gpu else dot_kernel_cpu(d, dev, epi)) or dot_kernel(d, dev, epi)
        k.inputs = [("param", o.attr["index"]) for o in d.operands] + k.inputs[2:]
        k.outputs = [("out", outs[0][1], nodes[0].tensor_type)]
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
    dying = _dying_operands(kp)
    for k, launch in enumerate(kp.launches):
        if launch.kind == "update":
            steps += _update_steps(launch, dev, k in dying)
        elif launch.is_bitcast:
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


def _update_steps(launch: KernelLaunch, dev: DeviceInfo, in_place: bool) -> list[Any]:
    """A scatter or dynamic-update-slice: the result takes over the operand's buffer when the
    operand dies here (``in_place``), else a copy kernel fills it; then the update kernel
    writes the windows into it."""
    comp, (src, *_), (dst,) = launch.computation, launch.inputs, launch.outputs
    x = comp.parameters[0]
    if in_place:
        first: Any = AliasStep(src, dst, x.tensor_type)
    else:
        copy = map_kernel(comp, [(x, 0)], x.shape, dev)
        first = KernelStep(copy, [launch.inputs[v] if kind == "param" else ("const", v) for kind, v in copy.inputs],
                           [dst], f"{launch.label}(copy)")
    k = update_kernel(comp, dev)
    if k is None:
        return [first]
    inputs = [launch.inputs[v] if kind == "param" else ("const", v) for kind, v in k.inputs]
    return [first, KernelStep(k, inputs, [dst], launch.label, in_place=True)]


def _dying_operands(kp: KernelPlan) -> set[int]:
    """Launches (by position) of kind ``update`` whose operand buffer nobody reads later:
    not a parameter (the caller's), a constant or a result, and no slot sharing its buffer
    (an unfused reshape aliases it) read by a later launch."""
    root: dict[int, int] = {}
    for launch in kp.launches:
        if launch.is_bitcast:
            root[launch.outputs[0]] = root.get(launch.inputs[0], launch.inputs[0])
    last: dict[int, int] = {}
    for k, launch in enumerate(kp.launches):
        for s in launch.inputs:
            last[root.get(s, s)] = k
    kept = {root.get(s, s) for s in kp.results} | set(kp.constants) | set(range(kp.n_params))
    out = set()
    for k, launch in enumerate(kp.launches):
        if launch.kind == "update":
            b = root.get(launch.inputs[0], launch.inputs[0])
            if b not in kept and last.get(b) == k and launch.inputs.count(launch.inputs[0]) == 1 and \
                    all(root.get(s, s) != b for s in launch.inputs[1:]):
                out.add(k)
    return out
