"""From a module to a list of steps: which kernels to generate for each launch of the
shared kernel plan (axle.lowering.plan).

A fusion or an unfused op is one kernel (a reduction split by the plan is two launches), a
reshape outside a fusion is a free re-typing of its operand's buffer, a sort the shared
merge sort kernel (sort.py), a custom-call is a host step, a ``while`` or ``conditional``
a host loop or branch over the plans of its sub-computations, planned and built once, at
compile time (:class:`LoopStep`, :class:`BranchStep`)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from axle.ir.module import Computation, Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.lowering.loops import known_trip_count
from axle.lowering.plan import KernelLaunch, KernelPlan, kernel_plan, sub_plan
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
    #: parameters (by position) whose buffers the steps may write into: an update in place,
    #: or a nested loop or branch handed the buffer. Only a sub-computation's plan (a loop
    #: body, a branch) writes into its parameters; whoever runs it must hand it buffers
    #: nothing else reads (:meth:`OpenCLExecutable._owned`)
    consumed: frozenset[int] = frozenset()
    param_types: list[TensorType] = field(default_factory=list)


@dataclass
class LoopStep:
    """A ``while``: ``body`` run ``trips`` times when the program fixes the count
    (:func:`axle.lowering.loops.known_trip_count`: nothing is read back), else while ``cond``
    holds (its pred read back, one byte per trip). The carry stays on the device: each
    trip's results become the next trip's buffers (no copies)."""

    cond: Plan
    body: Plan
    trips: int | None
    inputs: list[Slot]  # the initial carry
    outputs: list[Slot]  # the final carry
    #: per carry: its initial buffer dies here, so the loop may write into it
    owned: list[bool]
    label: str = ""


@dataclass
class BranchStep:
    """A ``conditional``: its index read back (4 bytes, or 1 for a pred), then that branch's
    plan run on the operands' buffers."""

    branches: list[Plan]
    index: Slot
    index_type: TensorType
    inputs: list[Slot]  # the operands
    outputs: list[Slot]
    owned: list[bool]  # per operand, as LoopStep.owned
    label: str = ""


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
    return _plan(kernel_plan(module, assign_buffers=False, split_reductions=dev.split_reductions), dev)


def _plan(kp: KernelPlan, dev: DeviceInfo, donated: bool = False) -> Plan:
    """The steps of one kernel plan. ``donated``: the plan of a loop body or a branch, whose
    parameters' buffers it may write into (:attr:`Plan.consumed`)."""
    subs = {k: _sub_plans(launch, dev) for k, launch in enumerate(kp.launches)
            if launch.kind in ("while", "conditional")}
    wants = {k: _WANTED_WRITES[launch.kind](subs.get(k, [])) if launch.kind in _WANTED_WRITES else set()
             for k, launch in enumerate(kp.launches)}
    writes, consumed = _writable_inputs(kp, wants, donated)
    steps: list[Any] = []
    for k, launch in enumerate(kp.launches):
        if launch.kind == "update":
            steps += _update_steps(launch, dev, 0 in writes[k])
        elif launch.kind == "while":
            cond, body = subs[k]
            steps.append(LoopStep(cond, body, known_trip_count(launch.node), list(launch.inputs),
                                  list(launch.outputs), [i in writes[k] for i in range(len(launch.inputs))],
                                  launch.label))
        elif launch.kind == "conditional":
            index, *operands = launch.inputs
            steps.append(BranchStep(subs[k], index, launch.node.operands[0].tensor_type, operands,
                                    list(launch.outputs), [i + 1 in writes[k] for i in range(len(operands))],
                                    launch.label))
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
    return Plan(steps, list(range(kp.n_params)), kp.constants, list(zip(kp.results, kp.result_types)),
                consumed, list(kp.param_types))


#: the sub-computations a control launch runs, in the order its step keeps their plans
_SUB_COMPUTATIONS = {"while": lambda n: [n.attr["condition"], n.attr["body"]],
                     "conditional": lambda n: list(n.attr["branches"])}
#: which sub-plans may write into their parameters (a branch: every one); a loop's
#: condition only reads the carry
_DONATED = {"while": (False, True)}


def _sub_plans(launch: KernelLaunch, dev: DeviceInfo) -> list[Plan]:
    """The plans of a control launch's sub-computations (its node's, already optimized)."""
    comps = _SUB_COMPUTATIONS[launch.kind](launch.node)
    donated = _DONATED.get(launch.kind, (True,) * len(comps))
    return [_plan(sub_plan(c, assign_buffers=False, split_reductions=dev.split_reductions), dev, d)
            for c, d in zip(comps, donated)]


#: the inputs (by position) a launch would write into if their buffers were its own, by its
#: kind (from its sub-plans): an update's operand; the carries its body writes into; the
#: operands (after the index) some branch writes into
_WANTED_WRITES: dict[str, Callable[[list[Plan]], set[int]]] = {
    "update": lambda subs: {0},
    "while": lambda subs: set(subs[1].consumed),
    "conditional": lambda subs: {i + 1 for b in subs for i in b.consumed},
}


def _writable_inputs(kp: KernelPlan, wants: dict[int, set[int]], donated: bool
                     ) -> tuple[dict[int, set[int]], frozenset[int]]:
    """Of the inputs each launch wants to write into, those it may: every buffer the input's
    slot may share (its bases) is read by no later launch, is no result, is no constant, is no
    parameter (unless ``donated``) and is no other input of the launch. Also the parameters
    some launch writes into.

    A slot's bases are the buffers it may be: its own; its operand's for an unfused reshape
    (a re-typing) and an update in place; for a loop's or branch's results one buffer of the
    launch's own (the buffers it was handed, and its fresh ones: they may come back at any
    result) and the buffers it was not handed (they may pass through unchanged)."""
    last: dict[int, int] = {}
    for k, launch in enumerate(kp.launches):
        for s in launch.inputs:
            last[s] = k
    for s in kp.results:
        last[s] = len(kp.launches)
    fixed = set(kp.constants) | (set() if donated else set(range(kp.n_params)))
    bases: dict[int, frozenset[int]] = {}
    holders: dict[int, set[int]] = {}  # base -> slots that may be it

    def base_of(s: int) -> frozenset[int]:
        return bases.get(s, frozenset({s}))

    def set_bases(s: int, b: frozenset[int]) -> None:
        bases[s] = b
        for x in b:
            holders.setdefault(x, {x}).add(s)

    writes: dict[int, set[int]] = {}
    consumed: set[int] = set()
    for k, launch in enumerate(kp.launches):
        ins = launch.inputs
        mine = writes[k] = {i for i in wants[k] if all(
            b not in fixed and all(last.get(t, -1) <= k for t in holders.get(b, {b}))
            and not any(b in base_of(ins[j]) for j in range(len(ins)) if j != i)
            for b in base_of(ins[i]))}
        consumed |= {b for i in mine for b in base_of(ins[i]) if b < kp.n_params}
        if launch.is_bitcast or (launch.kind == "update" and mine):
            set_bases(launch.outputs[0], base_of(ins[0]))
        elif launch.kind in ("while", "conditional"):
            first = 1 if launch.kind == "conditional" else 0
            passed = frozenset().union(*(base_of(ins[i]) for i in range(first, len(ins)) if i not in mine))
            for o in launch.outputs:
                set_bases(o, passed | {launch.outputs[0]})
    return writes, frozenset(consumed)


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
