"""Thin wrappers over the primitives (one function per op), traced or eager.

No broadcasting or promotion happens here: operands must already agree, as in the IR.
axle.numpy builds NumPy semantics on top of these."""
from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .errors import ArgumentError, ShapeError
from .frontend.bind import bind
from .frontend.collectives import (  # noqa: F401 - collectives over the axes of pmap/shard_map
    all_gather,
    all_to_all,
    axis_index,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
)
from .frontend.control_flow import cond, fori_loop, map, scan, switch, while_loop  # noqa: F401, A004 - control flow
from .frontend.source import user_location
from .ir.builder import sorted_dims
from .ir.conv import conv_dimension_numbers
from .ir.dtypes import DType, is_float_numpy
from .ir.dtypes import dtype as to_dtype
from .ir.ops import Op

Value = Any


def _un(op: Op) -> Callable[[Value], Value]:
    def f(x: Value) -> Value:
        return bind(op, x)

    f.__name__ = op.name.lower()
    f.primitive = op  # type: ignore[attr-defined]  # axle.numpy's eager hot path launches it directly
    return f


def _bin(op: Op) -> Callable[[Value, Value], Value]:
    def f(x: Value, y: Value) -> Value:
        return bind(op, x, y)

    f.__name__ = op.name.lower()
    f.primitive = op  # type: ignore[attr-defined]  # axle.numpy's eager hot path launches it directly
    return f


neg, abs, exp, log, sqrt, rsqrt, tanh, logistic, sin, cos, floor, ceil, sign, not_ = (
    _un(o) for o in (Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.TANH, Op.LOGISTIC, Op.SIN,
                     Op.COS, Op.FLOOR, Op.CEIL, Op.SIGN, Op.NOT))
add, sub, mul, div, rem, pow, max, min, and_, or_ = (
    _bin(o) for o in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.REM, Op.POW, Op.MAX, Op.MIN, Op.AND, Op.OR))


def compare(x: Value, y: Value, direction: str) -> Value:
    return bind(Op.COMPARE, x, y, direction=direction)


def select(pred: Value, on_true: Value, on_false: Value) -> Value:
    return bind(Op.SELECT, pred, on_true, on_false)


def convert(x: Value, dtype: Any) -> Value:
    return bind(Op.CONVERT, x, dtype=to_dtype(dtype))


def reduce(x: Value, kind: str, axes: Sequence[int]) -> Value:
    """Reduces the set of dims ``axes``, given in any order (the IR keeps them sorted)."""
    return bind(Op.REDUCE, x, kind=kind, axes=sorted_dims(axes))


def dot_general(lhs: Value, rhs: Value, lhs_contracting: Sequence[int], rhs_contracting: Sequence[int],
                lhs_batch: Sequence[int] = (), rhs_batch: Sequence[int] = (),
                preferred_element_type: Any = None) -> Value:
    """``preferred_element_type``: accumulate and return in this wider dtype (int8 operands
    with int32, bfloat16 with float32), as jax's."""
    extra = {} if preferred_element_type is None else {"preferred_element_type": preferred_element_type}
    return bind(Op.DOT_GENERAL, lhs, rhs, lhs_contracting=tuple(lhs_contracting),
                rhs_contracting=tuple(rhs_contracting), lhs_batch=tuple(lhs_batch), rhs_batch=tuple(rhs_batch),
                **extra)


def broadcast_in_dim(x: Value, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> Value:
    return bind(Op.BROADCAST_IN_DIM, x, shape=tuple(shape), broadcast_dimensions=tuple(broadcast_dimensions))


def reshape(x: Value, shape: Sequence[int]) -> Value:
    return bind(Op.RESHAPE, x, shape=tuple(shape))


def transpose(x: Value, permutation: Sequence[int]) -> Value:
    return bind(Op.TRANSPOSE, x, permutation=tuple(permutation))


def slice(x: Value, start: Sequence[int], limit: Sequence[int], stride: Sequence[int] | None = None) -> Value:
    stride = tuple(stride) if stride is not None else (1,) * len(start)
    return bind(Op.SLICE, x, start=tuple(start), limit=tuple(limit), stride=stride)


def pad(x: Value, padding_value: Value, low: Sequence[int], high: Sequence[int], interior: Sequence[int]) -> Value:
    return bind(Op.PAD, x, padding_value, low=tuple(low), high=tuple(high), interior=tuple(interior))


def concatenate(xs: Sequence[Value], dimension: int) -> Value:
    return bind(Op.CONCATENATE, *xs, dimension=dimension)


def reverse(x: Value, dimensions: Sequence[int]) -> Value:
    return bind(Op.REVERSE, x, dimensions=tuple(dimensions))


def iota(dtype: Any, shape: Sequence[int], dimension: int = 0) -> Value:
    return bind(Op.IOTA, shape=tuple(shape), dtype=to_dtype(dtype), dimension=dimension)


def rng_bit_generator(key: Value, shape: Sequence[int], dtype: Any = DType.INT32) -> Value:
    return bind(Op.RNG_BIT_GENERATOR, key, shape=tuple(shape), dtype=to_dtype(dtype))


def custom_call(target: str, operands: Sequence[Value], shape: Sequence[int], dtype: Any, config: str = "") -> Value:
    return bind(Op.CUSTOM_CALL, *operands, target=target, shape=tuple(shape), dtype=to_dtype(dtype), config=config)


# indexing: gather, scatter and the dynamic slices, with jax's names and argument conventions
# (the index vector is the last dim of the indices; modes as jax's GatherScatterMode)


class GatherDimensionNumbers(NamedTuple):
    """As jax's (no batching dims): which result dims are window (offset) dims, which
    operand dims the windows drop (size 1), and which operand dim each index entry starts."""

    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]


class ScatterDimensionNumbers(NamedTuple):
    """As jax's (no batching dims): the update dims that are window dims, the operand
    dims the windows leave out (size 1), and which operand dim each index entry starts."""

    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]


#: jax's modes: "clip" clamps windows into bounds (the IR's gather), "fill" gives
#: ``fill_value`` for an out-of-bounds gather window and drops an out-of-bounds scatter
#: window (the IR's scatter); None means "fill"; "promise_in_bounds" is "clip" for gathers
#: and "fill" for scatters (the cheapest correct choice for in-bounds indices)
GATHER_MODES = ("clip", "fill", "drop", "promise_in_bounds")


def _mode(mode: Any, what: str) -> str:
    name = getattr(mode, "name", mode)
    name = "fill" if name is None else str(name).lower()
    name = {"fill_or_drop": "fill", "drop": "fill"}.get(name, name)
    if name not in GATHER_MODES:
        raise ArgumentError(f"{what}: mode must be one of clip, fill, drop, promise_in_bounds; got {mode!r}",
                            where=user_location())
    return name


def _scalar_index(i: Value, what: str) -> Value:
    if isinstance(i, (bool, np.bool_)) or not hasattr(i, "dtype") and not isinstance(i, (int, np.integer)):
        raise ArgumentError(f"{what}: start indices must be integer scalars, got {i!r}", where=user_location())
    return np.asarray(i, np.int64) if isinstance(i, (int, np.integer)) else i


def _index_dtype_of(x: Value) -> np.dtype:
    return np.dtype(getattr(x, "dtype", np.int64))


def _wrap_negative(i: Value, n: int) -> Value:
    """jax's dynamic-slice convention: a negative start counts from the end (once)."""
    dt = _index_dtype_of(i)
    if dt.kind == "u":
        return i
    if isinstance(i, (np.ndarray, np.generic)):  # known now: wrapped here, so it stays data (a cluster's parameter)
        k = np.asarray(i)
        return np.where(k < 0, k + np.asarray(n, dt), k).astype(dt)
    zero, size = np.asarray(0, dt), np.asarray(n, dt)
    return select(compare(i, zero, "lt"), add(i, size), i)


def gather(operand: Value, start_indices: Value, dimension_numbers: GatherDimensionNumbers,
           slice_sizes: Sequence[int], *, unique_indices: bool = False, indices_are_sorted: bool = False,
           mode: Any = None, fill_value: Any = None) -> Value:
    """jax.lax.gather: windows of ``slice_sizes`` at the index vectors (the last dim of
    ``start_indices``). ``mode="clip"`` clamps each window into bounds; ``"fill"`` (the
    default, as in jax) gives ``fill_value`` (NaN, the most negative int, True) for a
    window that is not wholly in bounds."""
    dn = dimension_numbers
    idx = start_indices
    ivd = len(getattr(idx, "shape", np.shape(idx))) - 1
    out = bind(Op.GATHER, operand, idx, offset_dims=tuple(dn.offset_dims),
               collapsed_slice_dims=tuple(dn.collapsed_slice_dims), start_index_map=tuple(dn.start_index_map),
               index_vector_dim=ivd, slice_sizes=tuple(slice_sizes))
    if _mode(mode, "gather") != "fill":
        return out
    ok = _windows_in_bounds(operand, idx, dn.start_index_map, slice_sizes)
    batch_dims = [d for d in range(len(out.shape)) if d not in dn.offset_dims]
    dt = np.dtype(out.dtype.np if hasattr(out.dtype, "np") else out.dtype)
    fill = fill_value_of(dt) if fill_value is None else np.asarray(fill_value).astype(dt)
    return select(broadcast_in_dim(ok, tuple(out.shape), tuple(batch_dims)), out,
                  broadcast_in_dim(fill, tuple(out.shape), ()))


def fill_value_of(dt: np.dtype) -> np.ndarray:
    """jax's fill for out-of-bounds gathers: NaN, the most negative integer, True."""
    if is_float_numpy(dt):  # bfloat16 too (NumPy kind 'V')
        return np.asarray(np.nan, dt)
    if dt.kind == "b":
        return np.asarray(True)
    return np.asarray(np.iinfo(dt).min, dt)


def _windows_in_bounds(operand: Value, idx: Value, index_map: Sequence[int], sizes: Sequence[int]) -> Value:
    """bool[batch...]: each index vector's window lies wholly inside ``operand``."""
    shape = tuple(idx.shape)
    batch = shape[:-1]
    dt = _index_dtype_of(idx)
    ok = None
    for k, d in enumerate(index_map):
        s = reshape(slice(idx, (0,) * len(batch) + (k,), batch + (k + 1,)), batch)
        hi = np.asarray(operand.shape[d] - sizes[d], dt)
        good = and_(compare(s, broadcast_in_dim(np.asarray(0, dt), batch, ()), "ge"),
                    compare(s, broadcast_in_dim(hi, batch, ()), "le"))
        ok = good if ok is None else and_(ok, good)
    return ok if ok is not None else broadcast_in_dim(np.asarray(True), batch, ())


def _scatter(kind: str) -> Callable[..., Value]:
    def f(operand: Value, scatter_indices: Value, updates: Value, dimension_numbers: ScatterDimensionNumbers, *,
          indices_are_sorted: bool = False, unique_indices: bool = False, mode: Any = None) -> Value:
        dn = dimension_numbers
        idx = scatter_indices
        if _mode(mode, f"scatter-{kind}") == "clip":
            idx = _clip_indices(operand, idx, updates, dn)
        return bind(Op.SCATTER, operand, idx, updates, update_window_dims=tuple(dn.update_window_dims),
                    inserted_window_dims=tuple(dn.inserted_window_dims),
                    scatter_dims_to_operand_dims=tuple(dn.scatter_dims_to_operand_dims),
                    index_vector_dim=len(idx.shape) - 1, kind=kind)

    f.__name__ = "scatter" if kind == "replace" else f"scatter_{kind}"
    f.__doc__ = (f"jax.lax.{f.__name__}: ``updates`` windows combined ({kind}) into ``operand`` at the index vectors "
                 "(the last dim of the indices), in index order; an out-of-bounds window is dropped "
                 "(``mode='clip'`` clamps it into bounds instead).")
    return f


def _clip_indices(operand: Value, idx: Value, updates: Value, dn: ScatterDimensionNumbers) -> Value:
    """The index vectors clamped so that each window fits (scatter's ``mode="clip"``)."""
    kept = [d for d in range(len(operand.shape)) if d not in dn.inserted_window_dims]
    window = {od: updates.shape[wd] for wd, od in zip(dn.update_window_dims, kept)}
    dt = _index_dtype_of(idx)
    hi = np.asarray([operand.shape[d] - window.get(d, 1) for d in dn.scatter_dims_to_operand_dims], dt)
    shape = tuple(idx.shape)
    last = (len(shape) - 1,)
    lo = broadcast_in_dim(np.zeros(shape[-1:], dt), shape, last)
    return min(max(idx, lo), broadcast_in_dim(hi, shape, last))


scatter = _scatter("replace")
scatter_add = _scatter("add")
scatter_mul = _scatter("mul")
scatter_min = _scatter("min")
scatter_max = _scatter("max")


def dynamic_slice(operand: Value, start_indices: Sequence[Value], slice_sizes: Sequence[int]) -> Value:
    """jax.lax.dynamic_slice: ``operand[start:start + size]`` per dim, the starts traced
    integer scalars; a negative start counts from the end, then each start is clamped so
    the slice fits (as jax)."""
    starts = [_wrap_negative(_scalar_index(i, "dynamic_slice"), n) for i, n in zip(start_indices, operand.shape)]
    if len(starts) != len(start_indices):
        starts += list(start_indices[len(starts):])  # the op refuses the count, naming the shapes
    return bind(Op.DYNAMIC_SLICE, operand, *starts, slice_sizes=tuple(slice_sizes))


def dynamic_update_slice(operand: Value, update: Value, start_indices: Sequence[Value]) -> Value:
    """jax.lax.dynamic_update_slice: ``operand`` with ``update`` written at the starts
    (negative ones count from the end, then clamped so the update fits, as jax)."""
    starts = [_wrap_negative(_scalar_index(i, "dynamic_update_slice"), n)
              for i, n in zip(start_indices, operand.shape)]
    if len(starts) != len(start_indices):
        starts += list(start_indices[len(starts):])
    return bind(Op.DYNAMIC_UPDATE_SLICE, operand, update, *starts)


def _starts_in_dim(operand: Value, index: Value, axis: int) -> list[Value]:
    zero = np.asarray(0, _index_dtype_of(_scalar_index(index, "dynamic_slice_in_dim")))
    return [index if d == axis else zero for d in range(len(operand.shape))]


def dynamic_slice_in_dim(operand: Value, start_index: Value, slice_size: int, axis: int = 0) -> Value:
    """jax.lax.dynamic_slice_in_dim: ``slice_size`` elements from ``start_index`` along ``axis``."""
    axis = _axis(axis, operand)
    sizes = list(operand.shape)
    sizes[axis] = slice_size
    return dynamic_slice(operand, _starts_in_dim(operand, start_index, axis), sizes)


def dynamic_index_in_dim(operand: Value, index: Value, axis: int = 0, keepdims: bool = True) -> Value:
    """jax.lax.dynamic_index_in_dim: the element ``index`` along ``axis`` (the dim kept
    with size 1 unless ``keepdims=False``)."""
    axis = _axis(axis, operand)
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return out if keepdims else reshape(out, tuple(s for d, s in enumerate(out.shape) if d != axis))


def dynamic_update_slice_in_dim(operand: Value, update: Value, start_index: Value, axis: int) -> Value:
    """jax.lax.dynamic_update_slice_in_dim: ``update`` written from ``start_index`` along ``axis``."""
    axis = _axis(axis, operand)
    return dynamic_update_slice(operand, update, _starts_in_dim(operand, start_index, axis))


def _axis(axis: int, operand: Value) -> int:
    rank = len(operand.shape)
    if not -rank <= axis < rank:
        raise ArgumentError(f"axis {axis} is out of range for an operand of rank {rank} ({operand.shape})",
                            where=user_location())
    return axis % rank


# elementwise completeness (float) and bit operations
atan2, next_after, xor, shift_left, shift_right_logical, shift_right_arithmetic = (
    _bin(o) for o in (Op.ATAN2, Op.NEXT_AFTER, Op.XOR, Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL,
                      Op.SHIFT_RIGHT_ARITHMETIC))
tan, expm1, log1p, cbrt, erf, round_nearest_even, is_finite, popcnt, clz = (
    _un(o) for o in (Op.TAN, Op.EXPM1, Op.LOG1P, Op.CBRT, Op.ERF, Op.ROUND_NEAREST_EVEN, Op.IS_FINITE, Op.POPCNT,
                     Op.CLZ))


def bitcast_convert(x: Value, dtype: Any) -> Value:
    """Reinterprets the bits of each element as ``dtype`` of the same bit width."""
    return bind(Op.BITCAST_CONVERT, x, dtype=to_dtype(dtype))
# sorting
def sort_one(operands: Sequence[Value], dimension: int, num_keys: int = 1, descending: bool = False,
             index: int = 0) -> Value:
    """One ``sort`` node: operand ``index`` reordered by the stable lexicographic sort of
    operands [0, num_keys) along ``dimension`` (non-negative)."""
    return bind(Op.SORT, *operands, dimension=dimension, num_keys=num_keys, descending=int(bool(descending)),
                index=index)


def sort(operand: Value | Sequence[Value], dimension: int = -1, is_stable: bool = True, num_keys: int = 1,
         descending: bool = False) -> Any:
    """Sorts along ``dimension`` as jax.lax.sort (always stable; ``is_stable`` is accepted
    for jax's signature): one operand gives its sorted value, a sequence a tuple of each
    operand reordered by the lexicographic order of the first ``num_keys``. Each result is
    one ``sort`` node of the IR (the op has one result; see docs/ir.md)."""
    single = not isinstance(operand, (list, tuple))
    ops: list[Value] = [operand] if single else list(operand)
    if not ops:
        return ()
    rank = len(ops[0].shape)
    dim = dimension + rank if dimension < 0 and rank else dimension
    outs = tuple(sort_one(ops, dim, num_keys, descending, i) for i in range(len(ops)))
    return outs[0] if single else outs


def top_k(operand: Value, k: int) -> tuple[Value, Value]:
    """The ``k`` largest entries of the last axis and their int32 indices (as jax.lax.top_k:
    ties by lower index first, NaN counted largest)."""
    shape = tuple(operand.shape)
    if not shape:
        raise ShapeError(f"top_k: the operand must have at least one dimension, got shape {shape}")
    n, last = shape[-1], len(shape) - 1
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= n:
        raise ShapeError(f"top_k: k={k!r} must be an int in [0, {n}] for an operand of shape {shape}")
    idx = iota(DType.INT32, shape, last)
    vals = sort_one([operand, idx], last, 1, True, 0)
    ids = sort_one([operand, idx], last, 1, True, 1)
    start, limit = (0,) * len(shape), shape[:-1] + (k,)
    return slice(vals, start, limit), slice(ids, start, limit)


# ------------------------------------------------------ windowed: convolution, reduce_window

Padding = str | Sequence[tuple[int, int]]


def _spatial_letters(n: int) -> str:
    return "DHW"[3 - n:] if n <= 3 else "ABEFGJKLMPQRSTUVXYZ"[:n]


def _conv_layouts(rank: int, dimension_numbers: Sequence[str] | None) -> tuple[str, str, str]:
    if dimension_numbers is None:
        sp = _spatial_letters(rank - 2)
        return "NC" + sp, "OI" + sp, "NC" + sp
    lhs, rhs, out = dimension_numbers
    return str(lhs), str(rhs), str(out)


def _dilate(n: int, d: int) -> int:
    return (n - 1) * d + 1 if n else 0


def padding_pairs(padding: Padding, in_sizes: Sequence[int], window: Sequence[int], strides: Sequence[int],
                  what: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(low, high) padding per spatial dim: "VALID" (none), "SAME" (output size
    ceil(in / stride), the odd cell at the end) or "SAME_LOWER" (at the start), or explicit
    (low, high) pairs. ``window`` is the dilated window size."""
    if isinstance(padding, str):
        kind = padding.upper()
        if kind == "VALID":
            return (0,) * len(in_sizes), (0,) * len(in_sizes)
        if kind not in ("SAME", "SAME_LOWER"):
            raise ArgumentError(f"{what}: padding {padding!r} must be 'VALID', 'SAME', 'SAME_LOWER' or "
                                f"(low, high) pairs")
        low, high = [], []
        for n, k, s in zip(in_sizes, window, strides):
            total = builtins.max((-(-n // s) - 1) * s + k - n, 0)
            small, big = total // 2, total - total // 2
            low.append(small if kind == "SAME" else big)
            high.append(big if kind == "SAME" else small)
        return tuple(low), tuple(high)
    pairs = [tuple(p) for p in padding]
    if len(pairs) != len(in_sizes) or any(len(p) != 2 for p in pairs):
        raise ArgumentError(f"{what}: padding {padding!r} must give one (low, high) pair per spatial dim "
                            f"({len(in_sizes)})")
    return tuple(int(p[0]) for p in pairs), tuple(int(p[1]) for p in pairs)


def _ints(v: int | Sequence[int] | None, n: int, default: int, what: str, name: str) -> tuple[int, ...]:
    if v is None:
        return (default,) * n
    out = (v,) * n if isinstance(v, int) else tuple(v)
    if len(out) != n:
        raise ArgumentError(f"{what}: {name} {v!r} must have {n} entries (one per spatial dim)")
    return out


def conv_general_dilated(lhs: Value, rhs: Value, window_strides: Sequence[int] | None = None,
                         padding: Padding = "VALID", lhs_dilation: Sequence[int] | None = None,
                         rhs_dilation: Sequence[int] | None = None,
                         dimension_numbers: Sequence[str] | None = None, feature_group_count: int = 1,
                         batch_group_count: int = 1) -> Value:
    """StableHLO's convolution with jax's arguments: ``dimension_numbers`` as three layout
    strings (default ``("NCHW", "OIHW", "NCHW")`` for 2-D), ``padding`` as a string or
    (low, high) pairs."""
    ls, rs, os_ = _conv_layouts(len(lhs.shape), dimension_numbers)
    dims = conv_dimension_numbers(ls, rs, os_)
    n = len(dims["input_spatial_dimensions"])
    strides = _ints(window_strides, n, 1, "conv_general_dilated", "window_strides")
    ld = _ints(lhs_dilation, n, 1, "conv_general_dilated", "lhs_dilation")
    rd = _ints(rhs_dilation, n, 1, "conv_general_dilated", "rhs_dilation")
    in_sizes = [lhs.shape[d] for d in dims["input_spatial_dimensions"]]
    window = [_dilate(rhs.shape[d], r) for d, r in zip(dims["kernel_spatial_dimensions"], rd)]
    low, high = padding_pairs(padding, in_sizes, window, strides, "conv_general_dilated")
    return bind(Op.CONVOLUTION, lhs, rhs, **dims, window_strides=strides, padding_low=low, padding_high=high,
                lhs_dilation=ld, rhs_dilation=rd, feature_group_count=feature_group_count,
                batch_group_count=batch_group_count)


def _transpose_padding(k: int, s: int, padding: str) -> tuple[int, int]:
    """The padding of the dilated input that makes a strided convolution's transpose give
    ``in * stride`` ("SAME") or ``in * stride + max(k - s, 0)`` ("VALID") outputs."""
    kind = padding.upper()
    if kind == "SAME":
        total = k + s - 2
        low = k - 1 if s > k - 1 else -(-total // 2)
    elif kind == "VALID":
        total = k + s - 2 + builtins.max(k - s, 0)
        low = k - 1
    else:
        raise ArgumentError(f"conv_transpose: padding {padding!r} must be 'SAME', 'VALID' or (low, high) pairs")
    return low, total - low


def conv_transpose(lhs: Value, rhs: Value, strides: Sequence[int], padding: Padding,
                   rhs_dilation: Sequence[int] | None = None, dimension_numbers: Sequence[str] | None = None,
                   transpose_kernel: bool = False) -> Value:
    """The transposed ("fractionally strided") convolution, as jax.lax.conv_transpose: the
    input is dilated by ``strides``; with ``transpose_kernel`` the kernel's spatial dims are
    flipped and its I/O dims swapped, which makes it the gradient of ``conv_general_dilated``."""
    ls, rs, os_ = _conv_layouts(len(lhs.shape), dimension_numbers)
    dims = conv_dimension_numbers(ls, rs, os_)
    n = len(dims["input_spatial_dimensions"])
    st = _ints(tuple(strides), n, 1, "conv_transpose", "strides")
    rd = _ints(rhs_dilation, n, 1, "conv_transpose", "rhs_dilation")
    window = [_dilate(rhs.shape[d], r) for d, r in zip(dims["kernel_spatial_dimensions"], rd)]
    if isinstance(padding, str):
        pairs = [_transpose_padding(k, s, padding) for k, s in zip(window, st)]
    else:
        pairs = [tuple(p) for p in padding]
    if transpose_kernel:
        rhs = reverse(rhs, dims["kernel_spatial_dimensions"])
        rs = rs.translate(str.maketrans("IO", "OI"))
    return conv_general_dilated(lhs, rhs, None, pairs, lhs_dilation=st, rhs_dilation=rd,  # type: ignore[arg-type]  # pairs of ints: padding_pairs checks them
                                dimension_numbers=(ls, rs, os_))


def reduce_window(x: Value, kind: str, window_dimensions: Sequence[int], window_strides: Sequence[int] | None = None,
                  padding: Padding = "VALID", base_dilation: Sequence[int] | None = None,
                  window_dilation: Sequence[int] | None = None) -> Value:
    """Reduces each window of ``x`` with ``kind`` (sum, prod, max, min, and, or); padding
    reads as the kind's identity."""
    n = len(x.shape)
    win = _ints(tuple(window_dimensions), n, 1, "reduce_window", "window_dimensions")
    st = _ints(window_strides, n, 1, "reduce_window", "window_strides")
    bd = _ints(base_dilation, n, 1, "reduce_window", "base_dilation")
    wd = _ints(window_dilation, n, 1, "reduce_window", "window_dilation")
    in_sizes = [_dilate(s, d) for s, d in zip(x.shape, bd)]
    low, high = padding_pairs(padding, in_sizes, [_dilate(k, d) for k, d in zip(win, wd)], st, "reduce_window")
    return bind(Op.REDUCE_WINDOW, x, kind=kind, window_dimensions=win, window_strides=st, base_dilations=bd,
                window_dilations=wd, padding_low=low, padding_high=high)


def convolution(lhs: Value, rhs: Value, **attrs: Any) -> Value:
    """The convolution primitive with its IR attributes (dimension numbers as dim indices);
    ``conv_general_dilated`` is the friendlier spelling."""
    return bind(Op.CONVOLUTION, lhs, rhs, **attrs)
