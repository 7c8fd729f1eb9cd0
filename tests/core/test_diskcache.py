"""The on-disk cache's rules, one test each: private directory, refused when unsafe,
atomic writes, a header checked on load, nothing executed on load (no pickle), the
--compile_cache directory and its size bound, and two processes writing at once."""
from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import axle
from axle.config import Config, config
from axle.diskcache import CacheWarning, DiskCache, evict
from axle.errors import AxleError

KEY = b"v1\0device\0source"


def _cache(path) -> DiskCache:  # noqa: ANN001
    return DiskCache(str(path), "test")


def test_directory_created_private(tmp_path) -> None:
    path = tmp_path / "a" / "cache"
    c = _cache(path)
    c.put(KEY, b"binary")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert c.get(KEY) == b"binary"


def test_entries_private_and_written_atomically(tmp_path) -> None:
    c = _cache(tmp_path / "c")
    c.put(KEY, b"x" * 1000)
    c.put(KEY, b"y" * 10)  # replaced whole, never appended or half-written
    files = os.listdir(tmp_path / "c")
    assert len(files) == 1 and files[0].endswith(".bin")  # no temporary left behind
    assert stat.S_IMODE(os.stat(tmp_path / "c" / files[0]).st_mode) == 0o600
    assert c.get(KEY) == b"y" * 10


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_group_or_world_writable_directory_refused(tmp_path, mode: int) -> None:
    path = tmp_path / "shared"
    path.mkdir()
    os.chmod(path, mode)
    c = _cache(path)
    with pytest.warns(CacheWarning, match="writable by group or others"):
        c.put(KEY, b"binary")
    assert os.listdir(path) == [] and c.get(KEY) is None


def test_directory_of_another_user_refused(tmp_path, monkeypatch) -> None:
    path = tmp_path / "theirs"
    path.mkdir(mode=0o700)
    owner = os.stat(path).st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)  # as seen by another user
    c = _cache(path)
    with pytest.warns(CacheWarning, match="owned by another user"):
        assert c.get(KEY) is None
    c.put(KEY, b"binary")
    assert os.listdir(path) == []


def test_symlinked_directory_refused(tmp_path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.warns(CacheWarning, match="symbolic link"):
        _cache(link).put(KEY, b"binary")
    assert os.listdir(real) == []


def _only_file(path) -> str:  # noqa: ANN001
    (name,) = os.listdir(path)
    return os.path.join(path, name)


def test_corrupt_truncated_or_misplaced_entries_are_misses(tmp_path) -> None:
    c = _cache(tmp_path / "c")
    c.put(KEY, b"0123456789" * 10)
    f = _only_file(tmp_path / "c")
    data = open(f, "rb").read()
    for bad in (data[:-1], data[:20], data[:-1] + b"X", b"", b"AXLECACH" + data[8:12] + b"\0" * 200):
        open(f, "wb").write(bad)
        assert c.get(KEY) is None
    open(f, "wb").write(data)
    os.rename(f, os.path.join(tmp_path / "c", "0" * 64 + ".bin"))  # another key's name
    assert c.get(KEY) is None


def test_a_hit_holds_its_payload_once(tmp_path) -> None:
    """The payload is read into the bytes returned, not sliced off a read of the whole file
    (a second copy: fresh pages of its size, 0.4-0.5 ms per MB in a new process's first
    call, whose OpenCL program binary for the MNIST step is 1 MB)."""
    import tracemalloc

    c = _cache(tmp_path / "c")
    payload = os.urandom(4 << 20)
    c.put(KEY, payload)
    tracemalloc.start()
    try:
        got = c.get(KEY)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == payload
    assert peak < 1.25 * len(payload)


class _Boom:
    def __reduce__(self):  # noqa: ANN204 - what a malicious pickle does on load
        return (open, (os.environ["AXLE_TEST_MARKER"], "w"))


def test_a_pickle_in_the_cache_is_never_executed(tmp_path, monkeypatch) -> None:
    marker = tmp_path / "executed"
    monkeypatch.setenv("AXLE_TEST_MARKER", str(marker))
    c = _cache(tmp_path / "c")
    c.put(KEY, b"genuine")
    f = _only_file(tmp_path / "c")
    open(f, "wb").write(pickle.dumps(_Boom()))
    assert c.get(KEY) is None
    assert not marker.exists()


# ------------------------------------------------------ --compile_cache, bound, concurrency


def _disk_counts() -> dict[str, int]:
    s = axle.stats()
    return {k: s[k] for k in ("disk_cache_hits", "disk_cache_misses", "disk_cache_writes", "disk_cache_corrupt",
                              "disk_cache_evictions")}


def test_subdirectory_caches_live_under_the_compile_cache_flag(compile_cache, tmp_path, monkeypatch) -> None:
    c = DiskCache(None, "test", sub="acme")
    c.put(KEY, b"binary")
    assert os.listdir(compile_cache / "acme")[0].endswith(".bin")
    monkeypatch.setattr(config, "compile_cache", str(tmp_path / "elsewhere"))  # followed at each use
    assert c.get(KEY) is None
    c.put(KEY, b"other")
    assert c.get(KEY) == b"other" and os.listdir(tmp_path / "elsewhere" / "acme")


def test_default_directory_is_the_user_cache(monkeypatch) -> None:
    monkeypatch.setattr(config, "compile_cache", "")
    assert DiskCache(None, "test", sub="acme").path == os.path.join(os.path.expanduser("~"), ".cache", "axle", "acme")


def test_off_disables_every_subdirectory_cache(compile_cache, monkeypatch) -> None:
    monkeypatch.setattr(config, "compile_cache", "off")
    c = DiskCache(None, "test", sub="acme")
    axle.reset_stats()
    c.put(KEY, b"binary")
    assert c.get(KEY) is None and not c.enabled()
    assert not compile_cache.exists()
    assert _disk_counts() == dict.fromkeys(_disk_counts(), 0)


def test_compile_cache_flags_parse() -> None:
    cfg = Config()
    cfg.load_flags("--compile_cache=off --compile_cache_max_mb=64")
    assert (cfg.compile_cache, cfg.compile_cache_max_mb) == ("off", 64.0)
    with pytest.raises(AxleError, match="compile_cache_max_mb must be positive"):
        cfg.load_flags("--compile_cache_max_mb=0")


def test_hits_misses_writes_and_corruption_are_counted(tmp_path) -> None:
    c = _cache(tmp_path / "c")
    axle.reset_stats()
    assert c.get(KEY) is None
    c.put(KEY, b"0123456789")
    assert c.get(KEY) == b"0123456789"
    f = _only_file(tmp_path / "c")
    open(f, "r+b").truncate(os.path.getsize(f) - 3)
    assert c.get(KEY) is None
    assert _disk_counts() == {"disk_cache_hits": 1, "disk_cache_misses": 2, "disk_cache_writes": 1,
                              "disk_cache_corrupt": 1, "disk_cache_evictions": 0}


def _age(path, seconds: float) -> None:  # noqa: ANN001
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_eviction_removes_the_entries_used_longest_ago(tmp_path, monkeypatch) -> None:
    """Bounded at 10 KB, entries of about 2.9 KB: the fourth write evicts down to 90% of the
    bound, oldest use first; a hit counts as a use."""
    monkeypatch.setattr(config, "compile_cache_max_mb", 10_000 / (1 << 20))
    c = _cache(tmp_path / "c")
    keys = [b"k%d" % i for i in range(4)]
    for i, k in enumerate(keys[:3]):
        c.put(k, bytes([i]) * 2800)
        _age(c._file(k)[0], 100 - 10 * i)  # k0 written first, k2 last
    assert c.get(keys[0]) == b"\0" * 2800  # k0 used again: now k1 is the oldest use
    axle.reset_stats()
    c.put(keys[3], b"\3" * 2800)
    assert c.get(keys[1]) is None
    assert [c.get(k) is not None for k in (keys[0], keys[2], keys[3])] == [True, True, True]
    assert _disk_counts()["disk_cache_evictions"] == 1
    assert sum(os.path.getsize(os.path.join(tmp_path / "c", f)) for f in os.listdir(tmp_path / "c")) <= 10_000


def test_the_bound_covers_every_backend_subdirectory_together(compile_cache, monkeypatch) -> None:
    monkeypatch.setattr(config, "compile_cache_max_mb", 10_000 / (1 << 20))
    a, b = DiskCache(None, "test a", sub="a"), DiskCache(None, "test b", sub="b")
    a.put(b"old", b"a" * 4000)
    _age(a._file(b"old")[0], 100)
    b.put(b"mid", b"b" * 4000)
    _age(b._file(b"mid")[0], 50)
    b.put(b"new", b"b" * 4000)  # 12 KB under the root: the other backend's oldest entry goes
    assert a.get(b"old") is None and b.get(b"mid") is not None and b.get(b"new") is not None


def test_eviction_leaves_other_files_and_removes_stale_temporaries(tmp_path) -> None:
    d = tmp_path / "c"
    c = _cache(d)
    c.put(KEY, b"x" * 100)
    (d / "notes.txt").write_text("the user's")
    stale, fresh = d / ".tmp-dead.bin", d / ".tmp-writing.bin"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    _age(stale, 2 * 3600)
    assert evict(str(d), 1) == (1, 0)  # the one entry goes; the user's file and a live write stay
    assert sorted(os.listdir(d)) == [".tmp-writing.bin", "notes.txt"]


WRITER = textwrap.dedent("""
    import sys
    from axle.diskcache import DiskCache
    c = DiskCache(sys.argv[1], "test")
    fill = sys.argv[2].encode()
    for i in range(300):
        c.put(b"shared key", fill * (1000 + i))  # the same key, ever longer payloads
        c.put(b"own key %d" % i + fill, fill * 50)  # and keys of its own, under a tight bound
""")


def test_two_processes_writing_one_key_while_it_is_read(tmp_path) -> None:
    """Two writers of one key and a reader at the same time: the reader sees a miss or one
    whole payload of either writer, never a mix or a part; the bound holds meanwhile."""
    d = str(tmp_path / "c")
    c = _cache(d)
    env = {**os.environ, "AXLE_FLAGS": "--compile_cache_max_mb=0.5"}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, d, fill], env=env, stderr=subprocess.PIPE)
             for fill in ("a", "b")]
    while any(p.poll() is None for p in procs):
        got = c.get(b"shared key")
        if got is not None:
            assert got in (b"a" * len(got), b"b" * len(got)) and 1000 <= len(got) < 1300
    for p in procs:
        assert p.wait() == 0, p.stderr.read().decode() if p.stderr else ""
    final = c.get(b"shared key")
    assert final in (b"a" * 1299, b"b" * 1299)
    assert not [f for f in os.listdir(d) if f.startswith(".tmp-")]  # no temporary left behind
    total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    assert total <= 0.5 * (1 << 20) + 2 * 1400  # the bound, give or take each writer's last entry
