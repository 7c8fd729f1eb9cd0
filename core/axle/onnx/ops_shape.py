"""Shape, movement and indexing ONNX ops, the constants and the reductions. Every value
that fixes an output's shape (a Reshape's shape, Slice's starts, pads, axes) is a static
input of the table: a host constant when the converter runs."""
from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import numpy_helper

from .. import lax
from .. import numpy as anp
from .ops_elementwise import const
from .table import NodeCtx, Unsupported, choice, dtype_of, register


def ints(v: Any) -> list[int]:
    """A host constant (shape, axes, pads) as Python ints."""
    return [int(i) for i in np.asarray(v).reshape(-1)]


def norm_axes(axes: Sequence[int], rank: int) -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < builtins.max(rank, 1):
            raise Unsupported(f"axis {a} is out of range for rank {rank}")
        out.append(a % builtins.max(rank, 1))
    return out


def wrap_indices(idx: Any, n: int) -> Any:
    """ONNX indices count from the end when negative: index + n there."""
    if isinstance(idx, np.ndarray | np.generic):
        i = np.asarray(idx).astype(np.int64)
        return np.where(i < 0, i + n, i)
    return anp.where(idx < const(idx, 0), idx + const(idx, n), idx)


@register("Constant")
def _constant(ctx: NodeCtx) -> Any:
    """the attribute's tensor as a host constant"""
    a = ctx.attrs
    if "value" in a:
        t = a["value"]
        dtype_of(t.data_type, "Constant")
        return numpy_helper.to_array(t)
    if "value_float" in a:
        return np.asarray(a["value_float"], np.float32)
    if "value_floats" in a:
        return np.asarray(a["value_floats"], np.float32)
    if "value_int" in a:
        return np.asarray(a["value_int"], np.int64)
    if "value_ints" in a:
        return np.asarray(a["value_ints"], np.int64)
    raise Unsupported(f"Constant with attributes {sorted(a)} is not supported (string or sparse values)")


@register("ConstantOfShape", static=(0,))
def _constant_of_shape(ctx: NodeCtx, shape: Any) -> Any:
    """axle.numpy.full of the value attribute"""
    t = ctx.attrs.get("value")
    v = numpy_helper.to_array(t).reshape(-1)[0] if t is not None else np.float32(0)
    return anp.full(tuple(ints(shape)), v, dtype=np.asarray(v).dtype)


@register("Shape")
def _shape(ctx: NodeCtx, x: Any) -> Any:
    """the static shape as an int64 host constant (start / end attributes)"""
    s = list(x.shape)
    n = len(s)
    start, end = ctx.attr("start", 0), ctx.attr("end", n)
    start = builtins.min(builtins.max(start + n if start < 0 else start, 0), n)
    end = builtins.min(builtins.max(end + n if end < 0 else end, 0), n)
    return np.asarray(s[start:end], np.int64)


@register("Size")
def _size(ctx: NodeCtx, x: Any) -> Any:
    """the static element count as an int64 host constant"""
    return np.asarray(int(np.prod(x.shape, dtype=np.int64)), np.int64)


@register("Reshape", static=(1,))
def _reshape(ctx: NodeCtx, x: Any, shape: Any) -> Any:
    """axle.numpy.reshape; 0 copies the input's dim unless allowzero"""
    s = ints(shape)
    if not ctx.attr("allowzero", 0):
        s = [x.shape[i] if d == 0 else d for i, d in enumerate(s)]
    return anp.reshape(x, tuple(s))


@register("Flatten")
def _flatten(ctx: NodeCtx, x: Any) -> Any:
    """a reshape to 2-D at axis"""
    r = len(x.shape)
    ax = ctx.attr("axis", 1)
    ax = ax + r if ax < 0 else ax
    lead = int(np.prod(x.shape[:ax], dtype=np.int64))
    return anp.reshape(x, (lead, int(np.prod(x.shape[ax:], dtype=np.int64))))


@register("Transpose")
def _transpose(ctx: NodeCtx, x: Any) -> Any:
    """axle.numpy.transpose (perm reversed by default)"""
    perm = ctx.ints("perm") or list(range(len(x.shape)))[::-1]
    return anp.transpose(x, perm)


def _axes_input_or_attr(ctx: NodeCtx, axes: Any, since: int) -> list[int] | None:
    """axes from the input (opset >= since) or the attribute (older)."""
    if ctx.since >= since:
        return ints(axes) if axes is not None else None
    return ctx.ints("axes")


@register("Squeeze", static=(1,))
def _squeeze(ctx: NodeCtx, x: Any, axes: Any = None) -> Any:
    """axle.numpy.squeeze"""
    ax = ints(axes) if axes is not None else None
    if ax is None:
        return anp.squeeze(x)
    return anp.squeeze(x, axis=tuple(norm_axes(ax, len(x.shape))))


@register("Unsqueeze", static=(1,))
def _unsqueeze(ctx: NodeCtx, x: Any, axes: Any) -> Any:
    """a reshape inserting size-1 dims at the axes of the result"""
    out_rank = len(x.shape) + len(ints(axes))
    ax = sorted(norm_axes(ints(axes), out_rank))
    shape = list(x.shape)
    for a in ax:
        shape.insert(a, 1)
    return anp.reshape(x, tuple(shape))


@register("Concat")
def _concat(ctx: NodeCtx, *xs: Any) -> Any:
    """axle.numpy.concatenate"""
    xs = tuple(x for x in xs if x is not None)
    if "axis" not in ctx.attrs:
        raise Unsupported("the axis attribute is required")
    return anp.concatenate(xs, axis=ctx.attr("axis"))


@register("Split", static=(1,))
def _split(ctx: NodeCtx, x: Any, split: Any = None) -> tuple[Any, ...]:
    """axle.numpy.split at the sizes of split, or num_outputs near-equal parts"""
    ax = norm_axes([ctx.attr("axis", 0)], len(x.shape))[0]
    n = x.shape[ax]
    if split is not None:
        sizes = ints(split)
    else:
        k = ctx.attr("num_outputs", len(ctx.proto.output))
        step = -(-n // k)
        sizes = [builtins.min(step, n - i * step) for i in range(k)]
    cuts = list(np.cumsum(sizes)[:-1])
    return tuple(anp.split(x, [int(c) for c in cuts], axis=ax))


@register("Slice", static=(1, 2, 3, 4))
def _slice(ctx: NodeCtx, x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    """basic slicing with ONNX's clamping of starts and ends"""
    r = len(x.shape)
    st, en = ints(starts), ints(ends)
    ax = norm_axes(ints(axes), r) if axes is not None else list(range(len(st)))
    sp = ints(steps) if steps is not None else [1] * len(st)
    idx: list[Any] = [builtins.slice(None)] * r
    for a, s, e, p in zip(ax, st, en, sp):
        n = x.shape[a]
        if p == 0:
            raise Unsupported("a step of 0")
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if p > 0:
            s, e = builtins.min(builtins.max(s, 0), n), builtins.min(builtins.max(e, 0), n)
            idx[a] = builtins.slice(s, e, p)
        else:
            s, e = builtins.min(builtins.max(s, 0), n - 1), builtins.min(builtins.max(e, -1), n - 1)
            idx[a] = builtins.slice(s, e if e >= 0 else None, p)
    return x[tuple(idx)]


@register("Gather")
def _gather(ctx: NodeCtx, x: Any, idx: Any) -> Any:
    """axle.numpy.take along axis (negative indices wrapped)"""
    ax = norm_axes([ctx.attr("axis", 0)], len(x.shape))[0]
    return anp.take(x, wrap_indices(idx, x.shape[ax]), axis=ax)


@register("GatherElements")
def _gather_elements(ctx: NodeCtx, x: Any, idx: Any) -> Any:
    """axle.numpy.take_along_axis"""
    ax = norm_axes([ctx.attr("axis", 0)], len(x.shape))[0]
    return anp.take_along_axis(x, wrap_indices(idx, x.shape[ax]), axis=ax)


def _nd_index(x: Any, idx: Any, b: int) -> tuple[Any, ...]:
    """The advanced index of GatherND / ScatterND: batch grids, then idx[..., k] per dim."""
    k = idx.shape[-1]
    lead = list(idx.shape[:-1])
    parts: list[Any] = [np.arange(lead[i]).reshape([-1 if j == i else 1 for j in range(len(lead))])
                        for i in range(b)]
    for j in range(k):
        parts.append(wrap_indices(idx[..., j], x.shape[b + j]))
    return tuple(parts)


@register("GatherND")
def _gather_nd(ctx: NodeCtx, x: Any, idx: Any) -> Any:
    """advanced indexing by the last dim of indices (batch_dims leading dims shared)"""
    b = ctx.attr("batch_dims", 0)
    return x[_nd_index(x, idx, b)]


_REDUCTION = {"none": "set", "add": "add", "mul": "multiply", "max": "max", "min": "min"}


@register("ScatterND", check=choice("reduction", tuple(_REDUCTION), "none"))
def _scatter_nd(ctx: NodeCtx, x: Any, idx: Any, upd: Any) -> Any:
    """x.at[indices].set / add / multiply / max / min"""
    ref = anp.asarray(x).at[_nd_index(x, idx, 0)]
    return getattr(ref, _REDUCTION[ctx.attr("reduction", "none")])(upd)


@register("ScatterElements", check=choice("reduction", tuple(_REDUCTION), "none"))
def _scatter_elements(ctx: NodeCtx, x: Any, idx: Any, upd: Any) -> Any:
    """x.at[grid with indices on axis].set / add / ..."""
    r = len(x.shape)
    ax = norm_axes([ctx.attr("axis", 0)], r)[0]
    grid = [np.arange(idx.shape[i]).reshape([-1 if j == i else 1 for j in range(r)]) for i in range(r)]
    grid[ax] = wrap_indices(idx, x.shape[ax])
    ref = anp.asarray(x).at[tuple(grid)]
    return getattr(ref, _REDUCTION[ctx.attr("reduction", "none")])(upd)


@register("Expand", static=(1,))
def _expand(ctx: NodeCtx, x: Any, shape: Any) -> Any:
    """axle.numpy.broadcast_to the broadcast of both shapes"""
    return anp.broadcast_to(x, anp.broadcast_shapes(tuple(x.shape), tuple(ints(shape))))


@register("Tile", static=(1,))
def _tile(ctx: NodeCtx, x: Any, reps: Any) -> Any:
    """axle.numpy.tile"""
    return anp.tile(x, tuple(ints(reps)))


def _pad_index(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    """Source index of each output position along one dim for edge / reflect / wrap."""
    i = np.arange(-lo, n + hi)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return np.mod(i, n)
    period = 2 * (n - 1) if n > 1 else 1  # reflect: mirror without repeating the edge
    m = np.mod(i, period)
    return np.where(m < n, m, period - m)


@register("Pad", static=(1, 3), check=choice("mode", ("constant", "reflect", "edge", "wrap"), "constant"))
def _pad(ctx: NodeCtx, x: Any, pads: Any, value: Any = None, axes: Any = None) -> Any:
    """constant: axle.numpy.pad (negative pads crop); edge / reflect / wrap: a gather per dim"""
    r = len(x.shape)
    p = ints(pads)
    ax = norm_axes(ints(axes), r) if axes is not None else list(range(r))
    k = len(ax)
    lo, hi = [0] * r, [0] * r
    for j, a in enumerate(ax):
        lo[a], hi[a] = p[j], p[j + k]
    mode = ctx.attr("mode", "constant")
    if mode != "constant":
        for a in range(r):
            if lo[a] or hi[a]:
                x = anp.take(x, _pad_index(x.shape[a], lo[a], hi[a], mode), axis=a)
        return x
    crop = tuple(builtins.slice(builtins.max(-lo[a], 0), x.shape[a] - builtins.max(-hi[a], 0)) for a in range(r))
    x = x[crop]
    lo0, hi0 = [builtins.max(v, 0) for v in lo], [builtins.max(v, 0) for v in hi]
    if value is None or not isinstance(value, np.ndarray | np.generic):
        cv = anp.zeros((), np.dtype(x.dtype)) if value is None else anp.reshape(value, ())
        return lax.pad(x, anp.astype(cv, np.dtype(x.dtype)), lo0, hi0, [0] * r)
    cv = np.asarray(value).reshape(-1)
    return anp.pad(x, list(zip(lo0, hi0)), constant_values=cv[0] if cv.size else 0)


@register("Range", static=(0, 1, 2))
def _range(ctx: NodeCtx, start: Any, limit: Any, delta: Any) -> Any:
    """axle.numpy.arange of the constant bounds"""
    s = np.asarray(start)
    n = builtins.max(int(np.ceil((np.asarray(limit) - s) / np.asarray(delta))), 0)
    return (s + np.arange(n).astype(s.dtype) * np.asarray(delta)).astype(s.dtype)


@register("EyeLike")
def _eye_like(ctx: NodeCtx, x: Any) -> Any:
    """axle.numpy.eye of the input's shape, offset k"""
    dt = dtype_of(ctx.attr("dtype"), "EyeLike") if "dtype" in ctx.attrs else np.dtype(x.dtype)
    return anp.eye(x.shape[0], x.shape[1], k=ctx.attr("k", 0), dtype=dt)


@register("Trilu", static=(1,))
def _trilu(ctx: NodeCtx, x: Any, k: Any = None) -> Any:
    """axle.numpy.triu / tril"""
    kk = ints(k)[0] if k is not None else 0
    return anp.triu(x, k=kk) if ctx.attr("upper", 1) else anp.tril(x, k=kk)


@register("OneHot", static=(1,))
def _one_hot(ctx: NodeCtx, idx: Any, depth: Any, values: Any) -> Any:
    """compare of the indices with an iota of depth, select of off / on values"""
    d = int(np.asarray(depth).reshape(-1)[0])
    r = len(idx.shape) + 1
    ax = norm_axes([ctx.attr("axis", -1)], r)[0]
    i = wrap_indices(anp.astype(idx, np.int64), d)
    i = anp.expand_dims(i, ax)
    iota = np.arange(d).reshape([-1 if j == ax else 1 for j in range(r)])
    return anp.where(anp.equal(i, iota), values[1], values[0])


def _depth_space(x: Any, b: int, to_space: bool, dcr: bool) -> Any:
    n, c, h, w = x.shape
    if to_space:
        if dcr:
            y = anp.reshape(x, (n, b, b, c // (b * b), h, w))
            y = anp.transpose(y, (0, 3, 4, 1, 5, 2))
        else:
            y = anp.reshape(x, (n, c // (b * b), b, b, h, w))
            y = anp.transpose(y, (0, 1, 4, 2, 5, 3))
        return anp.reshape(y, (n, c // (b * b), h * b, w * b))
    y = anp.reshape(x, (n, c, h // b, b, w // b, b))
    y = anp.transpose(y, (0, 3, 5, 1, 2, 4) if dcr else (0, 1, 3, 5, 2, 4))
    return anp.reshape(y, (n, c * b * b, h // b, w // b))


@register("DepthToSpace", check=choice("mode", ("DCR", "CRD"), "DCR"))
def _d2s(ctx: NodeCtx, x: Any) -> Any:
    """reshape, transpose, reshape (DCR or CRD order)"""
    return _depth_space(x, ctx.attr("blocksize"), True, ctx.attr("mode", "DCR") == "DCR")


@register("SpaceToDepth", check=choice("mode", ("DCR", "CRD"), "DCR"))
def _s2d(ctx: NodeCtx, x: Any) -> Any:
    """reshape, transpose, reshape (DCR or CRD order)"""
    return _depth_space(x, ctx.attr("blocksize"), False, ctx.attr("mode", "DCR") == "DCR")


# -- reductions

def _reduce_axes(ctx: NodeCtx, x: Any, axes: Any, since: int) -> tuple[int, ...] | None:
    """The reduced axes; None means every axis; () (noop_with_empty_axes) means none."""
    ax = _axes_input_or_attr(ctx, axes, since)
    if not ax:
        return () if ctx.attr("noop_with_empty_axes", 0) else None
    return tuple(norm_axes(ax, len(x.shape)))


def _reducer(fn: Callable[..., Any], since: int) -> Callable[..., Any]:
    def convert(ctx: NodeCtx, x: Any, axes: Any = None) -> Any:
        ax = _reduce_axes(ctx, x, axes, since)
        if ax == ():
            return x
        return fn(x, ax, bool(ctx.attr("keepdims", 1)))
    return convert


def _same(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, ax, kd: anp.astype(fn(x, ax, kd), np.dtype(x.dtype))


def _empty(x: Any, ax: Any) -> bool:
    return any(x.shape[a] == 0 for a in (ax if ax is not None else range(len(x.shape))))


def _identity_of(dt: np.dtype, kind: str) -> Any:
    """The value an empty max / min reduction gives (ONNX's: -inf / +inf, the int extremes)."""
    if dt.kind == "b":
        return kind == "min"
    if dt.kind == "f" or dt.kind == "V" or dt.itemsize == 2 and dt.kind not in "iu":
        return -np.inf if kind == "max" else np.inf
    info = np.iinfo(dt)
    return info.min if kind == "max" else info.max


def _reduced_shape(x: Any, ax: Any, kd: bool) -> tuple[int, ...]:
    axes = set(ax if ax is not None else range(len(x.shape)))
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape) if kd or i not in axes)


def _max_or_empty(kind: str) -> Callable[..., Any]:
    def f(x: Any, ax: Any, kd: bool) -> Any:
        if _empty(x, ax):
            dt = np.dtype(x.dtype)
            return anp.full(_reduced_shape(x, ax, kd), np.asarray(_identity_of(dt, kind)).astype(dt), dtype=dt)
        return (anp.max if kind == "max" else anp.min)(x, axis=ax, keepdims=kd)
    return f


_REDUCERS: dict[str, tuple[Callable[..., Any], int]] = {
    "ReduceSum": (_same(lambda x, ax, kd: anp.sum(x, axis=ax, keepdims=kd)), 13),
    "ReduceMean": (_same(lambda x, ax, kd: anp.mean(x, axis=ax, keepdims=kd)), 18),
    "ReduceProd": (_same(lambda x, ax, kd: anp.prod(x, axis=ax, keepdims=kd)), 18),
    "ReduceMax": (_max_or_empty("max"), 18),
    "ReduceMin": (_max_or_empty("min"), 18),
    "ReduceL1": (_same(lambda x, ax, kd: anp.sum(anp.abs(x), axis=ax, keepdims=kd)), 18),
    "ReduceL2": (_same(lambda x, ax, kd: anp.sqrt(anp.sum(x * x, axis=ax, keepdims=kd))), 18),
    "ReduceSumSquare": (_same(lambda x, ax, kd: anp.sum(x * x, axis=ax, keepdims=kd)), 18),
    "ReduceLogSum": (_same(lambda x, ax, kd: anp.log(anp.sum(x, axis=ax, keepdims=kd))), 18),
    "ReduceLogSumExp": (_same(lambda x, ax, kd: _logsumexp(x, ax, kd)), 18),
}


def _logsumexp(x: Any, ax: Any, kd: bool) -> Any:
    if _empty(x, ax):  # log(0)
        return anp.full(_reduced_shape(x, ax, kd), -np.inf, dtype=np.dtype(x.dtype))
    m = anp.max(x, axis=ax, keepdims=True)
    m = anp.where(anp.isfinite(m), m, const(m, 0))
    s = anp.log(anp.sum(anp.exp(x - m), axis=ax, keepdims=True)) + m
    return s if kd else anp.squeeze(s, axis=ax if ax is not None else None)


for _name, (_fn, _since) in _REDUCERS.items():
    register(_name, static=(1,), doc="axle.numpy reduction over axes (attribute before opset "
             f"{_since}, input since)")(_reducer(_fn, _since))


def _arg(kind: str) -> Callable[..., Any]:
    def convert(ctx: NodeCtx, x: Any) -> Any:
        ax = norm_axes([ctx.attr("axis", 0)], len(x.shape))[0]
        kd = bool(ctx.attr("keepdims", 1))
        fn = anp.argmax if kind == "max" else anp.argmin
        if ctx.attr("select_last_index", 0):
            n = x.shape[ax]
            i = const(np.int64(0), n - 1) - anp.astype(fn(anp.flip(x, axis=ax), axis=ax, keepdims=kd), np.int64)
        else:
            i = fn(x, axis=ax, keepdims=kd)
        return anp.astype(i, np.int64)
    return convert


register("ArgMax", doc="axle.numpy.argmax (int64)")(_arg("max"))
register("ArgMin", doc="axle.numpy.argmin (int64)")(_arg("min"))


@register("CumSum", static=(1,))
def _cumsum(ctx: NodeCtx, x: Any, axis: Any) -> Any:
    """axle.numpy.cumsum with exclusive / reverse"""
    ax = norm_axes(ints(axis), len(x.shape))[0]
    rev = ctx.attr("reverse", 0)
    y = anp.flip(x, axis=ax) if rev else x
    c = anp.astype(anp.cumsum(y, axis=ax), np.dtype(x.dtype))
    if ctx.attr("exclusive", 0):
        c = c - y
    return anp.flip(c, axis=ax) if rev else c


@register("TopK", static=(1,))
def _topk(ctx: NodeCtx, x: Any, k: Any) -> tuple[Any, Any]:
    """lax.top_k on the axis moved last (smallest: on the negated values)"""
    kk = ints(k)[0]
    r = len(x.shape)
    ax = norm_axes([ctx.attr("axis", -1)], r)[0]
    y = anp.moveaxis(x, ax, -1)
    largest = ctx.attr("largest", 1)
    dt = np.dtype(x.dtype)
    if not largest and dt.kind == "u":
        raise Unsupported("smallest TopK of unsigned integers")
    v, i = lax.top_k(y if largest else anp.negative(y), kk)
    v = v if largest else anp.negative(v)
    return anp.moveaxis(v, -1, ax), anp.moveaxis(anp.astype(i, np.int64), -1, ax)


@register("CumProd", static=(1,), since=26)
def _cumprod(ctx: NodeCtx, x: Any, axis: Any) -> Any:
    """axle.numpy.cumulative_prod with exclusive / reverse"""
    ax = norm_axes(ints(axis), len(x.shape))[0]
    rev = ctx.attr("reverse", 0)
    y = anp.flip(x, axis=ax) if rev else x
    if ctx.attr("exclusive", 0):  # shift by one: a leading 1, the last element dropped
        n = y.shape[ax]
        ones = anp.ones(tuple(1 if i == ax else d for i, d in enumerate(y.shape)), np.dtype(x.dtype))
        y = anp.concatenate([ones, y[tuple(builtins.slice(0, n - 1) if i == ax else builtins.slice(None)
                                           for i in range(len(y.shape)))]], axis=ax)
    c = anp.astype(anp.cumulative_prod(y, axis=ax), np.dtype(x.dtype))
    return anp.flip(c, axis=ax) if rev else c


@register("BitCast", since=26)
def _bitcast(ctx: NodeCtx, x: Any) -> Any:
    """lax.bitcast_convert to a dtype of the same width"""
    dt = dtype_of(ctx.attr("to"), "BitCast to")
    if dt.itemsize != np.dtype(x.dtype).itemsize:
        raise Unsupported(f"BitCast from {np.dtype(x.dtype)} to {dt}: the widths differ")
    if dt == np.dtype(x.dtype):
        return x
    if np.dtype(x.dtype) == np.bool_ or dt == np.bool_:  # a bool's byte is 0 or 1: a conversion
        return anp.astype(anp.not_equal(x, const(x, 0)) if dt == np.bool_ else x, dt)
    return lax.bitcast_convert(x, dt)


@register("ReverseSequence")
def _reverse_sequence(ctx: NodeCtx, x: Any, lens: Any) -> Any:
    """a gather along the time axis: index lens[b] - 1 - t for t < lens[b], else t"""
    ta, ba = ctx.attr("time_axis", 0), ctx.attr("batch_axis", 1)
    n_t, n_b = x.shape[ta], x.shape[ba]
    t = np.arange(n_t).reshape([-1 if i == ta else 1 for i in range(len(x.shape))])
    ln = anp.reshape(anp.astype(lens, np.int64), [-1 if i == ba else 1 for i in range(len(x.shape))])
    src = anp.where(t < ln, ln - const(ln, 1) - t, t + anp.zeros_like(ln))
    src = anp.broadcast_to(src, tuple(n_t if i == ta else n_b if i == ba else 1 for i in range(len(x.shape))))
    full = anp.broadcast_to(src, x.shape)
    return anp.take_along_axis(x, full, axis=ta)


@register("CenterCropPad", static=(1,))
def _center_crop_pad(ctx: NodeCtx, x: Any, shape: Any) -> Any:
    """a centred slice where the target is smaller, a centred zero pad where larger"""
    r = len(x.shape)
    ax = norm_axes(ctx.ints("axes") or list(range(r)), r)
    target = ints(shape)
    idx: list[Any] = [builtins.slice(None)] * r
    pads = [(0, 0)] * r
    for a, t in zip(ax, target):
        n = x.shape[a]
        if t < n:
            s = (n - t) // 2
            idx[a] = builtins.slice(s, s + t)
        elif t > n:
            lo = (t - n) // 2
            pads[a] = (lo, t - n - lo)
    return anp.pad(x[tuple(idx)], pads)
