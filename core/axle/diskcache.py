"""A private on-disk cache of compiled bytes (cpu object code, OpenCL program binaries, ...).

Every backend's cache lives in one directory, ``--compile_cache`` (default
``~/.cache/axle``; ``off`` disables them all), one subdirectory per backend, and the whole
directory is bounded by ``--compile_cache_max_mb``: beyond it the entries used longest ago
are removed (an entry's modification time is its last use: a hit touches it).

What is loaded from disk runs as native code, so the cache trusts only what its own user
wrote where nobody else could write:

- the directory (and the ``--compile_cache`` directory holding it) is created ``0700``;
  an existing one must be a real directory owned by this user and not writable by group
  or others, else the cache is disabled with one warning (the program still runs,
  compiling from source);
- entries are plain bytes behind a small header (magic, format version, the SHA-256 of
  the key, the payload's length and SHA-256): nothing is unpickled or evaluated on load,
  and a truncated, corrupt or mismatched entry is a miss (counted as corrupt);
- writes are atomic: a ``0600`` temporary file in the same directory, renamed over the
  entry, so a reader never sees half a file, and two processes writing one key leave one
  whole entry (either one: they are equal); a directory a write fails in (read-only, full)
  gets one warning and no more writes from this process, and is still read.

Keys are versioned by the caller (compiler, driver and format versions belong in them).
``axle.stats()`` counts ``disk_cache_hits``, ``disk_cache_misses``, ``disk_cache_writes``,
``disk_cache_corrupt`` and ``disk_cache_evictions`` (all caches together).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
import struct
import tempfile
import threading
import time
import warnings
import weakref

from . import counters
from .config import config

MAGIC = b"AXLECACH"
FORMAT = 1
#: magic, format version, key digest, payload length, payload digest
_HEADER = struct.Struct("<8sI32sQ32s")
#: every cache alive, so a forked child can re-create their locks
_ALL: weakref.WeakSet[DiskCache] = weakref.WeakSet()
#: an entry's file name (the key's SHA-256) and a writer's temporary file
_ENTRY = re.compile(r"[0-9a-f]{64}\.bin")
_TEMP = re.compile(r"\.tmp-.*\.bin")
#: a temporary file older than this was left by a writer that died: eviction removes it
_STALE_TEMP_S = 3600.0
#: eviction goes down to this fraction of the bound, so the next writes do not each evict
_EVICT_TO = 0.9
#: a process scans the directory again once it wrote this fraction of the bound since its
#: last scan (what other processes wrote meanwhile is in no process's estimate)
_RESCAN = 0.125


@functools.cache
def code_version(*dirs: str) -> str:
    """A digest of the path, size, inode and modification and change times of every Python
    source file under ``dirs``: for keys of entries that code produced, so an edited pass
    or emitter is a new key (in a source checkout as in an installed wheel) without a
    version bump. Stats only (about 200 files, about 0.3 ms, once per process): reading
    them all cost 30 ms of a cached first call. The modification time alone is not enough:
    a reproducible build or store (SOURCE_DATE_EPOCH, Nix: every file at one fixed time) or
    ``cp -p``/``rsync -a`` gives new code of the same size the old time; the change time
    (which no tool can set back) and the inode change whenever a file is written again."""
    lines: list[str] = []
    for top in dirs:
        _sources(top, "", lines)
    lines.sort()
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _sources(folder: str, rel: str, out: list[str]) -> None:
    """Appends a line per ``.py`` file under ``folder`` to ``out``: its path relative to
    the top, size, mtime and ctime in ns, and inode (``os.scandir``: the walk and path
    functions of ``os.walk`` cost more than the stats; one string per file, hashed
    together: a digest update and a tuple per file were half the time)."""
    with os.scandir(folder) as it:
        for e in it:
            name = e.name
            if name.endswith(".py"):
                st = e.stat()
                out.append(f"{rel}{name}\0{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}\n")
            elif name != "__pycache__" and e.is_dir(follow_symlinks=False):
                _sources(e.path, rel + name + "/", out)


class CacheWarning(UserWarning):
    """An on-disk cache was disabled (unsafe directory) or could not be written."""


def default_root() -> str:
    """The user cache directory every backend's compile cache lives under by default."""
    return os.path.join(os.path.expanduser("~"), ".cache", "axle")


def cache_root() -> str | None:
    """The ``--compile_cache`` directory (None: ``--compile_cache=off``)."""
    value = config.compile_cache
    if value == "off":
        return None
    return os.path.abspath(os.path.expanduser(value or default_root()))


def _problem(path: str) -> str | None:
    """Why ``path`` is not a safe private cache directory (None: it is)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def safe_dir(path: str) -> str | None:
    """Why ``path`` cannot be used as a private cache directory, creating it 0700 when it
    does not exist (None: it is safe to use)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        return f"cannot be created ({e.strerror})"
    return _problem(path)


class DiskCache:
    """Bytes by key in one private directory; disabled (every lookup a miss) when unsafe
    or when ``--compile_cache=off``.

    ``path`` fixes the directory (bounded on its own); None puts the cache in ``sub``
    under the ``--compile_cache`` directory, read again at each use (so the flag can be
    changed with ``axle.config.update``), bounded together with the other backends'."""

    def __init__(self, path: str | None, what: str, sub: str = "") -> None:
        assert path is not None or sub, "a cache under the --compile_cache directory needs a subdirectory"
        self.fixed = path
        self.sub = sub
        self.what = what
        self._checked: dict[str, bool] = {}
        #: directories a write failed in (read-only, full, gone): not written again by this
        #: process (one warning), still read
        self._unwritable: set[str] = set()
        self._lock = threading.Lock()
        _ALL.add(self)

    @property
    def path(self) -> str | None:
        """The directory now (None: the compile cache is off)."""
        if self.fixed is not None:
            return self.fixed
        root = cache_root()
        return None if root is None else os.path.join(root, self.sub)

    def _bounded(self) -> str:
        """The directory the size bound applies to (the --compile_cache root for a
        subdirectory cache: every backend's entries together)."""
        path = self.path
        assert path is not None
        return path if self.fixed is not None else os.path.dirname(path)

    def enabled(self) -> bool:
        path = self.path
        if path is None:
            return False
        with self._lock:
            ok = self._checked.get(path)
            if ok is None:
                where, why = self._unsafe(path)
                ok = self._checked[path] = why is None
                if why:
                    warnings.warn(f"axle: the {self.what} cache directory {where!r} {why}; the cache is "
                                  f"disabled (programs are compiled from source). Use a private directory "
                                  f"(chmod 700, owned by you), or AXLE_FLAGS=--compile_cache=DIR|off.",
                                  CacheWarning, stacklevel=3)
            return ok

    def _unsafe(self, path: str) -> tuple[str, str | None]:
        """(the directory, why it is unsafe) for the first unsafe one of ``path`` and, for a
        subdirectory cache, the --compile_cache directory holding it (created 0700 too,
        and checked: whoever can write there can swap this cache's directory for theirs)."""
        for where in ([path] if self.fixed is not None else [os.path.dirname(path), path]):
            why = safe_dir(where)
            if why:
                return where, why
        return path, None

    def _file(self, key: bytes) -> tuple[str, bytes]:
        digest = hashlib.sha256(key).digest()
        path = self.path
        assert path is not None
        return os.path.join(path, digest.hex() + ".bin"), digest

    def get(self, key: bytes) -> bytes | None:
        if not self.enabled():
            return None
        path, digest = self._file(key)
        try:
            # unbuffered: the header, then the payload read straight into its own bytes
            # (slicing it off one read of the whole file, or a buffered read after the
            # header, copied it once more: fresh pages of its size, in a cached first call)
            with open(path, "rb", buffering=0) as f:
                header = f.read(_HEADER.size)
                data = f.readall()
        except OSError:
            counters.record("disk_cache_misses")
            return None
        payload = _payload(header, data, digest)
        if payload is None:
            counters.record("disk_cache_misses")
            counters.record("disk_cache_corrupt")
            return None
        counters.record("disk_cache_hits")
        try:
            os.utime(path)  # its last use, which eviction orders by (atime is often not kept)
        except OSError:
            pass  # evicted meanwhile: the bytes read are whole all the same
        return payload

    def has(self, key: bytes) -> bool:
        """Whether an entry file exists under ``key`` (not read: whole or not), touched
        (marked as used now) when it does."""
        if not self.enabled():
            return False
        try:
            os.utime(self._file(key)[0])
        except OSError:
            return False
        return True

    def discard(self, key: bytes) -> None:
        """Removes the entry under ``key`` (a corrupt one: rewritten by the next ``put``)."""
        if self.enabled():
            _unlink(self._file(key)[0])

    def put(self, key: bytes, payload: bytes | memoryview) -> None:
        if not self.enabled():
            return
        path, digest = self._file(key)
        folder = os.path.dirname(path)
        if folder in self._unwritable:
            return
        header = _HEADER.pack(MAGIC, FORMAT, digest, len(payload), hashlib.sha256(payload).digest())
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".bin")  # created 0600
        except OSError as e:
            self._write_failed(folder, e)
            return
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header)  # (apart: a constant's payload is tens of MB, not copied to join them)
                f.write(payload)
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self._write_failed(folder, e)
            return
        counters.record("disk_cache_writes")
        evicted = _BOUNDS.wrote(self._bounded(), len(header) + len(payload))
        if evicted:
            counters.record("disk_cache_evictions", evicted)


    def _write_failed(self, folder: str, e: OSError) -> None:
        """One warning per directory a write failed in (read-only, full disk), which this
        process then only reads: retrying every compile would warn (each message naming
        its own temporary file) and pay for a doomed write each time."""
        with self._lock:
            if folder in self._unwritable:
                return
            self._unwritable.add(folder)
        warnings.warn(f"axle: cannot write to the {self.what} cache {folder!r} ({e.strerror or e}); programs "
                      f"compiled from now on are not cached by this process (cached ones are still read). "
                      f"Free space or fix its permissions, or use AXLE_FLAGS=--compile_cache=DIR|off.",
                      CacheWarning, stacklevel=4)


def _payload(header: bytes, payload: bytes, digest: bytes) -> bytes | None:
    """``payload``, the bytes of an entry after its ``header`` (the first ``_HEADER.size``
    bytes of its file), or None when they are not a whole entry for ``digest``
    (truncated, corrupt, another key's, another format)."""
    if len(header) < _HEADER.size:
        return None
    magic, version, kdigest, length, pdigest = _HEADER.unpack(header)
    if (magic, version, kdigest, length) != (MAGIC, FORMAT, digest, len(payload)):
        return None
    if hashlib.sha256(payload).digest() != pdigest:
        return None
    return payload


class _Bounds:
    """The size bound of each cache directory. Each process keeps an estimate of a
    directory's size (scanned at its first write there, plus what it wrote since); when
    the estimate passes ``--compile_cache_max_mb``, or the process wrote ``_RESCAN`` of it
    since its last scan, the directory is scanned again (what other processes wrote
    included) and the entries used longest ago are removed: N processes writing at once
    pass the bound by at most N eighths of it (by N times it with the estimate alone).
    Removing is safe beside other processes: a reader holding an entry open still reads it
    whole, and an entry removed before it is opened is a miss."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._estimate: dict[str, int] = {}
        self._unscanned: dict[str, int] = {}  # bytes written since the last scan

    def wrote(self, root: str, size: int) -> int:
        """Accounts ``size`` bytes written under ``root``; returns the entries evicted."""
        bound = int(config.compile_cache_max_mb * (1 << 20))
        with self._lock:
            estimate = self._estimate.get(root)
            unscanned = self._unscanned.get(root, 0) + size
            if estimate is not None and estimate + size <= bound and unscanned <= bound * _RESCAN:
                self._estimate[root] = estimate + size
                self._unscanned[root] = unscanned
                return 0
            evicted, self._estimate[root] = evict(root, bound)
            self._unscanned[root] = 0
            return evicted


def _entries(root: str) -> list[tuple[float, int, str]]:
    """(last use, size, path) of the entries in ``root`` and its subdirectories (one
    level: one per backend); temporary files of writers that died are removed."""
    out: list[tuple[float, int, str]] = []
    now = time.time()
    dirs = [root]
    try:
        with os.scandir(root) as it:
            dirs += [e.path for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return out
    for d in dirs:
        try:
            with os.scandir(d) as it:
                files = [e for e in it if e.is_file(follow_symlinks=False)]
        except OSError:
            continue
        for e in files:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue  # removed meanwhile
            if _ENTRY.fullmatch(e.name):
                out.append((st.st_mtime, st.st_size, e.path))
            elif _TEMP.fullmatch(e.name) and now - st.st_mtime > _STALE_TEMP_S:
                _unlink(e.path)
    return out


def evict(root: str, bound: int) -> tuple[int, int]:
    """Removes the entries under ``root`` used longest ago until they take at most
    ``bound`` bytes (down to 90% of it when it is passed, so the next writes need not
    evict again); returns (entries removed, bytes left)."""
    entries = _entries(root)
    total = sum(size for _, size, _ in entries)
    if total <= bound:
        return 0, total
    target = int(bound * _EVICT_TO)
    removed = 0
    for _, size, path in sorted(entries):
        if total <= target:
            break
        _unlink(path)
        total -= size
        removed += 1
    return removed, total


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # another process removed it first


_BOUNDS = _Bounds()


def _reset_in_child() -> None:
    for cache in list(_ALL):
        cache._lock = threading.Lock()  # another thread may have held it at the fork
    _BOUNDS._lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)
