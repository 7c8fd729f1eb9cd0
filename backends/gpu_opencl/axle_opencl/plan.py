"""From a module to a list of steps: which kernels to generate for each entry node.

Every entry node that is not a parameter, constant, tuple or get-tuple-element becomes
work: a fusion node or an unfused op is one kernel (two for a reduction that needs a
second pass), a reshape outside a fusion is a free re-typing of its operand's buffer,
a custom-call is a host step."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from axle import profiler
from axle.errors import BackendError
from axle.ir.builder import Builder, make_node
from axle.ir.module import Computation, Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType

from .dots import dot_kernel, dot_kernel_cpu
from .kernels import DeviceInfo, Kernel, check_size, group_reduce_kernel, map_kernel, second_pass

Slot = tuple[int, int]  # (entry node uid, result index)


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


def wrap_op(n: Node) -> Computation:
    """A one-op computation whose parameters bind the op's operands."""
    b = Builder(n.op.value.replace("-", "_"))
    params = [b.parameter(o.tensor_type) for o in n.operands]
    node = make_node(n.op, params, dict(n.attrs), loc=n.loc)
    return b.computation(node)


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


def plan_module(entry: Computation, dev: DeviceInfo) -> Plan:
    steps: list[Any] = []
    constants: dict[Slot, np.ndarray] = {}
    slot_of: dict[int, Slot] = {}  # entry node uid -> slot of its (single) value
    tuples: dict[int, list[Slot]] = {}
    params: list[Slot] = []
    labels = profiler.kernel_names(Module(entry.name, entry))
    for n in entry.nodes:
        if n.op is Op.PARAMETER:
            slot_of[n.uid] = (n.uid, 0)
            params.append((n.uid, 0))
        elif n.op is Op.CONSTANT:
            slot_of[n.uid] = (n.uid, 0)
            constants[(n.uid, 0)] = n.attr["value"].array
        elif n.op is Op.TUPLE:
            tuples[n.uid] = [slot_of[o.uid] for o in n.operands]
        elif n.op is Op.GET_TUPLE_ELEMENT:
            slot_of[n.uid] = tuples[n.operands[0].uid][n.attr["index"]]
        elif n.op is Op.RESHAPE:
            slot_of[n.uid] = (n.uid, 0)
            steps.append(AliasStep(slot_of[n.operands[0].uid], (n.uid, 0), n.tensor_type))
        elif n.op is Op.CUSTOM_CALL:
            slot_of[n.uid] = (n.uid, 0)
            steps.append(HostStep(n, [slot_of[o.uid] for o in n.operands], (n.uid, 0)))
        else:
            comp = n.attr["computation"] if n.op is Op.FUSION else wrap_op(n)
            results = _roots(comp)
            mine = [(n.uid, k) for k in range(len(results))]
            if n.op is Op.FUSION and comp.root.op is Op.TUPLE:
                tuples[n.uid] = mine
            else:
                slot_of[n.uid] = mine[0]
            in_slots = [slot_of[o.uid] for o in n.operands]
            for kernel, kin, kout, scratch in plan_unit(comp, dev):
                inputs = [in_slots[v] if kind == "param" else (("const", v) if kind == "const" else ("scratch", v))
                          for kind, v in ((x[0], x[1]) for x in kin)]
                outputs = [mine[j] if kind == "out" else ("scratch", j) for kind, j, _ in kout]
                steps.append(KernelStep(kernel, inputs, outputs, scratch, labels[n.uid]))
    root = entry.root
    if root.op is Op.TUPLE:
        res_slots = tuples[root.uid]
        types = [o.tensor_type for o in root.operands]
    elif root.uid in tuples:
        res_slots = tuples[root.uid]
        types = list(root.type.elements)  # type: ignore[union-attr]
    else:
        res_slots = [slot_of[root.uid]]
        types = [root.tensor_type]
    if any(not isinstance(t, TensorType) for t in types):
        raise BackendError("opencl: nested tuple results are not supported")
    return Plan(steps, params, constants, list(zip(res_slots, types)))
