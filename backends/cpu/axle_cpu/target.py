"""The host target: triple, CPU name and features from llvmlite; the O3 new-pass-manager
pipeline; JIT (MCJIT) and object-file emission; each module's code cached on disk
(axle.diskcache, under --compile_cache) and loaded from there by a later process.

On Linux with the system linker (``ld``) a module's code is a shared library: its PIC
object linked once, when it is compiled, and loaded by ``dlopen`` (from a memfd holding
the cache entry's bytes, about 0.1 ms) in this and every later process. Loading an object
into an MCJIT engine instead (context, engine, target machine, relocation: some 35
llvmlite calls) cost about 1.5 ms per module, most of a cached program's first call.
Without ``ld`` (or memfd) objects are loaded by MCJIT as before (with the cache off too:
modules are libraries wherever ``ld`` is found).

LLVM state is process-wide and not thread-safe while compiling, so every compile holds
``LOCK``, and so does every disposal of compiled code: a JitModule that dies (evicted from
a cache, in whatever thread drops the last reference) is disposed at once when no compile
is running, else by the next compile (``_llvm``)."""
from __future__ import annotations

import _ctypes
import contextlib
import functools
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

import axle
from axle import counters
from axle.config import config
from axle.diskcache import CacheWarning, DiskCache, cache_root, code_version
from axle.forksafe import renew_in_child

if sys.platform.startswith("linux"):  # the only hosts whose modules are shared libraries (linker())
    import fcntl

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


def target_machine(jit: bool = True, cpu: str | None = None, features: str | None = None,
                   codemodel: str = "jitdefault") -> llvm.TargetMachine:
    """A fresh O3 target machine for the host (PIC when emitting objects for ``cc`` or
    ``ld``). Fresh each time: an MCJIT engine takes ownership of the one it is given.
    ``codemodel``: llvmlite's default is the large model on 64-bit hosts (what MCJIT
    needs, its sections anywhere in the address space); "default" is the small one, for
    a shared library (each constant one RIP-relative load, not an absolute address)."""
    h = host()
    target = llvm.Target.from_triple(h.triple)
    return target.create_target_machine(cpu=h.cpu if cpu is None else cpu,
                                        features=h.features if features is None else features,
                                        opt=3, reloc="default" if jit else "pic", jit=jit, codemodel=codemodel)


#: the target machine every JitModule optimizes and generates code with (under LOCK)
_jit_tm = None


def _codegen_tm() -> llvm.TargetMachine:
    """One target machine for all JIT code generation (PIC, for a shared library, where
    modules are linked: ``linker``). A target machine builds its X86
    subtarget (instruction, register and lowering tables) the first time it generates
    code, about 0.7 MB, and keeps it as long as it lives; an MCJIT engine owns the one it
    is given, so generating code in the engine kept one of those per cached kernel (about
    0.8 MB per kernel, some 400 MB at the default bound). Objects come from this one, and
    each engine gets a fresh target machine that never generates code (about 20 KB)."""
    global _jit_tm
    if _jit_tm is None:
        _jit_tm = target_machine(True) if linker() is None else target_machine(False, codemodel="default")
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
    """The verified module of ``ir_text`` in ``context``. A module that fails verification is
    disposed of here, while its context lives: the callers' private contexts are closed
    when the error leaves them, and the module, freed later by the collector, then
    disposed of itself in a freed context (a SIGSEGV at the next compile)."""
    mod = llvm.parse_assembly(ir_text, context)
    try:
        mod.verify()
    except BaseException:
        mod.close()
        raise
    return mod


#: code of compiled modules across processes, under --compile_cache
DISK = DiskCache(None, "cpu object code", sub="cpu")
#: bumped when a cached payload's format changes: the bare ELF object (loaded by MCJIT)...
OBJECT_FORMAT = "axle-cpu-object-1"
#: ... or the shared library linked from it (loaded by dlopen: ``linker``)
SHARED_FORMAT = "axle-cpu-shared-1"
#: the ELF header's machine field of the hosts shared libraries are linked for
_ELF_MACHINE = {"x86_64": 62, "aarch64": 183}


#: memfd_create's flag asking for an executable memfd (Linux 6.3; Python 3.12 names it)
_MFD_EXEC = getattr(os, "MFD_EXEC", 0x0010)


def memfd_flags(noexec: str | None) -> int | None:
    """memfd_create's flags for a library to be loaded from, given the ``vm.memfd_noexec``
    setting's text (None: this kernel has no such setting, before Linux 6.3, and knows no
    MFD_EXEC), or None when no memfd may be executable (setting 2: modules are then loaded
    by MCJIT instead of linked, and the link is not wasted). With setting 1 a memfd is not
    executable unless it asks, so it asks."""
    if noexec is None:
        return os.MFD_CLOEXEC
    level = noexec.strip()
    if level not in ("0", "1"):
        return None
    return os.MFD_CLOEXEC | _MFD_EXEC


def _memfd_noexec() -> str | None:
    try:
        with open("/proc/sys/vm/memfd_noexec") as f:
            return f.read()
    except OSError:
        return None


@functools.cache
def _memfd_flags() -> int | None:
    return memfd_flags(_memfd_noexec())


@functools.cache
def linker() -> str | None:
    """The linker that makes each compiled module a shared library (None: modules are
    objects loaded by MCJIT). ``ld`` itself, which ``cc`` runs: called directly it costs
    about 2 ms of CPU per module, ``cc -shared`` 13 ms. Linux only (the library is loaded
    from a memfd, by its /proc/self/fd path, so not where the kernel forbids executable
    memfds: ``memfd_flags``), and only for ELF machines whose header field is known."""
    if not sys.platform.startswith("linux") or not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"):
        return None
    if host().triple.split("-")[0] not in _ELF_MACHINE or _memfd_flags() is None:
        return None
    return shutil.which("ld")


def artifact_format() -> str:
    """What a cached module's payload is on this host: a shared library or an object."""
    return SHARED_FORMAT if linker() else OBJECT_FORMAT


class LinkError(Exception):
    """The linker refused a module's object (the module is then loaded by MCJIT)."""


def link(obj: bytes) -> bytes:
    """The shared library of one PIC object. ``-Bsymbolic`` binds the module's calls of
    its own functions to themselves (never to a same-named symbol already loaded); the C
    library's and libm's functions resolve from the process at load, as MCJIT resolves
    them."""
    ld = linker()
    assert ld is not None, "link() needs the linker"
    with tempfile.TemporaryDirectory(prefix="axle-link-") as tmp:
        src, out = os.path.join(tmp, "module.o"), os.path.join(tmp, "module.so")
        with open(src, "wb") as f:
            f.write(obj)
        try:
            r = subprocess.run([ld, "-shared", "-Bsymbolic", "-z", "noexecstack", "-o", out, src],
                               capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise LinkError(f"cannot run {ld}: {e}") from e
        if r.returncode:
            raise LinkError(f"{ld} failed: {r.stderr.strip()[-2000:]}")
        with open(out, "rb") as f:
            return f.read()


def _loaded(path: str) -> bool:
    """Whether a library opened by ``path`` is loaded in this process."""
    try:
        handle = _ctypes.dlopen(path, os.RTLD_NOW | os.RTLD_NOLOAD)
    except OSError:
        return False
    _ctypes.dlclose(handle)  # the reference RTLD_NOLOAD took
    return True


def _is_library(data: bytes) -> bool:
    """Whether ``data`` is a whole 64-bit little-endian ELF shared library for this host's
    machine (what ``link`` makes): a checksummed entry of another format is never loaded,
    and neither is one cut short, whose segments ``dlopen`` would map past the end of the
    file (the first read there is a bus error, which kills the process)."""
    machine = _ELF_MACHINE.get(host().triple.split("-")[0])
    if len(data) < 64 or data[:6] != b"\x7fELF\x02\x01":
        return False
    etype, emachine = struct.unpack_from("<HH", data, 16)
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)
    if (etype, emachine) != (3, machine) or phentsize < 56 or phoff + phnum * phentsize > len(data) \
            or shoff + shnum * shentsize > len(data):
        return False
    for k in range(phnum):  # every segment's bytes lie in the file
        offset, filesz = struct.unpack_from("<Q16xQ", data, phoff + k * phentsize + 8)
        if offset + filesz > len(data):
            return False
    return True


#: the handles (link maps) of the libraries this process holds through ``Library``, and
#: the fd numbers whose ``/proc/self/fd/N`` paths they were opened by (under _LIBRARIES)
_HELD: set[int] = set()
_NAMED: set[int] = set()
#: held around each library's choice of path, ``dlopen`` and ``dlclose`` (reentrant: a
#: collection in the middle of a load may close another library)
_LIBRARIES = threading.RLock()
renew_in_child(sys.modules[__name__], "_LIBRARIES", threading.RLock)
#: files tried for one library before it is refused (each one dlopen matched to a loaded library)
_OPEN_TRIES = 8


def _unnamed(fd: int, start: int) -> int:
    """A duplicate of ``fd`` numbered as no held library's path is (the lowest such number
    from ``start``), found without opening the named numbers' files."""
    n = start
    while True:
        while n in _NAMED:
            n += 1
        try:
            dup = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, n)
        except OSError as e:  # EINVAL: n reached the open-files limit (RLIMIT_NOFILE)
            raise OSError(f"no file number from {n} up to the open-files limit is free for another library "
                          f"({len(_HELD)} held, each opened by a number of its own)") from e
        if dup not in _NAMED:
            return dup
        os.close(dup)
        n = dup + 1


class Library:
    """A shared library loaded from bytes: written to a memfd and opened by ``dlopen``
    (``RTLD_LOCAL``: its symbols are found through this handle only), so no file another
    process could replace is ever opened. Closed (``dlclose``) when it dies.

    ``dlopen`` gives back a library already loaded instead of the file it is asked for when
    the path is one a loaded library was opened by, or when the file's device and inode are
    a loaded library's. A memfd's number is reused once closed, so a new library opened as
    ``/proc/self/fd/N`` while another one opened so is still loaded would be that other one
    (its symbols, silently): each library is opened by a number no held library's path has
    (``_NAMED``; a duplicate of its memfd), and a path some other code loaded a library by
    (``RTLD_NOLOAD`` finds it) takes another file. That costs the same whatever the number
    of libraries held: trying the taken numbers one by one, each kept open, cost some 13 ms
    per load with a thousand libraries held, and past the open-files limit every module
    fell back to MCJIT. Inode numbers are no safer than fd numbers: a memfd's was unique
    only from Linux 5.9 on (before, a 32-bit counter shared with pipes and sockets, which
    wraps), and the path check, made before the file holds the library, cannot see them.
    So a handle ``dlopen`` returns must be none of those this process holds (``_HELD``);
    one that is was another library, and another file is tried."""

    def __init__(self, data: bytes) -> None:
        if not _is_library(data):
            raise OSError("not a shared library for this machine")
        opened: list[int] = []  # closed once loaded: a file or number tried is not made again meanwhile
        try:
            with _LIBRARIES:
                self._handle, self._number = _open(data, opened)
        finally:
            for f in opened:
                os.close(f)

    def address(self, name: str) -> int:
        """The address of symbol ``name`` (0: the library does not define it)."""
        try:
            return int(_ctypes.dlsym(self._handle, name))
        except OSError:
            return 0

    # bound now: at exit the modules may be gone
    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing,
                _close: Callable[[int], None] = _ctypes.dlclose, _held: set[int] = _HELD,
                _named: set[int] = _NAMED) -> None:
        # never at interpreter exit: the worker pool's threads wait inside the runtime
        # module's code until the process ends (the OS unmaps it all then)
        handle = self.__dict__.pop("_handle", None)
        if handle is not None and not _finalizing():
            with _LIBRARIES:  # its handle and path are free for another library once it is gone
                _close(handle)
                _held.discard(handle)
                _named.discard(self._number)


def _open(data: bytes, opened: list[int]) -> tuple[int, int]:
    """``dlopen`` of ``data`` written to a memfd, by a path and from a file no loaded library
    has: (its handle, the fd number its path names). The caller holds _LIBRARIES and closes
    the fds listed in ``opened``."""
    start = 0
    for _ in range(_OPEN_TRIES):
        fd = os.memfd_create("axle-module", _memfd_flags() or os.MFD_CLOEXEC)
        opened.append(fd)
        while True:  # ends: the numbers grow up to the open-files limit (then OSError)
            n = _unnamed(fd, start)
            opened.append(n)
            start = n + 1
            if not _loaded(f"/proc/self/fd/{n}"):  # checked while the file is empty: by name only
                break
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        handle = _ctypes.dlopen(f"/proc/self/fd/{n}", os.RTLD_NOW | os.RTLD_LOCAL)
        if handle not in _HELD:
            _HELD.add(handle)
            _NAMED.add(n)
            return handle, n
        _ctypes.dlclose(handle)  # the reference this dlopen took of a loaded library: another file
    raise OSError(f"dlopen gave a loaded library for {_OPEN_TRIES} new files")


#: the packages whose code decides what a cached object holds: axle (the optimizer, the
#: lowering layer) and this backend (emitters, this file's O3 pipeline)
_CODE_DIRS = (os.path.dirname(axle.__file__), os.path.dirname(__file__))
if cache_root() is not None:
    # a per-process cost (about 200 stats, 0.5 ms), paid with the rest of loading this
    # backend rather than inside a cached program's first call; the same directories are
    # the optimized-module cache's key (axle.module_cache), so it is computed once
    code_version(*_CODE_DIRS)


def object_key(what: str, interleave: bool) -> bytes:
    """Everything a module's code depends on: ``what`` it compiles (its LLVM IR's digest,
    or a digest of the kernel descriptions it is emitted from), the artifact's format, the
    code of axle and this backend and their versions, llvmlite's and LLVM's, the host
    triple, CPU name and features, the pipeline's setting and the ``--cpu_*`` flags."""
    with LOCK:
        h = host()
    flags = sorted(f"{k}={v}" for k, v in config.backend_flags.items() if k.startswith("cpu_"))
    parts = [artifact_format(), code_version(*_CODE_DIRS), axle.__version__, llvmlite.__version__,
             ".".join(map(str, llvm.llvm_version_info)), h.triple, h.cpu, h.features,
             f"interleave={interleave}", *flags, what]
    return "\0".join(parts).encode()


def ir_key(ir_text: str, interleave: bool) -> bytes:
    """The key of a module given by its LLVM IR text."""
    return object_key("llvm-ir:" + hashlib.sha256(ir_text.encode()).hexdigest(), interleave)


class JitModule:
    """One compiled LLVM module: optimized and turned into an object by the shared
    ``_codegen_tm()``, then either linked into a shared library and loaded by ``dlopen``
    (where ``linker()`` finds ``ld``: the library is what the disk cache keeps) or loaded
    into its own MCJIT engine (the object is what the disk cache keeps); kept alive with it.

    Each module is compiled in its own LLVM context: types and constants are uniqued per
    context and live as long as it does, so in the process-wide context every shape ever
    compiled (array types, loop bounds) would stay resident. The IR module is freed once
    its object is emitted; freeing the JitModule closes its library, or frees the engine
    (its code pages, its empty module and its target machine) and then the context. The
    optimized IR is made again when asked for (``optimized_ir``: tests and ``explain``),
    not kept."""

    #: the module's shared library (None: its code is in the MCJIT engine ``_engine``)
    _lib: Library | None = None

    def __init__(self, ir_text: str | Callable[[], str], interleave: bool = True, key: bytes | None = None) -> None:
        """``ir_text``: the module's LLVM IR, or a function making it (called only when the
        code is not on disk, or when the IR is asked for); ``key``: its disk cache key
        when the caller knows it without the IR (else the IR's digest: ``ir_key``)."""
        self._source = ir_text
        self.interleave = interleave
        if key is None:
            key = ir_key(self.ir_text, interleave)
        cached = DISK.get(key)  # read outside LOCK: other threads may compile meanwhile
        #: whether the code was read from the disk cache (else compiled, then stored)
        self.loaded = cached is not None and self._load_cached(cached)
        if not self.loaded:
            made = self._build(self.ir_text)  # the IR is made outside LOCK (Python only)
            if made is not None:
                DISK.put(key, made)

    @classmethod
    def from_disk(cls, key: bytes, interleave: bool, ir_text: Callable[[], str]) -> JitModule | None:
        """The module whose code the disk cache holds under ``key``, or None (nothing is
        compiled: the caller has no IR to compile, only ``ir_text`` to say why)."""
        cached = DISK.get(key)
        if cached is None:
            return None
        self = cls.__new__(cls)
        self._source, self.interleave, self.loaded = ir_text, interleave, True
        return self if self._load_cached(cached) else None

    def _load_cached(self, payload: bytes) -> bool:
        """Loads a cached module's code; False when its library cannot be loaded (not a
        library for this machine, or ``dlopen`` refuses it: counted as corrupt, and the
        module is compiled again)."""
        if linker() is None:
            self._load(payload)
            return True
        try:
            self._lib = Library(payload)
        except OSError:
            counters.record("disk_cache_corrupt")
            return False
        return True

    def _build(self, text: str) -> bytes | None:
        """Compiles the module and loads its code; returns what the disk cache keeps of
        it (None: nothing, when its library could not be made or loaded)."""
        if linker() is None:
            return self._load(lambda context: _compile(text, context, self.interleave))
        with _llvm(), _scratch_context() as ctx:
            obj = _compile(text, ctx, self.interleave)
        try:
            lib = link(obj)
            self._lib = Library(lib)
            return lib
        except (LinkError, OSError) as e:
            _link_failed(e)
            # compiled again for MCJIT (large code model: its sections lie anywhere)
            self._load(lambda context: _compile(text, context, self.interleave, target_machine(True)))
            return None

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

    def _address(self, name: str) -> int:
        return self._lib.address(name) if self._lib is not None else self._engine.get_function_address(name)

    def address(self, name: str) -> int:
        addr = self._address(name)
        assert addr, f"symbol {name} missing from the compiled module"
        return addr

    def has(self, name: str) -> bool:
        """Whether the module defines function ``name``."""
        return bool(self._address(name))

    def assembly(self) -> str:
        with _llvm(), _scratch_context() as ctx:
            mod = parse(self.ir_text, ctx)
            try:
                tm = _codegen_tm()
                optimize(mod, tm, self.interleave)
                return tm.emit_assembly(mod)
            finally:
                mod.close()


#: whether this process warned that a module could not be linked (once)
_link_warned: list[bool] = []


def _link_failed(e: Exception) -> None:
    """One warning per process when a module's library cannot be made or loaded: the
    module runs from MCJIT and is not cached (a broken linker would fail every module)."""
    if not _link_warned:
        _link_warned.append(True)
        warnings.warn(f"axle: cpu: a compiled module could not be linked into a shared library ({e}); modules "
                      f"that fail so run from MCJIT and are not kept in the compile cache.", CacheWarning,
                      stacklevel=4)


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
