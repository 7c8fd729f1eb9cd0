"""sin and cos on the CPU backend over the whole finite range of each float dtype: every
float32 binade (exponents -149..127, both signs) against float64 NumPy, a sample of float64
binades up to 1.8e308 against a 420-digit reference, every float16, special values, and the
fused loop still in the host's SIMD vectors."""
from __future__ import annotations

import numpy as np
import pytest
import axle
from axle.backend import CompileOptions
from axle.ir import Builder, DType
from axle.testing.accuracy import binade_sweep, ulp_error
from axle.testing.exact import sincos, sincos_array

#: max error in ulps (measured: 0.77 float32, 0.55 float64 against the exact value)
BOUND = {DType.FLOAT16: 0.51, DType.FLOAT32: 1.0, DType.FLOAT64: 1.0}


def _run(op: str, x: np.ndarray, cpu) -> tuple[np.ndarray, object]:  # noqa: ANN001
    be = axle.REGISTRY.backend("cpu")
    dt = DType(axle.ir.dtype(x.dtype).value)
    b = Builder(f"trig_{op}")
    p = b.parameter(f"{dt.value}[{x.size}]")
    exe = be.compile(b.build(b.op(getattr(axle.ir.Op, op.upper()), p)), cpu, CompileOptions(optimized=False))
    return be.to_host(exe.execute([be.to_device(x, cpu)])[0]), exe


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_float32_every_binade(op: str, cpu) -> None:  # noqa: ANN001
    """Before Payne-Hanek reduction: 0.03 absolute error at 1e6, results outside [-1, 1]
    and inf from 1e9 on."""
    x = binade_sweep(DType.FLOAT32, 2000, np.random.default_rng(12))
    got, _ = _run(op, x, cpu)
    err = ulp_error(got, getattr(np, op)(x.astype(np.float64)), DType.FLOAT32)
    worst = int(np.argmax(err))
    assert err[worst] <= BOUND[DType.FLOAT32], f"{op}({x[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp"


_F64_HARD = [
    6381956970095103 * 2.0 ** 797,  # the double closest to a multiple of pi/2 (|r| ~ 2^-61)
    1e22, 1e300, 2.0 ** 1023, np.finfo(np.float64).max, np.pi / 2, np.pi, 2 * np.pi, 2.0 ** 28, 2.0 ** 28 - 1,
    np.nextafter(2.0 ** 28, 0), 0.7853981633974483, 3 * 0.7853981633974483, 1e-300, 5e-324, 2.2250738585072014e-308,
]


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_float64_binades(op: str, cpu) -> None:  # noqa: ANN001
    """Every 8th binade from 2^-1074 to 2^1023 and all of 2^-4..2^40, where the two
    reductions meet, against the exact value. Before: garbage from 1e20."""
    rng = np.random.default_rng(13)
    exps = sorted(set(range(-1074, 1024, 8)) | set(range(-4, 41)))
    x = np.concatenate([binade_sweep(DType.FLOAT64, 8, rng, exponents=exps), _F64_HARD, np.negative(_F64_HARD)])
    got, _ = _run(op, x, cpu)
    ref, tail = sincos_array(x, op)
    err = ulp_error(got, ref, DType.FLOAT64, tail)
    worst = int(np.argmax(err))
    assert err[worst] <= BOUND[DType.FLOAT64], f"{op}({x[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp"


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_float16_every_value(op: str, cpu) -> None:  # noqa: ANN001
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    x = x[np.isfinite(x)]
    got, _ = _run(op, x, cpu)
    err = ulp_error(got, getattr(np, op)(x.astype(np.float64)), DType.FLOAT16)
    assert err.max() <= BOUND[DType.FLOAT16]


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_special_values(dt: type, cpu) -> None:  # noqa: ANN001
    fi = np.finfo(dt)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal,
                  fi.smallest_normal, -fi.tiny * 3, fi.max, -fi.max], dtype=dt)
    s, _ = _run("sin", x, cpu)
    c, _ = _run("cos", x, cpu)
    assert np.isnan(s[:3]).all() and np.isnan(c[:3]).all()
    np.testing.assert_array_equal(s[3:9], x[3:9])  # sin x = x exactly, with the sign of zero
    assert list(np.signbit(s[3:5])) == [False, True]
    np.testing.assert_array_equal(c[3:9], np.ones(6, dt))
    for got, fn in ((s, np.sin), (c, np.cos)):  # the largest values: a huge reduction
        want = fn(x[9:].astype(np.float64))
        if dt is np.float64:
            want = np.array([sincos(float(v), fn.__name__)[0] for v in x[9:]])
        assert ulp_error(got[9:], want, DType(axle.ir.dtype(np.dtype(dt)).value)).max() <= 1.0


def test_fused_loop_calls_the_vector_variant(cpu) -> None:  # noqa: ANN001
    """The loop vectorizer turns the loop into calls of the host-width vector variant of
    sin/cos (the vector-function ABI attribute), whose Payne-Hanek branch gathers the 2/pi
    window; the scalar function serves only the remainder."""
    from axle_cpu.target import host

    # the host's width; on AVX-512 also 256 bits (LLVM's prefer-256-bit tuning of Intel's
    # cores: Sapphire Rapids' loops called no variant before it had a 256-bit one)
    widths = (512, 256) if host().vector_bits == 512 else (host().vector_bits,)
    for dt, t, bits in ((np.float32, "float", 32), (np.float64, "double", 64)):
        for op in ("sin", "cos"):
            _, exe = _run(op, np.ones(4099, dt), cpu)
            ir_ = exe.optimized_ir()
            calls = [w for w in widths if f"call <{w // bits} x {t}> @axle_{op}_f{bits}_v{w // bits}(" in ir_]
            assert calls, f"{op} {t}: the loop is not vectorized"
            assert "llvm.masked.gather" in ir_
