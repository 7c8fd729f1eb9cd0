"""Row kernels (one work-item per row, reductions over trailing axes, then a loop writing
the full-shape outputs): vector widths and horizontal combines, rows that do not divide
the vector width, NaN/inf in rows, and values that the reduction loop stores into an
output buffer for the output loop (softmax's exp) instead of recomputing them."""
from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest

import axle
from axle.compiler import compile_module
from axle.config import config
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.ops import Op
from axle.testing.cases import OpCase, assert_close, run_case, tolerance
from ocl_fusing import fuse_whole

DT = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def _softmax(b: Builder, x, axis_len: int):  # noqa: ANN001, ANN202
    shape = x.shape
    m = b.broadcast_in_dim(b.reduce(x, kind="max", axes=(1,)), shape=shape, broadcast_dimensions=(0,))
    e = b.exp(b.sub(x, m))
    s = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=(1,)), shape=shape, broadcast_dimensions=(0,))
    return e, b.div(e, s)


def _check(module, inputs, dev, n_red: int) -> None:  # noqa: ANN001
    expected = evaluate(module, *inputs)
    actual = run_case(OpCase("t", module, inputs), dev, optimize=False)
    for a, e in zip(actual, expected):
        rtol, atol = tolerance(DType(axle.ir.dtypes.dtype(e.dtype).value), Op.EXP, n_red)
        assert_close(a, e, rtol, atol)


def _rows(rows: int, cols: int, dt: str, special: bool) -> np.ndarray:
    x = np.random.default_rng(cols).standard_normal((rows, cols)) * 3
    if special and rows >= 4:
        x[0, cols // 2] = np.nan  # the row's max and sum are NaN
        x[1, 0] = np.inf  # max = inf: inf - inf = NaN where x = inf, exp(-inf) = 0 elsewhere
        x[2, cols - 1] = -np.inf  # exp(-inf - max) = 0
        x[3, :] = -np.inf  # max = -inf: -inf - -inf = NaN everywhere
    return x.astype(DT[dt])


def _sources(module, dev) -> str:  # noqa: ANN001
    return "\n".join(compile_module(module, dev, optimize=False).kernel_sources().values())


def _reads_output(src: str) -> bool:
    """Whether a kernel loads back from one of its output buffers (a spilled value)."""
    return bool(re.search(r"vload\d+\(0, out\d+ \+|= out\d+\[|(vload_half|axle_ldh)\([^,]+, out\d+\)", src))


@pytest.mark.parametrize("cols", [1, 7, 15, 16, 17, 33, 1000, 1027])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16"])
def test_softmax_rows(cols: int, dt: str, ocl, strategy) -> None:  # noqa: ANN001
    b = Builder("softmax")
    x = b.parameter(f"{dt}[5,{cols}]")
    m = fuse_whole(b.build(_softmax(b, x, cols)[1]), wrap=False, kind="row")
    assert compile_module(m, ocl, optimize=False).report()["kernels"] == 1
    _check(m, [_rows(5, cols, dt, special=True)], ocl, cols)
    if strategy == "cpu" and ocl.kind == "cpu":
        # exp(x - max) is stored by the sum loop and loaded by the output loop
        assert _reads_output(_sources(m, ocl))


def test_spilled_value_survives_an_output_written_first(ocl, strategy) -> None:  # noqa: ANN001
    """The buffer holding exp(x - max) is out0, whose own value (x * 3) is written in
    the same loop step before out1 = e / s needs e: e must be loaded first."""
    b = Builder("two")
    x = b.parameter("f32[6,45]")
    e, y = _softmax(b, x, 45)
    three = b.broadcast_in_dim(b.constant(np.float32(3)), shape=(6, 45), broadcast_dimensions=())
    m = fuse_whole(b.build(b.mul(x, three), y), wrap=True, kind="row")
    assert compile_module(m, ocl, optimize=False).report()["kernels"] == 1
    _check(m, [_rows(6, 45, "f32", special=True)], ocl, 45)


def test_spilled_value_feeds_a_second_reduction(ocl, strategy) -> None:  # noqa: ANN001
    """sum(e) and sum(e * e) in sequence: the second loop loads e stored by the first."""
    b = Builder("moments")
    x = b.parameter("f32[9,130]")
    e, y = _softmax(b, x, 130)
    q = b.reduce(b.mul(e, e), kind="sum", axes=(1,))
    qb = b.broadcast_in_dim(q, shape=(9, 130), broadcast_dimensions=(0,))
    m = fuse_whole(b.build(b.add(y, qb), e, q), wrap=False, kind="row")
    assert compile_module(m, ocl, optimize=False).report()["kernels"] == 1
    _check(m, [_rows(9, 130, "f32", special=False)], ocl, 130)


@pytest.mark.parametrize("lanes", [3, 4, 8, 16])
@pytest.mark.parametrize("kind", ["max", "min", "sum", "prod"])
def test_row_reductions_at_every_vector_width(lanes: int, kind: str, ocl, monkeypatch) -> None:  # noqa: ANN001
    """The horizontal combine of a vector accumulator (a tree of halves at power-of-two
    widths, lane by lane otherwise) at each width, over rows that leave a scalar tail, with NaN and infinities in some rows."""
    rt = axle.REGISTRY.backend_for(ocl).runtime(ocl)
    monkeypatch.setattr(rt, "info", replace(rt.info, float_lanes=lanes))
    b = Builder("rows")
    x = b.parameter("f32[6,77]")
    r = b.reduce(b.mul(x, x) if kind == "prod" else b.neg(x), kind=kind, axes=(1,))
    y = b.sub(x, b.broadcast_in_dim(r, shape=(6, 77), broadcast_dimensions=(0,)))
    m = fuse_whole(b.build(y, r), wrap=False, kind="row")
    data = _rows(6, 77, "f32", special=True)
    if kind == "prod":
        data = np.where(np.isfinite(data), 1 + data / 50, data).astype(np.float32)
    _check(m, [data], ocl, 77)
    if ocl.kind == "cpu":
        assert f"float{lanes} " in _sources(m, ocl)


def test_spill_plan_picks_the_shared_costly_value() -> None:
    from axle_opencl.values import spill_plan

    b = Builder("softmax")
    x = b.parameter("f32[4,64]")
    e, y = _softmax(b, x, 64)
    comp = b.build(y).entry
    reduces = [n for n in comp.nodes if n.op is Op.REDUCE]
    plan = spill_plan(comp.nodes, reduces, [(comp.root, "out0")], (4, 64))
    assert [n.op for n, _ in plan.values()] == [Op.EXP] and [buf for _, buf in plan.values()] == ["out0"]
    # layer norm shares only x and x - mean with its reductions: cheap, nothing stored
    b = Builder("ln")
    x = b.parameter("f32[4,64]")
    mean = b.broadcast_in_dim(b.reduce(x, kind="sum", axes=(1,)), shape=(4, 64), broadcast_dimensions=(0,))
    d = b.sub(x, mean)
    var = b.broadcast_in_dim(b.reduce(b.mul(d, d), kind="sum", axes=(1,)), shape=(4, 64), broadcast_dimensions=(0,))
    comp = b.build(b.mul(d, var)).entry
    reduces = [n for n in comp.nodes if n.op is Op.REDUCE]
    assert spill_plan(comp.nodes, reduces, [(comp.root, "out0")], (4, 64)) == {}
    # no output buffer of the value's dtype: nothing stored
    b = Builder("cast")
    x = b.parameter("f32[4,64]")
    e, y = _softmax(b, x, 64)
    comp = b.build(b.convert(y, dtype=DType.FLOAT64)).entry
    reduces = [n for n in comp.nodes if n.op is Op.REDUCE]
    assert spill_plan(comp.nodes, reduces, [(comp.root, "out0")], (4, 64)) == {}


def _signed_zero_rows(cols: int, dt: str) -> np.ndarray:
    """Rows where fmax/fmin alone go wrong: -0.0 and +0.0 mixed with every extremum a
    zero, NaN in the vector part and in the scalar tail, and plain rows beside them."""
    x = -np.abs(np.random.default_rng(cols).standard_normal((8, cols))) - 1
    x[0, :] = -0.0
    x[0, cols // 2] = 0.0  # max = +0.0 (min = -0.0)
    x[1, :] = 0.0
    x[1, cols - 1] = -0.0  # in the tail where cols leaves one
    x[2, ::3] = -0.0  # max = -0.0 only if no +0.0: there is none
    x[3, 1] = np.nan  # in the vector part
    x[4, cols - 1] = np.nan  # in the tail
    x[5, :] = -np.inf
    x[6, 0] = 0.0  # a +0.0 first, -0.0 later: the max keeps +0.0
    x[6, cols - 2] = -0.0
    x[7] = -x[7]  # positive row: the min is the value, the max too
    return x.astype(DT[dt])


@pytest.mark.parametrize("cols", [33, 64, 1027])
@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_vector_extrema_keep_nan_and_signed_zeros(cols: int, dt: str, kind: str, ocl, strategy) -> None:  # noqa: ANN001
    """Row max/min run their vector loops with fmax/fmin (which drop NaN and may pick
    either zero): the results, and x minus them, must equal the interpreter's bit for bit,
    the sign of a zero included."""
    b = Builder("extrema")
    x = b.parameter(f"{dt}[8,{cols}]")
    r = b.reduce(x, kind=kind, axes=(1,))
    y = b.sub(x, b.broadcast_in_dim(r, shape=(8, cols), broadcast_dimensions=(0,)))
    m = fuse_whole(b.build(r, y), wrap=False, kind="row")
    data = [_signed_zero_rows(cols, dt), _signed_zero_rows(cols, dt)[:, ::-1].copy()]
    for d in data:
        got = run_case(OpCase("t", m, [d]), ocl, optimize=False)
        for a, e in zip(got, evaluate(m, d)):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
            np.testing.assert_array_equal(np.where(np.isnan(e), 0, a), np.where(np.isnan(e), 0, e))
            np.testing.assert_array_equal(np.signbit(a) | np.isnan(a), np.signbit(e) | np.isnan(e))


@pytest.fixture
def gpu_rows():  # noqa: ANN201
    config.backend_flags["opencl_strategy"] = "gpu"
    yield
    config.backend_flags.pop("opencl_strategy", None)


@pytest.mark.parametrize("shape", [(3, 64), (2, 65), (4, 300), (1, 1027), (2, 3, 5, 40), (7, 4096)])
@pytest.mark.parametrize("dt", ["f32", "f16", "s32"])
def test_gpu_rows_get_a_work_group_each(shape: tuple[int, ...], dt: str, ocl, gpu_rows) -> None:  # noqa: ANN001
    """GPU strategy, rows of at least GROUP_ROW_MIN elements: a work-group per row, each
    reduction strided over its items and combined in local memory, then the outputs. A
    layer-norm-like row (two reductions, the second of a value of the first, a per-row
    output beside the full-shape one) over odd lengths, several trailing axes, NaN/inf."""
    axes = (2, 3) if len(shape) == 4 else (1,)
    b = Builder("rows")
    x = b.parameter(f"{dt}[{','.join(map(str, shape))}]")
    keep = tuple(d for d in range(len(shape)) if d not in axes)
    mx = b.reduce(x, kind="max", axes=axes)
    d = b.sub(x, b.broadcast_in_dim(mx, shape=shape, broadcast_dimensions=keep))
    s = b.reduce(b.mul(d, d), kind="sum", axes=axes)
    y = b.add(d, b.broadcast_in_dim(s, shape=shape, broadcast_dimensions=keep))
    m = fuse_whole(b.build(y, s), wrap=False, kind="row")
    src = _sources(m, ocl)
    assert "get_group_id" in src and "__local" in src
    rng = np.random.default_rng(len(shape) + shape[-1])
    if dt == "s32":
        data = rng.integers(-9, 9, size=shape).astype(np.int32)
    else:
        data = (rng.standard_normal(shape) * (1 if dt == "f16" else 3)).astype(DT[dt])
        flat = data.reshape(-1, math.prod(shape[len(keep):]))
        if flat.shape[0] >= 3:
            flat[0, 5] = np.nan
            flat[1, -1] = np.inf
            flat[2, :] = -np.inf
    red = math.prod(shape[a] for a in axes)
    expected = evaluate(m, data)
    actual = run_case(OpCase("t", m, [data]), ocl, optimize=False)
    for a, e in zip(actual, expected):
        if dt == "s32":
            np.testing.assert_array_equal(a, e)
        else:
            rtol, atol = tolerance(DType(axle.ir.dtypes.dtype(e.dtype).value), Op.ADD, red)
            assert_close(a, e, rtol, atol)


def test_short_gpu_rows_stay_one_work_item_per_row(ocl, gpu_rows) -> None:  # noqa: ANN001
    b = Builder("short")
    x = b.parameter("f32[9,63]")
    m = fuse_whole(b.build(_softmax(b, x, 63)[1]), wrap=False, kind="row")
    assert "get_group_id" not in _sources(m, ocl)
    _check(m, [_rows(9, 63, "f32", special=True)], ocl, 63)


@pytest.mark.parametrize("cols", [1030, 5000])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_group_reduce_extrema_keep_nan_and_signed_zeros(cols: int, kind: str, ocl, strategy) -> None:  # noqa: ANN001
    """Long reductions into few outputs (group reduce kernels: fmax/fmin vector loops per
    work-item on CPU devices): NaN and the sign of a zero result as the interpreter."""
    b = Builder("extrema")
    x = b.parameter(f"f32[8,{cols}]")
    m = b.build(b.reduce(x, kind=kind, axes=(1,)))
    assert "get_group_id" in _sources(m, ocl)
    for d in (_signed_zero_rows(cols, "f32"), -_signed_zero_rows(cols, "f32")[:, ::-1].copy()):
        (a,) = run_case(OpCase("t", m, [d]), ocl, optimize=False)
        (e,) = evaluate(m, d)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
        np.testing.assert_array_equal(np.where(np.isnan(e), 0, a), np.where(np.isnan(e), 0, e))
        np.testing.assert_array_equal(np.signbit(a) | np.isnan(a), np.signbit(e) | np.isnan(e))
