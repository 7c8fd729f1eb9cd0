"""Neural-network ONNX ops: MatMul, Gemm, Einsum, softmaxes, convolutions (on
lax.conv_general_dilated), pools (on lax.reduce_window), normalizations, Dropout."""
from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import lax, nn
from .. import numpy as anp
from .ops_elementwise import const
from .ops_shape import ints, norm_axes
from .table import NodeCtx, Unsupported, all_checks, choice, dtype_of, register

_AUTO_PAD = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


@register("MatMul")
def _matmul(ctx: NodeCtx, a: Any, b: Any) -> Any:
    """axle.numpy.matmul"""
    return anp.matmul(a, b)


@register("Gemm")
def _gemm(ctx: NodeCtx, a: Any, b: Any, c: Any = None) -> Any:
    """alpha A' B' + beta C (transA / transB)"""
    if ctx.attr("transA", 0):
        a = anp.transpose(a)
    if ctx.attr("transB", 0):
        b = anp.transpose(b)
    y = anp.matmul(a, b)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        y = y * const(y, alpha)
    if c is not None:
        y = y + (c if beta == 1.0 else c * const(y, beta))
    return y


def expand_ellipsis(eq: str, ranks: Sequence[int]) -> str:
    """``eq`` with each ``...`` spelled as letters it does not use (right-aligned across the
    operands, as broadcasting aligns them) and the implicit output made explicit."""
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    n_ell = max((r - (len(t) - 3) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(free[:n_ell])
    out_terms = [t.replace("...", ell[n_ell - (r - (len(t) - 3)):]) if "..." in t else t for t, r in zip(terms, ranks)]
    if arrow:
        out = rhs.replace("...", ell)
    else:  # NumPy's implicit output: the ellipsis dims, then the letters used once, sorted
        letters = "".join(out_terms)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
    return ",".join(out_terms) + "->" + out


@register("Einsum")
def _einsum(ctx: NodeCtx, *xs: Any) -> Any:
    """axle.numpy.einsum (an ellipsis spelled out as letters first)"""
    eq = ctx.attr("equation").replace(" ", "")
    if "..." in eq:
        eq = expand_ellipsis(eq, [len(x.shape) for x in xs])
    return anp.einsum(eq, *xs)


def _softmax_axis(ctx: NodeCtx, x: Any) -> int:
    return norm_axes([ctx.attr("axis", -1)], len(x.shape))[0]


@register("Softmax")
def _softmax(ctx: NodeCtx, x: Any) -> Any:
    """axle.nn.softmax over axis"""
    return nn.softmax(x, axis=_softmax_axis(ctx, x))


@register("LogSoftmax")
def _log_softmax(ctx: NodeCtx, x: Any) -> Any:
    """axle.nn.log_softmax over axis"""
    return nn.log_softmax(x, axis=_softmax_axis(ctx, x))


@register("Hardmax")
def _hardmax(ctx: NodeCtx, x: Any) -> Any:
    """1 at the first maximum along axis, 0 elsewhere"""
    ax = _softmax_axis(ctx, x)
    i = anp.expand_dims(anp.argmax(x, axis=ax), ax)
    iota = np.arange(x.shape[ax]).reshape([-1 if j == ax else 1 for j in range(len(x.shape))])
    return anp.where(anp.equal(i, iota), const(x, 1), const(x, 0))


# -- convolutions and pools


def _spatial_attrs(ctx: NodeCtx, ns: int, kernel: Sequence[int]) -> tuple[list[int], list[int], Any]:
    """(strides, dilations, padding as lax wants it: a string or (low, high) pairs)."""
    st = ctx.ints("strides", [1] * ns) or [1] * ns
    dil = ctx.ints("dilations", [1] * ns) or [1] * ns
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto == "VALID":
        return st, dil, "VALID"
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return st, dil, "SAME" if auto == "SAME_UPPER" else "SAME_LOWER"
    pads = ctx.ints("pads", [0] * 2 * ns) or [0] * 2 * ns
    return st, dil, [(pads[i], pads[i + ns]) for i in range(ns)]


@register("Conv", check=choice("auto_pad", _AUTO_PAD, "NOTSET"))
def _conv(ctx: NodeCtx, x: Any, w: Any, b: Any = None) -> Any:
    """lax.conv_general_dilated (NC..., OI...) with groups, then the bias"""
    ns = len(x.shape) - 2
    st, dil, pad = _spatial_attrs(ctx, ns, w.shape[2:])
    y = lax.conv_general_dilated(x, w, st, pad, None, dil, feature_group_count=ctx.attr("group", 1))
    if b is not None:
        y = y + anp.reshape(b, (1, -1) + (1,) * ns)
    return y


@register("ConvTranspose", check=choice("auto_pad", _AUTO_PAD, "NOTSET"))
def _conv_transpose(ctx: NodeCtx, x: Any, w: Any, b: Any = None) -> Any:
    """a convolution of the input dilated by the strides with the flipped kernel (I/O
    swapped per group), padded to ONNX's output size"""
    ns = len(x.shape) - 2
    g = ctx.attr("group", 1)
    k = list(w.shape[2:])
    st = ctx.ints("strides", [1] * ns) or [1] * ns
    dil = ctx.ints("dilations", [1] * ns) or [1] * ns
    opad = ctx.ints("output_padding", [0] * ns) or [0] * ns
    pads = ctx.ints("pads", [0] * 2 * ns) or [0] * 2 * ns
    auto = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.ints("output_shape")
    ins = x.shape[2:]
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(out_shape[-ns:]) if out_shape is not None else [ins[i] * st[i] for i in range(ns)]
        pads = [0] * 2 * ns
        for i in range(ns):
            total = st[i] * (ins[i] - 1) + opad[i] + (k[i] - 1) * dil[i] + 1 - target[i]
            # a negative total (output_shape beyond the natural size) extends the end
            lo = builtins.max(total, 0) // 2 if auto != "SAME_LOWER" else total - builtins.max(total, 0) // 2
            lo = builtins.max(lo, 0)
            pads[i], pads[i + ns] = lo, total - lo
    elif auto == "VALID":
        pads = [0] * 2 * ns
    cin, mg = w.shape[0], w.shape[1]
    # (C, M/g, k...) -> (M, C/g, k...): per group, swap in and out channels
    wk = anp.reshape(w, (g, cin // g, mg) + tuple(k))
    wk = anp.transpose(wk, (0, 2, 1) + tuple(range(3, 3 + ns)))
    wk = anp.reshape(wk, (g * mg, cin // g) + tuple(k))
    wk = anp.flip(wk, axis=tuple(range(2, 2 + ns)))
    padding = [((k[i] - 1) * dil[i] - pads[i], (k[i] - 1) * dil[i] - pads[i + ns] + opad[i]) for i in range(ns)]
    y = lax.conv_general_dilated(x, wk, [1] * ns, padding, st, dil, feature_group_count=g)
    if b is not None:
        y = y + anp.reshape(b, (1, -1) + (1,) * ns)
    return y


def _pool_geometry(ctx: NodeCtx, x: Any) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]]:
    """(window, strides, dilations, explicit low pads, explicit high pads, ceil_mode extra
    high pads) over all dims of x (1 and 0 on N and C)."""
    ns = len(x.shape) - 2
    k = ctx.ints("kernel_shape")
    if k is None:
        raise Unsupported("the kernel_shape attribute is required")
    st = ctx.ints("strides", [1] * ns) or [1] * ns
    dil = ctx.ints("dilations", [1] * ns) or [1] * ns
    auto = ctx.attr("auto_pad", "NOTSET")
    ins = x.shape[2:]
    eff = [(k[i] - 1) * dil[i] + 1 for i in range(ns)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for i in range(ns):
            total = builtins.max((-(-ins[i] // st[i]) - 1) * st[i] + eff[i] - ins[i], 0)
            small = total // 2
            lo.append(small if auto == "SAME_UPPER" else total - small)
            hi.append(total - lo[-1])
    elif auto == "VALID":
        lo, hi = [0] * ns, [0] * ns
    else:
        pads = ctx.ints("pads", [0] * 2 * ns) or [0] * 2 * ns
        lo, hi = pads[:ns], pads[ns:]
    extra = [0] * ns
    if ctx.attr("ceil_mode", 0):
        for i in range(ns):
            span = ins[i] + lo[i] + hi[i] - eff[i]
            out = -(-span // st[i]) + 1
            if (out - 1) * st[i] >= ins[i] + lo[i]:  # a last window starting in the padding is dropped
                out -= 1
            extra[i] = builtins.max((out - 1) * st[i] + eff[i] - (ins[i] + lo[i] + hi[i]), 0)
    one = [1, 1]
    zero = [0, 0]
    return one + k, one + st, one + dil, zero + lo, zero + hi, zero + extra


_POOL_CHECK = all_checks(choice("auto_pad", _AUTO_PAD, "NOTSET"), choice("storage_order", (0,), 0))


@register("MaxPool", check=_POOL_CHECK)
def _max_pool(ctx: NodeCtx, x: Any) -> Any:
    """lax.reduce_window max (padding reads as -inf)"""
    if len(ctx.proto.output) > 1 and ctx.proto.output[1]:
        raise Unsupported("the Indices output of MaxPool is not supported")
    win, st, dil, lo, hi, extra = _pool_geometry(ctx, x)
    pad = [(a, b + c) for a, b, c in zip(lo, hi, extra)]
    return lax.reduce_window(x, "max", win, st, pad, None, dil)


@register("AveragePool", check=choice("auto_pad", _AUTO_PAD, "NOTSET"))
def _avg_pool(ctx: NodeCtx, x: Any) -> Any:
    """lax.reduce_window sum over a count of the cells each window reads (explicit padding
    counted with count_include_pad, the ceil_mode overhang never)"""
    win, st, dil, lo, hi, extra = _pool_geometry(ctx, x)
    r = len(x.shape)
    zero = anp.zeros((), np.dtype(x.dtype))
    xp = lax.pad(x, zero, lo, hi, [0] * r)
    total = lax.reduce_window(xp, "sum", win, st, [(0, e) for e in extra], None, dil)
    include = bool(ctx.attr("count_include_pad", 0))
    ones = lax.pad(anp.ones(x.shape, np.dtype(x.dtype)), const(zero, 1 if include else 0), lo, hi, [0] * r)
    count = lax.reduce_window(ones, "sum", win, st, [(0, e) for e in extra], None, dil)
    return total / count


@register("LpPool", check=choice("auto_pad", _AUTO_PAD, "NOTSET"))
def _lp_pool(ctx: NodeCtx, x: Any) -> Any:
    """(sum |x|^p)^(1/p) over each window"""
    p = ctx.attr("p", 2)
    win, st, dil, lo, hi, extra = _pool_geometry(ctx, x)
    pad = [(a, b + c) for a, b, c in zip(lo, hi, extra)]
    s = lax.reduce_window(anp.power(anp.abs(x), const(x, p)), "sum", win, st, pad, None, dil)
    return anp.power(s, const(x, 1.0 / p))


@register("GlobalAveragePool")
def _global_avg(ctx: NodeCtx, x: Any) -> Any:
    """axle.numpy.mean over the spatial dims"""
    return anp.astype(anp.mean(x, axis=tuple(range(2, len(x.shape))), keepdims=True), np.dtype(x.dtype))


@register("GlobalMaxPool")
def _global_max(ctx: NodeCtx, x: Any) -> Any:
    """axle.numpy.max over the spatial dims"""
    return anp.max(x, axis=tuple(range(2, len(x.shape))), keepdims=True)


@register("GlobalLpPool")
def _global_lp(ctx: NodeCtx, x: Any) -> Any:
    """(sum |x|^p)^(1/p) over the spatial dims"""
    p = ctx.attr("p", 2)
    s = anp.sum(anp.power(anp.abs(x), const(x, p)), axis=tuple(range(2, len(x.shape))), keepdims=True)
    return anp.power(s, const(x, 1.0 / p))


# -- normalizations


def _channel(v: Any, rank: int) -> Any:
    return anp.reshape(v, (1, -1) + (1,) * (rank - 2))


@register("BatchNormalization", check=choice("training_mode", (0,), 0))
def _batch_norm(ctx: NodeCtx, x: Any, scale: Any, b: Any, mean: Any, var: Any) -> Any:
    """inference form: (x - mean) / sqrt(var + eps) * scale + B per channel"""
    r = len(x.shape)
    dt = np.dtype(x.dtype)
    eps = const(anp.asarray(var) if not hasattr(var, "dtype") else var, ctx.attr("epsilon", 1e-5))
    inv = anp.astype(scale / anp.sqrt(var + eps), dt)
    shift = anp.astype(b, dt) - anp.astype(mean, dt) * inv
    return x * _channel(inv, r) + _channel(shift, r)


@register("InstanceNormalization")
def _instance_norm(ctx: NodeCtx, x: Any, scale: Any, b: Any) -> Any:
    """normalizes each (N, C) over the spatial dims"""
    r = len(x.shape)
    ax = tuple(range(2, r))
    m = anp.mean(x, axis=ax, keepdims=True)
    v = anp.mean(anp.square(x - m), axis=ax, keepdims=True)
    y = (x - m) / anp.sqrt(v + const(x, ctx.attr("epsilon", 1e-5)))
    return y * _channel(scale, r) + _channel(b, r)


@register("LayerNormalization", since=17)
def _layer_norm(ctx: NodeCtx, x: Any, scale: Any, b: Any = None) -> tuple[Any, Any, Any]:
    """normalizes over the dims from axis on (in float32 at least, stash_type), scale and bias
    broadcast; Mean and InvStdDev outputs"""
    r = len(x.shape)
    ax0 = norm_axes([ctx.attr("axis", -1)], r)[0]
    ax = tuple(range(ax0, r))
    dt = np.dtype(x.dtype)
    xf = anp.astype(x, np.float32) if dt.itemsize < 4 else x
    m = anp.mean(xf, axis=ax, keepdims=True)
    d = xf - m
    v = anp.mean(d * d, axis=ax, keepdims=True)
    inv = const(v, 1) / anp.sqrt(v + const(v, ctx.attr("epsilon", 1e-5)))
    y = anp.astype(d * inv, dt) * scale
    if b is not None:
        y = y + b
    return y, m, inv


@register("GroupNormalization", since=21)
def _group_norm(ctx: NodeCtx, x: Any, scale: Any, b: Any) -> Any:
    """normalizes each group of channels over it and the spatial dims; per-channel scale, bias"""
    g = ctx.attr("num_groups")
    shape = x.shape
    n = shape[0]
    xg = anp.reshape(x, (n, g, -1))
    m = anp.mean(xg, axis=2, keepdims=True)
    v = anp.mean(anp.square(xg - m), axis=2, keepdims=True)
    y = anp.reshape((xg - m) / anp.sqrt(v + const(x, ctx.attr("epsilon", 1e-5))), shape)
    return y * _channel(scale, len(shape)) + _channel(b, len(shape))


@register("LRN")
def _lrn(ctx: NodeCtx, x: Any) -> Any:
    """x / (bias + alpha / size * sum of squares over the neighbouring channels)^beta"""
    size = ctx.attr("size")
    r = len(x.shape)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = x * x
    win = [1, size] + [1] * (r - 2)
    s = lax.reduce_window(sq, "sum", win, [1] * r, [(0, 0), (lo, hi)] + [(0, 0)] * (r - 2))
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    return x / anp.power(const(x, bias) + const(x, alpha / size) * s, const(x, beta))


@register("MeanVarianceNormalization")
def _mvn(ctx: NodeCtx, x: Any) -> Any:
    """(x - mean) / sqrt(var + 1e-9) over axes (default 0, 2, 3)"""
    ax = tuple(norm_axes(ctx.ints("axes", [0, 2, 3]) or [0, 2, 3], len(x.shape)))
    m = anp.mean(x, axis=ax, keepdims=True)
    v = anp.mean(anp.square(x - m), axis=ax, keepdims=True)
    return (x - m) / anp.sqrt(v + const(x, 1e-9))


@register("Dropout", static=(2,))
def _dropout(ctx: NodeCtx, x: Any, ratio: Any = None, training: Any = None) -> tuple[Any, Any]:
    """inference: the identity and an all-true mask (training mode draws: not supported)"""
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        raise Unsupported("training_mode=True draws a random mask: not supported")
    return x, anp.ones(x.shape, bool)



# -- losses, newer activations and normalizations


def _nll(ctx: NodeCtx, logp: Any, target: Any, weight: Any) -> Any:
    """-logp[n, target, ...] * weight[target], 0 where target == ignore_index, reduced."""
    ignore = ctx.attr("ignore_index")
    t = anp.astype(target, np.int64)
    keep = anp.not_equal(t, np.int64(ignore)) if ignore is not None else None
    if keep is not None:
        t = anp.where(keep, t, np.int64(0))
    picked = anp.squeeze(anp.take_along_axis(logp, anp.expand_dims(t, 1), axis=1), axis=1)
    w = anp.take(weight, t, axis=0) if weight is not None else anp.ones(t.shape, np.dtype(logp.dtype))
    if keep is not None:
        w = anp.where(keep, w, const(w, 0))
    loss = -picked * w
    red = ctx.attr("reduction", "mean")
    if red == "none":
        return loss
    if red == "sum":
        return anp.sum(loss)
    return anp.sum(loss) / anp.sum(w)


_REDUCTIONS = choice("reduction", ("none", "sum", "mean"), "mean")


@register("NegativeLogLikelihoodLoss", check=_REDUCTIONS)
def _nll_loss(ctx: NodeCtx, x: Any, target: Any, weight: Any = None) -> Any:
    """a gather of the targets' entries (take_along_axis), weighted and reduced"""
    return _nll(ctx, x, target, weight)


@register("SoftmaxCrossEntropyLoss", check=_REDUCTIONS)
def _sce_loss(ctx: NodeCtx, x: Any, labels: Any, weight: Any = None) -> tuple[Any, Any]:
    """NegativeLogLikelihoodLoss of axle.nn.log_softmax over axis 1 (and the log-probabilities)"""
    logp = nn.log_softmax(x, axis=1)
    return _nll(ctx, logp, labels, weight), logp


@register("RMSNormalization", since=23)
def _rms_norm(ctx: NodeCtx, x: Any, scale: Any) -> Any:
    """x / sqrt(mean(x^2 over the dims from axis) + epsilon) * scale (in float32 at least)"""
    r = len(x.shape)
    ax = tuple(range(norm_axes([ctx.attr("axis", -1)], r)[0], r))
    dt = np.dtype(x.dtype)
    xf = anp.astype(x, np.float32) if dt.itemsize < 4 else x
    ms = anp.mean(xf * xf, axis=ax, keepdims=True)
    return anp.astype(xf / anp.sqrt(ms + const(ms, ctx.attr("epsilon", 1e-5))), dt) * scale


def _swish(x: Any, alpha: float) -> Any:
    return x * lax.logistic(x * const(x, alpha))


@register("Swish", since=24)
def _swish_op(ctx: NodeCtx, x: Any) -> Any:
    """x sigmoid(alpha x)"""
    return _swish(x, ctx.attr("alpha", 1.0))


@register("SwiGLU", since=28)
def _swiglu(ctx: NodeCtx, a: Any, b: Any) -> Any:
    """Swish(A) * B"""
    return _swish(a, ctx.attr("alpha", 1.0)) * b


@register("LpNormalization")
def _lp_norm(ctx: NodeCtx, x: Any) -> Any:
    """x / its Lp norm along axis (p 1 or 2; 0 where the norm is 0)"""
    p = ctx.attr("p", 2)
    ax = norm_axes([ctx.attr("axis", -1)], len(x.shape))[0]
    n = anp.sum(anp.abs(x), axis=ax, keepdims=True) if p == 1 else anp.sqrt(anp.sum(x * x, axis=ax, keepdims=True))
    zero = anp.equal(n, const(n, 0))
    return anp.where(zero, const(x, 0), x / anp.where(zero, const(n, 1), n))


# -- attention (opset 23)


def _heads(x: Any, n: int) -> Any:
    """(batch, seq, n * size) -> (batch, n, seq, size)."""
    b, s, h = x.shape
    return anp.transpose(anp.reshape(x, (b, s, n, h // n)), (0, 2, 1, 3))


def _additive(allowed: Any, dt: np.dtype) -> Any:
    """0 where allowed, -inf elsewhere (a select, never a product: 0 * -inf is NaN)."""
    return anp.where(allowed, np.asarray(0, dt), np.asarray(-np.inf, dt))


def _attention_bias(ctx: NodeCtx, dt: np.dtype, sq: int, skv: int, mask: Any, offset: Any,
                    nonpad: Any) -> Any:
    """The additive bias of the scores: the mask (a bool mask as 0 / -inf, padded to the key
    length), the offset-aligned causal frontier, the sliding window, the padding of keys
    beyond nonpad_kv_seqlen; None when there is none."""
    parts: list[Any] = []
    if mask is not None:
        pad = skv - mask.shape[-1]
        if pad > 0:
            fill = np.asarray(False) if np.dtype(mask.dtype) == np.bool_ else np.asarray(-np.inf, mask.dtype)
            mask = lax.pad(mask, fill, [0] * len(mask.shape), [0] * (len(mask.shape) - 1) + [pad],
                           [0] * len(mask.shape))
        parts.append(_additive(mask, dt) if np.dtype(mask.dtype) == np.bool_ else mask)
    i = np.arange(sq).reshape(sq, 1)
    j = np.arange(skv).reshape(1, skv)
    pos = i + offset  # the query's absolute position: (sq, 1), or (batch, 1, sq, 1) per batch
    if ctx.attr("is_causal", 0):
        parts.append(_additive(j <= pos, dt))
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if left >= 0:
        parts.append(_additive(pos - j <= left, dt))
    if right >= 0:
        parts.append(_additive(j - pos <= right, dt))
    if nonpad is not None:
        n = anp.reshape(anp.astype(nonpad, np.int64), (-1, 1, 1, 1))
        parts.append(_additive(np.arange(skv).reshape(1, 1, 1, skv) < n, dt))
    if not parts:
        return None
    bias = parts[0]
    for p in parts[1:]:
        bias = bias + p
    return bias


@register("Attention", since=23, check=choice("qk_matmul_output_mode", (0, 1, 2, 3), 0))
def _attention(ctx: NodeCtx, q: Any, k: Any, v: Any, mask: Any = None, past_k: Any = None, past_v: Any = None,
               nonpad: Any = None) -> tuple[Any, ...]:
    """softmax(Q K' * scale + bias) V over heads (3-D inputs split into heads), with the
    KV cache, grouped-query heads, softcap and the qk output modes"""
    rank3 = len(q.shape) == 3
    if rank3:
        q, k, v = _heads(q, ctx.attr("q_num_heads")), _heads(k, ctx.attr("kv_num_heads")), \
            _heads(v, ctx.attr("kv_num_heads"))
    dt = np.dtype(q.dtype)
    scale = ctx.attr("scale")
    s = const(q, np.sqrt(scale if scale is not None else 1 / np.sqrt(q.shape[3])))
    if past_k is not None:
        k, v = anp.concatenate([past_k, k], axis=2), anp.concatenate([past_v, v], axis=2)
    present_k, present_v = k, v
    sq, skv = q.shape[2], k.shape[2]
    if past_k is not None:
        offset: Any = past_k.shape[2]
    elif nonpad is not None:
        offset = anp.reshape(anp.astype(nonpad, np.int64), (-1, 1, 1, 1)) - np.int64(sq)
    else:
        offset = 0
    bias = _attention_bias(ctx, dt, sq, skv, mask, offset, nonpad)
    if q.shape[1] != k.shape[1]:  # grouped-query heads: each KV head serves consecutive Q heads
        reps = q.shape[1] // k.shape[1]
        k, v = anp.repeat(k, reps, axis=1), anp.repeat(v, reps, axis=1)
    qk = anp.matmul(q * s, anp.swapaxes(k * s, -1, -2))
    cap = ctx.attr("softcap", 0.0)
    if cap and cap > 0:
        qk = anp.tanh(qk / const(qk, cap)) * const(qk, cap)
    mode = ctx.attr("qk_matmul_output_mode", 0)
    w = qk + bias if bias is not None else qk
    qk_out = w if mode == 2 else qk
    prec = ctx.attr("softmax_precision")
    if prec is not None:
        w = anp.astype(w, dtype_of(prec, "Attention softmax_precision"))
    m = anp.max(w, axis=-1, keepdims=True)
    m = anp.where(anp.equal(m, const(m, -np.inf)), const(m, 0), m)
    e = anp.exp(w - m)
    tot = anp.sum(e, axis=-1, keepdims=True)
    p = e / anp.where(anp.equal(tot, const(tot, 0)), const(tot, 1), tot)
    if bias is not None:  # a row with no key to attend gives zeros, decided on the bias
        mb = anp.max(bias, axis=-1, keepdims=True)
        p = anp.where(anp.equal(mb, const(mb, -np.inf)), const(p, 0), p)
    if mode == 3:
        qk_out = p
    y = anp.matmul(anp.astype(p, dt), v)
    if rank3:
        y = anp.transpose(y, (0, 2, 1, 3))
        y = anp.reshape(y, (y.shape[0], y.shape[1], -1))
    return y, present_k, present_v, anp.astype(qk_out, dt)


@register("RotaryEmbedding", since=23)
def _rotary(ctx: NodeCtx, x: Any, cos: Any, sin: Any, pos: Any = None) -> Any:
    """rotates the first rotary_embedding_dim features of each head (halves or interleaved
    pairs) by the cached angles at position_ids"""
    shape = x.shape
    y = anp.transpose(x, (0, 2, 1, 3)) if len(shape) == 4 else \
        anp.reshape(x, (shape[0], shape[1], ctx.attr("num_heads"), -1))  # (batch, seq, heads, size)
    size = y.shape[3]
    dim = ctx.attr("rotary_embedding_dim", 0) or size
    rot, keep = y[..., :dim], y[..., dim:]
    if pos is not None:
        cos, sin = anp.take(cos, pos, axis=0), anp.take(sin, pos, axis=0)
    cos, sin = anp.expand_dims(cos, 2), anp.expand_dims(sin, 2)
    inter = ctx.attr("interleaved", 0)
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if inter else (rot[..., :dim // 2], rot[..., dim // 2:])
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if inter:
        rot = anp.reshape(anp.stack([real, imag], axis=-1), rot.shape)
    else:
        rot = anp.concatenate([real, imag], axis=-1)
    out = anp.concatenate([rot, keep], axis=-1)
    return anp.reshape(out, shape) if len(shape) == 3 else anp.transpose(out, (0, 2, 1, 3))


@register("Det")
def _det(ctx: NodeCtx, x: Any) -> Any:
    """axle.numpy.linalg.det over the last two dims"""
    return anp.linalg.det(x)


@register("Col2Im", since=18, static=(1, 2))
def _col2im(ctx: NodeCtx, x: Any, image_shape: Any, block_shape: Any) -> Any:
    """sums each column's block entries into the image: a scatter-add at host-computed
    pixel indices (entries landing in the padding dropped)"""
    img, blk = ints(image_shape), ints(block_shape)
    ns = len(img)
    dil = ctx.ints("dilations", [1] * ns) or [1] * ns
    st = ctx.ints("strides", [1] * ns) or [1] * ns
    pads = ctx.ints("pads", [0] * 2 * ns) or [0] * 2 * ns
    n, cb, length = x.shape
    kk = int(np.prod(blk))
    c = cb // kk
    counts = [(img[i] + pads[i] + pads[i + ns] - (dil[i] * (blk[i] - 1) + 1)) // st[i] + 1 for i in range(ns)]
    # per (block offset k, column l): the pixel each entry lands on, or -1 in the padding
    ks = np.stack(np.unravel_index(np.arange(kk), blk), axis=1)  # (kk, ns)
    ls = np.stack(np.unravel_index(np.arange(length), counts), axis=1)  # (L, ns)
    pos = ls[None, :, :] * np.asarray(st) + ks[:, None, :] * np.asarray(dil) - np.asarray(pads[:ns])  # (kk, L, ns)
    inside = np.all((pos >= 0) & (pos < np.asarray(img)), axis=2)
    flat = np.ravel_multi_index(tuple(np.clip(pos, 0, np.asarray(img) - 1).transpose(2, 0, 1)), img)
    target = np.where(inside, flat, int(np.prod(img)))  # one extra cell catches the padding
    cols = anp.reshape(x, (n, c, kk * length))
    out = anp.zeros((n, c, int(np.prod(img)) + 1), np.dtype(x.dtype))
    out = out.at[:, :, target.reshape(-1)].add(cols)
    return anp.reshape(out[:, :, :-1], (n, c, *img))


@register("CausalConvWithState", since=27, check=choice("activation", ("none", "silu", "swish"), "none"))
def _causal_conv(ctx: NodeCtx, x: Any, w: Any, b: Any = None, past: Any = None) -> tuple[Any, Any]:
    """a depthwise 1-D convolution over the past state (or zeros) followed by the input, the
    last k - 1 positions of that sequence as the new state; SiLU fused on request"""
    n, c, _ = x.shape
    k = w.shape[-1]
    if past is None:
        past = anp.zeros((n, c, k - 1), np.dtype(x.dtype))
    seq = anp.concatenate([past, x], axis=2)
    y = lax.conv_general_dilated(seq, w, [1], "VALID", None, None, feature_group_count=c)
    if b is not None:
        y = y + anp.reshape(b, (1, -1, 1))
    if ctx.attr("activation", "none") in ("silu", "swish"):
        y = _swish(y, 1.0)
    total = seq.shape[2]
    return y, seq[:, :, total - (k - 1):]
