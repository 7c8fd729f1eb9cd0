"""The backend class: devices, capabilities, buffers and compile."""
from __future__ import annotations

import shutil
from collections.abc import Sequence
from contextlib import AbstractContextManager

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
from axle.ir.dtypes import ALL_DTYPES, DType, dtype
from axle.ir.module import Module
from axle.ir.ops import BASE_PRIMITIVES, OPS, Op
from axle.ir.types import TensorType
from axle.passes.policy import FusionPolicy

from .batch import PlannedOnly, batch, batching
from .codegen import COMPILER
from .executable import TemplateExecutable

#: What this device claims: elementwise ops, reductions and a few shape ops. Everything
#: else (dot, transpose, slice, pad, concatenate, ...) runs on the host through the core's
#: partitioner, which is how a partially brought-up device stays usable from day one.
#: extended primitives the shared C renderer lowers (the others get the core's decomposition)
CLAIMED_EXTENDED: frozenset[Op] = frozenset({
    # indexing: indexed loads and update kernels
    Op.GATHER, Op.DYNAMIC_SLICE, Op.SCATTER, Op.DYNAMIC_UPDATE_SLICE})
#: loops and conditionals: host loops over their sub-computations' kernels (executable.py),
#: claimed only with every op inside them (Capabilities._body_refusal)
CLAIMED_CONTROL: frozenset[Op] = frozenset({Op.WHILE, Op.CONDITIONAL})
CLAIMED: frozenset[Op] = frozenset(op for op, d in OPS.items() if d.traits.elementwise) | {
    Op.REDUCE, Op.BROADCAST_IN_DIM, Op.RESHAPE, Op.IOTA, Op.CONSTANT, Op.SORT} | CLAIMED_EXTENDED | CLAIMED_CONTROL
#: The dtypes this device runs: all of the IR's (the shared C renderer computes float16 and
#: bfloat16 in float and rounds once per op).
DTYPES: frozenset[DType] = frozenset(ALL_DTYPES)
#: Per-op dtype limits, e.g. an accumulator without a half-precision mode.
OP_DTYPES: dict[Op, frozenset[DType]] = {Op.REDUCE: frozenset(ALL_DTYPES) - {DType.FLOAT16}}

#: Where ops are lowered, for `axle explain-op` and docs/ops/ (names resolve only when it
#: runs; ".x:Y" is this package's module x). HARDWARE: point these at your code generator's
#: tables as you replace the shared C renderer (axle.lowering.c) with your own.
LOWERING: tuple[tuple[str, str], ...] = (
    ("kernel-body rule of the shared C renderer", "axle.lowering.c:_RULES"),
    *((f"C expression ({t.lower().replace('_', ' ')})", f"axle.lowering.c:{t}")
      for t in ("FLOAT_UNARY", "FLOAT_BINARY", "INT_UNARY", "INT_BINARY", "BOOL_UNARY", "BOOL_BINARY")),
)
_HOST_LOOP = ("a host loop or branch over the sub-computations' kernels", ".executable:TemplateExecutable._control")
#: code some ops use beyond those tables
LOWERING_MORE: dict[Op, tuple[tuple[str, str], ...]] = {
    Op.CONVERT: (("the conversion expression", "axle.lowering.c:convert"),),
    Op.REDUCE: (("the dtype a reduction loop accumulates in", "axle.lowering.c:accumulator"),),
    Op.SORT: (("the shared C stable merge sort kernel (one row per device-loop iteration)",
               "axle.lowering.sort:sort_kernel"),),
    # indexing
    Op.GATHER: (("the shared index map (clamped starts plus the window offset)", "axle.lowering.index:gather_index"),),
    Op.DYNAMIC_SLICE: (("the shared index map (clamped starts)", "axle.lowering.index:dynamic_slice_index"),),
    Op.SCATTER: (("an update kernel: a copy stage, then the windows in index order",
                  "axle.lowering.c:_KernelBuilder.update"),),
    Op.DYNAMIC_UPDATE_SLICE: (("an update kernel: a copy stage, then the window",
                               "axle.lowering.c:_KernelBuilder.update"),),
    # control flow: a loop's pred (unless its trip count is known) or a branch index read back each time
    Op.WHILE: (_HOST_LOOP,), Op.CONDITIONAL: (_HOST_LOOP,),
}


class TemplateBackend(Backend):
    name = "template"
    # The contract version this backend was written against; a core with another major
    # version refuses it with a message instead of crashing later.
    api_version = (1, 0)
    # Below the host backends, so installing this backend never changes the default device.
    # A real accelerator ranks above them (e.g. 100).
    priority = -10

    def __init__(self, claim_all: bool | None = None) -> None:
        # HARDWARE: open the driver and enumerate devices here. Raise
        # axle.backend.BackendUnavailable("why") when the driver or device is missing: the
        # reason is shown by `axle devices` and `axle doctor`, and other backends keep working.
        self.claim_all = claim_all
        if shutil.which(COMPILER[0]) is None:  # the toolchain is this device's driver
            raise BackendUnavailable(f"the C compiler {COMPILER[0]!r} is not on PATH")
        self._devices = [Device(self.name, 0, "host memory, C kernels (template backend)",
                                kind="accelerator", properties={"memory": "host"})]

    def devices(self) -> Sequence[Device]:
        return self._devices

    def _claims_all(self) -> bool:
        # One flag claims every op the renderer lowers: AXLE_FLAGS=--template_claim_all (or
        # claim_all=True); other extended primitives still get their decomposition.
        if self.claim_all is not None:
            return self.claim_all
        return config.backend_flags.get(f"{self.name}_claim_all", "false").lower() in ("1", "true", "yes")

    def capabilities(self, device: Device) -> Capabilities:
        # HARDWARE: list the dtypes your device computes; the others run on the host.
        if self._claims_all():
            return Capabilities(ops=BASE_PRIMITIVES | CLAIMED_EXTENDED | CLAIMED_CONTROL, dtypes=DTYPES)
        return Capabilities(ops=CLAIMED, dtypes=DTYPES, op_dtypes=OP_DTYPES)

    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        if batching():  # inside batched_builds: the kernels go to the batch's build
            return PlannedOnly(module, device)
        return TemplateExecutable(module, device)

    def batched_builds(self, device: Device) -> AbstractContextManager[None]:
        # Optional: many modules' kernels built by one toolchain call (batch.py), for callers
        # compiling many small modules (the conformance kit). Leave it out at first.
        return batch()

    def fusion_policy(self) -> FusionPolicy:
        # HARDWARE: what your kernel generator can build from one fusion. dot_epilogue: a
        # dot takes its elementwise consumers (bias add, activation...) as an "output"
        # fusion, which the shared C renderer computes per element, dot first. Only where
        # the device claims dot_general: fusion runs before partitioning, and a fusion
        # holding an unclaimed dot would take its epilogue to the host with it.
        return FusionPolicy(max_fusion_nodes=128, row_fusion=True, multi_output=True,
                            dot_epilogue=self._claims_all())

    def lowering_entries(self, op: Op) -> list[LoweringEntry]:
        # Optional: only `axle explain-op` reads it. Tables without `op` are left out.
        return [*(LoweringEntry(what, where, op) for what, where in LOWERING),
                *(LoweringEntry(what, where) for what, where in LOWERING_MORE.get(op, ())),
                LoweringEntry("this device's C dialect (type names, qualifiers, the loop over threads)",
                              ".codegen:Dialect")]

    def to_device(self, array: np.ndarray, device: Device) -> Buffer:
        # HARDWARE: allocate device memory for the array, then copy in its bytes.
        handle = np.array(array, copy=True, order="C")
        return Buffer(device, TensorType(dtype(handle.dtype), handle.shape), handle)

    def to_host(self, buffer: Buffer) -> np.ndarray:
        # HARDWARE: copy out. Wait for the work writing this buffer, then read it back.
        return np.array(buffer.handle, copy=True)

    def free(self, buffer: Buffer) -> None:
        # HARDWARE: release device memory now instead of waiting for garbage collection.
        pass

    def synchronize(self, device: Device) -> None:
        # HARDWARE: synchronize. Block until every queued kernel and copy has finished
        # (clFinish, a stream sync...). Host-memory kernels run synchronously already.
        pass
