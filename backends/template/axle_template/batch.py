"""Optional: batched builds (``Backend.batched_builds``; docs/writing-a-backend.md, "Batched
builds"). A device can leave this file out (and the two lines of backend.py that use it):
nothing else depends on it.

The conformance kit compiles over a thousand small modules, and most of each one's build is
the toolchain's fixed cost (cc's driver, compiler, assembler and linker: ~35 ms of CPU,
whatever the kernel). Inside ``batch()``, compile returns a ``PlannedOnly`` that gathers its
module's kernels; leaving it builds them all as one translation unit, each module's names
under a prefix of its own (16 modules: ~70 ms of cc instead of ~530), and caches that
library under each module's own key (codegen.compile_program's caches, memory and disk, with
the module's prefix): compiling the module again afterwards builds nothing. The conformance
test running the 1,000+ claim-all checks in one process: 64 s of CPU (cc's included) -> 27 s.

HARDWARE: nothing of its own. It renders with codegen's renderer and builds with
codegen.build, your toolchain call; lower BATCH_MODULES if your toolchain limits a program's
size or kernel count.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from axle.backend import Buffer, Device, Executable
from axle.errors import BackendError
from axle.ir.module import Module
from axle.lowering.c import CKernel
from axle.lowering.plan import KernelPlan, kernel_plan

from . import codegen
from .executable import Launch, _launches

#: inside batch(): this thread's modules by cache key, each as its kernels under a prefix given
_BATCH: ContextVar[dict[bytes, Callable[[str], list[CKernel]]] | None] = ContextVar("template_batch", default=None)
#: modules per translation unit: one that fails to build costs each of its modules a build of its own
BATCH_MODULES = 64


@contextmanager
def batch() -> Iterator[None]:
    """Inside: ``batching()`` (compile only gathers); on leaving, the modules gathered are built."""
    gathered: dict[bytes, Callable[[str], list[CKernel]]] = {}
    token = _BATCH.set(gathered)
    try:
        yield
    finally:
        _BATCH.reset(token)
    build(gathered)


def batching() -> bool:
    return _BATCH.get() is not None


class PlannedOnly(Executable):
    """What compile returns inside batch(): its module's kernels go to the batch (unless
    built already); it never runs (compiling the module again gives the executable)."""

    def __init__(self, module: Module, device: Device) -> None:
        self.module, self.device = module, device
        plan = kernel_plan(module, assign_buffers=False)
        kernels, gathered = _kernels(plan, ""), _BATCH.get()
        if kernels and gathered is not None:
            key = codegen.cache_key(codegen.RENDERER.program(kernels)).digest()
            if codegen._BINARIES.get(key.hex()) is None and codegen.DISK.get(key) is None:
                gathered[key] = lambda prefix: _kernels(plan, prefix)

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        raise BackendError(f"{self.module.name}: compiled inside batched_builds, which only gathers its "
                           "kernels for the batch's build; compile the module again to run it")


def _kernels(plan: KernelPlan, prefix: str) -> list[CKernel]:
    """The kernels of ``plan`` and of its loops' and branches' plans, names under ``prefix``."""
    every: list[Launch] = []
    _launches(plan, prefix, every)
    return [launch.kernel for launch in every if launch.kernel is not None]


def build(gathered: dict[bytes, Callable[[str], list[CKernel]]]) -> None:
    """Builds the modules, BATCH_MODULES to a translation unit, module j's names under
    ``mj_``, and caches the library under each module's key with its prefix. A unit that
    fails to build caches nothing: each of its modules then builds alone (compile_program),
    and the one at fault reports its error."""
    keys = list(gathered)
    for chunk in (keys[i:i + BATCH_MODULES] for i in range(0, len(keys), BATCH_MODULES)):
        source = codegen.RENDERER.program([k for j, key in enumerate(chunk) for k in gathered[key](f"m{j}_")])
        with tempfile.TemporaryDirectory(prefix="axle-kernels-") as tmp:
            try:
                binary = codegen.build(source, Path(tmp))
            except BackendError:
                continue
            (Path(tmp) / "kernels.so").write_bytes(binary)
            for j, key in enumerate(chunk):
                codegen.DISK.put(key, f"m{j}_".encode() + b"\0" + binary)
                codegen._BINARIES.put(key.hex(), codegen.Library(str(Path(tmp) / "kernels.so"), f"m{j}_"))
