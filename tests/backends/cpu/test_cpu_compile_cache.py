"""The cpu backend's compiled code on disk (axle.diskcache under --compile_cache): a new
process loads it instead of compiling, a corrupt or truncated entry is compiled again,
two processes compiling at once both run right, ``off`` stores nothing, and the key
changes with what the code depends on (flags, CPU, LLVM IR). Where ``ld`` is found the
entries are shared libraries (loaded by dlopen): one the loader refuses (not a library,
another machine's, cut short) is compiled again, libraries loaded one after another keep
their own code, a module's calls of its own functions stay its own."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import axle
from axle.config import config
from axle_cpu import target
from axle_cpu.target import HostTarget, JitModule, ir_key

IR = """
define float @k(float %x) {
  %y = fmul float %x, 3.0
  ret float %y
}
"""


def _counts() -> dict[str, int]:
    s = axle.stats()
    return {k[len("disk_cache_"):]: s[k] for k in s if k.startswith("disk_cache_")}


def _triple(jm: JitModule) -> float:
    """The module's @k at 7: 21 when its code is right."""
    return ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(jm.address("k"))(7.0)


def _entries(root) -> list[str]:  # noqa: ANN001
    return [os.path.join(root, "cpu", f) for f in os.listdir(root / "cpu") if f.endswith(".bin")]


def test_object_code_is_stored_and_loaded_back(compile_cache) -> None:
    axle.reset_stats()
    first = JitModule(IR)
    assert _counts()["misses"] == 1 and _counts()["writes"] == 1
    (entry,) = _entries(compile_cache)
    assert b"\x7fELF" in open(entry, "rb").read()  # the object itself, behind the header
    axle.reset_stats()
    second = JitModule(IR)
    assert _counts()["hits"] == 1 and _counts()["writes"] == 0
    assert _triple(second) == 21.0
    assert "fmul" in second.optimized_ir and "define" in first.optimized_ir  # made again when asked
    assert "ret" in second.assembly()


@pytest.mark.parametrize("damage", ["flip a byte of the object", "truncate"])
def test_a_corrupt_or_truncated_object_is_compiled_again(compile_cache, damage: str) -> None:
    JitModule(IR)
    (entry,) = _entries(compile_cache)
    data = bytearray(open(entry, "rb").read())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-40] ^= 0xFF  # inside the object's bytes: only the payload digest can tell
    open(entry, "wb").write(bytes(data))
    axle.reset_stats()
    jm = JitModule(IR)
    assert _counts()["corrupt"] == 1 and _counts()["writes"] == 1  # compiled and stored again
    assert _triple(jm) == 21.0
    axle.reset_stats()
    JitModule(IR)
    assert _counts()["hits"] == 1


def test_off_stores_nothing(compile_cache, monkeypatch) -> None:
    monkeypatch.setattr(config, "compile_cache", "off")
    axle.reset_stats()
    jm = JitModule(IR)
    assert _triple(jm) == 21.0
    assert not compile_cache.exists() and not any(_counts().values())


def test_the_key_changes_with_what_the_object_depends_on(monkeypatch) -> None:
    base = ir_key(IR, True)
    assert ir_key(IR, True) == base
    assert ir_key(IR.replace("3.0", "4.0"), True) != base
    assert ir_key(IR, False) != base  # the vectorizer's interleaving
    monkeypatch.setitem(config.backend_flags, "cpu_threads", "1")
    with_flag = ir_key(IR, True)
    assert with_flag != base
    monkeypatch.setitem(config.backend_flags, "opencl_float_lanes", "4")  # another backend's flag
    assert ir_key(IR, True) == with_flag
    monkeypatch.delitem(config.backend_flags, "cpu_threads")
    monkeypatch.delitem(config.backend_flags, "opencl_float_lanes")
    h = target.host()
    for other in (HostTarget(h.triple, h.cpu + "-other", h.features),
                  HostTarget(h.triple, h.cpu, h.features.replace("+avx512f", "-avx512f").replace("+avx2", "-avx2")
                             + ",+other")):
        monkeypatch.setattr(target, "host", lambda other=other: other)
        assert ir_key(IR, True) != base


PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import axle, axle.numpy as anp

    @axle.jit
    def step(x, w):
        h = anp.tanh(x @ w)
        return (h - h.max(axis=1, keepdims=True)).sum(axis=0), anp.exp(x).mean()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    w = rng.standard_normal((32, 8)).astype(np.float32)
    with axle.device("cpu:0"):
        got = [step(x, w) for _ in range(3)][0]  # three calls: the kernels' thread splits are decided
    h = np.tanh(x @ w)
    want = ((h - h.max(axis=1, keepdims=True)).sum(axis=0), np.exp(x).mean())
    ok = all(np.allclose(np.asarray(g), e, rtol=1e-5, atol=1e-5) for g, e in zip(got, want))
    s = axle.stats()
    print(json.dumps({"ok": ok, **{k: s[k] for k in s if k.startswith("disk_cache_")}}))
""")


def _start(cache) -> subprocess.Popen:  # noqa: ANN001
    env = {**os.environ, "AXLE_FLAGS": f"--compile_cache={cache}", "AXLE_BACKENDS": "cpu"}
    return subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _answer(p: subprocess.Popen) -> dict[str, int]:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer.pop("ok"), "wrong results"
    return {k[len("disk_cache_"):]: v for k, v in answer.items()}


def test_a_second_process_loads_every_object_and_two_at_once_both_run_right(tmp_path) -> None:
    """Two processes compile one program into an empty cache at the same time (both write
    every key), then a third compiles nothing: every module comes from the disk."""
    cache = tmp_path / "shared"
    first = [_answer(p) for p in [_start(cache), _start(cache)]]
    for counts in first:
        assert counts["writes"] >= 1 and counts["corrupt"] == 0
    third = _answer(_start(cache))
    assert third["hits"] >= 1 and third["misses"] == 0 and third["writes"] == 0, third
    if target.linker():  # the modules both wrote at once are shared libraries, whole
        libraries = [e for e in _entries(cache) if open(e, "rb").read()[84:90] == b"\x7fELF\x02\x01"]
        assert libraries and all(target._is_library(open(e, "rb").read()[84:]) for e in libraries)


def _specs(fn, *args):  # noqa: ANN001, ANN002, ANN202
    """The kernel specs the cpu backend plans for ``fn`` on ``args``."""
    from axle_cpu.plan import build_plan

    module = axle.jit(fn, device="cpu:0").lower(*args).optimize()
    return list(build_plan(module, blas=False).kernels.values())


def test_a_cached_module_is_loaded_without_emitting_its_llvm_ir(compile_cache, monkeypatch) -> None:
    from axle_cpu import executable

    x = np.linspace(-1, 1, 300, dtype=np.float32)
    specs = _specs(lambda x: np.float32(2.5) * x + 1, x)
    executable.compile_kernels(specs, "k")

    def no_emission(*a):  # noqa: ANN002, ANN202
        raise AssertionError("LLVM IR emitted again")

    monkeypatch.setattr(executable, "llvm_module", no_emission)
    axle.reset_stats()
    jm = executable.compile_kernels(specs, "k")
    assert _counts()["hits"] == 1
    out = np.empty_like(x)
    fn = executable.KFUNC(jm.address(specs[0].name))
    ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    fn(ctypes.addressof(ptrs), 0, specs[0].loop_sizes[0], 0, specs[0].loop_sizes[1], 0, 0)
    np.testing.assert_allclose(out, 2.5 * x + 1, rtol=1e-6)
    with pytest.raises(AssertionError, match="emitted again"):
        jm.ir_text  # noqa: B018 - made only when asked for


def test_the_kernels_key_tells_constants_and_shapes_apart() -> None:
    """Scalar constants (in the kernel's code) one ulp apart, and another shape, are
    other keys; array constants are kernel inputs (buffers), not part of the code."""
    from axle_cpu.executable import specs_key

    def key(c: float, n: int = 300) -> bytes | None:
        return specs_key(_specs(lambda x: x * np.float32(c) + 1, np.ones(n, np.float32)), "k", True)

    keys = {key(2.5), key(float(np.nextafter(np.float32(2.5), np.float32(3)))), key(2.5, 301)}
    assert len(keys) == 3 and None not in keys
    assert key(2.5) in keys  # and the same computation is the same key


# --- the shared-library artifact (target.linker(): ld on Linux) ---------------------------

@pytest.fixture
def linked(compile_cache):  # noqa: ANN001, ANN201
    """The test's own cache, on a host where modules are shared libraries (Linux, ld)."""
    assert target.linker(), "no ld on PATH (binutils, installed with cc): modules would be MCJIT objects"
    return compile_cache


def _library_payload() -> bytes:
    """The cached payload of IR's module (compiled into the test's cache first)."""
    JitModule(IR)
    return target.DISK.get(ir_key(IR, True))


def test_a_module_is_cached_as_a_shared_library_and_loaded_without_llvm(linked, monkeypatch) -> None:
    payload = _library_payload()
    assert payload[:4] == b"\x7fELF" and int.from_bytes(payload[16:18], "little") == 3  # ET_DYN
    monkeypatch.setattr(target.llvm, "create_mcjit_compiler", None)  # no engine is made on a hit
    axle.reset_stats()
    assert _triple(JitModule(IR)) == 21.0
    assert _counts()["hits"] == 1


def _replace_payload(payload: bytes) -> None:
    """Writes ``payload`` as IR's entry, checksummed: only the loader can refuse it."""
    target.DISK.put(ir_key(IR, True), payload)


def _other_machine(lib: bytes) -> bytes:
    data = bytearray(lib)
    data[18:20] = (183 if int.from_bytes(lib[18:20], "little") != 183 else 62).to_bytes(2, "little")
    return bytes(data)


@pytest.mark.parametrize("damage", ["not a library", "another machine's library", "a library cut short"])
def test_a_checksummed_library_the_loader_refuses_is_compiled_again(linked, damage: str) -> None:
    lib = _library_payload()
    _replace_payload({"not a library": b"\x7fELF" + bytes(200), "another machine's library": _other_machine(lib),
                      "a library cut short": lib[:len(lib) // 3]}[damage])
    axle.reset_stats()
    jm = JitModule(IR)
    assert _counts()["hits"] == 1 and _counts()["corrupt"] == 1 and _counts()["writes"] == 1
    assert _triple(jm) == 21.0
    axle.reset_stats()
    assert _triple(JitModule(IR)) == 21.0 and _counts()["hits"] == 1 and _counts()["corrupt"] == 0


def test_a_refused_library_is_not_an_executable_from_the_plan_cache(linked) -> None:
    """``load_cached`` (a whole executable from the disk) gives None for a module whose
    library the loader refuses: the caller compiles from source."""
    lib = _library_payload()
    _replace_payload(_other_machine(lib))
    axle.reset_stats()
    assert JitModule.from_disk(ir_key(IR, True), True, lambda: IR) is None
    assert _counts()["corrupt"] == 1


def test_libraries_loaded_one_after_another_keep_their_own_code(linked) -> None:
    """Each library is opened from a memfd whose number the next one reuses once closed:
    dlopen matches loaded libraries by that path first, so without care the second
    module's @k was the first one's (21 instead of 28)."""
    first = JitModule(IR)
    second = JitModule(IR.replace("3.0", "4.0"))
    assert (_triple(first), _triple(second)) == (21.0, 28.0)
    del first
    third = JitModule(IR.replace("3.0", "5.0"))  # after a library was closed
    assert (_triple(second), _triple(third)) == (28.0, 35.0)


def test_a_library_is_loaded_with_two_files_whatever_the_number_held(linked, monkeypatch) -> None:
    """A library is opened by an fd number no held library's path has: with twenty held,
    loading one more makes one memfd (it took one per held library, each kept open until
    the load: quadratic time, and past the open-files limit every module ran from MCJIT)."""
    held = [JitModule(IR.replace("3.0", f"{c}.0")) for c in range(4, 24)]
    made: list[int] = []
    memfd_create = os.memfd_create

    def counted(name: str, flags: int = 0) -> int:
        made.append(flags)
        return memfd_create(name, flags)

    monkeypatch.setattr(os, "memfd_create", counted)
    last = JitModule(IR.replace("3.0", "30.0"))
    assert len(made) == 1 and last._lib is not None
    assert [_triple(jm) for jm in [*held, last]] == [7.0 * c for c in [*range(4, 24), 30]]


def test_paths_other_code_loaded_libraries_by_are_passed_over(linked, monkeypatch) -> None:
    """Twelve fd numbers whose paths name libraries loaded by other code (or names dlopen
    added to a held one): each is skipped, and the module is still a library of its own."""
    probed: list[str] = []

    def foreign(path: str) -> bool:
        probed.append(path)
        return len(probed) <= 12

    monkeypatch.setattr(target, "_loaded", foreign)
    jm = JitModule(IR)
    assert len(probed) == 13 and len(set(probed)) == 13 and jm._lib is not None and _triple(jm) == 21.0


def test_a_file_dlopen_takes_for_a_loaded_library_is_never_used(linked, monkeypatch) -> None:
    """dlopen also gives back a loaded library for a file whose device and inode are that
    library's (a memfd's inode number was unique only from Linux 5.9 on: before, a 32-bit
    counter that wraps). Emulated by giving the second module the first one's file under
    another number; the path check, which sees an empty file where inodes collide, is left
    out. The second module gets its own code (28, not the first one's 21), from a library."""
    memfd_create = os.memfd_create
    files: list[int] = []

    def first_file_again(name: str, flags: int = 0) -> int:
        fd = memfd_create(name, flags)
        if len(files) == 1:  # the second module's first file: the first module's one
            os.close(fd)
            fd = os.dup(files[0])
        files.append(os.dup(fd))
        return fd

    monkeypatch.setattr(os, "memfd_create", first_file_again)
    monkeypatch.setattr(target, "_loaded", lambda path: False)
    try:
        first = JitModule(IR)
        second = JitModule(IR.replace("3.0", "4.0"))
        assert (_triple(first), _triple(second)) == (21.0, 28.0) and second._lib is not None
    finally:
        for f in files:
            os.close(f)


SHADOWING_IR = """
define float @expf(float %x) noinline optnone {
  %y = fadd float %x, 35.0
  ret float %y
}
define float @k(float %x) {
  %y = call float @expf(float %x)
  ret float %y
}
"""


@pytest.mark.parametrize("cache", ["on", "off"])
def test_a_module_calls_its_own_function_not_a_libm_one_of_that_name(compile_cache, monkeypatch, cache: str) -> None:
    """-Bsymbolic: as under MCJIT, the module's own @expf (7 + 35), never the C library's
    (exp(7))."""
    if cache == "off":
        monkeypatch.setattr(config, "compile_cache", "off")
    for _ in range(2):  # compiled, then (cache on) loaded back
        assert _triple(JitModule(SHADOWING_IR)) == 42.0


def test_a_module_the_linker_refuses_runs_from_mcjit_and_is_not_cached(linked, monkeypatch) -> None:
    def refuse(obj: bytes) -> bytes:
        raise target.LinkError("ld failed: refused by the test")

    monkeypatch.setattr(target, "link", refuse)
    monkeypatch.setattr(target, "_link_warned", [])
    axle.reset_stats()
    with pytest.warns(axle.diskcache.CacheWarning, match="refused by the test"):
        jm = JitModule(IR)
    assert _triple(jm) == 21.0 and jm._lib is None
    assert _counts()["writes"] == 0


def test_another_cpus_library_is_never_loaded(linked, monkeypatch) -> None:
    """A library compiled for the same triple with other features (an AVX2 host beside an
    AVX-512 one sharing a home directory) is another key: this host compiles its own."""
    real = target.host()
    other = HostTarget(real.triple, real.cpu, real.features.replace("+avx512f", "-avx512f") + ",-fma")
    monkeypatch.setattr(target, "host", lambda: other)
    JitModule(IR)
    monkeypatch.setattr(target, "host", lambda: real)
    axle.reset_stats()
    assert _triple(JitModule(IR)) == 21.0
    assert _counts()["hits"] == 0 and _counts()["misses"] == 1 and _counts()["writes"] == 1


def test_without_ld_modules_are_objects_loaded_by_mcjit_under_another_key(compile_cache, monkeypatch) -> None:
    """A host without ``ld`` (or not Linux) caches each module's object and loads it into an
    MCJIT engine; the artifact's format is in the key, so neither kind is read as the other."""
    shared_key = ir_key(IR, True)
    monkeypatch.setattr(target, "linker", lambda: None)
    monkeypatch.setattr(target, "_jit_tm", None)  # the JIT code generator (large code model)
    assert ir_key(IR, True) != shared_key
    axle.reset_stats()
    first = JitModule(IR)
    payload = target.DISK.get(ir_key(IR, True))
    assert payload[:4] == b"\x7fELF" and int.from_bytes(payload[16:18], "little") == 1  # ET_REL: an object
    axle.reset_stats()
    second = JitModule(IR)
    assert _counts()["hits"] == 1 and first._lib is None and second._lib is None
    assert _triple(first) == _triple(second) == 21.0


def test_threads_loading_libraries_at_once_each_get_their_own_code(linked) -> None:
    """Eight threads compile (then load from the cache) modules whose @k differ, dropping
    them as they go: memfd numbers are reused all the time, and no thread may get another
    one's library."""
    import threading

    errors: list[str] = []

    def work(c: int) -> None:
        for _ in range(3):  # compiled once, then loaded from the cache
            jm = JitModule(IR.replace("3.0", f"{c}.0"))
            got = _triple(jm)
            if got != 7.0 * c:
                errors.append(f"module of {c} gave {got}")
            del jm

    threads = [threading.Thread(target=work, args=(c,)) for c in range(4, 12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("setting,flags", [(None, os.MFD_CLOEXEC), ("0\n", os.MFD_CLOEXEC | target._MFD_EXEC),
                                           ("1\n", os.MFD_CLOEXEC | target._MFD_EXEC), ("2\n", None), ("x", None)])
def test_memfd_flags_follow_the_kernels_memfd_noexec(setting, flags) -> None:  # noqa: ANN001
    """A kernel without vm.memfd_noexec (before 6.3) knows no MFD_EXEC; setting 1 makes a
    memfd non-executable unless it asks; setting 2 (or one not understood) forbids it."""
    assert target.memfd_flags(setting) == flags


def test_where_memfds_may_not_execute_modules_are_not_linked(compile_cache, monkeypatch) -> None:
    """vm.memfd_noexec = 2: no library could be loaded, so modules are objects loaded by
    MCJIT from the start (each link would be wasted and each cache entry refused)."""
    monkeypatch.setattr(target, "_memfd_noexec", lambda: "2\n")
    monkeypatch.setattr(target, "_jit_tm", None)  # the JIT code generator (large code model)
    for cached in (target._memfd_flags, target.linker):
        cached.cache_clear()
    try:
        assert target.linker() is None and target.artifact_format() == target.OBJECT_FORMAT
        jm = JitModule(IR)
        assert jm._lib is None and _triple(jm) == 21.0
    finally:
        monkeypatch.undo()
        for cached in (target._memfd_flags, target.linker):
            cached.cache_clear()
