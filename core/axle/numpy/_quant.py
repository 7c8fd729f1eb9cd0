"""Affine quantization building blocks (issue 15): ``quantize`` to an integer dtype and
``dequantize`` back, as the int8 x int8 -> int32 ``dot_general`` (preferred_element_type)
uses them. q = clip(round_half_even(x / scale) + zero_point, dtype's range);
x ~ (q - zero_point) * scale."""
from __future__ import annotations

from typing import Any

import numpy as _np

from ..errors import DTypeError
from ..frontend.source import user_location
from ..frontend.validate import dtype_arg
from ..ir.dtypes import is_float_numpy as _is_float
from ._core import (
    add,
    asarray,
    astype,
    equal,
    floor,
    fmod,
    greater,
    logical_and,
    logical_or,
    not_equal,
    result_type,
    subtract,
    true_divide,
    where,
)
from ._core import multiply as _multiply
from ._elementwise import clip

ArrayLike = Any


def _round_half_even(y: Any) -> Any:
    """Rounds a float array to the nearest integer, ties to even (NumPy's rint): floor, then
    up where the fraction is above one half, or exactly one half below an odd floor. The
    fraction y - floor(y) is exact in the float type, so no tie is misjudged."""
    r = floor(y)
    frac = subtract(y, r)
    odd = not_equal(fmod(r, 2.0), 0.0)  # fmod keeps the sign: -3 -> -1
    up = logical_or(greater(frac, 0.5), logical_and(equal(frac, 0.5), odd))
    return where(up, add(r, 1.0), r)


def _int_dtype(dtype: Any, fn: str) -> _np.dtype:
    dt = dtype_arg(dtype, fn)
    if dt.kind not in "iu":
        raise DTypeError(f"{fn}: dtype must be an integer type (int8, uint8, ...), got {dt}", where=user_location())
    return dt


def quantize(x: ArrayLike, scale: ArrayLike, zero_point: ArrayLike = 0, dtype: Any = _np.int8) -> Any:
    """``clip(round_half_even(x / scale) + zero_point, min, max)`` as ``dtype`` (default
    int8): affine quantization. ``scale`` and ``zero_point`` broadcast against ``x`` (a
    scalar, or per-channel arrays). Computed in x's float dtype (float32 for integers and
    float16/bfloat16 inputs, so ties are judged exactly); NaN gives 0 (the convert rule)."""
    dt = _int_dtype(dtype, "quantize")
    x = asarray(x)
    work = result_type(x, _np.float32) if not _is_float(x.dtype) or x.dtype.itemsize < 4 else x.dtype
    y = true_divide(astype(x, work), astype(asarray(scale), work))
    q = add(_round_half_even(y), astype(asarray(zero_point), work))
    info = _np.iinfo(dt)
    q = clip(q, float(info.min), float(info.max))
    return astype(q, dt)


def dequantize(q: ArrayLike, scale: ArrayLike, zero_point: ArrayLike = 0, dtype: Any = _np.float32) -> Any:
    """``(q - zero_point) * scale`` in the float ``dtype`` (default float32): the inverse of
    :func:`quantize` up to its rounding."""
    dt = dtype_arg(dtype, "dequantize")
    if not _is_float(dt):
        raise DTypeError(f"dequantize: dtype must be a float type, got {dt}", where=user_location())
    q = asarray(q)
    centered = subtract(astype(q, dt), astype(asarray(zero_point), dt))
    return _multiply(centered, astype(asarray(scale), dt))


__all__ = ["quantize", "dequantize"]
