"""Findings of the on-disk caches' audit (tests/core/test_diskcache.py has the rules): code
versions that see a rewritten file, the --compile_cache directory itself private, and a
cache that cannot be written (read-only, full) degrading with one warning."""
from __future__ import annotations

import errno
import os
import stat
import warnings

import ml_dtypes
import numpy as np
import pytest

import axle
from axle import diskcache, module_cache
from axle.config import config
from axle.diskcache import CacheWarning, DiskCache, code_version


def test_code_version_changes_when_new_code_keeps_the_size_and_time(tmp_path) -> None:
    # a reinstall from a reproducible build (SOURCE_DATE_EPOCH, a Nix store: every file at one
    # fixed time) or a copy with cp -p gives new code of the same size the old time
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    src = pkg / "passes.py"
    src.write_text("SIGN = +1\n")
    st = os.stat(src)
    before = code_version.__wrapped__(str(pkg))
    new = pkg / "passes.py.new"
    new.write_text("SIGN = -1\n")
    os.replace(new, src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(src).st_size == st.st_size and os.stat(src).st_mtime_ns == st.st_mtime_ns
    assert code_version.__wrapped__(str(pkg)) != before
    assert code_version.__wrapped__(str(pkg)) == code_version.__wrapped__(str(pkg))  # stable while untouched


KEY = b"v1\0device\0source"


def test_the_compile_cache_directory_itself_is_created_private(compile_cache) -> None:
    # makedirs gives the directories above the leaf the umask's mode (0755): only the
    # backend's subdirectory was private
    DiskCache(None, "test", sub="acme").put(KEY, b"binary")
    assert stat.S_IMODE(os.stat(compile_cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(compile_cache / "acme").st_mode) == 0o700


def test_a_compile_cache_directory_others_can_write_disables_its_caches(compile_cache) -> None:
    # whoever can write there can rename this user's private subdirectory away and put a
    # link to their own in its place between the check and a read
    compile_cache.mkdir()
    os.chmod(compile_cache, 0o777)
    c = DiskCache(None, "test", sub="acme")
    with pytest.warns(CacheWarning, match="writable by group or others"):
        c.put(KEY, b"binary")
    assert os.listdir(compile_cache) == [] and c.get(KEY) is None


@pytest.mark.parametrize("failure", ["read-only", "full"])
def test_a_cache_that_cannot_be_written_warns_once_and_still_reads(tmp_path, monkeypatch, failure: str) -> None:
    c = DiskCache(str(tmp_path / "c"), "test")
    c.put(b"old", b"cached before")
    if failure == "read-only":  # (as root a read-only directory is writable: simulated)
        def refuse(*args: object, **kwargs: object) -> None:
            raise PermissionError(errno.EACCES, "Permission denied",
                                  str(tmp_path / "c" / f".tmp-{os.urandom(4).hex()}.bin"))
        monkeypatch.setattr(diskcache.tempfile, "mkstemp", refuse)
    else:
        def full(src: str, dst: str) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(diskcache.os, "replace", full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            c.put(b"new %d" % i, b"x" * 100)
    assert [type(w.message) for w in caught] == [CacheWarning]
    assert "cannot write" in str(caught[0].message)
    assert sorted(os.listdir(tmp_path / "c")) == [diskcache.hashlib.sha256(b"old").hexdigest() + ".bin"]
    assert c.get(b"old") == b"cached before" and c.get(b"new 0") is None


@pytest.mark.parametrize("library", [np, ml_dtypes])
def test_the_optimized_module_key_holds_the_numeric_libraries_versions(monkeypatch, library: object) -> None:
    # constant folding runs NumPy's and ml_dtypes' functions, whose float results' last
    # bits change between versions: a module folded by another version is another module
    dev = axle.device("interpreter:0")
    backend = axle.REGISTRY.backend_for(dev)
    module = axle.jit(lambda x: x * np.float32(np.sin(0.5)), device=dev).lower(np.ones(3, np.float32)).module
    base = module_cache.module_key(module, dev, backend)
    monkeypatch.setattr(library, "__version__", "0.0.0-other")
    assert module_cache.module_key(module, dev, backend) != base


def _dir_bytes(path) -> int:  # noqa: ANN001
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def test_the_bound_holds_while_two_processes_write_at_once(tmp_path, monkeypatch) -> None:
    # Each process knows the directory's size from its own last scan plus its own writes:
    # two processes that scanned it empty and then each wrote 80% of the bound left it at
    # 160% (for as long as they ran). Simulated with two size estimates (one per process).
    bound = 10_000
    monkeypatch.setattr(config, "compile_cache_max_mb", bound / (1 << 20))
    c = DiskCache(str(tmp_path / "c"), "test")
    processes = [diskcache._Bounds(), diskcache._Bounds()]
    for i in range(16):  # turn by turn: entries of about 1 KB
        monkeypatch.setattr(diskcache, "_BOUNDS", processes[i % 2])
        c.put(b"k%d" % i, bytes([i]) * 900)
        assert _dir_bytes(tmp_path / "c") <= 1.25 * bound
    assert c.get(b"k15") == bytes([15]) * 900  # the newest entries stay
