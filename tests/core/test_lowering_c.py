"""axle.lowering.c: rendered C, compiled with the system C compiler, computes exactly what
the interpreter computes on the edge cases of the IR's semantics (XLA integer division and
remainder, NaN-propagating max/min with signed zeros, saturating float->int converts,
float16 rounding, literals, size-0 and size-1 dims). The OpenCL C dialect runs the same
kind of program through PoCL."""
from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.module import Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.lowering.c import C99, CKernel, CRenderer, OpenCLC, literal
from axle.testing import require_backend
from axle.ir.dtypes import is_float_numpy

CC = ("cc", "-std=c99", "-O2", "-ffp-contract=off", "-fPIC", "-shared")
I32, I64 = np.iinfo(np.int32), np.iinfo(np.int64)


def module(types: list[TensorType], build: Callable[[Builder, list[Node]], Node | list[Node]]) -> Module:
    b = Builder("t")
    params = [b.parameter(t) for t in types]
    out = build(b, params)
    return b.build(*out) if isinstance(out, list) else b.build(out)


def run_c(m: Module, args: list[np.ndarray], tmp: Path) -> list[np.ndarray]:
    r = CRenderer(C99)
    k = r.kernel("k", m.entry)
    (tmp / "k.c").write_text(r.program([k]))
    subprocess.run([*CC, "-o", str(tmp / "k.so"), str(tmp / "k.c")], check=True)
    lib = ctypes.CDLL(str(tmp / "k.so"))
    outs, arrays = buffers(k, args)
    for stage in k.stages:
        getattr(lib, stage)(*[ctypes.c_void_p(a.ctypes.data) for a in arrays])
    return outs


def buffers(k: CKernel, args: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    outs = [np.empty(t.shape, t.dtype.np) for t in k.outputs]
    scratch = [np.empty(t.shape, t.dtype.np) for t in k.scratch]
    return outs, [*map(np.ascontiguousarray, args), *k.constants, *outs, *scratch]


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Bit-for-bit where it matters: values, NaN positions and the sign of zeros."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)
        if is_float_numpy(g.dtype):
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


def check(m: Module, args: list[np.ndarray], tmp: Path) -> None:
    assert_same(run_c(m, args, tmp), [np.asarray(x) for x in evaluate(m, *args)])


# ------------------------------------------------------------------------- integers


@pytest.mark.parametrize("dt", [DType.INT32, DType.INT64])
def test_integer_division_remainder_and_wrapping(dt: DType, tmp_path: Path) -> None:
    info = np.iinfo(dt.np)
    x = np.array([7, -7, 7, -7, info.min, info.min, info.max, 5, 0, -1, info.min, 3], dt.np)
    y = np.array([2, 2, -2, -2, -1, 0, 0, 0, 0, -1, 1, -3], dt.np)
    t = TensorType(dt, x.shape)
    m = module([t, t], lambda b, p: [b.div(p[0], p[1]), b.rem(p[0], p[1]), b.add(p[0], p[0]),
                                      b.mul(p[0], p[1]), b.sub(p[1], p[0]), b.neg(p[0]), b.abs(p[0]),
                                      b.sign(p[0]), b.max(p[0], p[1]), b.min(p[0], p[1])])
    check(m, [x, y], tmp_path)


def test_integer_power(tmp_path: Path) -> None:
    x = np.array([2, -2, 1, -1, -1, 0, 3, 7, 0], np.int32)
    y = np.array([10, 3, -5, -3, -4, -1, 40, 0, 0], np.int32)
    t = TensorType(DType.INT32, x.shape)
    check(module([t, t], lambda b, p: b.op(Op.POW, p[0], p[1])), [x, y], tmp_path)


# ----------------------------------------------------------------------------- floats


@pytest.mark.parametrize("dt", [DType.FLOAT16, DType.FLOAT32, DType.FLOAT64])
def test_max_min_propagate_nan_and_order_signed_zeros(dt: DType, tmp_path: Path) -> None:
    nan, inf = np.nan, np.inf
    x = np.array([nan, 1, nan, -0.0, 0.0, -0.0, 0.0, -inf, inf, 2], dt.np)
    y = np.array([1, nan, nan, 0.0, -0.0, -0.0, 0.0, nan, 3, -inf], dt.np)
    t = TensorType(dt, x.shape)
    rows = TensorType(dt, (4, 3))
    r = np.array([[nan, 1, 2], [-0.0, 0.0, -0.0], [0.0, -0.0, -1], [-inf, -inf, -inf]], dt.np)
    m = module([t, t, rows], lambda b, p: [
        b.max(p[0], p[1]), b.min(p[0], p[1]), b.max(p[1], p[0]), b.min(p[1], p[0]),
        b.reduce(p[2], kind="max", axes=(1,)), b.reduce(p[2], kind="min", axes=(1,)),
        b.reduce(p[2], kind="max", axes=(0, 1))])
    check(m, [x, y, r], tmp_path)


@pytest.mark.parametrize("src", [DType.FLOAT16, DType.FLOAT32, DType.FLOAT64])
def test_float_to_int_converts_saturate_and_map_nan_to_zero(src: DType, tmp_path: Path) -> None:
    vals = [np.nan, np.inf, -np.inf, 1e10, -1e10, 2147483647.5, -2147483648.9, 2147483648.0, 9.3e18, -9.3e18,
            9.223372036854775807e18, -9.223372036854775808e18, 2.5, -2.5, -0.0, 65504.0, 0.7]
    with np.errstate(over="ignore"):  # large values become inf in float16, as intended
        x = np.array(vals, np.float64).astype(src.np)
    t = TensorType(src, x.shape)
    m = module([t], lambda b, p: [b.convert(p[0], dtype=d) for d in (DType.INT32, DType.INT64, DType.BOOL)])
    check(m, [x], tmp_path)


def test_int_and_bool_converts(tmp_path: Path) -> None:
    x = np.array([0, 1, -1, I64.min, I64.max, 2**31, 2**31 - 1, -2**31 - 1, 65519, 65520, 2049, 16777217], np.int64)
    t = TensorType(DType.INT64, x.shape)
    outs = (DType.INT32, DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.BOOL)
    m = module([t], lambda b, p: [b.convert(p[0], dtype=d) for d in outs]
               + [b.convert(b.convert(p[0], dtype=DType.BOOL), dtype=DType.FLOAT32)])
    check(m, [x], tmp_path)


def test_float16_is_computed_in_float_and_rounded_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(257) * 300).astype(np.float16)
    c = rng.uniform(0.5, 2, 257).astype(np.float16)
    t = TensorType(DType.FLOAT16, a.shape)
    # 1 + 2^-11 + 2^-40: rounded once from double it is 1 + 2^-10; through float it would be 1.0
    d = np.array([1 + 2**-11 + 2**-40, 65519.99, 65520.0, 1e-8, -3.0000001], np.float64)
    m = module([t, t, TensorType(DType.FLOAT64, d.shape)], lambda b, p: [
        b.add(p[0], p[1]), b.mul(p[0], p[1]), b.div(p[0], p[1]), b.sqrt(p[1]), b.sub(p[0], p[1]),
        b.convert(p[2], dtype=DType.FLOAT16), b.convert(b.convert(p[2], dtype=DType.FLOAT32), dtype=DType.FLOAT16),
        b.reduce(p[0], kind="sum", axes=(0,)), b.reduce(p[1], kind="prod", axes=(0,))])
    check(m, [a, c, d], tmp_path)


def test_sign_floor_ceil_and_comparisons_on_special_values(tmp_path: Path) -> None:
    x = np.array([np.nan, -0.0, 0.0, -2.5, 2.5, np.inf, -np.inf, 1e-45], np.float32)
    y = np.array([np.nan, 0.0, -0.0, -2.5, 3.0, np.inf, 0.0, 0.0], np.float32)
    t = TensorType(DType.FLOAT32, x.shape)
    m = module([t, t], lambda b, p: [b.sign(p[0]), b.floor(p[0]), b.ceil(p[0]), b.neg(p[0]), b.abs(p[0])]
               + [b.compare(p[0], p[1], direction=d) for d in ("eq", "ne", "lt", "le", "gt", "ge")]
               + [b.select(b.compare(p[0], p[1], direction="lt"), p[0], p[1])])
    check(m, [x, y], tmp_path)


# ------------------------------------------------------------------ literals and shapes


def test_literals_of_every_special_value(tmp_path: Path) -> None:
    t = TensorType(DType.FLOAT32, (3,))
    consts = [(np.float32(np.inf), None), (np.float32(-np.inf), None), (np.float32(np.nan), None),
              (np.float32(-0.0), None), (np.float64(-np.inf), None), (np.float64(1e-310), None),
              (np.int32(I32.min), None), (np.int64(I64.min), None), (np.int64(I64.max), None),
              (np.float16(65504), None), (np.bool_(True), None), (np.arange(3, dtype=np.float32) - 1, None)]
    m = module([t], lambda b, p: [b.add(p[0], b.constant(consts[-1][0]))]
               + [b.constant(v) for v, _ in consts[:-1]])
    check(m, [np.ones(3, np.float32)], tmp_path)
    assert literal(C99, -2**63, DType.INT64) == "INT64_MIN" and literal(OpenCLC, -2**63, DType.INT64) == "LONG_MIN"
    assert literal(C99, -1.5, DType.FLOAT32) == "(-1.5f)" and literal(C99, 2**40, DType.INT64) == "1099511627776LL"


def test_size_zero_and_size_one_dims(tmp_path: Path) -> None:
    e, one = TensorType(DType.FLOAT32, (0, 3)), TensorType(DType.FLOAT32, (1,))
    ints = TensorType(DType.INT32, (2, 0))
    m = module([e, one, ints], lambda b, p: [
        *[b.reduce(p[0], kind=k, axes=(0,)) for k in ("sum", "prod", "max", "min")],
        *[b.reduce(p[2], kind=k, axes=(1,)) for k in ("and", "or", "max", "min")],
        b.exp(p[0]),
        b.broadcast_in_dim(p[1], shape=(2, 3), broadcast_dimensions=(1,)),
        b.op(Op.PAD, b.reshape(p[0], shape=(0,)), b.constant(np.float32(7)), low=(1,), high=(2,),
             interior=(3,)),
        b.op(Op.CONCATENATE, p[0], b.broadcast_in_dim(p[1], shape=(1, 3), broadcast_dimensions=(0,)), dimension=0),
        b.op(Op.DOT_GENERAL, p[0], p[0], lhs_contracting=(0,), rhs_contracting=(0,)),
        b.reduce(p[1], kind="sum", axes=())])
    check(m, [np.zeros((0, 3), np.float32), np.array([2.5], np.float32), np.zeros((2, 0), np.int32)], tmp_path)


def test_reductions_dots_and_movement_in_one_kernel(tmp_path: Path) -> None:
    """Reductions and dots are computed once into buffers that later stages read back."""
    rng = np.random.default_rng(1)
    x = rng.integers(-50, 50, (3, 4, 5)).astype(np.int32)
    w = rng.integers(-50, 50, (5, 2)).astype(np.int32)
    tx, tw = TensorType(DType.INT32, x.shape), TensorType(DType.INT32, w.shape)

    def build(b: Builder, p: list[Node]) -> list[Node]:
        s = b.reduce(p[0], kind="sum", axes=(2,))  # (3, 4)
        d = b.op(Op.DOT_GENERAL, p[0], p[1], lhs_contracting=(2,), rhs_contracting=(0,))  # (3, 4, 2)
        t = b.op(Op.TRANSPOSE, d, permutation=(2, 0, 1))  # (2, 3, 4)
        sb = b.broadcast_in_dim(s, shape=(2, 3, 4), broadcast_dimensions=(1, 2))
        r = b.op(Op.REVERSE, b.sub(t, sb), dimensions=(0, 2))
        sl = b.op(Op.SLICE, r, start=(0, 1, 0), limit=(2, 3, 4), stride=(1, 1, 3))
        return [r, sl, b.reduce(r, kind="max", axes=(0, 2)), s, b.iota(shape=(2, 3), dtype=DType.FLOAT16, dimension=1)]

    check(module([tx, tw], build), [x, w], tmp_path)


def test_long_float32_sums_and_dots_stay_accurate(tmp_path: Path) -> None:
    """A loop adds one term at a time: in float32, 3M positive terms drift ~2e-3 from the
    exact sum (NumPy's pairwise sum: ~1e-7). Float sums accumulate in double."""
    x = ((np.arange(3 << 20) % 97) / 97.0).astype(np.float32)
    t = TensorType(DType.FLOAT32, x.shape)
    m = module([t], lambda b, p: [b.reduce(p[0], kind="sum", axes=(0,)),
                                  b.op(Op.DOT_GENERAL, p[0], p[0], lhs_contracting=(0,), rhs_contracting=(0,))])
    total, dot = run_c(m, [x], tmp_path)
    wide = x.astype(np.float64)
    np.testing.assert_allclose(float(total), wide.sum(), rtol=1e-6)
    np.testing.assert_allclose(float(dot), (wide * wide).sum(), rtol=1e-6)


def test_rng_bits_match_the_reference(tmp_path: Path) -> None:
    k = TensorType(DType.INT64, ())
    m = module([k], lambda b, p: [b.op(Op.RNG_BIT_GENERATOR, p[0], shape=(3, 5), dtype=d)
                                  for d in (DType.INT32, DType.INT64)])
    check(m, [np.array(-12345, np.int64)], tmp_path)


# ----------------------------------------------------------------------- OpenCL C dialect


def test_opencl_dialect_runs_the_same_kind_of_program_on_pocl() -> None:
    """The OpenCL C dialect differs only in class attributes: the edge cases through PoCL,
    each stage one launch of 64 work-items over the grid-stride device loop."""
    require_backend("opencl")  # the OpenCL runtime (fails in CI, skips elsewhere when absent)
    import pyopencl as cl  # a heavy optional dependency: imported only here

    ctx = cl.Context(dev_type=cl.device_type.ALL)
    queue = cl.CommandQueue(ctx)
    x = np.array([7, -7, I32.min, I32.min, 5, 0], np.int32)
    y = np.array([2, -2, -1, 0, 0, 0], np.int32)
    f = np.array([np.nan, 1.0, -0.0, 3e9, -3e9, 2.5], np.float32)
    g = np.array([1.0, np.nan, 0.0, 1.0, 1.0, -2.5], np.float32)
    h = np.array([1 + 2**-11 + 2**-40, 1.0, 65520.0, -1.5, 0.1, 3.0], np.float64)
    t32, tf, td = TensorType(DType.INT32, (6,)), TensorType(DType.FLOAT32, (6,)), TensorType(DType.FLOAT64, (6,))
    m = module([t32, t32, tf, tf, td], lambda b, p: [
        b.div(p[0], p[1]), b.rem(p[0], p[1]), b.max(p[2], p[3]), b.min(p[3], p[2]),
        b.convert(p[2], dtype=DType.INT32), b.convert(p[4], dtype=DType.FLOAT16),
        b.add(b.convert(p[2], dtype=DType.FLOAT16), b.convert(p[3], dtype=DType.FLOAT16)),
        b.reduce(b.reshape(p[2], shape=(2, 3)), kind="max", axes=(1,)),
        b.op(Op.PAD, p[0], b.constant(np.int32(-9)), low=(1,), high=(0,), interior=(1,))])
    args = [x, y, f, g, h]
    r = CRenderer(OpenCLC)
    k = r.kernel("k", m.entry)
    program = cl.Program(ctx, r.program([k])).build()
    outs, arrays = buffers(k, args)
    mf = cl.mem_flags
    bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]
    for stage in k.stages:
        getattr(program, stage)(queue, (64,), None, *bufs)
    first = len(args) + len(k.constants)
    for a, buf in zip(outs, bufs[first:]):
        cl.enqueue_copy(queue, a, buf)
    queue.finish()
    assert_same(outs, [np.asarray(v) for v in evaluate(m, *args)])


def test_an_op_no_kernel_can_hold_is_a_backend_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from axle.errors import BackendError
    from axle.ir.ops import CUSTOM_CALL_TARGETS

    monkeypatch.setitem(CUSTOM_CALL_TARGETS, "lowering_c_test_host_fn", lambda x, config: x)
    t = TensorType(DType.FLOAT32, (2,))
    m = module([t], lambda b, p: b.custom_call(p[0], target="lowering_c_test_host_fn", shape=(2,), dtype=DType.FLOAT32))
    with pytest.raises(BackendError, match=r"c99 renderer: custom-call cannot appear inside a kernel \(f32\[2\]\)"):
        CRenderer(C99).kernel("k", m.entry)
