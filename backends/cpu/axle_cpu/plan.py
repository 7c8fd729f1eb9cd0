"""From a module's entry computation to a plan: a list of steps over numbered buffer slots.

The slots and launches are the shared kernel plan's (axle.lowering.plan); each launch
becomes a step here: fusions and single ops LLVM kernels, an unfused dot_general a GEMM
kernel (gemm.py), custom calls host steps calling the registered Python reference.
``blas=True`` (JIT only, the ``cpu_blas`` flag) turns float32/float64 dots into host steps
calling NumPy's BLAS instead; measured here the GEMM kernel is faster at every shape, so it is
off by default (AOT never does it).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from axle.ir.dotdims import DotDims
from axle.ir.dtypes import DType
from axle.ir.module import Computation, Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.lowering.plan import kernel_plan
from axle.lowering.schedule import schedule

from .conv import ConvSpec
from .emitter import KernelSpec
from .gemm import GEMM_DTYPES, GemmSpec
from .sort import host_sort


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


def sort_host(n: Node) -> Callable[[list[np.ndarray], list[np.ndarray]], None]:
    """A sort as a library-call step over the host buffers: NumPy's vectorized sorts made
    exact (sort.py; docs/backend-cpu.md, "Sort")."""
    attrs = n.attr

    def run(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        outs[0][...] = host_sort(ins, **attrs)

    return run


def _interp_host(comp: Computation) -> Callable[[list[np.ndarray], list[np.ndarray]], None]:
    from axle.interpreter import evaluate_computation

    def run(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        r = evaluate_computation(comp, ins)
        for o, v in zip(outs, r if isinstance(r, tuple) else (r,)):
            o[...] = v

    return run


def build_plan(module: Module, *, blas: bool = False, arena: bool = True, vector_bits: int = 0) -> Plan:
    """The steps of ``module``'s shared kernel plan (:mod:`axle.lowering.plan`). ``blas``:
    float dots run as NumPy (BLAS) host steps (JIT only); ``arena``: temporaries live in
    one per-call arena at buffer assignment's offsets; ``vector_bits``: the SIMD width the
    GEMM kernels are tiled for (0: the host's; AOT passes its target's)."""
    kp = kernel_plan(module, assign_buffers=arena)
    steps: list[KernelStep | HostStep] = []
    kernels: dict[tuple, KernelSpec] = {}

    for launch in kp.launches:
        ins, outs, types, label = list(launch.inputs), list(launch.outputs), list(launch.output_types), launch.label
        if launch.kind == "custom-call":
            steps.append(HostStep(_custom_host(launch.node), ins, outs, types,
                                  f"custom-call:{launch.node.attr['target']}"))
            continue
        if launch.kind == "sort":
            steps.append(HostStep(sort_host(launch.node), ins, outs, types, label))
            continue
        contraction = schedule(launch.computation, launch.kind).dot if launch.kind in ("dot", "output") else None
        if contraction is not None and contraction.op is Op.CONVOLUTION:
            # a convolution (and its epilogue): the implicit GEMM (conv.py); the backend
            # claims only the convolutions it computes (conv_refusal)
            spec = _spec(kernels, launch.computation, "gemm", label, vector_bits, ConvSpec)
            steps.append(KernelStep(spec, ins, outs, types, label))
            continue
        if launch.kind in ("dot", "output"):  # a dot, or a dot and its epilogue: the GEMM
            widened = launch.node.operands[0].dtype is not launch.node.dtype
            if blas and launch.kind == "dot" and launch.node.dtype in (DType.FLOAT32, DType.FLOAT64) and not widened:
                steps.append(HostStep(matmul_host(launch.node), ins, outs, types, f"{label}(blas)"))
            elif launch.node.dtype not in GEMM_DTYPES or widened:
                # the narrow/unsigned integers and bfloat16, and dots that widen their
                # operands (preferred_element_type): the loop nest's dot (one accumulation
                # per output element), not the tiled GEMM
                spec = _spec(kernels, launch.computation, "loop", label)
                steps.append(KernelStep(spec, ins, outs, types, label))
            else:
                spec = _spec(kernels, launch.computation, "gemm", label, vector_bits)
                steps.append(KernelStep(spec, ins, outs, types, label))
            continue
        comp = launch.computation
        spec = _spec(kernels, comp, launch.kind, label)
        outer, _ = spec.loop_sizes
        if outer == 0 and any(t.size for t in types):
            # Non-empty per-row outputs over an empty row space: the loop nest would
            # never store them; compute this rare shape on the host instead.
            steps.append(HostStep(_interp_host(comp), ins, outs, types, f"{label}(host)"))
            continue
        steps.append(KernelStep(spec, ins, outs, types, label))
    return Plan(kp.n_params, kp.param_types, kp.constants, steps, kp.results, kp.result_types, kp.n_slots,
                {s.name: s for s in kernels.values()}, kp.temp_bytes, kp.temp_offsets)


def _spec(kernels: dict[tuple, KernelSpec], comp: Computation, kind: str, label: str,
          vector_bits: int = 0, gemm: type[GemmSpec] = GemmSpec) -> KernelSpec:
    key = (comp.structural_key, kind)
    spec = kernels.get(key)
    if spec is None:
        name = f"k{len(kernels)}_{_ident(label)}"
        spec = gemm(name, comp, kind, vector_bits) if kind == "gemm" else KernelSpec(name, comp, kind)
        kernels[key] = spec
    return spec


def _ident(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)[:40]
