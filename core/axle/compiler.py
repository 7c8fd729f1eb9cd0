"""From a traced module to an executable: optimize (core pipeline + backend passes), then
hand the result to the device's backend."""
from __future__ import annotations

from typing import Any

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


def compile_optimized(module: Module, device: Device, *, optimize: bool = True) -> tuple[Executable, Module]:
    """Compiles ``module`` for ``device``; returns the executable and the module the
    backend compiled (optimized unless ``optimize`` or ``config.optimize`` is off)."""
    backend = REGISTRY.backend_for(device)
    run_passes = optimize and config.optimize
    if run_passes:
        module = optimize_for(module, device)
    with profiler.span(f"compile {module.name}", "compile", device=device.name, backend=backend.name):
        exe = backend.compile(module, device, CompileOptions(optimized=run_passes, flags=config.backend_flags))
    return exe, module


def compile_module(module: Module, device: Device, *, optimize: bool = True) -> Executable:
    return compile_optimized(module, device, optimize=optimize)[0]


def executable_report(module: Module, executable: Executable) -> dict[str, Any]:
    """The core's facts about the compiled module (kernels, temp/peak bytes from buffer
    assignment) overlaid with what the backend's executable reports about itself."""
    from .passes.buffers import assign

    facts = assign(module).report()
    facts.update(executable.report())
    return facts
