"""The ``interpreter`` backend: runs any module with the NumPy reference interpreter.

It is the oracle for every other backend and the host fallback of partial backends.
Its buffers are host NumPy arrays, so transfers are copies and execution is exact
reference semantics."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import Backend, Buffer, CompileOptions, Device, Executable
from ..interpreter import evaluate
from ..ir.module import Module
from ..ir.ops import Op
from ..ir.types import TensorType


class InterpreterExecutable(Executable):
    def __init__(self, module: Module, device: Device) -> None:
        self.module = module
        self.device = device
        self._kernels = sum(1 for n in module.entry.nodes
                            if n.op not in (Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.CONSTANT))

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        outs = evaluate(self.module, *[a.handle for a in args])
        types = self.module.entry.result_types
        return [Buffer(self.device, t, o) for t, o in zip(types, outs)]  # type: ignore[arg-type]

    def report(self) -> dict[str, Any]:
        return {"kernels": self._kernels}


class InterpreterBackend(Backend):
    name = "interpreter"
    priority = 0

    def __init__(self) -> None:
        self._device = Device("interpreter", 0, "NumPy reference interpreter", kind="host")

    def devices(self) -> Sequence[Device]:
        return [self._device]

    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        return InterpreterExecutable(module, device)

    def to_device(self, array: np.ndarray, device: Device) -> Buffer:
        from ..ir.dtypes import dtype

        arr = np.array(array, copy=True, order="C")
        return Buffer(device, TensorType(dtype(arr.dtype), arr.shape), arr)

    def to_host(self, buffer: Buffer) -> np.ndarray:
        return buffer.handle
