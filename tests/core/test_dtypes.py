"""The narrow and unsigned integers and bfloat16 in the IR: promotion, the text form and
the interpreter's semantics at their edges (issue 15)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from axle.errors import DTypeError
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Op
from axle.ir.dtypes import INTEGRAL, INTS, NUMERIC, UNSIGNED_INTS, dtype, result_type
from axle.ir.parser import parse_module
from axle.ir.types import TensorType

BF16 = np.dtype(ml_dtypes.bfloat16)
NEW = [DType.INT8, DType.INT16, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64, DType.BFLOAT16]


def run1(op: Op, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    b = Builder("t")
    ps = [b.parameter(TensorType(dtype(a.dtype), a.shape)) for a in arrays]
    return evaluate(b.build(b.op(op, *ps, **attrs)), *arrays)[0]


@pytest.mark.parametrize("dt", NEW)
def test_names_numpy_and_properties(dt: DType) -> None:
    assert dtype(dt.value) is dt and dtype(dt.np) is dt and dtype(dt.np.name) is dt
    assert dt in NUMERIC
    assert dt.is_float == (dt is DType.BFLOAT16)
    assert dt.is_int == (dt in INTS) and (dt in INTEGRAL) == dt.is_int
    assert dt.is_unsigned == (dt in UNSIGNED_INTS) == dt.value.startswith("u")
    assert dt.is_signed == dt.value.startswith("s")


@pytest.mark.parametrize("bad", [np.complex64, np.longdouble, "U1", object, ml_dtypes.float8_e4m3fn])
def test_unsupported_dtypes_are_still_refused(bad: object) -> None:
    with pytest.raises(DTypeError, match="not supported"):
        dtype(bad)


@pytest.mark.parametrize("args, want", [
    ((DType.INT8, DType.UINT8), DType.INT16),
    ((DType.UINT8, DType.UINT16), DType.UINT16),
    ((DType.INT16, DType.UINT32), DType.INT64),
    ((DType.UINT64, DType.INT64), DType.FLOAT64),  # NumPy 2
    ((DType.INT8, 300), DType.INT8),  # NEP 50: a Python int is weak
    ((DType.UINT8, 2.5), DType.FLOAT64),
    ((DType.INT16, DType.FLOAT16), DType.FLOAT32),
    ((DType.UINT8, DType.FLOAT16), DType.FLOAT16),
    # bfloat16, as jax: with ints and weak scalars it stays, with the IEEE halves it widens
    ((DType.BFLOAT16, DType.FLOAT16), DType.FLOAT32),
    ((DType.BFLOAT16, DType.FLOAT32), DType.FLOAT32),
    ((DType.BFLOAT16, DType.FLOAT64), DType.FLOAT64),
    ((DType.BFLOAT16, DType.INT64), DType.BFLOAT16),
    ((DType.UINT64, DType.BFLOAT16), DType.BFLOAT16),
    ((DType.BFLOAT16, DType.BOOL), DType.BFLOAT16),
    ((DType.BFLOAT16, 2.5), DType.BFLOAT16),
    ((DType.BFLOAT16, 7), DType.BFLOAT16),
    ((DType.BFLOAT16, DType.BFLOAT16), DType.BFLOAT16),
])
def test_result_type(args: tuple[object, ...], want: DType) -> None:
    assert result_type(*args) is want


def test_result_type_with_bfloat16_still_refuses_complex() -> None:
    with pytest.raises(DTypeError):
        result_type(DType.BFLOAT16, np.dtype(np.complex64))


_TEXT_VALUES = {
    DType.INT8: [-128, 127, 0], DType.INT16: [-32768, 32767, 1], DType.UINT8: [0, 255, 7],
    DType.UINT16: [0, 65535, 9], DType.UINT32: [0, 2**32 - 1, 3], DType.UINT64: [0, 2**64 - 1, 2**63],
    DType.BFLOAT16: [float("nan"), float("-inf"), 3.3895313892515355e38],
}


@pytest.mark.parametrize("dt", NEW)
def test_constants_print_and_parse_back_exactly(dt: DType) -> None:
    vals = np.array(_TEXT_VALUES[dt], dt.np)
    b = Builder("t")
    m = b.build(b.constant(vals))
    text = m.as_text()
    assert f"{dt.value}[3]" in text
    back = parse_module(text)
    assert back.as_text() == text
    got = evaluate(back)[0]
    assert got.dtype == dt.np and got.tobytes() == vals.tobytes()


@pytest.mark.parametrize("text, why", [
    ("u8[] constant(256)", "out of range"), ("u8[] constant(-1)", "out of range"),
    ("s8[] constant(128)", "out of range"), ("u64[] constant(18446744073709551616)", "out of range"),
    ("bf16[] constant(1e39)", "out of range"),
])
def test_out_of_range_constants_are_refused(text: str, why: str) -> None:
    from axle.errors import ParseError

    src = f"module @m\n\nentry %m () -> {text.split()[0]} {{\n  ROOT %c = {text}\n}}\n"
    with pytest.raises(ParseError, match=why):
        parse_module(src)


@pytest.mark.parametrize("dt", [np.int8, np.int16])
def test_narrow_signed_division_edges(dt: type) -> None:
    info = np.iinfo(dt)
    x = np.array([info.min, 7, -7, 5, info.min], dt)
    y = np.array([-1, 0, 2, -2, 1], dt)
    np.testing.assert_array_equal(run1(Op.DIV, x, y), np.array([info.min, -1, -3, -2, info.min], dt))
    np.testing.assert_array_equal(run1(Op.REM, x, y), np.array([0, 7, -1, 1, 0], dt))
    # wraparound, like s32
    np.testing.assert_array_equal(run1(Op.ADD, x[:1], x[:1]), np.array([0], dt))
    np.testing.assert_array_equal(run1(Op.NEG, x[:1]), x[:1])


@pytest.mark.parametrize("dt", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_unsigned_division_compare_and_wrap(dt: type) -> None:
    top = np.iinfo(dt).max
    x = np.array([top, 9, 0, top], dt)
    y = np.array([0, 0, 0, 2], dt)
    np.testing.assert_array_equal(run1(Op.DIV, x, y), np.array([top, top, top, top // 2], dt))  # x/0: all ones
    np.testing.assert_array_equal(run1(Op.REM, x, y), np.array([top, 9, 0, 1], dt))  # x%0 = x
    # the top bit is a value, not a sign
    np.testing.assert_array_equal(run1(Op.COMPARE, x, np.array([1, 1, 1, 1], dt), direction="gt"),
                                  [True, True, False, True])
    np.testing.assert_array_equal(run1(Op.MAX, x, np.array([1, 1, 1, 1], dt)), np.array([top, 9, 1, top], dt))
    np.testing.assert_array_equal(run1(Op.MIN, x, np.array([1, 1, 1, 1], dt)), np.array([1, 1, 0, 1], dt))
    np.testing.assert_array_equal(run1(Op.SUB, y[:1], np.array([1], dt)), np.array([top], dt))
    np.testing.assert_array_equal(run1(Op.REDUCE, x, kind="max", axes=(0,)), np.array(top, dt))
    np.testing.assert_array_equal(run1(Op.REDUCE, x[:0], kind="min", axes=(0,)), np.array(top, dt))


@pytest.mark.parametrize("dt", [d for d in NEW if d.is_int])
def test_float_to_int_convert_saturates_and_maps_nan_to_zero(dt: DType) -> None:
    info = np.iinfo(dt.np)
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, -3.9, 3.9, -0.5], np.float32)
    want = np.array([0, info.max, info.min, info.max, info.min, max(-3, info.min), 3, 0], dt.np)
    np.testing.assert_array_equal(run1(Op.CONVERT, x, dtype=dt), want)
    np.testing.assert_array_equal(run1(Op.CONVERT, x.astype(BF16), dtype=dt), want)


def test_bfloat16_rounds_to_nearest_even_once_per_op() -> None:
    one = np.array([1.0], BF16)
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1)
    np.testing.assert_array_equal(run1(Op.ADD, one, np.array([2.0**-8], BF16)).astype(np.float32), [1.0])
    np.testing.assert_array_equal(run1(Op.ADD, one, np.array([3 * 2.0**-8], BF16)).astype(np.float32),
                                  [1 + 2.0**-6])
    # computed in float32, rounded once: exp(1) = 2.71828... -> 2.71875
    np.testing.assert_array_equal(run1(Op.EXP, one).astype(np.float32), [2.71875])
    # conversion from float32 rounds to nearest even, keeps NaN and overflows to inf
    x = np.array([1.00390625, 1.01171875, np.nan, 3.4e38, -np.inf], np.float32)
    got = run1(Op.CONVERT, x, dtype=DType.BFLOAT16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(np.float32), [1.0, 1.015625, np.nan, np.inf, -np.inf])
    # from float64: through float32, as every backend computes it
    np.testing.assert_array_equal(run1(Op.CONVERT, np.array([1 + 2.0**-8 + 2.0**-40]), dtype=DType.BFLOAT16)
                                  .astype(np.float32), [1.0])


def test_bfloat16_sums_and_dots_accumulate_in_float32() -> None:
    x = np.array([256, 1, 1], BF16)  # one bf16 add at a time: 256 + 1 -> 256 (tie to even), twice
    assert float(run1(Op.REDUCE, x, kind="sum", axes=(0,))) == 258.0
    got = run1(Op.DOT_GENERAL, x, np.ones(3, BF16), lhs_contracting=(0,), rhs_contracting=(0,))
    assert got.dtype == BF16 and float(got) == 258.0


def test_bfloat16_max_min_nan_and_signed_zero() -> None:
    x = np.array([-0.0, 0.0], BF16)
    assert not np.signbit(run1(Op.REDUCE, x, kind="max", axes=(0,)).astype(np.float32))
    assert np.signbit(run1(Op.REDUCE, x, kind="min", axes=(0,)).astype(np.float32))
    got = run1(Op.MAX, np.array([np.nan, 1], BF16), np.array([2, np.nan], BF16))
    assert np.isnan(got.astype(np.float32)).all()


@pytest.mark.parametrize("dt", NEW)
@pytest.mark.parametrize("shape", [(0,), (1,), (2, 0)])
def test_size_zero_and_one(dt: DType, shape: tuple[int, ...]) -> None:
    x = np.ones(shape, dt.np)
    got = run1(Op.MUL, x, x)
    assert got.dtype == dt.np and got.shape == shape
    s = run1(Op.REDUCE, x, kind="sum", axes=tuple(range(len(shape))))
    assert s.dtype == dt.np and float(s) == x.size


@pytest.mark.parametrize("dt", [DType.INT8, DType.UINT16, DType.BFLOAT16])
def test_iota_of_new_dtypes(dt: DType) -> None:
    b = Builder("t")
    m = b.build(b.op(Op.IOTA, shape=(4,), dtype=dt, dimension=0))
    got = evaluate(m)[0]
    assert got.dtype == dt.np and list(got.astype(np.float64)) == [0, 1, 2, 3]


def test_default_capabilities_do_not_claim_the_new_dtypes() -> None:
    """A plugin written against the first contract (default Capabilities) never receives a
    narrow/unsigned integer or bfloat16 node: it goes to the host, with the reason."""
    from axle.backend import Capabilities
    from axle.ir.dtypes import BASE_DTYPES

    for dt in NEW:
        b = Builder("t")
        p = b.parameter(TensorType(dt, (3,)))
        node = b.build(b.op(Op.ADD, p, p)).entry.root
        assert Capabilities().refusal(node) == f"op 'add' is not claimed for dtype {dt.value}"
        assert Capabilities(dtypes=BASE_DTYPES | {dt}).refusal(node) is None


@pytest.mark.parametrize("device", ["cpu:0", "interpreter:0"])
def test_frontend_runs_new_dtypes_like_numpy(device: str) -> None:
    import axle
    import axle.numpy as anp

    def f(a: object, b: object) -> object:
        return anp.floor_divide(a, b) + a * 3 - anp.maximum(a, b)

    for dt in [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64]:
        info = np.iinfo(dt)
        x = np.array([info.max, info.min, 7, 100], dt)
        y = np.array([2, 3, 0, 9], dt)
        with np.errstate(all="ignore"):
            want = f(x, y)
        got = axle.jit(f, device=device)(x, y).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    xb = np.array([1.5, -2.25, np.nan, 3.0], BF16)
    got = axle.jit(lambda a: anp.sum(a * 2 + 1.0), device=device)(xb).numpy()
    assert got.dtype == BF16 and np.isnan(float(got))
    assert anp.int8 is np.int8 and anp.bfloat16 is ml_dtypes.bfloat16 and axle.bfloat16 is DType.BFLOAT16


# ----------------------------------------------------------- dot_general preferred_element_type


def _dot_module(lt: TensorType, rt: TensorType, pref: DType | None) -> object:
    b = Builder("t")
    x, y = b.parameter(lt), b.parameter(rt)
    extra = {} if pref is None else {"preferred_element_type": pref}
    return b.build(b.dot_general(x, y, lhs_contracting=(1,), rhs_contracting=(0,), **extra))


def test_int8_dot_accumulates_in_int32_with_preferred_element_type() -> None:
    a = np.full((2, 300), 127, np.int8)
    c = np.full((300, 3), -128, np.int8)
    m = _dot_module(TensorType(DType.INT8, (2, 300)), TensorType(DType.INT8, (300, 3)), DType.INT32)
    got = evaluate(m, a, c)[0]
    assert got.dtype == np.int32 and (got == 127 * -128 * 300).all()
    # without it the dot stays in int8 and wraps (XLA)
    plain = evaluate(_dot_module(TensorType(DType.INT8, (2, 300)), TensorType(DType.INT8, (300, 3)), None), a, c)[0]
    assert plain.dtype == np.int8 and (plain == np.array(127 * -128 * 300).astype(np.int8)).all()


def test_preferred_element_type_prints_parses_and_is_omitted_when_unset() -> None:
    m = _dot_module(TensorType(DType.BFLOAT16, (2, 3)), TensorType(DType.BFLOAT16, (3, 4)), DType.FLOAT32)
    text = m.as_text()
    assert "preferred_element_type=f32" in text and "-> f32[2,4]" in text
    assert parse_module(text).as_text() == text
    plain = _dot_module(TensorType(DType.FLOAT32, (2, 3)), TensorType(DType.FLOAT32, (3, 4)), None).as_text()
    assert "preferred_element_type" not in plain


@pytest.mark.parametrize("src, pref", [(DType.INT32, DType.INT8), (DType.INT8, DType.UINT16), (DType.INT8, DType.FLOAT32),
                                       (DType.FLOAT32, DType.INT64), (DType.FLOAT16, DType.BFLOAT16),
                                       (DType.UINT8, DType.INT8)])
def test_preferred_element_type_must_widen_exactly(src: DType, pref: DType) -> None:
    with pytest.raises(DTypeError, match=f"preferred_element_type {pref.value}.*{src.value}"):
        _dot_module(TensorType(src, (2, 3)), TensorType(src, (3, 4)), pref)


def test_preferred_element_type_gradient_returns_operand_dtypes() -> None:
    import axle
    from axle import lax
    import axle.numpy as anp

    x = np.array([[1.5, -2.0, 0.25]], BF16)
    y = np.array([[2.0], [0.5], [-4.0]], BF16)
    gx, gy = axle.grad(lambda a, c: anp.sum(lax.dot_general(a, c, (1,), (0,), preferred_element_type=np.float32)),
                       argnums=(0, 1))(x, y)
    assert gx.dtype == BF16 and gy.dtype == BF16
    np.testing.assert_array_equal(gx.numpy().astype(np.float32), y.astype(np.float32).T)
    np.testing.assert_array_equal(gy.numpy().astype(np.float32), x.astype(np.float32).T)


def test_random_program_generator_makes_every_new_dtype() -> None:
    from axle.testing.random_modules import random_module

    seen: set[DType] = set()
    preferred = False
    for seed in range(600):  # a dot with a preferred type is rare (about 1 program in 80)
        m, _ = random_module(seed, 30)
        for n in m.entry.nodes:
            if isinstance(n.type, TensorType):
                seen.add(n.type.dtype)
            preferred |= n.op is Op.DOT_GENERAL and n.attr["preferred_element_type"] is not None
        if set(NEW) <= seen and preferred:
            break
    assert set(NEW) <= seen and preferred


def test_simplifier_keeps_abs_of_a_negated_unsigned_value() -> None:
    """abs(neg(x)) == abs(x) holds for signed values only: unsigned abs is the identity, so
    abs(neg(x)) is the wrapped negation (-(1) = 255 in u8)."""
    from axle.passes import optimize

    for dt in (DType.UINT8, DType.UINT64, DType.INT8):
        b = Builder("t")
        p = b.parameter(TensorType(dt, (4,)))
        m = b.build(b.op(Op.ABS, b.op(Op.NEG, p)))
        x = np.array([0, 1, 2, 100], dt.np)
        np.testing.assert_array_equal(evaluate(optimize(m), x)[0], evaluate(m, x)[0])


def test_sort_reference_puts_bfloat16_nan_last_and_zeros_together() -> None:
    """The op table's sort of bfloat16 keys is float32's order (ml_dtypes' own bfloat16
    argsort leaves NaN where it finds it), stable and descending too."""
    x = np.array([np.nan, 1, -0.0, 0.0, -np.inf, np.inf, np.nan, -1, 0.0, -0.0], ml_dtypes.bfloat16)
    for descending in (0, 1):
        b = Builder("t")
        p = b.parameter(TensorType(DType.BFLOAT16, x.shape))
        pos = b.iota(shape=x.shape, dtype=DType.INT32, dimension=0)
        m = b.build(b.op(Op.SORT, p, pos, dimension=0, num_keys=1, descending=descending, index=1))
        want = np.argsort(x.astype(np.float32), kind="stable")
        if descending:
            want = (len(x) - 1 - np.argsort(x.astype(np.float32)[::-1], kind="stable"))[::-1]
        np.testing.assert_array_equal(evaluate(m, x)[0], want)


def test_numpy_float_functions_treat_bfloat16_as_a_float() -> None:
    """axle.numpy's elementwise and sorting functions test for floats by dtype property:
    bfloat16 (NumPy kind 'V') is one, so isfinite sees its NaNs and infinities, log2 stays
    bfloat16 and nanmedian skips its NaNs; an int8 operand computes in float16 as NumPy's."""
    import axle.numpy as anp

    x = np.array([1.5, np.nan, -np.inf, 0.25, np.nan, 2.0], ml_dtypes.bfloat16)
    np.testing.assert_array_equal(anp.isfinite(x).numpy(), np.isfinite(x.astype(np.float32)))
    got = anp.log2(x).numpy()
    assert got.dtype == ml_dtypes.bfloat16
    with np.errstate(invalid="ignore"):  # log2(-inf)
        want = np.log2(x.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    assert float(anp.nanmedian(x).numpy()) == float(np.nanmedian(x.astype(np.float32)))
    assert anp.log10(np.array([1, 10], np.int8)).numpy().dtype == np.log10(np.array([1, 10], np.int8)).dtype


def test_array_api_and_fill_values_know_bfloat16_is_a_float() -> None:
    """bfloat16 (NumPy kind 'V') is a real floating dtype for finfo, isdtype and can_cast,
    and an out-of-bounds gather fills it with NaN (np.iinfo raised on it)."""
    import axle.numpy as anp
    from axle import lax

    bf = np.dtype(ml_dtypes.bfloat16)
    assert np.isnan(lax.fill_value_of(bf)) and lax.fill_value_of(bf).dtype == bf
    assert anp.finfo(bf).eps == 2.0 ** -7 and anp.finfo(bf).bits == 16
    assert anp.isdtype(bf, "real floating") and anp.isdtype(bf, "numeric") and not anp.isdtype(bf, "integral")
    assert anp.can_cast(bf, np.float32) and not anp.can_cast(bf, np.int32) and not anp.can_cast(np.float32, bf)


def test_repeat_with_an_array_of_counts_takes_bfloat16() -> None:
    """repeat's exact one-hot max gather starts from the dtype's lowest value: -inf for
    bfloat16 (np.iinfo raised on it)."""
    import axle.numpy as anp

    x = np.array([1.5, -0.0, np.nan], ml_dtypes.bfloat16)
    got = anp.repeat(x, np.array([2, 0, 1])).numpy()
    np.testing.assert_array_equal(got.astype(np.float32), np.repeat(x, [2, 0, 1]).astype(np.float32))


def test_bfloat16_convolution_accumulates_in_float32() -> None:
    """A bfloat16 convolution sums in float32 and rounds once, as a bfloat16 dot: 300 ones
    sum to 300 (a bfloat16 running sum sticks at 256, where 256 + 1 rounds back to 256)."""
    from axle.ir.conv import conv_dimension_numbers

    b = Builder("t")
    x = b.parameter(TensorType(DType.BFLOAT16, (1, 1, 300)))
    w = b.parameter(TensorType(DType.BFLOAT16, (1, 1, 300)))
    m = b.build(b.convolution(x, w, **conv_dimension_numbers("NCH", "OIH", "NCH"), window_strides=(1,),
                              padding_low=(0,), padding_high=(0,), lhs_dilation=(1,), rhs_dilation=(1,)))
    ones = np.ones((1, 1, 300), ml_dtypes.bfloat16)
    assert float(evaluate(m, ones, ones)[0].reshape(-1)[0]) == 300.0
