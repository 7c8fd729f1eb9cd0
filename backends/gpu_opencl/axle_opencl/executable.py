"""A compiled module: kernel launches, buffer re-typings, host steps, loops and branches
over slots.

Launches are enqueued on the device's in-order queue without waiting in between; the
host waits only when it reads a result (``to_host``), runs a custom-call, tests a loop's
condition (one byte per trip; none when the trip count is known at compile time) or picks
a conditional's branch (its index). Loops and branches run the plans of their
sub-computations, built with the rest, over the carry's device buffers."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from axle import profiler
from axle.backend import Buffer, Device, Executable
from axle.errors import BackendError
from axle.ir.ops import OPS, branch_index

from . import forking as _forking
from .forking import check_not_forked
from .kernel_object import new_kernel
from .plan import AliasStep, BranchStep, HostStep, KernelStep, LoopStep, Plan
from .runtime import HOLD_BYTES, DeviceRuntime


class OpenCLExecutable(Executable):
    def __init__(self, plan: Plan, device: Device, rt: DeviceRuntime) -> None:
        self.plan = plan
        self.device = device
        self.rt = rt
        plans = list(_plans(plan))  # the entry's, then those of loop bodies and branches
        self.kernel_steps = _kernel_steps(plan)
        # Build every program now (one compiler call), so errors surface at compile time.
        rt.build_many([s.kernel for s in self.kernel_steps])
        # The executable holds its programs: the runtime's cache may evict them meanwhile.
        self._kernels: dict[str, Any] = {}
        #: per step its own kernel object with the size arguments (``Kernel.scalars``) bound
        #: once: kernels are shared by source across shapes, and setting a scalar argument
        #: costs PoCL tens of microseconds a call where a buffer argument costs 0.1
        self._launch: dict[int, Any] = {}
        for s in self.kernel_steps:
            self._kernels[s.kernel.name] = prg = rt.program(s.kernel)
            self._launch[id(s)] = own = new_kernel(prg, s.kernel.name)
            base = len(s.kernel.outputs) + len(s.inputs)
            for j, v in enumerate(s.kernel.scalars):
                own.set_arg(base + j, np.int32(v))
            # constants are uploaded once; their buffers live as long as the executable
            s.inputs = [("constbuf", rt.upload(v[1])) if isinstance(v, tuple) and v[0] == "const" else v
                        for v in s.inputs]
        self._constants = {id(p): {slot: rt.upload(a) for slot, a in p.constants.items()} for p in plans}
        self.constants = self._constants[id(plan)]
        # a loop or branch never writes into these (a body may hand one on as a carry)
        self._constant_buffers = [b for c in self._constants.values() for b in c.values() if b is not None]
        #: a plan too large to wait behind the runtime's gate (runtime.HOLD_BYTES): its
        #: kernels start at once, with the eager launches held before them
        self._starts = _nbytes(plan) > HOLD_BYTES
        self._single = self._single_launch()

    def _single_launch(self) -> Callable[[Sequence[Buffer]], list[Buffer]] | None:
        """The launch of a plan that is one kernel from its parameters to its results (every
        eager op): the buffers its arguments are bound to, in order, known now, so a call
        allocates the outputs, binds the buffers and enqueues, nothing else (eager dispatch).
        None where the plan has anything more (constants, several steps, empty arrays).

        Each call costs the host a few Python operations around pyopencl's two C calls
        (set_arg per buffer, 0.06 us; the enqueue, 0.8 us on PoCL): everything else (sizes,
        which parameter feeds which argument, the result types) is bound here. The outputs
        come from the runtime's pool; a dropped result's buffer may be handed to the next
        call at once, because the queue is in order: a kernel enqueued later never runs
        before the earlier kernels that read the buffer."""
        plan = self.plan
        if len(plan.steps) != 1 or not isinstance(plan.steps[0], KernelStep) or plan.constants:
            return None
        step = plan.steps[0]
        slots = [slot for slot, _ in plan.results]
        if step.in_place or step.outputs != slots \
                or any(t.nbytes == 0 for t in [*plan.param_types, *(t for _, t in plan.results)]) \
                or not all(isinstance(src, int) and src in plan.params for src in step.inputs) \
                or any(t.nbytes > self.rt.max_alloc for _, t in plan.results):  # refused by rt.alloc, by name
            return None
        n_out = len(plan.results)
        # held back behind the runtime's gate only when small (runtime.HOLD_BYTES): a larger
        # kernel lets the gate go and starts at once
        small = not self._starts
        # (kernel argument, parameter) of each input buffer, after the outputs'
        binds = tuple(enumerate((plan.params.index(src) for src in step.inputs), n_out))
        nbytes = tuple(t.nbytes for _, t in plan.results)
        types = tuple(t for _, t in plan.results)
        kern, k, rt, device = self._launch[id(step)], step.kernel, self.rt, self.device
        queue, gsize, lsize, lock = rt.queue, k.global_size, k.local_size, rt.launch_lock
        allocate, set_arg, enqueue = rt.pool.allocate, kern.set_arg, cl.enqueue_nd_range_kernel
        hold = rt.hold if small else rt.unhold
        refused, new, forking = rt.allocation_error, object.__new__, _forking

        if n_out == 1 and len(binds) <= 2:  # nearly every eager op: written out, no loops, no lists but the result's
            (size,), (rtype,) = nbytes, types
            n_in = len(binds)
            (j0, w0), (j1, w1) = [*binds, (0, 0), (0, 0)][:2]  # the first n_in are inputs

            def launch(args: Sequence[Buffer]) -> list[Buffer]:
                if forking._forked_from is not None:
                    check_not_forked()  # a forked child's driver would hang: an error instead
                # one lock for the pool and the launch: another thread's set_arg must not land
                # between these and the enqueue
                with lock:
                    try:
                        out = allocate(size)
                    except cl.Error as e:  # out of device memory: the MemoryError the frontend reports
                        raise refused(size, e) from None
                    set_arg(0, out)
                    if n_in:
                        set_arg(j0, args[w0].handle)
                        if n_in == 2:
                            set_arg(j1, args[w1].handle)
                    hold()  # behind a batch's gate (DeviceRuntime.hold), or the gate let go
                    enqueue(queue, kern, gsize, lsize)
                # Buffer(device, rtype, out) without its __init__'s call (a fifth of this launch)
                res = new(Buffer)
                d = res.__dict__
                d["device"], d["type"], d["handle"] = device, rtype, out
                return [res]

            return launch

        def launch_many(args: Sequence[Buffer]) -> list[Buffer]:
            check_not_forked()
            with lock:
                try:
                    outs = [allocate(n) for n in nbytes]
                except cl.Error as e:
                    raise refused(sum(nbytes), e) from None
                for j, buf in enumerate(outs):
                    set_arg(j, buf)
                for j, w in binds:
                    set_arg(j, args[w].handle)
                hold()
                enqueue(queue, kern, gsize, lsize)
            return [Buffer(device, t, h) for t, h in zip(types, outs)]

        return launch_many

    def launcher(self) -> Callable[[Sequence[Buffer]], list[Buffer]] | None:
        """The single launch of a one-kernel plan (:meth:`_single_launch`), else None."""
        return self._single

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        check_not_forked()
        if self._single is not None and not profiler.enabled():
            return self._single(args)
        if self._starts:  # else its kernels wait behind the gate, if one is closed, with the eager launches
            self.rt.release()
        events: list[tuple[str, str, Any]] = []
        outs = self._run(self.plan, [a.handle for a in args], events)
        if events:
            self._record(events)
        return [Buffer(self.device, t, h) for (_, t), h in zip(self.plan.results, outs, strict=True)]

    def _run(self, plan: Plan, args: Sequence[Any], events: list[tuple[str, str, Any]]) -> list[Any]:
        """Enqueues ``plan``'s steps on buffers ``args`` (one per parameter); returns its
        results' buffers."""
        env: dict[Any, Any] = dict(self._constants[id(plan)])
        for slot, a in zip(plan.params, args, strict=True):
            env[slot] = a
        for step in plan.steps:
            if isinstance(step, KernelStep):
                ev = self._run_kernel(step, env)
                if ev is not None and profiler.enabled():
                    events.append((step.label or step.kernel.name, step.kernel.what, ev))
            elif isinstance(step, AliasStep):
                env[step.dst] = env.get(step.src)
            elif isinstance(step, (LoopStep, BranchStep)):
                run = self._run_loop if isinstance(step, LoopStep) else self._run_branch
                env.update(zip(step.outputs, run(step, env, events), strict=True))  # type: ignore[arg-type]  # the step's own runner
            else:
                env[step.dst] = self._run_host(step, env)
        return [env.get(slot) for slot, _ in plan.results]

    def _run_loop(self, step: LoopStep, env: dict[Any, Any], events: list[tuple[str, str, Any]]) -> list[Any]:
        """The body's plan run over the carry's buffers, its results the next trip's carry,
        until the count known at compile time is reached or the condition's pred, read back,
        is false."""
        carry = [env.get(s) for s in step.inputs]
        foreign = [h for h, own in zip(carry, step.owned) if not own and h is not None]
        trips = 0
        while (trips < step.trips) if step.trips is not None else self._holds(step.cond, carry, events):
            carry = self._run(step.body, self._owned(step.body, carry, foreign), events)
            trips += 1
        return carry

    def _holds(self, cond: Plan, carry: list[Any], events: list[tuple[str, str, Any]]) -> bool:
        (pred,) = self._run(cond, carry, events)
        return bool(self.rt.download(pred, np.dtype(np.bool_), ()))  # one byte; waits for the queue

    def _run_branch(self, step: BranchStep, env: dict[Any, Any], events: list[tuple[str, str, Any]]) -> list[Any]:
        """The branch the index (read back) picks, run on the operands' buffers."""
        t = step.index_type
        plan = step.branches[branch_index(self.rt.download(env.get(step.index), t.dtype.np, t.shape),
                                          len(step.branches))]
        operands = [env.get(s) for s in step.inputs]
        foreign = [h for h, own in zip(operands, step.owned) if not own and h is not None]
        return self._run(plan, self._owned(plan, operands, foreign), events)

    def _owned(self, plan: Plan, args: list[Any], foreign: list[Any]) -> list[Any]:
        """``args`` with a device copy of each buffer ``plan`` writes into (Plan.consumed) that
        is not this loop's or branch's alone: one it was not handed (``foreign``: the caller
        still reads it), a constant, or a buffer at another argument too. A carry updated in
        place is copied at most once per loop, then it is the loop's own."""
        out = list(args)
        for j in plan.consumed:
            h = out[j]
            if h is not None and (any(h is f for f in foreign) or any(h is c for c in self._constant_buffers)
                                  or any(o is h for i, o in enumerate(out) if i != j)):
                out[j] = self.rt.copy(h, plan.param_types[j].nbytes)
        return out

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
        kern = self._launch[id(step)]
        with rt.launch_lock:  # another thread's set_arg must not land between these and the enqueue
            for j, buf in enumerate(args):
                kern.set_arg(j, buf)
            rt.count()  # behind the gate, if one is closed: counted toward its bound
            return cl.enqueue_nd_range_kernel(rt.queue, kern, k.global_size, k.local_size)

    def _run_host(self, step: HostStep, env: dict[Any, Any]) -> Any:
        n = step.node
        host = [self.rt.download(env.get(s), o.dtype.np, o.shape) for s, o in zip(step.inputs, n.operands)]
        # The op table's reference checks the target's result against the node's type.
        out = OPS[n.op].reference(*host, **n.attr)
        return self.rt.upload(np.ascontiguousarray(out))

    def _record(self, events: list[tuple[str, str, Any]]) -> None:
        self.rt.wait(events[-1][2])
        now = profiler.now_us()
        end_ns = events[-1][2].profile.end
        for name, what, ev in events:
            start = now - (end_ns - ev.profile.start) / 1e3
            profiler.kernel_event(name, self.device.name, start, (ev.profile.end - ev.profile.start) / 1e3, op=what)

    def report(self) -> dict[str, Any]:
        return {"kernels": len(self.kernel_steps)}

    def kernel_sources(self) -> dict[str, str]:
        return {s.kernel.name: s.kernel.source for s in self.kernel_steps}


class PlannedOnly(Executable):
    """What ``compile`` returns inside ``batched_builds`` (backend.py): the plan, whose
    kernels are built with the batch; it never runs (compiling the module again afterwards
    gives the executable, its kernels found built)."""

    def __init__(self, plan: Plan, device: Device) -> None:
        self.plan = plan
        self.device = device
        self.kernels = [s.kernel for s in _kernel_steps(plan)]

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        raise BackendError(f"opencl: an executable compiled inside batched_builds on {self.device.name} only "
                           f"gathers its kernels for the batch build; compile the module again to run it")

    def kernel_sources(self) -> dict[str, str]:
        return {k.name: k.source for k in self.kernels}


def _nbytes(plan: Plan) -> int:
    """The bytes of ``plan``'s parameters and results."""
    return sum(t.nbytes for t in plan.param_types) + sum(t.nbytes for _, t in plan.results)


def _kernel_steps(plan: Plan) -> list[KernelStep]:
    """The kernel launches of ``plan`` and of its loops' and branches' plans."""
    return [s for p in _plans(plan) for s in p.steps if isinstance(s, KernelStep)]


def _plans(plan: Plan) -> Iterator[Plan]:
    """``plan`` and the plans of every loop and branch in it, nested ones too."""
    yield plan
    for step in plan.steps:
        if isinstance(step, LoopStep):
            yield from _plans(step.cond)
            yield from _plans(step.body)
        elif isinstance(step, BranchStep):
            for b in step.branches:
                yield from _plans(b)
