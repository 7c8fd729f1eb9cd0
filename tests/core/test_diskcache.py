"""The on-disk cache's rules, one test each: private directory, refused when unsafe,
atomic writes, a header checked on load, and nothing executed on load (no pickle)."""
from __future__ import annotations

import os
import pickle
import stat

import pytest

from axle.diskcache import CacheWarning, DiskCache

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
