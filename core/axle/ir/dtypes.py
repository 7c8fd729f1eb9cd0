"""Element types of the IR and their NumPy-compatible promotion."""
from __future__ import annotations

import enum
from typing import Any

import ml_dtypes
import numpy as np

from ..errors import DTypeError


class DType(enum.Enum):
    """The element types every backend understands.

    The value is the short name used in the IR text (HLO spelling)."""

    # singletons compared by identity: an identity hash keeps dtype table lookups cheap
    __hash__ = object.__hash__

    BOOL = "pred"
    INT32 = "s32"
    INT64 = "s64"
    FLOAT16 = "f16"
    FLOAT32 = "f32"
    FLOAT64 = "f64"
    # the narrow and unsigned integers and bfloat16 (issue 15)
    INT8 = "s8"
    INT16 = "s16"
    UINT8 = "u8"
    UINT16 = "u16"
    UINT32 = "u32"
    UINT64 = "u64"
    BFLOAT16 = "bf16"

    @property
    def np(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOAT_SET

    @property
    def is_int(self) -> bool:
        """Any integer, signed or unsigned (not bool)."""
        return self in _SIGNED_SET or self in _UNSIGNED_SET

    @property
    def is_signed(self) -> bool:
        """A signed integer (floats are signed too, but this asks about integers)."""
        return self in _SIGNED_SET

    @property
    def is_unsigned(self) -> bool:
        return self in _UNSIGNED_SET

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def bits(self) -> int:
        return 8 * self.np.itemsize

    @property
    def is_half(self) -> bool:
        """A 16-bit float, which every op computes in float32 and rounds once (to nearest
        even) to store: float16 and bfloat16."""
        return self in (DType.FLOAT16, DType.BFLOAT16)

    def __repr__(self) -> str:
        return f"axle.{self.np.name}"

    __str__ = __repr__


_SIGNED_SET = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
_UNSIGNED_SET = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})
_FLOAT_SET = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64})

_TO_NUMPY = {
    DType.BOOL: np.dtype(np.bool_),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.FLOAT16: np.dtype(np.float16),
    DType.FLOAT32: np.dtype(np.float32),
    DType.FLOAT64: np.dtype(np.float64),
    DType.INT8: np.dtype(np.int8),
    DType.INT16: np.dtype(np.int16),
    DType.UINT8: np.dtype(np.uint8),
    DType.UINT16: np.dtype(np.uint16),
    DType.UINT32: np.dtype(np.uint32),
    DType.UINT64: np.dtype(np.uint64),
    DType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
_FROM_TEXT = {d.value: d for d in DType}

bool_ = DType.BOOL
int8 = DType.INT8
int16 = DType.INT16
int32 = DType.INT32
int64 = DType.INT64
uint8 = DType.UINT8
uint16 = DType.UINT16
uint32 = DType.UINT32
uint64 = DType.UINT64
float16 = DType.FLOAT16
bfloat16 = DType.BFLOAT16
float32 = DType.FLOAT32
float64 = DType.FLOAT64

ALL_DTYPES: tuple[DType, ...] = tuple(DType)
#: the dtypes of the first backend contract (API 1.0): what ``Capabilities`` claims by
#: default, so a plugin written before the narrow/unsigned integers and bfloat16 existed
#: never receives them (they go to the host fallback instead)
BASE_DTYPES: frozenset[DType] = frozenset({DType.BOOL, DType.INT32, DType.INT64, DType.FLOAT16, DType.FLOAT32,
                                           DType.FLOAT64})
NUMERIC: frozenset[DType] = frozenset(d for d in DType if not d.is_bool)
FLOATS: frozenset[DType] = _FLOAT_SET
SIGNED_INTS: frozenset[DType] = _SIGNED_SET
UNSIGNED_INTS: frozenset[DType] = _UNSIGNED_SET
INTS: frozenset[DType] = _SIGNED_SET | _UNSIGNED_SET
INTEGRAL: frozenset[DType] = INTS | {DType.BOOL}


def is_float_numpy(npd: object) -> bool:
    """True for a NumPy float dtype, bfloat16 included (whose ``kind`` is 'V', not 'f')."""
    found = supported_numpy_dtype(npd)
    return found is not None and found.is_float


def finfo(dt: DType) -> Any:
    """``np.finfo`` for every float DType (NumPy's own refuses bfloat16)."""
    return ml_dtypes.finfo(dt.np)


def dtype(x: object) -> DType:
    """Converts a DType, NumPy dtype, type object or name ('float32', 'f32', 'bfloat16') to a DType."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _FROM_TEXT:
        return _FROM_TEXT[x]
    if isinstance(x, str) and x == "bfloat16":  # NumPy knows the name only once ml_dtypes registered it
        return DType.BFLOAT16
    try:
        npd = np.dtype(x)  # type: ignore[call-overload]  # any value: a TypeError is reported below
    except TypeError:
        raise DTypeError(f"{x!r} is not a dtype") from None
    found = supported_numpy_dtype(npd)
    if found is not None:
        return found
    # complex, longdouble, strings, other ml_dtypes floats...: refused, never converted
    raise DTypeError(
        f"dtype {npd} is not supported by axle; supported: "
        + ", ".join(d.np.name for d in DType)
    )


def _strong(a: object) -> np.dtype | None:
    """The NumPy dtype of a typed argument; None for a weak Python scalar."""
    if isinstance(a, DType):
        return a.np
    if isinstance(a, (bool, int, float)):
        return None
    if hasattr(a, "dtype"):
        d = a.dtype
        return d.np if isinstance(d, DType) else np.dtype(d)
    return np.dtype(a)  # type: ignore[call-overload]  # a TypeError is reported by the caller


def result_type(*args: object) -> DType:
    """NumPy 2 promotion (NEP 50: Python scalars are weak) over axle's dtypes; bfloat16,
    which NumPy cannot promote, follows jax: with bool, any integer or a weak Python scalar
    it stays bfloat16; with float16 or float32 it gives float32; with float64, float64."""
    strong = [_strong(a) for a in args]
    bf16 = _TO_NUMPY[DType.BFLOAT16]
    if any(s == bf16 for s in strong if s is not None):
        others = [s for s in strong if s is not None and s != bf16 and is_float_numpy(s)]
        for s in strong:
            if s is not None:
                dtype(s)  # refuses complex and the other unsupported dtypes
        return dtype(np.result_type(np.float32, *others)) if others else DType.BFLOAT16
    converted: list[Any] = [a if s is None else s for a, s in zip(args, strong)]
    return dtype(canonical_numpy_dtype(np.result_type(*converted)))


#: the highest rank an array may have (NumPy's iterators, which the host paths use, stop at 32)
MAX_RANK = 32


def supported_numpy_dtype(npd: object) -> DType | None:
    """The DType of a NumPy dtype that axle supports exactly, else None. This is the one
    set of accepted host dtypes: everything else (complex, longdouble, strings, the other
    ml_dtypes floats...) is refused at the frontend's entry points, never widened or wrapped."""
    try:
        # byte order is storage, not value: big-endian float32 is float32
        return _FROM_NUMPY.get(np.dtype(npd).newbyteorder("="))  # type: ignore[call-overload]  # TypeError: below
    except TypeError:
        return None


def canonical_numpy_dtype(npd: np.dtype) -> np.dtype:
    """npd itself when axle supports it; a DTypeError otherwise (never a widened or wrapped
    dtype, which would change values and overflow behaviour)."""
    npd = np.dtype(npd)
    if npd in _FROM_NUMPY:
        return npd
    return dtype(npd).np  # raises the DTypeError naming the supported dtypes
