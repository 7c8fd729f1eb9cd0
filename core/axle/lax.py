"""Thin wrappers over the primitives (one function per op), traced or eager.

No broadcasting or promotion happens here: operands must already agree, as in the IR.
axle.numpy builds NumPy semantics on top of these."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .errors import ShapeError
from .frontend.bind import bind
from .frontend.control_flow import cond, fori_loop, map, scan, switch, while_loop  # noqa: F401, A004 - control flow
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
