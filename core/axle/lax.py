"""Thin wrappers over the primitives (one function per op), traced or eager.

No broadcasting or promotion happens here: operands must already agree, as in the IR.
axle.numpy builds NumPy semantics on top of these."""
from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

from .errors import ArgumentError
from .frontend.bind import bind
from .ir.builder import sorted_dims
from .ir.conv import conv_dimension_numbers
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
