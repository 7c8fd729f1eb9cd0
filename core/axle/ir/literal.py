"""Constant payloads: an immutable, hashable NumPy array."""
from __future__ import annotations

import hashlib
import weakref

import numpy as np

from .dtypes import DType
from .dtypes import dtype as to_dtype
from .types import TensorType


def array_digest(arr: np.ndarray) -> str:
    """The SHA-256 (hex) of an array's dtype name, shape and little-endian bytes."""
    h = hashlib.sha256(f"{arr.dtype.name}{arr.shape}".encode())
    # (a big-endian array on a little-endian host too: no copy when the bytes are little-endian)
    le = arr if arr.dtype.itemsize == 1 else arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    h.update(np.ascontiguousarray(le).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


#: constants this big are hashed and compared by their digest (computed once; their bytes
#: were copied by ``tobytes`` for every hash and comparison)
BIG_BYTES = 64 << 10
#: the Literals alive whose digest was computed, by digest: a compile-cache entry naming one
#: takes it from memory rather than from the disk (axle.constant_store.get)
_LIVE: weakref.WeakValueDictionary[str, Literal] = weakref.WeakValueDictionary()


#: big constants start at a multiple of this many bytes (a cache line, an AVX-512 vector)
ALIGN = 64


def _aligned_copy(arr: np.ndarray) -> np.ndarray:
    """A C-ordered, native-order copy of ``arr`` starting at a multiple of ALIGN bytes."""
    dt = arr.dtype.newbyteorder("=")
    raw = np.empty(arr.nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    out = raw[start:start + arr.nbytes].view(dt).reshape(arr.shape)
    out[...] = arr
    return out


def live(digest: str) -> Literal | None:
    """A Literal of this process with that digest, if one is alive."""
    return _LIVE.get(digest)


class Literal:
    """A read-only array with structural equality (dtype, shape, bytes)."""

    __slots__ = ("array", "_hash", "_digest", "__weakref__")

    def __init__(self, value: object, dt: DType | None = None, *, adopt: bool = False) -> None:
        arr = np.asarray(value, dtype=None if dt is None else dt.np)
        to_dtype(arr.dtype)  # refuse unsupported dtypes early
        # native byte order: backends copy a constant's bytes as they are (a big-endian
        # array read from a file gave byte-swapped numbers on cpu and opencl). ``adopt``:
        # the caller hands over an array nothing else references (an ONNX initializer just
        # converted), kept without a copy when it owns its C-ordered native data
        big = arr.nbytes >= BIG_BYTES
        if not (adopt and arr is value and arr.flags.owndata and arr.flags.c_contiguous
                and arr.dtype.isnative and not (big and arr.ctypes.data % ALIGN)):
            if big:  # backends read a constant as it lies (the cpu's vector loads copied a misaligned one)
                arr = _aligned_copy(arr)
            else:
                arr = np.array(arr, dtype=arr.dtype.newbyteorder("="), copy=True, order="C")
        arr.setflags(write=False)
        self.array = arr
        self._hash: int | None = None
        self._digest: str | None = None

    @property
    def type(self) -> TensorType:
        return TensorType(to_dtype(self.array.dtype), tuple(self.array.shape))

    def digest(self) -> str:
        """The SHA-256 of the dtype, shape and little-endian bytes (hex), computed once: the
        name of a large constant in compile-cache entries (``axle.constant_store``)."""
        if self._digest is None:
            self._digest = array_digest(self.array)
            _LIVE.setdefault(self._digest, self)
        return self._digest

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Literal):
            return NotImplemented
        a, b = self.array, other.array
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.nbytes >= BIG_BYTES:
            return self is other or self.digest() == other.digest()
        return a.tobytes() == b.tobytes()

    def __hash__(self) -> int:
        if self._hash is None:
            a = self.array
            self._hash = hash((a.dtype.str, a.shape, self.digest() if a.nbytes >= BIG_BYTES else a.tobytes()))
        return self._hash

    def __repr__(self) -> str:
        return f"Literal({self.array!r})"
