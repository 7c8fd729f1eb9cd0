"""Reference semantics and type rules of the bit operations and the float elementwise ops
that NumPy spells differently (erf, bitcast-convert), kept beside the op table (ops.py) so
that its rows stay one line each.

Bit operations are written over dtype *properties* (bit width, signed or unsigned), never
over a list of dtypes, so that every integer dtype the IR has gets them.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DTypeError
from .dtypes import DType
from .opcodes import Op
from .types import Shape, TensorType


def bit_width(dt: DType) -> int:
    return dt.itemsize * 8


def _contig(x: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array into 1-d
    return np.require(x, requirements="C")


def _unsigned(x: np.ndarray) -> np.ndarray:
    """The same bits as an unsigned integer array of the same width."""
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _signed(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"i{x.dtype.itemsize}"))


def _amount(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """StableHLO reads a shift amount as unsigned: negative amounts are huge, so out of
    range. Returns (in range, the amount masked into [0, width)) so that NumPy never
    shifts by the width or more (C undefined behaviour, LLVM poison)."""
    width = x.dtype.itemsize * 8
    amt = _unsigned(_contig(y))
    ok = amt < width
    return ok, np.where(ok, amt, 0).astype(amt.dtype)


def shift_left(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ok, amt = _amount(x, y)
    u = _unsigned(_contig(x))
    return np.where(ok, u << amt, 0).astype(u.dtype).view(x.dtype)


def shift_right_logical(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ok, amt = _amount(x, y)
    u = _unsigned(_contig(x))
    return np.where(ok, u >> amt, 0).astype(u.dtype).view(x.dtype)


def shift_right_arithmetic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # The fill is the top bit, for unsigned dtypes too (StableHLO): shift the signed view.
    ok, amt = _amount(x, y)
    s = _signed(_contig(x))
    fill = np.where(s < 0, -1, 0).astype(s.dtype)
    return np.where(ok, s >> amt.astype(s.dtype), fill).astype(s.dtype).view(x.dtype)


def xor(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.bitwise_xor(x, y).astype(x.dtype, copy=False)


def popcnt(x: np.ndarray) -> np.ndarray:
    return np.bitwise_count(_unsigned(_contig(x))).astype(x.dtype)


def count_leading_zeros(x: np.ndarray) -> np.ndarray:
    """Leading zero bits; the bit width for 0. Binary search on the bits moved to the top
    of a uint64 (the zeros shifted in below a narrow value count only up to its width)."""
    width = x.dtype.itemsize * 8
    u = _unsigned(_contig(x)).astype(np.uint64) << np.uint64(64 - width)
    n = np.zeros(x.shape, np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        top_zero = (u >> np.uint64(64 - s)) == 0
        n += np.where(top_zero, s, 0)
        u = np.where(top_zero, u << np.uint64(s), u)
    n += (u >> np.uint64(63)) == 0
    return np.minimum(n, width).astype(x.dtype)


_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    # NumPy has no erf; math.erf in double, rounded once to the operand's dtype.
    return np.asarray(_ERF(x.astype(np.float64)), np.float64).reshape(x.shape).astype(x.dtype)


def bitcast_convert(x: np.ndarray, *, dtype: DType) -> np.ndarray:
    return _contig(x).view(dtype.np).copy()


def bitcast_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    """Same bit width only: StableHLO's width-changing form adds or drops a minor dimension,
    a shape change axle does not support (reshape and bitcast in steps of equal width)."""
    (t,) = ts
    dst: DType = attrs["dtype"]
    if DType.BOOL in (t.dtype, dst):
        raise DTypeError(f"{op.value}: pred has no bit layout to reinterpret (operand {t}, dtype {dst.value})")
    if t.dtype.itemsize != dst.itemsize:
        raise DTypeError(f"{op.value}: {t} to {dst.value} changes the bit width ({bit_width(t.dtype)} to "
                         f"{bit_width(dst)}); only same-width bitcasts are supported")
    return dst


def first_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    return ts[0].shape


def next_after(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # C's nextafter returns y when x == y (so next_after(0.0, -0.0) is -0.0); NumPy's
    # float16 nextafter returns x there, its float32/64 ones y.
    return np.where(x == y, y, np.nextafter(x, y)).astype(x.dtype)
