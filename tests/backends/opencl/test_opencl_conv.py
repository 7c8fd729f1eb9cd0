"""Native convolution on opencl (convs.py): the kit's convolution cases and every
configuration class against the interpreter with both launch strategies (CPU register
blocks, GPU local-memory tiles), gradients through nn.conv against finite differences,
the epilogue fused into the convolution's kernel, and the dtypes it refuses going to the
core's decomposition."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import nn
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.conv import conv_dimension_numbers
from axle.ir.dtypes import DType
from axle.ir.module import Module
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.partition import placement_of
from axle.testing.cases import OpCase, cases_for, check_case, compile_case, random_input, run_case
from axle_opencl.convs import CONV_DTYPES


def _native(optimized: Module) -> bool:
    """Whether the compiled module still holds the convolution (not its decomposition)."""
    return any(n.op is Op.CONVOLUTION for c in optimized.computations() for n in c.nodes)


def _kit_cases(strategy: str) -> list[OpCase]:
    """The kit's convolution cases a strategy runs: all on CPU; on GPU the native ones of a
    float and an int (the kernel's dtype handling is the CPU one's)."""
    cases = cases_for(Op.CONVOLUTION)
    if strategy == "gpu":
        return [c for c in cases if c.module.entry.root.dtype in CONV_DTYPES & {DType.FLOAT32, DType.INT32}]
    return cases


def test_the_kits_convolution_cases_run_natively(ocl, strategy) -> None:  # noqa: ANN001
    native = {c.id for c in cases_for(Op.CONVOLUTION) if c.module.entry.root.dtype in CONV_DTYPES}
    assert len(native) >= 5 * 14, len(native)
    for case in _kit_cases(strategy):
        _, optimized = compile_case(case.module, ocl)
        assert _native(optimized) == (case.id in native), case.id
        check_case(case, ocl)


# name: input shape, kernel shape, (lhs, rhs, out) layouts, window attributes
def _w(n: int, **kw: Any) -> dict[str, Any]:
    one, zero = (1,) * n, (0,) * n
    return {"window_strides": kw.pop("strides", one), "padding_low": kw.pop("low", zero),
            "padding_high": kw.pop("high", zero), "lhs_dilation": kw.pop("lhs_dilation", one),
            "rhs_dilation": kw.pop("rhs_dilation", one), "feature_group_count": kw.pop("groups", 1),
            "batch_group_count": kw.pop("batch_groups", 1)}


CONFIGS: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[str, str, str], dict[str, Any]]] = {
    "1d-nwc-stride3": ((2, 17, 5), (4, 5, 7), ("NWC", "WIO", "NWC"), _w(1, strides=(3,), low=(2,), high=(1,))),
    "1d-ncw-wide-features": ((1, 3, 11), (37, 3, 3), ("NCW", "OIW", "NCW"), _w(1, low=(1,), high=(1,))),
    "2d-nchw-same": ((3, 5, 9, 7), (19, 5, 3, 3), ("NCHW", "OIHW", "NCHW"), _w(2, low=(1, 1), high=(1, 1))),
    "2d-nhwc-stride2": ((2, 9, 8, 6), (3, 3, 6, 40), ("NHWC", "HWIO", "NHWC"),
                        _w(2, strides=(2, 2), low=(1, 0), high=(1, 1))),
    "2d-nhwc-to-nchw": ((2, 6, 7, 3), (2, 3, 3, 33), ("NHWC", "HWIO", "NCHW"), _w(2, low=(0, 1), high=(1, 0))),
    "2d-kernel-ohwi": ((1, 4, 6, 6), (17, 2, 2, 4), ("NCHW", "OHWI", "NCHW"), _w(2, strides=(1, 2))),
    "2d-rhs-dilation": ((1, 3, 11, 10), (5, 3, 3, 2), ("NCHW", "OIHW", "NCHW"), _w(2, rhs_dilation=(2, 3))),
    "2d-transposed": ((2, 3, 5, 4), (4, 3, 3, 3), ("NCHW", "OIHW", "NCHW"),
                      _w(2, lhs_dilation=(2, 2), low=(2, 2), high=(2, 1))),
    "2d-negative-padding": ((1, 2, 8, 7), (3, 2, 3, 2), ("NCHW", "OIHW", "NCHW"),
                            _w(2, low=(-2, 1), high=(1, -1), strides=(2, 1))),
    "2d-everything": ((2, 7, 9, 4), (6, 2, 2, 3), ("NHWC", "OIHW", "NCHW"),
                      _w(2, strides=(2, 1), low=(1, -1), high=(2, 0), lhs_dilation=(1, 2), rhs_dilation=(2, 1),
                         groups=2)),
    "depthwise": ((2, 8, 6, 6), (8, 1, 3, 3), ("NCHW", "OIHW", "NCHW"), _w(2, low=(1, 1), high=(1, 1), groups=8)),
    "depthwise-multiplier-nhwc": ((1, 5, 5, 4), (3, 3, 1, 8), ("NHWC", "HWIO", "NHWC"), _w(2, groups=4)),
    "grouped-nhwc": ((2, 6, 6, 6), (2, 2, 2, 18), ("NHWC", "HWIO", "NHWC"), _w(2, groups=3)),
    "batch-groups": ((6, 2, 5, 4), (6, 2, 3, 2), ("NCHW", "OIHW", "NCHW"), _w(2, batch_groups=3)),
    "batch-groups-nhwc": ((4, 5, 5, 3), (2, 2, 3, 4), ("NHWC", "HWIO", "NHWC"), _w(2, batch_groups=2)),
    "3d-ndhwc": ((1, 4, 5, 3, 2), (2, 2, 2, 2, 5), ("NDHWC", "DHWIO", "NDHWC"),
                 _w(3, strides=(1, 2, 1), low=(1, 0, 1), high=(0, 1, 1))),
    "size-1": ((1, 1, 1, 1), (1, 1, 1, 1), ("NCHW", "OIHW", "NCHW"), _w(2)),
    "kernel-covers-input": ((3, 2, 4, 5), (7, 2, 4, 5), ("NCHW", "OIHW", "NCHW"), _w(2)),
    "long-k": ((1, 130, 3, 3), (20, 130, 3, 3), ("NCHW", "OIHW", "NCHW"), _w(2, low=(1, 1), high=(1, 1))),
    # channels-first rows at least one vector wide (pixel vectors on CPU devices): ragged
    # ends, window columns reaching into padding, vectors entirely in the padding
    "nchw-wide-rows": ((2, 3, 5, 37), (7, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), _w(2, low=(1, 1), high=(1, 1))),
    "nchw-wide-dilated": ((1, 2, 4, 40), (5, 2, 2, 4), ("NCHW", "OIHW", "NCHW"),
                          _w(2, rhs_dilation=(1, 3), low=(0, 4), high=(1, 2), strides=(2, 1))),
    "nchw-all-padding": ((1, 2, 3, 16), (3, 2, 1, 3), ("NCHW", "OIHW", "NCHW"), _w(2, low=(0, 17), high=(0, 1))),
    "ncw-wide": ((2, 4, 70), (9, 4, 5), ("NCW", "OIW", "NCW"), _w(1, low=(2,), high=(3,))),
    "ncdhw-wide": ((1, 2, 3, 2, 33), (3, 2, 2, 1, 3), ("NCDHW", "OIDHW", "NCDHW"),
                   _w(3, low=(1, 0, 1), high=(0, 0, 1), lhs_dilation=(2, 1, 1))),
    "nchw-wide-depthwise": ((2, 3, 4, 35), (6, 1, 3, 3), ("NCHW", "OIHW", "NCHW"),
                            _w(2, low=(1, 1), high=(1, 1), groups=3)),
    "nchw-wide-half-vectors": ((2, 3, 4, 11), (5, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), _w(2, low=(1, 1), high=(1, 1))),
    "nchw-wide-stride2": ((2, 3, 5, 41), (6, 3, 3, 3), ("NCHW", "OIHW", "NCHW"),
                          _w(2, strides=(2, 2), low=(1, 1), high=(1, 2))),
    "nchw-wide-stride2-1x1": ((1, 4, 4, 40), (5, 4, 1, 1), ("NCHW", "OIHW", "NCHW"), _w(2, strides=(2, 2))),
    "ncw-wide-stride2-dilated": ((2, 3, 50), (4, 3, 3), ("NCW", "OIW", "NCW"),
                                 _w(1, strides=(2,), rhs_dilation=(2,), low=(3,), high=(0,))),
    # channels-first maps with rows too narrow for pixel vectors: vectors over the flat image
    "nchw-image-7x7": ((2, 5, 7, 7), (9, 5, 3, 3), ("NCHW", "OIHW", "NCHW"), _w(2, low=(1, 1), high=(1, 1))),
    "nchw-image-stride2": ((1, 3, 13, 13), (4, 3, 3, 3), ("NCHW", "OIHW", "NCHW"),
                           _w(2, strides=(2, 2), low=(1, 1), high=(1, 1))),
    "ncdhw-image-transposed": ((1, 2, 3, 3, 4), (3, 2, 2, 2, 2), ("NCDHW", "OIDHW", "NCDHW"),
                               _w(3, lhs_dilation=(2, 1, 2), low=(1, 1, 0), high=(1, 0, 1))),
    # rows long enough that chunks of vectors in the middle share one run-time loop
    "nchw-wide-long-rows": ((1, 2, 3, 200), (3, 2, 3, 3), ("NCHW", "OIHW", "NCHW"), _w(2, low=(1, 1), high=(1, 1))),
    "nchw-wide-long-rows-stride2": ((1, 2, 3, 420), (3, 2, 3, 3), ("NCHW", "OIHW", "NCHW"),
                                    _w(2, strides=(2, 2), low=(1, 1), high=(1, 1))),
    "nchw-wide-batch-groups": ((4, 2, 3, 20), (4, 2, 2, 3), ("NCHW", "OIHW", "NCHW"), _w(2, batch_groups=2)),
}


def conv_case(name: str, dt: DType) -> OpCase:
    xs, ws, layouts, window = CONFIGS[name]
    b = Builder(f"conv_{name}".replace("-", "_"))
    x, w = b.parameter(TensorType(dt, xs)), b.parameter(TensorType(dt, ws))
    module = b.build(b.convolution(x, w, **conv_dimension_numbers(*layouts), **window))
    rng = np.random.default_rng(len(name))
    inputs = [random_input(rng, TensorType(dt, s), special=False, small=not dt.is_float or dt is DType.FLOAT16)
              for s in (xs, ws)]
    return OpCase(f"{name}-{dt.value}", module, inputs)


def _config_dtypes(name: str, strategy: str) -> tuple[DType, ...]:
    """Every dtype of the kernels is in the kit cases; here the layouts and windows."""
    dts = (DType.FLOAT32, DType.INT32) if strategy == "cpu" else (DType.FLOAT32,)
    if strategy == "cpu" and ("wide" in name or "image" in name):  # other vector widths and lane types
        dts += (DType.FLOAT64, DType.FLOAT16)
    return dts


#: what the tests compile (optimized), built ahead in batches (conftest.py)
PREBUILT = {
    "test_the_kits_convolution_cases_run_natively": lambda p: [(c.module, True) for c in _kit_cases(p["strategy"])],
    "test_every_configuration_class_matches_the_interpreter":
        lambda p: [(conv_case(p["name"], dt).module, True) for dt in _config_dtypes(p["name"], p["strategy"])],
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_configuration_class_matches_the_interpreter(name: str, ocl, strategy) -> None:  # noqa: ANN001
    for dt in _config_dtypes(name, strategy):
        case = conv_case(name, dt)
        _, optimized = compile_case(case.module, ocl)
        assert _native(optimized), case.id
        check_case(case, ocl)


def test_a_dtype_the_kernels_do_not_compute_gets_the_decomposition_and_the_report_says_so(ocl) -> None:  # noqa: ANN001
    case = conv_case("2d-nchw-same", DType.BFLOAT16)
    exe, optimized = compile_case(case.module, ocl)
    assert not _native(optimized)
    summary = placement_of(exe)
    assert summary is not None and summary.decomposed == {"convolution": 1} and not summary.fallback
    assert "decomposed for opencl:0 (not claimed): convolution" in str(summary)
    check_case(case, ocl)


# ------------------------------------------------------------------------ gradients


def _numeric_grad(f: Any, args: list[np.ndarray], i: int, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(args[i])
    for idx in np.ndindex(args[i].shape):
        hi, lo = [a.copy() for a in args], [a.copy() for a in args]
        hi[i][idx] += eps
        lo[i][idx] -= eps
        g[idx] = (f(*hi) - f(*lo)) / (2 * eps)
    return g


@pytest.mark.parametrize(("layout", "stride", "padding", "dilation", "groups"), [
    ("NCHW", 1, "SAME", 1, 1), ("NHWC", 2, [(1, 0), (0, 1)], 1, 2), ("NCW", 2, "VALID", 2, 1),
    ("NDHWC", 1, "SAME", 1, 3)])
def test_nn_conv_gradients_match_finite_differences_in_float64(ocl, layout: str, stride: int, padding: Any,  # noqa: ANN001
                                                                 dilation: int, groups: int) -> None:
    """The VJPs of convolution are convolutions (input gradient: lhs dilation and a
    flipped kernel; kernel gradient: batch groups): all run natively here."""
    ns = len(layout) - 2
    rng = np.random.default_rng(3)
    first = layout.index("C") == 1
    size, o = (5 if ns < 3 else 3), 2 * groups
    xs = (2, 3 * groups, *(size,) * ns) if first else (2, *(size,) * ns, 3 * groups)
    ws = (o, 3, *(3,) * ns) if first else (*(3,) * ns, 3, o)
    x, w, b = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(o)

    def loss(a, k, c):  # noqa: ANN001, ANN202
        y = nn.conv(a, k, c, stride=stride, padding=padding, dilation=dilation, groups=groups, layout=layout)
        return anp.sum(anp.tanh(y) * anp.cos(y))

    grad = axle.jit(axle.grad(loss, argnums=(0, 1, 2)), device=ocl)
    compiled = grad.lower(x, w, b).compile()
    assert _native(compiled.module) and not compiled.report()["placement"]["fallback"]
    with axle.device("interpreter:0"):
        ref = axle.jit(loss)

        def f(a: np.ndarray, k: np.ndarray, c: np.ndarray) -> float:
            return float(np.asarray(ref(a, k, c)))

        want = [_numeric_grad(f, [x, w, b], i) for i in range(3)]
    for got, exp in zip(grad(x, w, b), want):
        np.testing.assert_allclose(np.asarray(got), exp, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------- epilogue


def _conv_layer(x, w, b, r):  # noqa: ANN001, ANN202
    return anp.maximum(nn.conv(x, w, b, padding="SAME"), 0.0)


def _conv_small_maps(x, w, b, r):  # noqa: ANN001, ANN202
    return anp.maximum(nn.conv(x, w, b, padding="SAME"), 0.0)


def _conv_residual(x, w, b, r):  # noqa: ANN001, ANN202
    return (nn.conv(x, w, b, padding="SAME", layout="NHWC") * 0.5 + r).astype(anp.float16)


@pytest.mark.parametrize("fn", [_conv_layer, _conv_small_maps, _conv_residual], ids=lambda f: f.__name__)
def test_relu_of_conv_plus_bias_is_one_kernel(ocl, strategy, fn) -> None:  # noqa: ANN001
    """relu(conv(x, w) + b), and a scaled residual add converted to float16: one output
    fusion, one kernel (explain and the report show it), the interpreter's values."""
    rng = np.random.default_rng(1)
    nhwc = fn is _conv_residual
    # NCHW: wide rows (pixel vectors on CPU devices), or 7x7 maps (image vectors)
    x = rng.standard_normal((2, 9, 7, 5) if nhwc else (2, 5, 7, 7) if fn is _conv_small_maps else (2, 5, 9, 21))
    x = x.astype(np.float32)
    w = rng.standard_normal((3, 3, 5, 21) if nhwc else (21, 5, 3, 3)).astype(np.float32)
    b = rng.standard_normal(21).astype(np.float32)
    r = rng.standard_normal((2, 9, 7, 21)).astype(np.float32)  # (read by _conv_residual only)
    lowered = axle.jit(fn, device=ocl).lower(x, w, b, r)
    case = OpCase(fn.__name__, lowered.module, [x, w, b, r])
    exe, optimized = compile_case(case.module, ocl)
    fusions = [n for n in optimized.entry.nodes if n.op is Op.FUSION]
    assert [f.attr["kind"] for f in fusions] == ["output"]
    assert any(n.op is Op.CONVOLUTION for n in fusions[0].attr["computation"].nodes)
    assert exe.report()["kernels"] == 1
    text = str(lowered.explain())
    assert "(output) [" in text and "convolution" in text and "opencl:0: 1 kernel" in text
    (expected,) = evaluate(case.module, *case.inputs)
    (actual,) = run_case(case, ocl)
    assert actual.dtype == expected.dtype
    np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32), rtol=2e-3 if nhwc else 1e-4,
                               atol=2e-3 if nhwc else 1e-4)


def test_the_epilogue_reads_every_operand_layout(ocl, strategy) -> None:  # noqa: ANN001
    """An epilogue over a convolution whose output layout differs from its input's, with
    a per-pixel operand broadcast along the features: the flat output index decodes right."""
    b = Builder("epi_layouts")
    x, w = b.parameter("f32[2,6,7,3]"), b.parameter("f32[2,3,3,33]")
    s = b.parameter("f32[2,6,6]")
    y = b.convolution(x, w, **conv_dimension_numbers("NHWC", "HWIO", "NCHW"), **_w(2, low=(0, 1), high=(1, 0)))
    root = b.tanh(b.mul(y, b.broadcast_in_dim(s, shape=y.shape, broadcast_dimensions=(0, 2, 3))))
    module = b.build(root)
    rng = np.random.default_rng(2)
    case = OpCase("epi_layouts", module, [rng.standard_normal(t.shape).astype(np.float32)
                                          for t in module.entry.parameter_types])
    exe, _ = compile_case(module, ocl)
    assert exe.report()["kernels"] == 1
    (expected,) = evaluate(module, *case.inputs)
    (actual,) = run_case(case, ocl)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)

