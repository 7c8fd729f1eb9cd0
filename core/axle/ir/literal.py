"""Constant payloads: an immutable, hashable NumPy array."""
from __future__ import annotations

import hashlib

import numpy as np

from .dtypes import DType
from .dtypes import dtype as to_dtype
from .types import TensorType


def array_digest(arr: np.ndarray) -> str:
    """The SHA-256 (hex) of an array's dtype name, shape and little-endian bytes."""
    h = hashlib.sha256(f"{arr.dtype.name}{arr.shape}".encode())
    le = arr if arr.dtype.itemsize == 1 or np.little_endian else arr.astype(arr.dtype.newbyteorder("<"))
    h.update(np.ascontiguousarray(le).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


class Literal:
    """A read-only array with structural equality (dtype, shape, bytes)."""

    __slots__ = ("array", "_hash", "_digest")

    def __init__(self, value: object, dt: DType | None = None) -> None:
        arr = np.asarray(value, dtype=None if dt is None else dt.np)
        to_dtype(arr.dtype)  # refuse unsupported dtypes early
        # native byte order: backends copy a constant's bytes as they are (a big-endian
        # array read from a file gave byte-swapped numbers on cpu and opencl)
        arr = np.array(arr, dtype=arr.dtype.newbyteorder("="), copy=True, order="C")
        arr.setflags(write=False)
        self.array = arr
        self._hash = hash((arr.dtype.str, arr.shape, arr.tobytes()))
        self._digest: str | None = None

    @property
    def type(self) -> TensorType:
        return TensorType(to_dtype(self.array.dtype), tuple(self.array.shape))

    def digest(self) -> str:
        """The SHA-256 of the dtype, shape and little-endian bytes (hex), computed once: the
        name of a large constant in compile-cache entries (``axle.constant_store``)."""
        if self._digest is None:
            self._digest = array_digest(self.array)
        return self._digest

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Literal):
            return NotImplemented
        a, b = self.array, other.array
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Literal({self.array!r})"
