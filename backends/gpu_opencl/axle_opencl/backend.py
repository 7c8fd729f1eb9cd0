"""The ``opencl`` backend: every device of every OpenCL platform."""
from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from axle.backend import (
    Backend,
    BackendUnavailable,
    Buffer,
    Capabilities,
    CompileOptions,
    Device,
    Executable,
    LoweringEntry,
)
from axle.errors import BackendError
from axle.ir.dtypes import ALL_DTYPES, DType
from axle.ir.dtypes import dtype as to_dtype
from axle.ir.module import Module
from axle.ir.ops import BASE_PRIMITIVES, Op
from axle.ir.types import TensorType
from axle.passes.policy import FusionPolicy

from .convs import CONV_DTYPES
from .forking import check_not_forked, keep_forever, note_initialized
from .kernels import DeviceInfo

#: extended primitives lowered natively (the others get the core's decomposition)
CLAIMED_EXTENDED: frozenset[Op] = frozenset({
    # indexing: indexed loads in map kernels (values.py), update kernels (kernels.py)
    Op.GATHER, Op.DYNAMIC_SLICE, Op.SCATTER, Op.DYNAMIC_UPDATE_SLICE,
    # windowed: an implicit-GEMM convolution kernel (convs.py), with its epilogue
    Op.CONVOLUTION})
#: control flow: host loops and branches over the sub-computations' kernels (executable.py),
#: claimed only with every op inside (Capabilities._body_refusal)
CLAIMED_CONTROL: frozenset[Op] = frozenset({Op.WHILE, Op.CONDITIONAL})
_PLUMBING = (Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.FUSION)
GPU_PRIORITY = 300  # above the cpu backend: a GPU is the better default
CPU_PRIORITY = 50  # below the cpu (LLVM) backend: PoCL runs on the same cores, slower

#: the expression tables of elementwise ops: the shared C renderer's (axle.lowering.c), in
#: this backend's dialect, then the dialect's per-op replacements (PoCL fixes)
_EXPRESSION_TABLES = tuple((f"C expression ({t.lower().replace('_', ' ')})", f"axle.lowering.c:{t}") for t in (
    "FLOAT_UNARY", "FLOAT_BINARY", "INT_UNARY", "INT_BINARY", "BOOL_UNARY", "BOOL_BINARY")) + (
    ("PoCL fix: replaces the float unary expression", ".render:CL.float_unary_override"),)
#: kernels and helpers beyond the per-op rule and expression tables
_LOWERING_MORE: dict[Op, tuple[tuple[str, str], ...]] = {
    Op.TANH: (("float32 vectors: the shared rational fit (the builtin tanh does not vectorize on PoCL)",
               ".values:Renderer._vector_tanh"),),
    Op.CONVERT: (("the conversion expression", "axle.lowering.c:convert"),),
    Op.REDUCE: (("a reduction kernel: work-groups over the reduced axes, split in two passes when long",
                 ".kernels:group_reduce_kernel"),
                ("partial results combined per reduce kind", ".values:combine")),
    Op.DOT_GENERAL: (("a dot on its own, GPU strategy: local-memory tiles", ".dots:dot_kernel"),
                     ("a dot on its own, CPU strategy: register blocks over vector types", ".dots:dot_kernel_cpu"),
                     ("CPU strategy, enough rows: rhs slabs packed in local memory under register tiles",
                      ".dots:_packed")),
    Op.FUSION: (("a loop or row fusion: one work-item per element or row", ".kernels:map_kernel"),
                ("an input fusion ending in reductions", ".kernels:group_reduce_kernel")),
    # sorting
    Op.SORT: (("the shared stable merge sort kernel, one work-item per row", ".sort:sort_launch"),
              ("the C-family merge sort it renders in OpenCL C", "axle.lowering.sort:sort_kernel")),
    # windowed
    Op.CONVOLUTION: (("a convolution (and its epilogue), GPU strategy: implicit GEMM over local-memory tiles",
                      ".convs:conv_kernel"),
                     ("a convolution (and its epilogue), CPU strategy: register blocks over vector types",
                      ".convs:conv_kernel_cpu"),
                     ("the dtypes it computes (Capabilities.op_dtypes; others get the decomposition)",
                      ".convs:CONV_DTYPES")),
    # indexing
    Op.GATHER: (("the shared index map (clamped starts plus the window offset)", "axle.lowering.index:gather_index"),),
    Op.DYNAMIC_SLICE: (("the shared index map (clamped starts)", "axle.lowering.index:dynamic_slice_index"),),
    Op.SCATTER: (("the operand's buffer handed over when it dies here, else a copy kernel", ".plan:_update_steps"),
                 ("work-items over window positions, each applying the updates in index order",
                  ".kernels:update_kernel")),
    Op.DYNAMIC_UPDATE_SLICE: (("the operand's buffer handed over when it dies here, else a copy kernel",
                               ".plan:_update_steps"),
                              ("work-items over the window", ".kernels:update_kernel")),
    # control flow
    Op.WHILE: (("the condition's and body's plans, built at compile time", ".plan:_sub_plans"),
               ("a host loop over the body's kernels: no read-back for a known trip count, else the pred "
                "(one byte) per trip", ".executable:OpenCLExecutable._run_loop"),
               ("the trip count the program fixes", "axle.lowering.loops:known_trip_count")),
    Op.CONDITIONAL: (("each branch's plan, built at compile time", ".plan:_sub_plans"),
                     ("the index read back, then that branch's kernels", ".executable:OpenCLExecutable._run_branch")),
}


#: inside batched_builds: (the device's runtime, the kernels gathered), for this thread only
_BATCH: ContextVar[tuple[Any, list[Any]] | None] = ContextVar("axle_opencl_batch", default=None)


@contextmanager
def _batch(rt: Any) -> Iterator[None]:
    kernels: list[Any] = []
    token = _BATCH.set((rt, kernels))
    try:
        yield
    finally:
        _BATCH.reset(token)
    rt.build_batch(kernels)


def lowering_entries(op: Op) -> list[LoweringEntry]:
    """Where this backend lowers ``op`` (for `axle explain-op`; names resolve only when it
    runs): the kernel-body rule, the expression tables, then kernels some ops get."""
    return [LoweringEntry("kernel-body rule (values.py)", ".values:_RULES", op),
            *(LoweringEntry(what, where, op) for what, where in _EXPRESSION_TABLES),
            *(LoweringEntry(what, where) for what, where in _LOWERING_MORE.get(op, ())),
            LoweringEntry("the OpenCL C dialect, with PoCL's fixes", ".render:CL")]


#: where GPU drivers install their OpenCL library, and the library's name, per vendor
#: whose driver packages (containers' driver mounts above all) often leave out the ICD
#: file that registers it with the OpenCL loader
_DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/nvidia/lib64",
                "/usr/local/nvidia/lib")
_GPU_DRIVERS = {"NVIDIA": "libnvidia-opencl.so.1"}


def unregistered_drivers(platform_names: list[str], dirs: tuple[str, ...] = _DRIVER_DIRS,
                         vendors: str | None = None) -> list[str]:
    """What to do about a GPU driver's OpenCL library that is installed but that the OpenCL
    loader does not list: no platform of its vendor, the library in one of ``dirs`` and no
    ICD file under ``vendors`` (the loader's $OCL_ICD_VENDORS, else /etc/OpenCL/vendors)
    naming it. One line per such driver, with the command that registers it."""
    vendors = vendors or os.environ.get("OCL_ICD_VENDORS") or "/etc/OpenCL/vendors"
    try:
        icds = [Path(vendors, f).read_text(errors="replace") for f in sorted(os.listdir(vendors))
                if f.endswith(".icd")]
    except OSError:
        icds = []
    out = []
    for vendor, lib in _GPU_DRIVERS.items():
        if any(vendor.lower() in name.lower() for name in platform_names):
            continue
        path = next((Path(d, lib) for d in dirs if Path(d, lib).exists()), None)
        if path is None or any(lib.split(".so")[0] in icd for icd in icds):
            continue
        out.append(f"{vendor}'s OpenCL driver is installed ({path}) but no ICD file registers it, so "
                   f"its GPUs are not listed: echo {path} > {vendors}/{vendor.lower()}.icd (as root)")
    return out


def _enumerate() -> list[tuple[int, int, Any, Any]]:
    import pyopencl as cl

    try:
        platforms = cl.get_platforms()
    except cl.Error as e:  # no ICD / no platform
        hint = "".join(f"; {h}" for h in unregistered_drivers([]))
        raise BackendUnavailable(f"no OpenCL platform found ({e}); install an OpenCL driver, "
                                 f"e.g. the PoCL CPU runtime (Debian: pocl-opencl-icd){hint}") from None
    for hint in unregistered_drivers([p.name for p in platforms]):
        warnings.warn(f"axle-opencl: {hint}", RuntimeWarning, stacklevel=2)
    found = []
    for pi, p in enumerate(platforms):
        try:
            devs = p.get_devices()
        except cl.Error:
            continue
        for di, d in enumerate(devs):
            found.append((pi, di, p, d))
    if not found:
        raise BackendUnavailable("OpenCL platforms are installed but none has a device")
    # stable order: GPUs first, then accelerators, then CPUs; within a kind by platform, device
    def rank(item: tuple[int, int, Any, Any]) -> tuple[int, int, int]:
        t = item[3].type
        kind = 0 if t & cl.device_type.GPU else (1 if t & cl.device_type.ACCELERATOR else 2)
        return (kind, item[0], item[1])

    return sorted(found, key=rank)


def _kind(cl_device: Any) -> str:
    import pyopencl as cl

    t = cl_device.type
    return "gpu" if t & cl.device_type.GPU else ("accelerator" if t & cl.device_type.ACCELERATOR else "cpu")


def _strategy_info(info: DeviceInfo, options: CompileOptions) -> DeviceInfo:
    """The device description code generation reads, after ``--opencl_strategy``."""
    strategy = options.flags.get("opencl_strategy", "auto")
    if strategy not in ("auto", "gpu", "cpu"):
        raise BackendError(f"opencl: --opencl_strategy={strategy!r}; expected auto, gpu or cpu")
    if strategy != "auto":
        # Force a launch strategy (e.g. run the GPU kernels on PoCL in tests).
        info = replace(info, is_gpu=strategy == "gpu")
    return info


class OpenCLBackend(Backend):
    """OpenCL C code generation for OpenCL 1.2+ devices (GPUs, PoCL on CPUs)."""

    name = "opencl"
    # The default device is chosen per device (device_priority: GPUs 300, CPU devices 50);
    # the class priority only orders listings, where the backend sorts by name.
    priority = 0

    def __init__(self) -> None:
        try:
            import pyopencl  # noqa: F401 - only whether it imports
        except Exception as e:  # noqa: BLE001 - missing wheel or libOpenCL: report, never raise
            raise BackendUnavailable(f"pyopencl cannot be imported: {type(e).__name__}: {e}") from None
        self._devices: list[Device] = []
        self._cl: list[Any] = []
        self._runtimes: dict[int, Any] = {}
        # Runtimes are created on first use, which may happen in several threads at once:
        # two contexts for one device would hand one thread's buffers to another's queue.
        self._runtime_lock = threading.Lock()
        note_initialized(self)  # the driver is live from here on: a fork now cannot use it
        for index, (pi, di, p, d) in enumerate(_enumerate()):
            props = {
                "platform": p.name.strip(),
                "device": d.name.strip(),
                "type": _kind(d),
                "compute_units": d.max_compute_units,
                "global_memory": f"{d.global_mem_size / 2**30:.1f} GiB",
                "fp64": "cl_khr_fp64" in d.extensions.split(),
            }
            self._devices.append(Device("opencl", index, f"{p.name.strip()}: {d.name.strip()}", kind=_kind(d),
                                        properties=props, aliases=(f"opencl:{pi}:{di}",)))
            self._cl.append(d)

    # -- devices -----------------------------------------------------------------
    def devices(self) -> Sequence[Device]:
        return list(self._devices)

    def device_priority(self, device: Device) -> int:
        return GPU_PRIORITY if device.kind == "gpu" else CPU_PRIORITY

    def after_fork_in_child(self) -> None:
        """(forking.py) The parent's contexts, queues and pools belong to driver state
        the child cannot use; dropping them would release them through it, so they are
        kept forever."""
        keep_forever(*self._runtimes.values())
        self._runtime_lock = threading.Lock()

    def runtime(self, device: Device) -> Any:
        check_not_forked()
        rt = self._runtimes.get(device.index)
        if rt is None:
            # the compile path's modules come with the runtime, as runtime.py brings
            # pyopencl's invoker: imported in a first call they were about 5 ms of it
            from . import executable, plan, plan_cache  # noqa: F401 - imported for their cost, not used here
            from .runtime import DeviceRuntime

            with self._runtime_lock:
                rt = self._runtimes.get(device.index)
                if rt is None:
                    rt = self._runtimes[device.index] = DeviceRuntime(self._cl[device.index])
        return rt

    def capabilities(self, device: Device) -> Capabilities:
        fp64 = bool(device.properties.get("fp64"))
        dts = frozenset(d for d in ALL_DTYPES if fp64 or d is not DType.FLOAT64)
        return Capabilities(ops=BASE_PRIMITIVES | CLAIMED_EXTENDED | CLAIMED_CONTROL, dtypes=dts,
                            limits={"max_fusion_nodes": 128, "max_elements": 2**31 - 1},
                            # the convolution kernels' dtypes; the others get the decomposition
                            op_dtypes={Op.CONVOLUTION: CONV_DTYPES & dts},
                            # a strided convolution's input gradient without the dilation's
                            # zeros (passes/conv_phases.py; docs/backend-opencl.md)
                            conv_phase_split=True)

    def fusion_policy(self) -> FusionPolicy:
        # dot_epilogue, conv_epilogue: the dot and convolution kernels finish each
        # accumulator with its epilogue (dots.py, convs.py); a transpose over more than 1 MiB
        # that moves the contiguous axis is a kernel of its own: fused, it recomputes its
        # producers at strided positions (one cache line per element on CPU devices)
        return FusionPolicy(max_fusion_nodes=128, row_fusion=True, multi_output=True, dot_epilogue=True,
                            conv_epilogue=True, max_fused_strided_transpose_bytes=1 << 20)

    def lowering_entries(self, op: Op) -> list[LoweringEntry]:
        return lowering_entries(op)

    # -- compile -----------------------------------------------------------------
    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        from axle import profiler

        from . import plan_cache
        from .executable import OpenCLExecutable, PlannedOnly
        from .plan import plan_module

        rt = self.runtime(device)
        if not rt.info.fp64:
            f64 = [n for c in module.computations() for n in c.nodes
                   if any(isinstance(t, TensorType) and t.dtype is DType.FLOAT64 for t in [n.type] +
                          [o.type for o in n.operands]) and n.op not in _PLUMBING]
            if f64:
                n = f64[0]
                raise BackendError(f"opencl: {n.op.value} ({n.type}) needs float64, but {device.name} "
                                   f"({device.description}) has no cl_khr_fp64; convert to float32 first",
                                   where=n.loc)
        info = _strategy_info(rt.info, options)
        # the plan (rendered kernels included) from an earlier process when the compile
        # cache has it for this optimized module (plan_cache.py): a hit renders nothing
        key = payload = plan = None
        if options.module_digest is not None and plan_cache.enabled():
            key = plan_cache.plan_key(options.module_digest, rt.cl_device, info, options.flags)
            plan = None if options.cache_checked else plan_cache.load(key)
        if plan is None:
            with profiler.span(f"codegen {module.name}", "codegen", device=device.name):
                plan = plan_module(module, info)
            if key is not None:
                payload = plan_cache.entry(plan)  # before the executable uploads its constants
        batch = _BATCH.get()
        if batch is not None and batch[0] is rt:  # inside batched_builds: the kernels go to the batch
            planned = PlannedOnly(plan, device)
            batch[1].extend(planned.kernels)
            return planned
        with profiler.span(f"compile {module.name}", "compile", device=device.name):
            exe = OpenCLExecutable(plan, device, rt)
        if key is not None and payload is not None:  # stored once its kernels built
            plan_cache.store(key, payload)
        return exe

    def cached_executable(self, device: Device, options: CompileOptions) -> Executable | None:
        """The executable of a cached plan (plan_cache.py), made without the module: the plan
        holds every kernel's source, launch shape and argument layout, and the program binary
        is then found by its source (runtime.build_program). A plan was stored only after
        ``compile`` accepted its module on this device (float64 included: the device is in
        the key), so nothing of the module is checked again."""
        from . import plan_cache
        from .executable import OpenCLExecutable

        if options.module_digest is None or not plan_cache.enabled():
            return None
        rt = self.runtime(device)
        info = _strategy_info(rt.info, options)
        plan = plan_cache.load(plan_cache.plan_key(options.module_digest, rt.cl_device, info, options.flags))
        return None if plan is None else OpenCLExecutable(plan, device, rt)

    def batched_builds(self, device: Device) -> AbstractContextManager[None]:
        """Kernels of the modules compiled inside are built together at the end, as a few
        programs (DeviceRuntime.build_batch): PoCL spends ~70 ms on a program beyond its
        kernels (~16 ms when its kernel cache has it), the conformance kit compiles
        thousands of one-kernel modules."""
        return _batch(self.runtime(device))

    # -- buffers -----------------------------------------------------------------
    def to_device(self, array: np.ndarray, device: Device) -> Buffer:
        arr = np.asarray(array, order="C")  # (np.ascontiguousarray would make 0-d arrays 1-d)
        t = TensorType(to_dtype(arr.dtype), tuple(arr.shape))
        return Buffer(device, t, self.runtime(device).upload(arr))

    def to_host(self, buffer: Buffer) -> np.ndarray:
        return self.runtime(buffer.device).download(buffer.handle, buffer.type.dtype.np, buffer.type.shape)

    def free(self, buffer: Buffer) -> None:
        check_not_forked()
        if buffer.handle is not None:
            buffer.handle.release()

    def synchronize(self, device: Device) -> None:
        self.runtime(device).wait()
