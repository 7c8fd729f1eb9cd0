"""axle.numpy.quantize / dequantize against NumPy's formula, on every device (issue 15)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.errors import DTypeError
from axle.testing import require_backend

#: the new dtypes run in the full tier (CI); the fast tier keeps f32/s32/pred (tests/conftest.py)
pytestmark = pytest.mark.full_only


def _expected(x: np.ndarray, scale: object, zp: object, dt: type) -> np.ndarray:
    info = np.iinfo(dt)
    with np.errstate(invalid="ignore"):
        r = np.clip(np.rint(x.astype(np.float32) / np.float32(scale)) + np.float32(zp), info.min, info.max)
    return np.where(np.isnan(r), 0, r).astype(dt)


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1000) * 40).astype(np.float32)
    # ties of every parity (round half to even), both signs, out of range, NaN, inf
    x[:14] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -128.5, -129.5, 1e9, -1e9, np.nan, np.inf]
    return x


@pytest.mark.parametrize("device", ["interpreter", "cpu", "opencl", "template"])
@pytest.mark.parametrize("dt, zp", [(np.int8, 0), (np.int8, -3), (np.uint8, 128), (np.int16, 7), (np.uint16, 0)])
def test_quantize_matches_numpy(device: str, dt: type, zp: int) -> None:
    dev = require_backend(device)
    x = _inputs()
    got = axle.jit(lambda v: anp.quantize(v, 1.0, zp, dtype=dt), device=dev.name)(x).numpy()
    assert got.dtype == dt
    np.testing.assert_array_equal(got, _expected(x, 1.0, zp, dt))
    got = axle.jit(lambda v: anp.quantize(v, 0.25, zp, dtype=dt), device=dev.name)(x).numpy()
    np.testing.assert_array_equal(got, _expected(x, 0.25, zp, dt))


def test_quantize_per_channel_and_dequantize_round_trip() -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 16)).astype(np.float32)
    scale = (np.abs(w).max(axis=1, keepdims=True) / 127).astype(np.float32)
    q = anp.quantize(w, scale, 0)
    np.testing.assert_array_equal(q.numpy(), np.clip(np.rint(w / scale), -128, 127).astype(np.int8))
    back = anp.dequantize(q, scale, 0)
    assert back.dtype == np.float32
    assert np.abs(back.numpy() - w).max() <= scale.max() / 2 * (1 + 1e-6)
    b16 = anp.dequantize(q, scale, 0, dtype=anp.bfloat16)
    assert b16.dtype == ml_dtypes.bfloat16


def test_quantized_matmul_end_to_end() -> None:
    """quantize both operands, int8 x int8 -> int32 dot, dequantize with the product of scales."""
    from axle import lax

    rng = np.random.default_rng(2)
    a = rng.standard_normal((8, 64)).astype(np.float32)
    b = rng.standard_normal((64, 5)).astype(np.float32)
    sa, sb = float(np.abs(a).max() / 127), float(np.abs(b).max() / 127)

    def f(x: object, y: object) -> object:
        qa, qb = anp.quantize(x, sa, 0), anp.quantize(y, sb, 0)
        acc = lax.dot_general(qa, qb, (1,), (0,), preferred_element_type=np.int32)
        return anp.dequantize(acc, sa * sb, 0)

    for device in ("cpu:0", "opencl:0"):
        got = axle.jit(f, device=device)(a, b).numpy()
        qa = np.clip(np.rint(a / np.float32(sa)), -128, 127).astype(np.int32)
        qb = np.clip(np.rint(b / np.float32(sb)), -128, 127).astype(np.int32)
        np.testing.assert_allclose(got, (qa @ qb).astype(np.float32) * np.float32(sa * sb), rtol=1e-6)


def test_bad_dtypes_are_refused() -> None:
    with pytest.raises(DTypeError, match="quantize: dtype must be an integer"):
        anp.quantize(np.ones(3, np.float32), 1.0, 0, dtype=np.float32)
    with pytest.raises(DTypeError, match="dequantize: dtype must be a float"):
        anp.dequantize(np.ones(3, np.int8), 1.0, 0, dtype=np.int32)
