"""Neural-network building blocks as decompositions into primitives (never new ops):
activations, softmax / log-softmax, cross-entropy, layer norm, dense, conv2d (im2col)
and pooling. Everything is differentiable with ``axle.grad`` and fuses under ``jit``."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import lax
from . import numpy as anp
from .errors import ArgumentError, DTypeError, ShapeError
from .frontend import checks
from .frontend.source import user_location
from .frontend.tracing import Tracer, aval_of, constant_value
from .frontend.validate import axis_arg, check_shape, size_arg, sizes_arg
from .ir.dtypes import supported_numpy_dtype
from .numpy._core import _is_array, _norm_axes

ArrayLike = Any


def _arr(x: ArrayLike) -> Any:
    return anp.asarray(x) if not _is_array(x) else x


def relu(x: ArrayLike) -> Any:
    """max(x, 0)."""
    x = _arr(x)
    return anp.maximum(x, np.asarray(0, x.dtype))


def sigmoid(x: ArrayLike) -> Any:
    """1 / (1 + exp(-x)) (the logistic primitive)."""
    x = _arr(x)
    if x.dtype.kind != "f":
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


def _pair(v: int | Sequence[int], fn: str, what: str, minimum: int = 1) -> tuple[int, int]:
    """A window / stride: one int or two, each >= minimum (a zero stride divides by zero)."""
    a, b = sizes_arg(v, 2, fn, what, minimum)
    return a, b


def _padding(padding: Any, size: tuple[int, int], window: tuple[int, int],
             stride: tuple[int, int], fn: str) -> tuple[tuple[int, int], tuple[int, int]]:
    if isinstance(padding, str):
        p = padding.upper()
        if p == "VALID":
            return (0, 0), (0, 0)
        if p == "SAME":
            out = []
            for n, k, s in zip(size, window, stride):
                o = -(-n // s)
                total = max((o - 1) * s + k - n, 0)
                out.append((total // 2, total - total // 2))
            return out[0], out[1]
        raise ArgumentError(f"{fn}: padding must be 'VALID', 'SAME', an int or pairs, got {padding!r}",
                            where=user_location())
    if hasattr(padding, "__index__"):
        p0 = size_arg(padding, fn, "padding")
        return (p0, p0), (p0, p0)
    if not isinstance(padding, (tuple, list)) or len(padding) != 2:
        raise ArgumentError(f"{fn}: padding must be 'VALID', 'SAME', an int or two pairs, got {padding!r}",
                            where=user_location())
    ph, pw = padding
    return _pair(ph, fn, "padding", 0), _pair(pw, fn, "padding", 0)


def _patches(x: Any, window: tuple[int, int], stride: tuple[int, int], pad: Any,
             pad_value: float, what: str) -> tuple[list[Any], int, int]:
    """The KH*KW strided views of x (NCHW) that im2col / pooling combine."""
    if x.ndim != 4:
        raise ShapeError(f"{what}: input must be NCHW (rank 4), got {aval_of(x)}", where=user_location())
    (pt, pb), (pl, pr) = pad
    if pt or pb or pl or pr:
        x = anp.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_value)
    _, _, h, w = x.shape
    kh, kw = window
    sh, sw = stride
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{what}: window {window} is larger than the padded input {aval_of(x)}",
                         where=user_location())
    views = []
    for i in range(kh):
        for j in range(kw):
            views.append(x[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw])
    return views, oh, ow


def conv2d(x: ArrayLike, w: ArrayLike, b: ArrayLike = None, stride: int | Sequence[int] = 1,
           padding: Any = "VALID") -> Any:
    """2-D convolution (cross-correlation, as in deep-learning libraries) by im2col.

    x: [N, C, H, W]; w: [O, C, KH, KW]; b: [O] or None. The KH*KW strided views of the
    padded input are stacked into patches [N, C*KH*KW, OH, OW] and contracted with the
    weights reshaped to [O, C*KH*KW] in one dot_general."""
    x, w = _arr(x), _arr(w)
    if w.ndim != 4 or x.ndim != 4 or x.shape[1] != w.shape[1]:
        raise ShapeError(f"conv2d: need x [N, C, H, W] and w [O, C, KH, KW] with equal C, got "
                         f"{aval_of(x)} and {aval_of(w)}", where=user_location())
    dt = anp.result_type(x, w)
    x, w = anp.astype(x, dt), anp.astype(w, dt)
    o, c, kh, kw = w.shape
    st = _pair(stride, "conv2d", "stride")
    pad = _padding(padding, x.shape[2:], (kh, kw), st, "conv2d")
    views, oh, ow = _patches(x, (kh, kw), st, pad, 0.0, "conv2d")
    n = x.shape[0]
    patches = anp.stack(views, axis=2)  # [N, C, KH*KW, OH, OW]
    patches = anp.reshape(patches, (n, c * kh * kw, oh, ow))
    out = lax.dot_general(patches, anp.reshape(w, (o, c * kh * kw)), (1,), (1,))  # [N, OH, OW, O]
    out = anp.transpose(out, (0, 3, 1, 2))
    if b is not None:
        out = out + anp.reshape(b, (1, o, 1, 1))
    return out


def max_pool(x: ArrayLike, window: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
             padding: Any = "VALID") -> Any:
    """Max over each window of an NCHW input: an elementwise max of the strided views."""
    x = _arr(x)
    win = _pair(window, "max_pool", "window")
    st = _pair(stride if stride is not None else window, "max_pool", "stride")
    pad = _padding(padding, x.shape[2:] if x.ndim == 4 else (0, 0), win, st, "max_pool")
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    views, _, _ = _patches(x, win, st, pad, lowest, "max_pool")
    out = views[0]
    for v in views[1:]:
        out = anp.maximum(out, v)
    return out


def avg_pool(x: ArrayLike, window: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None) -> Any:
    """Mean over each window of an NCHW input (VALID padding)."""
    x = _arr(x)
    win = _pair(window, "avg_pool", "window")
    st = _pair(stride if stride is not None else window, "avg_pool", "stride")
    views, _, _ = _patches(x, win, st, ((0, 0), (0, 0)), 0.0, "avg_pool")
    out = views[0]
    for v in views[1:]:
        out = out + v
    return out / float(len(views))
