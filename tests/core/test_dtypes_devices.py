"""The narrow/unsigned integers and bfloat16 on the devices that claim them, against the
interpreter, exactly where the IR fixes every bit (issue 15): bfloat16 +, -, *, / and sqrt
are correctly rounded in float32 and then rounded once to nearest even, so a device must
give the interpreter's bits; integer ops are exact."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from axle.backend import Device
from axle.interpreter import evaluate
from axle.ir import DType, Op
from axle.ir.dtypes import dtype
from axle.partition import unsupported_nodes
from axle.registry import REGISTRY
from axle.testing import require_backend
from axle.testing.cases import run_case
from axle.testing.cases import _explicit_case as explicit_case

BF16 = np.dtype(ml_dtypes.bfloat16)
#: the new dtypes run in the full tier (CI); the fast tier keeps f32/s32/pred (tests/conftest.py)
pytestmark = pytest.mark.full_only
#: the devices that lower these dtypes themselves (no host fallback allowed)
CLAIMING = ["cpu", "opencl", "template"]


@pytest.fixture(params=CLAIMING)
def device(request: pytest.FixtureRequest) -> Device:
    return require_backend(request.param)


def _bf16_inputs(n: int = 4099, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    y = (rng.standard_normal(n) * 4).astype(np.float32)
    # ties of the final rounding (float32 values halfway between two bfloat16s), huge,
    # tiny, NaN, inf and signed zeros
    x[:10] = [1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.3e38, 1e-40, np.nan, np.inf, -np.inf, -0.0, 0.0, 65504.0]
    y[:10] = [2.0**-30, 2.0**-30, 3.3e38, 1e-40, 1.0, 1.0, 2.0, 0.0, -0.0, 1.0]
    return x.astype(BF16), y.astype(BF16)


def _run(device: Device, build: object, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    case = explicit_case("dtypes-device", build, inputs)
    caps = REGISTRY.backend_for(device).capabilities(device)
    # the device claims every dtype of the case (an op it never claims, like the template's
    # dot, runs on the host: the comparison holds either way)
    refused = [why for _, why in unsupported_nodes(case.module, caps) if "dtype" in why]
    assert not refused, f"the device must claim the case's dtypes: {refused}"
    return run_case(case, device), evaluate(case.module, *inputs)


def _same_bits(a: np.ndarray, e: np.ndarray) -> None:
    assert a.dtype == e.dtype
    if a.dtype == BF16:
        nan = np.isnan(e.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(a.astype(np.float32)), nan)
        a, e = a[~nan], e[~nan]
        a, e = a.view(np.uint16), e.view(np.uint16)
    np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("op", [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAX, Op.MIN])
def test_bf16_binary_ops_give_the_interpreters_bits(device: Device, op: Op) -> None:
    got, want = _run(device, lambda b, p: b.op(op, *p), list(_bf16_inputs()))
    _same_bits(got[0], want[0])


def test_bf16_chain_rounds_after_every_op(device: Device) -> None:
    # a fused chain: each op rounds to bfloat16 before the next reads it
    x, y = _bf16_inputs(seed=1)
    got, want = _run(device, lambda b, p: b.op(Op.SQRT, b.op(Op.ABS, b.op(Op.MUL, b.op(Op.ADD, p[0], p[1]), p[1]))),
                     [x, y])
    _same_bits(got[0], want[0])


def test_bf16_converts(device: Device) -> None:
    x = np.concatenate([_bf16_inputs()[0].astype(np.float32),
                        np.array([1.00390625, 1.01171875, 3.4e38, -3.4e38, 1e-45], np.float32)])
    got, want = _run(device, lambda b, p: b.convert(p[0], dtype=DType.BFLOAT16), [x])
    _same_bits(got[0], want[0])
    for dst in (DType.INT8, DType.UINT8, DType.UINT64, DType.INT32, DType.FLOAT16):
        got, want = _run(device, lambda b, p, d=dst: b.convert(p[0], dtype=d), [x.astype(BF16)])
        _same_bits(got[0], want[0])


def test_bf16_reduce_accumulates_in_f32(device: Device) -> None:
    x = np.ones((3, 600), BF16)  # one bf16 add at a time stops at 256
    got, want = _run(device, lambda b, p: b.reduce(p[0], kind="sum", axes=(1,)), [x])
    assert list(want[0].astype(np.float32)) == [600.0] * 3
    _same_bits(got[0], want[0])
    got, want = _run(device, lambda b, p: b.reduce(p[0], kind="max", axes=(0,)), [_bf16_inputs()[0][10:]])
    _same_bits(got[0], want[0])


def test_bf16_dot(device: Device) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((33, 65)).astype(BF16)
    c = rng.standard_normal((65, 17)).astype(BF16)
    got, want = _run(device, lambda b, p: b.dot_general(*p, lhs_contracting=(1,), rhs_contracting=(0,)), [a, c])
    assert got[0].dtype == BF16
    # one rounding of a float32-or-better sum: at most one bfloat16 ulp apart
    np.testing.assert_allclose(got[0].astype(np.float64), want[0].astype(np.float64), rtol=2.0**-7, atol=1e-6)


@pytest.mark.parametrize("dt", [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64])
def test_integer_edges(device: Device, dt: type) -> None:
    info = np.iinfo(dt)
    vals = np.array([0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1, info.max // 2 + 1], dt)
    x = np.repeat(vals, len(vals))
    y = np.tile(vals, len(vals))
    for op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.REM, Op.MAX, Op.MIN, Op.POW):
        got, want = _run(device, lambda b, p, o=op: b.op(o, *p), [x, y])
        _same_bits(got[0], want[0])
    for direction in ("lt", "ge", "eq"):
        got, want = _run(device, lambda b, p, d=direction: b.compare(*p, direction=d), [x, y])
        _same_bits(got[0], want[0])
    for dst in (DType.INT8, DType.UINT16, DType.INT64, DType.UINT64, DType.FLOAT32, DType.BFLOAT16):
        got, want = _run(device, lambda b, p, d=dst: b.convert(p[0], dtype=d), [x])
        _same_bits(got[0], want[0])
    f = np.array([np.nan, np.inf, -np.inf, -1.5, -0.5, 0.5, 255.5, 256.0, 1e10, -1e10, 2.0**63, 2.0**64], np.float64)
    got, want = _run(device, lambda b, p: b.convert(p[0], dtype=dtype(dt)), [f])
    _same_bits(got[0], want[0])
    for kind in ("sum", "prod", "max", "min", "and", "or"):
        got, want = _run(device, lambda b, p, k=kind: b.reduce(p[0], kind=k, axes=(0,)), [x])
        _same_bits(got[0], want[0])


def test_int8_dot(device: Device) -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (17, 40)).astype(np.int8)
    c = rng.integers(-128, 128, (40, 9)).astype(np.int8)
    got, want = _run(device, lambda b, p: b.dot_general(*p, lhs_contracting=(1,), rhs_contracting=(0,)), [a, c])
    _same_bits(got[0], want[0])  # wraps in int8, as XLA's s8 dot without a preferred type


def test_unsigned_iota_and_constants(device: Device) -> None:
    big = np.array([2**64 - 1, 2**63, 5], np.uint64)
    got, want = _run(device, lambda b, p: b.add(b.add(b.constant(big), p[0]),
                                                 b.iota(shape=(3,), dtype=DType.UINT64, dimension=0)),
                     [np.array([1, 2, 3], np.uint64)])
    _same_bits(got[0], want[0])
    cb = np.array([1.5, -np.inf, 3.0e38], BF16)
    got, want = _run(device, lambda b, p: b.mul(b.constant(cb), p[0]), [np.array([2, 2, 2], BF16)])
    _same_bits(got[0], want[0])


def test_int8_matmul_with_int32_accumulation(device: Device) -> None:
    """The quantized matmul: full-range int8 operands, int32 sums (preferred_element_type)."""
    rng = np.random.default_rng(8)
    a = rng.integers(-128, 128, (33, 300)).astype(np.int8)
    c = rng.integers(-128, 128, (300, 17)).astype(np.int8)
    got, want = _run(device, lambda b, p: b.dot_general(*p, lhs_contracting=(1,), rhs_contracting=(0,),
                                                        preferred_element_type=DType.INT32), [a, c])
    np.testing.assert_array_equal(want[0], a.astype(np.int32) @ c.astype(np.int32))
    _same_bits(got[0], want[0])


def test_bf16_dot_with_float32_result(device: Device) -> None:
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2, 9, 40)).astype(BF16)
    c = rng.standard_normal((2, 40, 5)).astype(BF16)
    got, want = _run(device, lambda b, p: b.dot_general(*p, lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,),
                                                        rhs_contracting=(1,), preferred_element_type=DType.FLOAT32),
                     [a, c])
    assert got[0].dtype == np.float32
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("src, acc", [(np.int8, DType.INT32), (np.uint8, DType.UINT32), (BF16, DType.FLOAT32),
                                      (np.int16, None), (np.uint64, None)])
def test_dot_and_its_epilogue_in_the_new_dtypes(device: Device, src: type, acc: DType | None) -> None:
    """A dot with a bias add and a relu (an output fusion on the devices that fuse epilogues)
    in the new dtypes: the tiled dot kernels keep their five dtypes, so these take the loop
    dot with the epilogue applied per element; exact (small integer values)."""
    rng = np.random.default_rng(10)
    a = rng.integers(-4 if np.dtype(src).kind != "u" else 0, 5, (9, 33)).astype(src)
    c = rng.integers(0, 5, (33, 7)).astype(src)
    out_dt = dtype(np.dtype(src)) if acc is None else acc
    bias = rng.integers(-50 if not out_dt.is_unsigned else 0, 50, (9, 7)).astype(out_dt.np)
    extra = {} if acc is None else {"preferred_element_type": acc}

    def build(b: object, p: list) -> object:
        d = b.dot_general(p[0], p[1], lhs_contracting=(1,), rhs_contracting=(0,), **extra)  # type: ignore[attr-defined]
        s = b.add(d, p[2])  # type: ignore[attr-defined]
        return b.max(s, b.sub(p[2], p[2]))  # type: ignore[attr-defined]

    got, want = _run(device, build, [a, c, bias])
    _same_bits(got[0], want[0])
