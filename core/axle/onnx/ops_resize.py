"""ONNX Resize: separable, one axis at a time. The source coordinate of every output
index, and from it the taps and weights of nearest / linear / cubic interpolation
(antialiased when downsampling), are computed on the host (the shapes are static); a
nearest resize is a gather (axle.numpy.take), the others a matmul with the (out, in)
weight matrix of the axis."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import numpy as anp
from .ops_elementwise import const
from .ops_shape import ints, norm_axes
from .table import NodeCtx, Unsupported, all_checks, choice, register

_COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
           "tf_crop_and_resize")
_NEAREST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda x: np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x)),
    "round_prefer_ceil": lambda x: np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x)),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _source(mode: str, n: int, m: int, s: float, roi: tuple[float, float]) -> np.ndarray:
    """The input coordinate of each of the m output indices of an axis of n."""
    x = np.arange(m, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / s - 0.5
    if mode == "half_pixel_symmetric":
        adj = m / (s * n)
        return n / 2 * (1 - adj) + (x + 0.5) / s - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / s - 0.5 if m > 1 else np.zeros(m)
    if mode == "align_corners":  # over the unrounded output length n * s, as ONNX's reference
        return x * (n - 1) / (n * s - 1) if m > 1 else np.zeros(m)
    if mode == "asymmetric":
        return x / s
    start, end = roi
    if m > 1:
        return start * (n - 1) + x * (end - start) * (n - 1) / (m - 1)
    return np.full(m, 0.5 * (start + end) * (n - 1))


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel at distances |d|."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d < 1, near, np.where(d < 2, far, 0.0))


def _weights(ctx: NodeCtx, src: np.ndarray, n: int, s: float) -> np.ndarray:
    """The (m, n) interpolation matrix of linear or cubic resizing."""
    mode = ctx.attr("mode", "nearest")
    a = ctx.attr("cubic_coeff_a", -0.75)
    anti = bool(ctx.attr("antialias", 0)) and s < 1
    k = s if anti else 1.0  # antialiasing stretches the kernel by 1 / scale
    reach = (1 if mode == "linear" else 2) / k
    base = np.floor(src)
    lo = int(math.floor(-reach) + 1)
    taps = np.arange(lo, 2 - lo)  # linear: 0, 1; cubic: -1 .. 2; wider when antialiased
    idx = base[:, None] + taps[None, :]
    d = (idx - src[:, None]) * k
    w = np.clip(1 - np.abs(d), 0, None) if mode == "linear" else _cubic(d, a)
    inside = (idx >= 0) & (idx <= n - 1)
    if ctx.attr("exclude_outside", 0):
        w = np.where(inside, w, 0.0)
    if anti or ctx.attr("exclude_outside", 0):
        w = w / w.sum(axis=1, keepdims=True)
    out = np.zeros((len(src), n))
    rows = np.repeat(np.arange(len(src)), idx.shape[1])
    np.add.at(out, (rows, np.clip(idx, 0, n - 1).astype(np.int64).reshape(-1)), w.reshape(-1))
    return out


def _sizes_and_scales(ctx: NodeCtx, x: Any, scales: Any, sizes: Any, axes: list[int]) -> tuple[list[int], list[float]]:
    n = [x.shape[a] for a in axes]
    if sizes is not None and np.asarray(sizes).size:
        want = ints(sizes)
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            return want, [w / i for w, i in zip(want, n)]
        pick = min if policy == "not_larger" else max
        s = pick(w / i for w, i in zip(want, n))
        return [int(math.floor(s * i + 0.5)) for i in n], [s] * len(n)
    if scales is None or not np.asarray(scales).size:
        raise Unsupported("neither scales nor sizes given")
    sc = [float(v) for v in np.asarray(scales).reshape(-1)]
    return [int(math.floor(i * v)) for i, v in zip(n, sc)], sc


@register("Resize", static=(1, 2, 3), check=all_checks(
    choice("mode", ("nearest", "linear", "cubic"), "nearest"),
    choice("coordinate_transformation_mode", _COORDS, "half_pixel"),
    choice("nearest_mode", tuple(_NEAREST), "round_prefer_floor"),
    choice("keep_aspect_ratio_policy", ("stretch", "not_larger", "not_smaller"), "stretch")))
def _resize(ctx: NodeCtx, x: Any, roi: Any = None, scales: Any = None, sizes: Any = None) -> Any:
    """per axis: a gather (nearest) or a matmul with the interpolation matrix"""
    r = len(x.shape)
    axes = norm_axes(ctx.ints("axes") or list(range(r)), r)
    out_sizes, sc = _sizes_and_scales(ctx, x, scales, sizes, axes)
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    mode = ctx.attr("mode", "nearest")
    roi_v = np.asarray(roi, np.float64).reshape(-1) if roi is not None and np.asarray(roi).size else None
    if mode != "nearest" and np.dtype(x.dtype).kind != "f":
        raise Unsupported(f"{mode} resizing of {np.dtype(x.dtype)}")
    outside: Any = None
    for j, (a, m, s) in enumerate(zip(axes, out_sizes, sc)):
        n = x.shape[a]
        if m == n and s == 1.0 and coord != "tf_crop_and_resize":
            continue
        k = len(axes)
        bounds = (roi_v[j], roi_v[j + k]) if roi_v is not None else (0.0, 1.0)
        src = _source(coord, n, m, s, bounds)
        if mode == "nearest":
            idx = np.clip(_NEAREST[ctx.attr("nearest_mode", "round_prefer_floor")](src), 0, n - 1).astype(np.int64)
            x = anp.take(x, idx, axis=a)
        else:
            w = _weights(ctx, src, n, s).astype(np.dtype(x.dtype))
            x = anp.moveaxis(anp.matmul(anp.moveaxis(x, a, -1), np.ascontiguousarray(w.T)), -1, a)
        if coord == "tf_crop_and_resize":
            out_ax = (src < 0) | (src > n - 1)
            mask = out_ax.reshape([-1 if i == a else 1 for i in range(r)])
            outside = mask if outside is None else outside | mask
    if outside is not None and outside.any():
        x = anp.where(outside, const(x, ctx.attr("extrapolation_value", 0.0)), x)
    return x


