"""Value types: a tensor (dtype + static shape) or a tuple of them."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import DTypeError, ShapeError
from .dtypes import DType

#: each dtype's name in the IR text (``DType.value``, read once)
_DTYPE_NAMES: dict[DType, str] = {d: d.value for d in DType}

Shape = tuple[int, ...]

#: The most dimensions an array type may have: beyond any real program, the frontend's
#: limit too, and within the reference interpreter's: NumPy's 64 dims, and einsum's 52
#: letters for a dot (operands and result of rank <= 32 span at most 48 distinct dims).
MAX_RANK = 32
#: The most bytes an array type may hold: what a signed 64-bit size can count.
MAX_BYTES = (1 << 63) - 1


def squeeze(shape: Shape) -> Shape:
    """The shape without its unit dims (same row-major element order)."""
    return tuple(d for d in shape if d != 1)


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: Shape

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, DType):
            raise DTypeError(f"array type: {self.dtype!r} is not an axle dtype")
        if not isinstance(self.shape, tuple) or not all(type(d) is int and d >= 0 for d in self.shape):
            raise ShapeError(f"array type: shape {self.shape!r} must be a tuple of ints >= 0")
        if len(self.shape) > MAX_RANK:
            raise ShapeError(f"array type: rank {len(self.shape)} is above the limit of {MAX_RANK}")
        if math.prod(self.shape) * self.dtype.itemsize > MAX_BYTES:
            raise ShapeError(f"array type: {self.dtype.value}{list(self.shape)} holds more than {MAX_BYTES} bytes")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        # the dtype's name from a table: ``DType.value`` is an enum property, and the IR
        # printer writes one type per node (the compile cache's key prints every traced module)
        return _DTYPE_NAMES[self.dtype] + "[" + ",".join(map(str, self.shape)) + "]"

    __repr__ = __str__


@dataclass(frozen=True)
class TupleType:
    elements: tuple[TensorType, ...]

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.elements)

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.elements)) + ")"

    __repr__ = __str__


Type = TensorType | TupleType


def shape_str(shape: Shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"
