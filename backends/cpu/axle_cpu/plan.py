"""From a module's entry computation to a plan: a list of steps over numbered buffer slots.

Slots 0..P-1 are the parameters, then one slot per constant, then one per step output.
Every entry node that is not plumbing (parameter, constant, tuple, get-tuple-element)
becomes a step: fusions and single ops become LLVM kernels (a single op is wrapped as a
one-op computation), a dot_general a GEMM kernel (gemm.py), custom calls host steps
calling the registered Python reference. ``blas=True`` (JIT only, the ``cpu_blas`` flag)
turns float32/float64 dots into host steps calling NumPy's BLAS instead; measured here
the GEMM kernel is faster at every shape, so it is off by default (AOT never does it).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from axle import profiler
from axle.errors import BackendError
from axle.ir.dotdims import DotDims
from axle.ir.dtypes import DType
from axle.ir.module import Computation, Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType, TupleType

from .emitter import KernelSpec
from .fission import split
from .gemm import GemmSpec

#: ops a single-op kernel computes with a reduction loop at the root
_REDUCING = (Op.REDUCE,)
_PLUMBING = (Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT)


@dataclass
class KernelStep:
    spec: KernelSpec
    ins: list[int]
    outs: list[int]
    out_types: list[TensorType]
    label: str


@dataclass
class HostStep:
    fn: Callable[[list[np.ndarray], list[np.ndarray]], None]
    ins: list[int]
    outs: list[int]
    out_types: list[TensorType]
    label: str


@dataclass
class Plan:
    n_params: int
    param_types: list[TensorType]
    constants: dict[int, np.ndarray]
    steps: list[KernelStep | HostStep]
    results: list[int]
    result_types: list[TensorType]
    n_slots: int
    kernels: dict[str, KernelSpec] = field(default_factory=dict)
    #: bytes of the per-call temporary arena (from buffer assignment), and where each
    #: temporary slot lives in it; slots not listed get their own (pooled) buffers
    temp_bytes: int = 0
    temp_offsets: dict[int, int] = field(default_factory=dict)


def _wrap(n: Node, name: str) -> Computation:
    params = tuple(Node(Op.PARAMETER, (), (("index", k),), o.type, name=f"p{k}")
                   for k, o in enumerate(n.operands))
    root = Node(n.op, params, n.attrs, n.type, loc=n.loc, name=n.name)
    return Computation(name, params, root)


def matmul_host(n: Node) -> Callable[[list[np.ndarray], list[np.ndarray]], None]:
    """dot_general as one ``np.matmul`` (NumPy's BLAS) over batched-matrix views of the
    operands (transposes are views; a reshape copies only where dims do not merge),
    written into the output buffer."""
    d = DotDims.of(n)
    bt, m, k, nn = d.batch, d.m, d.k, d.n
    lperm, rperm = d.lhs_batch + d.lhs_free + d.lhs_contracting, d.rhs_batch + d.rhs_contracting + d.rhs_free
    shapes = ((m, k), (k, nn), (m, nn)) if bt == 1 else ((bt, m, k), (bt, k, nn), (bt, m, nn))

    def run(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        x = np.transpose(ins[0], lperm).reshape(shapes[0])
        y = np.transpose(ins[1], rperm).reshape(shapes[1])
        np.matmul(x, y, out=outs[0].reshape(shapes[2]))

    return run


def _custom_host(n: Node) -> Callable[[list[np.ndarray], list[np.ndarray]], None]:
    from axle.ir.ops import OPS

    ref = OPS[Op.CUSTOM_CALL].reference
    attrs = n.attr

    def run(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        outs[0][...] = ref(*ins, **attrs)

    return run


def _interp_host(comp: Computation) -> Callable[[list[np.ndarray], list[np.ndarray]], None]:
    from axle.interpreter import evaluate_computation

    def run(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        r = evaluate_computation(comp, ins)
        for o, v in zip(outs, r if isinstance(r, tuple) else (r,)):
            o[...] = v

    return run


def _buffer_assignment(module: Module):  # noqa: ANN202
    """The core's buffer assignment (schedule + arena offsets + in-place reuse), if this
    axle has it; otherwise None and every temporary gets its own pooled buffer."""
    try:
        from axle.passes.buffers import assign
    except ImportError:
        return None
    return assign(module)


def build_plan(module: Module, *, blas: bool = False, arena: bool = True, vector_bits: int = 0) -> Plan:
    """The plan of ``module``'s entry computation. ``blas``: float dots run as NumPy
    (BLAS) host steps (JIT only); ``vector_bits``: the SIMD width the GEMM kernels are
    tiled for (0: the host's; AOT passes its target's)."""
    entry = module.entry
    labels = profiler.kernel_names(module)  # timeline names mapping back to the module
    ba = _buffer_assignment(module) if arena else None
    temp_offsets: dict[int, int] = {}
    slots: dict[int, list[int]] = {}
    constants: dict[int, np.ndarray] = {}
    steps: list[KernelStep | HostStep] = []
    kernels: dict[tuple, KernelSpec] = {}
    n_params = len(entry.parameters)
    nxt = n_params

    def new_slot() -> int:
        nonlocal nxt
        nxt += 1
        return nxt - 1

    def results_of(n: Node) -> list[TensorType]:
        return list(n.type.elements) if isinstance(n.type, TupleType) else [n.type]

    for n in (ba.order if ba is not None else entry.nodes):
        if n.op is Op.PARAMETER:
            slots[n.uid] = [n.attr["index"]]
        elif n.op is Op.CONSTANT:
            s = new_slot()
            constants[s] = np.array(n.attr["value"].array, copy=True, order="C")
            slots[n.uid] = [s]
        elif n.op is Op.TUPLE:
            slots[n.uid] = [slots[o.uid][0] for o in n.operands]
        elif n.op is Op.GET_TUPLE_ELEMENT:
            slots[n.uid] = [slots[n.operands[0].uid][n.attr["index"]]]
        else:
            ins = [slots[o.uid][0] for o in n.operands]
            types = results_of(n)
            outs = [new_slot() for _ in types]
            slots[n.uid] = outs
            if ba is not None:
                for i, s in enumerate(outs):
                    a = ba.allocations.get((n.uid, i))
                    if a is not None and a.region == "temp":
                        temp_offsets[s] = a.offset
            label = labels[n.uid]
            if n.op is Op.CUSTOM_CALL:
                steps.append(HostStep(_custom_host(n), ins, outs, types, f"custom-call:{n.attr['target']}"))
                continue
            if n.op is Op.DOT_GENERAL:
                if blas and n.dtype in (DType.FLOAT32, DType.FLOAT64):
                    steps.append(HostStep(matmul_host(n), ins, outs, types, f"{label}(blas)"))
                else:
                    spec = _spec(kernels, _wrap(n, label), "gemm", label, vector_bits)
                    steps.append(KernelStep(spec, ins, outs, types, label))
                continue
            if n.op is Op.FUSION:
                comp, kind = n.attr["computation"], n.attr["kind"]
                if kind == "output":
                    kind = "loop"  # the dot is computed inline per output element
            else:
                comp, kind = _wrap(n, label), ("input" if n.op in _REDUCING else "loop")
            producers, comp = split(comp)
            extra: list[int] = []
            for pc in producers:
                pspec = _spec(kernels, pc, "loop", label + "_part")
                s_out = new_slot()
                steps.append(KernelStep(pspec, ins + extra, [s_out], [pc.root.tensor_type], label + "(part)"))
                extra.append(s_out)
            ins = ins + extra
            spec = _spec(kernels, comp, kind, label)
            outer, _ = spec.loop_sizes
            if outer == 0 and any(t.size for t in types):
                # Non-empty per-row outputs over an empty row space: the loop nest would
                # never store them; compute this rare shape on the host instead.
                steps.append(HostStep(_interp_host(comp), ins, outs, types, f"{label}(host)"))
                continue
            steps.append(KernelStep(spec, ins, outs, types, label))
    root = entry.root
    results = slots[root.uid]
    rtypes = results_of(root)
    if any(not isinstance(t, TensorType) for t in entry.parameter_types):
        raise BackendError("cpu: tuple-typed parameters are not supported")
    return Plan(n_params, list(entry.parameter_types), constants, steps, list(results), rtypes, nxt,  # type: ignore[arg-type]
                {s.name: s for s in kernels.values()}, ba.temp_bytes if ba is not None else 0, temp_offsets)


def _spec(kernels: dict[tuple, KernelSpec], comp: Computation, kind: str, label: str,
          vector_bits: int = 0) -> KernelSpec:
    key = (comp.structural_key, kind)
    spec = kernels.get(key)
    if spec is None:
        name = f"k{len(kernels)}_{_ident(label)}"
        spec = GemmSpec(name, comp, kind, vector_bits) if kind == "gemm" else KernelSpec(name, comp, kind)
        kernels[key] = spec
    return spec


def _ident(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)[:40]
