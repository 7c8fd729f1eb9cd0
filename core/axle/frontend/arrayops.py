"""Operators and methods shared by concrete arrays (Array) and traced ones (Tracer).
Each delegates to axle.numpy, so both behave exactly alike."""
from __future__ import annotations

from typing import Any


def _np() -> Any:
    from .. import numpy as anp

    return anp


def _unsized(what: str) -> Exception:
    from ..errors import ArgumentError
    from .source import user_location

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
        return (self[i] for i in range(self.shape[0]))

    @property
    def at(self) -> Any:
        """Functional updates: ``x.at[idx].set(v)``, ``.add(v)``, ``.get()``."""
        return _np()._AtIndexer(self)

    @property
    def T(self) -> Any:  # noqa: N802
        return _np().transpose(self)

    # arithmetic
    def __add__(self, o: Any) -> Any: return _np().add(self, o)
    def __radd__(self, o: Any) -> Any: return _np().add(o, self)
    def __sub__(self, o: Any) -> Any: return _np().subtract(self, o)
    def __rsub__(self, o: Any) -> Any: return _np().subtract(o, self)
    def __mul__(self, o: Any) -> Any: return _np().multiply(self, o)
    def __rmul__(self, o: Any) -> Any: return _np().multiply(o, self)
    def __truediv__(self, o: Any) -> Any: return _np().true_divide(self, o)
    def __rtruediv__(self, o: Any) -> Any: return _np().true_divide(o, self)
    def __floordiv__(self, o: Any) -> Any: return _np().floor_divide(self, o)
    def __rfloordiv__(self, o: Any) -> Any: return _np().floor_divide(o, self)
    def __mod__(self, o: Any) -> Any: return _np().remainder(self, o)
    def __rmod__(self, o: Any) -> Any: return _np().remainder(o, self)
    def __pow__(self, o: Any) -> Any: return _np().power(self, o)
    def __rpow__(self, o: Any) -> Any: return _np().power(o, self)
    def __matmul__(self, o: Any) -> Any: return _np().matmul(self, o)
    def __rmatmul__(self, o: Any) -> Any: return _np().matmul(o, self)
    def __neg__(self) -> Any: return _np().negative(self)
    def __pos__(self) -> Any: return self
    def __abs__(self) -> Any: return _np().abs(self)
    def __invert__(self) -> Any: return _np().invert(self)
    def __and__(self, o: Any) -> Any: return _np().bitwise_and(self, o)
    def __rand__(self, o: Any) -> Any: return _np().bitwise_and(o, self)
    def __or__(self, o: Any) -> Any: return _np().bitwise_or(self, o)
    def __ror__(self, o: Any) -> Any: return _np().bitwise_or(o, self)
    # comparisons
    def __lt__(self, o: Any) -> Any: return _np().less(self, o)
    def __le__(self, o: Any) -> Any: return _np().less_equal(self, o)
    def __gt__(self, o: Any) -> Any: return _np().greater(self, o)
    def __ge__(self, o: Any) -> Any: return _np().greater_equal(self, o)
    def __eq__(self, o: Any) -> Any: return _np().equal(self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Any: return _np().not_equal(self, o)  # type: ignore[override]

    # methods
    def __getitem__(self, idx: Any) -> Any: return _np().getitem(self, idx)
    def reshape(self, *shape: Any) -> Any:
        return _np().reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
    def transpose(self, *axes: Any) -> Any:
        return _np().transpose(self, (axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes) or None)
    def astype(self, dtype: Any) -> Any: return _np().astype(self, dtype)
    def sum(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().sum(self, axis, keepdims=keepdims)
    def mean(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().mean(self, axis, keepdims=keepdims)
    def max(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().max(self, axis, keepdims=keepdims)
    def min(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().min(self, axis, keepdims=keepdims)
    def prod(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().prod(self, axis, keepdims=keepdims)
    def var(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
        return _np().var(self, axis, ddof=ddof, keepdims=keepdims)
    def std(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
        return _np().std(self, axis, ddof=ddof, keepdims=keepdims)
    def argmax(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().argmax(self, axis, keepdims)
    def argmin(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().argmin(self, axis, keepdims)
    def all(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().all(self, axis, keepdims)
    def any(self, axis: Any = None, keepdims: bool = False) -> Any: return _np().any(self, axis, keepdims)
    def clip(self, a_min: Any = None, a_max: Any = None) -> Any: return _np().clip(self, a_min, a_max)
    def squeeze(self, axis: Any = None) -> Any: return _np().squeeze(self, axis)
    def swapaxes(self, a: int, b: int) -> Any: return _np().swapaxes(self, a, b)
    def dot(self, o: Any) -> Any: return _np().dot(self, o)
    def take(self, indices: Any, axis: Any = None) -> Any: return _np().take(self, indices, axis)
    def flatten(self) -> Any: return _np().reshape(self, (-1,))
    def ravel(self) -> Any: return _np().reshape(self, (-1,))
