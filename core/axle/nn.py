"""Neural-network building blocks: activations, softmax / log-softmax, cross-entropy,
layer, batch and group norm, dense and dropout as decompositions into primitives;
convolutions and pooling on the ``convolution`` and ``reduce_window`` primitives.
Everything is differentiable with ``axle.grad`` and fuses under ``jit``."""
from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import lax, random
from . import numpy as anp
from .autodiff.custom import custom_jvp
from .errors import ArgumentError, DTypeError, ShapeError
from .frontend import checks
from .frontend.source import user_location
from .frontend.tracing import Tracer, aval_of, constant_value
from .frontend.validate import axis_arg, check_shape, size_arg, sizes_arg
from .ir.dtypes import is_float_numpy, supported_numpy_dtype
from .numpy._core import _is_array, _norm_axes

ArrayLike = Any


def _arr(x: ArrayLike) -> Any:
    return anp.asarray(x) if not _is_array(x) else x


@custom_jvp
def _relu(x: Any) -> Any:
    return anp.maximum(x, np.asarray(0, x.dtype))


# The derivative is 0 at x == 0 (as jax.nn.relu, torch.relu and ONNX Runtime's training
# gradient), not maximum's even split of ties; it reads the forward's output (out > 0 iff
# x > 0, NaN included), so the backward needs no value from before the ReLU.
_relu.defjvps(lambda t, out, x: anp.where(out > 0, t, np.asarray(0, t.dtype)))


def relu(x: ArrayLike) -> Any:
    """max(x, 0); its derivative is 1 where x > 0 and 0 elsewhere (0 at x == 0, as jax)."""
    return _relu(_arr(x))


def sigmoid(x: ArrayLike) -> Any:
    """1 / (1 + exp(-x)) (the logistic primitive)."""
    x = _arr(x)
    if not is_float_numpy(x.dtype):
        x = anp.astype(x, np.float64)
    return lax.logistic(x)


def softplus(x: ArrayLike) -> Any:
    return anp.logaddexp(x, 0.0)


def gelu(x: ArrayLike) -> Any:
    """The tanh approximation of GELU."""
    x = _arr(x)
    c = np.sqrt(2 / np.pi)
    return 0.5 * x * (1.0 + anp.tanh(c * (x + 0.044715 * x * x * x)))


def _finite_max(x: Any, axis: Any) -> Any:
    """The max along axis (kept), replaced by 0 where it is +-inf or nan: shifting by an
    infinite max would turn inf - inf into nan where the unshifted formula is exact
    (logsumexp([inf, 1]) = inf, logsumexp([-inf, -inf]) = -inf, as JAX does)."""
    m = anp.max(x, axis=axis, keepdims=True)
    return anp.where(anp.isfinite(m), m, np.asarray(0, m.dtype))


def log_softmax(x: ArrayLike, axis: int = -1) -> Any:
    """x - logsumexp(x) along axis, shifted by the (finite) max for stability."""
    x = _arr(x)
    shifted = x - _finite_max(x, axis)
    return shifted - anp.log(anp.sum(anp.exp(shifted), axis=axis, keepdims=True))


def softmax(x: ArrayLike, axis: int = -1) -> Any:
    x = _arr(x)
    e = anp.exp(x - _finite_max(x, axis))
    return e / anp.sum(e, axis=axis, keepdims=True)


def logsumexp(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    x = _arr(x)
    m = _finite_max(x, axis)
    out = anp.log(anp.sum(anp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else anp.squeeze(out, axis=axis)


def one_hot(labels: ArrayLike, num_classes: int, dtype: Any = np.float32) -> Any:
    """bool/float [..., num_classes]: labels compared with an iota. A label outside
    [0, num_classes) (negative ones included: no wrapping) gives an all-zero row, as in
    JAX; ``--check_indices`` turns that into an OutOfBoundsError."""
    labels = _arr(labels)
    if labels.dtype.kind not in "iu":
        raise DTypeError(f"one_hot: labels must be integers, got {aval_of(labels)}", where=user_location())
    n = size_arg(num_classes, "one_hot", "num_classes")
    check_shape(labels.shape + (n,), "one_hot", np.dtype(dtype).itemsize if supported_numpy_dtype(dtype) else 8)
    _check_labels("one_hot", labels, n, checks.enabled())
    shape = labels.shape + (n,)
    lab = lax.broadcast_in_dim(anp.astype(labels, np.int64), shape, tuple(range(labels.ndim)))
    hit = lax.compare(lab, lax.iota(np.int64, shape, len(shape) - 1), "eq")
    return anp.astype(hit, dtype)


def _check_labels(op: str, labels: Any, n: int, concrete_too: bool) -> None:
    """Class ids outside [0, n): concrete ones raise when ``concrete_too``, traced ones
    add a --check_indices flag."""
    msg = f"{op}: a label is out of range [0, {n}) (labels {aval_of(labels)})"
    known = constant_value(labels) if isinstance(labels, Tracer) else labels
    if known is not None:
        if concrete_too:
            host = np.asarray(known)
            checks.raise_now((host < 0) | (host >= n), msg)
    elif checks.enabled():
        checks.add_index_check((labels < 0) | (labels >= n), msg)


def cross_entropy(logits: ArrayLike, labels: ArrayLike, axis: int = -1, reduction: str = "mean") -> Any:
    """Softmax cross-entropy from logits. ``labels`` are integer class ids (shape of
    logits without ``axis``) or one-hot / probability rows (shape of logits).
    ``reduction``: "mean" (over examples), "sum" or "none".

    A class id outside [0, C) is an error: concrete labels raise OutOfBoundsError at once;
    traced ones (inside jit) give a nan loss for that example (never a silent 0), and
    ``--check_indices`` raises instead."""
    logits = _arr(logits)
    labels = _arr(labels)
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ArgumentError(f"cross_entropy: reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}",
                            where=user_location())
    ax = axis_arg(axis, logits.ndim, "cross_entropy", f"{aval_of(logits)}")
    if labels.dtype.kind in "iu":
        want = logits.shape[:ax] + logits.shape[ax + 1:]
        if labels.shape != want:
            raise ShapeError(f"cross_entropy: integer labels {aval_of(labels)} must have shape {list(want)} "
                             f"for logits {aval_of(logits)}", where=user_location())
        n = logits.shape[ax]
        _check_labels("cross_entropy", labels, n, True)
        # the label's log-probability, read with a gather (no one-hot of the classes); a
        # traced label outside [0, n) (negative ones included: they are not class ids) is NaN
        picked = anp.take_along_axis(log_softmax(logits, axis=ax), anp.expand_dims(labels, ax), axis=ax, mode="clip")
        per_example = -anp.squeeze(picked, axis=ax)
        if isinstance(labels, Tracer):
            valid = (labels >= 0) & (labels < n)
            per_example = anp.where(valid, per_example, np.asarray(np.nan, per_example.dtype))
    else:
        if labels.shape != logits.shape:
            raise ShapeError(f"cross_entropy: one-hot labels {aval_of(labels)} must match logits "
                             f"{aval_of(logits)}", where=user_location())
        target = anp.astype(labels, logits.dtype)
        per_example = -anp.sum(target * log_softmax(logits, axis=ax), axis=ax)
    return _REDUCTIONS[reduction](per_example)


#: cross_entropy's reduction of the per-example losses
_REDUCTIONS: dict[str, Any] = {"mean": lambda v: anp.mean(v), "sum": lambda v: anp.sum(v), "none": lambda v: v}


def layer_norm(x: ArrayLike, gamma: ArrayLike = None, beta: ArrayLike = None, axis: Any = -1,
               eps: float = 1e-5) -> Any:
    """(x - mean) / sqrt(var + eps) * gamma + beta over ``axis``.

    Mean and variance come from two *sibling* reductions of x (sum x and sum x*x), so the
    optimizer's multi-output fusion computes both in one pass over x."""
    x = _arr(x)
    axes = _norm_axes(axis, x.ndim, "layer_norm", x)
    n = float(np.prod([x.shape[a] for a in axes]))
    s1 = anp.sum(x, axis=axes, keepdims=True)
    s2 = anp.sum(x * x, axis=axes, keepdims=True)
    mean = s1 / n
    var = anp.maximum(s2 / n - mean * mean, 0.0)  # E[x^2]-E[x]^2 may round below 0
    y = (x - mean) * lax.rsqrt(var + np.asarray(eps, var.dtype))
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y


def dense(x: ArrayLike, w: ArrayLike, b: ArrayLike = None) -> Any:
    """x @ w (+ b): w is [in, out]."""
    y = anp.matmul(x, w)
    return y if b is None else y + b


#: channels-first and channels-last layouts of 1-, 2- and 3-D inputs, and their kernels
#: default layouts (PyTorch's OIHW for channels first, TensorFlow's HWIO for channels last)
_LAYOUTS = {
    "NCW": "OIW", "NCHW": "OIHW", "NCDHW": "OIDHW",
    "NWC": "WIO", "NHWC": "HWIO", "NDHWC": "DHWIO",
}


def _layout(layout: str, x: Any, fn: str) -> tuple[str, int]:
    """The input layout (checked against x's rank) and its number of spatial dims."""
    if layout not in _LAYOUTS:
        raise ArgumentError(f"{fn}: layout {layout!r} must be one of {', '.join(_LAYOUTS)}", where=user_location())
    if x.ndim != len(layout):
        raise ShapeError(f"{fn}: a {layout} input has rank {len(layout)}, got {aval_of(x)}", where=user_location())
    return layout, len(layout) - 2


def _spatial(layout: str) -> list[int]:
    return [i for i, ch in enumerate(layout) if ch not in "NC"]


def _padding(padding: Any, ns: int, fn: str) -> Any:
    """'VALID' / 'SAME' / an int (every side) / one int or (low, high) pair per spatial dim."""
    if isinstance(padding, str):
        if padding.upper() not in ("VALID", "SAME"):
            raise ArgumentError(f"{fn}: padding must be 'VALID', 'SAME', an int or pairs, got {padding!r}",
                                where=user_location())
        return padding.upper()
    if hasattr(padding, "__index__"):
        p0 = size_arg(padding, fn, "padding")
        return [(p0, p0)] * ns
    if not isinstance(padding, (tuple, list)) or len(padding) != ns:
        raise ArgumentError(f"{fn}: padding must be 'VALID', 'SAME', an int or {ns} pairs, got {padding!r}",
                            where=user_location())
    return [sizes_arg(p, 2, fn, "padding", 0) for p in padding]


def conv(x: ArrayLike, w: ArrayLike, b: ArrayLike = None, stride: int | Sequence[int] = 1, padding: Any = "VALID",
         dilation: int | Sequence[int] = 1, groups: int = 1, layout: str = "NCHW",
         kernel_layout: str | None = None, *, _fn: str = "conv") -> Any:
    """N-D convolution (cross-correlation, as deep-learning libraries define it) on the
    ``convolution`` primitive: 1-, 2- or 3-D by the layout (``NCW``, ``NCHW``, ``NCDHW`` or
    the channels-last ``NWC``, ``NHWC``, ``NDHWC``; a layout, never a transpose). The
    kernel is ``OIHW``-style for channels-first inputs and ``HWIO``-style for channels-last
    ones unless ``kernel_layout`` says otherwise; ``groups`` > 1 is a grouped (depthwise when
    it equals the channels) convolution; ``b`` is one bias per output channel."""
    fn = _fn
    x, w = _arr(x), _arr(w)
    layout, ns = _layout(layout, x, fn)
    klayout = kernel_layout or _LAYOUTS[layout]
    if len(klayout) != len(layout) or w.ndim != len(klayout):
        raise ShapeError(f"{fn}: a {layout} input needs a rank-{len(layout)} kernel ({klayout}), got {aval_of(w)}",
                         where=user_location())
    dt = anp.result_type(x, w)
    x, w = anp.astype(x, dt), anp.astype(w, dt)
    st = sizes_arg(stride, ns, fn, "stride", 1)
    dil = sizes_arg(dilation, ns, fn, "dilation", 1)
    groups = size_arg(groups, fn, "groups", 1)
    c = x.shape[layout.index("C")]
    ci = w.shape[klayout.index("I")]
    if c != ci * groups:
        raise ShapeError(f"{fn}: the input has {c} channels but the kernel {aval_of(w)} ({klayout}) reads {ci} "
                         f"per group x {groups} groups", where=user_location())
    out = lax.conv_general_dilated(x, w, st, _padding(padding, ns, fn), None, dil, (layout, klayout, layout),
                                   feature_group_count=groups)
    _check_window_fits(fn, x, out, layout, f"the kernel {aval_of(w)} ({klayout}, dilation {dil})")
    if b is not None:
        shape = [1] * len(layout)
        shape[layout.index("C")] = -1
        out = out + anp.reshape(_arr(b), shape)
    return out


def conv2d(x: ArrayLike, w: ArrayLike, b: ArrayLike = None, stride: int | Sequence[int] = 1,
           padding: Any = "VALID") -> Any:
    """2-D convolution of x [N, C, H, W] with w [O, C, KH, KW] (+ b [O]): ``conv`` in NCHW."""
    x, w = _arr(x), _arr(w)
    if w.ndim != 4 or x.ndim != 4 or x.shape[1] != w.shape[1]:
        raise ShapeError(f"conv2d: need x [N, C, H, W] and w [O, C, KH, KW] with equal C, got "
                         f"{aval_of(x)} and {aval_of(w)}", where=user_location())
    return conv(x, w, b, stride, padding, _fn="conv2d")


def conv_transpose(x: ArrayLike, w: ArrayLike, b: ArrayLike = None, stride: int | Sequence[int] = 1,
                   padding: Any = "VALID", dilation: int | Sequence[int] = 1, layout: str = "NCHW",
                   kernel_layout: str | None = None) -> Any:
    """The transposed ("fractionally strided") convolution, as ``jax.lax.conv_transpose``
    without kernel flipping: the input is dilated by ``stride``, so a 2x upsampling is
    ``stride=2``; "SAME" gives ``in * stride`` outputs per spatial dim."""
    x, w = _arr(x), _arr(w)
    layout, ns = _layout(layout, x, "conv_transpose")
    klayout = kernel_layout or _LAYOUTS[layout]
    dt = anp.result_type(x, w)
    x, w = anp.astype(x, dt), anp.astype(w, dt)
    st = sizes_arg(stride, ns, "conv_transpose", "stride", 1)
    dil = sizes_arg(dilation, ns, "conv_transpose", "dilation", 1)
    out = lax.conv_transpose(x, w, st, _padding(padding, ns, "conv_transpose"), dil, (layout, klayout, layout))
    if b is not None:
        shape = [1] * len(layout)
        shape[layout.index("C")] = -1
        out = out + anp.reshape(_arr(b), shape)
    return out


def _check_window_fits(fn: str, x: Any, out: Any, layout: str, window: str) -> Any:
    """Deep-learning libraries refuse a window larger than the padded input (the primitives
    would give an empty result): so does axle.nn."""
    sp = _spatial(layout)
    if any(out.shape[d] == 0 for d in sp) and all(x.shape[d] > 0 for d in sp):
        raise ShapeError(f"{fn}: the window of {window} is larger than the padded input {aval_of(x)}",
                         where=user_location())
    return out


def _pool_window(x: Any, layout: str, window: Any, stride: Any, fn: str) -> tuple[list[int], list[int]]:
    """Window and strides over all of x's dims (1 on N and C)."""
    ns = len(layout) - 2
    win = sizes_arg(window, ns, fn, "window", 1)
    st = sizes_arg(stride if stride is not None else window, ns, fn, "stride", 1)
    full_win, full_st = [1] * x.ndim, [1] * x.ndim
    for d, k, s in zip(_spatial(layout), win, st):
        full_win[d], full_st[d] = k, s
    return full_win, full_st


def _full_padding(x: Any, layout: str, padding: Any, fn: str) -> Any:
    pad = _padding(padding, len(layout) - 2, fn)
    if isinstance(pad, str):
        return pad
    full = [(0, 0)] * x.ndim
    for d, p in zip(_spatial(layout), pad):
        full[d] = p
    return full


def max_pool(x: ArrayLike, window: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
             padding: Any = "VALID", layout: str = "NCHW") -> Any:
    """Max over each window (``reduce_window``); padding never wins (it reads as -inf)."""
    x = _arr(x)
    layout, _ = _layout(layout, x, "max_pool")
    win, st = _pool_window(x, layout, window, stride, "max_pool")
    out = lax.reduce_window(x, "max", win, st, _full_padding(x, layout, padding, "max_pool"))
    return _check_window_fits("max_pool", x, out, layout, f"size {tuple(win)}")


def avg_pool(x: ArrayLike, window: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
             padding: Any = "VALID", layout: str = "NCHW", count_include_pad: bool = True) -> Any:
    """Mean over each window (``reduce_window`` sum / count). With padding, the count
    includes the padded cells unless ``count_include_pad=False`` (PyTorch's option)."""
    x = _arr(x)
    layout, _ = _layout(layout, x, "avg_pool")
    if not is_float_numpy(x.dtype):
        x = anp.astype(x, np.float32)
    win, st = _pool_window(x, layout, window, stride, "avg_pool")
    pad = _full_padding(x, layout, padding, "avg_pool")
    total = _check_window_fits("avg_pool", x, lax.reduce_window(x, "sum", win, st, pad), layout, f"size {tuple(win)}")
    if count_include_pad or pad == "VALID":
        return total / float(np.prod(win))
    ones = anp.ones(x.shape, x.dtype)
    return total / lax.reduce_window(ones, "sum", win, st, pad)


def adaptive_avg_pool(x: ArrayLike, output_size: int | Sequence[int], layout: str = "NCHW") -> Any:
    """Average pooling to a fixed output size (PyTorch's adaptive pooling): output index i
    of a dim of size n averages inputs floor(i*n/out) .. ceil((i+1)*n/out) - 1. Each
    spatial dim is one small averaging matrix, contracted with a dot."""
    x = _arr(x)
    layout, ns = _layout(layout, x, "adaptive_avg_pool")
    outs = sizes_arg(output_size, ns, "adaptive_avg_pool", "output_size", 1)
    if not is_float_numpy(x.dtype):
        x = anp.astype(x, np.float32)
    for d, o in zip(_spatial(layout), outs):
        n = x.shape[d]
        m = np.zeros((o, n), x.dtype)
        for i in range(o):
            lo, hi = (i * n) // o, -(-((i + 1) * n) // o)
            m[i, lo:hi] = 1.0 / builtins.max(hi - lo, 1)
        y = lax.dot_general(x, anp.asarray(m), (d,), (1,))  # the pooled dim moves last
        x = anp.moveaxis(y, -1, d)
    return x


def _channel_axis(x: Any, axis: int, fn: str) -> int:
    return axis_arg(axis, x.ndim, fn)


def batch_norm(x: ArrayLike, gamma: ArrayLike = None, beta: ArrayLike = None, running_mean: ArrayLike = None,
               running_var: ArrayLike = None, *, training: bool = True, momentum: float = 0.1, eps: float = 1e-5,
               axis: int = 1) -> tuple[Any, Any, Any]:
    """Batch normalization over every dim but the channel ``axis``. Returns
    ``(y, running_mean, running_var)``: in training, y uses the batch statistics and the
    running ones move by ``momentum`` toward them (the variance unbiased, as PyTorch; the
    batch statistics themselves when no running ones are given); in inference
    (``training=False``), y uses the running statistics, returned unchanged."""
    x = _arr(x)
    if not is_float_numpy(x.dtype):
        x = anp.astype(x, np.float32)
    c = _channel_axis(x, axis, "batch_norm")
    axes = tuple(i for i in range(x.ndim) if i != c)
    shape = [1] * x.ndim
    shape[c] = x.shape[c]
    if training:
        n = float(np.prod([x.shape[a] for a in axes]))
        mean = anp.mean(x, axis=axes)
        var = anp.mean(anp.square(x - anp.reshape(mean, shape)), axis=axes)
        if running_mean is not None and running_var is not None:
            unbiased = var * (n / builtins.max(n - 1.0, 1.0))
            new_mean = (1 - momentum) * _arr(running_mean) + momentum * mean
            new_var = (1 - momentum) * _arr(running_var) + momentum * unbiased
        else:
            new_mean, new_var = mean, var
    else:
        if running_mean is None or running_var is None:
            raise ArgumentError("batch_norm: inference (training=False) needs running_mean and running_var",
                                where=user_location())
        mean, var = _arr(running_mean), _arr(running_var)
        new_mean, new_var = mean, var
    y = (x - anp.reshape(mean, shape)) * lax.rsqrt(anp.reshape(var, shape) + np.asarray(eps, x.dtype))
    if gamma is not None:
        y = y * anp.reshape(_arr(gamma), shape)
    if beta is not None:
        y = y + anp.reshape(_arr(beta), shape)
    return y, new_mean, new_var


def group_norm(x: ArrayLike, num_groups: int, gamma: ArrayLike = None, beta: ArrayLike = None, eps: float = 1e-5,
               axis: int = 1) -> Any:
    """Group normalization: the channels (``axis``) split into ``num_groups`` groups, each
    normalized over its channels and every dim after the batch (dim 0)."""
    x = _arr(x)
    if not is_float_numpy(x.dtype):
        x = anp.astype(x, np.float32)
    c = _channel_axis(x, axis, "group_norm")
    g = size_arg(num_groups, "group_norm", "num_groups", 1)
    ch = x.shape[c]
    if ch % g:
        raise ShapeError(f"group_norm: {ch} channels do not split into {g} groups", where=user_location())
    xm = anp.moveaxis(x, c, 1)
    moved = xm.shape
    grouped = anp.reshape(xm, (moved[0], g, -1))
    mean = anp.mean(grouped, axis=2, keepdims=True)
    var = anp.mean(anp.square(grouped - mean), axis=2, keepdims=True)
    y = anp.moveaxis(anp.reshape((grouped - mean) * lax.rsqrt(var + np.asarray(eps, x.dtype)), moved), 1, c)
    shape = [1] * x.ndim
    shape[c] = ch
    if gamma is not None:
        y = y * anp.reshape(_arr(gamma), shape)
    if beta is not None:
        y = y + anp.reshape(_arr(beta), shape)
    return y


def dropout(key: Any, x: ArrayLike, rate: float, training: bool = True) -> Any:
    """Zeroes each element with probability ``rate`` and scales the rest by 1 / (1 - rate)
    (inverted dropout); the identity when not training or when rate is 0."""
    x = _arr(x)
    if not 0.0 <= float(rate) < 1.0:
        raise ArgumentError(f"dropout: rate must be in [0, 1), got {rate!r}", where=user_location())
    if not training or rate == 0:
        return x
    keep = random.bernoulli(key, 1.0 - float(rate), x.shape)
    return anp.where(keep, x / np.asarray(1.0 - float(rate), x.dtype), np.asarray(0, x.dtype))
