"""The cached-call fast path of a cpu executable: one native call per execution.

A call of a small program used to spend ten times its kernel's time in Python: a slot
array per call, a NumPy gather into the pointer table, a fresh output block, its address,
an array view and a buffer object per result. Once an executable's schedule is fixed and
every step is a kernel of the runner (on one thread, or split natively) or a control record
of a loop or conditional (runner.py's ``axle_run_steps``), its calls go
through a :class:`FastCall` instead:

- each *frame* (one per concurrent call, pooled in a ring, see :data:`MAX_FRAMES`) holds the slot addresses with the
  constants and the offsets of outputs and temporaries already in place, the pointer
  table, and the Frame record ``axle_call`` reads: a call writes its argument addresses
  and makes one native call, which fills the pointer table and runs the kernels;
- the output block (small results and the temporary arena, one allocation) and the
  result buffers are reused from the frame's previous call when nothing outside the frame
  still refers to them (the block, each result array, each buffer object, counted by
  ``sys.getrefcount``: a view of a result keeps the block referenced, so a value a caller
  kept is never overwritten); otherwise the call gets a fresh block, as before.

A plan holding reductions split along their reduced axis (partial results combined on the
host, executable._ReductionSplit) takes it too: the native call then only fills the
pointer table, and the runs of the step table and the split reductions follow in order,
each reduction combining into views of the frame's output block.

Executables whose plan has host steps, results that are arguments, constants or
temporaries, or outputs big enough for the mapping pool (memory.py) keep the general path
in executable.py.
"""
from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from axle.backend import Buffer
from axle.errors import BackendError
from axle.ir.types import TensorType

from . import threads
from .memory import MMAP_MIN, address
from .runner import FRAME_FIELDS, STEP, call, run_steps

if TYPE_CHECKING:
    from .executable import CpuExecutable

#: the frame record's field indices
_F = {name: i for i, name in enumerate(FRAME_FIELDS)}
#: frames made per executable beyond the concurrent calls' needs: two let a loop that
#: keeps each result until the next call reuse outputs alternately; a third covers a
#: result kept one call longer (``a, b = f(a), a``)
MAX_FRAMES = 3


@dataclass(frozen=True, eq=False)
class CpuBuffer(Buffer):
    """A CPU buffer (its handle a NumPy array) that remembers its address: an argument
    costs no address lookup per call."""

    addr: int = 0

    def __setstate__(self, state: dict[str, object]) -> None:
        # a copy (pickle, copy, deepcopy) has its own memory: its address, not the original's
        # (a deepcopy read the original's, freed with it)
        state = dict(state)
        handle = state.get("handle")
        state["addr"] = address(handle) if isinstance(handle, np.ndarray) else 0
        self.__dict__.update(state)


def _refcounts(objs: list[object]) -> list[int]:
    """Each object's reference count, counted the one way both the recording and the check
    use (a different way, such as unpacking from ``zip``, holds a different number of
    temporary references)."""
    return list(map(sys.getrefcount, objs))  # C-level loop: no frame, one temporary reference (the argument)


class _Frame:
    """The per-call state of one concurrent call: slots, pointer table, Frame record,
    and the outputs of its last call with the reference counts they had when made."""

    __slots__ = ("slots", "ptrs", "ptrs_addr", "head", "addr", "block", "bufs", "outs", "held", "counts")

    def __init__(self, fast: FastCall) -> None:
        self.slots = fast.slot_template.copy()
        self.ptrs = np.zeros(max(len(fast.src), 1), np.uint64)
        self.ptrs_addr = address(self.ptrs)
        self.head = np.zeros(len(FRAME_FIELDS), np.uint64)
        # with split reductions the native call only fills the pointer table (no step):
        # the segments run after it (FastCall.run)
        nsteps = fast.nsteps if fast.segments is None else 0
        for name, value in (("table", fast.table_addr), ("nsteps", nsteps), ("ptrs", self.ptrs_addr),
                            ("nptrs", len(fast.src)), ("src", fast.src_addr), ("base", fast.base_addr),
                            ("slots", address(self.slots))):
            self.head[_F[name]] = value
        self.addr = address(self.head)
        self.block: np.ndarray | None = None
        self.bufs: list[Buffer] = []
        #: per split reduction (FastCall.segments), a function giving its output arrays
        #: (views of the block, where the host combines its partial results)
        self.outs: list[Callable[[], list[np.ndarray]]] = []
        self.held: list[object] = []  # the block, the result arrays and buffers
        self.counts: list[int] = []

    def reusable(self) -> bool:
        """True when no caller holds the last call's outputs (nor a view of them)."""
        return self.block is not None and _refcounts(self.held) == self.counts

    def new_outputs(self, fast: FastCall) -> None:
        """A fresh output block (the previous one stays with whoever holds it)."""
        block = np.empty(fast.block_bytes + 64, np.uint8)
        raw = address(block)
        pad = -raw % 64
        self.slots[fast.base_slot] = raw + pad
        self.block = block
        arrays = [np.ndarray(shape, dt, block, pad + off) for shape, dt, off in fast.result_views]
        self.bufs = [CpuBuffer(fast.device, t, arrays[j], raw + pad + off) for t, j, off in fast.result_bufs]
        # (made before the counts: these views hold the block for as long as the frame does)
        self.outs = [_giving([np.ndarray(shape, dt, block, pad + off) for shape, dt, off in views])
                     for views in fast.split_views]
        self.held = [block, *arrays, *self.bufs]
        del block, arrays  # counted as reusable() sees them: held by the frame and each other only
        self.counts = _refcounts(self.held)


def _giving(arrays: list[np.ndarray]) -> Callable[[], list[np.ndarray]]:
    return lambda: arrays


class FastCall:
    """The fast path of one executable (see the module docstring); ``build`` says None
    where the plan needs the general path."""

    def __init__(self, exe: CpuExecutable, nsteps: int, segments: list[tuple] | None = None) -> None:
        plan = exe.plan
        self.device = exe.device
        self.n_params = plan.n_params
        self.types: list[TensorType] = list(plan.param_types)
        #: per parameter, the last argument type object found equal to it: a later call
        #: passing that same object skips the (dataclass) comparison
        self.seen: list[TensorType] = list(plan.param_types)
        self.table_addr = exe._table_addr
        self.nsteps = nsteps
        self.zero_slot, self.base_slot = plan.n_slots, plan.n_slots + 1
        # slot values: constants absolute; small outputs and temporaries as offsets from
        # the (64-byte aligned) output block, whose address is the base slot's value
        slots = np.zeros(plan.n_slots + 2, np.uint64)
        slots[exe._const_slots] = exe._const_addrs
        slots[exe._small_slots] = exe._small_offs
        slots[exe._temp_slots] = exe._temp_offs + np.uint64(exe._small_bytes)
        self.slot_template = slots
        relative = set(exe._small_slots.tolist()) | set(exe._temp_slots.tolist())
        self.src = np.ascontiguousarray(exe._src, np.int64)
        self.base = np.array([self.base_slot if s in relative else self.zero_slot for s in self.src.tolist()],
                             np.int64)
        self.src_addr = address(self.src) if len(self.src) else 0
        self.base_addr = address(self.base) if len(self.base) else 0
        self.block_bytes = exe._small_bytes + plan.temp_bytes
        small = {s: (shape, dt, off) for s, shape, dt, off in exe._small_outs}
        order = list(dict.fromkeys(plan.results))  # one array per result slot, shared by repeats
        self.result_views = [small[s] for s in order]
        self.result_bufs = [(t, order.index(s), small[s][2]) for s, t in zip(plan.results, plan.result_types)]
        #: None when one native call runs every step; else the runs of the step table and
        #: the split reductions between them, in order (a reduction's partial results are
        #: combined on the host, executable._ReductionSplit)
        self.segments = segments
        self.split_views: list[list[tuple[tuple[int, ...], np.dtype, int]]] = []
        for seg in segments or ():
            if seg[0] == "step":
                outs = zip(seg[2].outs, seg[2].out_types)
                self.split_views.append([(t.shape, t.dtype.np, int(slots[s])) for s, t in outs])
        self.run_steps = run_steps()
        #: a ring (the frame used longest ago first) of at most MAX_FRAMES frames
        self.frames: deque[_Frame] = deque()
        self.nframes = 0  # frames made (the ring holds those not in a call)
        self.call = call()

    def new_frame(self) -> _Frame:
        self.nframes += 1
        return _Frame(self)

    @staticmethod
    def build(exe: CpuExecutable, segments: list[tuple]) -> FastCall | None:
        plan = exe.plan
        records = len(exe._table)  # kernels and the control records of loops and conditionals
        one_run = len(segments) == 1 and segments[0][0] == "run" and segments[0][2] == len(exe._steps) == records
        # else runs and kernels split as reductions (each with its record, in order)
        small = {s for s, _, _, _ in exe._small_outs}
        relative = small | set(exe._temp_slots.tolist())  # (in the output block)
        n = exe._segments[0] if exe._segments is not None else 1
        mixed = not one_run and records == len(exe._steps) and all(
            seg[0] == "run" or (seg[1] is not None and seg[1].splits_reduction(n)
                                and all(s in relative for s in seg[2].outs)) for seg in segments)
        if (not (one_run or mixed) or exe._big_outs or plan.temp_bytes >= MMAP_MIN or not plan.results
                or any(s not in small for s in plan.results)):
            return None
        return FastCall(exe, records, None if one_run else segments)

    def run(self, args: Sequence[Buffer]) -> list[Buffer]:
        if len(args) != self.n_params:
            raise BackendError(f"cpu: the module takes {self.n_params} argument(s), got {len(args)}")
        frames = self.frames
        try:
            frame = frames.popleft()  # atomic under the GIL: concurrent calls get distinct frames
        except IndexError:
            frame = self.new_frame()
        reusable = frame.reusable()
        if not reusable and frame.block is not None:
            # its last results are still held (``y = f(x)`` in a loop holds the previous
            # call's until this one returns): it waits at the end of the ring while the
            # next frame, or a new one up to MAX_FRAMES, serves this call
            if frames:
                frames.append(frame)
                frame = frames.popleft()
                reusable = frame.reusable()
            if not reusable and self.nframes < MAX_FRAMES:
                frames.append(frame)
                frame = self.new_frame()
        slots = frame.slots
        seen = self.seen
        for k, a in enumerate(args):
            typ = a.type
            if typ is not seen[k]:  # a type object not checked yet: compare (types are immutable)
                if typ != self.types[k]:
                    frames.append(frame)
                    raise BackendError(f"cpu: argument {k} is {typ}, the module expects {self.types[k]}")
                seen[k] = typ
            slots[k] = a.addr if type(a) is CpuBuffer else address(a.handle)
        if not reusable:
            frame.new_outputs(self)
        self.call(frame.addr)
        if self.segments is not None:
            self._run_segments(frame)
        out = list(frame.bufs)
        frames.append(frame)
        return out


    def _run_segments(self, frame: _Frame) -> None:
        """The runs of the step table and the split reductions between them, over the
        pointer table the native call filled."""
        ptrs = frame.ptrs_addr
        pool = threads.pool(self.device.index)
        k = 0
        for seg in self.segments:  # type: ignore[union-attr]  # (run only when set)
            if seg[0] == "run":
                self.run_steps(self.table_addr + STEP.itemsize * seg[1], seg[2], ptrs)
            else:
                seg[1].run(ptrs, pool, frame.outs[k])
                k += 1
