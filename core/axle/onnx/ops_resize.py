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

from .. import lax
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




# -- GridSample: data-dependent sampling (the grid is a traced value)


def _fold(x: Any, dx: Any, near: float, far: float, sign: int) -> Any:
    """near + sign * r or far - sign * r by the parity of the number of whole ranges in dx."""
    rng = const(x, abs(far - near))
    n = anp.floor(dx / rng)
    r = dx - n * rng
    even = anp.equal(n - const(n, 2) * anp.floor(n / const(n, 2)), const(n, 0))
    return anp.where(even, const(x, near) + const(x, sign) * r, const(x, far) - const(x, sign) * r)


def _reflect(x: Any, lo: float, hi: float) -> Any:
    """Reflects x by the near border until it lies in [lo, hi] (ONNX's / PyTorch's rule)."""
    below = _fold(x, const(x, lo) - x, lo, hi, 1)
    above = _fold(x, x - const(x, hi), hi, lo, -1)
    return anp.where(x < const(x, lo), below, anp.where(x > const(x, hi), above, x))


def _cubic_coeffs(t: Any) -> list[Any]:
    a = -0.75
    return [_cubic_1(t + const(t, 1), a), _cubic_0(t, a), _cubic_0(const(t, 1) - t, a),
            _cubic_1(const(t, 2) - t, a)]


def _cubic_0(d: Any, a: float) -> Any:
    return (const(d, a + 2) * d - const(d, a + 3)) * d * d + const(d, 1)


def _cubic_1(d: Any, a: float) -> Any:
    return ((const(d, a) * d - const(d, 5 * a)) * d + const(d, 8 * a)) * d - const(d, 4 * a)


@register("GridSample", since=20, check=all_checks(choice("mode", ("linear", "nearest", "cubic", "bilinear",
                                                                      "bicubic"), "linear"),
                                                   choice("padding_mode", ("zeros", "border", "reflection"), "zeros")))
def _grid_sample(ctx: NodeCtx, x: Any, grid: Any) -> Any:
    """per output location: its source coordinates from the grid, then nearest / N-linear /
    N-cubic taps gathered from the flattened input (take_along_axis) and weighted"""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(ctx.attr("mode", "linear"), ctx.attr("mode", "linear"))
    pad = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    dims = list(x.shape[2:])
    r = len(dims)
    n_, c_ = x.shape[0], x.shape[1]
    out_sp = list(grid.shape[1:-1])
    p = int(np.prod(out_sp))
    g = anp.reshape(grid, (n_, p, r))
    coords, borders = [], []
    for i, d in enumerate(dims):
        v = g[:, :, r - 1 - i]
        xi = (v + const(v, 1)) / const(v, 2) * const(v, d - 1) if align else \
            ((v + const(v, 1)) * const(v, d) - const(v, 1)) / const(v, 2)
        if mode == "nearest":
            xi = lax.round_nearest_even(xi)
        lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        borders.append((lo, hi))
        if pad == "border":
            xi = anp.where((xi < const(xi, lo)) | (xi > const(xi, hi)), anp.clip(xi, 0, d - 1), xi)
        elif pad == "reflection":
            xi = _reflect(xi, lo, hi)
        coords.append(xi)
    taps_per_dim: list[list[tuple[Any, Any]]] = []  # per dim: (index, weight) of each tap
    for xi in coords:
        if mode == "nearest":
            taps_per_dim.append([(xi, None)])
            continue
        x0 = anp.floor(xi)
        t = xi - x0
        if mode == "linear":
            taps_per_dim.append([(x0, const(t, 1) - t), (x0 + const(x0, 1), t)])
        else:
            cs = _cubic_coeffs(t)
            taps_per_dim.append([(x0 + const(x0, k - 1), cs[k]) for k in range(4)])
    flat = anp.reshape(x, (n_, c_, -1))
    strides = [int(np.prod(dims[i + 1:])) for i in range(r)]
    out: Any = None
    for combo in np.ndindex(*[len(t) for t in taps_per_dim]):
        lin: Any = None
        ok: Any = None
        w: Any = None
        for i, k in enumerate(combo):
            idx, wt = taps_per_dim[i][k]
            d = dims[i]
            if pad == "zeros":
                inside = (idx >= const(idx, 0)) & (idx <= const(idx, d - 1))
                ok = inside if ok is None else ok & inside
                idx = anp.clip(idx, 0, d - 1)
            elif pad == "border":
                idx = anp.clip(idx, 0, d - 1)
            else:
                idx = anp.clip(anp.trunc(_reflect(idx, *borders[i])), 0, d - 1)
            term = anp.astype(idx, np.int64) * np.int64(strides[i])
            lin = term if lin is None else lin + term
            if wt is not None:
                w = wt if w is None else w * wt
        vals = anp.take_along_axis(flat, anp.broadcast_to(anp.expand_dims(lin, 1), (n_, c_, p)), axis=2)
        if ok is not None:
            vals = anp.where(anp.expand_dims(ok, 1), vals, const(vals, 0))
        if w is not None:
            vals = vals * anp.expand_dims(w, 1)
        out = vals if out is None else out + vals
    return anp.reshape(out, (n_, c_, *out_sp))


@register("AffineGrid", since=20, static=(1,))
def _affine_grid(ctx: NodeCtx, theta: Any, size: Any) -> Any:
    """the homogeneous base grid (x fastest, from -1 to 1) times theta transposed"""
    sz = ints(size)
    sp = sz[2:]
    align = bool(ctx.attr("align_corners", 0))
    axes = [np.linspace(-1, 1, d) if align else (np.arange(d) * 2 + 1) / d - 1 for d in sp]
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial dim, outermost first
    base = np.stack([*mesh[::-1], np.ones(mesh[0].shape)], axis=-1).astype(np.dtype(theta.dtype))
    flat = base.reshape(-1, len(sp) + 1)
    out = anp.matmul(flat, anp.swapaxes(theta, 1, 2))  # (N, points, r)
    return anp.reshape(out, (sz[0], *sp, len(sp)))
