"""From a module's entry computation to a plan: a list of steps over numbered buffer slots.

The slots and launches are the shared kernel plan's (axle.lowering.plan); each launch
becomes a step here: fusions and single ops LLVM kernels, an unfused dot_general a GEMM
kernel (gemm.py), custom calls host steps calling the registered Python reference; a loop
or conditional the sub-plans of its condition and body (or branches), flattened into the
same steps and slots between control steps (copies, jumps, branches, switches) that the
native step runner executes (runner.py; docs/backend-cpu.md, "Loops and conditionals").
``blas=True`` (JIT only, the ``cpu_blas`` flag) turns float32/float64 dots into host steps
calling NumPy's BLAS instead; measured here the GEMM kernel is faster at every shape, so it is
off by default (AOT never does it).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from axle.ir.dotdims import DotDims
from axle.ir.dtypes import DType
from axle.ir.module import Computation, Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.lowering.plan import KernelLaunch, KernelPlan, kernel_plan, sub_plan
from axle.lowering.schedule import schedule

from . import transpose
from .conv import ConvSpec
from .emitter import KernelSpec
from .gemm import GEMM_DTYPES, GemmSpec, pack_b
from .sort import host_sort


class LaunchSpec(Protocol):
    """What running a kernel step reads of its kernel: a :class:`KernelSpec`, or the facts
    a cached plan keeps of one (plan_cache.py), which has no computation to emit again."""

    @property
    def name(self) -> str: ...
    @property
    def loop_sizes(self) -> tuple[int, int]: ...
    @property
    def split_reduce_size(self) -> int: ...
    @property
    def reduce_split_first(self) -> bool: ...
    @property
    def fixed_columns(self) -> bool: ...
    @property
    def largest_array(self) -> int: ...
    @property
    def combine_kinds(self) -> tuple[str, ...]: ...


@dataclass
class KernelStep:
    spec: LaunchSpec
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
class ControlStep:
    """A step of the native step runner's control flow (runner.py), flattened from a loop
    or conditional: ``copy`` (``arg`` bytes from ``ins[0]`` to ``outs[0]``), ``jump`` (by
    ``arg`` steps, relative), ``branch`` (by ``arg`` steps when the pred in ``ins[0]`` is
    false, else to the next step) or ``switch`` (to the ``1 + k``-th next step, ``k`` the
    index in ``ins[0]``, ``width`` bytes, clamped to the last of ``arg`` branches)."""

    kind: str
    ins: list[int]
    outs: list[int]
    out_types: list[TensorType]
    label: str
    arg: int = 0
    width: int = 0


Step = KernelStep | HostStep | ControlStep


@dataclass
class Plan:
    n_params: int
    param_types: list[TensorType]
    constants: dict[int, np.ndarray]
    steps: list[Step]
    results: list[int]
    result_types: list[TensorType]
    n_slots: int
    kernels: dict[str, KernelSpec] = field(default_factory=dict)
    #: bytes of the per-call temporary arena (from buffer assignment), and where each
    #: temporary slot lives in it; slots not listed get their own (pooled) buffers
    temp_bytes: int = 0
    temp_offsets: dict[int, int] = field(default_factory=dict)
    #: the step ranges [start, end) of the entry's loops and conditionals (each holds its
    #: nested ones): run whole by the native runner, their kernels on one thread
    regions: list[tuple[int, int]] = field(default_factory=list)


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


#: the most bytes of packed copies kept of a constant that a step also reads unpacked
#: (_Lowering.drop_replaced): past it the weight is packed per call rather than held twice
PREPACK_KEPT_BYTES = 16 << 20


def build_plan(module: Module, *, blas: bool = False, arena: bool = True, vector_bits: int = 0,
               prepack: bool = True) -> Plan:
    """The steps of ``module``'s shared kernel plan (:mod:`axle.lowering.plan`). ``blas``:
    float dots run as NumPy (BLAS) host steps (JIT only); ``arena``: temporaries live in
    one per-call arena at buffer assignment's offsets; ``vector_bits``: the SIMD width the
    GEMM kernels are tiled for (0: the host's; AOT passes its target's); ``prepack``: a
    GEMM's B that is a constant (a weight) is packed into the kernel's panels here, once,
    instead of on every call (``_Lowering.prepacked``). Loops and conditionals are
    flattened into the steps with control steps (:class:`ControlStep`)."""
    kp = kernel_plan(module, assign_buffers=arena)
    low = _Lowering(kp, blas, arena, vector_bits, prepack)
    low.lower(kp, lambda s: s, nested=False)
    low.drop_replaced(kp.results)
    return Plan(kp.n_params, kp.param_types, low.constants, low.steps, kp.results, kp.result_types, low.n_slots,
                {s.name: s for s in low.kernels.values()}, low.temp_bytes, low.temp_offsets, low.regions)


def _align(n: int) -> int:
    return -(-n // 64) * 64


class _Lowering:
    """Plan steps from kernel plans: the entry's, and (flattened into the same steps and
    slot space) the sub-plans of its loops and conditionals."""

    def __init__(self, kp: KernelPlan, blas: bool, arena: bool, vector_bits: int, prepack: bool = True) -> None:
        self.blas, self.arena, self.vector_bits, self.prepack = blas, arena, vector_bits, prepack
        #: packed copies of constants (original slot, packing) -> their slot, and the
        #: constants some kernel reads packed instead (dropped when nothing else reads them)
        self.packed: dict[tuple, int] = {}
        self.replaced: set[int] = set()
        #: each step reading a prepacked B, with the step that packs it per call instead
        self.packed_steps: list[tuple[KernelStep, KernelStep]] = []
        self.steps: list[Step] = []
        self.kernels: dict[tuple, KernelSpec] = {}
        self.constants: dict[int, np.ndarray] = dict(kp.constants)
        self.temp_offsets: dict[int, int] = dict(kp.temp_offsets)
        self.temp_bytes = kp.temp_bytes
        self.n_slots = kp.n_slots
        self.regions: list[tuple[int, int]] = []

    def lower(self, kp: KernelPlan, slot: Callable[[int], int], nested: bool) -> None:
        """Appends the steps of ``kp``'s launches, its slot ``s`` being plan slot ``slot(s)``."""
        read = {s for la in kp.launches for s in la.inputs} | set(kp.results)
        for launch in kp.launches:
            ins, outs = [slot(s) for s in launch.inputs], [slot(s) for s in launch.outputs]
            if launch.kind in _CONTROL:
                start = len(self.steps)
                _CONTROL[launch.kind](self, launch, ins, outs, [s in read for s in launch.outputs])
                if not nested:
                    self.regions.append((start, len(self.steps)))
                continue
            self.steps.append(self._step(launch, ins, outs, blas=self.blas and not nested))

    def _step(self, launch: KernelLaunch, ins: list[int], outs: list[int], blas: bool) -> KernelStep | HostStep:
        types, label = list(launch.output_types), launch.label
        if launch.kind == "custom-call":
            return HostStep(_custom_host(launch.node), ins, outs, types, f"custom-call:{launch.node.attr['target']}")
        if launch.kind == "sort":
            return HostStep(sort_host(launch.node), ins, outs, types, label)
        contraction = schedule(launch.computation, launch.kind).dot if launch.kind in ("dot", "output") else None
        if contraction is not None and contraction.op is Op.CONVOLUTION:
            # a convolution (and its epilogue): the implicit GEMM (conv.py); the backend
            # claims only the convolutions it computes (conv_refusal)
            return self._gemm_step(launch.computation, label, ConvSpec, ins, outs, types)
        if contraction is not None:  # a dot, or a dot and its epilogue: the GEMM
            # the dot's own dtypes: an output fusion's node is the fusion, whose operands and
            # result (a convert epilogue's) are not the dot's
            widened = contraction.operands[0].dtype is not contraction.dtype
            if blas and launch.kind == "dot" and launch.node.dtype in (DType.FLOAT32, DType.FLOAT64) and not widened:
                return HostStep(matmul_host(launch.node), ins, outs, types, f"{label}(blas)")
            if contraction.dtype not in GEMM_DTYPES or widened:
                # the narrow/unsigned integers and bfloat16, and dots that widen their
                # operands (preferred_element_type): the loop nest's dot (one accumulation
                # per output element), not the tiled GEMM
                return KernelStep(_spec(self.kernels, launch.computation, "loop", label), ins, outs, types, label)
            return self._gemm_step(launch.computation, label, GemmSpec, ins, outs, types)
        comp = launch.computation
        if launch.kind == "loop" and transpose.blocked(comp):  # a big x.T: cache-blocked tiles
            return KernelStep(_spec(self.kernels, comp, "transpose", label), ins, outs, types, label)
        spec = _spec(self.kernels, comp, launch.kind, label, in_place=self._in_place(ins, outs, launch.kind))
        outer, _ = spec.loop_sizes
        if outer == 0 and any(t.size for t in types):
            # Non-empty per-row outputs over an empty row space: the loop nest would
            # never store them; compute this rare shape on the host instead.
            return HostStep(_interp_host(comp), ins, outs, types, f"{label}(host)")
        return KernelStep(spec, ins, outs, types, label)

    def _gemm_step(self, comp: Computation, label: str, cls: type[GemmSpec], ins: list[int], outs: list[int],
                   types: list[TensorType]) -> KernelStep:
        """The GEMM kernel of a dot or convolution (and its epilogue); with a constant B
        that the kernel packs, the kernel reading it prepacked (``prepacked``)."""
        spec = _spec(self.kernels, comp, "gemm", label, self.vector_bits, cls)
        assert isinstance(spec, GemmSpec)
        packed = self.prepacked(spec, ins) if self.prepack else None
        if packed is None:
            return KernelStep(spec, ins, outs, types, label)
        packed_spec = _spec(self.kernels, comp, "gemm", label, self.vector_bits, cls, prepacked_b=True)
        step = KernelStep(packed_spec, packed, outs, types, f"{label}(prepacked)")
        self.packed_steps.append((step, KernelStep(spec, ins, outs, types, label)))
        return step

    def prepacked(self, spec: GemmSpec, ins: list[int]) -> list[int] | None:
        """``ins`` with the kernel's B, when it is a constant that the kernel packs into
        NR-wide panels (``GemmSpec.b_packing``: not a convolution's patches, nor a B read
        in place), replaced by a constant holding those panels, packed here once (gemm.
        pack_b): an ONNX model's initializers, a jitted function's closed-over weights.
        The kernel then reads the same panels it would have packed, with the same K
        blocks, so its results are the same bits. One packed copy per constant and
        packing; the original is dropped when no other step reads it (``drop_replaced``)."""
        p = spec.b_packing
        if p is None:
            return None
        lay = spec.layout
        pos = spec.dot.operands[1 - lay.a_operand].attr["index"]
        src = ins[pos]
        if src not in self.constants:
            return None
        key = (src, p, lay.b_b, lay.b_k, lay.b_n)
        slot = self.packed.get(key)
        if slot is None:
            slot = self.packed[key] = self.n_slots
            self.n_slots += 1
            self.constants[slot] = pack_b(spec, self.constants[src])
        self.replaced.add(src)
        return [slot if k == pos else s for k, s in enumerate(ins)]

    def drop_replaced(self, results: Sequence[int]) -> None:
        """Forgets the constants that kernels read prepacked and no step or result reads
        as they are: a model's weights are then held once, packed. A constant that another
        step reads as it is (a tied embedding's gather) keeps its packed copies only while
        they hold at most ``PREPACK_KEPT_BYTES``; past that its kernels pack it per call
        again rather than hold it twice."""
        read = {s for st in self.steps for s in st.ins + st.outs} | set(results)
        kept = self.replaced & read
        extra: dict[int, int] = {}
        for (src, *_), slot in self.packed.items():
            if src in kept:
                extra[src] = extra.get(src, 0) + self.constants[slot].nbytes
        undo = {src for src, n in extra.items() if n > PREPACK_KEPT_BYTES}
        if undo:
            for step, unpacked in self.packed_steps:
                orig = unpacked.ins[[k for k, (a, b) in enumerate(zip(step.ins, unpacked.ins)) if a != b][0]]
                if orig in undo:
                    step.spec, step.ins, step.label = unpacked.spec, unpacked.ins, unpacked.label
            for key, slot in list(self.packed.items()):
                if key[0] in undo:
                    del self.constants[slot]
                    del self.packed[key]
            used = {id(st.spec) for st in self.steps if isinstance(st, KernelStep)}
            self.kernels = {k: v for k, v in self.kernels.items() if not (
                isinstance(v, GemmSpec) and v.prepacked_b and id(v) not in used)}
        for s in self.replaced - read:
            del self.constants[s]

    def _in_place(self, ins: list[int], outs: list[int], kind: str) -> tuple[tuple[int, int], ...]:
        """(input position, output position) pairs of a loop kernel that share one buffer:
        the same slot (a loop's carry updated in place) or temporaries at one arena offset
        (buffer assignment's in-place rule: the output overwrites an operand dying there)."""
        if kind != "loop":
            return ()
        offs = self.temp_offsets

        def same(a: int, b: int) -> bool:
            return a == b or (a in offs and b in offs and offs[a] == offs[b])

        return tuple((j, k) for k, o in enumerate(outs) for j, s in enumerate(ins) if same(s, o))

    # -- sub-plans -----------------------------------------------------------------
    def embed(self, sp: KernelPlan, params: list[int], direct: dict[int, int]) -> Callable[[int], int]:
        """Slots of the plan for ``sp``'s slots: its parameters are ``params``, a slot in
        ``direct`` is the slot given there, the others fresh (its constants and
        temporaries, placed after the arena so far; its results in the arena too)."""
        base = self.n_slots - sp.n_params
        self.n_slots += sp.n_slots - sp.n_params

        def slot(s: int) -> int:
            return params[s] if s < sp.n_params else direct.get(s, base + s)

        for s, value in sp.constants.items():
            self.constants[slot(s)] = value
        if self.arena:
            shift = _align(self.temp_bytes)
            for s, off in sp.temp_offsets.items():
                self.temp_offsets[slot(s)] = shift + off
            self.temp_bytes = shift + sp.temp_bytes
            for launch in sp.launches:  # the rest (its results): arena space of their own
                for s, t in zip(launch.outputs, launch.output_types):
                    if s >= sp.n_params and s not in sp.temp_offsets and s not in direct:
                        self.temp_offsets[slot(s)] = _align(self.temp_bytes)
                        self.temp_bytes = _align(self.temp_bytes) + t.nbytes
        return slot

    def fresh(self, t: TensorType) -> int:
        """A new slot for a staging copy (in the arena when there is one)."""
        s = self.n_slots
        self.n_slots += 1
        if self.arena:
            self.temp_offsets[s] = _align(self.temp_bytes)
            self.temp_bytes = _align(self.temp_bytes) + t.nbytes
        return s

    def control(self, kind: str, ins: Sequence[int] = (), label: str = "", arg: int = 0, width: int = 0,
                out: tuple[int, TensorType] | None = None) -> int:
        """Appends a control step; returns its index (to patch a jump's target later)."""
        outs, types = ([out[0]], [out[1]]) if out is not None else ([], [])
        self.steps.append(ControlStep(kind, list(ins), outs, types, label, arg, width))
        return len(self.steps) - 1

    def copy(self, src: int, dst: int, t: TensorType, label: str) -> None:
        self.control("copy", [src], label, t.nbytes, out=(dst, t))

    def target(self, at: int) -> None:
        """Points the jump or branch at step ``at`` to the next step appended."""
        step = self.steps[at]
        assert isinstance(step, ControlStep), "only control steps jump"
        step.arg = len(self.steps) - at


def _while(low: _Lowering, launch: KernelLaunch, ins: list[int], outs: list[int], read: list[bool]) -> None:
    """A loop: the carry lives in the loop's output slots (a copy of the operands), the
    condition's steps, a branch out when its pred is false, the body's steps (written
    over the carry where buffer assignment put a new carry value in place), copies of
    the other new carry values, a jump back to the condition. A carry value the body
    passes through unchanged (a loop bound, a captured array) is read from the operand
    itself, never copied in, and copied out once after the loop if anything reads it."""
    node, types, label = launch.node, list(launch.output_types), launch.label
    cp = sub_plan(node.attr["condition"], assign_buffers=low.arena)
    bp = sub_plan(node.attr["body"], assign_buffers=low.arena, donate_carry=True)
    body = node.attr["body"]
    values = body.root.operands if body.root.op is Op.TUPLE else (body.root,)
    # (not ``bp.results[i] == i``: a new carry value written in place has its parameter's slot too)
    through = {i for i, v in enumerate(values) if v.op is Op.PARAMETER and v.attr["index"] == i}
    carry = [ins[i] if i in through else outs[i] for i in range(len(outs))]
    for i, (src, dst, t) in enumerate(zip(ins, outs, types)):
        if i not in through:
            low.copy(src, dst, t, f"{label}(init)")
    top = len(low.steps)
    cond_slot = low.embed(cp, carry, {})
    low.lower(cp, cond_slot, nested=True)
    exit_at = low.control("branch", [cond_slot(cp.results[0])], f"{label}(test)")
    body_slot = low.embed(bp, carry, {})
    low.lower(bp, body_slot, nested=True)
    moves = [(body_slot(s), dst, t) for s, dst, t in zip(bp.results, carry, types) if body_slot(s) != dst]
    overwritten = {dst for _, dst, _ in moves}
    staged = []
    for src, dst, t in moves:
        if src in overwritten:  # a carry value moving to another position: staged, as a copy may overwrite it first
            tmp = low.fresh(t)
            low.copy(src, tmp, t, f"{label}(stage)")
            src = tmp
        staged.append((src, dst, t))
    for src, dst, t in staged:
        low.copy(src, dst, t, f"{label}(carry)")
    low.control("jump", label=f"{label}(loop)", arg=top - len(low.steps))
    low.target(exit_at)
    for i in sorted(through):
        if read[i]:
            low.copy(ins[i], outs[i], types[i], f"{label}(out)")


def _conditional(low: _Lowering, launch: KernelLaunch, ins: list[int], outs: list[int], read: list[bool]) -> None:
    """A switch on the index to one jump per branch; each branch's steps write its results
    into the conditional's output slots (or copy them there), then jump to the end."""
    node, types, label = launch.node, list(launch.output_types), launch.label
    branches = node.attr["branches"]
    width = 1 if node.operands[0].dtype is DType.BOOL else 4
    low.control("switch", [ins[0]], f"{label}(switch)", len(branches), width)
    jumps = [low.control("jump", label=f"{label}(branch {k})") for k in range(len(branches))]
    ends = []
    for k, (br, jump) in enumerate(zip(branches, jumps)):
        low.target(jump)
        bp = sub_plan(br, assign_buffers=low.arena)
        produced = {s for la in bp.launches for s in la.outputs}
        direct: dict[int, int] = {}
        for s, o in zip(bp.results, outs):
            if s in produced and s not in direct:
                direct[s] = o
        slot = low.embed(bp, ins[1:], direct)
        low.lower(bp, slot, nested=True)
        for s, o, t in zip(bp.results, outs, types):
            if slot(s) != o:
                low.copy(slot(s), o, t, f"{label}(result)")
        if k < len(branches) - 1:
            ends.append(low.control("jump", label=f"{label}(end)"))
    for at in ends:
        low.target(at)


#: how each control launch kind is flattened into steps
_CONTROL: dict[str, Callable[[_Lowering, KernelLaunch, list[int], list[int], list[bool]], None]] = {
    "while": _while, "conditional": _conditional}


def _spec(kernels: dict[tuple, KernelSpec], comp: Computation, kind: str, label: str,
          vector_bits: int = 0, gemm: type[GemmSpec] = GemmSpec,
          in_place: tuple[tuple[int, int], ...] = (), prepacked_b: bool = False) -> KernelSpec:
    key = (comp.structural_key, kind, in_place, prepacked_b)
    spec = kernels.get(key)
    if spec is None:
        name = f"k{len(kernels)}_{_ident(label)}"
        spec = gemm(name, comp, kind, vector_bits=vector_bits, prepacked_b=prepacked_b) if kind == "gemm" else \
            transpose.TransposeSpec(name, comp, kind) if kind == "transpose" else \
            KernelSpec(name, comp, kind, in_place)
        kernels[key] = spec
    return spec


def _ident(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)[:40]
