"""The OpenCL runtime: one context and in-order queue per device, buffers, and programs
cached in memory by source hash (and on disk through pyopencl's binary cache)."""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.tools  # noqa: F401 - MemoryPool

from axle.errors import BackendError

from .kernels import DeviceInfo, Kernel, program_source

CACHE_DIR = os.environ.get("AXLE_OPENCL_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "axle", "opencl"))


def _cache_dir() -> Any:
    """pyopencl's on-disk binary cache for our programs (None: in-memory only)."""
    try:
        os.makedirs(CACHE_DIR, exist_ok=True)
        return CACHE_DIR
    except OSError:
        return None


def device_info(d: "cl.Device") -> DeviceInfo:
    exts = d.extensions.split()
    return DeviceInfo(
        is_gpu=bool(d.type & cl.device_type.GPU),
        compute_units=max(1, d.max_compute_units),
        max_work_group=max(1, d.max_work_group_size),
        local_mem=d.local_mem_size,
        fp64="cl_khr_fp64" in exts,
        float_lanes=int(os.environ.get("AXLE_OPENCL_FLOAT_LANES", 0)) or int(min(16, max(4, d.preferred_vector_width_float or 4))),
        double_lanes=int(min(8, max(2, d.preferred_vector_width_double or 2))),
    )


class DeviceRuntime:
    """Context, queue and program cache of one OpenCL device."""

    def __init__(self, cl_device: "cl.Device") -> None:
        self.cl_device = cl_device
        self.info = device_info(cl_device)
        self.context = cl.Context([cl_device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self._kernels: dict[str, cl.Kernel] = {}
        self._lock = threading.Lock()
        # Kernels never see a zero-size buffer: empty operands bind this instead.
        self.dummy = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 16)
        # Kernel outputs come from a caching pool: a dropped result's memory is reused
        # by the next allocation of its size class, so repeated calls do not pay for
        # fresh pages (and their first-touch faults on CPU devices). The queue is
        # in-order, so reuse never overtakes a pending reader.
        self.pool = cl.tools.MemoryPool(cl.tools.ImmediateAllocator(self.queue))

    # -- buffers -------------------------------------------------------------------
    def upload(self, array: np.ndarray) -> "cl.Buffer | None":
        if array.size == 0:
            return None
        host = np.ascontiguousarray(array)
        if host.dtype == np.bool_:
            host = host.view(np.uint8)
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)

    def alloc(self, nbytes: int) -> "cl.Buffer | None":
        return self.pool.allocate(nbytes) if nbytes > 0 else None

    def download(self, buf: "cl.Buffer | None", dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        if buf is None or out.size == 0:
            return out
        target = out.view(np.uint8) if out.dtype == np.bool_ else out
        cl.enqueue_copy(self.queue, target, buf, is_blocking=True)
        return out

    # -- programs ------------------------------------------------------------------
    def kernel(self, k: Kernel) -> "cl.Kernel":
        hit = self._kernels.get(k.name)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._kernels.get(k.name)
            if hit is None:
                hit = cl.Kernel(self._build(k), k.name)
                self._kernels[k.name] = hit
        return hit

    def _build(self, k: Kernel) -> "cl.Program":
        if k.uses_fp64 and not self.info.fp64:
            raise BackendError(f"opencl: {k.what} needs float64, but {self.cl_device.name.strip()} has no "
                               f"cl_khr_fp64; convert to float32 first")
        try:
            return cl.Program(self.context, k.source).build(options=["-cl-std=CL1.2"], cache_dir=_cache_dir())
        except cl.Error as e:
            log = getattr(e, "build_log", None) or str(e)
            raise BackendError(f"opencl: building the kernel for {k.what} failed on "
                               f"{self.cl_device.name.strip()}:\n{log}\n--- generated source ---\n{k.source}") from None

    def build_many(self, kernels: list[Kernel]) -> None:
        """Builds several kernels' sources as one program (one compiler invocation)."""
        todo = {k.name: k for k in kernels if k.name not in self._kernels}
        if not todo:
            return
        if any(k.uses_fp64 for k in todo.values()) and not self.info.fp64:
            for k in todo.values():
                self.kernel(k)
            return
        helpers = frozenset().union(*(k.helpers for k in todo.values()))
        src = program_source("\n".join(k.body for k in todo.values()), set(helpers),
                             any(k.uses_fp64 for k in todo.values()))
        try:
            prg = cl.Program(self.context, src).build(options=["-cl-std=CL1.2"], cache_dir=_cache_dir())
        except cl.Error:
            for k in todo.values():
                self.kernel(k)
            return
        with self._lock:
            for name in todo:
                self._kernels.setdefault(name, cl.Kernel(prg, name))
