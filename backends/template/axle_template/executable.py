"""The executable: an ordered list of kernel launches over the entry computation."""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from axle.backend import Buffer, Device, Executable
from axle.errors import BackendError
from axle.ir.module import Module
from axle.ir.ops import OPS, Op
from axle.lowering.c import CKernel
from axle.lowering.plan import KernelLaunch, kernel_plan

from .codegen import RENDERER, compile_program, render_kernel

#: launch kinds run on the host by the op table's reference: user code
_HOST_KINDS = ("custom-call",)


@dataclass
class Launch:
    plan: KernelLaunch
    kernel: CKernel | None  # None: a custom-call, a registered Python function run on the host
    stages: list[Any] = field(default_factory=list)


class TemplateExecutable(Executable):
    def __init__(self, module: Module, device: Device) -> None:
        self.module = module
        self.device = device
        # The core's kernel plan: launches in order, over numbered buffer slots
        # (parameters first, then constants, then each launch's outputs).
        self.plan = kernel_plan(module, assign_buffers=False)
        # HARDWARE: upload constants once, at compile time, into device memory.
        self.constants = dict(self.plan.constants)
        # HARDWARE: the launch's kind says how to generate it (docs/ir.md, "Fusions"): an
        # "output" fusion is a dot whose epilogue finishes each element before its store.
        self.launches = [Launch(k, None if k.kind in _HOST_KINDS else
                                render_kernel(_name(i, k), k.computation, k.kind))
                         for i, k in enumerate(self.plan.launches)]
        kernels = [launch.kernel for launch in self.launches if launch.kernel is not None]
        if kernels:
            lib = compile_program(RENDERER.program(kernels))
            for launch in self.launches:
                launch.stages = [lib.function(name) for name in launch.kernel.stages] if launch.kernel else []

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        plan = self.plan
        if len(args) != plan.n_params:
            raise BackendError(f"{self.module.name}: {len(args)} arguments given, {plan.n_params} expected "
                               f"({self.module.entry.parameter_types})")
        values: list[Any] = [None] * plan.n_slots
        for i, (t, a) in enumerate(zip(plan.param_types, args)):
            if a.type != t:
                raise BackendError(f"{self.module.name}: parameter {i} expects {t}, got {a.type}")
            values[i] = a.handle
        for slot, array in self.constants.items():
            values[slot] = array
        for launch in self.launches:
            inputs = [values[s] for s in launch.plan.inputs]
            if launch.kernel is None:  # user Python code: it runs on the host
                with np.errstate(all="ignore"):
                    outputs = [OPS[launch.plan.node.op].reference(*inputs, **launch.plan.node.attr)]
            else:
                outputs = self._launch(launch, inputs)
            for s, out in zip(launch.plan.outputs, outputs):
                values[s] = out
        return [Buffer(self.device, t, values[s]) for s, t in zip(plan.results, plan.result_types)]

    def _launch(self, launch: Launch, inputs: list[np.ndarray]) -> list[np.ndarray]:
        # HARDWARE: launch. Allocate the outputs and scratch buffers in device memory and
        # enqueue the kernel; real devices return before the kernel has finished.
        k = launch.kernel
        assert k is not None
        outs = [np.empty(t.shape, t.dtype.np) for t in k.outputs]
        scratch = [np.empty(t.shape, t.dtype.np) for t in k.scratch]
        arrays = [*map(np.ascontiguousarray, inputs), *k.constants, *outs, *scratch]
        pointers = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
        for stage in launch.stages:  # one after the other: a stage reads what the last wrote
            stage(*pointers)
        return outs

    def report(self) -> dict[str, Any]:
        return {"kernels": sum(launch.kernel is not None for launch in self.launches)}

    def kernel_sources(self) -> dict[str, str]:
        return {k.kernel.name: k.kernel.source for k in self.launches if k.kernel is not None}


def _name(i: int, launch: KernelLaunch) -> str:
    """A C identifier: k0_loop_fusion, k1_reduce..."""
    op = launch.node.op
    return f"k{i}_{launch.kind}_fusion" if op is Op.FUSION else f"k{i}_{op.name.lower()}"
