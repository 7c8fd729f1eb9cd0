"""From a traced module to an executable: optimize (core pipeline + backend passes), then
hand the result to the device's backend. Nodes the device does not claim in its
capabilities are split off to the host by the partitioner (axle.partition)."""
from __future__ import annotations

from typing import Any

from . import profiler
from .backend import CompileOptions, Device, Executable
from .config import config
from .ir.module import Module
from .registry import REGISTRY


def flags_key() -> tuple:
    """The settings that change what compilation produces, for executable cache keys
    (a cached executable compiled without strict placement must not answer a call made
    with it, nor one compiled before ``--<backend>_<flag>`` changed)."""
    return (config.optimize, config.strict_placement, config.disable_passes,
            tuple(sorted(config.backend_flags.items())), config.check_indices)


def optimize_for(module: Module, device: Device) -> Module:
    """The module after the core pipeline and the backend's own passes."""
    from .passes import optimize

    backend = REGISTRY.backend_for(device)
    with profiler.span(f"optimize {module.name}", "optimize", device=device.name):
        return optimize(module, backend=backend, device=device)


def compile_on_device(module: Module, device: Device, *, optimize: bool = True) -> tuple[Executable, Module]:
    """Compiles the whole ``module`` for ``device``, no partitioning; returns the executable
    and the module the backend compiled (optimized unless ``optimize`` or ``config.optimize``
    is off)."""
    backend = REGISTRY.backend_for(device)
    run_passes = optimize and config.optimize
    if run_passes:
        module = optimize_for(module, device)
    with profiler.span(f"compile {module.name}", "compile", device=device.name, backend=backend.name):
        exe = backend.compile(module, device, CompileOptions(optimized=run_passes, flags=config.backend_flags))
    return exe, module


def compile_optimized(module: Module, device: Device, *, optimize: bool = True) -> tuple[Executable, Module]:
    """Compiles ``module`` for ``device``; returns the executable and the module the backend
    compiled. When the device does not claim every node, the partitioner (axle.partition)
    sends the rest to the host; the module returned is then the traced one, and
    ``axle.partition.placement_of(executable)`` tells what ran where."""
    from .partition import compile_placed

    return compile_placed(module, device, optimize=optimize)


def compile_module(module: Module, device: Device, *, optimize: bool = True) -> Executable:
    return compile_optimized(module, device, optimize=optimize)[0]


def executable_report(module: Module, executable: Executable) -> dict[str, Any]:
    """The core's facts about the compiled module (kernels, temp/peak bytes from buffer
    assignment) overlaid with what the backend's executable reports about itself."""
    from .passes.buffers import assign

    facts = assign(module).report()
    facts.update(executable.report())
    return facts
