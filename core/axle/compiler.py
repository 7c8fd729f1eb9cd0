"""From a traced module to an executable: optimize (core pipeline + backend passes), then
hand the result to the device's backend. Nodes the device does not claim in its
capabilities are split off to the host by the partitioner (axle.partition)."""
from __future__ import annotations

from .backend import CompileOptions, Device, Executable
from .config import config
from .ir.module import Module
from .registry import REGISTRY


def optimize_for(module: Module, device: Device) -> Module:
    """The module after the core pipeline and the backend's own passes."""
    from .passes import optimize

    backend = REGISTRY.backend_for(device)
    return optimize(module, backend=backend)


def compile_on_device(module: Module, device: Device, *, optimize: bool = True) -> Executable:
    """Optimizes and compiles the whole module for ``device``, no partitioning."""
    backend = REGISTRY.backend_for(device)
    run_passes = optimize and config.optimize
    if run_passes:
        module = optimize_for(module, device)
    return backend.compile(module, device, CompileOptions(optimized=run_passes, flags=config.backend_flags))


def compile_module(module: Module, device: Device, *, optimize: bool = True) -> Executable:
    """An executable for ``device``; what the device cannot run goes to the host (see
    axle.partition; ``axle.partition.placement_of(exe)`` tells what ran where)."""
    from .partition import compile_placed

    return compile_placed(module, device, optimize=optimize)
