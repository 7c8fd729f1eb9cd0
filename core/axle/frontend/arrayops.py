"""The base shared by concrete arrays (Array) and traced ones (Tracer). Its operators
(``x + y``, ``x[i]``, ``x.T``...) and NumPy-style methods (``x.sum()``...) are attached by
axle.numpy when it is imported (axle/numpy/_array_methods.py), so both kinds of array
behave exactly like the axle.numpy functions and this layer needs nothing above it."""
from __future__ import annotations

from typing import Any

from ..errors import ArgumentError
from .source import user_location


def _unsized(what: str) -> Exception:
    return ArgumentError(f"{what}: a 0-d array has no length (NumPy raises TypeError too)", where=user_location())


class ArrayOps:
    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # == is elementwise, as in NumPy

    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __len__(self) -> int:
        if not self.shape:
            raise _unsized("len()")
        return self.shape[0]

    def __iter__(self) -> Any:
        if not self.shape:
            raise _unsized("iteration")
        return (self[i] for i in range(self.shape[0]))  # type: ignore[index]  # __getitem__ is attached

    def __pos__(self) -> Any:
        return self
