"""axle-cpu: the CPU backend. Fused computations are lowered to LLVM IR with llvmlite,
optimized for the host CPU at O3 (vectorized), JIT-compiled with MCJIT, and split across
cores; ``axle_cpu.aot`` writes the same code as an object file plus a C header.

See docs/backend-cpu.md for the design and docs/aot.md for ahead-of-time compilation.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from axle.backend import (
    Backend,
    BackendUnavailable,
    Buffer,
    Capabilities,
    CompileOptions,
    Device,
    Executable,
    LoweringEntry,
)
from axle.config import config
from axle.ir.computation import called_computations
from axle.ir.dtypes import ALL_DTYPES, DType
from axle.ir.dtypes import dtype as to_dtype
from axle.ir.module import Module, Node
from axle.ir.opcodes import Op
from axle.ir.ops import BASE_PRIMITIVES
from axle.ir.types import TensorType
from axle.lru import LRU
from axle.passes.conv_layout import ConvLayout
from axle.passes.policy import FusionPolicy

if TYPE_CHECKING:  # imported where used: llvmlite loads only when compiling
    from .plan import Plan
    from .target import JitModule

__all__ = ["CpuBackend", "CpuExecutable"]

#: extended primitives lowered natively (the others get the core's decomposition)
CLAIMED_EXTENDED: frozenset[Op] = frozenset({
    # indexing: indexed loads in loop kernels, update kernels in place (emitter.py)
    Op.GATHER, Op.DYNAMIC_SLICE, Op.SCATTER, Op.DYNAMIC_UPDATE_SLICE,
    # windowed: the implicit GEMM (conv.py), for the convolutions it computes
    Op.CONVOLUTION,
    # windowed reductions: one output element per iteration, a loop over the window (emitter.py)
    Op.REDUCE_WINDOW})

#: the dtypes of the claimed convolutions: those the GEMM kernel computes (gemm.GEMM_DTYPES,
#: named here so that asking for capabilities does not load llvmlite)
CONV_DTYPES = frozenset({DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64})

# control flow: loops and conditionals run inside the native step runner (runner.py)
#: ops the cpu runs as Python host steps, which the native runner cannot call from a loop
HOST_STEP_OPS: frozenset[Op] = frozenset({Op.CUSTOM_CALL, Op.SORT})
CLAIMED_CONTROL: frozenset[Op] = frozenset({Op.WHILE, Op.CONDITIONAL})


def _host_step_inside(node: Node) -> str | None:
    """Refuses a loop or conditional that runs a custom call or a sort anywhere inside
    (nested computations included): those are host steps, so it runs whole on the host."""
    todo = list(called_computations(node))
    while todo:
        comp = todo.pop()
        for n in comp.nodes:
            if n.op in HOST_STEP_OPS:
                return (f"{node.op.value} runs {n.op.value} ({n.name or n.op.value}), a host step on the cpu; "
                        f"the native loop runner cannot call Python")
            todo += called_computations(n)
    return None

#: kernels kept per cached plan (a plan usually holds a few kernels; distinct plans share some)
_KERNELS_PER_PLAN = 2

#: Where ops are lowered, for `axle explain-op` (names resolve only when it runs): every
#: op's entry in the emitter's table, plus the kernels and host steps some ops get
_LOWERING_TABLE = ".emitter:LOWERING"
_LOWERING_MORE: dict[Op, tuple[tuple[str, str], ...]] = {
    Op.REDUCE: (("partial results combined per reduce kind (float sums and products reassociable)",
                 ".emitter:_COMBINE"),),
    Op.DOT_GENERAL: (("a dot on its own: the GEMM kernel (register tiles, vectorized)", ".gemm:GemmSpec"),
                     ("the GEMM kernel's emitter", ".gemm:emit"),
                     ("a float dot under --cpu_blas=true: NumPy's BLAS as a host step", ".plan:matmul_host")),
    Op.CONVERT: (("element conversion with the interpreter's rules (float->int saturates, NaN->0)",
                  ".emitter:convert_value"),),
    Op.FUSION: (("a fusion is one kernel: a loop nest of its kind over the fused ops", ".emitter:KernelEmitter"),),
    Op.CUSTOM_CALL: (("a host step calling the registered Python reference", ".plan:_custom_host"),),
    Op.SORT: (("a library-call step over the host buffers", ".plan:sort_host"),
              ("NumPy's vectorized sorts made exact (stable, NaN and signed zeros in order)", ".sort:host_sort"),),
    # layout
    Op.TRANSPOSE: (("a big transpose (and reverses) that moves the contiguous dim: the cache-blocked tile kernel",
                    ".transpose:blocked"), ("the blocked transpose's emitter", ".transpose:emit")),
    # indexing
    Op.GATHER: (("the start indices loaded as 64-bit indices at their loop level", ".emitter:loaded_index"),
                ("the shared index map (clamped starts plus the window offset)", "axle.lowering.index:gather_index")),
    Op.DYNAMIC_SLICE: (("the shared index map (clamped starts)", "axle.lowering.index:dynamic_slice_index"),),
    Op.SCATTER: (("an update kernel: the operand copied unless its buffer was handed over, then the windows",
                  ".emitter:build_update"),
                 ("the updates in index order, each window inside; out-of-bounds windows dropped",
                  ".emitter:_write_windows"),
                 ("the update loops, start indices and targets", "axle.lowering.index:update_target")),
    Op.DYNAMIC_UPDATE_SLICE: (("an update kernel: the operand copied unless its buffer was handed over, then the "
                               "window", ".emitter:build_update"),
                              ("the shared index map (clamped starts)", "axle.lowering.index:dynamic_slice_index")),
    # windowed
    Op.CONVOLUTION: (("an implicit GEMM on the GEMM kernel (its epilogue too), no im2col in memory", ".conv:ConvSpec"),
                     ("the GEMM view: groups and pixels, K, the output as C in place", ".conv:conv_layout"),
                     ("what it refuses (the core's im2col decomposition runs instead)", ".conv:conv_refusal"),
                     ("patches read in place through row pointers or packed with masks", ".gemm:Window")),
    Op.REDUCE_WINDOW: (("a loop kernel, one output element per iteration: the window positions in row-major "
                        "order, padding and dilation holes giving the kind's identity", ".emitter:_reduce_window"),
                       ("the operand coordinates a window position reads, and whether it is real",
                        "axle.lowering.index:reduce_window_index")),
    # control flow
    Op.WHILE: (("condition and body flattened into the steps between control records", ".plan:_while"),
               ("the native step runner: kernels, copies, jumps, branches, switches", ".runner:_run_steps_body"),
               ("big body kernels split by the native worker pool, without Python", ".pool_ir:pool_ir"),
               ("the loop in an AOT object: the same records as LLVM branches", ".aot:build_entry"),
               ("refused when a custom call or sort runs inside (a host step)", "axle_cpu:_host_step_inside")),
    Op.CONDITIONAL: (("a switch on the index to one jump per branch", ".plan:_conditional"),
                     ("the native step runner: kernels, copies, jumps, branches, switches", ".runner:_run_steps_body"),
                     ("refused when a custom call or sort runs inside (a host step)", "axle_cpu:_host_step_inside")),
}


#: The implicit GEMM's fastest layout (docs/backend-cpu.md, "Convolution layout"): NHWC
#: with HWIO kernels reads patches in place and runs 1.2-1.4x faster than NCHW/OIHW (batch
#: 1, 56x56 to 14x14 maps; a batch-32 NCHW 3x3 layer 1.3x, its transposes included);
#: NHWC with OIHW kernels is slower than both. Per-call weight transposes (parameters)
#: are repaid only by convolutions with about 1024 output pixels or more (batch-1 stages
#: 3-4 of a ResNet lose, 7x7 maps are faster in NCHW).
CONV_LAYOUT = ConvLayout(lhs="NSC", rhs="SIO", out="NSC", kernel_copy_min_pixels=1024)
#: the core's phase split of lhs-dilated convolutions (passes/conv_phases.py): a strided
#: convolution's input gradient without the multiply-adds on its dilation's zeros
#: (docs/backend-cpu.md, "Convolution layout")
CONV_PHASE_SPLIT = True


def _conv_refusal(node: Node) -> str | None:
    """The claim on a convolution (conv.py imports llvmlite: loaded when first asked)."""
    from .conv import conv_refusal

    return conv_refusal(node)


class CpuBackend(Backend):
    """The ``cpu`` backend: one device, ``cpu:0``, using every core of the process."""

    name = "cpu"
    # Above OpenCL CPU devices (50), below OpenCL GPUs (300): on a machine without a GPU
    # the LLVM backend is the default device.
    priority = 100

    def __init__(self) -> None:
        try:
            from .target import host

            self._host = host()
        except Exception as e:  # no usable LLVM: report it, do not break axle
            raise BackendUnavailable(f"llvmlite cannot target this host: {type(e).__name__}: {e}") from e
        from .threads import device_count, device_threads

        # --cpu_device_count=N splits the host into cpu:0..N-1, each with its share of the
        # threads (threads.py), so that multi-device programs run on any machine
        self._devices = [Device("cpu", i, f"{self._host.cpu} via LLVM ({device_threads()} threads)", kind="cpu",
                                properties={"triple": self._host.triple, "vector_bits": self._host.vector_bits})
                         for i in range(device_count())]
        self._device = self._devices[0]
        # Both bounded by --jit_cache_size: an evicted plan's or kernel's LLVM engine is
        # freed once no executable uses it (the caches hold the only other reference).
        self._cache: LRU[tuple] = LRU()  # module fingerprint -> (plan, kernels)
        self._kernel_cache: LRU[object] = LRU(lambda: _KERNELS_PER_PLAN * config.jit_cache_size)

    def devices(self) -> Sequence[Device]:
        return list(self._devices)

    def capabilities(self, device: Device) -> Capabilities:
        return Capabilities(ops=BASE_PRIMITIVES | CLAIMED_EXTENDED | CLAIMED_CONTROL, dtypes=frozenset(ALL_DTYPES),
                            op_dtypes={Op.CONVOLUTION: CONV_DTYPES},
                            predicates={Op.CONVOLUTION: _conv_refusal,
                                        **{op: _host_step_inside for op in CLAIMED_CONTROL}},
                            conv_layout=CONV_LAYOUT, conv_phase_split=CONV_PHASE_SPLIT)

    def fusion_policy(self) -> FusionPolicy:
        # Row fusions and multi-output fusions map directly onto the loop nest; a dot takes
        # its elementwise consumers into the GEMM, which finishes each tile with them; a
        # convolution too (its implicit GEMM is the same kernel). A big transpose that moves
        # the contiguous axis is the blocked transpose kernel (transpose.py), not a strided
        # access recomputing its producers inside a loop fusion. The threshold is
        # transpose.MIN_BYTES written out (transpose.py imports llvmlite, which loads only
        # when compiling); test_cpu_transpose checks that the two agree.
        # A slow op (rsqrt, division, a transcendental) on a small value that a broadcast
        # repeats along a kernel's innermost dim (an NHWC batch norm's per-feature rsqrt) is
        # a kernel of its own above 16K elements, where re-evaluating it per element costs
        # more than a launch (docs/backend-cpu.md, "Convolution", epilogue).
        return FusionPolicy(max_fusion_nodes=128, row_fusion=True, multi_output=True, dot_epilogue=True,
                            conv_epilogue=True, max_fused_strided_transpose_bytes=1 << 20,
                            max_broadcast_recompute_elements=1 << 14)

    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        from axle import profiler

        from .executable import CpuExecutable
        from .plan import build_plan

        key = (module.entry.structural_key, tuple(sorted(options.flags.items())))
        splits = _splits_key(module.name, options.module_digest)
        hit = self._cache.get(key)
        if hit is not None:
            plan, kernels = hit
            return CpuExecutable(plan, kernels, device, 0.0, splits)
        t0 = time.perf_counter()
        with profiler.span(f"compile {module.name}", "compile", backend="cpu"):
            # NumPy's BLAS for float dots only when asked (--cpu_blas=true): the GEMM
            # kernel was measured faster here at every shape (docs/backend-cpu.md).
            # constant GEMM operands (weights) packed once, here, unless --cpu_prepack=false
            plan = build_plan(module, blas=options.flags.get("cpu_blas", "false").lower() == "true",
                              prepack=options.flags.get("cpu_prepack", "true").lower() != "false")
            kernels, whole = self._kernels(plan, module.name, options.module_digest)
        ms = (time.perf_counter() - t0) * 1e3
        if whole is not None:
            self._store_plan(plan, whole, module.name, options)
        plan, kernels = self._cache.put(key, (plan, kernels))
        return CpuExecutable(plan, kernels, device, ms, splits)

    def cached_executable(self, device: Device, options: CompileOptions) -> Executable | None:
        """The executable of a cached plan (plan_cache.py) and the object code of its kernels,
        both under the optimized module's digest: nothing is parsed, planned or emitted. None
        when either is missing (the core then parses the module and calls ``compile``)."""
        from . import target
        from .executable import load_cached

        digest = options.module_digest
        if digest is None or not target.DISK.enabled():
            return None
        return load_cached(digest, device, lambda name: _splits_key(name, digest))

    def _store_plan(self, plan: Plan, jit: JitModule, name: str, options: CompileOptions) -> None:
        """Keeps ``plan`` for ``cached_executable``; ``jit`` holds all its kernels, its object
        code stored under the module's digest. Written where that object was compiled, or
        where it was found while the plan was not (``options.cache_checked``: the core
        asked for it just before)."""
        from . import plan_cache
        from .executable import _settings

        if options.module_digest is None or (jit.loaded and not options.cache_checked):
            return  # stored by the process that compiled the object (unless a host step kept it out)
        payload = plan_cache.entry(plan, name, jit.interleave)
        if payload is not None:
            plan_cache.store(plan_cache.plan_key(options.module_digest, _settings()), payload)

    def _kernels(self, plan: Plan, name: str, module_digest: str | None = None
                 ) -> tuple[dict[str, object], JitModule | None]:
        """Compiled kernels of a plan by name; each distinct kernel (same computation and
        kind) is compiled once per process, the missing ones together in one LLVM module.
        When all are missing (a new process) and the core gave the module's digest, the
        object code's disk key is made from it (``executable.module_key``), not from the
        kernels' descriptions; that module is returned too (else None)."""
        from .executable import CompiledKernel, compile_kernels

        out: dict[str, object] = {}
        missing = []
        for spec in plan.kernels.values():
            # in_place: the same computation reading an operand through the output's
            # pointer is another kernel (run where the two buffers differ, it reads garbage)
            # (and a GEMM reading its B prepacked is another kernel than the one packing it)
            k = (spec.comp.structural_key, spec.kind, spec.in_place, getattr(spec, "prepacked_b", False))
            got = self._kernel_cache.get(k)
            if got is None:
                missing.append((k, spec))
            else:
                out[spec.name] = got
        if not missing:
            return out, None
        whole = module_digest if len(missing) == len(plan.kernels) else None
        jit = compile_kernels([s for _, s in missing], name, whole)
        for k, spec in missing:
            out[spec.name] = self._kernel_cache.put(k, CompiledKernel(jit, spec.name))
        return out, jit if whole is not None else None

    def lowering_entries(self, op: Op) -> list[LoweringEntry]:
        return [LoweringEntry("LLVM IR for one element, from the emitter's op table", _LOWERING_TABLE, op),
                *(LoweringEntry(what, where) for what, where in _LOWERING_MORE.get(op, ()))]

    def to_device(self, array: np.ndarray, device: Device) -> Buffer:
        from .executable import CpuBuffer
        from .memory import POOL

        src = np.asarray(array)
        key = (src.dtype, src.shape)
        t = _TYPES.get(key)
        if t is None:  # (a small array's copy costs less than deriving its type again)
            if len(_TYPES) >= 4096:
                _TYPES.clear()
            t = _TYPES[key] = TensorType(to_dtype(src.dtype), tuple(src.shape))
        out, addr = POOL.alloc(t.shape, t.dtype.np)
        np.copyto(out, src, casting="no")
        return CpuBuffer(device, t, out, addr)

    def to_host(self, buffer: Buffer) -> np.ndarray:
        return buffer.handle

    def free(self, buffer: Buffer) -> None:
        # The pool recycles a mapping when its last array dies; nothing to do eagerly.
        return None


#: to_device's array types by (NumPy dtype, shape), bounded (cleared when full)
_TYPES: dict[tuple[np.dtype, tuple[int, ...]], TensorType] = {}


def _splits_key(name: str, module_digest: str | None) -> bytes | None:
    """Where the split decisions of the plan of the optimized module ``module_digest`` are
    kept across processes (decisions.py; None: no digest, or the compile cache is off)."""
    from . import decisions, target, threads
    from .executable import LONG_FACTOR, LONG_SLOWER, OVERLAP, SPLIT_GAIN, _Launch, _settings

    if module_digest is None or not target.DISK.enabled():
        return None
    # the rule that made the decisions is part of them (its constants: a test changes them)
    rule = (f"factor={threads.SPLIT_FACTOR} gain={SPLIT_GAIN} order={_Launch.ORDER} long={LONG_FACTOR}/{LONG_SLOWER}"
            f" overlap={OVERLAP}")
    return decisions.split_key(module_digest, name, f"{_settings()}\0{rule}", threads.device_threads())


def __getattr__(name: str) -> object:
    if name == "CpuExecutable":
        from .executable import CpuExecutable

        return CpuExecutable
    raise AttributeError(name)
