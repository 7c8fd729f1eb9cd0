"""The ``interpreter`` backend: runs any module with the NumPy reference interpreter.

It is the oracle for every other backend and the host fallback of partial backends.
Its buffers are host NumPy arrays, so transfers are copies and execution is exact
reference semantics."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import profiler
from ..backend import Backend, Buffer, Capabilities, CompileOptions, Device, Executable, LoweringEntry
from ..interpreter import _check_input, eval_node, evaluate
from ..ir.dtypes import ALL_DTYPES, dtype
from ..ir.module import Module
from ..ir.ops import CONTROL_OPS, CORE_PRIMITIVES, OPS, Op
from ..ir.types import TensorType

#: entry nodes that are plumbing, not a launch (a kernel per other node, fusions included)
_NOT_LAUNCHED = (Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.CONSTANT)


class InterpreterExecutable(Executable):
    def __init__(self, module: Module, device: Device) -> None:
        self.module = module
        self.device = device
        self._kernels = sum(1 for n in module.entry.nodes if n.op not in _NOT_LAUNCHED)

    def _evaluate_profiled(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Like ``evaluate``, but one timeline kernel event per launched node, named as
        the printed module names it (``fusion.3 [add, multiply, reduce]``)."""
        comp = self.module.entry
        names = profiler.kernel_names(self.module)
        env: dict[int, Any] = {p.uid: _check_input(p, a) for p, a in zip(comp.parameters, args, strict=True)}
        for n in comp.nodes:
            if n.op is Op.PARAMETER:
                continue
            t0 = profiler.now_us()
            env[n.uid] = eval_node(n, [env[o.uid] for o in n.operands])
            if n.op not in _NOT_LAUNCHED:
                profiler.kernel_event(names[n.uid], self.device.name, t0,
                                      profiler.now_us() - t0, module=self.module.name, op=n.op.value)
        out = env[comp.root.uid]
        return list(out) if isinstance(out, tuple) else [out]

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        if profiler.enabled():
            outs = self._evaluate_profiled([np.asarray(a.handle) for a in args])
        else:
            outs = evaluate(self.module, *[a.handle for a in args])
        types = self.module.entry.result_types
        return [Buffer(self.device, t, o) for t, o in zip(types, outs)]  # type: ignore[arg-type]  # results are arrays

    def launcher(self) -> Callable[[Sequence[Buffer]], list[Buffer]] | None:
        """A one-op module (eager dispatch's): the op's reference bound to its attributes,
        on the arguments as they are (the core guarantees their types). ``evaluate`` would
        only add the checks of those types and a walk over one node."""
        comp = self.module.entry
        node = comp.root
        if (node.op is Op.FUSION or node.traits.control or not isinstance(node.type, TensorType)
                or node.operands != comp.parameters or type(self).execute is not InterpreterExecutable.execute):
            return None  # (a subclass that runs differently, e.g. a test's asynchronous device: its execute)
        ref, kwargs, device, t = OPS[node.op].reference, dict(node.attrs), self.device, node.type
        shape, dt = t.shape, t.dtype.np

        def run(args: Sequence[Buffer]) -> list[Buffer]:
            out = np.asarray(ref(*[a.handle for a in args], **kwargs))
            assert out.shape == shape and out.dtype == dt, (
                f"reference of {node.op.value} returned {out.dtype}{list(out.shape)}, expected {t}")
            return [Buffer(device, t, out)]

        return run

    def report(self) -> dict[str, Any]:
        return {"kernels": self._kernels}


class InterpreterBackend(Backend):
    name = "interpreter"
    priority = 0

    def __init__(self) -> None:
        self._device = Device("interpreter", 0, "NumPy reference interpreter", kind="host")

    def devices(self) -> Sequence[Device]:
        return [self._device]

    def capabilities(self, device: Device) -> Capabilities:
        """Every op of the table, loops, conditionals and extended ops (gather, scatter...)
        included, in every dtype of the IR: it is the host fallback that runs what no other
        device claims, each op by its reference."""
        return Capabilities(ops=CORE_PRIMITIVES | CONTROL_OPS, dtypes=frozenset(ALL_DTYPES))

    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        return InterpreterExecutable(module, device)

    def lowering_entries(self, op: Op) -> list[LoweringEntry]:
        return [LoweringEntry("runs the op table's NumPy reference (shown above) on each node",
                              "axle.interpreter:eval_node")]

    def to_device(self, array: np.ndarray, device: Device) -> Buffer:
        arr = np.array(array, copy=True, order="C")
        return Buffer(device, TensorType(dtype(arr.dtype), arr.shape), arr)

    def to_host(self, buffer: Buffer) -> np.ndarray:
        return buffer.handle
