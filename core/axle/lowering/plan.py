"""The kernel plan: an optimized module as an ordered list of launches over buffer slots.

Every backend walks the same plan. Slots ``0..P-1`` are the entry's parameters, then one
slot per constant, then one per launch output, in launch order. Every entry node that is
not plumbing (parameter, constant, tuple, get-tuple-element) is one :class:`KernelLaunch`:
a fusion node launches its fused computation with the kind the fusion pass recorded; an
unfused op launches a one-op computation (:func:`single_op`) with the kind its op implies.
A backend turns each launch into its own steps (one kernel, two passes, a library call, a
host call) but never re-walks the module or re-decides what a fusion is.

With ``assign_buffers`` the launch order is buffer assignment's schedule and each temporary
slot carries its offset in the per-call arena (:mod:`axle.passes.buffers`), so a backend
that allocates one arena per call only has to honour ``temp_offsets``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import profiler
from ..ir.literal import BIG_BYTES
from ..ir.module import Computation, Module, Node
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType
from ..passes.buffers import assign
from ..passes.policy import DEFAULT_POLICY
from .fission import split
from .schedule import outputs_of
from .split import split_reduction

#: the launch kind of an unfused op (every other op is a "loop": one value per output element);
#: ``update``: scatter and dynamic-update-slice write windows into a copy of their operand
#: (its very buffer when buffer assignment put the result in place of it);
#: ``while``/``conditional``: a control op whose sub-computations the backend runs itself
_SINGLE_OP_KIND = {Op.REDUCE: "input", Op.DOT_GENERAL: "dot", Op.CUSTOM_CALL: "custom-call", Op.SORT: "sort",
                   Op.SCATTER: "update", Op.DYNAMIC_UPDATE_SLICE: "update",
                   Op.WHILE: "while", Op.CONDITIONAL: "conditional",
                   # a claimed convolution is a contraction launch like a dot (its own kernel)
                   Op.CONVOLUTION: "dot"}


@dataclass(frozen=True)
class KernelLaunch:
    """One unit of work: ``computation`` reads ``inputs`` (slots, one per computation
    parameter, in parameter order) and writes ``outputs`` (slots, one per result).

    ``kind``: a fusion kind of the fusion pass (``loop``, ``input``, ``row``, ``output``) for a
    fusion node; for an unfused op ``loop``, ``input`` (a reduce), ``dot`` (a
    dot_general), ``update`` (scatter, dynamic-update-slice: the result is input 0 with
    windows written over it; the output slot may share input 0's memory), ``custom-call``
    (a call of a registered host function), ``sort`` (a sort along one dimension: each
    row of that dimension sorted on its own), or ``while``/``conditional`` (a control op:
    ``node.attr`` holds its condition and body, or its branches, already optimized; the
    backend plans and runs them itself, see :func:`sub_plan`)."""

    node: Node  # the entry node launched (its op, attributes and source location)
    computation: Computation
    kind: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    output_types: tuple[TensorType, ...]
    label: str  # the profiler's timeline name, mapping back to the module

    @property
    def is_bitcast(self) -> bool:
        """An unfused reshape: its output has its operand's bytes under a new type, so a
        backend may alias the buffer instead of launching a copy."""
        return self.node.op is Op.RESHAPE


@dataclass
class KernelPlan:
    param_types: list[TensorType]
    constants: dict[int, np.ndarray]  # slot -> C-contiguous value
    launches: list[KernelLaunch]
    results: list[int]  # slots of the entry's results, in order
    result_types: list[TensorType]
    n_slots: int
    #: bytes of the per-call temporary arena and each temporary slot's offset in it
    #: (``assign_buffers`` only); slots not listed need buffers of their own
    temp_bytes: int = 0
    temp_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        return len(self.param_types)


def single_op(node: Node, name: str | None = None) -> Computation:
    """A one-op computation computing ``node`` from parameters bound to its operands."""
    params = tuple(Node(Op.PARAMETER, (), (("index", k),), o.type, name=f"p{k}")
                   for k, o in enumerate(node.operands))
    root = Node(node.op, params, node.attrs, node.type, loc=node.loc, name=node.name)
    return Computation(name or node.op.value.replace("-", "_"), params, root)


def sub_plan(comp: Computation, **kwargs: object) -> KernelPlan:
    """The plan of a control op's sub-computation (a loop's condition or body, a branch),
    as if it were the entry of a module of its own: its parameters are the carry or the
    branch operands, its results the new carry or the branch's value. A loop body planned
    with ``donate_carry=True`` may write a result into its parameter's slot (the carry
    updated in place: its launch's output slot is that parameter's slot)."""
    return kernel_plan(Module(comp.name, comp), **kwargs)  # type: ignore[arg-type]  # kernel_plan's keywords


def _types(t: object) -> list[TensorType]:
    return list(t.elements) if isinstance(t, TupleType) else [t]  # type: ignore[list-item]  # no nested tuples


def kernel_plan(module: Module, *, assign_buffers: bool = True,
                max_inline_cost: int = DEFAULT_POLICY.max_inline_cost,
                split_reductions: tuple[int, int] | None = None, donate_carry: bool = False) -> KernelPlan:
    """The plan of ``module``'s entry computation (see the module docstring). Parameters
    are arrays and tuples do not nest (the IR's rules), so every slot holds one array.
    A fusion over ``max_inline_cost`` (written by hand: the fusion pass forms none) is
    launched as producer kernels of kind ``loop`` (label ``...(part)``) and the rest.
    ``split_reductions=(workers, min_part)``: a reduction into fewer than ``workers``
    outputs is launched in two (:mod:`axle.lowering.split`; label ``...(partials)``).
    ``donate_carry``: the entry is a loop body whose parameters the plan may overwrite,
    result ``i`` in parameter ``i``'s slot where buffer assignment finds it in place
    (``assign(..., carry=True)``); a value placed in a parameter's buffer gets its slot."""
    entry = module.entry
    labels = profiler.kernel_names(module)
    donated = range(len(entry.parameters)) if donate_carry else ()
    ba = assign(module, donated=donated, carry=donate_carry) if assign_buffers or donate_carry else None
    slots: dict[int, list[int]] = {}
    constants: dict[int, np.ndarray] = {}
    launches: list[KernelLaunch] = []
    temp_offsets: dict[int, int] = {}
    n_slots = len(entry.parameters)

    def new_slots(k: int) -> list[int]:
        nonlocal n_slots
        n_slots += k
        return list(range(n_slots - k, n_slots))

    for n in (ba.order if ba is not None else entry.nodes):
        if n.op is Op.PARAMETER:
            slots[n.uid] = [n.attr["index"]]
        elif n.op is Op.CONSTANT:
            slots[n.uid] = new_slots(1)
            arr = n.attr["value"].array
            # a big one is the module's own (read-only, C-ordered, 64-byte aligned: no step
            # writes a constant's slot), not a copy: a model's weights were held twice
            constants[slots[n.uid][0]] = arr if arr.nbytes >= BIG_BYTES else np.array(arr, copy=True, order="C")
        elif n.op is Op.TUPLE:
            slots[n.uid] = [slots[o.uid][0] for o in n.operands]
        elif n.op is Op.GET_TUPLE_ELEMENT:
            slots[n.uid] = [slots[n.operands[0].uid][n.attr["index"]]]
        else:
            label = labels[n.uid]
            ins = tuple(slots[o.uid][0] for o in n.operands)
            if n.op is Op.FUSION:
                producers, comp = split(n.attr["computation"], max_inline_cost)
                kind = n.attr["kind"]
                for pc in producers:
                    (s,) = new_slots(1)
                    launches.append(KernelLaunch(n, pc, "loop", ins, (s,), (pc.root.tensor_type,), f"{label}(part)"))
                    ins += (s,)
            else:
                comp, kind = single_op(n, label), _SINGLE_OP_KIND.get(n.op, "loop")
            if split_reductions is not None and kind not in ("dot", "output"):
                sp = split_reduction(comp, *split_reductions)
                if sp is not None:
                    ptypes = tuple(o.tensor_type for o in outputs_of(sp.partials))
                    partial_slots = tuple(new_slots(len(ptypes)))
                    launches.append(KernelLaunch(n, sp.partials, "input", ins, partial_slots, ptypes,
                                                 f"{label}(partials)"))
                    comp, ins = sp.combine, partial_slots
            types = _types(n.type)
            outs = slots[n.uid] = new_slots(len(types))
            if ba is not None:
                for i, s in enumerate(outs):
                    a = ba.allocations.get((n.uid, i))
                    if a is not None and a.region == "temp" and assign_buffers:
                        temp_offsets[s] = a.offset
                    elif a is not None and a.region == "parameter":  # in place of a donated parameter
                        outs[i] = a.offset
            launches.append(KernelLaunch(n, comp, kind, ins, tuple(outs), tuple(types), label))
    root = entry.root
    return KernelPlan(list(entry.parameter_types), constants, launches, list(slots[root.uid]),  # type: ignore[arg-type]  # parameter types are arrays
                      _types(root.type), n_slots, ba.temp_bytes if ba is not None and assign_buffers else 0,
                      temp_offsets)
