"""The executable: an ordered list of kernel launches over the entry computation."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from axle.backend import Buffer, Device, Executable
from axle.errors import BackendError
from axle.ir.module import Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType

from .codegen import compile_kernel, render_kernel, single_op


@dataclass
class Launch:
    name: str
    node: Node
    source: str
    fn: Any


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
            elif n.op not in (Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT):
                fused = n.op is Op.FUSION
                comp = n.attr["computation"] if fused else single_op(n)
                name = f"k{len(self.launches)}_{n.attr['kind'] + '_fusion' if fused else n.op.name.lower()}"
                source, env = render_kernel(name, comp)
                self.launches[n.uid] = Launch(name, n, source, compile_kernel(name, source, env))

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
        with np.errstate(all="ignore"):  # NaN/inf results are values, not errors
            for n in entry.nodes:
                if n.uid in self.launches:
                    # HARDWARE: launch. Enqueue the kernel with its argument buffers and an
                    # output allocation; real devices return before the kernel has finished.
                    values[n.uid] = self.launches[n.uid].fn(*[values[o.uid] for o in n.operands])
                elif n.op is Op.GET_TUPLE_ELEMENT:
                    values[n.uid] = values[n.operands[0].uid][n.attr["index"]]
        root = entry.root
        outs = list(root.operands) if root.op is Op.TUPLE else [root]
        return [Buffer(self.device, o.type, self._check(o, values[o.uid])) for o in outs]  # type: ignore[arg-type]

    def _check(self, node: Node, value: Any) -> np.ndarray:
        """Catches a renderer bug here, naming the kernel, instead of as a wrong answer later."""
        arr = np.asarray(value)
        t = node.type
        assert isinstance(t, TensorType)
        if arr.shape != t.shape or arr.dtype != t.dtype.np:
            raise BackendError(f"{self.device.backend} kernel for {node.op.value} produced {arr.dtype}{list(arr.shape)}, "
                               f"expected {t}")
        return arr

    def report(self) -> dict[str, Any]:
        return {"kernels": len(self.launches)}

    def kernel_sources(self) -> dict[str, str]:
        return {k.name: k.source for k in self.launches.values()}
