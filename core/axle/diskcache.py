"""A private on-disk cache of compiled bytes (OpenCL program binaries, ...).

What is loaded from disk runs as native code, so the cache trusts only what its own user
wrote where nobody else could write:

- the directory is created ``0700``; an existing one must be a real directory owned by
  this user and not writable by group or others, else the cache is disabled with one
  warning (the program still runs, compiling from source);
- entries are plain bytes behind a small header (magic, format version, the SHA-256 of
  the key, the payload's length and SHA-256): nothing is unpickled or evaluated on load,
  and a truncated, corrupt or mismatched entry is a miss;
- writes are atomic: a ``0600`` temporary file in the same directory, renamed over the
  entry, so a reader never sees half a file.

Keys are versioned by the caller (compiler, driver and format versions belong in them).
"""
from __future__ import annotations

import hashlib
import os
import stat
import struct
import tempfile
import threading
import warnings
import weakref

MAGIC = b"AXLECACH"
FORMAT = 1
#: magic, format version, key digest, payload length, payload digest
_HEADER = struct.Struct("<8sI32sQ32s")
#: every cache alive, so a forked child can re-create their locks
_ALL: weakref.WeakSet[DiskCache] = weakref.WeakSet()


class CacheWarning(UserWarning):
    """An on-disk cache was disabled (unsafe directory) or could not be written."""


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
    """Bytes by key in one private directory; disabled (every lookup a miss) when unsafe."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        self._checked: bool | None = None
        self._lock = threading.Lock()
        _ALL.add(self)

    def enabled(self) -> bool:
        with self._lock:
            if self._checked is None:
                why = safe_dir(self.path)
                self._checked = why is None
                if why:
                    warnings.warn(f"axle: the {self.what} cache directory {self.path!r} {why}; the cache is "
                                  f"disabled (programs are compiled from source). Use a private directory "
                                  f"(chmod 700, owned by you).", CacheWarning, stacklevel=3)
            return self._checked

    def _file(self, key: bytes) -> tuple[str, bytes]:
        digest = hashlib.sha256(key).digest()
        return os.path.join(self.path, digest.hex() + ".bin"), digest

    def get(self, key: bytes) -> bytes | None:
        if not self.enabled():
            return None
        path, digest = self._file(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        if len(data) < _HEADER.size:
            return None
        magic, version, kdigest, length, pdigest = _HEADER.unpack_from(data)
        payload = data[_HEADER.size:]
        if (magic, version, kdigest, length) != (MAGIC, FORMAT, digest, len(payload)):
            return None
        if hashlib.sha256(payload).digest() != pdigest:
            return None
        return payload

    def put(self, key: bytes, payload: bytes) -> None:
        if not self.enabled():
            return
        path, digest = self._file(key)
        header = _HEADER.pack(MAGIC, FORMAT, digest, len(payload), hashlib.sha256(payload).digest())
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".tmp-", suffix=".bin")  # created 0600
        except OSError as e:
            warnings.warn(f"axle: cannot write to the {self.what} cache {self.path!r}: {e}", CacheWarning,
                          stacklevel=3)
            return
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header + payload)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _reset_in_child() -> None:
    for cache in list(_ALL):
        cache._lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_reset_in_child)
