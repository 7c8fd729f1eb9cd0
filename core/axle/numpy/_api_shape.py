"""The array API standard's manipulation, creation and utility functions that NumPy spells
differently or lacks: concat, permute_dims, unstack, roll, broadcast_arrays, meshgrid,
tril/triu/tri, diff, copy, matrix_transpose, vecdot (moveaxis with tuples is in _core,
repeat with an array of repeats in _shape). Each is a composition of existing primitives."""
from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as _np

from .. import lax
from ..errors import ArgumentError
from ..frontend.source import user_location
from ..frontend.validate import as_sequence, axis_arg, size_arg
from ._core import (
    _fail,
    _is_array,
    _norm_axis,
    _on_device,
    _placed,
    asarray,
    broadcast_shapes,
    broadcast_to,
    multiply,
    reshape,
    result_type,
    subtract,
    sum,
    transpose,
)
from ._index import getitem
from ._shape import concatenate

ArrayLike = Any


def _arr(x: ArrayLike) -> Any:
    return asarray(x) if not _is_array(x) else x


def concat(arrays: Sequence[ArrayLike], /, *, axis: int | None = 0) -> Any:
    """The standard's name for concatenate (a tuple or list of arrays)."""
    return concatenate(arrays, axis=axis)


def permute_dims(x: ArrayLike, /, axes: Sequence[int]) -> Any:
    return transpose(x, tuple(axes))


def matrix_transpose(x: ArrayLike, /) -> Any:
    """Transposes the last two axes (a stack of matrices)."""
    x = _arr(x)
    if x.ndim < 2:
        raise _fail("matrix_transpose", "needs an array of rank >= 2", x)
    return transpose(x, tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2))


def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple[Any, ...]:
    """The slices of x along ``axis``, as a tuple (the inverse of stack)."""
    x = _arr(x)
    if x.ndim == 0:
        raise _fail("unstack", "needs an array of rank >= 1", x)
    ax = _norm_axis(axis, x.ndim, "unstack", x)
    lead = (builtins.slice(None),) * ax
    return tuple(getitem(x, lead + (i,)) for i in range(x.shape[ax]))


def roll(x: ArrayLike, /, shift: Any, *, axis: Any = None) -> Any:
    """Elements shifted by ``shift`` along ``axis`` (flattened when None), wrapping around:
    two slices and a concatenate per axis."""
    x = _arr(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), x.shape)
    axes = tuple(_norm_axis(a, x.ndim, "roll", x) for a in as_sequence(axis))
    shifts = tuple(size_arg(s, "roll", "shift", -2**62) for s in as_sequence(shift))
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise _fail("roll", f"shift {shift!r} and axis {axis!r} have different lengths", x)
    out = x
    for s, ax in zip(shifts, axes):
        n = out.shape[ax]
        k = s % n if n else 0
        if k:
            lead = (builtins.slice(None),) * ax
            out = concatenate([getitem(out, lead + (builtins.slice(n - k, None),)),
                               getitem(out, lead + (builtins.slice(0, n - k),))], axis=ax)
    return out


def broadcast_arrays(*arrays: ArrayLike) -> list[Any]:
    xs = [_arr(a) for a in arrays]
    shape = broadcast_shapes(*[x.shape for x in xs])
    return [broadcast_to(x, shape) for x in xs]


def meshgrid(*arrays: ArrayLike, indexing: str = "xy") -> list[Any]:
    """Coordinate matrices from 1-D coordinate vectors ('xy': Cartesian, 'ij': matrix)."""
    if indexing not in ("xy", "ij"):
        raise ArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}", where=user_location())
    xs = [_arr(a) for a in arrays]
    for x in xs:
        if x.ndim != 1:
            raise _fail("meshgrid", "each input must be 1-D", x)
    dt = result_type(*xs) if xs else None
    shape = [x.shape[0] for x in xs]
    if indexing == "xy" and len(xs) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        dim = (1 - i if i < 2 else i) if indexing == "xy" and len(xs) >= 2 else i
        out.append(lax.broadcast_in_dim(x if x.dtype == dt else x.astype(dt), tuple(shape), (dim,)))
    return out


def _tri_mask(n: int, m: int, k: int) -> Any:
    """bool[n, m]: True where column - row <= k (on or below diagonal k)."""
    rows = lax.iota(_np.int64, (n, m), 0)
    cols = lax.iota(_np.int64, (n, m), 1)
    return lax.compare(lax.sub(cols, rows), broadcast_to(_np.asarray(k, _np.int64), (n, m)), "le")


def tri(n: int, m: int | None = None, k: int = 0, dtype: Any = None, *, device: Any = None) -> Any:
    """Ones on and below diagonal k of an n x m array (NumPy's tri)."""
    n = size_arg(n, "tri", "N")
    m = n if m is None else size_arg(m, "tri", "M")
    k = size_arg(k, "tri", "k", -2**62)
    with _on_device(device):
        return _placed(_tri_mask(n, m, k).astype(float if dtype is None else dtype), device)


def _triangle(name: str, x: ArrayLike, k: int, lower: bool) -> Any:
    x = _arr(x)
    if x.ndim < 2:
        raise _fail(name, "needs an array of rank >= 2", x)
    k = size_arg(k, name, "k", -2**62)
    n, m = x.shape[-2:]
    mask = _tri_mask(n, m, k if lower else k - 1)
    if not lower:
        mask = lax.not_(mask)
    mask = broadcast_to(mask, x.shape)
    return lax.select(mask, x, broadcast_to(_np.asarray(0, x.dtype), x.shape))


def tril(x: ArrayLike, /, *, k: int = 0) -> Any:
    """x with the elements above diagonal k zeroed (the last two axes are the matrix)."""
    return _triangle("tril", x, k, lower=True)


def triu(x: ArrayLike, /, *, k: int = 0) -> Any:
    """x with the elements below diagonal k zeroed."""
    return _triangle("triu", x, k, lower=False)


def diff(x: ArrayLike, /, *, axis: int = -1, n: int = 1, prepend: ArrayLike = None,
         append: ArrayLike = None) -> Any:
    """The n-th forward difference along ``axis`` (x[i+1] - x[i], n times); prepend/append
    are concatenated first, as in NumPy. Booleans differ by not_equal, as in NumPy."""
    x = _arr(x)
    if x.ndim == 0:
        raise _fail("diff", "needs an array of rank >= 1", x)
    ax = _norm_axis(axis, x.ndim, "diff", x)
    n = size_arg(n, "diff", "n")
    parts = [v for v in (prepend, x, append) if v is not None]
    if len(parts) > 1:
        shaped = [v if _is_array(v) and v.ndim == x.ndim else
                  broadcast_to(_arr(v), x.shape[:ax] + (1,) + x.shape[ax + 1:]) if _np.ndim(v) == 0 else _arr(v)
                  for v in parts]
        x = concatenate(shaped, axis=ax)
    lead = (builtins.slice(None),) * ax
    for _ in range(n):
        hi, lo = getitem(x, lead + (builtins.slice(1, None),)), getitem(x, lead + (builtins.slice(None, -1),))
        x = lax.compare(hi, lo, "ne") if x.dtype == _np.bool_ else subtract(hi, lo)
    return x


def conj(x: ArrayLike, /) -> Any:
    """The complex conjugate: x itself, as every axle dtype is real (complex is out of scope)."""
    return _arr(x)


def copy(x: ArrayLike, /) -> Any:
    """A new array with x's values (sharing x's immutable buffer, see asarray)."""
    return asarray(x, copy=True)


def vecdot(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1) -> Any:
    """Dot products of vectors along ``axis`` (broadcast over the other axes)."""
    a, b = _arr(x1), _arr(x2)
    if a.ndim == 0 or b.ndim == 0:
        raise _fail("vecdot", "operands must be at least 1-D", a, b)
    if not -builtins.min(a.ndim, b.ndim) <= axis < 0 and axis_arg(axis, builtins.min(a.ndim, b.ndim), "vecdot") >= 0:
        axis -= builtins.min(a.ndim, b.ndim)  # a non-negative axis counts within the smaller rank
    if a.shape[axis] != b.shape[axis]:  # the vectors never broadcast, as the standard says
        raise _fail("vecdot", f"the vectors along axis {axis} differ in length", a, b)
    a, b = broadcast_arrays(a, b)
    ax = axis_arg(axis, a.ndim, "vecdot")
    dt = result_type(a, b)
    return sum(multiply(a, b), axis=ax, dtype=dt)

__all__ = ["broadcast_arrays", "concat", "conj", "copy", "diff", "matrix_transpose", "meshgrid",
           "permute_dims", "roll", "tri", "tril", "triu", "unstack", "vecdot"]
