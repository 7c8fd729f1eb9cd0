"""Value types: a tensor (dtype + static shape) or a tuple of them."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .dtypes import DType

Shape = tuple[int, ...]


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: Shape

    def __post_init__(self) -> None:
        assert isinstance(self.dtype, DType), f"bad dtype {self.dtype!r}"
        assert all(isinstance(d, int) and d >= 0 for d in self.shape), f"bad shape {self.shape!r}"

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
        return f"{self.dtype.value}[{','.join(map(str, self.shape))}]"

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
