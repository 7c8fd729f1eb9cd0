"""Thin wrappers over the primitives (one function per op), traced or eager.

No broadcasting or promotion happens here: operands must already agree, as in the IR.
axle.numpy builds NumPy semantics on top of these."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .errors import ArgumentError, ShapeError
from .frontend.bind import bind
from .frontend.control_flow import cond, fori_loop, map, scan, switch, while_loop  # noqa: F401, A004 - control flow
from .frontend.source import user_location
from .ir.builder import sorted_dims
from .ir.dtypes import DType
from .ir.dtypes import dtype as to_dtype
from .ir.ops import Op

Value = Any


def _un(op: Op) -> Callable[[Value], Value]:
    def f(x: Value) -> Value:
        return bind(op, x)

    f.__name__ = op.name.lower()
    return f


def _bin(op: Op) -> Callable[[Value, Value], Value]:
    def f(x: Value, y: Value) -> Value:
        return bind(op, x, y)

    f.__name__ = op.name.lower()
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
                lhs_batch: Sequence[int] = (), rhs_batch: Sequence[int] = ()) -> Value:
    return bind(Op.DOT_GENERAL, lhs, rhs, lhs_contracting=tuple(lhs_contracting),
                rhs_contracting=tuple(rhs_contracting), lhs_batch=tuple(lhs_batch), rhs_batch=tuple(rhs_batch))


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
    if dt.kind == "f":
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
