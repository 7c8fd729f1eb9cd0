"""The executable: an ordered list of kernel launches over the entry computation; a loop or
conditional is a host loop or branch over the launches of its sub-computations."""
from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from axle.backend import Buffer, Device, Executable
from axle.errors import BackendError
from axle.ir.module import Module
from axle.ir.ops import OPS, Op, branch_index
from axle.lowering.c import CKernel
from axle.lowering.loops import known_trip_count
from axle.lowering.plan import KernelLaunch, KernelPlan, kernel_plan, sub_plan

from .codegen import RENDERER, compile_program, render_kernel

#: launch kinds run on the host by the op table's reference: user code
_HOST_KINDS = ("custom-call",)
#: launch kinds that run sub-computations (docs/writing-a-backend.md, "Loops and conditionals")
_CONTROL = {"while": lambda n: [n.attr["condition"], n.attr["body"]], "conditional": lambda n: n.attr["branches"]}


@dataclass
class Launch:
    plan: KernelLaunch
    kernel: CKernel | None  # None: a custom-call, a registered Python function run on the host
    stages: list[Any] = field(default_factory=list)
    #: a loop's condition and body, or a conditional's branches: their plans and launches
    subs: list[tuple[KernelPlan, list[Launch]]] = field(default_factory=list)
    trips: int | None = None  # a loop's trip count, when the program fixes it


class TemplateExecutable(Executable):
    def __init__(self, module: Module, device: Device) -> None:
        self.module = module
        self.device = device
        # The core's kernel plan: launches in order, over numbered buffer slots
        # (parameters first, then constants, then each launch's outputs).
        self.plan = kernel_plan(module, assign_buffers=False)
        self.every: list[Launch] = []  # the entry's launches and those of every loop body and branch
        self.launches = _launches(self.plan, "", self.every)
        kernels = [launch.kernel for launch in self.every if launch.kernel is not None]
        if kernels:  # one program for them all
            lib = compile_program(RENDERER.program(kernels))
            for launch in self.every:
                k = launch.kernel
                launch.stages = [lib.function(name) for name in k.stages] if k else []
                n_args = len(k.params) + len(k.constants) + len(k.outputs) + len(k.scratch) if k else 0
                for stage in launch.stages:  # each buffer's address, a Python int (see _launch)
                    stage.argtypes = [ctypes.c_void_p] * n_args

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        plan = self.plan
        if len(args) != plan.n_params:
            raise BackendError(f"{self.module.name}: {len(args)} arguments given, {plan.n_params} expected "
                               f"({self.module.entry.parameter_types})")
        for i, (t, a) in enumerate(zip(plan.param_types, args)):
            if a.type != t:
                raise BackendError(f"{self.module.name}: parameter {i} expects {t}, got {a.type}")
        outs = self._run(plan, self.launches, [a.handle for a in args])
        return [Buffer(self.device, t, out) for out, t in zip(outs, plan.result_types)]

    def launcher(self) -> Callable[[Sequence[Buffer]], list[Buffer]] | None:
        """Eager dispatch's hot path (optional, see ``Executable.launcher``): a plan of one
        kernel on the parameters, writing one output, launched directly. The core passes
        arguments of exactly the parameter types, so execute's checks and the slot
        bookkeeping of ``_run`` go."""
        plan, launch = self.plan, self.launches[0] if len(self.launches) == 1 else None
        k = launch.kernel if launch is not None else None
        if launch is None or k is None or plan.constants or launch.subs or k.constants or k.scratch \
                or (launch.plan.inputs, list(launch.plan.outputs)) != (tuple(range(plan.n_params)), plan.results):
            return None
        stages, device, (result_type,), (out_type,) = launch.stages, self.device, plan.result_types, k.outputs

        def run(args: Sequence[Buffer]) -> list[Buffer]:
            out = np.empty(out_type.shape, out_type.dtype.np)
            try:  # the buffer protocol checks each array is C-contiguous, writable, non-empty and has a format
                pointers = [ctypes.addressof(ctypes.c_char.from_buffer(b.handle)) for b in args]
                pointers.append(ctypes.addressof(ctypes.c_char.from_buffer(out)))  # type: ignore[arg-type]  # a buffer
            except (TypeError, ValueError):  # (a custom call's strided result, bfloat16): the general path
                return self.execute(args)
            for stage in stages:
                stage(*pointers)
            return [Buffer(device, result_type, out)]

        return run

    def _run(self, plan: KernelPlan, launches: list[Launch], args: list[Any]) -> list[Any]:
        """Runs one plan's launches in order on its parameters' buffers; returns its results."""
        values: list[Any] = [None] * plan.n_slots
        values[:len(args)] = args
        # HARDWARE: upload constants once, at compile time, into device memory (each plan's:
        # the entry's, a loop body's...), and bind those buffers here.
        for slot, array in plan.constants.items():
            values[slot] = array
        for launch in launches:
            inputs = [values[s] for s in launch.plan.inputs]
            if launch.subs:
                outputs = self._control(launch, inputs)
            elif launch.kernel is None:  # user Python code: it runs on the host
                with np.errstate(all="ignore"):
                    outputs = [OPS[launch.plan.node.op].reference(*inputs, **launch.plan.node.attr)]
            else:
                outputs = self._launch(launch, inputs)
            for s, out in zip(launch.plan.outputs, outputs):
                values[s] = out
        return [values[s] for s in plan.results]

    def _control(self, launch: Launch, inputs: list[Any]) -> list[Any]:
        """A loop or conditional, driven from the host over its sub-computations' kernels. The
        carry stays in device memory: the host reads back only a loop's pred (one byte per
        trip, none when the trip count is known at compile time) or a conditional's index."""
        if launch.plan.kind == "conditional":
            # HARDWARE: copy out. Read the index back (wait for the kernel computing it).
            plan, launches = launch.subs[branch_index(inputs[0], len(launch.subs))]
            return self._run(plan, launches, inputs[1:])
        (cond, cond_launches), (body, body_launches) = launch.subs
        trips, carry = 0, inputs
        # HARDWARE: copy out. The pred, read back each trip, unless the trip count is known.
        while (trips < launch.trips) if launch.trips is not None else self._run(cond, cond_launches, carry)[0]:
            carry, trips = self._run(body, body_launches, carry), trips + 1
        return carry

    def _launch(self, launch: Launch, inputs: list[np.ndarray]) -> list[np.ndarray]:
        # HARDWARE: launch. Allocate the outputs and scratch buffers in device memory and
        # enqueue the kernel; real devices return before the kernel has finished.
        k = launch.kernel
        assert k is not None
        outs = [np.empty(t.shape, t.dtype.np) for t in k.outputs]
        scratch = [np.empty(t.shape, t.dtype.np) for t in k.scratch]
        arrays = [*map(np.ascontiguousarray, inputs), *k.constants, *outs, *scratch]
        pointers = [*map(_address, arrays)]
        for stage in launch.stages:  # one after the other: a stage reads what the last wrote
            stage(*pointers)
        return outs

    def report(self) -> dict[str, Any]:
        return {"kernels": sum(launch.kernel is not None for launch in self.every)}

    def kernel_sources(self) -> dict[str, str]:
        return {k.kernel.name: k.kernel.source for k in self.every if k.kernel is not None}


def _address(a: np.ndarray) -> int:
    """The address of a C-contiguous array's data: ctypes.addressof a view of it costs a
    quarter of ``a.ctypes.data``, but needs a writable, non-empty buffer with a format
    (bfloat16 has none): the others take the slow way."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))  # type: ignore[arg-type]  # an ndarray is a buffer
    except (TypeError, ValueError):
        return a.ctypes.data


def _launches(plan: KernelPlan, prefix: str, every: list[Launch]) -> list[Launch]:
    """A plan's launches, each with its kernel rendered (not yet compiled); a loop or
    conditional with the launches of its sub-computations' plans (kernel names prefixed
    with the launch's: one program holds them all). ``every`` collects them, nested ones too."""
    out = []
    for i, k in enumerate(plan.launches):
        if k.kind in _CONTROL:
            plans = [sub_plan(c, assign_buffers=False) for c in _CONTROL[k.kind](k.node)]
            out.append(Launch(k, None, subs=[(p, _launches(p, f"{prefix}k{i}s{j}_", every))
                                             for j, p in enumerate(plans)],
                              trips=known_trip_count(k.node) if k.kind == "while" else None))
        else:
            # HARDWARE: the launch's kind says how to generate it (docs/ir.md, "Fusions"): an
            # "output" fusion is a dot whose epilogue finishes each element before its store.
            out.append(Launch(k, None if k.kind in _HOST_KINDS else render_kernel(prefix + _name(i, k),
                                                                                  k.computation, k.kind)))
    every += out
    return out


def _name(i: int, launch: KernelLaunch) -> str:
    """A C identifier: k0_loop_fusion, k1_reduce..."""
    op = launch.node.op
    return f"k{i}_{launch.kind}_fusion" if op is Op.FUSION else f"k{i}_{op.name.lower()}"
