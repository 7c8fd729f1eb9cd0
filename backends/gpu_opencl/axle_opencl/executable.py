"""A compiled module: kernel launches, buffer re-typings and host steps over slots.

Launches are enqueued on the device's in-order queue without waiting in between; the
host waits only when it reads a result (``to_host``) or runs a custom-call."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from axle import profiler
from axle.backend import Buffer, Device, Executable
from axle.ir.ops import OPS

from .forking import check_not_forked
from .plan import AliasStep, HostStep, KernelStep, Plan
from .runtime import DeviceRuntime


class OpenCLExecutable(Executable):
    def __init__(self, plan: Plan, device: Device, rt: DeviceRuntime) -> None:
        self.plan = plan
        self.device = device
        self.rt = rt
        self.kernel_steps = [s for s in plan.steps if isinstance(s, KernelStep)]
        # Build every program now (one compiler call), so errors surface at compile time.
        rt.build_many([s.kernel for s in self.kernel_steps])
        # The executable holds its kernels: the runtime's cache may evict them meanwhile.
        self._kernels: dict[str, Any] = {}
        for s in self.kernel_steps:
            self._kernels[s.kernel.name] = rt.kernel(s.kernel)
            # constants are uploaded once; their buffers live as long as the executable
            s.inputs = [("constbuf", rt.upload(v[1])) if isinstance(v, tuple) and v[0] == "const" else v
                        for v in s.inputs]
        self.constants = {slot: rt.upload(a) for slot, a in plan.constants.items()}

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        check_not_forked()
        env: dict[Any, Any] = dict(self.constants)
        for slot, a in zip(self.plan.params, args, strict=True):
            env[slot] = a.handle
        events: list[tuple[str, str, Any]] = []
        for step in self.plan.steps:
            if isinstance(step, KernelStep):
                ev = self._run_kernel(step, env)
                if ev is not None and profiler.enabled():
                    events.append((step.label or step.kernel.name, step.kernel.what, ev))
            elif isinstance(step, AliasStep):
                env[step.dst] = env.get(step.src)
            else:
                env[step.dst] = self._run_host(step, env)
        if events:
            self._record(events)
        return [Buffer(self.device, t, env.get(slot)) for slot, t in self.plan.results]

    def _run_kernel(self, step: KernelStep, env: dict[Any, Any]) -> Any:
        rt = self.rt
        k = step.kernel
        outs = []
        for dst, (_, _, t) in zip(step.outputs, k.outputs):
            buf = env.get(dst) if step.in_place else rt.alloc(t.nbytes)
            env[dst] = buf
            outs.append(buf)
        if all(b is None for b in outs):
            return None
        args: list[Any] = [b if b is not None else rt.dummy for b in outs]
        for src in step.inputs:
            buf = src[1] if isinstance(src, tuple) and src[0] == "constbuf" else env.get(src)
            args.append(buf if buf is not None else rt.dummy)
        args += [np.int32(v) for v in k.scalars]
        kern = self._kernels[k.name]
        with rt.launch_lock:  # another thread's set_args must not land between these two
            kern.set_args(*args)
            return cl.enqueue_nd_range_kernel(rt.queue, kern, k.global_size, k.local_size)

    def _run_host(self, step: HostStep, env: dict[Any, Any]) -> Any:
        n = step.node
        host = [self.rt.download(env.get(s), o.dtype.np, o.shape) for s, o in zip(step.inputs, n.operands)]
        # The op table's reference checks the target's result against the node's type.
        out = OPS[n.op].reference(*host, **n.attr)
        return self.rt.upload(np.ascontiguousarray(out))

    def _record(self, events: list[tuple[str, str, Any]]) -> None:
        events[-1][2].wait()
        now = profiler.now_us()
        end_ns = events[-1][2].profile.end
        for name, what, ev in events:
            start = now - (end_ns - ev.profile.start) / 1e3
            profiler.kernel_event(name, self.device.name, start, (ev.profile.end - ev.profile.start) / 1e3, op=what)

    def report(self) -> dict[str, Any]:
        return {"kernels": len(self.kernel_steps)}

    def kernel_sources(self) -> dict[str, str]:
        return {s.kernel.name: s.kernel.source for s in self.kernel_steps}

