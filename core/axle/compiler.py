"""From a traced module to an executable: optimize (core pipeline + backend passes), then
hand the result to the device's backend."""
from __future__ import annotations

from . import profiler
from .backend import CompileOptions, Device, Executable
from .config import config
from .ir.module import Module
from .registry import REGISTRY


def optimize_for(module: Module, device: Device) -> Module:
    """The module after the core pipeline and the backend's own passes."""
    from .passes import optimize

    backend = REGISTRY.backend_for(device)
    with profiler.span(f"optimize {module.name}", "optimize", device=device.name):
        return optimize(module, backend=backend)


def compile_module(module: Module, device: Device, *, optimize: bool = True) -> Executable:
    backend = REGISTRY.backend_for(device)
    run_passes = optimize and config.optimize
    if run_passes:
        module = optimize_for(module, device)
    with profiler.span(f"compile {module.name}", "compile", device=device.name, backend=backend.name):
        return backend.compile(module, device, CompileOptions(optimized=run_passes, flags=config.backend_flags))
