"""The OpenCL runtime: one context and in-order queue per device, buffers, and programs
cached in memory by source hash (bounded, --jit_cache_size) and on disk as binaries
(axle.diskcache: private directory, atomic writes, no pickle).

Thread safety: OpenCL calls are thread-safe except setting a kernel's arguments, which
must not interleave with another thread's launch of the same kernel object, so a launch
(set_args + enqueue) holds ``launch_lock``; pyopencl's memory pool is not documented as
thread-safe, so allocation holds it too (an eager launch allocates its results and enqueues
under one acquisition)."""
from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Sequence

import numpy as np
import pyopencl as cl
import pyopencl.characterize  # imported by pyopencl's first kernel object: here, not in a first call
import pyopencl.invoker  # imported by pyopencl's first kernel object: here, not in a first call
import pyopencl.tools  # loads cl.tools (MemoryPool)

from axle.config import config
from axle.diskcache import DiskCache
from axle.errors import BackendError
from axle.lru import LRU

from .forking import in_forked_child
from .kernel_object import new_kernel
from .kernels import DeviceInfo, Kernel, program_source
from .render import helpers_of

#: bumped when what a cached binary depends on changes beyond source, options and driver
CACHE_VERSION = b"axle-opencl-1"
#: the options every program is built with (see _build: nothing else is added)
BUILD_OPTIONS = ["-cl-std=CL1.2"]
#: added where the device offers it: float32 division and sqrt correctly rounded, as the
#: interpreter and the cpu backend compute them (NVIDIA's default division is 2.5 ulp)
CORRECT_DIVISION = "-cl-fp32-correctly-rounded-divide-sqrt"


def build_options(dev: cl.Device) -> str:
    """The options of every program built for ``dev``."""
    exact = dev.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
    return " ".join(BUILD_OPTIONS + ([CORRECT_DIVISION] if exact else []))
#: program binaries on disk, under --compile_cache (private directory, no pickle: axle.diskcache)
DISK = DiskCache(None, "OpenCL program", sub="opencl")


def disk_cache() -> DiskCache:
    return DISK


def _binary_key(dev: cl.Device, source: str) -> bytes:
    """Everything a program binary depends on: format version, platform and driver,
    device, options and source."""
    parts: list[str | bytes] = [CACHE_VERSION, dev.platform.name, dev.platform.version, dev.name, dev.driver_version,
             build_options(dev), source]
    return b"\0".join(p if isinstance(p, bytes) else p.encode() for p in parts)


def build_program(context: cl.Context, dev: cl.Device, source: str) -> cl.Program:
    """A built program: from our disk cache when a binary for exactly this source, device
    and driver is there, else from source (then stored). pyopencl's own binary cache is
    bypassed (_build): it unpickles files from a shared directory."""
    cache = disk_cache()
    key = _binary_key(dev, source)
    binary = cache.get(key)
    if binary is not None:
        try:
            return _sourced(_build(cl._cl._Program(context, [dev], [binary]), dev), source)
        except cl.Error:
            pass  # a binary the driver no longer accepts: rebuild from source below
    prg = _build(cl._cl._Program(context, source), dev)
    try:
        (out,) = prg.binaries
        if out:
            cache.put(key, bytes(out))
    except cl.Error:
        pass  # a driver that gives no binary: in-memory only
    return _sourced(prg, source)


def _sourced(prg: cl.Program, source: str) -> cl.Program:
    """``prg`` with its source as pyopencl's ``Program`` keeps it (``_source``). pyopencl's
    ``Kernel`` constructor reads that attribute of its program: on a program wrapped from a
    built one it is missing, and the program's ``__getattr__`` took the name for a kernel's
    (a failed ``clCreateKernel`` and an exception, 5-6 us of each kernel object: 20 of a
    cached first call of the MNIST step)."""
    prg._source = source
    return prg


def _build(prg: cl._cl._Program, dev: cl.Device) -> cl.Program:
    """Builds with exactly ``build_options(dev)``. pyopencl's ``Program.build`` is bypassed: it
    consults its pickle-based binary cache, and it adds ``-I <its own headers>``, a path
    inside the Python environment, which drivers hash into their own cache keys (PoCL's
    kernel cache): every virtual environment, every clean clone in CI, would build every
    kernel anew. The error of a failed build carries the driver's build log."""
    prg.build(build_options(dev).encode(), [dev])
    return cl.Program(prg)


#: every runtime of this process, for the queues to finish at exit
_runtimes: weakref.WeakSet[DeviceRuntime] = weakref.WeakSet()


@atexit.register
def _finish_queues_at_exit() -> None:
    """PoCL compiles a kernel for its work-group size at its first launch, on a worker
    thread. A process that exits with such a launch queued (a result it never read) runs
    the exit handlers, LLVM's destructors among them, under that compiling thread: SIGSEGV
    after a successful run. Finishing the queues first leaves the driver idle at exit.
    (Registered after pyopencl's own exit handlers, so it runs before them.)"""
    if in_forked_child():  # the inherited driver state must not be called into
        return
    for rt in list(_runtimes):
        rt.release()
        rt.queue.finish()


#: eager launches held back at most by one gate (DeviceRuntime.hold): the gate is meant to
#: open at the program's next wait, not among its eager ops. PoCL's workers, once let go,
#: run the batch beside the host's next launches and contend with them for the queue's
#: and the events' locks: with a gate of 32, on a 2-core host whose other core was free,
#: an eager add cost the host 4.2-5.2 us of CPU against 3.4-3.7 with the workers asleep
#: (docs/backend-opencl.md, "Eager"). Bounded, so that a program that never waits still
#: runs its kernels; only small launches are held (HOLD_BYTES), so the held work stays a
#: few milliseconds at most
GATE_DEPTH = 1024
#: a single launch is held back only when its arguments and results together are at most
#: this many bytes (a kernel of a few microseconds, about what PoCL spends starting one);
#: a larger one lets the gate go and starts at once (DeviceRuntime.unhold), as does a
#: larger plan of several kernels (OpenCLExecutable._starts): its own run time hides the
#: workers' wake-up, and it should overlap the host's next work
HOLD_BYTES = 1 << 16

#: kernels kept per executable-cache entry (an executable usually has a few kernels)
_KERNELS_PER_PROGRAM_CACHE = 2
#: kernels in one program of a batched build (DeviceRuntime.build_batch): PoCL's cost per
#: program (preprocessing, linking its kernel library: ~70 ms cold, ~16 ms from its cache)
#: is then shared; a bound, since one changed kernel makes the whole program miss
#: PoCL's cache
BATCH_KERNELS = 64

#: the status codes of an allocation the device refused (too large for one buffer, or no
#: memory left): raised as MemoryError, which the frontend reports as an axle error
#: naming the op or jit function
_ALLOCATION_FAILURES = frozenset({cl.status_code.INVALID_BUFFER_SIZE, cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
                                  cl.status_code.OUT_OF_RESOURCES, cl.status_code.OUT_OF_HOST_MEMORY})


def device_info(d: cl.Device) -> DeviceInfo:
    exts = d.extensions.split()
    return DeviceInfo(
        is_gpu=bool(d.type & cl.device_type.GPU),
        compute_units=max(1, d.max_compute_units),
        max_work_group=max(1, d.max_work_group_size),
        local_mem=d.local_mem_size,
        fp64="cl_khr_fp64" in exts,
        float_lanes=(int(os.environ.get("AXLE_OPENCL_FLOAT_LANES", 0))
                     or int(min(16, max(4, d.preferred_vector_width_float or 4)))),
        double_lanes=int(min(8, max(2, d.preferred_vector_width_double or 2))),
    )


class DeviceRuntime:
    """Context, queue and program cache of one OpenCL device."""

    def __init__(self, cl_device: cl.Device) -> None:
        self.cl_device = cl_device
        self.info = device_info(cl_device)
        self.context = cl.Context([cl_device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        # Programs by kernel name (a hash of the kernel's source; kernels built together
        # share one). Programs, not kernels: pyopencl generates an argument-setting function
        # for every kernel object it makes (its invoker, 0.3-0.5 ms), and an executable makes
        # its own kernel per step anyway. Bounded: an evicted program is released once no
        # executable holds it (executables keep their own kernels).
        self._programs: LRU[cl.Program] = LRU(lambda: _KERNELS_PER_PROGRAM_CACHE * config.jit_cache_size)
        self._lock = threading.Lock()  # builds: one at a time per device
        self.launch_lock = threading.Lock()  # kernel arguments, the queue's gate, the pool
        # Kernels never see a zero-size buffer: empty operands bind this instead.
        self.dummy = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 16)
        # Kernel outputs come from a caching pool: a dropped result's memory is reused
        # by the next allocation of its size class, so repeated calls do not pay for
        # fresh pages (and their first-touch faults on CPU devices). The queue is
        # in-order, so reuse never overtakes a pending reader.
        self.pool = cl.tools.MemoryPool(cl.tools.ImmediateAllocator(self.queue))
        self.max_alloc = int(cl_device.max_mem_alloc_size)
        # Eager launches wait behind a barrier on a user event (the gate), completed by
        # release(): PoCL then wakes its worker threads once per batch instead of once per
        # kernel, which on a busy host costs each eager op more than its enqueueing (hold()).
        self._gate: cl.UserEvent | None = None
        self._gated = 0
        # Only on CPU devices, where each kernel's start wakes the host's worker threads: a
        # GPU starts kernels on its own, and NVIDIA's driver crashed (SIGSEGV in its own
        # thread) running held kernels whose argument buffers had been released meanwhile.
        self.gates_eager = bool(cl_device.type & cl.device_type.CPU)
        _runtimes.add(self)

    def _refused(self, nbytes: int, e: cl.Error | None = None) -> MemoryError:
        """The error of an allocation of ``nbytes`` the device cannot make."""
        why = f" ({e.what})" if e is not None else ""
        return MemoryError(f"{self.cl_device.name.strip()} cannot allocate a buffer of {nbytes:,} bytes{why}; "
                           f"its largest buffer is {self.max_alloc:,} bytes")

    # -- eager batching ------------------------------------------------------------
    def hold(self) -> None:
        """Holds back the eager launch enqueued next (the caller holds ``launch_lock``):
        behind the current gate, a barrier on a user event, or a new one after GATE_DEPTH
        launches (the full one let go). The queue is in order, so everything enqueued after
        the barrier waits with it, and every wait on the queue lets the gate go first
        (``download``, ``wait``, exit): holding kernels back never changes a value read and
        never blocks a reader. Enqueueing errors still raise at the launch: only the
        kernels' start is deferred."""
        if not self.gates_eager:
            return
        if self._gate is None or self._gated >= GATE_DEPTH:
            self._open()
            gate = cl.UserEvent(self.context)
            cl.enqueue_barrier(self.queue, wait_for=[gate])
            self._gate, self._gated = gate, 0
        self._gated += 1

    def count(self) -> None:
        """Counts toward GATE_DEPTH a launch enqueued behind the current gate that ``hold``
        did not hold (a kernel of a plan of several steps; the caller holds
        ``launch_lock``), and lets the gate go at the bound: uncounted, a loop of small
        jitted calls after one eager op waited behind that op's gate, every kernel of it
        held until the program's next wait."""
        if self._gate is not None:
            self._gated += 1
            if self._gated >= GATE_DEPTH:
                self._open()

    def unhold(self) -> None:
        """The launch enqueued next starts at once (the caller holds ``launch_lock``): the
        gated launches before it are let go with it (a launch too large to hold,
        HOLD_BYTES)."""
        self._open()

    def _open(self) -> None:
        """Lets the gated launches run (the caller holds ``launch_lock``)."""
        if self._gate is not None:
            self._gate.set_status(cl.command_execution_status.COMPLETE)
            self._gate = None

    def release(self) -> None:
        """Lets every gated launch run: called before anything waits on the queue."""
        if self._gate is not None:
            with self.launch_lock:
                self._open()

    def wait(self, event: cl.Event | None = None) -> None:
        """Waits for ``event`` (None: everything enqueued so far), the gate let go first.
        The release and the marker are one step under ``launch_lock``, so another
        thread's later eager launch (gated) can never come before what this waits for."""
        with self.launch_lock:
            self._open()
            if event is None:
                event = cl.enqueue_marker(self.queue)
        event.wait()

    # -- buffers -------------------------------------------------------------------
    def upload(self, array: np.ndarray) -> cl.Buffer | None:
        if array.size == 0:
            return None
        if array.nbytes > self.max_alloc:  # refused before a contiguous host copy is made
            raise self._refused(array.nbytes)
        host = np.ascontiguousarray(array)
        if host.dtype == np.bool_:
            host = host.view(np.uint8)
        elif host.dtype.kind == "V":  # bfloat16: its bits (no buffer-protocol format of its own)
            host = host.view(np.uint16)
        try:
            return cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
        except cl.Error as e:
            if e.code not in _ALLOCATION_FAILURES:
                raise
            raise self._refused(host.nbytes, e) from None

    def allocation_error(self, nbytes: int, e: cl.Error) -> Exception:
        """What a failed allocation of ``nbytes`` raises: a MemoryError naming the sizes
        where the device refused it (the frontend reports it with the op), else ``e``."""
        return self._refused(nbytes, e) if e.code in _ALLOCATION_FAILURES else e

    def alloc(self, nbytes: int) -> cl.MemoryObjectHolder | None:  # a pooled buffer
        if nbytes <= 0:
            return None
        if nbytes > self.max_alloc:
            raise self._refused(nbytes)
        try:
            with self.launch_lock:
                return self.pool.allocate(nbytes)
        except cl.Error as e:
            raise self.allocation_error(nbytes, e) from None

    def copy(self, buf: cl.MemoryObjectHolder, nbytes: int) -> cl.MemoryObjectHolder | None:
        """A new (pooled) buffer holding ``buf``'s first ``nbytes``, copied on the device."""
        out = self.alloc(nbytes)
        if out is not None:
            cl.enqueue_copy(self.queue, out, buf, byte_count=nbytes)  # type: ignore[call-overload]  # pooled buffers are MemoryObjectHolders, which the stubs do not list
        return out

    def download(self, buf: cl.Buffer | None, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        if buf is None or out.size == 0:
            return out
        target = out.view(np.uint8) if out.dtype == np.bool_ else out.view(np.uint16) if out.dtype.kind == "V" else out
        with self.launch_lock:  # the gate let go, and the copy queued before any later eager launch
            self._open()
            copied = cl.enqueue_copy(self.queue, target, buf, is_blocking=False)
        copied.wait()
        return out

    # -- programs ------------------------------------------------------------------
    def program(self, k: Kernel) -> cl.Program:
        """The built program holding kernel ``k`` (cached by its name)."""
        hit = self._programs.get(k.name)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._programs.get(k.name)
            if hit is None:
                hit = self._programs.put(k.name, self._build(k))
        return hit

    def kernel(self, k: Kernel) -> cl.Kernel:
        """A new kernel object of ``k`` (its arguments are its own to set)."""
        return new_kernel(self.program(k), k.name)

    def _build(self, k: Kernel) -> cl.Program:
        if k.uses_fp64 and not self.info.fp64:
            raise BackendError(f"opencl: {k.what} needs float64, but {self.cl_device.name.strip()} has no "
                               f"cl_khr_fp64; convert to float32 first")
        try:
            return build_program(self.context, self.cl_device, k.source)
        except cl.Error as e:
            log = getattr(e, "build_log", None) or str(e)
            raise BackendError(f"opencl: building the kernel for {k.what} failed on "
                               f"{self.cl_device.name.strip()}:\n{log}\n--- generated source ---\n{k.source}") from None

    def build_batch(self, kernels: Sequence[Kernel]) -> None:
        """Builds kernels gathered from several executables (``Backend.batched_builds``)
        into the program cache, as programs of at most BATCH_KERNELS kernels. Nothing goes to
        the disk cache: no executable's own program has such a source. A program that fails
        to build is dropped: each executable then builds its own kernels, and the one whose
        kernel fails names it."""
        todo = list({k.name: k for k in kernels if self._programs.get(k.name) is None
                     and (self.info.fp64 or not k.uses_fp64)}.values())
        for i in range(0, len(todo), BATCH_KERNELS):
            chunk = todo[i:i + BATCH_KERNELS]
            src = program_source("\n".join(k.body for k in chunk), any(k.uses_fp64 for k in chunk),
                                 helpers_of(k.helpers for k in chunk))
            with self._lock:
                try:
                    prg = _sourced(_build(cl._cl._Program(self.context, src), self.cl_device), src)
                except cl.Error:
                    continue
                for k in chunk:
                    self._programs.put(k.name, prg)

    def build_many(self, kernels: list[Kernel]) -> None:
        """Builds several kernels' sources as one program (one compiler invocation)."""
        todo = {k.name: k for k in kernels if self._programs.get(k.name) is None}
        if not todo:
            return
        if any(k.uses_fp64 for k in todo.values()) and not self.info.fp64:
            for k in todo.values():
                self.program(k)
            return
        src = program_source("\n".join(k.body for k in todo.values()), any(k.uses_fp64 for k in todo.values()),
                             helpers_of(k.helpers for k in todo.values()))
        with self._lock:
            try:
                prg = build_program(self.context, self.cl_device, src)
            except cl.Error:
                prg = None
            if prg is not None:
                for name in todo:
                    self._programs.put(name, prg)
        if prg is None:
            for k in todo.values():
                self.program(k)
