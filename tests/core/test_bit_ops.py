"""The bit operations' reference semantics (the interpreter every backend is checked
against), from Python integers, and the type rules' errors."""
from __future__ import annotations

import numpy as np
import pytest

from axle import lax
from axle.errors import DTypeError
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Op
from axle.ir.dtypes import dtype
from axle.ir.types import TensorType

INTS = [np.int32, np.int64]


def _eval(op: Op, *xs: np.ndarray, **attrs: object) -> np.ndarray:
    b = Builder("t")
    ps = [b.parameter(TensorType(dtype(x.dtype), x.shape)) for x in xs]
    return evaluate(b.build(b.op(op, *ps, **attrs)), *xs)[0]


def _python_shift(op: Op, v: int, s: int, width: int) -> int:
    """StableHLO, from Python's unbounded integers: the amount as unsigned, out of range
    gives 0 or the sign fill."""
    u, amount = v % (1 << width), s % (1 << width)
    if op is Op.SHIFT_LEFT:
        r = (u << amount) % (1 << width) if amount < width else 0
    elif op is Op.SHIFT_RIGHT_LOGICAL:
        r = u >> amount if amount < width else 0
    else:
        r = v >> min(amount, width - 1)  # Python's >> is arithmetic
    r %= 1 << width
    return r - (1 << width) if r >= 1 << (width - 1) else r


@pytest.mark.parametrize("dt", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", [Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL, Op.SHIFT_RIGHT_ARITHMETIC],
                         ids=lambda o: o.value)
def test_shifts_match_python_integers(op: Op, dt: type) -> None:
    info = np.iinfo(dt)
    width = info.bits
    vals = [0, 1, -1, 5, -5, info.min, info.max, 0x1234]
    amounts = [0, 1, 3, width - 1, width, width + 1, 2 * width, -1, -width, info.min, info.max]
    x = np.array([v for v in vals for _ in amounts], dt)
    s = np.array([a for _ in vals for a in amounts], dt)
    want = np.array([_python_shift(op, int(v), int(a), width) for v, a in zip(x, s)], dt)
    np.testing.assert_array_equal(_eval(op, x, s), want)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: np.dtype(d).name)
def test_popcnt_and_clz_match_python_integers(dt: type) -> None:
    info = np.iinfo(dt)
    width = info.bits
    x = np.array([0, 1, -1, 2, 3, 255, 256, info.min, info.max, -2, 0x0F0F, 12345678], dt)
    unsigned = [int(v) % (1 << width) for v in x]
    np.testing.assert_array_equal(_eval(Op.POPCNT, x), np.array([bin(u).count("1") for u in unsigned], dt))
    np.testing.assert_array_equal(_eval(Op.CLZ, x), np.array([width - u.bit_length() for u in unsigned], dt))


def test_xor_on_pred_and_integers() -> None:
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(_eval(Op.XOR, a, b), [False, True, True, False])
    x, y = np.array([5, -1, 0], np.int64), np.array([3, 7, 0], np.int64)
    np.testing.assert_array_equal(_eval(Op.XOR, x, y), x ^ y)


def test_bitcast_round_trips_every_bit_pattern_it_is_given() -> None:
    bits = np.array([0, 1, -1, 0x7F800000, -0x800000, 0x7FC00001, -2147483648, 0x3F800000], np.int32)
    f = _eval(Op.BITCAST_CONVERT, bits, dtype=DType.FLOAT32)
    assert f.dtype == np.float32 and f[7] == 1.0 and np.isinf(f[3]) and np.isnan(f[5])
    np.testing.assert_array_equal(_eval(Op.BITCAST_CONVERT, f, dtype=DType.INT32), bits)
    d = np.array([1.5, -0.0, np.inf])
    np.testing.assert_array_equal(_eval(Op.BITCAST_CONVERT, d, dtype=DType.INT64), d.view(np.int64))


@pytest.mark.parametrize("src,dst,why", [
    (DType.INT32, DType.FLOAT64, "changes the bit width (32 to 64)"),
    (DType.FLOAT64, DType.INT32, "changes the bit width (64 to 32)"),
    (DType.BOOL, DType.INT32, "pred has no bit layout"),
    (DType.INT32, DType.BOOL, "pred has no bit layout"),
])
def test_bitcast_refuses_width_changes_and_pred(src: DType, dst: DType, why: str) -> None:
    b = Builder("t")
    p = b.parameter(TensorType(src, (3,)))
    with pytest.raises(DTypeError, match="bitcast-convert") as e:
        b.op(Op.BITCAST_CONVERT, p, dtype=dst)
    assert why in str(e.value) and "[3]" in str(e.value)


@pytest.mark.parametrize("op", [Op.SHIFT_LEFT, Op.POPCNT, Op.CLZ, Op.XOR], ids=lambda o: o.value)
def test_bit_operations_refuse_floats(op: Op) -> None:
    b = Builder("t")
    p = b.parameter(TensorType(DType.FLOAT32, (2,)))
    with pytest.raises(DTypeError, match=op.value):
        b.op(op, *[p] * (2 if op in (Op.SHIFT_LEFT, Op.XOR) else 1))


def test_lax_functions_run_eagerly() -> None:
    x = np.array([1, -8, 0], np.int32)
    np.testing.assert_array_equal(np.asarray(lax.shift_right_arithmetic(x, np.array([1, 2, 40], np.int32))),
                                  [0, -2, 0])
    np.testing.assert_array_equal(np.asarray(lax.clz(x)), [31, 0, 32])
    f = np.array([0.5, -1.0], np.float32)
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert(f, np.int32)), f.view(np.int32))
    np.testing.assert_array_equal(np.asarray(lax.round_nearest_even(np.array([0.5, 1.5, -2.5]))), [0.0, 2.0, -2.0])
    np.testing.assert_array_equal(np.asarray(lax.is_finite(np.array([np.nan, np.inf, 1.0]))), [False, False, True])
