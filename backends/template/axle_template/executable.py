"""The executable: an ordered list of kernel launches over the entry computation."""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from axle.backend import Buffer, Device, Executable
from axle.errors import BackendError
from axle.ir.module import Module, Node
from axle.ir.ops import OPS, Op
from axle.ir.types import TensorType
from axle.lowering.c import CKernel

from .codegen import RENDERER, compile_program, render_kernel, single_op

#: entry nodes that are not kernels: values the executable moves around itself
_PLUMBING = (Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.CUSTOM_CALL)


@dataclass
class Launch:
    node: Node
    kernel: CKernel
    stages: list[Any] = field(default_factory=list)


class TemplateExecutable(Executable):
    def __init__(self, module: Module, device: Device) -> None:
        self.module = module
        self.device = device
        self.launches: dict[int, Launch] = {}
        self.constants: dict[int, np.ndarray] = {}
        for n in module.entry.nodes:
            if n.op is Op.CONSTANT:
                # HARDWARE: upload constants once, at compile time, into device memory.
                self.constants[n.uid] = np.array(n.attr["value"].array)
            elif n.op not in _PLUMBING:
                fused = n.op is Op.FUSION
                comp = n.attr["computation"] if fused else single_op(n)
                name = f"k{len(self.launches)}_{n.attr['kind'] + '_fusion' if fused else n.op.name.lower()}"
                self.launches[n.uid] = Launch(n, render_kernel(name, comp))
        kernels = [k.kernel for k in self.launches.values()]
        if kernels:
            lib = compile_program(RENDERER.program(kernels))
            for launch in self.launches.values():
                launch.stages = [getattr(lib, name) for name in launch.kernel.stages]

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        entry = self.module.entry
        if len(args) != len(entry.parameters):
            raise BackendError(f"{self.module.name}: {len(args)} arguments given, "
                               f"{len(entry.parameters)} expected ({entry.parameter_types})")
        values: dict[int, Any] = dict(self.constants)
        for p, a in zip(entry.parameters, args):
            if a.type != p.type:
                raise BackendError(f"{self.module.name}: parameter {p.attr['index']} expects {p.type}, got {a.type}")
            values[p.uid] = a.handle
        for n in entry.nodes:
            operands = [values[o.uid] for o in n.operands]
            if n.uid in self.launches:
                values[n.uid] = self._launch(self.launches[n.uid], operands)
            elif n.op is Op.GET_TUPLE_ELEMENT:
                values[n.uid] = operands[0][n.attr["index"]]
            elif n.op is Op.CUSTOM_CALL:  # user Python code: it runs on the host
                with np.errstate(all="ignore"):
                    values[n.uid] = OPS[Op.CUSTOM_CALL].reference(*operands, **n.attr)
        root = entry.root
        outs = list(root.operands) if root.op is Op.TUPLE else [root]
        return [Buffer(self.device, o.type, values[o.uid]) for o in outs]  # type: ignore[arg-type]

    def _launch(self, launch: Launch, inputs: list[np.ndarray]) -> Any:
        # HARDWARE: launch. Allocate the outputs and scratch buffers in device memory and
        # enqueue the kernel; real devices return before the kernel has finished.
        k = launch.kernel
        outs = [np.empty(t.shape, t.dtype.np) for t in k.outputs]
        scratch = [np.empty(t.shape, t.dtype.np) for t in k.scratch]
        arrays = [*map(np.ascontiguousarray, inputs), *k.constants, *outs, *scratch]
        pointers = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
        for stage in launch.stages:  # one after the other: a stage reads what the last wrote
            stage(*pointers)
        return outs[0] if isinstance(launch.node.type, TensorType) else tuple(outs)

    def report(self) -> dict[str, Any]:
        return {"kernels": len(self.launches)}

    def kernel_sources(self) -> dict[str, str]:
        return {k.kernel.name: k.kernel.source for k in self.launches.values()}
