"""Elementwise ONNX ops: arithmetic, comparisons, logic, math functions, activations,
Cast, Clip, Where. ONNX does not promote: both operands share a dtype (Pow and BitShift
aside), so axle.numpy's NumPy-2 promotion leaves the dtype as ONNX wants it; constants
made here take the operand's dtype."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import lax, nn
from .. import numpy as anp
from .table import NodeCtx, choice, dtype_of, register


def const(x: Any, v: Any) -> np.ndarray:
    """``v`` as a 0-d array of ``x``'s dtype (so that it never promotes ``x``)."""
    return np.asarray(v, dtype=np.dtype(x.dtype))


def _unary(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    return lambda ctx, x: fn(x)


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda ctx, a, b: fn(a, b)


def _variadic(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda ctx, *xs: functools.reduce(fn, xs)


def _same_float(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A float function kept in the operand's dtype (axle.numpy computes float16 as is)."""
    return lambda x: anp.astype(fn(x), np.dtype(x.dtype))


def _int_div(a: Any, b: Any) -> Any:
    # ONNX's integer Div truncates toward zero (C semantics, as the IR's divide)
    return lax.div(a, b) if np.dtype(a.dtype).kind in "iu" else anp.divide(a, b)


def _mod(ctx: NodeCtx, a: Any, b: Any) -> Any:
    # fmod=1: the sign of the dividend (C fmod); fmod=0: the sign of the divisor (Python %)
    return anp.fmod(a, b) if ctx.attr("fmod", 0) else anp.remainder(a, b)


def _pow(ctx: NodeCtx, a: Any, b: Any) -> Any:
    # the exponent may have another dtype; the result has the base's
    dt = np.dtype(a.dtype)
    if dt.kind in "iu":
        return anp.astype(anp.power(anp.astype(a, np.float64), anp.astype(b, np.float64)), dt)
    return anp.power(a, anp.astype(b, dt))


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": anp.add, "Sub": anp.subtract, "Mul": anp.multiply, "Div": _int_div,
    "And": anp.logical_and, "Or": anp.logical_or, "Xor": anp.logical_xor,
    "Equal": anp.equal, "Less": anp.less, "LessOrEqual": anp.less_equal, "Greater": anp.greater,
    "GreaterOrEqual": anp.greater_equal, "BitwiseAnd": anp.bitwise_and, "BitwiseOr": anp.bitwise_or,
    "BitwiseXor": anp.bitwise_xor,
}
_VARIADIC: dict[str, Callable[[Any, Any], Any]] = {"Max": anp.maximum, "Min": anp.minimum, "Sum": anp.add}


def _erf(x: Any) -> Any:
    return lax.erf(x)


def _round(x: Any) -> Any:
    return lax.round_nearest_even(x)


_UNARY: dict[str, Callable[[Any], Any]] = {
    "Abs": anp.abs, "Neg": anp.negative, "Floor": anp.floor, "Ceil": anp.ceil, "Sign": anp.sign,
    "Exp": _same_float(anp.exp), "Log": _same_float(anp.log), "Sqrt": _same_float(anp.sqrt),
    "Sin": _same_float(anp.sin), "Cos": _same_float(anp.cos), "Tan": _same_float(anp.tan),
    "Asin": _same_float(anp.arcsin), "Acos": _same_float(anp.arccos), "Atan": _same_float(anp.arctan),
    "Sinh": _same_float(anp.sinh), "Cosh": _same_float(anp.cosh), "Asinh": _same_float(anp.arcsinh),
    "Acosh": _same_float(anp.arccosh), "Atanh": _same_float(anp.arctanh), "Tanh": _same_float(anp.tanh),
    "Erf": _erf, "Round": _round, "Not": anp.logical_not, "BitwiseNot": anp.bitwise_invert,
    "IsNaN": anp.isnan, "Identity": lambda x: x,
    "Reciprocal": lambda x: anp.divide(const(x, 1), x),
    "Sigmoid": lambda x: lax.logistic(x),
    "Relu": nn.relu,
    "Softsign": lambda x: x / (const(x, 1) + anp.abs(x)),
    "Softplus": lambda x: anp.astype(anp.logaddexp(x, const(x, 0)), np.dtype(x.dtype)),
    "Mish": lambda x: x * anp.tanh(anp.logaddexp(x, const(x, 0))),
}

for _name, _fn in _BINARY.items():
    register(_name, doc=f"axle.numpy.{getattr(_fn, '__name__', _name)}")(_binary(_fn))
for _name, _fn in _VARIADIC.items():
    register(_name, doc=f"axle.numpy.{_fn.__name__} over the inputs")(_variadic(_fn))
_UNARY_DOCS = {"Relu": "axle.nn.relu (derivative 0 at x = 0, as ONNX Runtime's training gradient)"}
for _name, _fn in _UNARY.items():
    register(_name, doc=_UNARY_DOCS.get(_name, f"axle elementwise {_name.lower()}"))(_unary(_fn))
register("Mod", check=choice("fmod", (0, 1), 0), doc="axle.numpy.fmod / remainder")(_mod)
register("Pow", doc="axle.numpy.power in the base's dtype")(_pow)


@register("Mean")
def _mean(ctx: NodeCtx, *xs: Any) -> Any:
    """the sum of the inputs over their count"""
    return functools.reduce(anp.add, xs) / const(xs[0], len(xs))


@register("IsInf")
def _isinf(ctx: NodeCtx, x: Any) -> Any:
    """axle.numpy.isinf with detect_negative / detect_positive"""
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    inf = const(x, np.inf)
    if pos and neg:
        return anp.isinf(x)
    if pos:
        return anp.equal(x, inf)
    if neg:
        return anp.equal(x, -inf)
    return anp.zeros(x.shape, bool)


@register("BitShift", check=choice("direction", ("LEFT", "RIGHT"), None))
def _bitshift(ctx: NodeCtx, a: Any, b: Any) -> Any:
    """logical shifts of unsigned integers"""
    fn = anp.left_shift if ctx.attr("direction") == "LEFT" else anp.right_shift
    return fn(a, b)


@register("Cast", check=choice("saturate", (0, 1), 1))
def _cast(ctx: NodeCtx, x: Any) -> Any:
    """axle.numpy.astype"""
    dt = dtype_of(ctx.attr("to"), "Cast to")
    return anp.astype(x, dt)


@register("CastLike")
def _cast_like(ctx: NodeCtx, x: Any, like: Any) -> Any:
    """axle.numpy.astype to the second input's dtype"""
    return anp.astype(x, np.dtype(like.dtype))


@register("Clip")
def _clip(ctx: NodeCtx, x: Any, lo: Any = None, hi: Any = None) -> Any:
    """max(min(x, hi), lo) with optional bounds"""
    if lo is not None:
        x = anp.maximum(x, anp.astype(lo, np.dtype(x.dtype)))
    if hi is not None:
        x = anp.minimum(x, anp.astype(hi, np.dtype(x.dtype)))
    return x


@register("Where")
def _where(ctx: NodeCtx, c: Any, a: Any, b: Any) -> Any:
    """axle.numpy.where"""
    return anp.where(c, a, b)


@register("LeakyRelu")
def _leaky(ctx: NodeCtx, x: Any) -> Any:
    """x for x >= 0, alpha x below"""
    return anp.where(x >= const(x, 0), x, x * const(x, ctx.attr("alpha", 0.01)))


@register("PRelu")
def _prelu(ctx: NodeCtx, x: Any, slope: Any) -> Any:
    """x for x >= 0, slope x below (slope broadcast)"""
    return anp.where(x >= const(x, 0), x, x * slope)


@register("Elu")
def _elu(ctx: NodeCtx, x: Any) -> Any:
    """alpha (exp(x) - 1) below zero"""
    return anp.where(x > const(x, 0), x, const(x, ctx.attr("alpha", 1.0)) * anp.astype(anp.expm1(x), x.dtype))


@register("Celu")
def _celu(ctx: NodeCtx, x: Any) -> Any:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))"""
    a = const(x, ctx.attr("alpha", 1.0))
    return anp.maximum(x, const(x, 0)) + anp.minimum(const(x, 0), a * anp.astype(anp.expm1(x / a), x.dtype))


@register("Selu")
def _selu(ctx: NodeCtx, x: Any) -> Any:
    """gamma (x or alpha (exp(x) - 1))"""
    a = const(x, ctx.attr("alpha", 1.67326319217681884765625))
    g = const(x, ctx.attr("gamma", 1.05070102214813232421875))
    return g * anp.where(x > const(x, 0), x, a * anp.astype(anp.expm1(x), x.dtype))


@register("ThresholdedRelu")
def _thresholded(ctx: NodeCtx, x: Any) -> Any:
    """x where x > alpha, else 0"""
    return anp.where(x > const(x, ctx.attr("alpha", 1.0)), x, const(x, 0))


@register("HardSigmoid")
def _hard_sigmoid(ctx: NodeCtx, x: Any) -> Any:
    """max(0, min(1, alpha x + beta))"""
    y = const(x, ctx.attr("alpha", 0.2)) * x + const(x, ctx.attr("beta", 0.5))
    return anp.minimum(anp.maximum(y, const(x, 0)), const(x, 1))


@register("HardSwish")
def _hard_swish(ctx: NodeCtx, x: Any) -> Any:
    """x hardsigmoid(x) with alpha 1/6, beta 0.5"""
    y = x * const(x, 1 / 6) + const(x, 0.5)
    return x * anp.minimum(anp.maximum(y, const(x, 0)), const(x, 1))


@register("Shrink")
def _shrink(ctx: NodeCtx, x: Any) -> Any:
    """x + bias below -lambd, x - bias above lambd, else 0"""
    lam, bias = const(x, ctx.attr("lambd", 0.5)), const(x, ctx.attr("bias", 0.0))
    return anp.where(x < -lam, x + bias, anp.where(x > lam, x - bias, const(x, 0)))


@register("Gelu", check=choice("approximate", ("none", "tanh"), "none"), since=20)
def _gelu(ctx: NodeCtx, x: Any) -> Any:
    """the exact (erf) or tanh form of GELU"""
    half, one = const(x, 0.5), const(x, 1)
    if ctx.attr("approximate", "none") == "tanh":
        c = const(x, np.sqrt(2 / np.pi))
        return half * x * (one + anp.tanh(c * (x + const(x, 0.044715) * x * x * x)))
    return half * x * (one + lax.erf(x * const(x, 1 / np.sqrt(2))))
