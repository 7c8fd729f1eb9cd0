"""Strict JSON for the persistent compile cache's data entries (kernel plans, executables):
types as (dtype name, shape), arrays as (dtype name, shape, base64 bytes) read back with
``np.frombuffer`` under an axle dtype, or, from 64 KiB on, as (dtype name, shape, "ref",
SHA-256) with the bytes stored beside the entry (``axle.constant_store``). Nothing is
unpickled or evaluated: every reader checks the type of what it reads and raises
``TypeError``, ``ValueError`` or ``KeyError`` on anything else, which the caller counts
as a corrupt entry (and compiles again)."""
from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from . import constant_store, counters
from .diskcache import DiskCache
from .errors import AxleError
from .ir.dtypes import DType
from .ir.dtypes import dtype as to_dtype
from .ir.types import TensorType

_DTYPES = {d.value: d for d in DType}
T = TypeVar("T")


def load(disk: DiskCache, key: bytes, read: Callable[[Any], T]) -> T | None:
    """The entry under ``key``, its JSON read by ``read`` (None: none, or one that does not
    read back whole, counted in ``disk_cache_corrupt``: the caller compiles again)."""
    data = disk.get(key)
    if data is None:
        return None
    try:
        return read(json.loads(data))
    except (AxleError, ValueError, KeyError, TypeError, IndexError):
        # checksummed by the disk cache: only a format change or a corrupt disk gets here
        counters.record("disk_cache_corrupt")
        return None


def type_json(t: TensorType) -> list[Any]:
    return [t.dtype.value, list(t.shape)]


def array_json(a: np.ndarray) -> list[Any]:
    """``[dtype, shape, base64 bytes]``, or for a large array ``[dtype, shape, "ref",
    digest]``, its bytes stored beside the entry (written now: axle.constant_store)."""
    a = np.asarray(a, order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    if constant_store.by_reference(a):
        return [to_dtype(a.dtype).value, list(a.shape), "ref", constant_store.put(a)]
    return [to_dtype(a.dtype).value, list(a.shape), base64.b64encode(a.tobytes()).decode()]


def as_int(v: Any) -> int:
    if type(v) is not int:
        raise TypeError(f"expected an int, got {v!r}")
    return v


def as_ints(v: Any) -> list[int]:
    if not isinstance(v, list):
        raise TypeError(f"expected a list, got {v!r}")
    return [as_int(x) for x in v]


def as_str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {v!r}")
    return v


def as_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected a bool, got {v!r}")
    return v


def read_type(v: Any) -> TensorType:
    dt, shape = v
    return TensorType(_DTYPES[as_str(dt)], tuple(as_ints(shape)))


def read_array(v: Any) -> np.ndarray:
    if len(v) == 4:  # a large array, by digest (a missing or corrupt one: MissingConstant, a ValueError)
        dt, shape, tag, digest = v
        if tag != "ref":
            raise ValueError(f"unknown array form {tag!r}")
        return constant_store.get(as_str(digest), _DTYPES[as_str(dt)].np, tuple(as_ints(shape)))
    dt, shape, data = v
    d = _DTYPES[as_str(dt)]
    a = np.frombuffer(base64.b64decode(as_str(data), validate=True), dtype=d.np)
    return a.reshape(tuple(as_ints(shape))).copy()  # (a size mismatch raises ValueError)
