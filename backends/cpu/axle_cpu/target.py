"""The host target: triple, CPU name and features from llvmlite; the O3 new-pass-manager
pipeline; JIT (MCJIT) and object-file emission.

LLVM state is process-wide and not thread-safe while compiling, so every compile holds
``LOCK``."""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

LOCK = threading.RLock()


@dataclass(frozen=True)
class HostTarget:
    triple: str
    cpu: str
    features: str

    @property
    def vector_bits(self) -> int:
        """Widest SIMD register the host offers (decides nothing in codegen: LLVM's cost
        model picks widths; used in reports and tests)."""
        if "+avx512f" in self.features:
            return 512
        if "+avx2" in self.features or "+avx" in self.features:
            return 256
        return 128


@functools.lru_cache(maxsize=None)
def host() -> HostTarget:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return HostTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())


def target_machine(jit: bool = True, cpu: str | None = None, features: str | None = None):  # noqa: ANN201
    """A fresh O3 target machine for the host (PIC when emitting objects for ``cc``).
    Fresh each time: an MCJIT engine takes ownership of the one it is given."""
    h = host()
    target = llvm.Target.from_triple(h.triple)
    return target.create_target_machine(cpu=h.cpu if cpu is None else cpu,
                                        features=h.features if features is None else features,
                                        opt=3, reloc="default" if jit else "pic", jit=jit)


def optimize(mod, tm, interleave: bool = True) -> None:  # noqa: ANN001
    """Runs the O3 module pipeline with loop and SLP vectorization on. ``interleave=False``
    turns off the vectorizer's loop interleaving: with long transcendental chains under
    index-dependent selects (pad, concatenate) LLVM 22 was seen to spend minutes there."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pto.loop_interleaving = interleave
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def parse(ir_text: str):  # noqa: ANN201
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    return mod


class JitModule:
    """One compiled LLVM module living in its own MCJIT engine (kept alive with it)."""

    def __init__(self, ir_text: str, interleave: bool = True) -> None:
        with LOCK:
            host()
            tm = target_machine(True)
            mod = parse(ir_text)
            optimize(mod, tm, interleave)
            self.optimized_ir = str(mod)
            self._engine = llvm.create_mcjit_compiler(mod, tm)
            self._engine.finalize_object()
            self._tm = tm

    def address(self, name: str) -> int:
        addr = self._engine.get_function_address(name)
        assert addr, f"symbol {name} missing from the compiled module"
        return addr

    def assembly(self) -> str:
        with LOCK:
            return self._tm.emit_assembly(parse(self.optimized_ir))


def emit_object(ir_text: str, cpu: str | None = None, features: str | None = None,
                interleave: bool = True) -> bytes:
    """A relocatable ELF object (PIC) for the host, or for ``cpu``/``features``."""
    with LOCK:
        host()
        tm = target_machine(False, cpu, features)
        mod = parse(ir_text)
        optimize(mod, tm, interleave)
        return tm.emit_object(mod)
