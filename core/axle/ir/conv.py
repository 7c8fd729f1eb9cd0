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
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DTypeError, ShapeError
from .dtypes import DType, dtype
from .opcodes import Op
from .reductions import REDUCE_KINDS
from .types import Shape, TensorType

if TYPE_CHECKING:
    from .builder import Builder
    from .module import Node

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


def conv_dimension_numbers(lhs: str, rhs: str, out: str) -> dict[str, Any]:
    """The dimension-number attributes for layouts spelled as jax spells them: ``lhs`` and
    ``out`` use N (batch), C (feature) and other letters for spatial dims; ``rhs`` uses O
    (output feature), I (input feature) and the same spatial letters, in any order:
    ``conv_dimension_numbers("NHWC", "HWIO", "NHWC")``. Spatial dims pair up in the order
    they appear in ``rhs``."""
    if sorted(lhs) != sorted(out) or len(rhs) != len(lhs) or not {"N", "C"} <= set(lhs) or not {"O", "I"} <= set(rhs):
        raise ShapeError(f"convolution: layouts {lhs!r}, {rhs!r}, {out!r} must name N, C (input, output), O, I "
                         f"(kernel) and the same spatial dims")
    spatial = [ch for ch in rhs if ch not in "OI"]
    if sorted(spatial) != sorted(ch for ch in lhs if ch not in "NC") or len(set(lhs)) != len(lhs):
        raise ShapeError(f"convolution: layouts {lhs!r}, {rhs!r}, {out!r} must name the same distinct spatial dims")
    return {
        "input_batch_dimension": lhs.index("N"), "input_feature_dimension": lhs.index("C"),
        "input_spatial_dimensions": tuple(lhs.index(ch) for ch in spatial),
        "kernel_input_feature_dimension": rhs.index("I"), "kernel_output_feature_dimension": rhs.index("O"),
        "kernel_spatial_dimensions": tuple(rhs.index(ch) for ch in spatial),
        "output_batch_dimension": out.index("N"), "output_feature_dimension": out.index("C"),
        "output_spatial_dimensions": tuple(out.index(ch) for ch in spatial),
    }


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
    # float16 and bfloat16 accumulate in float32, as dot does
    work = np.float32 if lhs.dtype in (np.float16, DType.BFLOAT16.np) else lhs.dtype
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


# ------------------------------------------------------------------- decompositions
# For a device that does not claim the op: the same values from core primitives.


def _const(b: Builder, value: Any, dt: DType, shape: Sequence[int] = ()) -> Node:
    c = b.constant(np.asarray(value).astype(dt.np))
    return c if not shape else b.broadcast_in_dim(c, shape=tuple(shape), broadcast_dimensions=())


def _dilate_pad_nodes(b: Builder, x: Node, lead: int, dilation: Sequence[int], low: Sequence[int],
                      high: Sequence[int], fill: Node) -> Node:
    """_dilate_pad in primitives: pad (interior = holes, edges >= 0), then slice off the
    negative edges."""
    z = (0,) * lead
    x = b.pad(x, fill, low=z + tuple(max(v, 0) for v in low), high=z + tuple(max(v, 0) for v in high),
              interior=z + tuple(d - 1 for d in dilation))
    if any(v < 0 for v in (*low, *high)):
        shape = x.shape
        x = b.slice(x, start=z + tuple(max(-v, 0) for v in low),
                    limit=tuple(shape[:lead]) + tuple(s - max(-v, 0) for s, v in zip(shape[lead:], high)),
                    stride=(1,) * len(shape))
    return x


def _window_slice(b: Builder, x: Node, lead: int, pos: Sequence[int], dilation: Sequence[int],
                  out: Sequence[int], strides: Sequence[int]) -> Node:
    """The operand elements window position ``pos`` reads for every output position."""
    start = [p * r for p, r in zip(pos, dilation)]
    return b.slice(x, start=(0,) * lead + tuple(start),
                   limit=tuple(x.shape[:lead]) + tuple(s0 + (o - 1) * s + 1 for s0, o, s in zip(start, out, strides)),
                   stride=(1,) * lead + tuple(strides))


def decompose_convolution(b: Builder, node: Node) -> Node:
    """im2col: one strided slice of the dilated, padded input per kernel position,
    concatenated into patches [N, C, K, out...], then one dot_general with the kernel
    [O, I, K] (batched over the feature or batch groups)."""
    lhs, rhs = node.operands
    a = node.attr
    dt = lhs.dtype
    x = b.transpose(lhs, permutation=(a["input_batch_dimension"], a["input_feature_dimension"],
                                      *a["input_spatial_dimensions"]))
    w = b.transpose(rhs, permutation=(a["kernel_output_feature_dimension"], a["kernel_input_feature_dimension"],
                                      *a["kernel_spatial_dimensions"]))
    out_shape = node.shape
    out_sp = [out_shape[d] for d in a["output_spatial_dimensions"]]
    kernel = w.shape[2:]
    n, c = x.shape[:2]
    o, ci = w.shape[:2]
    kk = math.prod(kernel)
    out_dims = (a["output_batch_dimension"], a["output_feature_dimension"], *a["output_spatial_dimensions"])
    if 0 in out_shape or kk == 0 or ci == 0:  # nothing to sum: zeros (or an empty result)
        return _const(b, 0, dt, out_shape)
    x = _dilate_pad_nodes(b, x, 2, a["lhs_dilation"], a["padding_low"], a["padding_high"], _const(b, 0, dt))
    cols = [b.reshape(s, shape=(n, c, 1, *out_sp))
            for s in (_window_slice(b, x, 2, pos, a["rhs_dilation"], out_sp, a["window_strides"])
                      for pos in itertools.product(*(range(k) for k in kernel)))]
    patches = cols[0] if len(cols) == 1 else b.concatenate(*cols, dimension=2)  # [N, C, K, out...]
    g, bg = a["feature_group_count"], a["batch_group_count"]
    groups = max(g, bg)
    if g > 1:
        p = b.reshape(patches, shape=(n, g, c // g, kk, *out_sp))
        batch_dim = 1
    else:
        p = b.reshape(patches, shape=(bg, n // bg, c, kk, *out_sp))
        batch_dim = 0
    k = b.reshape(w, shape=(groups, o // groups, ci, kk))
    y = b.dot_general(p, k, lhs_batch=(batch_dim,), rhs_batch=(0,), lhs_contracting=(2, 3),
                      rhs_contracting=(2, 3))  # [groups, rest of batch, out..., O/groups]
    ns = len(out_sp)
    y = b.transpose(y, permutation=(1, 0, ns + 2, *range(2, ns + 2)))  # [batch, groups, O/groups, out...]
    y = b.reshape(y, shape=(y.shape[0], o, *out_sp))
    return b.transpose(y, permutation=tuple(int(i) for i in np.argsort(out_dims)))


def decompose_reduce_window(b: Builder, node: Node) -> Node:
    """One strided slice of the dilated, padded operand per window position, combined
    elementwise from the kind's identity in row-major window order (as the reference does;
    float16 sums and products in float32)."""
    (x,) = node.operands
    a = node.attr
    rk = REDUCE_KINDS[a["kind"]]
    dt = x.dtype
    acc_dt = rk.accumulator(dt)
    out = node.shape
    if acc_dt is not dt:
        x = b.convert(x, dtype=acc_dt)
    ident = _const(b, rk.identity(acc_dt), acc_dt)
    acc = _const(b, rk.identity(acc_dt), acc_dt, out)
    if 0 not in out:
        xp = _dilate_pad_nodes(b, x, 0, a["base_dilations"], a["padding_low"], a["padding_high"], ident)
        for pos in itertools.product(*(range(k) for k in a["window_dimensions"])):
            view = _window_slice(b, xp, 0, pos, a["window_dilations"], out, a["window_strides"])
            acc = b.op(rk.combiner, acc, view)
    return b.convert(acc, dtype=dt) if acc_dt is not dt else acc
