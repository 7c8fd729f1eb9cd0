"""The backend class: devices, capabilities, buffers and compile."""
from __future__ import annotations

import shutil
from collections.abc import Sequence

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
from axle.ir.ops import OPS, Op
from axle.ir.types import TensorType

from .codegen import COMPILER
from .executable import TemplateExecutable

#: What this device claims: elementwise ops, reductions and a few shape ops. Everything
#: else (dot, transpose, slice, pad, concatenate, ...) runs on the host through the core's
#: partitioner, which is how a partially brought-up device stays usable from day one.
CLAIMED: frozenset[Op] = frozenset(op for op, d in OPS.items() if d.traits.elementwise) | {
    Op.REDUCE, Op.BROADCAST_IN_DIM, Op.RESHAPE, Op.IOTA, Op.CONSTANT, Op.SORT}
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
#: code some ops use beyond those tables
LOWERING_MORE: dict[Op, tuple[tuple[str, str], ...]] = {
    Op.CONVERT: (("the conversion expression", "axle.lowering.c:convert"),),
    Op.REDUCE: (("the dtype a reduction loop accumulates in", "axle.lowering.c:accumulator"),),
    Op.SORT: (("the shared C stable merge sort kernel (one row per device-loop iteration)",
               "axle.lowering.sort:sort_kernel"),),
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

    def capabilities(self, device: Device) -> Capabilities:
        # One flag claims everything: AXLE_FLAGS=--template_claim_all (or claim_all=True).
        claim_all = self.claim_all
        if claim_all is None:
            claim_all = config.backend_flags.get(f"{self.name}_claim_all", "false").lower() in ("1", "true", "yes")
        if claim_all:
            return Capabilities()
        return Capabilities(ops=CLAIMED, op_dtypes=OP_DTYPES)

    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        return TemplateExecutable(module, device)

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
