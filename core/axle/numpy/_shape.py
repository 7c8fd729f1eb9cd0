"""Creation and shape manipulation: linspace, eye, *_like, concatenate, stack, split, flip,
pad, swapaxes, moveaxis."""
from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as _np

from .. import lax
from ..errors import ArgumentError
from ..frontend.array import Array
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, constant_value
from ..frontend.validate import as_sequence, axis_arg, check_shape, dtype_arg, finite_number, host_array, size_arg
from ..ir.dtypes import is_float_numpy as _is_float
from ._core import (
    _fail,
    _full,
    _is_array,
    _like_placed,
    _norm_axes,
    _norm_axis,
    _on_device,
    _placed,
    _to_value,
    add,
    arange,
    asarray,
    astype,
    broadcast_to,
    expand_dims,
    moveaxis,
    multiply,
    reshape,
    result_type,
    transpose,
    where,
)
from ._index import getitem

ArrayLike = Any


def full_like(x: ArrayLike, fill_value: Any, dtype: Any = None, device: Any = None) -> Any:
    x = asarray(x) if not _is_array(x) else x
    return _like_placed(x, device, lambda: _full("full_like", x.shape, fill_value, dtype or x.dtype))


def empty(shape: Any, dtype: Any = None, device: Any = None) -> Any:
    """Zeros: axle arrays are immutable, so 'uninitialized' has no use."""
    with _on_device(device):
        return _placed(_full("empty", shape, 0, float if dtype is None else dtype), device)


def empty_like(x: ArrayLike, dtype: Any = None, device: Any = None) -> Any:
    return full_like(x, 0, dtype, device=device)


def linspace(start: float, stop: float, num: int = 50, endpoint: bool = True, dtype: Any = None,
             device: Any = None) -> Any:
    """``num`` evenly spaced values; computed as start + i*step like NumPy (last value exact)."""
    with _on_device(device):
        return _placed(_linspace(start, stop, num, endpoint, dtype), device)


def _linspace(start: float, stop: float, num: int, endpoint: bool, dtype: Any) -> Any:
    num = size_arg(num, "linspace", "num")
    finite_number(start, "linspace", "start"), finite_number(stop, "linspace", "stop")
    dt = dtype_arg(dtype, "linspace") if dtype is not None else _np.dtype(_np.float64)
    check_shape((num,), "linspace", dt.itemsize)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    work = dt if _is_float(dt) else _np.dtype(_np.float64)
    i = arange(num, dtype=work)
    out = add(multiply(i, _np.asarray(step, work)), _np.asarray(start, work))
    if endpoint and num > 1:
        out = where(arange(num) == num - 1, _np.asarray(stop, work), out)
    return astype(out, dt)


def eye(n: int, m: int | None = None, k: int = 0, dtype: Any = None, device: Any = None) -> Any:
    with _on_device(device):
        return _placed(_eye(n, m, k, float if dtype is None else dtype), device)


def _eye(n: int, m: int | None, k: int, dtype: Any) -> Any:
    n = size_arg(n, "eye", "N")
    m = n if m is None else size_arg(m, "eye", "M")
    k = size_arg(k, "eye", "k", -2**62, 2**62)
    dt = dtype_arg(dtype, "eye")
    check_shape((n, m), "eye", dt.itemsize)
    rows = lax.iota(_np.int64, (n, m), 0)
    cols = lax.iota(_np.int64, (n, m), 1)
    diag = lax.compare(lax.add(rows, broadcast_to(_np.asarray(k, _np.int64), (n, m))), cols, "eq")
    return astype(diag, dt)


def identity(n: int, dtype: Any = float) -> Any:
    return eye(n, dtype=dtype)


def swapaxes(x: ArrayLike, axis1: int, axis2: int) -> Any:
    x = asarray(x) if not _is_array(x) else x
    a = _norm_axis(axis1, x.ndim, "swapaxes", x)
    b = _norm_axis(axis2, x.ndim, "swapaxes", x)
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def concatenate(arrays: Sequence[ArrayLike], axis: int | None = 0) -> Any:
    if not arrays:
        raise ArgumentError("concatenate: need at least one array", where=user_location())
    if axis is None:
        arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
    dt = result_type(*arrays)
    orig = [asarray(a) if not _is_array(a) else a for a in arrays]  # what errors name
    xs = [_to_value(a, dt) for a in orig]
    ranks = {x.ndim for x in xs}
    if len(ranks) != 1 or 0 in ranks:
        raise _fail("concatenate", "all inputs need the same rank >= 1", *orig)
    ax = _norm_axis(axis, xs[0].ndim, "concatenate", orig[0])
    for x in xs:
        if builtins.any(a != b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if i != ax):
            raise _fail("concatenate", f"shapes must agree except on axis {ax}", *orig)
    nonempty = [x for x in xs if x.shape[ax]] or xs[:1]
    return nonempty[0] if len(nonempty) == 1 else lax.concatenate(nonempty, ax)


def stack(arrays: Sequence[ArrayLike], axis: int = 0) -> Any:
    if not arrays:
        raise ArgumentError("stack: need at least one array", where=user_location())
    shapes = {tuple(_np.shape(a)) if not _is_array(a) else a.shape for a in arrays}
    if len(shapes) != 1:
        raise _fail("stack", "all input arrays must have the same shape",
                    *[asarray(a) if not _is_array(a) else a for a in arrays])
    nd = len(shapes.pop()) + 1
    ax = axis_arg(axis, nd, "stack")
    return concatenate([expand_dims(a, ax) for a in arrays], axis=ax)


def _ndim(a: ArrayLike) -> int:
    return a.ndim if _is_array(a) else _np.ndim(a)


def hstack(arrays: Sequence[ArrayLike]) -> Any:
    return concatenate(arrays, axis=0 if _ndim(arrays[0]) <= 1 else 1)


def vstack(arrays: Sequence[ArrayLike]) -> Any:
    return concatenate([reshape(a, (1, -1)) if _ndim(a) <= 1 else a for a in arrays], axis=0)


def split(x: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """Equal sections (an int that must divide the axis) or split points, like NumPy."""
    x = asarray(x) if not _is_array(x) else x
    ax = _norm_axis(axis, x.ndim, "split", x)
    n = x.shape[ax]
    if not isinstance(indices_or_sections, (list, tuple, _np.ndarray)) or _np.ndim(indices_or_sections) == 0:
        k = size_arg(indices_or_sections, "split", "sections", 1)
        if n % k:
            raise _fail("split", f"array split does not result in an equal division ({n} into {k})", x)
        points = [n // k * i for i in range(1, k)]
    else:
        points = [size_arg(p, "split", "split points", -2**62) for p in indices_or_sections]
    bounds = [0] + points + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        lo, hi = builtins.min(builtins.max(lo, 0), n), builtins.min(builtins.max(hi, 0), n)
        idx = [slice(None)] * x.ndim
        idx[ax] = slice(lo, builtins.max(lo, hi))
        out.append(getitem(x, tuple(idx)))
    return out


def array_split(x: ArrayLike, sections: int, axis: int = 0) -> list[Any]:
    x = asarray(x) if not _is_array(x) else x
    n = x.shape[_norm_axis(axis, x.ndim, "array_split", x)]
    # more sections than elements only adds empty pieces; bound them like any array size
    sections = size_arg(sections, "array_split", "sections", 1, builtins.max(n, 1) + 2**16)
    q, r = divmod(n, sections)
    points, acc = [], 0
    for i in range(sections - 1):
        acc += q + (1 if i < r else 0)
        points.append(acc)
    return split(x, points, axis)


def flip(x: ArrayLike, axis: Any = None) -> Any:
    x = asarray(x) if not _is_array(x) else x
    axes = _norm_axes(axis, x.ndim, "flip", x)
    axes = tuple(a for a in axes if x.shape[a] > 1)
    return lax.reverse(x, axes) if axes else x


def fliplr(x: ArrayLike) -> Any:
    return flip(x, 1)


def flipud(x: ArrayLike) -> Any:
    return flip(x, 0)


def pad(x: ArrayLike, pad_width: Any, mode: str = "constant", constant_values: Any = 0) -> Any:
    """Constant padding (the only mode that is one primitive); widths as in NumPy."""
    x = asarray(x) if not _is_array(x) else x
    if mode != "constant":
        raise _fail("pad", f"mode {mode!r} is not supported; only 'constant'", x)
    pw = _pad_widths(pad_width, x)
    if (pw < 0).any():
        raise _fail("pad", f"pad widths must be >= 0, got {pad_width}", x)
    if not pw.any():
        return x
    check_shape(tuple(int(d) + int(lo) + int(hi) for d, (lo, hi) in zip(x.shape, pw)), "pad", x.dtype.itemsize)
    value = host_array(constant_values, "pad")
    if value.ndim:
        raise _fail("pad", "only a scalar constant_values is supported", x)
    with _np.errstate(all="ignore"):
        pv = value.astype(x.dtype)
    return lax.pad(x, pv, tuple(int(v) for v in pw[:, 0]), tuple(int(v) for v in pw[:, 1]), (0,) * x.ndim)


def _pad_widths(pad_width: Any, x: Any) -> _np.ndarray:
    """int64[rank, 2] (before, after) from NumPy's forms: n, (n,), (b, a), ((b, a), ...)."""
    raw = _np.asarray(pad_width, dtype=object)
    if raw.size and not builtins.all(hasattr(v, "__index__") and not isinstance(v, bool) for v in raw.reshape(-1)):
        raise ArgumentError(f"pad: pad widths must be integers, got {pad_width!r}", where=user_location())
    try:
        pw = _np.asarray(raw.astype(_np.int64).reshape(-1, 2) if raw.ndim and raw.size != 1 else
                         _np.full((1, 2), int(raw.reshape(-1)[0]) if raw.size else 0, dtype=_np.int64))
        return _np.broadcast_to(pw, (x.ndim, 2)) if x.ndim else _np.zeros((0, 2), _np.int64)
    except (ValueError, OverflowError):
        raise _fail("pad", f"pad_width {pad_width!r} does not fit an array of rank {x.ndim}", x) from None


def atleast_1d(x: ArrayLike) -> Any:
    x = asarray(x) if not _is_array(x) else x
    return reshape(x, (1,)) if x.ndim == 0 else x


def atleast_2d(x: ArrayLike) -> Any:
    x = atleast_1d(x)
    return reshape(x, (1,) + x.shape) if x.ndim == 1 else x


def tile(x: ArrayLike, reps: Any) -> Any:
    x = asarray(x) if not _is_array(x) else x
    reps = tuple(size_arg(r, "tile", "reps") for r in as_sequence(reps))
    nd = builtins.max(len(reps), x.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    # (r0, d0, r1, d1, ...) then merge each pair
    inter = []
    for r, d in zip(reps, x.shape):
        inter += [r, d]
    b = broadcast_to(reshape(x, [v for d in x.shape for v in (1, d)]), inter)
    return reshape(b, [r * d for r, d in zip(reps, x.shape)])


def _static_repeats(repeats: Any) -> Any:
    """repeats as NumPy data when its values are known; None when traced."""
    if isinstance(repeats, Tracer):
        return constant_value(repeats)
    if isinstance(repeats, Array):
        return _np.asarray(repeats)
    return repeats


def repeat(x: ArrayLike, repeats: Any, /, *, axis: int | None = None) -> Any:
    """Each element repeated ``repeats`` times (an int, or one count per element along
    ``axis``, whose values must be known: they decide the result's shape)."""
    rv = _static_repeats(repeats)
    if rv is None:
        raise _fail("repeat", "repeats must have known values (the result's shape depends on them); a traced "
                    "array cannot be used inside jit", (asarray(x) if not _is_array(x) else x), repeats)
    if _np.ndim(rv) == 0:
        return _repeat_scalar(x, rv.item() if isinstance(rv, _np.ndarray) else rv, axis)  # size_arg refuses 1.5
    x = (asarray(x) if not _is_array(x) else x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    ax = _norm_axis(axis, x.ndim, "repeat", x)
    counts = _np.asarray(rv)
    if counts.dtype.kind not in "iu" or counts.ndim != 1 or counts.shape[0] not in (1, x.shape[ax]):
        raise _fail("repeat", f"repeats must be an integer scalar or 1-D array of length {x.shape[ax]}, got "
                    f"{counts.dtype}{list(counts.shape)}", x)
    if (counts < 0).any():
        raise _fail("repeat", "repeats must be >= 0", x)
    if counts.shape[0] == 1:
        return _repeat_scalar(x, int(counts[0]), ax)
    positions = _np.repeat(_np.arange(x.shape[ax]), counts)  # static: a gather at known positions
    if positions.size == 0:
        return getitem(x, (builtins.slice(None),) * ax + (builtins.slice(0, 0),))
    return _take_exact(x, positions, ax)


def _lowest(dt: _np.dtype) -> _np.ndarray:
    """The value no element is below: -inf, the smallest integer, False."""
    if _is_float(dt):
        return _np.asarray(-_np.inf, dt)
    return _np.asarray(False) if dt.kind == "b" else _np.asarray(_np.iinfo(dt).min, dt)


def _take_exact(x: Any, positions: _np.ndarray, ax: int) -> Any:
    """x at static positions along ax by a one-hot max (not a sum, whose 0 + -0.0 would
    lose the sign of a zero): each output element is the max of its one element and the
    lowest value of the dtype."""
    moved = moveaxis(x, ax, 0) if ax else x
    n, rest, k = moved.shape[0], moved.shape[1:], positions.shape[0]
    full = (k, n) + rest
    hit = lax.compare(lax.broadcast_in_dim(asarray(positions.astype(_np.int64)), (k, n), (0,)),
                      lax.iota(_np.int64, (k, n), 1), "eq")
    picked = lax.select(lax.broadcast_in_dim(hit, full, (0, 1)),
                        lax.broadcast_in_dim(moved, full, tuple(range(1, len(full)))),
                        broadcast_to(_lowest(x.dtype), full))
    out = lax.reduce(picked, "or" if x.dtype == _np.bool_ else "max", (1,))
    return moveaxis(out, 0, ax) if ax else out


def _repeat_scalar(x: ArrayLike, repeats: int, axis: int | None = None) -> Any:
    x = asarray(x) if not _is_array(x) else x
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    ax = _norm_axis(axis, x.ndim, "repeat", x)
    r = size_arg(repeats, "repeat", "repeats")
    shape = x.shape[:ax + 1] + (r,) + x.shape[ax + 1:]
    b = broadcast_to(expand_dims(x, ax + 1), shape)
    return reshape(b, x.shape[:ax] + (x.shape[ax] * r,) + x.shape[ax + 1:])
