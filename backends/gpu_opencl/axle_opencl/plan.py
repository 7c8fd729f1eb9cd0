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


def _roots(comp: Computation) -> list[Node]:
    return list(comp.root.operands) if comp.root.op is Op.TUPLE else [comp.root]


def _trailing(n: Node) -> bool:
    axes, rank = n.attr["axes"], len(n.operands[0].shape)
    return bool(axes) and tuple(axes) == tuple(range(rank - len(axes), rank))


def plan_unit(comp: Computation, dev: DeviceInfo) -> list[tuple[Kernel, list[Any], list[Any], dict[int, TensorType]]]:
    """Kernels for one fused computation. Inputs/outputs name ("param", i) / ("out", k) /
    ("scratch", j)."""
    for n in comp.nodes:
        if n.op is not Op.PARAMETER:
            check_size(n)
    outs = [(n, k) for k, n in enumerate(_roots(comp)) if n.tensor_type.size > 0]
    if not outs:
        return []
    nodes = [n for n, _ in outs]
    if len(outs) == 1 and nodes[0].op is Op.DOT_GENERAL and all(o.op is Op.PARAMETER for o in nodes[0].operands):
        d = nodes[0]
        k = (None if dev.is_gpu else dot_kernel_cpu(d, dev)) or dot_kernel(d, dev)
        k.inputs = [("param", o.attr["index"]) for o in d.operands]
        k.outputs = [("out", outs[0][1], d.tensor_type)]
        return [(k, k.inputs, k.outputs, {})]
    reduces = [n for n in comp.nodes if n.op is Op.REDUCE and n.attr["axes"]]
    # input fusion: every output a reduce of one operand shape over the same axes
    if all(n.op is Op.REDUCE and n.attr["axes"] for n in nodes) and \
            len({(n.operands[0].shape, n.attr["axes"]) for n in nodes}) == 1:
        kept = math.prod(nodes[0].shape)
        red = math.prod(nodes[0].operands[0].shape[a] for a in nodes[0].attr["axes"])
        if _use_group_reduce(kept, red, dev):
            return _group(comp, outs, kept, red, dev)
    # row fusion: trailing reductions of one row shape, outputs per row or per element
    if reduces and all(_trailing(r) for r in reduces):
        kshapes = {r.shape for r in reduces}
        fulls = {r.operands[0].shape for r in reduces}
        if len(kshapes) == 1 and len(fulls) == 1:
            kshape, full = kshapes.pop(), fulls.pop()
            if all(n.shape in (kshape, full) for n in nodes):
                k = map_kernel(comp, outs, kshape, dev, pre=reduces)
                return [(k, k.inputs, k.outputs, {})]
    shapes = {n.shape for n in nodes}
    if len(shapes) == 1:
        k = map_kernel(comp, outs, nodes[0].shape, dev)
        return [(k, k.inputs, k.outputs, {})]
    out = []
    for n, j in outs:
        k = map_kernel(comp, [(n, j)], n.shape, dev)
        out.append((k, k.inputs, k.outputs, {}))
    return out


def _use_group_reduce(kept: int, red: int, dev: DeviceInfo) -> bool:
    if dev.is_gpu:
        return red >= 64 and (red >= 512 or kept < dev.compute_units * 32)
    return red >= 1024 and kept < dev.compute_units * 8


def _group(comp: Computation, outs: list[tuple[Node, int]], kept: int, red: int, dev: DeviceInfo) -> list:
    if dev.is_gpu:
        L = 1 << min(8, int(math.log2(max(1, dev.max_work_group))))
        target = dev.compute_units * 8
    else:
        L = 4 if dev.max_work_group >= 4 else 1
        target = dev.compute_units * 4
    splits = 1
    if kept < target:
        splits = max(1, min(-(-target // kept), red // (L * 2048) or 1))
    k1 = group_reduce_kernel(comp, outs, dev, splits, L)
    if splits == 1:
        return [(k1, k1.inputs, k1.outputs, {})]
    scratch = {j: t for (_, j, t) in k1.outputs}
    k1.outputs = [("scratch", j, t) for (_, j, t) in k1.outputs]
    comp2 = second_pass(outs, splits)
    k2 = map_kernel(comp2, [(n, j) for n, (_, j) in zip(_roots(comp2), outs)], outs[0][0].shape, dev,
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
            for kernel, kin, kout, scratch in plan_unit(launch.computation, dev):
                inputs = [launch.inputs[v] if kind == "param" else (("const", v) if kind == "const" else ("scratch", v))
                          for kind, v in ((x[0], x[1]) for x in kin)]
                outputs = [launch.outputs[j] if kind == "out" else ("scratch", j) for kind, j, _ in kout]
                steps.append(KernelStep(kernel, inputs, outputs, scratch, launch.label))
    return Plan(steps, list(range(kp.n_params)), kp.constants, list(zip(kp.results, kp.result_types)))
