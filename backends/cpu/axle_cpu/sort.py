"""The cpu sort: a library-call step on the host buffers, with the op table's exact
semantics (stable; NaN last, -0.0 equal to +0.0; descending the reverse order, still
stable) at the speed of NumPy's vectorized (AVX-512) unstable sorts.

NumPy's stable sort is a timsort for 32- and 64-bit keys (about 240 ms for 10^6 float32
on the 2-core EPYC); its default sort is SIMD and ~100x faster but unstable. Two exact
uses of it (docs/backend-cpu.md, "Sort"):

* values only (the result is the single key): stability shows only in which zero (-0.0
  or +0.0) and which NaN (payload, sign) lands where. The unstable sort puts every zero and
  every NaN of a row in one run, so writing each row's zeros and NaNs back there in their
  original order gives the stable result bit for bit;
* one key of at most 32 bits (bool, 8- to 32-bit integers, f16, bf16, f32) and a permutation to apply: each
  element becomes the uint64 ``order-preserving key << 32 | column``, distinct, so the
  unstable sort of those is the stable argsort.

Everything else (64-bit keys carried by a permutation, several keys) runs the op table's
reference (NumPy's stable argsort per key)."""
from __future__ import annotations

import numpy as np

from axle.ir.dtypes import DType, is_float_numpy
from axle.ir.ops import OPS, Op

_SIGN32 = np.uint32(0x80000000)
_BF16 = DType.BFLOAT16.np
#: rows shorter than this use NumPy's stable argsort directly: for (125000, 8) float32 it
#: took 18 ms against the packed sort's 34 ms (for one row of 10^6, 267 ms against 39 ms)
_PACKED_MIN = 64


def host_sort(xs: list[np.ndarray], *, dimension: int, num_keys: int, descending: int, index: int) -> np.ndarray:
    """``sort`` of the arrays ``xs`` (see the op table), computed on the host."""
    out = xs[index]
    n = out.shape[dimension]
    if out.size == 0 or n <= 1:
        return out.copy()

    def rows(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(a, dimension, -1)).reshape(-1, n)

    moved = np.moveaxis(out, dimension, -1).shape
    key = xs[0]
    if num_keys == 1 and index == 0:
        flat = _flipped(_values_sort, rows(key), bool(descending))
    elif num_keys == 1 and key.dtype.itemsize <= 4 and n < 2**32:
        perm = _flipped_perm(rows(key), bool(descending))
        flat = np.take_along_axis(rows(out), perm, axis=1)
    else:
        return OPS[Op.SORT].reference(*xs, dimension=dimension, num_keys=num_keys, descending=descending,
                                      index=index)
    return np.moveaxis(flat.reshape(moved), -1, dimension)


def _flipped(fn: object, r: np.ndarray, descending: bool) -> np.ndarray:
    # stable descending = reverse, stable ascending, reverse (ties keep their order)
    if not descending:
        return fn(r)  # type: ignore[operator]  # one of the row functions below
    return fn(r[:, ::-1])[:, ::-1]  # type: ignore[operator]  # as above


def _flipped_perm(r: np.ndarray, descending: bool) -> np.ndarray:
    if not descending:
        return _stable_argsort32(r)
    n = r.shape[1]
    return (n - 1 - _stable_argsort32(r[:, ::-1]))[:, ::-1]


def _values_sort(r: np.ndarray) -> np.ndarray:
    """Each row sorted, bit-identical to a stable sort (see the module docstring)."""
    s = np.sort(_comparable(r), axis=1).astype(r.dtype, copy=False)
    if is_float_numpy(r.dtype):
        for special in (np.isnan, lambda a: a == 0):
            where_sorted = special(s)
            if where_sorted.any():
                # row-major order visits each row's run in the sorted rows and that row's
                # specials in the input in their original order: same count per row
                s[where_sorted] = r[special(r)]
    return s


def _order_key32(r: np.ndarray) -> np.ndarray:
    """uint32 keys whose unsigned order is the op's order on ``r``: every NaN the largest
    and equal, -0.0 equal to +0.0."""
    if r.dtype == np.bool_:
        return r.astype(np.uint32)
    if r.dtype.kind == "i":
        return r.astype(np.int32).view(np.uint32) ^ _SIGN32
    if r.dtype.kind == "u":
        return r.astype(np.uint32)
    f = r.astype(np.float32) + np.float32(0.0)  # -0.0 + 0.0 is +0.0
    bits = f.view(np.uint32)
    key = np.where(bits & _SIGN32, ~bits, bits | _SIGN32)
    return np.where(np.isnan(f), np.uint32(0xFFFFFFFF), key)


def _stable_argsort32(r: np.ndarray) -> np.ndarray:
    """The stable argsort of each row of ``r`` (keys of at most 32 bits)."""
    n = r.shape[1]
    if n < _PACKED_MIN:
        return np.argsort(_comparable(r), axis=1, kind="stable")
    packed = (_order_key32(r).astype(np.uint64) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
    packed.sort(axis=1)
    return (packed & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _comparable(r: np.ndarray) -> np.ndarray:
    """``r`` in a dtype NumPy sorts in the op's order: bfloat16 as float32 (exact, same
    order; ml_dtypes' bfloat16 sorts misplace NaN)."""
    return r.astype(np.float32) if r.dtype == _BF16 else r
