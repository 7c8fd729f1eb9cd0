"""Compiling a plan's kernels into one LLVM module, and running the plan.

An executable is the plan (steps over buffer slots) plus the addresses of its compiled
kernels. A call fills the slots with the argument arrays and constants, runs the steps in
order (kernels through ctypes, which releases the GIL, so kernels split across the
worker pool truly run in parallel) and returns the result slots. Outputs and temporaries
come from the reusing pool (memory.py); temporaries go back to it when the call returns.
"""
from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from axle import profiler
from axle.backend import Buffer, Device, Executable
from axle.errors import BackendError

from . import threads
from .emitter import INT64_MAX, KernelEmitter, KernelSpec
from .memory import POOL
from .plan import HostStep, KernelStep, Plan
from .target import JitModule, host

KFUNC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)

_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
            "and": np.bitwise_and, "or": np.bitwise_or}


def llvm_module(specs: Sequence[KernelSpec], name: str = "axle") -> ir.Module:
    """One LLVM module holding every kernel, for the host triple."""
    mod = ir.Module(name=name)
    mod.triple = host().triple
    for spec in specs:
        try:
            if spec.kind == "gemm":
                from .gemm import emit

                emit(mod, spec)  # type: ignore[arg-type]
                continue
            KernelEmitter(mod, spec).build()
        except BackendError:
            raise
        except Exception as e:  # an emitter bug must surface as an axle error, not a crash
            raise BackendError(f"cpu: code generation failed for kernel {spec.name} "
                               f"({spec.comp.root.op.value} -> {spec.comp.root.type}): {type(e).__name__}: {e}") from e
    return mod


def interleave_ok(specs: Sequence[KernelSpec]) -> bool:
    """False for kernels mixing transcendental functions with index-dependent selects
    (pad/concatenate), where LLVM's loop interleaving was seen to take minutes."""
    from axle.ir.ops import Op

    for spec in specs:
        ops = {n.op for n in spec.comp.nodes}
        if any(n.traits.transcendental for n in spec.comp.nodes) and ops & {Op.PAD, Op.CONCATENATE}:
            return False
    return True


def compile_kernels(specs: Sequence[KernelSpec], name: str = "axle") -> tuple[JitModule, str]:
    with profiler.span(f"codegen {name}", "codegen", kernels=len(specs)):
        text = str(llvm_module(specs, name))
    with profiler.span(f"llvm {name}", "compile", kernels=len(specs)):
        try:
            return JitModule(text, interleave_ok(specs)), text
        except RuntimeError as e:
            raise BackendError(f"cpu: LLVM rejected the generated code for {name}: {e}") from e


class CompiledKernel:
    """A kernel's entry point in a compiled module (which it keeps alive)."""

    def __init__(self, jit: JitModule, name: str, ir_text: str) -> None:
        self.jit = jit
        self.name = name
        self.ir_text = ir_text
        self.address = jit.address(name)


class _Launch:
    """One kernel step bound to its compiled function, with its measured timing."""

    def __init__(self, step: KernelStep, addr: int) -> None:
        self.step = step
        self.fn = KFUNC(addr)
        self.outer, self.inner = step.spec.loop_sizes
        self.rsize = step.spec.split_reduce_size
        self.parallel: bool | None = None  # decided from the first (single-thread) launch
        self.nbuf = len(step.ins) + len(step.outs)

    def _ptrs(self, arrays: list[np.ndarray]) -> ctypes.Array:
        return (ctypes.c_void_p * self.nbuf)(*[a.ctypes.data for a in arrays])

    def run(self, ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        pool = threads.pool()
        if pool.n > 1 and self.parallel:
            self._run_parallel(pool, ins, outs)
            return
        ptrs = self._ptrs(ins + outs)
        t0 = time.perf_counter()
        self.fn(ptrs, 0, self.outer, 0, self.inner, 0, INT64_MAX)
        if self.parallel is None and pool.n > 1:
            us = (time.perf_counter() - t0) * 1e6
            self.parallel = us > threads.SPLIT_FACTOR * pool.wake_us

    def _run_parallel(self, pool: threads.WorkerPool, ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        n = pool.n
        fn = self.fn
        if self.outer >= n:
            ptrs = self._ptrs(ins + outs)
            pool.run([lambda a=a, b=b: fn(ptrs, a, b, 0, self.inner, 0, INT64_MAX)
                      for a, b in threads.chunks(0, self.outer, n)])
        elif self.rsize >= 2 * n and self.outer * self.inner <= 4 * n:
            # A big reduction into few outputs: each thread reduces a slice of the first
            # reduced axis into its own partial outputs, combined here.
            parts = threads.chunks(0, self.rsize, n)
            partial = [np.empty((len(parts),) + o.shape, o.dtype) for o in outs]
            ptr_sets = [self._ptrs(ins + [p[k, ...] for p in partial]) for k in range(len(parts))]
            pool.run([lambda k=k, a=a, b=b: fn(ptr_sets[k], 0, self.outer, 0, self.inner, a, b)
                      for k, (a, b) in enumerate(parts)])
            for o, p, out_node in zip(outs, partial, self.step.spec.outputs):
                kind = out_node.attr["kind"]
                work = p.astype(np.float32) if p.dtype == np.float16 else p
                ufunc = _COMBINE[kind]
                if p.dtype == np.bool_ and kind in ("sum", "max", "or"):
                    ufunc = np.logical_or
                elif p.dtype == np.bool_:
                    ufunc = np.logical_and
                o[...] = ufunc.reduce(work, axis=0)
        elif self.inner >= 2 * n:
            ptrs = self._ptrs(ins + outs)
            pool.run([lambda a=a, b=b: fn(ptrs, 0, self.outer, a, b, 0, INT64_MAX)
                      for a, b in threads.chunks(0, self.inner, n)])
        else:
            fn(self._ptrs(ins + outs), 0, self.outer, 0, self.inner, 0, INT64_MAX)


class CpuExecutable(Executable):
    def __init__(self, plan: Plan, kernels: dict[str, CompiledKernel], device: Device, compile_ms: float) -> None:
        self.plan = plan
        self.device = device
        self._kernels = kernels
        self.compile_ms = compile_ms
        self._steps: list[tuple[Any, KernelStep | HostStep]] = []
        for step in plan.steps:
            if isinstance(step, KernelStep):
                self._steps.append((_Launch(step, kernels[step.spec.name].address), step))
            else:
                self._steps.append((None, step))

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        plan = self.plan
        if len(args) != plan.n_params:
            raise BackendError(f"cpu: the module takes {plan.n_params} argument(s), got {len(args)}")
        vals: list[Any] = [None] * plan.n_slots
        for k, (a, t) in enumerate(zip(args, plan.param_types)):
            if a.type != t:
                raise BackendError(f"cpu: argument {k} is {a.type}, the module expects {t}")
            vals[k] = a.handle
        for s, arr in plan.constants.items():
            vals[s] = arr
        tracing = profiler.enabled()
        # One arena per call for every temporary (offsets from buffer assignment, with
        # in-place reuse); pooled, so a repeated call touches no fresh pages.
        arena = POOL.empty((plan.temp_bytes,), np.dtype(np.uint8)) if plan.temp_bytes else None
        offsets = plan.temp_offsets
        for launch, step in self._steps:
            ins = [vals[s] for s in step.ins]
            outs = [arena[offsets[s]:offsets[s] + t.nbytes].view(t.dtype.np).reshape(t.shape)
                    if arena is not None and s in offsets else POOL.empty(t.shape, t.dtype.np)
                    for s, t in zip(step.outs, step.out_types)]
            t0 = profiler.now_us() if tracing else 0.0
            if launch is not None:
                launch.run(ins, outs)
            else:
                step.fn(ins, outs)
            if tracing:
                profiler.kernel_event(step.label, self.device.name, t0, profiler.now_us() - t0,
                                      kind="kernel" if launch is not None else "host")
            for s, o in zip(step.outs, outs):
                vals[s] = o
        out = []
        for s, t in zip(plan.results, plan.result_types):
            v = vals[s]
            if s < plan.n_params or s in plan.constants:
                v = np.array(v, copy=True)  # results never alias the caller's inputs
            out.append(Buffer(self.device, t, v))
        return out

    def report(self) -> dict[str, Any]:
        kernels = sum(1 for launch, _ in self._steps if launch is not None)
        return {
            "kernels": kernels,
            "host_steps": len(self._steps) - kernels,
            "steps": [s.label for _, s in self._steps],
            "compile_ms": round(self.compile_ms, 3),
            "threads": threads.thread_count(),
            "target": f"{host().triple} {host().cpu}",
        }

    def _modules(self) -> list[CompiledKernel]:
        seen: dict[int, CompiledKernel] = {}
        for ck in self._kernels.values():
            seen.setdefault(id(ck.jit), ck)
        return list(seen.values())

    def kernel_sources(self) -> dict[str, str]:
        """The LLVM IR (before optimization) of the module(s) holding this plan's kernels."""
        return {"llvm": "\n".join(ck.ir_text for ck in self._modules())}

    def optimized_ir(self) -> str:
        """The LLVM IR after the O3 pipeline (for checking what the vectorizer did)."""
        return "\n".join(ck.jit.optimized_ir for ck in self._modules())

    def assembly(self) -> str:
        return "\n".join(ck.jit.assembly() for ck in self._modules())
