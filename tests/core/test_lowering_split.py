"""Split reductions in the kernel plan (axle.lowering.split): a long reduction into few
outputs becomes a partials launch and a combining launch that compute the same values
(exactly where the reduction is exact), optimized or not."""
from __future__ import annotations

import numpy as np
import pytest
from test_lowering_plan import run_plan

from axle.interpreter import evaluate
from axle.ir import Builder, DType, Module, Op
from axle.ir.dtypes import is_float_numpy
from axle.ir.types import TensorType
from axle.lowering.plan import kernel_plan
from axle.lowering.split import split_reduction
from axle.passes import optimize
from axle.testing.random_modules import random_module

#: every (kind, dtype) pair reduce accepts: sum/prod are numeric, and/or bool or integer
KINDS = [(k, dt) for dt in (DType.FLOAT32, DType.FLOAT16, DType.FLOAT64, DType.INT32, DType.INT64, DType.BOOL)
         for k in ("sum", "prod", "max", "min", "and", "or")
         if not (k in ("sum", "prod") and dt is DType.BOOL) and not (k in ("and", "or") and dt.is_float)]


def _reduce_module(shape: tuple[int, ...], axes: tuple[int, ...], kind: str, dt: DType) -> Module:
    b = Builder("r")
    x = b.parameter(TensorType(dt, shape))
    return Module("r", b.computation(b.reduce(x, kind=kind, axes=axes)))


def _input(shape: tuple[int, ...], dt: DType, kind: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dt is DType.BOOL:
        return rng.random(shape) < (0.999 if kind == "and" else 0.001)
    if dt.is_int:
        return rng.integers(-1000, 1000, shape).astype(dt.np)
    x = rng.standard_normal(shape)
    return (1 + x / 100 if kind == "prod" else x).astype(dt.np)  # a product of many terms near 1


def _plan_result(m: Module, x: np.ndarray, workers: int = 64, min_part: int = 16) -> np.ndarray:
    plan = kernel_plan(m, assign_buffers=False, split_reductions=(workers, min_part))
    assert [launch.label.endswith("(partials)") for launch in plan.launches] == [True, False]
    return run_plan(plan, [x])[0]


@pytest.mark.parametrize("kind,dt", KINDS, ids=[f"{k}-{dt.value}" for k, dt in KINDS])
@pytest.mark.parametrize("shape,axes", [((1 << 14,), (0,)), ((3, 4096), (1,)), ((4096, 3), (0,)),
                                        ((64, 5, 64), (0, 2)), ((2, 97, 61), (1, 2)), ((10007,), (0,))])
def test_split_reduction_computes_the_same_values(kind: str, dt: DType, shape, axes) -> None:  # noqa: ANN001
    m = _reduce_module(shape, axes, kind, dt)
    x = _input(shape, dt, kind)
    want, got = evaluate(m, x)[0], _plan_result(m, x)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dt.is_float and kind in ("sum", "prod"):
        # another summation order: equal within the sum's rounding error
        tol = {DType.FLOAT16: 1e-2, DType.FLOAT32: 1e-4, DType.FLOAT64: 1e-12}[dt]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol * 50)
    else:
        np.testing.assert_array_equal(got, want)


def test_a_prime_extent_is_padded_with_the_identity() -> None:
    m = _reduce_module((10007,), (0,), "max", DType.INT32)
    sp = split_reduction(m.entry, 64, 16)
    assert sp is not None and sp.parts == 64
    assert any(n.op is Op.PAD for n in sp.partials.nodes)  # 64 x 157 = 10048 >= 10007
    x = np.full(10007, np.iinfo(np.int32).min + 5, np.int32)
    assert _plan_result(m, x) == x.max()  # the padding never wins


def test_float16_partial_sums_stay_in_float32() -> None:
    m = _reduce_module((1 << 14,), (0,), "sum", DType.FLOAT16)
    sp = split_reduction(m.entry, 64, 16)
    assert sp is not None and sp.partials.root.dtype is DType.FLOAT32 and sp.combine.root.op is Op.CONVERT
    # 16384 terms of 1.0 in float16 partials would stop growing at 2048
    assert _plan_result(m, np.ones(1 << 14, np.float16)) == np.float16(16384)


def test_nan_and_signed_zero_survive_the_split() -> None:
    x = np.full(10007, -0.0, np.float32)  # prime: padded
    for kind in ("max", "min", "sum"):  # a sum starts at +0.0 (the IR's identity), max and min keep -0.0
        m = _reduce_module(x.shape, (0,), kind, DType.FLOAT32)
        want = evaluate(m, x)[0]
        assert np.signbit(_plan_result(m, x)) == np.signbit(want) == (kind != "sum"), kind
    x[1234] = np.nan
    for kind in ("max", "min", "sum"):
        assert np.isnan(_plan_result(_reduce_module(x.shape, (0,), kind, DType.FLOAT32), x)), kind


@pytest.mark.parametrize("shape,axes,workers,min_part", [
    ((1 << 14,), (0,), 1, 16),  # one worker: nothing to fill
    ((64, 64), (1,), 64, 16),  # as many outputs as workers
    ((1 << 10,), (0,), 64, 1 << 10),  # parts would be under the minimum
    ((1, 4096), (0,), 64, 16),  # the reduced axis has one element
])
def test_reductions_that_need_no_split_are_kept(shape, axes, workers: int, min_part: int) -> None:  # noqa: ANN001
    assert split_reduction(_reduce_module(shape, axes, "sum", DType.FLOAT32).entry, workers, min_part) is None


def test_sibling_reductions_split_together() -> None:
    b = Builder("moments")
    x = b.parameter(TensorType(DType.FLOAT32, (4096,)))
    y = b.exp(x)
    m = optimize(Module("moments", b.computation(b.tuple(b.reduce(y, kind="sum", axes=(0,)),
                                                          b.reduce(y, kind="max", axes=(0,))))))
    plan = kernel_plan(m, assign_buffers=False, split_reductions=(8, 64))
    partials, combine = plan.launches[-2:]
    assert partials.label.endswith("(partials)") and len(partials.outputs) == len(combine.outputs) == 2
    # one split of the shared operand: no padding needed, so sum and max read the same reshape
    assert sum(n.op is Op.RESHAPE for n in partials.computation.nodes) == 1
    v = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
    for got, want in zip(run_plan(plan, [v]), evaluate(m, v), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("optimized", [False, True], ids=["raw", "optimized"])
def test_random_programs_keep_their_values_when_split(seed: int, optimized: bool) -> None:
    module, inputs = random_module(seed, 10 + seed % 25)
    want = evaluate(module, *inputs)
    plan = kernel_plan(optimize(module) if optimized else module, assign_buffers=False, split_reductions=(64, 2))
    for got, w in zip(run_plan(plan, [np.asarray(a) for a in inputs]), want, strict=True):
        w = np.asarray(w)
        if is_float_numpy(w.dtype):  # bfloat16 too (NumPy kind 'V', compared in float32)
            as_f = np.float32 if w.dtype.kind == "V" else w.dtype
            np.testing.assert_allclose(np.asarray(got).astype(as_f), w.astype(as_f), rtol=2e-2, atol=1e-2,
                                       equal_nan=True)
        else:
            np.testing.assert_array_equal(got, w)
