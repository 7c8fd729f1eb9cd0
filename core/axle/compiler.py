"""From a traced module to an executable: optimize (core pipeline + backend passes), then
hand the result to the device's backend. Nodes the device does not claim in its
capabilities are split off to the host by the partitioner (axle.partition).

The facade over two layers: whole-module compilation for one device
(axle.device_compile, re-exported here) and the partitioner built on it."""
from __future__ import annotations

from .backend import Device, Executable
from .device_compile import compile_on_device, executable_report, flags_key, optimize_for
from .ir.module import Module
from .partition import compile_placed

__all__ = ["compile_module", "compile_on_device", "compile_optimized", "executable_report", "flags_key",
           "optimize_for"]


def compile_optimized(module: Module, device: Device, *, optimize: bool = True) -> tuple[Executable, Module]:
    """Compiles ``module`` for ``device``; returns the executable and the module the backend
    compiled. When the device does not claim every node, the partitioner (axle.partition)
    sends the rest to the host; the module returned is then the traced one, and
    ``axle.partition.placement_of(executable)`` tells what ran where."""
    return compile_placed(module, device, optimize=optimize)


def compile_module(module: Module, device: Device, *, optimize: bool = True) -> Executable:
    # the compiled module is dropped: a cached one need not be parsed (compile_on_device)
    return compile_placed(module, device, optimize=optimize, keep_module=False)[0]
