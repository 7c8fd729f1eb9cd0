"""The array API standard's searching and statistical functions that NumPy lacks or
spells differently: nonzero / argwhere with a static ``size=`` under jit,
count_nonzero, cumulative_sum / cumulative_prod (log-depth scans), from_dlpack."""
from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as _np

from .. import lax
from ..errors import ArgumentError
from ..frontend.array import Array
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, constant_value
from ..frontend.validate import size_arg
from ._core import (
    _fail,
    _is_array,
    _norm_axis,
    asarray,
    astype,
    broadcast_to,
    not_equal,
    reshape,
    sum,
)
from ._math import _scan

ArrayLike = Any


def _arr(x: ArrayLike) -> Any:
    return asarray(x) if not _is_array(x) else x


def _known(x: Any) -> _np.ndarray | None:
    """x's values when they are known now (a concrete array, NumPy data, a captured constant)."""
    if isinstance(x, Tracer):
        return constant_value(x)
    return _np.asarray(x)


def nonzero(x: ArrayLike, /, *, size: int | None = None, fill_value: Any = None) -> tuple[Any, ...]:
    """The indices of the non-zero elements, one int64 array per axis (row-major order).

    The result's length depends on the values: with known values (eagerly) it is exact;
    inside jit pass a static ``size=`` (as in JAX): the first ``size`` indices, the rest
    ``fill_value`` (default 0)."""
    xv = _arr(x)
    if xv.ndim == 0:
        raise _fail("nonzero", "a 0-d array has no indices; use atleast_1d first", xv)
    if size is None:
        host = _known(x)
        if host is None:
            raise _fail("nonzero", "inside jit the number of non-zero elements is unknown; pass a static size=",
                        xv)
        return tuple(asarray(i.astype(_np.int64)) for i in _np.nonzero(host))
    size = size_arg(size, "nonzero", "size")
    return _nonzero_sized(xv, size, 0 if fill_value is None else fill_value)


def _nonzero_sized(x: Any, size: int, fill: Any) -> tuple[Any, ...]:
    """The first ``size`` non-zero positions, by a one-hot match of each element's rank
    among the non-zeros with the output slots (O(size x x.size))."""
    n = x.size
    flat = not_equal(reshape(x, (n,)), _np.asarray(0, x.dtype)) if x.dtype != _np.bool_ else reshape(x, (n,))
    rank = lax.sub(cumulative_sum(astype(flat, _np.int64)), broadcast_to(_np.asarray(1, _np.int64), (n,)))
    slots = lax.iota(_np.int64, (size, n), 0)
    hit = lax.and_(lax.compare(lax.broadcast_in_dim(rank, (size, n), (1,)), slots, "eq"),
                   lax.broadcast_in_dim(flat, (size, n), (1,)))
    pos = lax.iota(_np.int64, (size, n), 1)
    zero = broadcast_to(_np.asarray(0, _np.int64), (size, n))
    found = lax.reduce(lax.convert(hit, _np.int64), "sum", (1,)) if n else broadcast_to(
        _np.asarray(0, _np.int64), (size,))
    flat_idx = lax.reduce(lax.select(hit, pos, zero), "sum", (1,)) if n else found
    fillv = broadcast_to(_np.asarray(fill, _np.int64), (size,))
    out = []
    for stride, dim in zip(_strides(x.shape), x.shape):
        coord = lax.rem(lax.div(flat_idx, broadcast_to(_np.asarray(stride, _np.int64), (size,))),
                        broadcast_to(_np.asarray(builtins.max(dim, 1), _np.int64), (size,)))
        out.append(lax.select(lax.compare(found, broadcast_to(_np.asarray(0, _np.int64), (size,)), "ne"),
                              coord, fillv))
    return tuple(out)


def _strides(shape: tuple[int, ...]) -> list[int]:
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def argwhere(x: ArrayLike, /, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The indices of the non-zero elements as an int64[count, ndim] array (see nonzero)."""
    xv = _arr(x)
    if xv.ndim == 0:  # as NumPy: one row of no coordinates when x is non-zero
        count = nonzero(reshape(xv, (1,)), size=size, fill_value=fill_value)[0].shape[0]
        return asarray(_np.zeros((count, 0), _np.int64))
    idx = nonzero(x, size=size, fill_value=fill_value)
    return lax.concatenate([reshape(i, (i.shape[0], 1)) for i in idx], 1)


def count_nonzero(x: ArrayLike, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    xv = _arr(x)
    nz = not_equal(xv, _np.asarray(0, xv.dtype)) if xv.dtype != _np.bool_ else xv
    return sum(nz, axis=axis, keepdims=keepdims, dtype=_np.int64)


def _cumulative(name: str, op: Any, identity: int, x: ArrayLike, axis: int | None, dtype: Any,
                include_initial: bool) -> Any:
    xv = _arr(x)
    if axis is None:
        if xv.ndim > 1:
            raise _fail(name, "axis is required for arrays of rank > 1", xv)
        axis = 0
    if xv.ndim == 0:
        raise _fail(name, "needs an array of rank >= 1", xv)
    ax = _norm_axis(axis, xv.ndim, name, xv)
    if dtype is not None:
        xv = astype(xv, dtype)
    elif xv.dtype.kind in "biu" and xv.dtype.itemsize < 8:
        # the default integer, as sum accumulates (unsigned: the default unsigned, uint64)
        xv = astype(xv, _np.uint64 if xv.dtype.kind == "u" else _np.int64)
    out = _scan(xv, ax, op, identity) if xv.shape[ax] else xv
    if include_initial:
        low = [0] * xv.ndim
        low[ax] = 1
        out = lax.pad(out, _np.asarray(identity, xv.dtype), low, [0] * xv.ndim, [0] * xv.ndim)
    return out


def cumulative_sum(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> Any:
    """Inclusive prefix sums along ``axis`` (a leading 0 with include_initial)."""
    return _cumulative("cumulative_sum", lax.add, 0, x, axis, dtype, include_initial)


def cumulative_prod(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                    include_initial: bool = False) -> Any:
    """Inclusive prefix products along ``axis`` (a leading 1 with include_initial)."""
    return _cumulative("cumulative_prod", lax.mul, 1, x, axis, dtype, include_initial)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """An axle array from any DLPack producer (NumPy, jax, torch host tensors...). The
    producer's memory is viewed without a copy (NumPy's from_dlpack), then copied once into
    the device's own buffer (backends allocate their buffers; the cpu backend aligns them),
    so ``copy=False`` is refused. An axle array itself passes through."""
    if isinstance(x, Array) and device is None:
        return asarray(x, copy=copy)
    if copy is False:
        raise ArgumentError("from_dlpack: copy=False is not possible: axle device buffers are allocated by the "
                            "backend, so the data is copied once into one", where=user_location())
    try:
        host = _np.from_dlpack(x)
    except (TypeError, BufferError, RuntimeError) as e:
        raise ArgumentError(f"from_dlpack: cannot import {type(x).__name__}: {e}", where=user_location()) from None
    return asarray(host, device=device)


__all__ = ["argwhere", "count_nonzero", "cumulative_prod", "cumulative_sum", "from_dlpack", "nonzero"]
