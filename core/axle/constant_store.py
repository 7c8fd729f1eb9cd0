"""Large constants of the persistent compile cache's entries, kept as raw bytes beside them.

An optimized module's text (``module_cache``) or a backend's cached plan (``cache_json``)
that holds a constant of at least :data:`MIN_BYTES` names it by its SHA-256
(``axle.ir.literal.array_digest``: dtype, shape and little-endian bytes) instead of
writing its bytes as base64 into the entry: an ONNX model's 11.7M weights were 62 MB of
base64 printed, hashed, written, read, hashed again and decoded in every first call. The
bytes are stored once per digest, content-addressed, in the ``const`` subdirectory of
``--compile_cache``, as entries of an :class:`axle.diskcache.DiskCache` (the contract of
every entry: a private directory, atomic write then rename, a header with the payload's
length and SHA-256, so that a truncated or corrupt file is detected when read; counted in
the cache's size bound and evicted like any entry). An entry naming a constant whose file
is missing, corrupt or of another size does not read back (:class:`MissingConstant`, a
``ValueError``): its reader counts it as a corrupt entry and compiles again, which writes
the constant again.

The digest names the content, so entries of several programs (or a module and its plan)
holding the same weights share one file, and the key of a traced module (``module_key``)
hashes each constant once per process (the digest is kept on its ``Literal``)."""
from __future__ import annotations

import numpy as np

from .diskcache import DiskCache
from .ir.literal import array_digest, live
from .ir.printer import literal_bytes

#: constants of at least this many bytes are stored by reference (smaller ones stay in the
#: entry's text: a file per bias vector would cost more than its base64)
MIN_BYTES = 64 << 10
#: bumped when a stored constant's layout changes
FORMAT = "axle-constant-1"
#: the constants, under --compile_cache
DISK = DiskCache(None, "constant", sub="const")
#: (directory, digest) of the constants this process wrote or read back whole: not checked
#: again (a module and its plan naming one weight, or a model compiled for two shapes)
_WHOLE: set[tuple[str, str]] = set()


class MissingConstant(ValueError):
    """A constant an entry names is not in the store (evicted, removed) or is corrupt."""


def _key(digest: str) -> bytes:
    return f"{FORMAT}\0{digest}".encode()


def by_reference(arr: np.ndarray) -> bool:
    """Whether an entry names ``arr`` by its digest rather than holding its bytes."""
    return arr.nbytes >= MIN_BYTES and DISK.enabled()


def put(arr: np.ndarray, digest: str | None = None) -> str:
    """Stores ``arr``'s little-endian bytes under its digest (``digest`` when the caller
    knows it), unless a whole file is there already (read back and checked: a corrupt one
    that no entry read since would otherwise stay, named by the entries written now);
    returns the digest."""
    digest = digest or array_digest(arr)
    key = _key(digest)
    where = (str(DISK.path), digest)
    if where in _WHOLE:
        # whole when this process wrote or read it, but evicted since (then written again
        # below: the entry written now names it); touched, so that eviction, which goes by
        # last use, keeps it as long as the entries naming it
        if DISK.has(key):
            return digest
        _WHOLE.discard(where)
    if not (DISK.has(key) and DISK.get(key) is not None):
        DISK.put(key, memoryview(literal_bytes(arr)).cast("B"))
    _WHOLE.add(where)
    return digest


def get(digest: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The constant stored under ``digest`` (read-only): the array of a Literal of this
    process with that digest when one is alive (an ONNX model's weights, which its traced
    module's key named: not read again from the disk), else read from the store. Raises
    MissingConstant when it is missing, corrupt (then removed, so that the next ``put``
    writes it again), or not of ``shape``'s size."""
    lit = live(digest)
    if lit is not None and lit.array.dtype == dtype and lit.array.shape == tuple(shape):
        return lit.array
    key = _key(digest)
    data = DISK.get(key)
    item = dtype.itemsize
    size = int(np.prod(shape, dtype=np.int64))
    if data is None or len(data) != size * item:
        DISK.discard(key)
        _WHOLE.discard((str(DISK.path), digest))
        raise MissingConstant(f"constant {digest[:16]}... ({dtype} {list(shape)}) is not in the compile cache "
                              f"or is corrupt")
    arr = np.frombuffer(data, np.dtype(f"<u{item}"))
    if not np.little_endian and item > 1:
        arr = arr.astype(f"=u{item}")
    if dtype == np.bool_ and arr.size and arr.max() > 1:
        raise MissingConstant(f"constant {digest[:16]}...: a bool constant's elements are 0 or 1")
    _WHOLE.add((str(DISK.path), digest))
    return arr.view(dtype).reshape(shape)
