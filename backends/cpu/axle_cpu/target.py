"""The host target: triple, CPU name and features from llvmlite; the O3 new-pass-manager
pipeline; JIT (MCJIT) and object-file emission; each module's object code cached on disk
(axle.diskcache, under --compile_cache) and loaded from there by a later process.

LLVM state is process-wide and not thread-safe while compiling, so every compile holds
``LOCK``, and so does every disposal of compiled code: a JitModule that dies (evicted from
a cache, in whatever thread drops the last reference) is disposed at once when no compile
is running, else by the next compile (``_llvm``)."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

import axle
from axle.config import config
from axle.diskcache import DiskCache, code_version

LOCK = threading.RLock()
#: nesting of LLVM work in the thread holding LOCK (0: LOCK is free or only disposing)
_depth = 0
#: (engine, context) of dead JitModules waiting for LOCK to be disposed
_garbage: list[tuple[llvm.ExecutionEngine, llvm.ContextRef]] = []


def _dispose_garbage() -> None:
    """Disposes dead modules' engines, then their contexts (the caller holds LOCK)."""
    while _garbage:
        engine, context = _garbage.pop()
        engine.close()
        context.close()


@contextlib.contextmanager
def _llvm() -> Iterator[None]:
    """Holds LOCK around LLVM work, disposing dead modules before and after it."""
    global _depth
    with LOCK:
        if _depth == 0:
            _dispose_garbage()
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
            if _depth == 0:
                _dispose_garbage()


def _after_fork_in_child() -> None:
    # Another thread may have been compiling at the fork: the child gets a fresh lock (the
    # LLVM state itself is plain memory, copied with the process, and usable in the child).
    global LOCK, _depth
    LOCK, _depth = threading.RLock(), 0


os.register_at_fork(after_in_child=_after_fork_in_child)


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


@functools.cache
def host() -> HostTarget:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return HostTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())


def target_machine(jit: bool = True, cpu: str | None = None, features: str | None = None) -> llvm.TargetMachine:
    """A fresh O3 target machine for the host (PIC when emitting objects for ``cc``).
    Fresh each time: an MCJIT engine takes ownership of the one it is given."""
    h = host()
    target = llvm.Target.from_triple(h.triple)
    return target.create_target_machine(cpu=h.cpu if cpu is None else cpu,
                                        features=h.features if features is None else features,
                                        opt=3, reloc="default" if jit else "pic", jit=jit)


#: the target machine every JitModule optimizes and generates code with (under LOCK)
_jit_tm = None


def _codegen_tm() -> llvm.TargetMachine:
    """One target machine for all JIT code generation. A target machine builds its X86
    subtarget (instruction, register and lowering tables) the first time it generates
    code, about 0.7 MB, and keeps it as long as it lives; an MCJIT engine owns the one it
    is given, so generating code in the engine kept one of those per cached kernel (about
    0.8 MB per kernel, some 400 MB at the default bound). Objects come from this one, and
    each engine gets a fresh target machine that never generates code (about 20 KB)."""
    global _jit_tm
    if _jit_tm is None:
        _jit_tm = target_machine(True)
    return _jit_tm


def optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, interleave: bool = True) -> None:
    """Runs the O3 module pipeline with loop and SLP vectorization on. ``interleave=False``
    turns off the vectorizer's loop interleaving: with long transcendental chains under
    index-dependent selects (pad, concatenate) LLVM 22 was seen to spend minutes there."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pto.loop_interleaving = interleave
    pb = llvm.create_pass_builder(tm, pto)  # copies pto; keeps tm (which outlives it)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(mod, pb)
    finally:
        close_pass_manager(mpm)
        pb.close()
        pto.close()


def close_pass_manager(mpm: llvm.ModulePassManager) -> None:
    """Frees a new-pass-manager pipeline. In llvmlite 0.50 ``ModulePassManager.close()``
    frees nothing: the class derives from ``(ffi.ObjectRef, NewPassManager)``, so
    ObjectRef's empty ``_dispose`` shadows NewPassManager's, which deletes the C++ pass
    manager. Every O3 pipeline (about 40 KB, plus what its passes keep after a run: about
    70 to 90 KB per compile in all) stayed allocated forever. Disposed here through the method
    llvmlite meant; a plain ``close()`` where a later llvmlite has it right."""
    from llvmlite.binding import ffi
    from llvmlite.binding.newpassmanagers import NewPassManager

    if type(mpm)._dispose is ffi.ObjectRef._dispose and not mpm.closed:
        NewPassManager._dispose(mpm)
        mpm.detach()
    else:
        mpm.close()


def parse(ir_text: str, context: llvm.ContextRef | None = None) -> llvm.ModuleRef:
    mod = llvm.parse_assembly(ir_text, context)
    mod.verify()
    return mod


#: object code of compiled modules across processes, under --compile_cache
DISK = DiskCache(None, "cpu object code", sub="cpu")
#: bumped when the cached payload's format changes (today: the bare ELF object)
OBJECT_FORMAT = "axle-cpu-object-1"


#: the packages whose code decides what a cached object holds: axle (the optimizer, the
#: lowering layer) and this backend (emitters, this file's O3 pipeline)
_CODE_DIRS = (os.path.dirname(axle.__file__), os.path.dirname(__file__))


def object_key(what: str, interleave: bool) -> bytes:
    """Everything a module's object code depends on: ``what`` it compiles (its LLVM IR's
    digest, or a digest of the kernel descriptions it is emitted from), the code of axle and
    this backend and their versions, llvmlite's and LLVM's, the host triple, CPU name and
    features, the pipeline's setting and the ``--cpu_*`` flags."""
    with LOCK:
        h = host()
    flags = sorted(f"{k}={v}" for k, v in config.backend_flags.items() if k.startswith("cpu_"))
    parts = [OBJECT_FORMAT, code_version(*_CODE_DIRS), axle.__version__, llvmlite.__version__,
             ".".join(map(str, llvm.llvm_version_info)), h.triple, h.cpu, h.features,
             f"interleave={interleave}", *flags, what]
    return "\0".join(parts).encode()


def ir_key(ir_text: str, interleave: bool) -> bytes:
    """The key of a module given by its LLVM IR text."""
    return object_key("llvm-ir:" + hashlib.sha256(ir_text.encode()).hexdigest(), interleave)


class JitModule:
    """One compiled LLVM module: optimized and turned into an object by the shared
    ``_codegen_tm()`` (or that object read back from the disk cache), then loaded into its
    own MCJIT engine (kept alive with it).

    Each module gets its own LLVM context: types and constants are uniqued per context and
    live as long as it does, so in the process-wide context every shape ever compiled
    (array types, loop bounds) would stay resident. The IR module is freed once its object
    is emitted; freeing the JitModule frees the engine (its code pages, its empty module
    and its target machine) and then the context. The optimized IR is made again when
    asked for (``optimized_ir``: tests and ``explain``), not kept."""

    def __init__(self, ir_text: str | Callable[[], str], interleave: bool = True, key: bytes | None = None) -> None:
        """``ir_text``: the module's LLVM IR, or a function making it (called only when the
        object is not on disk, or when the IR is asked for); ``key``: its disk cache key
        when the caller knows it without the IR (else the IR's digest: ``ir_key``)."""
        self._source = ir_text
        self.interleave = interleave
        if key is None:
            key = ir_key(self.ir_text, interleave)
        obj = DISK.get(key)  # read outside LOCK: other threads may compile meanwhile
        #: whether the object code was read from the disk cache (else compiled, then stored)
        self.loaded = obj is not None
        if obj is None:
            text = self.ir_text  # made outside LOCK too (Python only)
        obj = self._load(obj if obj is not None else lambda context: _compile(text, context, interleave))
        if not self.loaded:
            DISK.put(key, obj)

    @classmethod
    def from_disk(cls, key: bytes, interleave: bool, ir_text: Callable[[], str]) -> JitModule | None:
        """The module whose object code the disk cache holds under ``key``, or None (nothing
        is compiled: the caller has no IR to compile, only ``ir_text`` to say why)."""
        obj = DISK.get(key)
        if obj is None:
            return None
        self = cls.__new__(cls)
        self._source, self.interleave, self.loaded = ir_text, interleave, True
        self._load(obj)
        return self

    def _load(self, obj: bytes | Callable[[llvm.ContextRef], bytes]) -> bytes:
        """Loads the object code (or what ``obj`` compiles in the module's context) into the
        module's own MCJIT engine; returns that object code."""
        with _llvm():
            self._context = llvm.create_context()
            if callable(obj):
                obj = obj(self._context)
            # the engine's own module is empty: the code is the object emitted above
            self._engine = llvm.create_mcjit_compiler(parse("", self._context), target_machine(True))
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self._engine.finalize_object()
        return obj

    @property
    def ir_text(self) -> str:
        """The module's LLVM IR (made when first asked for, when it was given as a function)."""
        if callable(self._source):
            self._source = self._source()
        return self._source

    @property
    def optimized_ir(self) -> str:
        """The module's IR after the O3 pipeline (optimized again: only the object is kept)."""
        with _llvm(), _scratch_context() as ctx:
            mod = parse(self.ir_text, ctx)
            try:
                optimize(mod, _codegen_tm(), self.interleave)
                return str(mod)
            finally:
                mod.close()

    # _finalizing is bound now: at exit sys may be gone
    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # The engine (which owns the module and the target machine) must go before the
        # context its module was made in, and never while another thread compiles: queued
        # for LOCK, disposed now if nobody compiles. At interpreter exit the OS frees it all.
        if _finalizing():
            return
        engine, context = self.__dict__.pop("_engine", None), self.__dict__.pop("_context", None)
        if engine is None or context is None:
            return
        _garbage.append((engine, context))
        lock = LOCK
        if lock.acquire(blocking=False):
            try:
                if _depth == 0:  # not inside this thread's own compile (a GC run there)
                    _dispose_garbage()
            finally:
                lock.release()

    def address(self, name: str) -> int:
        addr = self._engine.get_function_address(name)
        assert addr, f"symbol {name} missing from the compiled module"
        return addr

    def has(self, name: str) -> bool:
        """Whether the module defines function ``name``."""
        return bool(self._engine.get_function_address(name))

    def assembly(self) -> str:
        with _llvm(), _scratch_context() as ctx:
            mod = parse(self.ir_text, ctx)
            try:
                tm = _codegen_tm()
                optimize(mod, tm, self.interleave)
                return tm.emit_assembly(mod)
            finally:
                mod.close()


def _compile(ir_text: str, context: llvm.ContextRef, interleave: bool, tm: llvm.TargetMachine | None = None) -> bytes:
    """The object code of one module, by ``tm`` or the shared JIT code generator (the
    caller holds LOCK)."""
    host()
    tm = _codegen_tm() if tm is None else tm
    mod = parse(ir_text, context)
    try:
        optimize(mod, tm, interleave)
        return tm.emit_object(mod)
    finally:
        mod.close()


def emit_object(ir_text: str, cpu: str | None = None, features: str | None = None,
                interleave: bool = True) -> bytes:
    """A relocatable ELF object (PIC) for the host, or for ``cpu``/``features``."""
    with _llvm(), _scratch_context() as ctx:
        host()
        return _compile(ir_text, ctx, interleave, target_machine(False, cpu, features))


@contextlib.contextmanager
def _scratch_context() -> Iterator[object]:
    """A private LLVM context, disposed after use (see JitModule)."""
    ctx = llvm.create_context()
    try:
        yield ctx
    finally:
        ctx.close()
