"""Code generation: one C function per fusion (or per op the optimizer left unfused),
one shared library per executable.

The core's C-family renderer (``axle.lowering.c``) writes the loop nests with the IR's
exact semantics; what a device team changes is the dialect (type names, qualifiers, how
work is spread over the device) and the toolchain call. Which ops are fused together and
in what order kernels run was already decided by the core optimizer.
"""
from __future__ import annotations

import _ctypes
import ctypes
import hashlib
import platform
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path

from axle.config import config
from axle.diskcache import DiskCache
from axle.errors import BackendError
from axle.ir.module import Computation
from axle.lowering.c import C99, CKernel, CRenderer
from axle.lowering.sort import sort_kernel
from axle.lru import LRU


# HARDWARE: render a fusion. The dialect says how your C spells types, buffers and the
# loop over the device's threads (``axle.lowering.c.OpenCLC`` is one for OpenCL); a device
# whose C differs only in names is a subclass changing a few of these attributes.
class Dialect(C99):
    name = "template"


RENDERER = CRenderer(Dialect)
# HARDWARE: compile. Your toolchain's command line (a vendor compiler, clang for your
# target...), and in build() below how it is called (an in-process compiler such as
# nvrtc or clBuildProgram replaces the subprocess). The renderer's semantics need strict
# IEEE floats: no -ffast-math, and no contraction of a*b+c.
COMPILER: tuple[str, ...] = ("cc", "-std=c99", "-O2", "-ffp-contract=off", "-fPIC", "-shared")


def render_kernel(name: str, comp: Computation, kind: str = "loop") -> CKernel:
    # a sort is its own kernel form (the shared stable merge sort); every other launch is
    # the renderer's loop nest of its fused computation (an "output" fusion: the dot's
    # loop with its epilogue before the store)
    if kind == "sort":
        return sort_kernel(Dialect, name, comp)
    return RENDERER.kernel(name, comp, kind)


class Library:
    """A loaded program, unloaded when its last user (the cache below, an executable)
    lets go: ctypes itself never unloads, and each library keeps a few memory mappings,
    so a process building thousands of programs would reach the kernel's limit on them
    (vm.max_map_count) and die in its next allocation. ``prefix``: what the program's
    function names start with in the file ("" unless it was built in a batch: batch.py)."""

    def __init__(self, path: str, prefix: str = "") -> None:
        self.cdll = ctypes.CDLL(path)  # (a file loaded again shares the first load's mapping)
        self.prefix = prefix
        weakref.finalize(self, _ctypes.dlclose, self.cdll._handle)

    def function(self, name: str) -> ctypes._NamedFuncPointer:
        """A kernel stage, which keeps this library loaded while it can be called."""
        f = self.cdll[self.prefix + name]
        f.library = self  # type: ignore[attr-defined]  # a new attribute: the stage keeps its library
        return f


#: loaded programs by source hash, bounded like every compile cache (--jit_cache_size): a
#: program fed ever new shapes must not keep every binary it ever built
_BINARIES: LRU[Library] = LRU(lambda: 2 * config.jit_cache_size)
#: binaries across processes and runs, by the same key, under --compile_cache (axle's
#: DiskCache trusts only what this user wrote): with a toolchain that takes seconds, a
#: second kit run compiles nothing
DISK = DiskCache(None, "kernel binary", sub=Dialect.name)


def compile_program(source: str) -> Library:
    """Compiles one translation unit and loads it (cached by the hash of the machine, the
    flags and the source)."""
    key = cache_key(source)
    lib = _BINARIES.get(key.hexdigest())
    if lib is None:
        with tempfile.TemporaryDirectory(prefix="axle-kernels-") as tmp:
            entry = DISK.get(key.digest())
            if entry is None:
                entry = b"\0" + build(source, Path(tmp))  # (no name prefix: see batch.py)
                DISK.put(key.digest(), entry)
            prefix, _, binary = entry.partition(b"\0")
            (Path(tmp) / "kernels.so").write_bytes(binary)
            # the library stays mapped after its file is removed with the folder
            lib = _BINARIES.put(key.hexdigest(), Library(str(Path(tmp) / "kernels.so"), prefix.decode()))
    return lib


def cache_key(source: str) -> hashlib._Hash:
    # HARDWARE: everything your binaries depend on besides the source and flags (a target
    # chip or ISA version...). The machine: a home directory shared by an x86-64 and an
    # arm64 host must not hand one the other's library (it would not load). The cache
    # entry holds the functions' name prefix, a NUL, then the library ("prefixed": its format).
    return hashlib.sha256("\0".join((sys.platform, platform.machine(), *COMPILER, "prefixed", source)).encode())


def build(source: str, tmp: Path) -> bytes:
    """The toolchain call: C source in, a shared library's bytes out."""
    src, out = tmp / "kernels.c", tmp / "kernels-build.so"
    src.write_text(source)
    try:
        r = subprocess.run([*COMPILER, "-o", str(out), str(src)], capture_output=True, text=True)
    except OSError as e:
        raise BackendError(f"{Dialect.name}: cannot run the C compiler {COMPILER[0]!r}: {e}") from e
    if r.returncode:
        raise BackendError(f"{Dialect.name}: {' '.join(COMPILER)} failed:\n{r.stderr[-4000:]}\n{source}")
    return out.read_bytes()
