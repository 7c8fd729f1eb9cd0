"""The reduction kinds of ``reduce``, defined once: the value over no elements, the binary
op that combines two partial results, and NumPy's ufunc for the reference.

Every consumer reads this table: the interpreter's reference, the simplifier, the split
reductions that combine partial results on the host, and each backend's emitter (which
renders the combiner with its own expression for that op, so a reduction's max/min has
exactly the elementwise op's IEEE semantics)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

from .dtypes import DType, is_float_numpy
from .opcodes import Op


# IEEE 754-2019 maximum/minimum (as StableHLO, XLA and JAX): NaN-propagating and
# -0.0 < +0.0, so max(-0.0, +0.0) = +0.0 and min(-0.0, +0.0) = -0.0 in either operand
# order. NumPy's maximum/minimum propagate NaN but pick an arbitrary zero on a tie (the
# second operand for f32/f64, the first for f16), so ties are fixed up here.
def maximum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 maximum (ints and bools: NumPy's, which has no ties to break)."""
    out = np.maximum(x, y)
    if not is_float_numpy(np.asarray(out).dtype):
        return out
    # equal operands differ at most in the sign of a zero: the one without a sign bit wins
    return np.where(x == y, np.where(np.signbit(x), y, x), out)


def minimum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 minimum (ints and bools: NumPy's, which has no ties to break)."""
    out = np.minimum(x, y)
    if not is_float_numpy(np.asarray(out).dtype):
        return out
    return np.where(x == y, np.where(np.signbit(x), x, y), out)


@dataclass(frozen=True)
class ReduceKind:
    """One reduction kind. On bool, sum/max/or combine as logical or and prod/min/and as
    logical and (the IR's add and multiply on bool)."""

    name: str
    #: the binary op combining two partial results
    combiner: Op
    #: NumPy's reduction for the reference (max/min ties are fixed up after it)
    ufunc: np.ufunc
    #: the partial-result combiner on arrays, IEEE max/min included
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray]
    _identity: Callable[[np.dtype], object]

    def identity(self, dt: DType) -> np.generic:
        """The value this reduction gives over no elements, as a ``dt`` scalar."""
        return cast(np.generic, np.array(self._identity(dt.np)).astype(dt.np)[()])  # [()]: 0-d -> scalar

    def accumulator(self, dt: DType) -> DType:
        """The dtype partial results are kept in: float16 and bfloat16 sums and products
        run in float32 and round once at the end (as the reference does)."""
        return DType.FLOAT32 if dt.is_half and self.name in ("sum", "prod") else dt

    def combine_host(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``combine`` for partial results of any dtype (bool included)."""
        ufunc = self.host_ufunc(np.asarray(x).dtype)
        return ufunc(x, y) if ufunc is not None else self.combine(x, y)

    def host_ufunc(self, dt: np.dtype) -> np.ufunc | None:
        """The ufunc :meth:`combine_host` applies to partial results of dtype ``dt``, or
        None where it is more than one (float max/min fix up ties): with one, k partial
        results combine in order in one ``ufunc.accumulate`` call (which applies it left to
        right, never pairwise as ``ufunc.reduce`` does) instead of k - 1 calls."""
        if dt == np.bool_:
            return np.logical_or if self.combiner in (Op.ADD, Op.MAX, Op.OR) else np.logical_and
        return self.combine if isinstance(self.combine, np.ufunc) else None


def _lowest(d: np.dtype) -> object:
    return -np.inf if is_float_numpy(d) else (np.iinfo(d).min if d.kind in "iu" else False)


def _highest(d: np.dtype) -> object:
    return np.inf if is_float_numpy(d) else (np.iinfo(d).max if d.kind in "iu" else True)


REDUCE_KINDS: dict[str, ReduceKind] = {k.name: k for k in (
    ReduceKind("sum", Op.ADD, np.add, np.add, lambda d: 0),
    ReduceKind("prod", Op.MUL, np.multiply, np.multiply, lambda d: 1),
    ReduceKind("max", Op.MAX, np.maximum, maximum, _lowest),
    ReduceKind("min", Op.MIN, np.minimum, minimum, _highest),
    ReduceKind("and", Op.AND, np.bitwise_and, np.bitwise_and, lambda d: True if d == np.bool_ else -1),
    ReduceKind("or", Op.OR, np.bitwise_or, np.bitwise_or, lambda d: False if d == np.bool_ else 0),
)}
