"""Compiling a plan's kernels into one LLVM module, and running the plan.

An executable is the plan (steps over buffer slots) plus the addresses of its compiled
kernels. A call fills the slots with the argument arrays and constants, runs the steps in
order (kernels through ctypes, which releases the GIL, so kernels split across the
worker pool truly run in parallel) and returns the result slots. Outputs and temporaries
come from the reusing pool (memory.py); temporaries go back to it when the call returns.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from axle import profiler
from axle.backend import Buffer, Device, Executable
from axle.config import config
from axle.errors import BackendError
from axle.ir.computation import Computation, called_computations
from axle.ir.printer import print_computation
from axle.ir.reductions import REDUCE_KINDS
from axle.ir.types import TensorType

from . import decisions, plan_cache, threads
from .emitter import INT64_MAX, KernelEmitter, KernelSpec
from .fastcall import CpuBuffer, FastCall
from .memory import MMAP_MIN, POOL, address
from .plan import ControlStep, HostStep, KernelStep, Plan, Step
from .runner import CONTROL, SPLIT, SPLIT_SHIFT, STEP, run_steps
from .target import JitModule, host, object_key

KFUNC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)

#: a split is kept when it takes less than this fraction of the one-thread time
SPLIT_GAIN = 0.85
#: a kernel taking this many times the pool's wake-up cost on one thread is long: the
#: wake-up is nothing beside it, and its split is kept unless measured slower than
#: LONG_SLOWER times one thread (a memory-bound kernel gains little from a second thread)
LONG_FACTOR = 64.0
LONG_SLOWER = 1.05
#: a split trial that did not win counts only when its threads ran at once at least this
#: much: the workers ran this part of their fair share of its chunks ((n - 1) / n of them)
#: and the caller was on its core this part of the time. Else the other cores were busy,
#: and the trial measured the caller alone, or the caller and a worker taking turns on one
#: core (a woken worker can preempt its caller)
OVERLAP = 0.5
#: chunks per thread of a split kernel (claimed dynamically, so a late thread costs little)
CHUNKS = 4
#: an executable whose decisions are not all conclusive (measured while the cores were
#: busy) measures those kernels again after this many more calls, the k-th time after
#: RECHECK[k - 1] (then no more: at most len(RECHECK) times per process): a process whose
#: first calls met a busy machine is not held to their decision for good (the first after
#: 64: a make bench row makes 44 calls of each implementation, none of them re-measuring)
RECHECK = (64, 1024, 16384)


def llvm_module(specs: Sequence[KernelSpec], name: str = "axle") -> ir.Module:
    """One LLVM module holding every kernel, for the host triple."""
    mod = ir.Module(name=name)
    mod.triple = host().triple
    for spec in specs:
        try:
            if spec.kind == "gemm":
                from .gemm import emit

                emit(mod, spec)  # type: ignore[arg-type]  # the "gemm" kind is a GemmSpec
                continue
            if spec.kind == "transpose":
                from . import transpose

                transpose.emit(mod, spec)  # type: ignore[arg-type]  # the "transpose" kind is a TransposeSpec
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


def compile_kernels(specs: Sequence[KernelSpec], name: str = "axle", module_digest: str | None = None) -> JitModule:
    """One module holding ``specs``' kernels. Its object code is looked up on disk by a key
    made from the kernels' descriptions (``specs_key``), or from the digest of the optimized
    module they are all the kernels of (``module_key``), before any LLVM IR is emitted:
    emitting and printing the IR was most of a cached first call (docs/backend-cpu.md)."""
    interleave = interleave_ok(specs)
    key = module_key(module_digest, name, interleave) if module_digest else specs_key(specs, name, interleave)

    def ir_text() -> str:
        with profiler.span(f"codegen {name}", "codegen", kernels=len(specs)):
            return str(llvm_module(specs, name))

    with profiler.span(f"llvm {name}", "compile", kernels=len(specs)):
        try:
            return JitModule(ir_text, interleave, key)
        except RuntimeError as e:
            raise BackendError(f"cpu: LLVM rejected the generated code for {name}: {e}") from e


#: spec fields whose values are described by ``repr`` exactly (no truncation, no address)
_EXACT_REPR = (str, int, bool)


def _int_pairs(value: object) -> bool:
    """A tuple of pairs of ints (KernelSpec.in_place), which ``repr`` describes exactly."""
    return type(value) is tuple and all(type(p) is tuple and all(type(v) is int for v in p) for p in value)


def specs_key(specs: Sequence[KernelSpec], name: str, interleave: bool) -> bytes | None:
    """The disk cache key of the module emitted from ``specs`` (None: a spec holds a value
    this cannot describe exactly, and the key is then the emitted IR's digest). A spec is
    its class, its fields, and its computations in the IR's text form, which prints every
    constant in full (it parses back to the same computation); the emitters' code and the
    settings are in the key through ``object_key``."""
    h = hashlib.sha256(f"{name}\0".encode())
    for spec in specs:
        h.update(f"{type(spec).__module__}.{type(spec).__qualname__}\0".encode())
        for f in dataclasses.fields(spec):
            value = getattr(spec, f.name)
            if isinstance(value, Computation):
                text = _computation_text(value)
            elif type(value) in _EXACT_REPR or _int_pairs(value):
                text = repr(value)
            else:
                return None
            h.update(f"{f.name}={text}\0".encode())
    h.update(_settings().encode())
    return object_key("kernels:" + h.hexdigest(), interleave)


def module_key(module_digest: str, name: str, interleave: bool) -> bytes:
    """The disk cache key of the module holding every kernel of the plan of the optimized
    module whose text has SHA-256 ``module_digest``: the plan is made from that module alone
    (and the settings, in the key as in ``specs_key``), so the digest stands for the kernels'
    descriptions without printing each of them again."""
    return object_key(f"module:{module_digest}\0{name}\0{_settings()}", interleave)


def _settings() -> str:
    """Every setting but the compile cache's own (the plan and the kernels may read any)."""
    return repr(sorted((k, v) for k, v in vars(config).items() if not k.startswith("compile_cache")))


def _computation_text(comp: Computation) -> str:
    """``comp`` and every computation it calls, in the IR's text form."""
    comps: list[Computation] = []
    todo = [comp]
    while todo:
        c = todo.pop()
        if any(c is seen for seen in comps):
            continue
        comps.append(c)
        todo += [sub for n in c.nodes for sub in called_computations(n)]
    names = {id(c): f"c{i}" for i, c in enumerate(comps)}
    return "\n".join(print_computation(c, names, entry=c is comp) for c in comps)


def load_cached(digest: str, device: Device, splits: Callable[[str], bytes | None]) -> CpuExecutable | None:
    """The executable of the optimized module whose text has SHA-256 ``digest`` from its
    cached plan (plan_cache.py) and the object code of all its kernels (``module_key``), or
    None when either is missing: nothing is parsed, planned or emitted. ``splits`` gives
    the split decisions' key of the module's name."""
    cached = plan_cache.load(plan_cache.plan_key(digest, _settings()))
    if cached is None:
        return None
    jit = JitModule.from_disk(module_key(digest, cached.name, cached.interleave), cached.interleave, _no_ir)
    names = {s.spec.name for s in cached.plan.steps if isinstance(s, KernelStep)}
    if jit is None or not all(jit.has(n) for n in names):
        return None
    kernels = {n: CompiledKernel(jit, n) for n in names}
    return CpuExecutable(cached.plan, kernels, device, 0.0, splits(cached.name))


def _no_ir() -> str:
    raise BackendError("cpu: the LLVM IR of an executable loaded whole from the compile cache is not kept; "
                       "compile with AXLE_FLAGS=--compile_cache=off (or through jit(...).lower(...).compile()) "
                       "to see it")


class CompiledKernel:
    """A kernel's entry point in a compiled module (which it keeps alive)."""

    def __init__(self, jit: JitModule, name: str) -> None:
        self.jit = jit
        self.name = name
        self.address = jit.address(name)

    @property
    def ir_text(self) -> str:
        return self.jit.ir_text


class _Launch:
    """One kernel step: its compiled function, its region of the per-call pointer table,
    and whether it is split across threads. That is decided by measurement, made robust
    to other processes on the machine (they only ever slow a launch down):

    - its first ``LAUNCHES`` launches follow ``ORDER``: one thread twice (the first is
      cold: new code, new pages), then split (S) and one thread (O) as S O O S S O O S, so
      that each kind runs as often first after the caller's other work as second after
      its own (a caller that times every other call after a call of its own, as
      benchmarks/common.py ``measure`` does, ran every split trial right after another
      library's call: cold caches, that library's threads still on the cores); the best
      of each kind is compared;
    - a kernel whose best one-thread launch took at most SPLIT_FACTOR times the pool's
      wake-up cost (threads.py) is not split (decided at once, not tried; conclusive only
      if that cost is at most WAKE_TRUSTED_US, not one a busy moment inflated);
    - the split is kept if it was at least 1/SPLIT_GAIN times faster, or, for a long
      kernel (LONG_FACTOR), unless it was slower than LONG_SLOWER times one thread (a
      memory-bound kernel may gain little from a second thread, but loses nothing);
    - the decision is ``conclusive`` (kept for the next process, decisions.py) only when
      the threads of a split trial ran at once (OVERLAP: the workers' chunks and the
      caller's CPU time), and never when a long kernel's split lost (a split over chunks
      claimed dynamically cannot lose by that much but to other work on the cores).
      Otherwise the decision holds for this process until the executable measures it
      again (CpuExecutable, RECHECK), and the next process measures it again too."""

    #: the measurement's launches in order: one thread (O) or split (S)
    ORDER = "OOSOOSSOOS"
    #: its split trials
    TIMED = ORDER.count("S")
    #: the launches that measure a kernel
    LAUNCHES = len(ORDER)

    def __init__(self, step: KernelStep, addr: int, region: int) -> None:
        self.step = step
        self.addr = addr
        self.fn = KFUNC(addr)
        self.region = region
        self.outer, self.inner = step.spec.loop_sizes
        self.rsize = step.spec.split_reduce_size
        self.parallel: bool | None = None  # None until measured
        #: whether the decision was measured with the cores free (kept for the next process)
        self.conclusive = True
        #: times this process measured the kernel (CpuExecutable measures an inconclusive
        #: decision again, RECHECK)
        self.measured = 0
        self.nin = len(step.ins)
        self.nbuf = self.nin + len(step.outs)
        self._best_us = float("inf")  # one thread (ORDER's O launches)
        self._best_split_us = float("inf")  # split (its S launches)
        self._ones = 0
        self._splits = 0
        self._overlap = 0.0  # how much the threads of the best split trial so far ran at once
        self._split: list[_ReductionSplit] = []  # reusable, one per concurrent call

    def run(self, ptrs: int, pool: threads.NativePool, outs: Callable[[], list[np.ndarray]]) -> None:
        """Launches over the pointer table at address ``ptrs``; ``outs`` gives the output
        arrays (needed only to combine per-thread partial reductions)."""
        bufs = ptrs + 8 * self.region
        if self.parallel is None:
            self._trial(pool, bufs, outs)
        elif self.parallel and pool.n > 1:
            self._run_parallel(pool, bufs, outs)
        else:
            self.fn(bufs, 0, self.outer, 0, self.inner, 0, INT64_MAX)

    def remeasure(self) -> None:
        """Forgets the decision: the next launches measure the kernel again."""
        self.parallel, self.conclusive = None, True
        self._best_us = self._best_split_us = float("inf")
        self._ones = self._splits = 0
        self._overlap = 0.0

    def _trial(self, pool: threads.NativePool, bufs: int, outs: Callable[[], list[np.ndarray]]) -> None:
        """One launch of the measurement (ORDER; class docstring)."""
        i = self._ones + self._splits
        if i >= self.LAUNCHES or self.ORDER[i] == "O":
            t0 = time.perf_counter()
            self.fn(bufs, 0, self.outer, 0, self.inner, 0, INT64_MAX)
            self._best_us = min(self._best_us, (time.perf_counter() - t0) * 1e6)
            self._ones += 1
            if self._split_mode(pool.n) is None:
                self._decided(False, True)  # no split
            elif self._best_us <= threads.SPLIT_FACTOR * pool.wake_us:
                # too short to repay waking a thread: not tried, and kept for good only if
                # the wake-up cost was not measured on busy cores (threads.WAKE_TRUSTED_US)
                self._decided(False, pool.wake_us <= threads.WAKE_TRUSTED_US)
            return
        helped, cpu = pool.helped(), time.thread_time()
        t0 = time.perf_counter()
        self._run_parallel(pool, bufs, outs)
        wall = time.perf_counter() - t0
        n = pool.n
        worked = (pool.helped() - helped) / (self._nchunks(n) * (n - 1) / n)  # the workers' part of their share
        busy = (time.thread_time() - cpu) / wall if wall > 0 else 0.0  # the caller on its core
        self._overlap = max(self._overlap, min(worked, busy))
        self._best_split_us = min(self._best_split_us, wall * 1e6)
        self._splits += 1
        pool.probe_wake()  # (untimed: after the trial)
        if self._splits >= self.TIMED:
            self._decided(*split_verdict(self._best_us, self._best_split_us, self._overlap, pool.wake_us))

    def _decided(self, parallel: bool, conclusive: bool) -> None:
        self.conclusive = conclusive
        self.measured += 1
        self.parallel = parallel  # (last: another thread reads it without a lock)

    def _nchunks(self, n: int) -> int:
        """The chunks a split over ``n`` threads cuts the kernel into (_run_parallel)."""
        mode = self._split_mode(n)
        if mode == "reduction":
            return len(threads.chunks(0, self.rsize, CHUNKS * n))
        return min(CHUNKS * n, self.outer if mode == "rows" else self.inner)

    def _split_mode(self, n: int) -> str | None:
        """How the kernel splits over ``n`` threads: by rows, along its first reduced axis
        (a big reduction into few outputs), by columns, or not at all."""
        if n == 1:
            return None
        if self.rsize >= 2 * n and self.step.spec.reduce_split_first:
            return "reduction"
        if self.outer >= n or (self.outer >= 2 and self.step.spec.fixed_columns):
            return "rows"  # (fixed columns: by rows only, fewer shares than threads if need be)
        if self.rsize >= 2 * n and self.outer * self.inner <= 4 * n:
            return "reduction"
        if self.inner >= 2 * n and not self.step.spec.fixed_columns:
            return "columns"
        return None

    def _run_parallel(self, pool: threads.NativePool, bufs: int, outs: Callable[[], list[np.ndarray]]) -> None:
        # CHUNKS per thread, claimed dynamically (threads.py): a late worker costs nothing.
        n = pool.n
        mode = self._split_mode(n)
        if mode == "reduction":
            # A big reduction into few outputs: each chunk reduces a slice of the first
            # reduced axis into its own partial outputs, combined here. The partials and
            # the chunks' pointer arrays are made once (Python work is what a 1M-element
            # sum pays for on a cold cache).
            outputs = outs()
            try:
                split = self._split.pop()  # atomic: another thread may take the last one first
            except IndexError:
                split = _ReductionSplit(self, outputs, CHUNKS * n)
            try:
                split.run(pool, bufs, outputs)
            finally:
                self._split.append(split)
        elif mode is not None:  # rows or columns, cut as threads.chunks cuts them
            extent = self.outer if mode == "rows" else self.inner
            pool.run(self.addr, bufs, self.outer, self.inner, mode, min(CHUNKS * n, extent))
        else:
            self.fn(bufs, 0, self.outer, 0, self.inner, 0, INT64_MAX)

    def splits_reduction(self, n: int) -> bool:
        """Whether this kernel runs split over ``n`` threads along its first reduced axis
        (its partial results combined on the host: not in the step runner)."""
        return bool(self.parallel) and self._split_mode(n) == "reduction"

    def native_split(self, n: int) -> str | None:
        """The split mode the step runner may use for this kernel over ``n`` threads (it
        splits rows and columns natively; a reduction's partial results are combined in
        Python)."""
        mode = self._split_mode(n)
        return mode if mode in SPLIT else None

    def loop_split(self) -> str | None:
        """The split mode of this kernel inside a loop (never timed): rows or columns
        when its largest array reaches ``threads.LOOP_SPLIT_ELEMENTS``."""
        if self.step.spec.largest_array < threads.LOOP_SPLIT_ELEMENTS:
            return None
        n = max(2, threads.thread_count())
        if self.step.spec.reduce_split_first and self.outer >= n:
            return "rows"  # the runner cannot sum a split K's partial outputs: the rows, as before
        return self.native_split(n)


def split_verdict(one_us: float, split_us: float, overlap: float, wake_us: float) -> tuple[bool, bool]:
    """(split, conclusive) from the best one-thread and split times of a kernel, how much
    the threads of its split trials ran at once (0 to 1) and the pool's wake-up cost
    (_Launch)."""
    long = one_us >= LONG_FACTOR * wake_us
    split = split_us < SPLIT_GAIN * one_us or (long and split_us <= LONG_SLOWER * one_us)
    # kept only if measured with the threads running at once: else the other cores were
    # busy, and the times say what a split gives now, not what it gains (a win may be
    # one-thread launches preempted, a loss a preempted worker holding a chunk). A long
    # kernel's split that lost is never kept: its chunks are claimed dynamically, so a
    # second thread that runs at all cannot make it slower by LONG_SLOWER, but other work
    # on the cores in the middle of a trial can (make bench's seed at 2^24 was stored as
    # unsplit for good from a trial whose threads ran at once: overlap 0.54, split 14.1 ms
    # against 11.6 on one thread)
    return split, overlap >= OVERLAP and (split or not long)


class _ReductionSplit:
    """A kernel reducing into few outputs, split along its first reduced axis: chunk k
    writes row k of each partial array (through its own pointer array), the host combines
    the rows."""

    def __init__(self, launch: _Launch, outputs: list[np.ndarray], nchunks: int) -> None:
        self.launch = launch
        self.parts = threads.chunks(0, launch.rsize, nchunks)
        self.partial = [np.empty((len(self.parts),) + o.shape, o.dtype) for o in outputs]
        self.ptrs = np.zeros((len(self.parts), launch.nbuf), np.uint64)
        for j, p in enumerate(self.partial):
            self.ptrs[:, launch.nin + j] = [p[k, ...].ctypes.data for k in range(len(self.parts))]
        self.base = self.ptrs.ctypes.data
        #: per output: its kind's combiner and, where that is one ufunc, the ufunc (whose
        #: ``accumulate`` combines every row in order in one call: 8 calls of the combiner
        #: cost 6 us of a 2^20 sum's split)
        self.combine: list[tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], np.ufunc | None]] = []
        for kind, p in zip(launch.step.spec.combine_kinds, self.partial):  # (a split-K GEMM sums)
            # the reference's combiners: float max/min follow IEEE 754-2019 (-0.0 < +0.0),
            # as the kernels' llvm.maximum/minimum do
            rk = REDUCE_KINDS[kind]
            self.combine.append((rk.combine_host, rk.host_ufunc(_combined_dtype(p.dtype))))

    def run(self, pool: threads.NativePool, bufs: int, outputs: list[np.ndarray]) -> None:
        la = self.launch
        table = (ctypes.c_uint64 * la.nin).from_address(bufs)
        self.ptrs[:, :la.nin] = np.frombuffer(table, np.uint64)  # type: ignore[call-overload]  # a ctypes array is a buffer
        # chunk k reduces parts[k] (the pool cuts [0, rsize) as threads.chunks does)
        pool.run(la.addr, self.base, la.outer, la.inner, "reduction", len(self.parts), 8 * la.nbuf, la.rsize)
        self.combine_into(outputs)

    def combine_into(self, outputs: list[np.ndarray]) -> None:
        """Each output from its partial results, combined in chunk order."""
        for o, p, (combine, ufunc) in zip(outputs, self.partial, self.combine):
            rows = p.astype(_combined_dtype(p.dtype), copy=False)
            # row after row in chunk order (never pairwise, as ufunc.reduce would for 8
            # rows or more), so the bits are the same whichever thread ran which chunk
            if ufunc is not None:
                o[...] = ufunc.accumulate(rows, axis=0, dtype=rows.dtype)[-1]
            else:
                o[...] = functools.reduce(combine, rows)


def _combined_dtype(dt: np.dtype) -> np.dtype:
    """The dtype partial results are combined in (float16 ones in float32)."""
    return np.dtype(np.float32) if dt == np.float16 else dt


def _control(step: ControlStep, addrs: np.ndarray) -> int:
    """A control step run from Python (as the native runner would, runner.py): the
    number of steps to move by."""
    at = [int(addrs[s]) for s in step.ins]
    if step.kind == "copy":
        ctypes.memmove(int(addrs[step.outs[0]]), at[0], step.arg)
        return 1
    if step.kind == "jump":
        return step.arg
    if step.kind == "branch":
        return 1 if ctypes.c_int8.from_address(at[0]).value else step.arg
    k = (ctypes.c_uint8 if step.width == 1 else ctypes.c_int32).from_address(at[0]).value
    return 1 + (k if 0 <= k < step.arg else step.arg - 1)


def _aligned_copy(a: np.ndarray) -> np.ndarray:
    from .gemm import aligned_zeros

    out = aligned_zeros(a.shape, a.dtype)
    out[...] = a
    return out


def _address(buf: Buffer) -> int:
    return buf.addr if type(buf) is CpuBuffer else address(buf.handle)


class CpuExecutable(Executable):
    """A plan bound to its compiled kernels.

    A call fills one address per buffer slot (arguments, constants, outputs from the pool,
    temporaries at their arena offsets), gathers them into the pointer table (each kernel
    step reads its buffers from its own region), then runs the steps: consecutive kernels
    that stay on one thread go to the native step runner in one call (runner.py), kernels
    split across threads and host steps run one by one. A loop or conditional (a region of
    the plan) runs whole inside one runner call, its kernels on one thread; only one that
    holds a host step (a shape the kernels cannot compute) is walked step by step here."""

    def __init__(self, plan: Plan, kernels: dict[str, CompiledKernel], device: Device, compile_ms: float,
                 splits_key: bytes | None = None) -> None:
        self.plan = plan
        self.device = device
        self._kernels = kernels
        self.compile_ms = compile_ms
        self._steps: list[tuple[_Launch | None, Step]] = []
        src: list[int] = []
        records: list[tuple[int, int, int, int]] = []
        self._record: dict[int, int] = {}  # step index -> its record in the step table
        in_region = self._in_region = {i for a, b in plan.regions for i in range(a, b)}
        for i, step in enumerate(plan.steps):
            if isinstance(step, KernelStep):
                launch = _Launch(step, kernels[step.spec.name].address, len(src))
                code = launch.addr
                if i in in_region:
                    # never timed: the native runner splits it when it is big enough
                    launch.parallel = False
                    mode = launch.loop_split()
                    code |= SPLIT[mode] << SPLIT_SHIFT if mode else 0
                src += step.ins + step.outs
                self._record[i] = len(records)
                records.append((code, launch.region, launch.outer, launch.inner))
                self._steps.append((launch, step))
            else:
                if isinstance(step, ControlStep):
                    self._record[i] = len(records)
                    records.append((CONTROL[step.kind], len(src), step.arg, step.width))
                    src += step.ins + step.outs
                self._steps.append((None, step))
        # the split decisions an earlier process measured for this plan (decisions.py): a
        # cached first call runs with them at once, measuring nothing
        timed = self._timed_launches()
        self._splits_key = splits_key = splits_key if timed else None  # (nothing measured: nothing kept)
        self._key = splits_key  # (stored again when inconclusive decisions were measured again)
        #: calls left before the kernels whose decision is inconclusive are measured again
        #: (0: none pending; RECHECK)
        self._recheck = 0
        self._rechecks = 0  # times done
        splits = decisions.load_splits(splits_key, len(timed)) if splits_key is not None else None
        if splits is not None:
            for launch, parallel in zip(timed, splits):
                launch.parallel = parallel  # (None: measured under load then: measured again)
            if None not in splits:
                self._splits_key = None  # stored already
        # regions holding a host step are walked step by step (jumps taken in Python)
        self._walked = {i for a, b in plan.regions if any(isinstance(s, HostStep) for s in plan.steps[a:b])
                        for i in range(a, b)}
        self._src = np.array(src, np.intp)
        self._table = np.array(records, STEP)
        self._table_addr = self._table.ctypes.data if len(records) else 0
        for s, a in plan.constants.items():  # a prepacked B is read by aligned vector loads
            if address(a) % 64:  # (a plan read back from the compile cache: fresh arrays)
                plan.constants[s] = _aligned_copy(a)
        self._const_slots = np.array(list(plan.constants), np.intp)
        self._const_addrs = np.array([address(a) for a in plan.constants.values()], np.uint64)
        self._temp_slots = np.array(list(plan.temp_offsets), np.intp)
        self._temp_offs = np.array(list(plan.temp_offsets.values()), np.uint64)
        # Outputs outside the arena: big ones get pooled mappings of their own; small ones
        # are carved from one block per call (one allocation, one address).
        self._big_outs: list[tuple[int, TensorType]] = []
        small: list[tuple[int, TensorType, int]] = []
        block = 0
        defined: set[int] = set()  # a loop's carry slot is written by several steps: one buffer
        for step in plan.steps:
            for s, t in zip(step.outs, step.out_types):
                if s in plan.temp_offsets or s in defined or s < plan.n_params:
                    continue
                defined.add(s)
                if t.nbytes >= MMAP_MIN:
                    self._big_outs.append((s, t))
                else:
                    small.append((s, t, block))
                    block += -(-max(t.nbytes, 1) // 64) * 64
        self._small_outs = [(s, t.shape, t.dtype.np, off) for s, t, off in small]
        self._small_slots = np.array([s for s, _, _ in small], np.intp)
        self._small_offs = np.array([off for _, _, off in small], np.uint64)
        self._small_bytes = block
        self._temp_type = {s: t for step in plan.steps for s, t in zip(step.outs, step.out_types)
                           if s in plan.temp_offsets}
        self._segments: tuple[int, list[tuple]] | None = None
        # Reusable pointer tables (one per concurrent call; more are made when needed).
        self._tables: list[tuple[np.ndarray, int]] = []
        self._run_steps = run_steps() if records else None
        # the one-native-call path (fastcall.py), built once the schedule is fixed
        self._fast: FastCall | None = None
        self._fast_checked = False

    def _timed_launches(self) -> list[_Launch]:
        """The kernel steps whose split is measured (those outside loops and conditionals)."""
        return [launch for i, (launch, _) in enumerate(self._steps)
                if launch is not None and i not in self._in_region]

    def _schedule(self, nthreads: int) -> list[tuple] | None:
        """Consecutive single-threaded kernels merged into runner calls; None while some
        kernel's threading is still being measured."""
        segments = self._segments  # (read once: another thread may reset it, RECHECK)
        if segments is not None and segments[0] == nthreads:
            return segments[1]
        if any(launch is not None and launch.parallel is None for launch, _ in self._steps):
            return None
        if self._splits_key is not None:  # every decision measured: kept for the next process,
            # but for those measured while the other cores were busy
            decisions.store_splits(self._splits_key, [bool(launch.parallel) if launch.conclusive else None
                                                      for launch in self._timed_launches()])
            self._splits_key = None
            threads.pool(self.device.index).save_wake()  # (the cost they were measured with)
        if (self._rechecks < len(RECHECK) and nthreads > 1
                and any(not launch.conclusive for launch in self._timed_launches())):
            self._recheck = RECHECK[self._rechecks]
        segs: list[tuple] = []
        for i, (launch, step) in enumerate(self._steps):
            split = None
            if launch is not None and i not in self._in_region:  # (a loop's kernels are marked once, in __init__)
                split = launch.native_split(nthreads) if launch.parallel else None
                # a split by rows or columns: the runner calls the native pool
                self._table["fn"][self._record[i]] = launch.addr | (SPLIT[split] << SPLIT_SHIFT if split else 0)
            native = (launch is not None and (split is not None or not (launch.parallel and nthreads > 1))) \
                or isinstance(step, ControlStep)
            if native and i not in self._walked:
                if segs and segs[-1][0] == "run":
                    segs[-1] = ("run", segs[-1][1], segs[-1][2] + 1)
                else:
                    segs.append(("run", self._record[i], 1))
            else:
                segs.append(("step", launch, step))
        self._segments = (nthreads, segs)
        return segs

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        if self._recheck:  # a decision measured on busy cores, to measure again
            self._count_recheck()
        fast = self._fast
        if fast is not None and not profiler.enabled():  # a timeline records each kernel: the general path
            return fast.run(args)
        out = self._execute(args)
        segments = self._segments  # (read once: another thread's recheck may reset it to None)
        if not self._fast_checked and segments is not None:
            self._fast_checked = True
            self._fast = FastCall.build(self, segments[1])
        return out

    def _count_recheck(self) -> None:
        """Counts a call towards measuring the inconclusive decisions again (RECHECK); at
        the last one, those kernels forget their decision and the schedule and fast path
        are made again once they are measured (and the decisions stored again)."""
        left = self._recheck - 1
        self._recheck = max(left, 0)
        if left != 0:  # (below 0: another thread's call got there first)
            return
        self._rechecks += 1
        for launch in self._timed_launches():
            if not launch.conclusive:
                launch.remeasure()
        threads.pool(self.device.index).refresh_wake()  # (the cost may have been measured on busy cores too)
        self._splits_key = self._key
        self._fast, self._fast_checked = None, False
        self._segments = None

    def _execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        plan = self.plan
        if len(args) != plan.n_params:
            raise BackendError(f"cpu: the module takes {plan.n_params} argument(s), got {len(args)}")
        vals: list[Any] = [None] * plan.n_slots
        addrs = np.empty(plan.n_slots, np.uint64)
        for k, (a, t) in enumerate(zip(args, plan.param_types)):
            if a.type != t:
                raise BackendError(f"cpu: argument {k} is {a.type}, the module expects {t}")
            vals[k] = a.handle
            addrs[k] = _address(a)
        for s, arr in plan.constants.items():
            vals[s] = arr
        addrs[self._const_slots] = self._const_addrs
        # One arena per call for every temporary (offsets from buffer assignment, with
        # in-place reuse); pooled, so a repeated call touches no fresh pages.
        # A small arena shares the block of small outputs (one allocation per call).
        arena = None
        small_arena = plan.temp_bytes < MMAP_MIN
        if plan.temp_bytes and not small_arena:
            arena, base = POOL.alloc((plan.temp_bytes,), np.dtype(np.uint8))
            addrs[self._temp_slots] = self._temp_offs + np.uint64(base)
        for s, t in self._big_outs:
            vals[s], addrs[s] = POOL.alloc(t.shape, t.dtype.np)
        block_bytes = self._small_bytes + (plan.temp_bytes if small_arena else 0)
        if block_bytes:
            block = np.empty(block_bytes + 64, np.uint8)
            base = ctypes.addressof(ctypes.c_char.from_buffer(block))  # type: ignore[arg-type]  # an ndarray is a buffer
            pad = -base % 64
            addrs[self._small_slots] = self._small_offs + np.uint64(base + pad)
            for s, shape, dt, off in self._small_outs:
                vals[s] = np.ndarray(shape, dt, block, pad + off)
            if plan.temp_bytes and small_arena:
                start = pad + self._small_bytes
                arena = block[start:start + plan.temp_bytes]
                addrs[self._temp_slots] = self._temp_offs + np.uint64(base + start)
        tables = self._tables
        try:
            ptrs, ptrs_addr = tables.pop()  # a pointer table of this executable's (atomic under the GIL)
        except IndexError:  # another thread (or a nested call) holds them all
            ptrs = np.empty(len(self._src), np.uint64)
            ptrs_addr = address(ptrs) if len(ptrs) else 0
        np.take(addrs, self._src, out=ptrs)

        def arrays(slots: list[int]) -> list[np.ndarray]:
            for s in slots:
                if vals[s] is None:  # a temporary: a view of the arena
                    assert arena is not None, "a plan with temporaries has an arena"
                    t, off = self._temp_type[s], plan.temp_offsets[s]
                    vals[s] = arena[off:off + t.nbytes].view(t.dtype.np).reshape(t.shape)
            return [vals[s] for s in slots]

        tracing = profiler.enabled()
        # The schedule is fixed by the thread count when it was made (AXLE_CPU_THREADS is
        # read then, not on every call).
        # (read once: another thread's call may reset them to None to measure again, RECHECK)
        segments = self._segments
        pool: threads.NativePool | None = None
        if segments is not None:
            segs = None if tracing else segments[1]
        else:
            pool = threads.pool(self.device.index)
            segs = None if tracing else self._schedule(pool.n)
        if segs is None:  # step by step: measuring, or recording a timeline
            segs = [("step", launch, step) for launch, step in self._steps]
        k = 0
        while k < len(segs):
            seg = segs[k]
            k += 1
            if seg[0] == "run":
                # a "run" segment exists only when there are records, so _run_steps is set
                self._run_steps(self._table_addr + STEP.itemsize * seg[1], seg[2],  # type: ignore[misc]  # see above
                                ptrs_addr)
                continue
            _, launch, step = seg
            if isinstance(step, ControlStep):  # walked step by step: one segment per step
                k += _control(step, addrs) - 1
                continue
            t0 = profiler.now_us() if tracing else 0.0
            if launch is not None:
                pool = pool or threads.pool(self.device.index)
                launch.run(ptrs_addr, pool, lambda step=step: arrays(step.outs))
            else:
                step.fn(arrays(step.ins), arrays(step.outs))
            if tracing:
                profiler.kernel_event(step.label, self.device.name, t0, profiler.now_us() - t0,
                                      kind="kernel" if launch is not None else "host")
        tables.append((ptrs, ptrs_addr))
        out: list[Buffer] = []
        for s, t in zip(plan.results, plan.result_types):
            v = vals[s]
            if v is None:  # a result living in the arena (buffer assignment places results outside it)
                v = arrays([s])[0].copy()
            elif s < plan.n_params or s in plan.constants:
                v = np.array(v, copy=True)  # results never alias the caller's inputs
            else:
                out.append(CpuBuffer(self.device, t, v, int(addrs[s])))
                continue
            out.append(CpuBuffer(self.device, t, v, address(v)))
        return out

    def report(self) -> dict[str, Any]:
        kernels = sum(1 for launch, _ in self._steps if launch is not None)
        return {
            "kernels": kernels,
            "host_steps": sum(1 for _, step in self._steps if isinstance(step, HostStep)),
            "control_steps": sum(1 for _, step in self._steps if isinstance(step, ControlStep)),
            "steps": [s.label for _, s in self._steps],
            "compile_ms": round(self.compile_ms, 3),
            "threads": threads.device_threads(),
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
