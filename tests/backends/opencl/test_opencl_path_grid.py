"""The OpenCL backend's kernel choices at their thresholds: for each size that picks a
kernel (dots.py's PACKED_MIN_ROWS, one vector of columns and of k, MAX_TILES_PER_GROUP;
kernels.py's GROUP_ROW_MIN on GPUs, the vector loops of map, row and reduction kernels
from two vectors / 16 reduced elements; plan.py's group reductions; the convolution's
pixel vectors up to MAX_PIXEL_STRIDE; the sort's _MAX_ITEMS work-items), a shape just
below and at it, per layout and dtype, on the strategy that takes the path, against the
interpreter. The kernel sizes (vector lanes, compute units) are the device's."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from axle.config import config
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Module, TensorType
from axle.ir.conv import conv_dimension_numbers
from axle.testing.cases import (
    OpCase,
    assert_close,
    bias_relu,
    check_case,
    random_input,
    row_softmax,
    run_case,
    tolerance,
)

RNG = np.random.default_rng(29)
MM = dict(lhs_contracting=(1,), rhs_contracting=(0,))
BT = dict(lhs_contracting=(1,), rhs_contracting=(1,))
AT = dict(lhs_contracting=(0,), rhs_contracting=(0,))
BATCH0 = dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))


def _info(ocl):  # noqa: ANN001, ANN202
    import axle

    return axle.REGISTRY.backend_for(ocl).runtime(ocl).info


def _consts() -> dict[str, int]:
    from axle_opencl import dots, kernels, sort

    return {"rows": dots.PACKED_MIN_ROWS, "tiles": dots.MAX_TILES_PER_GROUP, "group_row": kernels.GROUP_ROW_MIN,
            "items": sort._MAX_ITEMS}


C = _consts()


def _dot(dt: str, ls: tuple[int, ...], rs: tuple[int, ...], attrs: dict, epi: bool) -> Module:
    """x . y, or relu(x . y + bias[last dim]) (one output fusion)."""
    b = Builder("dot_grid")
    x = b.parameter(f"{dt}[{','.join(map(str, ls))}]")
    y = b.parameter(f"{dt}[{','.join(map(str, rs))}]")
    d = b.dot_general(x, y, **attrs)
    return b.build(bias_relu(b, d) if epi else d)


def _inputs(m: Module) -> list[np.ndarray]:
    return [random_input(RNG, p.type, special=False, small=p.type.dtype in (DType.FLOAT16, DType.INT32, DType.INT64))
            for p in m.entry.parameters]


def _source(m: Module, ocl) -> str:  # noqa: ANN001
    from axle.compiler import compile_module

    return "\n".join(compile_module(m, ocl).kernel_sources().values())


@pytest.fixture
def use_strategy():  # noqa: ANN201
    """Sets the launch strategy for the rest of the test (restored after)."""
    def use(name: str) -> None:
        config.backend_flags["opencl_strategy"] = name

    yield use
    config.backend_flags.pop("opencl_strategy", None)


# ================================================================ dots (CPU strategy)


def _dot_cases() -> list:
    """name, dtype, lhs, rhs, dims, epilogue, a marker the kernel source must (+) or must
    not (-) hold; sizes in units of the device's vector lanes (W, filled in per device)."""
    r = C["rows"]
    return [
        # PACKED_MIN_ROWS and one vector of columns: packed rhs panels from both
        ("packed-rows-below", "f32", (r - 1, 37), (37, "W"), MM, False, "-packed rhs panels"),
        ("packed-rows-at", "f32", (r, 37), (37, "W"), MM, False, "+packed rhs panels"),
        ("packed-cols-below", "f32", (r + 5, 37), (37, "W-1"), MM, False, "-packed rhs panels"),
        ("packed-at-bt", "f32", (r, 37), ("W+1", 37), BT, False, "+packed rhs panels"),
        ("packed-at-at-f64", "f64", (37, r + 1), (37, "W"), AT, False, "+packed rhs panels"),
        ("packed-at-batch-s32", "s32", (2, r, 37), (2, 37, "W+3"), BATCH0, False, "+packed rhs panels"),
        ("packed-at-f16-bias-relu", "f16", (r, 37), (37, "W"), MM, True, "+packed rhs panels"),
        ("packed-below-bias-relu", "f32", (r - 1, 37), (37, "W"), MM, True, "-packed rhs panels"),
        # few rows, x @ w.T: dot products along k from one vector of k, rows x vectors below
        ("few-rows-bt-k-below", "f32", (5, "W-1"), (7, "W-1"), BT, False, "-__local"),
        ("few-rows-bt-k-at", "f32", (5, "W"), (7, "W"), BT, False, "-__local"),
        ("few-rows-bt-k-at-s64", "s64", (5, "W"), (7, "W"), BT, True, "-__local"),
        ("vecmat-bt-wide", "f32", (1, "W+5"), (300, "W+5"), BT, True, "-__local"),
        # MAX_TILES_PER_GROUP: enough row tiles that a group's share is capped
        ("packed-many-tiles", "f32", ("TILES", 4), (4, "W+1"), MM, False, "+packed rhs panels"),
    ]


def _size(v: int | str, w: int, tiles_rows: int) -> int:
    if isinstance(v, int):
        return v
    return tiles_rows if v == "TILES" else w + int(v[1:] or 0)


@pytest.mark.parametrize("case", _dot_cases(), ids=lambda c: c[0])
def test_dots_at_thresholds(case: tuple, ocl, use_strategy) -> None:  # noqa: ANN001
    name, dt, ls, rs, attrs, epi, marker = case
    use_strategy("cpu")
    info = _info(ocl)
    if dt in ("f64", "s64") and not info.fp64:
        return
    w = info.double_lanes if dt in ("f64", "s64") else info.float_lanes
    # rows whose tiles (6 rows each at most) exceed MAX_TILES_PER_GROUP per group
    many = 6 * C["tiles"] * 4 * info.compute_units + 7
    ls = tuple(_size(v, w, many) for v in ls)
    rs = tuple(_size(v, w, many) for v in rs)
    m = _dot(dt, ls, rs, attrs, epi)
    xs = _inputs(m)
    src = _source(m, ocl)
    assert (marker[1:] in src) is (marker[0] == "+"), f"{name}: {marker} (lanes {w})"
    # integers exactly; floats within the kit's tolerance plus the dot's error bound
    check_case(OpCase(name, m, xs), ocl)


#: the GPU strategy's local-memory tiles (dot_kernel: 64 x 64 outputs per group of 16 x 16
#: work-items, K in slabs of 16 with 256 work-items a group): sizes around a tile
GPU_DOTS = [
    ("tile-below", "f32", (63, 15), (15, 63), MM, False),
    ("tile-at", "f32", (64, 16), (16, 64), MM, True),
    ("tile-above-bt", "f64", (65, 17), (129, 17), BT, True),
    ("tile-above-at-s32", "s32", (33, 65), (33, 65), AT, False),
    ("tile-one-row-wide", "f32", (1, 16), (16, 257), MM, True),
]


@pytest.mark.parametrize("case", GPU_DOTS, ids=lambda c: c[0])
def test_gpu_strategy_dots_around_a_tile(case: tuple, ocl, use_strategy) -> None:  # noqa: ANN001
    name, dt, ls, rs, attrs, epi = case
    use_strategy("gpu")
    if dt == "f64" and not _info(ocl).fp64:
        return
    m = _dot(dt, ls, rs, attrs, epi)
    assert "__local" in _source(m, ocl), name
    check_case(OpCase(name, m, _inputs(m)), ocl)


# ================================================================ the other kernels


def _softmax(b: Builder, x) -> tuple:  # noqa: ANN001
    return (row_softmax(b, x),)


def _sums(axes: tuple[int, ...]) -> Callable:
    return lambda b, x: (b.reduce(x, kind="sum", axes=axes), b.reduce(x, kind="max", axes=axes))


def _tanh_scale(b: Builder, x) -> tuple:  # noqa: ANN001
    two = b.broadcast_in_dim(b.constant(np.array(2, x.dtype.np)), shape=x.shape, broadcast_dimensions=())
    return (b.mul(b.tanh(x), two),) if x.dtype.is_float else (b.mul(x, two),)


def _sorted(b: Builder, x) -> tuple:  # noqa: ANN001
    return (b.sort(x, dimension=len(x.shape) - 1, num_keys=1, descending=0, index=0),)


def _conv(stride: int) -> Callable:
    def body(b: Builder, x) -> tuple:  # noqa: ANN001
        w = b.constant(np.linspace(-1, 1, 4 * 3 * 3 * 3).reshape(4, 3, 3, 3).astype(np.float32))
        return (b.convolution(x, w, **conv_dimension_numbers("NCHW", "OIHW", "NCHW"), window_strides=(1, stride),
                              padding_low=(1, 1), padding_high=(1, 1), lhs_dilation=(1, 1), rhs_dilation=(1, 1)),)
    return body


def _other_cases() -> list:
    """name, strategy, dtype, shape (``W``: the float lanes), body, a marker the kernel
    source must (+) or must not (-) hold (``VEC``: the float vector type), or None."""
    g = C["group_row"]
    return [
        # GROUP_ROW_MIN (GPU strategy): a work-group per row from this long a row
        ("group-row-below", "gpu", "f32", (5, g - 1), _softmax, "-__local"),
        ("group-row-at", "gpu", "f32", (5, g), _softmax, "+__local"),
        ("group-row-at-f64", "gpu", "f64", (3, g + 7), _softmax, "+__local"),
        # CPU strategy: a row's tail loop and the map loop in vectors from two vectors
        ("row-tail-below", "cpu", "f32", (3, "2W-1"), _softmax, "-VEC"),
        ("row-tail-at", "cpu", "f32", (3, "2W+3"), _softmax, "+VEC"),
        ("map-below", "cpu", "f32", ("2W-1",), _tanh_scale, "-VEC"),
        ("map-at", "cpu", "f32", ("2W+3",), _tanh_scale, "+VEC"),
        ("map-at-s32", "cpu", "s32", (3, "W+1"), _tanh_scale, None),
        # CPU strategy: work-items of at least 4096 elements, at most 8 per compute unit:
        # chunks rounded to whole vectors, the last one partial
        ("map-many-chunks", "cpu", "f32", (128 * 1024 + 5,), _tanh_scale, "+VEC"),
        ("row-many-rows", "cpu", "f64", (4097, 37), _softmax, None),
        # group reductions from 1024 (CPU) / 64 and 512 (GPU) reduced elements into few outputs
        ("group-reduce-below-cpu", "cpu", "f32", (2, 1023), _sums((1,)), "-__local"),
        ("group-reduce-at-cpu", "cpu", "f32", (2, 1024), _sums((1,)), "+__local"),
        ("group-reduce-at-cpu-columns", "cpu", "f64", (1030, 3), _sums((0,)), "+__local"),
        ("group-reduce-below-gpu", "gpu", "f32", (2, 63), _sums((1,)), "-__local"),
        ("group-reduce-at-gpu", "gpu", "f32", (2, 64), _sums((1,)), "+__local"),
        ("group-reduce-512-gpu", "gpu", "s32", (3, 513), _sums((1,)), "+__local"),
        # the convolution's pixel vectors up to a window stride of MAX_PIXEL_STRIDE
        ("conv-stride2", "cpu", "f32", (2, 3, 5, "3W"), _conv(2), None),
        ("conv-stride3", "cpu", "f32", (2, 3, 5, "3W"), _conv(3), None),
        # the sort's work-items: at most _MAX_ITEMS, a grid-stride loop over the others
        ("sort-items-at", "cpu", "f32", (C["items"], 3), _sorted, None),
        ("sort-items-above", "cpu", "f32", (C["items"] + 5, 3), _sorted, None),
    ]


def _dim(v: int | str, w: int) -> int:
    if isinstance(v, int):
        return v
    mult, _, extra = v.partition("W")
    return int(mult or 1) * w + int(extra or 0)


@pytest.mark.parametrize("case", _other_cases(), ids=lambda c: c[0])
def test_other_kernels_at_thresholds(case: tuple, ocl, use_strategy) -> None:  # noqa: ANN001
    name, strategy, dt, shape, body, marker = case
    use_strategy(strategy)
    info = _info(ocl)
    if dt == "f64" and not info.fp64:
        return
    shape = tuple(_dim(v, info.float_lanes) for v in shape)
    b = Builder(name.replace("-", "_"))
    x = b.parameter(TensorType(DType(dt), shape))
    m = b.build(*body(b, x))
    if marker is not None:
        text = marker[1:].replace("VEC", f"float{info.float_lanes}")
        assert (text in _source(m, ocl)) is (marker[0] == "+"), f"{name}: {marker}"
    if DType(dt).is_int:
        xs = [RNG.integers(-9, 10, size=shape).astype(DType(dt).np)]
    else:
        xs = [(np.round(RNG.standard_normal(shape) * 8) / 8).astype(DType(dt).np)]  # ties for the sort
    got = run_case(OpCase(name, m, xs), ocl)
    for g, want in zip(got, evaluate(m, *xs)):
        exact = name.startswith("sort") or g.dtype.kind != "f"
        rtol, atol = (0, 0) if exact else tolerance(DType(dt), None, max(shape) * (9 if "conv" in name else 1))
        assert_close(g, want, rtol, atol, f"{name} ({strategy})")


def test_random_programs_straddle_the_thresholds() -> None:
    """The random-program generator's threshold sizes (random_modules.threshold_pattern)
    still straddle the opencl thresholds (the vector sizes follow the device)."""
    from axle.testing import random_modules as rm
    from axle_opencl import dots, kernels

    # (1024: plan._use_group_reduce's reduced elements on CPU devices)
    for sizes, at in ((rm.TALL_SIZES, dots.PACKED_MIN_ROWS), (rm.ROW_SIZES, kernels.GROUP_ROW_MIN),
                      (rm.ROW_SIZES, 1024)):
        assert at - 1 in sizes and at in sizes, (sizes, at)
