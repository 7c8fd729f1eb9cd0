"""Element types of the IR and their NumPy-compatible promotion."""
from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ..errors import DTypeError


class DType(enum.Enum):
    """The element types every backend understands.

    The value is the short name used in the IR text (HLO spelling)."""

    BOOL = "pred"
    INT32 = "s32"
    INT64 = "s64"
    FLOAT16 = "f16"
    FLOAT32 = "f32"
    FLOAT64 = "f64"

    @property
    def np(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64)

    @property
    def is_int(self) -> bool:
        return self in (DType.INT32, DType.INT64)

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    def __repr__(self) -> str:
        return f"axle.{self.np.name}"

    __str__ = __repr__


_TO_NUMPY = {
    DType.BOOL: np.dtype(np.bool_),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.FLOAT16: np.dtype(np.float16),
    DType.FLOAT32: np.dtype(np.float32),
    DType.FLOAT64: np.dtype(np.float64),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
_FROM_TEXT = {d.value: d for d in DType}

bool_ = DType.BOOL
int32 = DType.INT32
int64 = DType.INT64
float16 = DType.FLOAT16
float32 = DType.FLOAT32
float64 = DType.FLOAT64

ALL_DTYPES: tuple[DType, ...] = tuple(DType)
NUMERIC: frozenset[DType] = frozenset(d for d in DType if not d.is_bool)
FLOATS: frozenset[DType] = frozenset(d for d in DType if d.is_float)
INTEGRAL: frozenset[DType] = frozenset({DType.BOOL, DType.INT32, DType.INT64})


def dtype(x: object) -> DType:
    """Converts a DType, NumPy dtype, type object or name ('float32', 'f32') to a DType."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _FROM_TEXT:
        return _FROM_TEXT[x]
    try:
        npd = np.dtype(x)  # type: ignore[call-overload]  # any value: a TypeError is reported below
    except TypeError:
        raise DTypeError(f"{x!r} is not a dtype") from None
    found = supported_numpy_dtype(npd)
    if found is not None:
        return found
    # Narrow/unsigned integer types have no IR counterpart (yet): refused, never converted.
    raise DTypeError(
        f"dtype {npd} is not supported by axle; supported: "
        + ", ".join(d.np.name for d in DType)
    )


def result_type(*args: object) -> DType:
    """NumPy 2 promotion (NEP 50: Python scalars are weak) restricted to axle's dtypes."""
    converted: list[Any] = []  # NumPy dtypes and weak Python scalars
    for a in args:
        if isinstance(a, DType):
            converted.append(a.np)
        elif isinstance(a, (bool, int, float)):
            converted.append(a)
        elif hasattr(a, "dtype"):
            d = a.dtype
            converted.append(d.np if isinstance(d, DType) else np.dtype(d))
        else:
            converted.append(np.dtype(a))  # type: ignore[call-overload]  # a TypeError is reported below
    return dtype(canonical_numpy_dtype(np.result_type(*converted)))


#: the highest rank an array may have (NumPy's iterators, which the host paths use, stop at 32)
MAX_RANK = 32


def supported_numpy_dtype(npd: object) -> DType | None:
    """The DType of a NumPy dtype that axle supports exactly, else None. This is the one
    set of accepted host dtypes: everything else (int8, int16, uint*, longdouble, complex...)
    is refused at the frontend's entry points, never widened or wrapped."""
    try:
        # byte order is storage, not value: big-endian float32 is float32
        return _FROM_NUMPY.get(np.dtype(npd).newbyteorder("="))  # type: ignore[call-overload]  # TypeError: below
    except TypeError:
        return None


def canonical_numpy_dtype(npd: np.dtype) -> np.dtype:
    """npd itself when axle supports it; a DTypeError otherwise. (It used to widen int8 to
    int32 and wrap uint64 into int64, which changed values and overflow behaviour.)"""
    npd = np.dtype(npd)
    if npd in _FROM_NUMPY:
        return npd
    return dtype(npd).np  # raises the DTypeError naming the supported dtypes
