"""Shape rules and NumPy references of the windowed primitives: ``convolution`` and
``reduce-window``, with StableHLO's semantics.

Both slide a window over the spatial dims of an operand that is first dilated (``lhs`` /
``base`` dilation: d-1 holes between elements) and padded (``padding_low`` /
``padding_high``, negative values crop). Per spatial dim of size n, with window size k,
window dilation r and stride s::

    padded = (n - 1) * d + 1 + low + high      (n = 0: low + high)
    window = (k - 1) * r + 1                   (k = 0: 0)
    out    = 0 if padded <= 0 or window > padded else (padded - window) // s + 1

``convolution`` names its layouts with dimension numbers (so NCHW and NHWC are layouts, not
transposes): which lhs dim is the batch, which the feature, which the spatial dims; the same
for the kernel (input feature, output feature, spatial) and the result.
``feature_group_count`` G splits the lhs features and the kernel's output features into G
groups convolved pairwise (depthwise when G equals the features); ``batch_group_count`` B
splits the lhs batch and the kernel's output features into B groups (the weight gradient of
a grouped convolution). At most one of them is above 1. Holes and padding read as zero.

``reduce-window`` reduces each window with one of the reduce kinds; holes and padding read as
the kind's identity (so a max-pool's padding never wins), float16 sums accumulate in float32.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DTypeError, ShapeError
from .dtypes import DType, dtype
from .opcodes import Op
from .reductions import REDUCE_KINDS
from .types import Shape, TensorType

#: reduce-window's kinds: those of ``reduce`` (its identity pads and fills holes)
WINDOW_KINDS = tuple(REDUCE_KINDS)


def _err(op: Op, ts: Sequence[TensorType], why: str) -> ShapeError:
    return ShapeError(f"{op.value}: {why} (operands: {', '.join(str(t) for t in ts)})")


def window_out_size(n: int, k: int, stride: int, low: int, high: int, base_dilation: int,
                    window_dilation: int) -> int:
    """The number of window positions along one dim (the module docstring's formula)."""
    padded = ((n - 1) * base_dilation + 1 if n else 0) + low + high
    window = (k - 1) * window_dilation + 1 if k else 0
    if padded <= 0 or window > padded:
        return 0
    return (padded - window) // stride + 1


def _check_window_attrs(op: Op, ts: Sequence[TensorType], n: int, attrs: dict[str, Any],
                        names: Sequence[str]) -> None:
    for name in names:
        v = attrs[name]
        if len(v) != n:
            raise _err(op, ts, f"{name} {tuple(v)} must have one entry per spatial dim ({n})")
        if name.endswith(("strides", "dilation", "dilations")) and any(x < 1 for x in v):
            raise _err(op, ts, f"{name} {tuple(v)} must be >= 1")


# ----------------------------------------------------------------------- convolution

CONV_DIM_ATTRS = ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
                  "kernel_input_feature_dimension", "kernel_output_feature_dimension",
                  "kernel_spatial_dimensions", "output_batch_dimension", "output_feature_dimension",
                  "output_spatial_dimensions")
CONV_WINDOW_ATTRS = ("window_strides", "padding_low", "padding_high", "lhs_dilation", "rhs_dilation")


def _layout(op: Op, ts: Sequence[TensorType], rank: int, first: int, second: int, spatial: Sequence[int],
            what: str) -> list[int]:
    dims = [first, second, *spatial]
    if len(dims) != rank or sorted(dims) != list(range(rank)):
        raise _err(op, ts, f"{what} dimension numbers {tuple(dims)} must be a permutation of 0..{rank - 1}")
    return dims


def conv_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    lhs, rhs = ts
    a = attrs
    ns = len(a["input_spatial_dimensions"])
    lhs_dims = _layout(op, ts, lhs.rank, a["input_batch_dimension"], a["input_feature_dimension"],
                       a["input_spatial_dimensions"], "input")
    rhs_dims = _layout(op, ts, rhs.rank, a["kernel_output_feature_dimension"], a["kernel_input_feature_dimension"],
                       a["kernel_spatial_dimensions"], "kernel")
    out_dims = _layout(op, ts, lhs.rank, a["output_batch_dimension"], a["output_feature_dimension"],
                       a["output_spatial_dimensions"], "output")
    del lhs_dims, rhs_dims
    _check_window_attrs(op, ts, ns, a, CONV_WINDOW_ATTRS)
    g, b = a["feature_group_count"], a["batch_group_count"]
    if g < 1 or b < 1 or (g > 1 and b > 1):
        raise _err(op, ts, f"feature_group_count={g} and batch_group_count={b} must be >= 1, at most one above 1")
    n, c = lhs.shape[a["input_batch_dimension"]], lhs.shape[a["input_feature_dimension"]]
    ci, co = rhs.shape[a["kernel_input_feature_dimension"]], rhs.shape[a["kernel_output_feature_dimension"]]
    if c % g or c // g != ci:
        raise _err(op, ts, f"input features {c} must equal feature_group_count {g} x kernel input features {ci}")
    if co % g or co % b:
        raise _err(op, ts, f"kernel output features {co} must divide by feature_group_count {g} and "
                           f"batch_group_count {b}")
    if n % b:
        raise _err(op, ts, f"input batch {n} must divide by batch_group_count {b}")
    out = [0] * lhs.rank
    out[out_dims[0]], out[out_dims[1]] = n // b, co
    for i in range(ns):
        out[out_dims[2 + i]] = window_out_size(
            lhs.shape[a["input_spatial_dimensions"][i]], rhs.shape[a["kernel_spatial_dimensions"][i]],
            a["window_strides"][i], a["padding_low"][i], a["padding_high"][i], a["lhs_dilation"][i],
            a["rhs_dilation"][i])
    return tuple(out)


def conv_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    if ts[0].dtype is not ts[1].dtype:
        raise DTypeError(f"{op.value}: operands must have the same dtype (operands: {ts[0]}, {ts[1]})")
    return ts[0].dtype


def _dilate_pad(x: np.ndarray, dilation: Sequence[int], low: Sequence[int], high: Sequence[int],
                fill: object) -> np.ndarray:
    """x [lead..., spatial...] with holes of ``fill`` inserted and padded/cropped at the
    edges along its trailing len(dilation) dims."""
    lead = x.ndim - len(dilation)
    sp = x.shape[lead:]
    size = [((n - 1) * d + 1 if n else 0) for n, d in zip(sp, dilation)]
    grown = [max(lo, 0) + s + max(hi, 0) for s, lo, hi in zip(size, low, high)]
    out = np.full(x.shape[:lead] + tuple(grown), fill, dtype=x.dtype)
    if x.size:
        out[(Ellipsis,) + tuple(slice(max(lo, 0), max(lo, 0) + s, d) for lo, s, d in zip(low, size, dilation))] = x
    crop = tuple(slice(max(-lo, 0), g - max(-hi, 0)) for lo, hi, g in zip(low, high, grown))
    return out[(Ellipsis,) + crop]


def _window_positions(kernel: Sequence[int]) -> Any:
    return itertools.product(*(range(k) for k in kernel))


def _conv_nc(x: np.ndarray, w: np.ndarray, out_sp: Sequence[int], strides: Sequence[int],
             rhs_dilation: Sequence[int]) -> np.ndarray:
    """x [N, C, padded spatial...], w [O, C, kernel...] -> [N, O, out spatial...]."""
    acc = np.zeros((x.shape[0], w.shape[0], *out_sp), dtype=x.dtype)
    if 0 in acc.shape:
        return acc
    for pos in _window_positions(w.shape[2:]):
        view = x[(slice(None), slice(None)) + tuple(
            slice(p * r, p * r + (o - 1) * s + 1, s) for p, r, o, s in zip(pos, rhs_dilation, out_sp, strides))]
        acc += np.einsum("nc...,oc->no...", view, w[(slice(None), slice(None)) + pos])
    return acc


def convolution(lhs: np.ndarray, rhs: np.ndarray, **a: Any) -> np.ndarray:
    out_shape = conv_shape(Op.CONVOLUTION, [TensorType(_dt(lhs), lhs.shape), TensorType(_dt(rhs), rhs.shape)], a)
    work = np.float32 if lhs.dtype == np.float16 else lhs.dtype
    x = np.transpose(lhs, [a["input_batch_dimension"], a["input_feature_dimension"],
                           *a["input_spatial_dimensions"]]).astype(work)
    w = np.transpose(rhs, [a["kernel_output_feature_dimension"], a["kernel_input_feature_dimension"],
                           *a["kernel_spatial_dimensions"]]).astype(work)
    x = _dilate_pad(x, a["lhs_dilation"], a["padding_low"], a["padding_high"], 0)
    out_dims = [a["output_batch_dimension"], a["output_feature_dimension"], *a["output_spatial_dimensions"]]
    out_sp = [out_shape[d] for d in a["output_spatial_dimensions"]]
    g, b = a["feature_group_count"], a["batch_group_count"]
    # groups: lhs features (G) or lhs batch (B) pair with slices of the kernel's output features
    xs = np.split(x, g, axis=1) if g > 1 else np.split(x, b, axis=0)
    ws = np.split(w, max(g, b), axis=0)
    res = np.concatenate([_conv_nc(xi, wi, out_sp, a["window_strides"], a["rhs_dilation"])
                          for xi, wi in zip(xs, ws)], axis=1)
    if res.dtype.kind == "f":
        res = res + res.dtype.type(0)  # a sum of only -0 products is +0, as in dot
    return np.transpose(res, np.argsort(out_dims)).astype(lhs.dtype)


def _dt(x: np.ndarray) -> DType:
    return dtype(x.dtype)


# --------------------------------------------------------------------- reduce-window

REDUCE_WINDOW_ATTRS = ("window_dimensions", "window_strides", "base_dilations", "window_dilations",
                       "padding_low", "padding_high")


def reduce_window_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    (t,) = ts
    _check_window_attrs(op, ts, t.rank, attrs, REDUCE_WINDOW_ATTRS)
    if any(k < 0 for k in attrs["window_dimensions"]):
        raise _err(op, ts, f"window_dimensions {attrs['window_dimensions']} must be >= 0")
    return _window_shape(t.shape, **attrs)


def _window_shape(shape: Shape, *, window_dimensions: Sequence[int], window_strides: Sequence[int],
                  base_dilations: Sequence[int], window_dilations: Sequence[int], padding_low: Sequence[int],
                  padding_high: Sequence[int], **_: Any) -> Shape:
    return tuple(window_out_size(n, k, s, lo, hi, bd, wd) for n, k, s, lo, hi, bd, wd in zip(
        shape, window_dimensions, window_strides, padding_low, padding_high, base_dilations, window_dilations))


def reduce_window_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    dt, kind = ts[0].dtype, attrs["kind"]
    if kind in ("sum", "prod") and dt is DType.BOOL:
        raise DTypeError(f"{op.value}: kind={kind} needs a numeric operand, got {ts[0]}; convert it first")
    if kind in ("and", "or") and dt.is_float:
        raise DTypeError(f"{op.value}: kind={kind} needs a bool or integer operand, got {ts[0]}")
    return dt


def reduce_window(x: np.ndarray, *, kind: str, window_dimensions: tuple[int, ...], window_strides: tuple[int, ...],
                  base_dilations: tuple[int, ...], window_dilations: tuple[int, ...], padding_low: tuple[int, ...],
                  padding_high: tuple[int, ...]) -> np.ndarray:
    rk = REDUCE_KINDS[kind]
    dt = _dt(x)
    ident = rk.identity(dt)
    out_shape = _window_shape(x.shape, window_dimensions=window_dimensions, window_strides=window_strides,
                              base_dilations=base_dilations, window_dilations=window_dilations,
                              padding_low=padding_low, padding_high=padding_high)
    acc_dt = rk.accumulator(dt).np
    acc = np.full(out_shape, ident, dtype=acc_dt)
    if 0 in out_shape:
        return acc.astype(x.dtype)
    xp = _dilate_pad(x, base_dilations, padding_low, padding_high, ident).astype(acc_dt)
    for pos in _window_positions(window_dimensions):
        view = xp[tuple(slice(p * r, p * r + (o - 1) * s + 1, s)
                        for p, r, o, s in zip(pos, window_dilations, out_shape, window_strides))]
        acc = np.asarray(rk.combine_host(acc, view)).astype(acc_dt, copy=False)
    return acc.astype(x.dtype)
