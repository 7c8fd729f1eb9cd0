"""Compiling a whole module for one device: the core pipeline and the backend's own
passes, then the backend's ``compile``. The partitioner (axle.partition) calls this for
each cluster; the compiler facade (axle.compiler) puts the two together."""
from __future__ import annotations

from collections import Counter
from typing import Any

from . import module_cache, passes, profiler
from .backend import CompileOptions, Device, Executable
from .config import config
from .ir.module import Module, Node
from .passes.buffers import assign
from .passes.expand import expand_extended
from .registry import REGISTRY


def flags_key() -> tuple:
    """The settings that change what compilation produces, for executable cache keys
    (a cached executable compiled without strict placement must not answer a call made
    with it, nor one compiled before ``--<backend>_<flag>`` changed)."""
    flags = config.backend_flags  # read on every jit call: no sort when there are none
    return (config.optimize, config.strict_placement, config.disable_passes,
            tuple(sorted(flags.items())) if flags else (), config.check_indices)


def optimize_for(module: Module, device: Device) -> Module:
    """The module after the expansion of the extended ops ``device`` does not claim, the
    core pipeline and the backend's own passes."""
    backend = REGISTRY.backend_for(device)
    module, _ = expand_for(module, device)
    with profiler.span(f"optimize {module.name}", "optimize", device=device.name):
        return passes.optimize(module, backend=backend, device=device)


def expand_for(module: Module, device: Device, reasons: dict[str, str] | None = None) -> tuple[Module, Counter[str]]:
    """``module`` with the extended primitives ``device`` does not claim expanded into their
    decompositions (passes/expand.py), and how many of each op were expanded. ``reasons``,
    when given, gets the device's refusal per expanded op (the first one met)."""
    caps = REGISTRY.backend_for(device).capabilities(device)

    def claimed(n: Node) -> bool:
        why = caps.refusal(n)
        if why is not None and reasons is not None:
            reasons.setdefault(n.op.value, why)
        return why is None

    return expand_extended(module, claimed)


def compile_on_device(module: Module, device: Device, *, optimize: bool = True,
                      keep_module: bool = True) -> tuple[Executable, Module]:
    """Compiles the whole ``module`` for ``device``, no partitioning; returns the executable
    and the module the backend compiled (optimized unless ``optimize`` or ``config.optimize``
    is off). ``keep_module=False``: the caller drops that module, so a new process's first
    call whose optimized module and executable are both in the compile cache
    (``Backend.cached_executable``) parses nothing, and the expanded traced module is
    returned in its place."""
    backend = REGISTRY.backend_for(device)
    module, _ = expand_for(module, device)
    run_passes = optimize and config.optimize
    key, payload, digest, asked = None, None, None, None
    if run_passes:
        # the optimized module from an earlier process when the compile cache has it
        # (module_cache.py): the passes were most of a cached first call
        cached = module_cache.enabled()
        if cached:
            key = module_cache.module_key(module, device, backend)
            hit = module_cache.load_entry(key)
            if hit is not None and not keep_module:
                with profiler.span(f"compile {module.name}", "compile", device=device.name, backend=backend.name):
                    exe = backend.cached_executable(device, CompileOptions(flags=config.backend_flags,
                                                                           module_digest=hit.digest))
                if exe is not None:
                    return exe, module
                asked = hit.digest
            optimized = None if hit is None else module_cache.parse_entry(hit)
            if optimized is not None and hit is not None:
                module, digest = optimized, hit.digest
        if digest is None:
            module = optimize_for(module, device)
            if cached:
                payload, digest = module_cache.entry(module)
    options = CompileOptions(optimized=run_passes, flags=config.backend_flags, module_digest=digest,
                             cache_checked=digest is not None and digest == asked)
    with profiler.span(f"compile {module.name}", "compile", device=device.name, backend=backend.name):
        exe = backend.compile(module, device, options)
    if key is not None and payload is not None:  # written once the backend took it
        module_cache.store(key, payload)
    return exe, module


def executable_report(module: Module, executable: Executable) -> dict[str, Any]:
    """The core's facts about the compiled module (kernels, temp/peak bytes from buffer
    assignment) overlaid with what the backend's executable reports about itself."""
    facts = assign(module).report()
    facts.update(executable.report())
    return facts
