"""Native convolution on cpu (axle_cpu/conv.py: an implicit GEMM on the GEMM kernel)
against the interpreter: every configuration class (1-D/2-D/3-D, both layouts and mixed
ones, strides, padding low/high/negative, lhs and rhs dilation, feature groups, depthwise,
batch groups, size-1 and odd sizes, several K and M blocks), every dtype the GEMM
computes, thread splits, the narrower vector units' tiles; the epilogue in the same kernel;
gradients of nn.conv through the native path against finite differences; and what it
refuses going to the core's decomposition, said in the placement summary."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

# the kernel called over thread ranges as the pool does; split by K on 2 threads
from test_cpu_gemm import _call, split_k_across_threads

import axle
import axle.numpy as anp
from axle import lax, nn
from axle.backend import CompileOptions
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Module
from axle.ir.conv import conv_dimension_numbers
from axle.ir.module import Computation
from axle.ir.opcodes import Op
from axle.ir.types import TensorType
from axle.testing.cases import assert_close, compile_case, random_input

RNG = np.random.default_rng(17)


def _window(n: int, strides=None, low=None, high=None, lhs=None, rhs=None, **groups: int) -> dict:  # noqa: ANN001
    return {"window_strides": tuple(strides or (1,) * n), "padding_low": tuple(low or (0,) * n),
            "padding_high": tuple(high or (0,) * n), "lhs_dilation": tuple(lhs or (1,) * n),
            "rhs_dilation": tuple(rhs or (1,) * n), **groups}


# name: input shape, kernel shape, (input, kernel, output) layouts, window attributes
CONFIGS = [
    ("1d-ncw", (2, 3, 11), (4, 3, 3), ("NCH", "OIH", "NCH"), _window(1, low=(1,), high=(1,))),
    ("1d-nwc-strided", (3, 13, 5), (3, 5, 6), ("NHC", "HIO", "NHC"), _window(1, strides=(2,), low=(2,))),
    ("2d-nchw-same", (2, 5, 9, 7), (6, 5, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2, low=(1, 1), high=(1, 1))),
    ("2d-nhwc-same", (2, 9, 7, 5), (3, 3, 5, 6), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1), high=(1, 1))),
    ("2d-nhwc-stride2", (2, 11, 10, 4), (3, 3, 4, 7), ("NHWC", "HWIO", "NHWC"),
     _window(2, strides=(2, 2), low=(1, 0), high=(1, 1))),
    ("2d-nchw-stride-asym", (1, 3, 10, 9), (5, 3, 2, 4), ("NCHW", "OIHW", "NCHW"),
     _window(2, strides=(3, 2), low=(0, 2), high=(2, 0))),
    ("2d-negative-pad", (2, 2, 8, 7), (3, 2, 3, 2), ("NCHW", "OIHW", "NCHW"), _window(2, low=(-1, 1), high=(0, -2))),
    ("2d-rhs-dilation", (1, 9, 9, 3), (3, 3, 3, 4), ("NHWC", "HWIO", "NHWC"), _window(2, rhs=(2, 3), low=(2, 1))),
    ("2d-lhs-dilation", (2, 3, 5, 4), (4, 3, 3, 3), ("NCHW", "OIHW", "NCHW"),
     _window(2, lhs=(2, 3), low=(2, 2), high=(2, 1))),
    ("2d-both-dilations-nhwc", (1, 6, 5, 2), (2, 3, 2, 5), ("NHWC", "HWIO", "NHWC"),
     _window(2, lhs=(2, 1), rhs=(1, 2), strides=(1, 2), low=(1, 0), high=(0, 3))),
    ("grouped-nchw", (2, 6, 7, 6), (9, 2, 3, 3), ("NCHW", "OIHW", "NCHW"),
     _window(2, low=(1, 1), high=(1, 1), feature_group_count=3)),
    ("grouped-nhwc", (2, 7, 6, 6), (3, 3, 2, 9), ("NHWC", "HWIO", "NHWC"), _window(2, feature_group_count=3)),
    ("depthwise-nchw", (2, 5, 8, 7), (5, 1, 3, 3), ("NCHW", "OIHW", "NCHW"),
     _window(2, low=(1, 1), high=(1, 1), feature_group_count=5)),
    ("depthwise-nhwc", (2, 8, 7, 5), (3, 3, 1, 5), ("NHWC", "HWIO", "NHWC"),
     _window(2, strides=(2, 1), low=(1, 1), high=(1, 1), feature_group_count=5)),
    ("depthwise-multiplier", (1, 4, 6, 6), (8, 1, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2, feature_group_count=4)),
    ("batch-groups-nchw", (4, 3, 6, 5), (6, 3, 2, 2), ("NCHW", "OIHW", "NCHW"), _window(2, batch_group_count=2)),
    ("batch-groups-nhwc", (6, 5, 6, 3), (2, 2, 3, 6), ("NHWC", "HWIO", "NHWC"),
     _window(2, low=(1, 0), batch_group_count=3)),
    ("3d-ncdhw", (1, 2, 5, 4, 6), (3, 2, 2, 3, 2), ("NCDHW", "OIDHW", "NCDHW"), _window(3, low=(1, 0, 1))),
    ("3d-ndhwc", (2, 4, 5, 3, 3), (3, 2, 2, 3, 4), ("NDHWC", "DHWIO", "NDHWC"),
     _window(3, strides=(2, 1, 1), high=(0, 1, 1))),
    ("mixed-layouts", (2, 3, 7, 6), (3, 2, 4, 3), ("NCHW", "HWOI", "NHWC"), _window(2, low=(1, 1))),
    ("channels-first-out", (2, 7, 6, 3), (4, 3, 3, 3), ("NHWC", "OIHW", "NCHW"), _window(2, high=(1, 1))),
    ("batch-last", (3, 7, 6, 2), (4, 3, 3, 3), ("CHWN", "OIHW", "CHWN"), _window(2, low=(1, 1), high=(1, 1))),
    # output rows of 40 pixels: panel lines read as masked vector loads (the padding masked)
    ("nchw-wide-rows", (2, 3, 5, 40), (4, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2, low=(1, 2), high=(1, 0))),
    ("kernel-1x1", (3, 8, 5, 5), (5, 8, 1, 1), ("NCHW", "OIHW", "NCHW"), _window(2)),
    ("spatial-1x1", (4, 1, 1, 8), (1, 1, 8, 5), ("NHWC", "HWIO", "NHWC"), _window(2)),
    ("batch-1-out-1", (1, 3, 5, 5), (1, 3, 5, 5), ("NCHW", "OIHW", "NCHW"), _window(2)),
    ("window-larger-than-input", (1, 2, 2, 3), (2, 2, 4, 4), ("NCHW", "OIHW", "NCHW"), _window(2, low=(2, 1),
                                                                                              high=(1, 2))),
    # K = 64 * 9 = 576: two K blocks; 2 * 13 * 14 = 364 pixels: several M blocks and edge tiles
    ("several-k-blocks-nhwc", (2, 13, 14, 64), (3, 3, 64, 19), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1),
                                                                                                high=(1, 1))),
    ("several-k-blocks-nchw", (2, 64, 13, 14), (19, 64, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2)),
    # runs of >= 16 input features are read in place through row pointers (indirect)
    ("indirect-grouped-strided", (2, 9, 8, 48), (3, 3, 16, 6), ("NHWC", "HWIO", "NHWC"),
     _window(2, strides=(2, 1), low=(1, 1), high=(0, 1), rhs=(1, 2), feature_group_count=3)),
    ("indirect-lhs-dilation", (1, 5, 4, 16), (3, 2, 16, 3), ("NHWC", "HWIO", "NHWC"),
     _window(2, lhs=(2, 2), low=(2, 1), high=(1, 1))),
    ("indirect-batch-groups", (4, 6, 5, 16), (2, 2, 16, 6), ("NHWC", "HWIO", "NHWC"),
     _window(2, low=(1, 0), batch_group_count=2)),
    # 600 features: K segments of 300 (a divisor that fits a K block)
    ("indirect-split-run", (1, 4, 3, 600), (3, 2, 600, 5), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1))),
    # K = 9 * 100: the second K block starts inside a run of input features
    ("k-block-inside-a-feature-run", (1, 6, 5, 100), (3, 3, 100, 7), ("NHWC", "HWIO", "NHWC"),
     _window(2, low=(1, 1), high=(1, 1))),
    # the output's W (size 1) lies outside the pixels that merge (N splits them from H): its
    # one position reads the low padding, masked (it read the input's element before x)
    ("size-1-spatial-outside-the-pixels", (3, 5, 2, 2), (2, 3, 1, 3), ("NHWC", "IWHO", "WNCH"),
     _window(2, strides=(3, 1), low=(1, 0), high=(1, 0))),
    ("size-1-spatial-outside-the-pixels-runs", (3, 5, 2, 16), (16, 3, 1, 3), ("NHWC", "IWHO", "WNCH"),
     _window(2, strides=(3, 3), low=(1, 0), high=(1, 0))),
    # a packed kernel shared by every batch (GemmSpec.batch_outer): an NCHW weight gradient
    # (the images are the input features, K = 8 x 12 x 12 in several K blocks, the input's
    # channels the output's batch) and an input gradient's transposed kernel (IOHW)
    ("weight-gradient-nchw", (8, 6, 12, 12), (8, 5, 12, 12), ("CNHW", "IOHW", "NCHW"), _window(2, low=(1, 1),
                                                                                               high=(1, 1))),
    ("transposed-kernel-batch", (3, 7, 5, 5), (7, 9, 3, 3), ("NCHW", "IOHW", "NCHW"),
     _window(2, lhs=(2, 2), low=(1, 1), high=(2, 2))),
]
DTYPES = [DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32, DType.INT64]


def conv_module(cfg: tuple, dt: DType) -> Module:
    name, xs, ws, layouts, window = cfg
    b = Builder(name.replace("-", "_"))
    x, w = b.parameter(TensorType(dt, xs)), b.parameter(TensorType(dt, ws))
    return b.build(b.convolution(x, w, **conv_dimension_numbers(*layouts), **window))


def conv_inputs(m: Module) -> list[np.ndarray]:
    out = []
    for p in m.entry.parameters:
        t = p.type
        if t.dtype.is_int:
            out.append(RNG.integers(-9, 10, size=t.shape).astype(t.dtype.np))
        else:
            out.append(random_input(RNG, t, special=False, small=t.dtype is DType.FLOAT16))
    return out


def check_conv(m: Module, xs: list[np.ndarray], got: np.ndarray) -> None:
    """Integers exactly; floats within K*eps*(|x| conv |w|) of the interpreter (any
    summation order), float16 plus its one rounding."""
    (want,) = evaluate(m, *xs)
    assert got.shape == want.shape and got.dtype == want.dtype, m.name
    dt = m.entry.root.dtype
    if not dt.is_float:
        assert_close(got, want, 0, 0, m.name)
        return
    conv = m.entry.root
    k = conv.operands[1].tensor_type.size // conv.operands[1].shape[conv.attr["kernel_output_feature_dimension"]]
    b = Builder("mag")
    x, w = (b.parameter(TensorType(DType.FLOAT64, o.shape)) for o in conv.operands)
    (mag,) = evaluate(b.build(b.convolution(x, w, **conv.attr)), *(np.abs(a.astype(np.float64)) for a in xs))
    eps = 2.0**-24 if dt in (DType.FLOAT16, DType.FLOAT32) else 2.0**-53
    tol = 2 * max(k, 1) * eps * mag + (np.abs(want.astype(np.float64)) * 2**-10 if dt is DType.FLOAT16 else 0)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert (err <= tol).all(), f"{m.name} {dt.value}: max excess {(err - tol).max()}"


def native_convs(module: Module) -> int:
    """Convolution nodes left in an optimized module (the entry and its fusions): the ones
    the device runs natively (a refused one is expanded into its decomposition)."""

    def count(comp: Computation) -> int:
        return sum(1 if n.op is Op.CONVOLUTION else count(n.attr["computation"]) if n.op is Op.FUSION else 0
                   for n in comp.nodes)

    return count(module.entry)


def _backend():  # noqa: ANN202
    return axle.REGISTRY.backend("cpu")


def run(m: Module, xs: list[np.ndarray], cpu) -> np.ndarray:  # noqa: ANN001
    from axle_cpu.conv import ConvSpec

    be = _backend()
    exe = be.compile(m, cpu, CompileOptions(optimized=False))
    assert any(isinstance(s, ConvSpec) for s in exe.plan.kernels.values()), f"{m.name}: not the native kernel"
    return be.to_host(exe.execute([be.to_device(x, cpu) for x in xs])[0])


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c[0])
def test_native_convolution_matches_interpreter(cfg, dt, cpu) -> None:  # noqa: ANN001
    from axle_cpu.conv import conv_refusal

    m = conv_module(cfg, dt)
    assert conv_refusal(m.entry.root) is None
    xs = conv_inputs(m)
    check_conv(m, xs, run(m, xs, cpu))


def _kernel(m: Module, vector_bits: int = 0):  # noqa: ANN202
    """The conv kernel of a module compiled alone (tiles for ``vector_bits``)."""
    from axle_cpu.conv import ConvSpec
    from axle_cpu.executable import KFUNC, compile_kernels
    from axle_cpu.plan import build_plan

    plan = build_plan(m, arena=False, vector_bits=vector_bits)
    (spec,) = plan.kernels.values()
    assert isinstance(spec, ConvSpec)
    jit = compile_kernels([spec], f"conv{vector_bits}")
    return jit, KFUNC(jit.address(spec.name)), spec.loop_sizes


@pytest.mark.parametrize("name", ["2d-nhwc-same", "2d-nchw-same", "grouped-nchw", "batch-groups-nhwc",
                                  "several-k-blocks-nchw", "several-k-blocks-nhwc", "indirect-batch-groups",
                                  "weight-gradient-nchw", "nchw-wide-rows"])
def test_conv_disjoint_ranges(name: str) -> None:
    """Thread splits: disjoint pieces of the outer range (pixels or output features,
    across images and groups) and of the inner one give exactly the single-call result."""
    m = conv_module(next(c for c in CONFIGS if c[0] == name), DType.FLOAT32)
    xs = conv_inputs(m)
    _jit, fn, (outer, inner) = _kernel(m)
    shape = m.entry.root.shape
    whole = np.zeros(shape, np.float32)
    _call(fn, xs, whole, [(0, outer, 0, inner)])
    check_conv(m, xs, whole)
    cuts = sorted({0, 5, outer // 3, outer // 3 + 1, max(outer - 7, 0), outer})
    pieces = np.full(shape, 99, np.float32)
    _call(fn, xs, pieces, [(a, b, 0, inner) for a, b in zip(cuts, cuts[1:]) if a < b])
    np.testing.assert_array_equal(pieces, whole)
    cuts = sorted({0, min(3, inner), inner // 2, inner})
    pieces = np.full(shape, 99, np.float32)
    _call(fn, xs, pieces, [(0, outer, a, b) for a, b in zip(cuts, cuts[1:]) if a < b])
    np.testing.assert_array_equal(pieces, whole)


@pytest.mark.parametrize(("name", "shared"), [("weight-gradient-nchw", True), ("transposed-kernel-batch", True),
                                              ("2d-nchw-same", False), ("2d-nhwc-same", False)])
def test_packed_kernel_shared_by_the_batches(name: str, shared: bool) -> None:
    """A kernel operand that must be packed (its K offsets are a table) and is the same for
    every batch of the GEMM is packed once per K block for all the batches, whose loop
    rows are then whole batches; a kernel read in place (OIHW under NCHW, HWIO under NHWC)
    or an NHWC batch (merged into the pixel rows) keeps the per-batch loop nest."""
    m = conv_module(next(c for c in CONFIGS if c[0] == name), DType.FLOAT32)
    _jit, _fn, (outer, inner) = _kernel(m)
    from axle_cpu.plan import build_plan

    (spec,) = build_plan(m, arena=False).kernels.values()
    assert spec.batch_outer is shared
    lay = spec.layout
    assert (outer, inner) == ((lay.batch, lay.n) if shared else spec.loop_sizes)


def test_nchw_patch_columns_split_by_threads() -> None:
    """From 128 pixel columns (a 14x14 map) with the kernel read in place, threads split an
    NCHW convolution by columns, whole NR-wide panels each, so each packs only its own
    patches (split by rows, every thread would pack them all); fewer columns (a 7x7 map)
    stay split by rows, in shares of CONV_SHARE_ROWS output features (here all 12 rows, the
    two images' 6 features, are one share: test_nchw_rows_split_in_shares)."""
    from axle_cpu.plan import build_plan

    wide = conv_module(next(c for c in CONFIGS if c[0] == "nchw-wide-rows"), DType.FLOAT32)  # 5 x 40 pixels
    narrow = conv_module(next(c for c in CONFIGS if c[0] == "2d-nchw-same"), DType.FLOAT32)  # 9 x 7
    (w_spec,) = build_plan(wide, arena=False).kernels.values()
    (n_spec,) = build_plan(narrow, arena=False).kernels.values()
    # the column range counts NR-wide panels: a thread's share is whole micro-tiles
    assert w_spec.columns_outer and w_spec.column_unit > 1
    assert w_spec.loop_sizes == (-(-200 // w_spec.column_unit), 2 * 4)
    assert not n_spec.columns_outer and n_spec.loop_sizes == (1, 63)


def test_nchw_pixel_panels_shared_evenly() -> None:
    """The panels of an NCHW convolution's pixel columns that threads share are 48 wide
    (8 x 48 tiles) where 64-wide ones share unevenly: a 14x14 map's 196 columns as 64s go
    128 / 68 to two threads, as 48s 100 / 96; a 56x56 map's or 128 columns keep 64."""
    from axle_cpu.gemm import _balanced_nv
    from axle_cpu.plan import build_plan

    assert [_balanced_nv(n, 16, 4) for n in (196, 200, 128, 256, 3136)] == [3, 3, 4, 4, 4]
    assert _balanced_nv(196, 8, 2) == 2  # AVX2's 2-vector tiles stay
    wide = conv_module(next(c for c in CONFIGS if c[0] == "nchw-wide-rows"), DType.FLOAT32)  # 200 pixels
    (spec,) = build_plan(wide, arena=False, vector_bits=512).kernels.values()
    assert spec.columns_outer and spec.column_unit == 48 and spec.loop_sizes == (5, 8)


def test_nchw_rows_split_in_shares() -> None:
    """An NCHW convolution with few pixel columns (a 7x7 map's 49) is split by rows, which
    are output features (the images join the GEMM's batch), in shares of CONV_SHARE_ROWS:
    each share packs all the patches, which shares of 64 rows did eight times over for a
    512-feature layer. Shares end inside an image (2 x 300 rows: 256, 256, 88, the second
    crossing from image 0 to 1) and give exactly the single-call result."""
    from axle_cpu.gemm import CONV_SHARE_ROWS
    from axle_cpu.plan import build_plan

    m = conv_module(("nchw-shares", (2, 8, 5, 5), (300, 8, 3, 3), ("NCHW", "OIHW", "NCHW"),
                     _window(2, low=(1, 1), high=(1, 1))), DType.FLOAT32)
    (spec,) = build_plan(m, arena=False).kernels.values()
    assert CONV_SHARE_ROWS == 256 and spec.row_unit == 256 and not spec.columns_outer
    xs = conv_inputs(m)
    _jit, fn, (outer, inner) = _kernel(m)
    assert (outer, inner) == (3, 25)
    whole = np.zeros(m.entry.root.shape, np.float32)
    _call(fn, xs, whole, [(0, outer, 0, inner)])
    check_conv(m, xs, whole)
    pieces = np.full(m.entry.root.shape, 99, np.float32)
    _call(fn, xs, pieces, [(0, 1, 0, inner), (1, 2, 0, 11), (1, 2, 11, inner), (2, 3, 0, inner)])
    np.testing.assert_array_equal(pieces, whole)
    # threads split the shares only (as many as there are: 3 of 4 threads), never the 25
    # pixel columns, which cut anywhere would run 64-wide tiles of a few columns
    from types import SimpleNamespace

    from axle_cpu.executable import _Launch

    launch = object.__new__(_Launch)
    launch.outer, launch.inner, launch.rsize, launch.step = outer, inner, 0, SimpleNamespace(spec=spec)
    assert spec.fixed_columns and [launch._split_mode(n) for n in (1, 2, 3, 4)] == [None, "rows", "rows", "rows"]


def test_nhwc_pixel_rows_split_in_shares(cpu, monkeypatch) -> None:  # noqa: ANN001
    """An NHWC convolution whose kernel the GEMM packs on every call is split by rows,
    which are pixels, in 2 to CONV_PIXEL_SHARES shares of whole micro-tiles (each share
    packs all the kernel, which the pool's 8 chunks of a 784-pixel layer did 8 times
    over): here 2 x 20 x 20 = 800 pixels in 4 shares of 204 (12-row tiles), the second
    crossing from image 0 to 1, the last 188 rows. Each share alone, in any order, and
    the pool's split on 2 threads give exactly the single call's bits, which match the
    interpreter; a constant kernel (packed once, at compile time) keeps units of one row."""
    from types import SimpleNamespace

    from axle_cpu.executable import _Launch
    from axle_cpu.gemm import CONV_PIXEL_SHARES, CONV_SHARE_PIXELS, _pixel_share
    from axle_cpu.plan import build_plan

    assert (CONV_SHARE_PIXELS, CONV_PIXEL_SHARES) == (192, 8)
    # a 28x28 map in 4 shares, 56x56 in 8, 14x14 and 7x7 in 2; fewer rows than a tile: one
    assert [_pixel_share(r, 6) for r in (784, 3136, 196, 49, 5)] == [198, 396, 102, 30, 6]
    m = conv_module(("nhwc-shares", (2, 20, 20, 16), (3, 3, 16, 24), ("NHWC", "HWIO", "NHWC"),
                     _window(2, low=(1, 1), high=(1, 1))), DType.FLOAT32)
    (spec,) = build_plan(m, arena=False, vector_bits=512).kernels.values()
    assert spec.b_packing is not None and not spec.prepacked_b and not spec.columns_outer
    assert spec.row_unit == 204 and spec.loop_sizes == (4, 24) and spec.fixed_columns
    launch = object.__new__(_Launch)
    launch.outer, launch.inner, launch.rsize, launch.step = 4, 24, 0, SimpleNamespace(spec=spec)
    assert [launch._split_mode(n) for n in (1, 2, 4, 8)] == [None, "rows", "rows", "rows"]
    xs = conv_inputs(m)
    _jit, fn, (outer, inner) = _kernel(m, vector_bits=512)
    assert (outer, inner) == (4, 24)
    whole = np.zeros(m.entry.root.shape, np.float32)
    _call(fn, xs, whole, [(0, outer, 0, inner)])
    check_conv(m, xs, whole)
    pieces = np.full(m.entry.root.shape, 99, np.float32)
    _call(fn, xs, pieces, [(3, 4, 0, inner), (1, 2, 0, inner), (0, 1, 0, 10), (2, 3, 0, inner), (0, 1, 10, inner)])
    np.testing.assert_array_equal(pieces, whole)
    # the executable's split over the pool's threads (forced: a measurement may decline it)
    be = _backend()
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    be._cache.clear()
    try:
        exe = be.compile(m, cpu, CompileOptions(optimized=False))
        (launch,) = [launch for launch, _ in exe._steps if launch is not None]
        assert launch.step.spec.row_unit > 1 and launch._split_mode(2) == "rows"
        launch.parallel = True
        for _ in range(3):
            got = be.to_host(exe.execute([be.to_device(x, cpu) for x in xs])[0])
            check_conv(m, xs, got)
            if launch.step.spec.row_unit == spec.row_unit:  # (the host's tiles: the same sums)
                np.testing.assert_array_equal(got, whole)
    finally:
        be._cache.clear()
    # a constant kernel is prepacked once: no share packs it, rows stay units of one
    b = Builder("nhwc_const_kernel")
    x = b.parameter(TensorType(DType.FLOAT32, (2, 20, 20, 16)))
    w = b.constant(xs[1])
    c = b.build(b.convolution(x, w, **conv_dimension_numbers("NHWC", "HWIO", "NHWC"),
                              **_window(2, low=(1, 1), high=(1, 1))))
    specs = [k for k in build_plan(c, arena=False, vector_bits=512).kernels.values() if k.kind == "gemm"]
    assert sorted((k.prepacked_b, k.row_unit) for k in specs) == [(False, 204), (True, 1)]  # (and its fallback)
    # one pixel, many features (a dense layer as a 1x1 convolution): its kernel is read in
    # place (no share packs it), rows of one, so the pool splits its columns
    one = conv_module(("one-pixel", (1, 1, 1, 64), (1, 1, 64, 1024), ("NHWC", "HWIO", "NHWC"), _window(2)),
                      DType.FLOAT32)
    (spec,) = build_plan(one, arena=False, vector_bits=512).kernels.values()
    assert spec.b_packing is None and spec.row_unit == 1 and not spec.fixed_columns and spec.loop_sizes[0] == 1
    launch.outer, launch.inner, launch.step = *spec.loop_sizes, SimpleNamespace(spec=spec)
    assert launch._split_mode(2) == "columns"


# fewer than 16 input features, whose kernel rows lie consecutive in the input (NHWC/HWIO:
# Window.line, kw x features): read in place through row pointers, a partly padded line
# copied with its zeros
LINE_CONFIGS = [
    ("stem-7x7-stride2", (2, 15, 13, 3), (7, 7, 3, 20), ("NHWC", "HWIO", "NHWC"),
     _window(2, strides=(2, 2), low=(3, 3), high=(3, 2))),
    ("line-window-wider-than-input", (1, 4, 3, 4), (5, 6, 4, 5), ("NHWC", "HWIO", "NHWC"),
     _window(2, low=(2, 3), high=(2, 2))),
    ("line-negative-padding", (2, 9, 10, 2), (3, 9, 2, 6), ("NHWC", "HWIO", "NHWC"),
     _window(2, low=(-1, 4), high=(1, -2))),
    # the shortest lines: a CIFAR stem's 3 features x 3 positions, one feature x 3
    ("cifar-stem-3x3", (2, 9, 8, 3), (3, 3, 3, 16), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1), high=(1, 1))),
    ("one-feature-3x3", (1, 7, 9, 1), (3, 3, 1, 8), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1), high=(1, 1))),
]


@pytest.mark.parametrize("dt", [DType.FLOAT32, DType.INT32], ids=lambda d: d.value)
def test_short_feature_runs_read_by_kernel_rows(dt: DType, cpu) -> None:  # noqa: ANN001
    """A 7x7 stem's 3 input features are too short a run for the row pointers, but with
    the kernel row's 7 positions they are 21 consecutive floats (a 3x3 kernel's 9, or 3
    with one feature): those lines are the K segments read in place, and a line that
    crosses the padding (the image's left and right edges, a window wider than the image,
    negative padding) is read from a copy with zeros; the results equal the interpreter's,
    also over thread splits of the pixels."""
    from llvmlite import ir

    from axle_cpu.gemm import _Emitter
    from axle_cpu.plan import build_plan

    for cfg in LINE_CONFIGS:
        m = conv_module(cfg, dt)
        (spec,) = build_plan(m, arena=False).kernels.values()
        emitter = _Emitter(ir.Module(), spec, 512)
        assert emitter.ind_lines and emitter.ind_seg == cfg[2][1] * cfg[2][2], cfg[0]
        xs = conv_inputs(m)
        check_conv(m, xs, run(m, xs, cpu))
    m = conv_module(LINE_CONFIGS[0], DType.FLOAT32)
    xs = conv_inputs(m)
    _jit, fn, (outer, inner) = _kernel(m)
    whole, pieces = np.zeros(m.entry.root.shape, np.float32), np.full(m.entry.root.shape, 99, np.float32)
    _call(fn, xs, whole, [(0, outer, 0, inner)])
    check_conv(m, xs, whole)
    cuts = [0, 5, outer // 3 + 1, outer]
    _call(fn, xs, pieces, [(a, b, 0, inner) for a, b in zip(cuts, cuts[1:])])
    np.testing.assert_array_equal(pieces, whole)


@pytest.mark.parametrize(("name", "segments"), [
    ("stem-7x7-stride2", 7), ("cifar-stem-3x3", 3), ("line-negative-padding", 3), ("indirect-batch-groups", 4),
    ("indirect-grouped-strided", 9), ("several-k-blocks-nhwc", 0), ("indirect-split-run", 0)])
@pytest.mark.parametrize("vector_bits", [0, 256], ids=["host", "avx2"])
def test_whole_k_indirection_rows_unrolled(name: str, segments: int, vector_bits: int) -> None:
    """Where one K block is all of K in a few segments (a stem's 7 lines, a 3x3 layer of 16
    features' 9 runs), each indirection table row's segments are unrolled with constant
    window positions (``ind_unroll``); several K blocks (K = 576) or too many segments keep
    the loop, and so does a call given a slice of K (a split of K across threads), which
    is not all of K. Whole calls, pixel pieces and K slices: the interpreter's values, with
    the host's tiles and AVX2's."""
    from llvmlite import ir

    from axle_cpu.gemm import _Emitter
    from axle_cpu.plan import build_plan

    m = conv_module(next(c for c in CONFIGS + LINE_CONFIGS if c[0] == name), DType.FLOAT32)
    (spec,) = build_plan(m, arena=False, vector_bits=vector_bits).kernels.values()
    assert _Emitter(ir.Module(), spec, vector_bits or 512).ind_unroll == segments
    xs = conv_inputs(m)
    _jit, fn, (outer, inner) = _kernel(m, vector_bits)
    whole, pieces = np.zeros(m.entry.root.shape, np.float32), np.full(m.entry.root.shape, 99, np.float32)
    _call(fn, xs, whole, [(0, outer, 0, inner)])
    check_conv(m, xs, whole)
    cuts = sorted({0, 5, outer // 3 + 1, outer})
    _call(fn, xs, pieces, [(a, b, 0, inner) for a, b in zip(cuts, cuts[1:]) if a < b])
    np.testing.assert_array_equal(pieces, whole)
    units = spec.layout.k // spec.k_unit
    ptrs = lambda out: (ctypes.c_void_p * 3)(*(a.ctypes.data for a in (*xs, out)))  # noqa: E731
    parts = [np.zeros(m.entry.root.shape, np.float32) for _ in range(2)]
    for (a, b), part in zip([(0, units // 2), (units // 2, units)], parts):
        fn(ptrs(part), 0, outer, 0, inner, a, b)
    check_conv(m, xs, parts[0] + parts[1])


@pytest.mark.parametrize("dt", [DType.FLOAT32, DType.FLOAT16], ids=lambda d: d.value)
def test_nchw_right_edge_panel_runs_a_narrower_tile(dt: DType, cpu) -> None:  # noqa: ANN001
    """An NCHW 14x14 map's 196 pixel columns fill four 48-wide panels and 4 columns: that
    last panel runs as dot products along K (``tail_dots``, float32), or, on the float32
    accumulator path of float16, a one-vector micro-kernel (with AVX-512; there 49 columns,
    4 vectors, have no narrower tile, where float32 runs 48 and one dot product); the
    results equal the interpreter's."""
    from llvmlite import ir

    from axle_cpu.gemm import _Emitter
    from axle_cpu.plan import build_plan

    edge = ("nchw-14x14", (1, 20, 14, 14), (24, 20, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2, low=(1, 1),
                                                                                             high=(1, 1)))
    full = ("nchw-7x7", (1, 20, 7, 7), (24, 20, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2, low=(1, 1), high=(1, 1)))
    for cfg, vectors, dots in ((edge, 1, 4), (full, 0, 1)):
        m = conv_module(cfg, dt)
        (spec,) = build_plan(m, arena=False, vector_bits=512).kernels.values()
        emitter = _Emitter(ir.Module(), spec, 512)
        if dt is DType.FLOAT16:
            assert emitter._edge_vectors() == vectors and not emitter.tail_dots, cfg[0]
        else:
            assert emitter.tail_dots == dots, cfg[0]
        xs = conv_inputs(m)
        check_conv(m, xs, run(m, xs, cpu))


@pytest.mark.parametrize("vector_bits", [256, 128])
@pytest.mark.parametrize("dt", [DType.FLOAT32, DType.FLOAT64, DType.FLOAT16])
def test_conv_narrow_vector_tiles(vector_bits: int, dt: DType) -> None:
    """The tiles chosen for AVX2 (256-bit) and SSE (128-bit) compute the same convolutions
    (run here on the host)."""
    for name in ("2d-nhwc-stride2", "2d-nchw-same", "depthwise-nhwc", "2d-lhs-dilation", "indirect-grouped-strided",
                 "several-k-blocks-nhwc", "nchw-wide-rows", "weight-gradient-nchw", "stem-7x7-stride2"):
        m = conv_module(next(c for c in CONFIGS + LINE_CONFIGS if c[0] == name), dt)
        xs = conv_inputs(m)
        _jit, fn, (outer, inner) = _kernel(m, vector_bits)
        out = np.zeros(m.entry.root.shape, dt.np)
        _call(fn, xs, out, [(0, outer, 0, inner)])
        check_conv(m, xs, out)


# ------------------------------------------------------------------------ epilogue


def _conv_bias_relu(x, w, b, layout: str):  # noqa: ANN001, ANN202
    return anp.maximum(nn.conv(x, w, b, padding="SAME", layout=layout), 0.0)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_conv_bias_relu_is_one_kernel(layout: str) -> None:
    """relu(conv(x, w) + b) is one output fusion, one kernel, the convolution native in
    it; explain and the report say so; the values are the interpreter's."""
    nhwc = layout == "NHWC"
    x = RNG.standard_normal((2, 9, 8, 5) if nhwc else (2, 5, 9, 8)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 5, 7) if nhwc else (7, 5, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(7).astype(np.float32)
    lowered = axle.jit(lambda *a: _conv_bias_relu(*a, layout), device="cpu:0").lower(x, w, b)
    compiled = lowered.compile()
    fusions = [n for n in compiled.module.entry.nodes if n.op is Op.FUSION]
    assert [f.attr["kind"] for f in fusions] == ["output"]
    assert native_convs(compiled.module) == 1
    assert compiled.report()["kernels"] == 1
    text = lowered.explain().text(source=False)
    assert "output" in text and "convolution" in text
    got = np.asarray(compiled(x, w, b))
    with axle.device("interpreter:0"):
        want = np.asarray(_conv_bias_relu(x, w, b, layout))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _conv_batch_norm(x, w, mean, var, g, b, layout: str):  # noqa: ANN001, ANN202
    """An inference batch norm and relu after a convolution, written as examples/resnet.py
    writes it: ``(conv - mean) * rsqrt(var + eps) * gamma + beta``."""
    c = (slice(None),) if layout == "NHWC" else (slice(None), None, None)
    y = nn.conv(x, w, padding="SAME", layout=layout)
    return anp.maximum((y - mean[c]) * lax.rsqrt(var[c] + 1e-5) * g[c] + b[c], 0.0)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_batch_norm_rsqrt_is_computed_once_per_feature(layout: str) -> None:
    """NHWC: the batch norm's per-feature rsqrt, which the epilogue's inner loop (over the
    features) cannot hoist, is a kernel of its own (the fusion policy's
    max_broadcast_recompute_elements), read by the convolution's output fusion; NCHW: it
    stays in the epilogue, computed once per output row. Values: the interpreter's."""
    nhwc = layout == "NHWC"
    x = RNG.standard_normal((4, 32, 32, 8) if nhwc else (4, 8, 32, 32)).astype(np.float32)
    w = (RNG.standard_normal((3, 3, 8, 24) if nhwc else (24, 8, 3, 3)) * 0.2).astype(np.float32)
    mean, g, b = (RNG.standard_normal(24).astype(np.float32) for _ in range(3))
    var = RNG.random(24).astype(np.float32) + 0.5
    args = (x, w, mean, var, g, b)
    compiled = axle.jit(lambda *a: _conv_batch_norm(*a, layout), device="cpu:0").lower(*args).compile()
    fusions = [n for n in compiled.module.entry.nodes if n.op is Op.FUSION]
    rsqrt_in = [f.attr["kind"] for f in fusions if any(n.op is Op.RSQRT for n in f.attr["computation"].nodes)]
    assert rsqrt_in == (["loop"] if nhwc else ["output"])
    assert [f.attr["kind"] for f in fusions if f.attr["kind"] == "output"] == ["output"]
    assert native_convs(compiled.module) == 1 and compiled.report()["kernels"] == (2 if nhwc else 1)
    got = np.asarray(compiled(*args))
    with axle.device("interpreter:0"):
        want = np.asarray(_conv_batch_norm(*args, layout))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_residual_scale_convert_epilogue(cpu) -> None:  # noqa: ANN001
    """A scaled residual add and a convert to float16 finish the convolution's tiles too
    (the convert: an output that cannot hold partial sums)."""
    b = Builder("residual")
    dt = DType.FLOAT32
    x, w = b.parameter(TensorType(dt, (2, 7, 6, 33))), b.parameter(TensorType(dt, (3, 3, 33, 10)))
    c = b.convolution(x, w, **conv_dimension_numbers("NHWC", "HWIO", "NHWC"), **_window(2, low=(1, 1), high=(1, 1)))
    r = b.parameter(TensorType(dt, c.shape))
    half = b.broadcast_in_dim(b.constant(0.5, dt), shape=c.shape, broadcast_dimensions=())
    m = b.build(b.convert(b.add(b.mul(c, half), r), dtype=DType.FLOAT16))
    xs = [RNG.standard_normal(p.type.shape).astype(np.float32) for p in m.entry.parameters]
    got, want = _one_output_fusion(m, xs, cpu)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=2e-3)


def _one_output_fusion(m: Module, xs: list[np.ndarray], cpu) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """``m`` compiled on ``cpu`` is one kernel, an output fusion with its convolution native:
    (its result, the interpreter's)."""
    exe, optimized = compile_case(m, cpu)
    assert [n.attr["kind"] for n in optimized.entry.nodes if n.op is Op.FUSION] == ["output"]
    assert native_convs(optimized) == 1 and exe.report()["kernels"] == 1
    be = _backend()
    got = be.to_host(exe.execute([be.to_device(a, cpu) for a in xs])[0])
    (want,) = evaluate(m, *xs)
    return got, want


def test_nchw_epilogue_by_output_rows(cpu) -> None:  # noqa: ANN001
    """An NCHW convolution's tile rows are runs of pixels crossing the output's rows (5
    wide here; the second 64-pixel panel starts inside a row) and, grouped, its C rows are
    offset by group: the epilogue finishes them by segments of one output row, with a
    batch norm's per-feature terms (an rsqrt) and a residual read at each element."""
    b = Builder("nchw_bn_residual")
    dt = DType.FLOAT32
    x, w = b.parameter(TensorType(dt, (2, 6, 17, 5))), b.parameter(TensorType(dt, (8, 3, 3, 3)))
    c = b.convolution(x, w, **conv_dimension_numbers("NCHW", "OIHW", "NCHW"), feature_group_count=2,
                      **_window(2, low=(1, 1), high=(1, 1)))
    r, var, beta = b.parameter(TensorType(dt, c.shape)), b.parameter(TensorType(dt, (8,))), b.parameter(
        TensorType(dt, (8,)))

    def per_feature(v):  # noqa: ANN001, ANN202
        return b.broadcast_in_dim(v, shape=c.shape, broadcast_dimensions=(1,))

    scale = b.rsqrt(b.add(var, b.broadcast_in_dim(b.constant(1e-5, dt), shape=(8,), broadcast_dimensions=())))
    y = b.add(b.add(b.mul(c, per_feature(scale)), per_feature(beta)), r)
    m = b.build(b.max(y, b.broadcast_in_dim(b.constant(0.0, dt), shape=c.shape, broadcast_dimensions=())))
    xs = [RNG.standard_normal(p.type.shape).astype(np.float32) for p in m.entry.parameters]
    xs[3] = np.abs(xs[3]) + 0.5
    got, want = _one_output_fusion(m, xs, cpu)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", [DType.FLOAT32, DType.FLOAT16, DType.INT32], ids=lambda d: d.value)
@pytest.mark.parametrize(("xs_shape", "ws_shape", "stride"), [
    ((2, 16, 7, 7), (24, 16, 3, 3), 1),  # 49 pixels: one panel, a narrower last vector
    ((1, 8, 28, 28), (20, 8, 1, 1), 2),  # a 1x1 stride-2 shortcut: 196 pixels, 48-wide panels split by threads
    ((1, 4, 9, 15), (6, 4, 3, 3), 1),  # 135 pixels: a second panel starting inside an image row
], ids=["7x7", "14x14-shortcut", "9x15"])
def test_nchw_epilogue_by_feature_rows(xs_shape, ws_shape, stride: int, dt: DType, cpu,  # noqa: ANN001
                                       monkeypatch) -> None:  # noqa: ANN001
    """An NCHW convolution's C rows are output features, each a run of all its H x W pixels:
    the epilogue's column spans both (``_epilogue_tail``), and each tile row is finished
    by one call of ``epi_row``, the per-feature scale and shift read once before its column
    loop, the residual at each element. Small integers, so every dtype's sums are exact: the
    bits of the interpreter's, on one thread and split on two (a float16 convolution
    accumulates all of K first and finishes elements one by one, with the same columns)."""
    from axle_cpu.gemm import _epilogue_tail

    b = Builder("nchw_feature_rows")
    x, w = b.parameter(TensorType(dt, xs_shape)), b.parameter(TensorType(dt, ws_shape))
    pad = ws_shape[2] // 2
    c = b.convolution(x, w, **conv_dimension_numbers("NCHW", "OIHW", "NCHW"),
                      **_window(2, strides=(stride, stride), low=(pad, pad), high=(pad, pad)))
    o = ws_shape[0]
    r, scale, shift = (b.parameter(TensorType(dt, t)) for t in (c.shape, (o,), (o,)))

    def per_feature(v):  # noqa: ANN001, ANN202
        return b.broadcast_in_dim(v, shape=c.shape, broadcast_dimensions=(1,))

    y = b.add(b.add(b.mul(c, per_feature(scale)), per_feature(shift)), r)
    m = b.build(b.max(y, b.broadcast_in_dim(b.constant(0, dt), shape=c.shape, broadcast_dimensions=())))
    xs = [RNG.integers(-2, 3, size=p.type.shape).astype(dt.np) for p in m.entry.parameters]
    (want,) = evaluate(m, *xs)
    for threads in ("1", "2"):
        monkeypatch.setenv("AXLE_CPU_THREADS", threads)
        _backend()._cache.clear()
        exe, optimized = compile_case(m, cpu)
        launches = [launch for launch, _ in exe._steps if launch is not None]
        assert len(launches) == 1 and [n.attr["kind"] for n in optimized.entry.nodes if n.op is Op.FUSION] == ["output"]
        spec = launches[0].step.spec
        lay = spec.layout
        assert _epilogue_tail(c.shape, lay, lay.swap) == 2 and lay.n == c.shape[2] * c.shape[3]
        assert ".epi_row" in exe.kernel_sources()["llvm"]
        launches[0].parallel = threads == "2"
        be = _backend()
        for _ in range(2):
            got = be.to_host(exe.execute([be.to_device(a, cpu) for a in xs])[0])
            np.testing.assert_array_equal(got, want)
    _backend()._cache.clear()


@pytest.mark.parametrize("dt", [DType.FLOAT32, DType.FLOAT64, DType.INT32], ids=lambda d: d.value)
@pytest.mark.parametrize(("xs_shape", "ws_shape", "stride"), [
    ((1, 9, 9, 8), (3, 3, 8, 20), 1),  # 81 pixel rows: an edge row tile, 20 of a tile's columns
    ((2, 7, 7, 16), (3, 3, 16, 72), 1),  # 98 rows, 72 features: a second, narrower panel
    ((1, 14, 14, 8), (1, 1, 8, 40), 2),  # a 1x1 stride-2 shortcut at 7x7
], ids=["9x9-20", "batch-2-7x7-72", "1x1-stride-2"])
def test_nhwc_epilogue_by_tiles(xs_shape, ws_shape, stride: int, dt: DType, cpu,  # noqa: ANN001
                                monkeypatch) -> None:  # noqa: ANN001
    """An NHWC convolution whose epilogue computes per-feature terms (a batch norm's scale
    from two parameters) finishes each full tile with one call of ``epi_tile``: the tile's
    rows unrolled in one vectorized loop over its columns, the per-feature terms once per
    column; edge tiles (fewer rows) row by row. Small integers, so every dtype's sums are
    exact: the bits of the interpreter's, on one thread and split on two."""
    b = Builder("nhwc_tiles")
    x, w = b.parameter(TensorType(dt, xs_shape)), b.parameter(TensorType(dt, ws_shape))
    pad = ws_shape[0] // 2
    c = b.convolution(x, w, **conv_dimension_numbers("NHWC", "HWIO", "NHWC"),
                      **_window(2, strides=(stride, stride), low=(pad, pad), high=(pad, pad)))
    o = ws_shape[3]
    r, gain, scale, shift = (b.parameter(TensorType(dt, t)) for t in (c.shape, (o,), (o,), (o,)))

    def per_feature(v):  # noqa: ANN001, ANN202
        return b.broadcast_in_dim(v, shape=c.shape, broadcast_dimensions=(3,))

    y = b.add(b.add(b.mul(c, per_feature(b.mul(gain, scale))), per_feature(b.sub(shift, gain))), r)
    m = b.build(b.max(y, b.broadcast_in_dim(b.constant(0, dt), shape=c.shape, broadcast_dimensions=())))
    xs = [RNG.integers(-2, 3, size=p.type.shape).astype(dt.np) for p in m.entry.parameters]
    (want,) = evaluate(m, *xs)
    for threads in ("1", "2"):
        monkeypatch.setenv("AXLE_CPU_THREADS", threads)
        _backend()._cache.clear()
        exe, optimized = compile_case(m, cpu)
        launches = [launch for launch, _ in exe._steps if launch is not None]
        assert len(launches) == 1 and [n.attr["kind"] for n in optimized.entry.nodes if n.op is Op.FUSION] == ["output"]
        assert ".epi_tile" in exe.kernel_sources()["llvm"]
        launches[0].parallel = threads == "2"
        be = _backend()
        for _ in range(2):
            got = be.to_host(exe.execute([be.to_device(a, cpu) for a in xs])[0])
            np.testing.assert_array_equal(got, want)
    _backend()._cache.clear()


@pytest.mark.parametrize(("m", "k", "n"), [(50, 40, 70), (6, 8, 16)], ids=["50x70", "one-tile"])
def test_dense_dot_epilogue_by_tiles(m: int, k: int, n: int, cpu, monkeypatch) -> None:  # noqa: ANN001
    """A plain dot's epilogue with per-column terms (a scale from two parameters) takes the
    tile epilogue too (``epi_tile``; edge rows and masked columns row by row): exact on
    small integers, on one thread and split on two. A bias and relu alone (nothing to
    compute per column) keep the row-by-row finish."""
    dt = DType.FLOAT32
    b = Builder("dot_tiles")
    x, w = b.parameter(TensorType(dt, (m, k))), b.parameter(TensorType(dt, (k, n)))
    d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    gain, scale, bias = (b.parameter(TensorType(dt, (n,))) for _ in range(3))

    def per_column(v):  # noqa: ANN001, ANN202
        return b.broadcast_in_dim(v, shape=d.shape, broadcast_dimensions=(1,))

    y = b.add(b.mul(d, per_column(b.mul(gain, scale))), per_column(bias))
    mod = b.build(b.max(y, b.broadcast_in_dim(b.constant(0, dt), shape=d.shape, broadcast_dimensions=())))
    xs = [RNG.integers(-2, 3, size=p.type.shape).astype(dt.np) for p in mod.entry.parameters]
    (want,) = evaluate(mod, *xs)
    for threads in ("1", "2"):
        monkeypatch.setenv("AXLE_CPU_THREADS", threads)
        _backend()._cache.clear()
        exe, _ = compile_case(mod, cpu)
        (launch,) = [launch for launch, _ in exe._steps if launch is not None]
        assert ".epi_tile" in exe.kernel_sources()["llvm"]
        launch.parallel = threads == "2"
        be = _backend()
        for _ in range(2):
            got = be.to_host(exe.execute([be.to_device(a, cpu) for a in xs])[0])
            np.testing.assert_array_equal(got, want)
    _backend()._cache.clear()
    b = Builder("dot_bias")
    x, w, bias = (b.parameter(TensorType(dt, s)) for s in ((m, k), (k, n), (n,)))
    d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    y = b.add(d, b.broadcast_in_dim(bias, shape=d.shape, broadcast_dimensions=(1,)))
    mod = b.build(b.max(y, b.broadcast_in_dim(b.constant(0, dt), shape=d.shape, broadcast_dimensions=())))
    exe, _ = compile_case(mod, cpu)
    assert ".epi_tile" not in exe.kernel_sources()["llvm"]


def test_nhwc_batch_norm_epilogue_by_tiles(cpu) -> None:  # noqa: ANN001
    """A batch-norm-like epilogue and relu whose per-feature scale is arithmetic of its own
    (``g * var + 0.5``: cheap ops, which stay in the epilogue; a slow one such as a batch
    norm's ``rsqrt`` is a kernel of its own, FusionPolicy.max_broadcast_recompute_elements)
    as a tile epilogue: within float32 rounding of the interpreter's, on every pixel row
    (an edge tile included: 3136 rows in 6-row tiles)."""
    x = RNG.standard_normal((1, 56, 56, 16)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 16, 64)).astype(np.float32)
    g, beta, mean = (RNG.standard_normal(64).astype(np.float32) for _ in range(3))
    var = (np.abs(RNG.standard_normal(64)) + 0.5).astype(np.float32)

    def f(x, w, g, beta, mean, var):  # noqa: ANN001, ANN202
        y = nn.conv(x, w, padding=1, layout="NHWC")
        return nn.relu((y - mean) * (g * var + 0.5) + beta)

    args = (x, w, g, beta, mean, var)
    compiled = axle.jit(f, device=cpu).lower(*args).compile()
    assert ".epi_tile" in compiled.executable.kernel_sources()["llvm"]
    got = np.asarray(compiled(*args))
    (want,) = evaluate(compiled.lowered.module, *args)
    assert want.shape == (1, 56, 56, 64) and (want > 0).mean() > 0.3
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dt", [DType.FLOAT32, DType.FLOAT64, DType.INT32], ids=lambda d: d.value)
@pytest.mark.parametrize(("xs_shape", "ws_shape", "stride", "epilogue"), [
    ((1, 64, 14, 14), (40, 64, 3, 3), 1, True),  # 196 columns: 4 + 4 (f64) left over; K 576: two K blocks
    ((1, 64, 14, 14), (40, 64, 3, 3), 1, False),
    ((2, 20, 7, 7), (24, 20, 3, 3), 1, True),  # 49 columns: 48 and 1 (f64: 24 + 24 and 1); K 180, a masked vector
    ((1, 16, 28, 28), (20, 16, 3, 3), 2, False),  # stride 2 into 14x14
], ids=["14x14-epilogue", "14x14", "batch-2-7x7-epilogue", "stride-2"])
def test_nchw_short_last_panel_by_dot_products(xs_shape, ws_shape, stride: int, epilogue: bool, dt: DType, cpu,  # noqa: ANN001
                                               monkeypatch) -> None:  # noqa: ANN001
    """An NCHW convolution whose last panel of pixel columns has at most TAIL_DOT_COLUMNS
    of them computes those as dot products along K of the kernel's rows and the columns'
    packed patches (``tail_dots``), partial sums in C across K blocks, the epilogue element
    by element on the last; split by columns, that panel is in the unit before it
    (``column_units``). Small integers, so every dtype's sums are exact: the bits of the
    interpreter's, on one thread and split on two."""
    from llvmlite import ir

    from axle_cpu.gemm import TAIL_DOT_COLUMNS, _Emitter

    b = Builder("nchw_tail")
    x, w = b.parameter(TensorType(dt, xs_shape)), b.parameter(TensorType(dt, ws_shape))
    c = b.convolution(x, w, **conv_dimension_numbers("NCHW", "OIHW", "NCHW"),
                      **_window(2, strides=(stride, stride), low=(1, 1), high=(1, 1)))
    if epilogue:
        o = ws_shape[0]
        r, scale, shift = (b.parameter(TensorType(dt, t)) for t in (c.shape, (o,), (o,)))

        def per_feature(v):  # noqa: ANN001, ANN202
            return b.broadcast_in_dim(v, shape=c.shape, broadcast_dimensions=(1,))

        y = b.add(b.add(b.mul(c, per_feature(scale)), per_feature(shift)), r)
        m = b.build(b.max(y, b.broadcast_in_dim(b.constant(0, dt), shape=c.shape, broadcast_dimensions=())))
    else:
        m = b.build(c)
    xs = [RNG.integers(-2, 3, size=p.type.shape).astype(dt.np) for p in m.entry.parameters]
    (want,) = evaluate(m, *xs)
    for threads in ("1", "2"):
        monkeypatch.setenv("AXLE_CPU_THREADS", threads)
        _backend()._cache.clear()
        exe, _ = compile_case(m, cpu)
        (launch,) = [launch for launch, _ in exe._steps if launch is not None]
        spec = launch.step.spec
        emitter = _Emitter(ir.Module(), spec, spec.vector_bits or 512)
        n, nr = spec.layout.n, emitter.t.nr
        assert 0 < emitter.tail_dots == n % nr <= TAIL_DOT_COLUMNS
        if spec.columns_outer:
            assert spec.loop_sizes[0] == spec.column_units == n // nr
        launch.parallel = threads == "2"
        be = _backend()
        for _ in range(2):
            got = be.to_host(exe.execute([be.to_device(a, cpu) for a in xs])[0])
            np.testing.assert_array_equal(got, want)
    _backend()._cache.clear()


@pytest.mark.parametrize(("xs_shape", "ws_shape", "cuts"), [
    ((1, 20, 7, 7), (24, 20, 3, 3), (10, 30)),  # 49 columns, the last by dot products
    ((1, 64, 10, 10), (40, 64, 3, 3), (20, 61)),  # 100: 96 and 4 by dot products; K 576: two K blocks
], ids=["7x7", "10x10"])
def test_nchw_short_last_panel_kernel_takes_any_column_range(xs_shape, ws_shape, cuts) -> None:  # noqa: ANN001
    """The kernel with a last panel by dot products (``tail_dots``) computes any column range
    it is given, as the kernel signature says (the executable splits its rows only, or whole
    column units: a range ending elsewhere than N had its short panel taken for the dot
    products' few columns, the rest left unwritten, and a shorter one written past C)."""
    from llvmlite import ir

    from axle_cpu.gemm import _Emitter
    from axle_cpu.plan import build_plan

    cfg = ("nchw-tail-ranges", xs_shape, ws_shape, ("NCHW", "OIHW", "NCHW"), _window(2, low=(1, 1), high=(1, 1)))
    m = conv_module(cfg, DType.INT32)
    (spec,) = build_plan(m, arena=False).kernels.values()
    assert _Emitter(ir.Module(), spec, spec.vector_bits or 512).tail_dots and not spec.columns_outer
    xs = conv_inputs(m)
    _jit, fn, (outer, inner) = _kernel(m)
    edges = [0, *cuts, inner]
    out = np.full(m.entry.root.shape, 99, np.int32)
    _call(fn, xs, out, [(0, outer, a, b) for a, b in zip(edges, edges[1:])])
    check_conv(m, xs, out)


@pytest.mark.parametrize(("xs_shape", "ws_shape"), [((1, 5, 3, 4), (3, 3, 4, 1)), ((2, 6, 1, 4), (1, 1, 4, 1))],
                         ids=["3x1", "batch-2-6x1"])
def test_nhwc_one_feature_one_column_epilogue(xs_shape, ws_shape, cpu) -> None:  # noqa: ANN001
    """An NHWC convolution with one output feature and an output W of 1: each C row is one
    column, its trailing W x C dims (1 x 1) merge to exactly a row of C, but every index of
    such a row is a constant. The epilogue keeps the last dim (``_epilogue_tail``): finished
    by a row function it had the dot's value, read at its column, hoisted before the column
    loop, and LLVM rejected the kernel (the cluster then ran on the interpreter, and the next
    kernel compiled in the process crashed)."""
    import warnings

    from axle.partition import PlacementWarning
    from axle_cpu.gemm import _epilogue_tail
    from axle_cpu.plan import build_plan

    b = Builder("nhwc_one_feature")
    dt = DType.FLOAT32
    x, w = b.parameter(TensorType(dt, xs_shape)), b.parameter(TensorType(dt, ws_shape))
    c = b.convolution(x, w, **conv_dimension_numbers("NHWC", "HWIO", "NHWC"), **_window(2))
    assert c.shape[2:] == (1, 1)
    scale = b.parameter(TensorType(dt, (1,)))
    m = b.build(b.mul(c, b.broadcast_in_dim(scale, shape=c.shape, broadcast_dimensions=(3,))))
    (spec,) = [k for k in build_plan(m, arena=False).kernels.values() if k.kind == "gemm"]
    assert spec.layout.n == 1 and _epilogue_tail(c.shape, spec.layout, spec.layout.swap) == 1
    xs = [RNG.integers(-2, 3, size=p.type.shape).astype(np.float32) for p in m.entry.parameters]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlacementWarning)
        got, want = _one_output_fusion(m, xs, cpu)
    np.testing.assert_array_equal(got, want)


def test_epilogue_tail_only_where_c_rows_are_output_rows() -> None:
    """The epilogue's column spans several trailing dims only where each row of C is one
    whole run of them: NCHW's H x W and NCDHW's D x H x W (C rows: the features), CHWN's
    H x W x N; NHWC keeps the last dim (the features: C's columns), and so does a grouped
    NHWC convolution, whose C rows are a group's 3 of the 9 features (by segments)."""
    from axle_cpu.gemm import _epilogue_tail
    from axle_cpu.plan import build_plan

    def tail(name: str) -> int:
        m = conv_module(next(cfg for cfg in CONFIGS if cfg[0] == name), DType.FLOAT32)
        (spec,) = build_plan(m, arena=False).kernels.values()
        lay = spec.layout
        return _epilogue_tail(m.entry.root.shape, lay.swapped() if lay.swap else lay, lay.swap)

    names = ("2d-nchw-same", "3d-ncdhw", "batch-last", "2d-nhwc-same", "grouped-nhwc")
    assert [tail(n) for n in names] == [2, 3, 3, 1, 1]


# ------------------------------------------------------------------------ gradients


def directional_fd(f, args: list[np.ndarray], i: int, v: np.ndarray, eps: float = 1e-6) -> float:  # noqa: ANN001
    """(f(args with args[i] + eps v) - f(... - eps v)) / 2 eps: the derivative along v."""
    hi, lo = list(args), list(args)
    hi[i], lo[i] = args[i] + eps * v, args[i] - eps * v
    return (f(*hi) - f(*lo)) / (2 * eps)


@pytest.mark.parametrize(("layout", "stride", "padding", "dilation", "groups"), [
    ("NCHW", 1, "SAME", 1, 1),
    ("NHWC", 2, "SAME", 1, 1),
    ("NCHW", 2, "VALID", 2, 2),
    ("NHWC", 1, ((1, 0), (2, 1)), 1, 3),
    ("NCW", 2, "SAME", 1, 1),
    ("NDHWC", 1, "SAME", 1, 1),
], ids=str)
def test_nn_conv_gradients_native_finite_differences(layout: str, stride: int, padding, dilation: int,  # noqa: ANN001
                                                     groups: int) -> None:
    """Gradients of nn.conv in float64 on cpu, every convolution of the forward and
    backward passes run natively, against central finite differences along random
    directions."""
    ns = len(layout) - 2
    c, o = 6, 6
    sp = {1: (7,), 2: (6, 5), 3: (4, 3, 4)}[ns]
    first = layout.index("C") == 1
    x = RNG.standard_normal((2, c, *sp) if first else (2, *sp, c))
    ks = (3,) * ns if ns < 3 else (2, 2, 2)
    w = RNG.standard_normal((o, c // groups, *ks) if first else (*ks, c // groups, o))
    b = RNG.standard_normal(o)
    y_shape = np.asarray(nn.conv(x, w, b, stride, padding, dilation, groups, layout)).shape
    cw = RNG.standard_normal(y_shape)

    def loss(xa, wa, ba):  # noqa: ANN001, ANN202
        return anp.sum(anp.tanh(nn.conv(xa, wa, ba, stride, padding, dilation, groups, layout)) * cw)

    grad = axle.jit(axle.grad(loss, argnums=(0, 1, 2)), device="cpu:0")
    compiled = grad.lower(x, w, b).compile()
    assert native_convs(compiled.module) >= 3, "forward, input and kernel gradients all native"
    gx, gw, gb = (np.asarray(g) for g in compiled(x, w, b))

    def f_np(xa: np.ndarray, wa: np.ndarray, ba: np.ndarray) -> float:
        with axle.device("interpreter:0"):
            return float(np.asarray(loss(xa, wa, ba)))

    for i, got in enumerate((gx, gw, gb)):  # along random directions, as jax's check_grads does
        for _ in range(3):
            v = RNG.standard_normal(got.shape)
            want = directional_fd(f_np, [x, w, b], i, v)
            np.testing.assert_allclose(float(np.sum(got * v)), want, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------ refusals


def test_unclaimed_convolution_runs_the_decomposition_and_says_why() -> None:
    """A bfloat16 convolution (no GEMM kernel for it) is refused by the claim: the core
    expands it into im2col before partitioning, the placement summary names the reason,
    and the values are the interpreter's."""
    from axle_cpu import CONV_DTYPES
    from axle_cpu.conv import conv_refusal
    from axle_cpu.gemm import GEMM_DTYPES

    assert CONV_DTYPES == GEMM_DTYPES  # the claim's dtypes are the ones the kernel computes
    b = Builder("bf16")
    x, w = b.parameter(TensorType(DType.BFLOAT16, (1, 2, 5, 5))), b.parameter(TensorType(DType.BFLOAT16, (3, 2, 3, 3)))
    c = b.convolution(x, w, **conv_dimension_numbers("NCHW", "OIHW", "NCHW"), **_window(2))
    why = conv_refusal(c)
    assert why is not None and "bf16" in why and "decomposition" in why
    xs = [a.astype(np.float32).astype(DType.BFLOAT16.np) for a in (RNG.standard_normal((1, 2, 5, 5)),
                                                                   RNG.standard_normal((3, 2, 3, 3)))]
    compiled = axle.jit(lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "VALID"), device="cpu:0")
    comp = compiled.lower(*xs).compile()
    assert native_convs(comp.module) == 0
    summary = comp.placement()
    assert summary.decomposed == {"convolution": 1}
    assert "not claimed for dtype bf16" in summary.decomposed_why["convolution"]
    assert "convolution: op 'convolution' is not claimed for dtype bf16" in str(summary)
    got = np.asarray(comp(*xs)).astype(np.float64)
    with axle.device("interpreter:0"):
        want = np.asarray(lax.conv_general_dilated(*xs, (1, 1), "VALID")).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_empty_convolution_is_refused_and_gives_zeros() -> None:
    from axle_cpu.conv import conv_refusal

    m = conv_module(("empty", (1, 0, 4, 4), (2, 0, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2)), DType.FLOAT32)
    assert "empty" in (conv_refusal(m.entry.root) or "")
    xs = conv_inputs(m)
    got = np.asarray(axle.jit(lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "VALID"),
                              device="cpu:0")(*xs))
    np.testing.assert_array_equal(got, np.zeros((1, 2, 2, 2), np.float32))
    assert math.prod(got.shape) == 8


@pytest.mark.parametrize("target", ["host", "generic"])
def test_conv_aot(target: str, tmp_path) -> None:  # noqa: ANN001
    """AOT: an NHWC convolution with its bias-relu epilogue and an NCHW grouped one in an
    object file for this host or for generic x86-64 (SSE tiles), run from C."""
    from test_cpu_aot import build_and_run

    from axle.device_compile import optimize_for
    from axle_cpu.aot import compile_aot

    nhwc = next(c for c in CONFIGS if c[0] == "2d-nhwc-stride2")
    nchw = next(c for c in CONFIGS if c[0] == "grouped-nchw")
    b = Builder("convs")
    x1, w1 = b.parameter(TensorType(DType.FLOAT32, nhwc[1])), b.parameter(TensorType(DType.FLOAT32, nhwc[2]))
    x2, w2 = b.parameter(TensorType(DType.FLOAT64, nchw[1])), b.parameter(TensorType(DType.FLOAT64, nchw[2]))
    c1 = b.convolution(x1, w1, **conv_dimension_numbers(*nhwc[3]), **nhwc[4])
    bias = b.parameter(TensorType(DType.FLOAT32, (c1.shape[-1],)))
    zero = b.broadcast_in_dim(b.constant(0.0, DType.FLOAT32), shape=c1.shape, broadcast_dimensions=())
    y1 = b.max(b.add(c1, b.broadcast_in_dim(bias, shape=c1.shape, broadcast_dimensions=(3,))), zero)
    m = b.build(y1, b.convolution(x2, w2, **conv_dimension_numbers(*nchw[3]), **nchw[4]))
    assert native_convs(optimize_for(m, _backend().devices()[0])) == 2  # what compile_aot compiles
    types = [p.type for p in m.entry.parameters]
    res = compile_aot(m, types, str(tmp_path), name="convs", cpu="generic" if target == "generic" else None)
    xs = [random_input(RNG, t, special=False) for t in types]
    got = build_and_run(res, xs, tmp_path)
    want = evaluate(m, *xs)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=1e-5)


def test_conv_inside_a_native_loop() -> None:
    """A convolution with its epilogue in a fori_loop body: the loop runs natively on cpu
    (no host fallback), the convolution stays native inside it, the values are the
    interpreter's."""
    x = RNG.standard_normal((2, 6, 5, 16)).astype(np.float32)
    w = (RNG.standard_normal((3, 3, 16, 16)) * 0.1).astype(np.float32)

    def f(a, k):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, 3, lambda i, v: anp.tanh(nn.conv(v, k, padding="SAME", layout="NHWC")), a)

    compiled = axle.jit(f, device="cpu:0").lower(x, w).compile()
    summary = compiled.placement()
    assert summary is None or not summary.fallback
    assert not (summary.decomposed if summary is not None else {})
    got = np.asarray(compiled(x, w))
    with axle.device("interpreter:0"):
        want = np.asarray(f(x, w))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_strided_input_gradient_runs_without_dilation_holes(layout: str) -> None:
    """cpu asks for the phase split (Capabilities.conv_phase_split): the input gradient of a
    stride-2 convolution (lhs-dilated) compiles to convolutions of the undilated input, with
    the interpreter's values."""
    first = layout == "NCHW"
    x = RNG.standard_normal((2, 4, 7, 6) if first else (2, 7, 6, 4)).astype(np.float32)
    w = RNG.standard_normal((5, 4, 3, 3) if first else (3, 3, 4, 5)).astype(np.float32)

    def loss(xa, wa):  # noqa: ANN001, ANN202
        return anp.sum(anp.tanh(nn.conv(xa, wa, None, 2, "SAME", 1, 1, layout)))

    compiled = axle.jit(axle.grad(loss), device="cpu:0").lower(x, w).compile()
    convs = [n for c in compiled.module.computations() for n in c.nodes if n.op is Op.CONVOLUTION]
    assert convs and all(set(n.attr["lhs_dilation"]) == {1} for n in convs)
    with axle.device("interpreter:0"):
        want = np.asarray(axle.grad(loss)(x, w))
    np.testing.assert_allclose(np.asarray(compiled(x, w)), want, rtol=1e-4, atol=1e-5)


# weight gradients as convolutions (the batch contracted as the input feature, a kernel as
# large as the map): K = batch x pixels (16 x 16 x 16 = 4096) into a small output
SPLIT_K_CONFIGS = [
    # NHWC, as the layout pass gives a 32x32 stage: x as CHWN, the output gradient as HWNC
    # (K's innermost dim the batch: patches read through row pointers, in runs of 16)
    ("weight-gradient-nhwc-split-k", (3, 16, 16, 16), (16, 16, 16, 5), ("NHWC", "HWIO", "NHWC"),
     _window(2, low=(1, 1), high=(1, 1))),
    # NCHW, as for 4x4 maps: x read in place with its batch as the feature, patches packed
    ("weight-gradient-nchw-split-k", (16, 2, 16, 16), (16, 4, 16, 16), ("CNHW", "IOHW", "CNHW"),
     _window(2, low=(1, 1), high=(1, 1))),
]


@pytest.mark.parametrize("name", [c[0] for c in SPLIT_K_CONFIGS])
def test_weight_gradient_split_by_k(name: str, cpu, monkeypatch) -> None:  # noqa: ANN001
    """A weight gradient's long K (batch and pixels) into a small output is split by K
    across threads (GemmSpec.split_reduce_size, in k_unit window positions: whole runs or
    lines of patches): each call given a slice of K units writes that slice's partial
    output, the partials sum to the whole, and the executable on 2 threads (forced) sums
    them. Split by rows, every thread would pack all the patches."""
    m = conv_module(next(c for c in SPLIT_K_CONFIGS if c[0] == name), DType.FLOAT32)
    xs = conv_inputs(m)
    _jit, fn, (outer, inner) = _kernel(m)
    from axle_cpu.plan import build_plan

    (spec,) = build_plan(m, arena=False).kernels.values()
    units = spec.split_reduce_size
    assert spec.reduce_split_first and spec.k_unit > 1 and units * spec.k_unit == spec.layout.k == 4096
    ptrs = lambda out: (ctypes.c_void_p * 3)(*(a.ctypes.data for a in (*xs, out)))  # noqa: E731
    cuts = [0, 1, units // 3, units // 2 + 1, units - 1, units]
    parts = [np.full(m.entry.root.shape, 99, np.float32) for _ in cuts[1:]]
    for (a, b), part in zip(zip(cuts, cuts[1:]), parts):
        fn(ptrs(part), 0, outer, 0, inner, a, b)
    check_conv(m, xs, np.sum(parts, axis=0, dtype=np.float32))
    split_k_across_threads(m, xs, cpu, monkeypatch, check_conv)
