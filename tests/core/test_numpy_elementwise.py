"""The array API standard's elementwise functions in axle.numpy against NumPy, under jit on
every installed device, on inputs with NaN, ±inf, ±0.0, huge, tiny and subnormal values:
values within a few ulps, NaN where NumPy has NaN, and the signs of zeros and infinities
exactly."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.errors import DTypeError

FLOATS = (np.float16, np.float32, np.float64)


def special(dt: type) -> np.ndarray:
    f = np.finfo(dt)
    v = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.999, -0.999, 1.001, 3.0, -7.5,
         1e-3, -1e-3, 30.0, -30.0, 100.0, float(f.max), -float(f.max), float(f.tiny), -float(f.tiny),
         float(f.smallest_subnormal), -float(f.smallest_subnormal), float(f.max) ** 0.5, 1e4, -1e4, 1e-6]
    rng = np.random.default_rng(5)
    with np.errstate(all="ignore"):
        return np.concatenate([np.array(v), rng.standard_normal(40) * 3, rng.uniform(-1, 1, 20)]).astype(dt)


#: name -> (axle.numpy function, NumPy reference); NumPy's names where they differ
UNARY = {
    "acos": (anp.acos, np.arccos), "acosh": (anp.acosh, np.arccosh), "asin": (anp.asin, np.arcsin),
    "asinh": (anp.asinh, np.arcsinh), "atan": (anp.atan, np.arctan), "atanh": (anp.atanh, np.arctanh),
    "cosh": (anp.cosh, np.cosh), "sinh": (anp.sinh, np.sinh), "tan": (anp.tan, np.tan), "tanh": (anp.tanh, np.tanh),
    "expm1": (anp.expm1, np.expm1), "log1p": (anp.log1p, np.log1p), "log2": (anp.log2, np.log2),
    "log10": (anp.log10, np.log10), "cbrt": (anp.cbrt, np.cbrt), "trunc": (anp.trunc, np.trunc),
    "round": (anp.round, np.round), "rint": (anp.rint, np.rint), "sign": (anp.sign, np.sign),
    "reciprocal": (anp.reciprocal, np.reciprocal), "square": (anp.square, np.square),
    "positive": (anp.positive, np.positive), "signbit": (anp.signbit, np.signbit),
    "isfinite": (anp.isfinite, np.isfinite), "isinf": (anp.isinf, np.isinf), "isnan": (anp.isnan, np.isnan),
}
BINARY = {
    "atan2": (anp.atan2, np.arctan2), "hypot": (anp.hypot, np.hypot), "copysign": (anp.copysign, np.copysign),
    "nextafter": (anp.nextafter, np.nextafter), "logaddexp": (anp.logaddexp, np.logaddexp),
    "pow": (anp.pow, np.power), "maximum": (anp.maximum, np.maximum), "minimum": (anp.minimum, np.minimum),
    "remainder": (anp.remainder, np.remainder), "floor_divide": (anp.floor_divide, np.floor_divide),
}
#: max error in units of the dtype's epsilon times |expected| (plus the same in absolute
#: terms near zero): decompositions chain a few ops, each within a few ulps
ULPS = 16


def _pairs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = x[:31]  # the special values, every pair
    a, b = np.meshgrid(k, k)
    return a.ravel(), b.ravel()


def _compare(name: str, got: np.ndarray, want: np.ndarray, dev: str, scale: np.ndarray | None = None) -> None:
    """``scale``: the magnitude errors are relative to where the result cancels (NumPy's
    own formula loses the same digits there), default |want|."""
    got, want = np.asarray(got), np.asarray(want)
    what = f"{name} on {dev}"
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.dtype}{got.shape} vs {want.dtype}"
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    eps = float(np.finfo(want.dtype).eps)
    tiny = float(np.finfo(want.dtype).tiny)
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaN positions")
    exact = np.isinf(w) | (w == 0)
    np.testing.assert_array_equal(g[exact], w[exact], err_msg=f"{what}: zeros and infinities")
    np.testing.assert_array_equal(np.signbit(g[exact]), np.signbit(w[exact]), err_msg=f"{what}: signs")
    ok = ~np.isnan(w) & ~exact
    err = np.abs(g[ok] - w[ok])
    mag = np.abs(w) if scale is None else np.maximum(np.abs(w), np.abs(scale).astype(np.float64))
    bound = ULPS * eps * mag[ok] + ULPS * tiny
    assert np.all(err <= bound), (f"{what}: worst {float(np.max(err / np.maximum(np.abs(w[ok]), tiny)) / eps):.1f} "
                                  f"eps at inputs {np.flatnonzero(ok)[np.argmax(err - bound)]}")


def _devices() -> list[str]:
    return [d.name for d in axle.devices()]


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dev", _devices())
def test_unary_functions_match_numpy(dev: str, dt: type) -> None:
    x = special(dt)
    fns = list(UNARY.values())
    with np.errstate(all="ignore"):
        want = [np.asarray(ref(x)) for _, ref in fns]
    with axle.device(dev):
        got = axle.jit(lambda v: tuple(f(v) for f, _ in fns))(x)
    for name, g, w in zip(UNARY, got, want, strict=True):
        _compare(f"{name}({np.dtype(dt).name})", g, w, dev)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dev", _devices())
def test_binary_functions_match_numpy(dev: str, dt: type) -> None:
    a, b = _pairs(special(dt))
    fns = list(BINARY.values())
    with np.errstate(all="ignore"):
        want = [np.asarray(ref(a, b)) for _, ref in fns]
    with axle.device(dev):
        got = axle.jit(lambda u, v: tuple(f(u, v) for f, _ in fns))(a, b)
    for name, g, w in zip(BINARY, got, want, strict=True):
        if name in ("maximum", "minimum"):  # NumPy picks either zero on a (-0.0, +0.0) tie
            w = np.where((a == 0) & (b == 0), g, w)
        if name == "nextafter":  # C's nextafter(x, x) is the second x; NumPy's float16 gives the first
            w = np.where(a == b, b, w)
        # logaddexp of nearly opposite terms cancels: errors relative to the operands
        scale = np.maximum(np.abs(a), np.abs(b)) if name == "logaddexp" else None
        _compare(f"{name}({np.dtype(dt).name})", g, w, dev, scale)


def test_remainder_of_negative_zero_is_positive_zero() -> None:
    """The array API suite's finding: NumPy's remainder(-0.0, 1.0) is +0.0 (a zero
    remainder takes the divisor's sign), axle's was -0.0."""
    for dev in _devices():
        with axle.device(dev):
            r = np.asarray(axle.jit(anp.remainder)(np.array([-0.0, 0.0, -0.0, 3.0]), np.array([1.0, -1.0, -1.0, -3.0])))
        np.testing.assert_array_equal(np.signbit(r), [False, True, True, True], err_msg=dev)


def test_floor_divide_rounds_like_numpy() -> None:
    """1.0 // 0.1 is 9.0 in NumPy (floor(1.0 / 0.1) = 10.0 is off by one)."""
    a, b = np.array([1.0, -1.0, 0.0, -0.0, 7.0, 5.0]), np.array([0.1, 0.1, 3.0, 3.0, -0.0, np.inf])
    with np.errstate(all="ignore"):
        want = np.floor_divide(a, b)
    got = np.asarray(axle.jit(anp.floor_divide)(a, b))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_integer_bit_functions_match_numpy(dt: type) -> None:
    info = np.iinfo(dt)
    x = np.array([0, 1, -1, 5, -5, info.min, info.max, 0x55, -0x56, 123456], dt)
    s = np.array([0, 1, 3, 31, 62, 63, 64, 65, 7, 2], dt)
    for dev in _devices():
        with axle.device(dev):
            got = axle.jit(lambda u, v: (anp.bitwise_xor(u, v), anp.bitwise_left_shift(u, v),
                                         anp.bitwise_right_shift(u, v), anp.bitwise_invert(u), u ^ v, u << v,
                                         u >> v, anp.trunc(u), anp.round(u), anp.signbit(u), anp.isfinite(u)))(x, s)
        want = (np.bitwise_xor(x, s), np.left_shift(x, s), np.right_shift(x, s), np.invert(x), x ^ s, x << s,
                x >> s, np.trunc(x), np.round(x), np.signbit(x), np.isfinite(x))
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_array_equal(np.asarray(g), w, err_msg=f"output {i} on {dev}")


def test_logical_xor_and_clip_names() -> None:
    x = np.array([-2.0, 0.5, np.nan, 3.0])
    np.testing.assert_array_equal(np.asarray(anp.clip(x, min=-1.0, max=1.0)), np.clip(x, -1.0, 1.0))
    np.testing.assert_array_equal(np.asarray(anp.clip(x, a_min=0.0)), np.clip(x, 0.0, None))
    np.testing.assert_array_equal(np.asarray(anp.clip(x, -1.0, 1.0)), np.clip(x, -1.0, 1.0))
    np.testing.assert_array_equal(np.asarray(anp.asarray(x).clip(max=1.0)), np.clip(x, None, 1.0))
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(np.asarray(anp.logical_xor(a, b)), np.logical_xor(a, b))
    np.testing.assert_array_equal(np.asarray(anp.logical_xor(np.array([0, 2]), np.array([1, 3]))), [True, False])


def test_bad_operands_raise_axle_errors_naming_the_function_and_line() -> None:
    with pytest.raises(DTypeError, match=r"(?s)bitwise_left_shift: needs integer operands.*test_numpy_elementwise"):
        anp.bitwise_left_shift(np.array([True]), np.array([True]))
    with pytest.raises(DTypeError, match=r"bitwise_xor: needs bool or integer operands"):
        anp.bitwise_xor(np.array([1.5]), np.array([1]))
    with pytest.raises(DTypeError, match=r"positive: not defined for bool"):
        anp.positive(np.array([True]))
