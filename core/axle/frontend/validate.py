"""Checking what a user passes in, once, at the frontend's entry points.

Every public function validates its Python arguments here (shapes, axes, sizes, steps)
and every value that enters axle from the host (jit arguments, ``asarray``,
``device_put``, constants captured while tracing, Python scalars meeting an array) goes
through :func:`host_array` / :func:`check_weak_scalar`. A bad argument raises an
``axle.errors`` exception naming the function the user called, the offending value and
the user's source line; nothing is ever converted to a different value silently (an
int8 array is refused, not widened: widened, it would overflow differently).
"""
from __future__ import annotations

import errno
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, AxleError, BackendError, DTypeError, ShapeError
from ..ir.dtypes import MAX_RANK, DType, supported_numpy_dtype
from ..ir.dtypes import dtype as to_dtype
from ..ir.ops import as_int
from .source import user_location

#: the largest array (in bytes) any shape may describe; beyond it sizes overflow int64
MAX_BYTES = 2**62


def _index(v: Any, fn: str, what: Any) -> int:
    """v as a Python int when it is an integer (int, NumPy integer, 0-d integer array);
    floats, strings and other objects are refused, as NumPy refuses them. ``what`` names
    the argument: a string, or a callable that makes it (only on error: shapes are
    checked on every call)."""
    if type(v) is int:
        return v
    try:
        return as_int(v)
    except TypeError:
        pass
    name = what() if callable(what) else what
    raise ArgumentError(f"{fn}: {name} must be an integer, got {type(v).__name__} {v!r}", where=user_location())


def shape_arg(shape: Any, fn: str, itemsize: int = 8) -> tuple[int, ...]:
    """A shape argument (an int or a sequence of ints) as a tuple of non-negative ints
    whose array fits in the address range."""
    if hasattr(shape, "__index__"):
        dims: tuple[Any, ...] = (shape,)
    elif isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, np.ndarray)):
        raise ArgumentError(f"{fn}: shape must be an int or a sequence of ints, got {_short(shape)}",
                            where=user_location())
    else:
        dims = tuple(shape)
    out = tuple(_index(d, fn, lambda: f"shape {_short(shape)}: each entry") for d in dims)
    check_shape(out, fn, itemsize)
    return out


def check_shape(shape: tuple[int, ...], fn: str, itemsize: int = 8) -> None:
    """Refuses negative dims, ranks beyond MAX_RANK and sizes beyond MAX_BYTES."""
    if not shape:
        return
    if min(shape) < 0:
        raise ShapeError(f"{fn}: negative dimensions are not allowed, got shape {shape}", where=user_location())
    if len(shape) > MAX_RANK:
        raise ShapeError(f"{fn}: rank {len(shape)} exceeds axle's maximum rank {MAX_RANK}", where=user_location())
    if math.prod(shape) * itemsize > MAX_BYTES:
        raise ShapeError(f"{fn}: shape {shape} is too large ({math.prod(shape)} elements of {itemsize} bytes)",
                         where=user_location())


def axis_arg(axis: Any, ndim: int, fn: str, desc: str = "") -> int:
    """A single axis in [-ndim, ndim) as its non-negative value."""
    a = _index(axis, fn, "axis")
    rank = max(ndim, 1) if ndim == 0 and a in (0, -1) else ndim
    if not -rank <= a < rank:
        raise ShapeError(f"{fn}: axis {a} is out of bounds for an array of rank {ndim}"
                         + (f" (operands: {desc})" if desc else ""), where=user_location())
    return a % max(rank, 1)


def size_arg(v: Any, fn: str, what: Any, minimum: int = 0, maximum: int = 2**62) -> int:
    """An integer count (num, stride, window, repeats, an offset...) in [minimum, maximum]
    (the default bound keeps every size arithmetic inside int64)."""
    n = _index(v, fn, what)
    if not minimum <= n <= maximum:
        name = what() if callable(what) else what
        bound = f">= {minimum}" if n < minimum else f"<= {maximum}"
        raise ArgumentError(f"{fn}: {name} must be {bound}, got {n}", where=user_location())
    return n


def as_sequence(v: Any) -> tuple[Any, ...]:
    """A list, tuple or 1-d array as a tuple; anything else as a one-element tuple (whose
    entry the caller then validates)."""
    if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim):
        return tuple(v)
    return (v,)


def sizes_arg(v: Any, n: int, fn: str, what: str, minimum: int = 0) -> tuple[int, ...]:
    """An int or a sequence of n ints, each >= minimum (strides, windows)."""
    vals = as_sequence(v)
    vals = vals * n if len(vals) == 1 and not isinstance(v, (list, tuple, np.ndarray)) else vals
    if len(vals) != n:
        raise ArgumentError(f"{fn}: {what} needs {n} entries, got {v!r}", where=user_location())
    return tuple(size_arg(x, fn, what, minimum) for x in vals)


def nonzero_step(step: Any, fn: str) -> Any:
    if step == 0:
        raise ArgumentError(f"{fn}: step must not be zero", where=user_location())
    return step


def finite_number(v: Any, fn: str, what: str) -> Any:
    """A real Python / NumPy number (start, stop of arange / linspace; ints within int64)."""
    if isinstance(v, (str, bytes, complex, np.complexfloating)) or not isinstance(v, (int, float, np.number, np.bool_)):
        raise ArgumentError(f"{fn}: {what} must be a real number, got {type(v).__name__} {v!r}",
                            where=user_location())
    if isinstance(v, (int, np.integer)) and not -2**63 <= int(v) < 2**63:
        raise ArgumentError(f"{fn}: {what} {v} does not fit int64", where=user_location())
    if not math.isfinite(float(v)):
        raise ArgumentError(f"{fn}: {what} must be finite, got {v!r}", where=user_location())
    return v


def host_array(x: Any, fn: str) -> np.ndarray:
    """x as a NumPy array of a dtype axle supports, unchanged in value; refuses what would
    have to change (int8 widened, uint64 wrapped, a Python int beyond int64, object data)."""
    if isinstance(x, int) and not isinstance(x, bool):
        check_python_int(x, np.dtype(np.int64), fn)
    try:
        arr = np.asarray(x)
    except (OverflowError, ValueError, TypeError) as e:
        raise DTypeError(f"{fn}: cannot convert {type(x).__name__} to an array: {e}", where=user_location()) from None
    if isinstance(x, (list, tuple)) and arr.dtype.kind in "fuO":
        _check_list_ints(x, fn)  # NumPy turns [1, 2**63] into float64, rounding big ints
    if arr.dtype.kind == "O" and isinstance(x, (list, tuple)):
        raise DTypeError(f"{fn}: the list holds values no axle dtype can represent exactly (ints beyond int64, "
                         f"mixed or non-numeric entries): {_short(x)}", where=user_location())
    check_host_dtype(arr, fn)
    if not (arr.dtype.isnative and arr.flags.aligned and arr.flags.c_contiguous):
        # big-endian, unaligned or strided data: the same values in the layout backends read
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
        if not arr.flags.aligned:
            arr = arr.copy()
    return arr


def _check_list_ints(x: list | tuple, fn: str) -> None:
    try:
        flat = np.asarray(x, dtype=object).reshape(-1)
    except ValueError:  # ragged: NumPy's own conversion reports it
        return
    for v in flat:
        if isinstance(v, int) and not isinstance(v, bool):
            check_python_int(v, np.dtype(np.int64), fn)


def check_host_dtype(arr: np.ndarray, fn: str) -> None:
    if supported_numpy_dtype(arr.dtype) is None:
        hint = ""
        if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and arr.max() >= 2**63:
            hint = " (values >= 2**63 do not fit int64)"
        raise DTypeError(f"{fn}: dtype {arr.dtype} (shape {tuple(arr.shape)}) is not supported by axle{hint}; "
                         f"convert it explicitly to one of {supported_names()} (axle never converts values "
                         f"implicitly: a widened or wrapped integer would compute different results)",
                         where=user_location())
    check_shape(tuple(arr.shape), fn, arr.dtype.itemsize)


def check_python_int(v: int, dt: np.dtype, fn: str) -> None:
    """A Python int meeting an integer dtype must fit it (NumPy 2 raises OverflowError)."""
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if not info.min <= v <= info.max:
            raise DTypeError(f"{fn}: Python int {v} is out of bounds for {dt} ([{info.min}, {info.max}])",
                             where=user_location())


def check_weak_scalar(v: Any, dt: np.dtype, fn: str) -> None:
    """Python scalars promoted to an array's dtype (NEP 50) must keep their value."""
    if isinstance(v, int) and not isinstance(v, bool):
        check_python_int(v, dt, fn)


def supported_names() -> str:
    return ", ".join(d.np.name for d in DType)


def _short(x: Any) -> str:
    s = repr(x)
    return s if len(s) < 80 else s[:77] + "..."


def dtype_arg(dtype: Any, fn: str) -> np.dtype:
    """A dtype argument as the NumPy dtype of a supported axle dtype."""
    try:
        return to_dtype(dtype).np
    except AxleError as e:
        raise DTypeError(f"{fn}: {e.message}", where=user_location()) from None
    except (ValueError, TypeError):
        raise DTypeError(f"{fn}: {dtype!r} is not a dtype", where=user_location()) from None


def scalar_arg(v: Any, dt: np.dtype, fn: str, what: str = "value") -> np.ndarray:
    """A 0-d array of dtype dt holding the scalar v (a fill value, a pad value): a Python
    int that does not fit dt is refused, as NumPy 2 refuses it."""
    if isinstance(v, (list, tuple)) or bool(getattr(v, "ndim", 0)):
        raise ArgumentError(f"{fn}: {what} must be a scalar, got {_short(v)}", where=user_location())
    if isinstance(v, int) and not isinstance(v, bool):
        check_python_int(v, dt, fn)
    try:
        with np.errstate(all="ignore"):
            return np.asarray(v).astype(dt)
    except (OverflowError, ValueError, TypeError) as e:
        raise DTypeError(f"{fn}: {what} {_short(v)} cannot be a {dt}: {e}", where=user_location()) from None


def is_out_of_memory(e: BaseException) -> bool:
    """A host or device allocation that failed (NumPy's MemoryError, mmap's ENOMEM)."""
    return isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno == errno.ENOMEM)


def out_of_memory_error(e: BaseException, what: str, types: Sequence[Any] = ()) -> AxleError:
    """The axle error for a failed allocation while running ``what`` (an op, a jit function)."""
    shown = f" (operands: {', '.join(str(t) for t in types)})" if types else ""
    return BackendError(f"{what}: out of memory: {e}{shown}; use smaller arrays", where=user_location())
