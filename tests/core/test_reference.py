"""The interpreter against independently written NumPy expectations, per primitive,
over shapes (scalar, size 0, size 1, odd) and dtypes, plus the corner cases the IR defines."""
from __future__ import annotations

import numpy as np
import pytest

from axle.interpreter import evaluate
from axle.ir import Builder, DType, Op
from axle.ir.ops import CORE_PRIMITIVES, OPS, rng_bits
from axle.ir.reductions import REDUCE_KINDS
from axle.testing.cases import assert_close, cases_for, random_input
from axle.ir.types import TensorType

SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 0, 3)]

UNARY = {
    Op.NEG: np.negative, Op.ABS: np.abs, Op.EXP: np.exp, Op.LOG: np.log, Op.SQRT: np.sqrt,
    Op.RSQRT: lambda x: 1 / np.sqrt(x), Op.TANH: np.tanh, Op.LOGISTIC: lambda x: 1 / (1 + np.exp(-x)),
    Op.SIN: np.sin, Op.COS: np.cos, Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.SIGN: np.sign,
}
BINARY = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.MAX: np.maximum, Op.MIN: np.minimum,
}


def run1(op, *arrays, **attrs):
    b = Builder("t")
    ps = [b.parameter(TensorType(DType(_v(a)), a.shape)) for a in arrays]
    return evaluate(b.build(b.op(op, *ps, **attrs)), *arrays)[0]


def _v(a):
    from axle.ir.dtypes import dtype

    return dtype(a.dtype).value


def test_every_core_primitive_has_rules_reference_and_cases():
    for op in CORE_PRIMITIVES:
        d = OPS[op]
        assert d.reference is not None
        assert cases_for(op), op
    assert {Op.PARAMETER, Op.DOT_GENERAL, Op.RNG_BIT_GENERATOR, Op.CUSTOM_CALL} <= CORE_PRIMITIVES


def test_op_cases_has_a_row_for_every_op_a_backend_can_claim():
    """OP_CASES is keyed by op: every op of the op table a backend can claim
    (CORE_PRIMITIVES: its Capabilities.ops default, plus the extended ops it may add) has a
    row, and every other op of the table is listed in NOT_KIT_OPS with the reason it has none."""
    from axle.backend import Capabilities
    from axle.ir.ops import EXTENDED_PRIMITIVES
    from axle.testing.cases import NOT_KIT_OPS, OP_CASES

    assert set(OP_CASES) == set(Capabilities().ops) | EXTENDED_PRIMITIVES == CORE_PRIMITIVES
    assert set(NOT_KIT_OPS) == set(OPS) - set(OP_CASES)
    assert all(reason for reason in NOT_KIT_OPS.values())
    for op in NOT_KIT_OPS:
        with pytest.raises(KeyError, match=op.value):
            cases_for(op)


def test_op_case_ids_are_unique_and_name_their_op():
    """One row per op: a row's cases build modules holding that op (or, for parameter,
    nothing else), and no two cases share an id (the kit's check ids derive from them)."""
    from axle.testing.cases import OP_CASES

    ids = []
    for op in OP_CASES:
        cases = cases_for(op)
        assert all(op in c.ops for c in cases), op
        ids += [c.id for c in cases]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.value)
@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary_float(op, dt, shape):
    rng = np.random.default_rng(0)
    x = random_input(rng, TensorType(DType(_v(np.empty(0, dt))), shape))
    with np.errstate(all="ignore"):
        want = UNARY[op](x.astype(np.float64)).astype(dt)
    got = run1(op, x)
    tol = 2e-3 if dt == np.float16 else 1e-6
    assert_close(got, want, tol, tol, op.value)


@pytest.mark.parametrize("op", list(BINARY), ids=lambda o: o.value)
@pytest.mark.parametrize("dt", [np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_binary(op, dt, shape):
    rng = np.random.default_rng(1)
    t = TensorType(DType(_v(np.empty(0, dt))), shape)
    x, y = random_input(rng, t), random_input(rng, t)
    with np.errstate(all="ignore"):
        want = BINARY[op](x, y)
    assert_close(run1(op, x, y), want, 0, 0, op.value)


def test_integer_division_corner_cases():
    x = np.array([7, -7, 7, -7, 5, np.iinfo(np.int32).min, 3], np.int32)
    y = np.array([2, 2, -2, -2, 0, -1, 0], np.int32)
    np.testing.assert_array_equal(run1(Op.DIV, x, y), [3, -3, -3, 3, -1, np.iinfo(np.int32).min, -1])
    np.testing.assert_array_equal(run1(Op.REM, x, y), [1, -1, 1, -1, 5, 0, 3])
    big = np.array([np.iinfo(np.int64).min, 9], np.int64)
    np.testing.assert_array_equal(run1(Op.DIV, big, np.array([-1, 4], np.int64)), [np.iinfo(np.int64).min, 2])


def test_float_rem_is_fmod():
    x = np.array([5.5, -5.5, 1.0, np.inf], np.float32)
    y = np.array([2.0, 2.0, 0.0, 1.0], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.fmod(x, y)
    np.testing.assert_array_equal(run1(Op.REM, x, y), want)


def test_integer_power():
    x = np.array([2, -2, 3, 1, -1, -1, 2, 0], np.int64)
    y = np.array([10, 3, 0, -5, -3, -2, -1, 0], np.int64)
    np.testing.assert_array_equal(run1(Op.POW, x, y), [1024, -8, 1, 1, -1, 1, 0, 1])


def test_convert_saturates_and_maps_nan_to_zero():
    x = np.array([np.nan, np.inf, -np.inf, 3.9, -3.9, 1e20], np.float32)
    np.testing.assert_array_equal(run1(Op.CONVERT, x, dtype=DType.INT32),
                                  [0, 2**31 - 1, -2**31, 3, -3, 2**31 - 1])
    np.testing.assert_array_equal(run1(Op.CONVERT, x, dtype=DType.BOOL), [True, True, True, True, True, True])
    np.testing.assert_array_equal(run1(Op.CONVERT, np.array([0.0, -0.0, 2.0]), dtype=DType.BOOL), [False, False, True])
    np.testing.assert_array_equal(run1(Op.CONVERT, np.array([1e300, -1e300, np.nan]), dtype=DType.INT64),
                                  [np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0])


def test_max_min_propagate_nan():
    x = np.array([np.nan, 1.0, 2.0])
    y = np.array([0.0, np.nan, 1.0])
    assert np.isnan(run1(Op.MAX, x, y)[:2]).all()
    assert np.isnan(run1(Op.MIN, x, y)[:2]).all()


@pytest.mark.parametrize("kind,npf", [("sum", np.sum), ("prod", np.prod), ("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("dt", [np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", [((7,), (0,)), ((3, 5), (1,)), ((3, 5), (0, 1)), ((2, 3, 4), (0, 2)), ((4, 0), (1,)), ((0,), (0,))])
def test_reduce(kind, npf, dt, shape, axes):
    x = random_input(np.random.default_rng(2), TensorType(DType(_v(np.empty(0, dt))), shape), small=True, special=False)
    got = run1(Op.REDUCE, x, kind=kind, axes=axes)
    ident = REDUCE_KINDS[kind].identity(DType(_v(x)))
    want = npf(x, axis=axes, initial=ident).astype(dt) if x.size or kind in ("sum", "prod") else \
        np.full([d for i, d in enumerate(shape) if i not in axes], ident, dt)
    if x.size == 0:
        want = np.full([d for i, d in enumerate(shape) if i not in axes], ident, dt)
    assert_close(got, np.asarray(want, dt), 1e-5, 1e-5, kind)


def test_reduce_and_or_bool():
    x = np.array([[True, False, True], [True, True, True]])
    np.testing.assert_array_equal(run1(Op.REDUCE, x, kind="and", axes=(1,)), [False, True])
    np.testing.assert_array_equal(run1(Op.REDUCE, x, kind="or", axes=(0,)), [True, True, True])
    np.testing.assert_array_equal(run1(Op.REDUCE, np.zeros((0,), bool), kind="and", axes=(0,)), True)


def test_dot_general_matches_einsum():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    got = run1(Op.DOT_GENERAL, a, b, lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))
    np.testing.assert_allclose(got, a @ b)
    m, v = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4,)).astype(np.float32)
    np.testing.assert_allclose(run1(Op.DOT_GENERAL, m, v, lhs_contracting=(1,), rhs_contracting=(0,)), m @ v, rtol=1e-6)
    got = run1(Op.DOT_GENERAL, np.ones((3, 0)), np.ones((0, 2)), lhs_contracting=(1,), rhs_contracting=(0,))
    np.testing.assert_array_equal(got, np.zeros((3, 2)))


def test_movement_ops():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(run1(Op.TRANSPOSE, x, permutation=(1, 0)), x.T)
    np.testing.assert_array_equal(run1(Op.RESHAPE, x, shape=(4, 3)), x.reshape(4, 3))
    np.testing.assert_array_equal(run1(Op.SLICE, x, start=(0, 1), limit=(3, 4), stride=(2, 2)), x[0:3:2, 1:4:2])
    np.testing.assert_array_equal(run1(Op.REVERSE, x, dimensions=(0, 1)), x[::-1, ::-1])
    np.testing.assert_array_equal(run1(Op.BROADCAST_IN_DIM, np.arange(3, dtype=np.int32), shape=(3, 2),
                                       broadcast_dimensions=(0,)), np.repeat(np.arange(3)[:, None], 2, 1))
    np.testing.assert_array_equal(run1(Op.CONCATENATE, x, x[:, :1], dimension=1), np.concatenate([x, x[:, :1]], 1))
    got = run1(Op.PAD, np.array([1, 2, 3], np.int32), np.array(0, np.int32), low=(1,), high=(2,), interior=(1,))
    np.testing.assert_array_equal(got, [0, 1, 0, 2, 0, 3, 0, 0])


def test_iota_select_compare():
    b = Builder("t")
    io = b.iota(shape=(2, 3), dtype="s32", dimension=1)
    np.testing.assert_array_equal(evaluate(b.build(io))[0], [[0, 1, 2], [0, 1, 2]])
    x = np.array([1.0, np.nan, 3.0])
    y = np.array([1.0, np.nan, 2.0])
    np.testing.assert_array_equal(run1(Op.COMPARE, x, y, direction="eq"), [True, False, False])
    np.testing.assert_array_equal(run1(Op.COMPARE, x, y, direction="ne"), [False, True, True])
    np.testing.assert_array_equal(run1(Op.SELECT, np.array([True, False, True]), x, y)[[0, 2]], [1.0, 3.0])


def test_rng_bits_are_counter_based_and_deterministic():
    a = rng_bits(42, (10,), DType.INT64)
    b = rng_bits(42, (5, 2), DType.INT64)
    np.testing.assert_array_equal(a, b.reshape(-1))
    assert not np.array_equal(rng_bits(43, (10,), DType.INT64), a)
    u = rng_bits(0, (100000,), DType.INT32).astype(np.int64)
    assert abs(u.mean()) < 2**31 * 0.02  # roughly uniform over the int32 range
    out = run1(Op.RNG_BIT_GENERATOR, np.array(42, np.int64), shape=(10,), dtype=DType.INT64)
    np.testing.assert_array_equal(out, a)


def test_not_and_or_on_bool_and_ints():
    np.testing.assert_array_equal(run1(Op.NOT, np.array([True, False])), [False, True])
    np.testing.assert_array_equal(run1(Op.NOT, np.array([0, 5], np.int32)), [-1, -6])
    np.testing.assert_array_equal(run1(Op.AND, np.array([6], np.int64), np.array([3], np.int64)), [2])
    np.testing.assert_array_equal(run1(Op.OR, np.array([True, False]), np.array([False, False])), [True, False])


def test_all_cases_run_on_the_interpreter():
    """Every op case (the conformance kit's) evaluates and yields the declared types."""
    from axle.testing.cases import core_cases, fused_cases, reference_results

    n = 0
    for case in list(core_cases()) + fused_cases():
        for outs in reference_results(case):  # each replica's, for an SPMD case
            for o, t in zip(outs, case.module.entry.result_types):
                assert o.shape == t.shape and o.dtype == t.dtype.np, case.id
        n += 1
    assert n > 1000


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_dot_accumulates_from_positive_zero(dt):
    """Only -0 products (or none) sum to +0, as a sum reduction from +0 does; NumPy's
    optimized einsum alone returns -0 for (-0)(-1) (found by the random programs)."""
    ref = OPS[Op.DOT_GENERAL].reference
    dims = dict(lhs_batch=(), rhs_batch=(), lhs_contracting=(1,), rhs_contracting=(0,))
    for a, b in ((np.full((1, 1), -0.0, dt), np.full((1, 2), -1.0, dt)),  # einsum alone: [[-0, -0]]
                 (np.full((3, 2), -0.0, dt), np.ones((2, 4), dt)), (np.zeros((2, 0), dt), np.zeros((0, 3), dt))):
        out = ref(a, b, **dims)
        assert out.dtype == dt and not np.signbit(out).any()
