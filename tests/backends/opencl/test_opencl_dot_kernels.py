"""The register-tiled dot kernels at sizes that divide none of their tiles (rows per
work-item, vector panels, local-memory tiles), with batch dims in any position,
transposed operands, several contracting or free dims, every dtype, on both launch
strategies; and which kernel each layout gets on a CPU device."""
from __future__ import annotations

import numpy as np
import pytest

import axle
from axle.compiler import compile_module
from axle.config import config
from axle.frontend.device_put import to_buffer
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.module import Module
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.testing.cases import OpCase, random_input, run_case
from axle.testing.session import compile_case
from ocl_fusing import check_float_dot, prebuild_tests

# name: lhs shape, rhs shape, dot_general attributes
LAYOUTS = {
    "plain": ((67, 131), (131, 83), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "narrow": ((13, 40), (40, 5), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "one-vector": ((7, 9), (9, 16), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "lhs-transposed": ((45, 70), (45, 37), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    "rhs-transposed": ((29, 75), (38, 75), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
    "both-transposed": ((33, 21), (19, 33), dict(lhs_contracting=(0,), rhs_contracting=(1,))),
    "batch-both-transposed": ((2, 40, 9), (2, 11, 40), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(1,),
                                                             rhs_contracting=(2,))),
    "free-split": ((4, 30, 5), (7, 30), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
    "matvec": ((23, 101), (101,), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "vecmat": ((53,), (53, 70), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    "batch": ((3, 19, 35), (3, 35, 70), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))),
    "batch-middle": ((9, 2, 17), (17, 2, 66), dict(lhs_batch=(1,), rhs_batch=(1,), lhs_contracting=(2,),
                                                   rhs_contracting=(0,))),
    "batch-rhs-transposed": ((2, 11, 40), (2, 7, 40), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,),
                                                            rhs_contracting=(2,))),
    "two-contracting": ((5, 6, 13), (6, 13, 34), dict(lhs_contracting=(1, 2), rhs_contracting=(0, 1))),
    "split-contracting": ((6, 9, 5), (5, 6, 20), dict(lhs_contracting=(0, 2), rhs_contracting=(1, 0))),
    "two-free": ((7, 3, 12), (12, 5, 8), dict(lhs_contracting=(2,), rhs_contracting=(0,))),
    "free-around-contracting": ((10, 14), (4, 14, 9), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
}
DTYPES = [DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32, DType.INT64]


def _case(layout: str, dt: DType) -> OpCase:
    ls, rs, attrs = LAYOUTS[layout]
    b = Builder("dot_" + layout.replace("-", "_"))
    p, q = b.parameter(TensorType(dt, ls)), b.parameter(TensorType(dt, rs))
    module = b.build(b.dot_general(p, q, **attrs))
    rng = np.random.default_rng(len(layout))
    # integers include INT_MIN/INT_MAX (products and sums wrap); f16 stays small
    inputs = [random_input(rng, TensorType(dt, s), special=dt.is_int, small=dt is DType.FLOAT16) for s in (ls, rs)]
    return OpCase(f"dot-{layout}-{dt.value}", module, inputs)


#: what the tests compile, built ahead in batches (conftest.py)
PREBUILT = {"test_dot_layouts": lambda p: [(_case(p["layout"], p["dt"]).module, False)]}


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_dot_layouts(layout: str, dt: DType, ocl, strategy) -> None:  # noqa: ANN001
    case = _case(layout, dt)
    if dt.is_float:
        check_float_dot(case, case.module, ocl)
    else:
        (actual,) = run_case(case, ocl, optimize=False)
        np.testing.assert_array_equal(actual, evaluate(case.module, *case.inputs)[0])


def test_a_batch_of_tests_is_built_ahead_once_per_strategy(ocl, monkeypatch) -> None:  # noqa: ANN001
    """What PREBUILT names is built by conftest.py's prebuild_tests in one program per
    launch strategy; the tests' own compiles (under their strategy) then build nothing."""
    from axle_opencl import runtime

    to_host = axle.REGISTRY.backend_for(ocl).to_host
    # dots of a contracting size no other test uses: kernels not built yet in this process
    k = 300 + int(np.random.default_rng().integers(0, 5000))
    prebuilt = {"t": lambda p: [(_dot(p["m"], k), False)]}
    tests = [("t", {"m": m, "strategy": s}) for m in (3, 5) for s in ("cpu", "gpu")]
    built: list[str] = []
    real_build = runtime._build
    monkeypatch.setattr(runtime, "_build", lambda prg, dev: built.append("program") or real_build(prg, dev))
    prebuild_tests(prebuilt, tests, ocl)
    assert built == ["program", "program"] and "opencl_strategy" not in config.backend_flags
    for _, p in tests:
        monkeypatch.setitem(config.backend_flags, "opencl_strategy", p["strategy"])
        (actual,) = compile_module(_dot(p["m"], k), ocl, optimize=False).execute(
            [to_buffer(np.ones((p["m"], k), np.float32), ocl), to_buffer(np.ones((k, 4), np.float32), ocl)])
        np.testing.assert_array_equal(np.asarray(to_host(actual)), np.full((p["m"], 4), k, np.float32))
    assert built == ["program", "program"]  # every kernel was built ahead


def _dot(m: int, k: int) -> Module:
    b = Builder(f"dot_{m}x{k}")
    p, q = b.parameter(TensorType(DType.FLOAT32, (m, k))), b.parameter(TensorType(DType.FLOAT32, (k, 4)))
    return b.build(b.dot_general(p, q, lhs_contracting=(1,), rhs_contracting=(0,)))


def _source(layout: str, dt: DType, dev) -> str:  # noqa: ANN001
    (src,) = compile_module(_case(layout, dt).module, dev, optimize=False).kernel_sources().values()
    return src


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.value)
def test_cpu_devices_get_register_blocks_without_local_memory(dt: DType, ocl) -> None:  # noqa: ANN001
    if ocl.kind != "cpu":
        return
    # enough rows to amortize a packed rhs panel: packed panels in __local memory
    assert "packed rhs panels" in _source("plain", dt, ocl)
    # rows x vectors: a rhs row loaded as vectors, lhs scalars splatted
    few = _source("one-vector", dt, ocl)
    assert "__local" not in few and "vload" in few and "c5_0" in few
    # x @ w.T with few rows: dot products along k
    rt = _source("rhs-transposed", dt, ocl)
    assert "__local" not in rt and "v3_3" in rt
    # a.T @ b.T: vectors along the lhs free dim, results stored lane by lane
    bt = _source("both-transposed", dt, ocl)
    assert "__local" not in bt and "c5_0" in bt and "c0_0.s1" in bt
    # neither operand contiguous where a micro-kernel needs it: local-memory tiles
    assert "__local" in _source("free-split", dt, ocl)


def test_gpu_strategy_tiles_are_register_blocked(ocl) -> None:  # noqa: ANN001
    config.backend_flags["opencl_strategy"] = "gpu"
    try:
        src = _source("plain", DType.FLOAT32, ocl)
    finally:
        config.backend_flags.pop("opencl_strategy", None)
    # each work-item keeps 4 x 4 accumulators and reads 4 + 4 local values per step
    assert "__local" in src and "c3_3" in src and "As[kk][lm + 48]" in src


# ---------------------------------------------- CPU devices: packed rhs panels (dots._packed)

#: name: lhs shape, rhs shape, dot_general attributes; each reaches another path of the
#: packed kernel (>= PACKED_MIN_ROWS rows, >= one vector of columns)
PACKED = {
    # rows not a multiple of the 6-row tile, 17 columns: one full vector and a zero-padded panel
    "odd": ((129, 3), (3, 17), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    # x @ w.T: the panel packed column by column; k = 1
    "rhs-transposed": ((33, 1), (129, 1), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
    # a.T @ b: lhs scalars strided by the rows; batch dims leading and in the middle
    "batch-lhs-transposed": ((3, 17, 40), (3, 17, 33), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(1,),
                                                            rhs_contracting=(1,))),
    "batch-middle": ((40, 2, 9), (9, 2, 35), dict(lhs_batch=(1,), rhs_batch=(1,), lhs_contracting=(2,),
                                                  rhs_contracting=(0,))),
    # no contraction: zeros (a micro-kernel that loops over nothing)
    "k0": ((40, 0), (0, 20), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
}


def _packed_case(name: str, ls: tuple[int, ...], rs: tuple[int, ...], attrs: dict, dt: DType,
                 rng: np.random.Generator) -> OpCase:
    b = Builder("packed_" + name.replace("-", "_"))
    p, q = b.parameter(TensorType(dt, ls)), b.parameter(TensorType(dt, rs))
    module = b.build(b.dot_general(p, q, **attrs))
    inputs = [random_input(rng, TensorType(dt, s), special=dt.is_int, small=dt is DType.FLOAT16) for s in (ls, rs)]
    return OpCase(f"packed-{name}-{dt.value}", module, inputs)


@pytest.fixture
def cpu_strategy():  # noqa: ANN201
    """The CPU launch strategy (the packed kernel's) on any device."""
    config.backend_flags["opencl_strategy"] = "cpu"
    yield
    config.backend_flags.pop("opencl_strategy", None)


def _check(case: OpCase, ocl, packed: bool = True) -> None:  # noqa: ANN001
    if packed:  # the case reaches the kernel it tests
        (src,) = compile_module(case.module, ocl, optimize=False).kernel_sources().values()
        assert "packed rhs panels" in src, case.id
    if case.module.entry.root.dtype.is_float:
        check_float_dot(case, case.module, ocl)
    else:
        (actual,) = run_case(case, ocl, optimize=False)
        np.testing.assert_array_equal(actual, evaluate(case.module, *case.inputs)[0])


def ocl_has_fp64(dev) -> bool:  # noqa: ANN001
    import axle

    return axle.REGISTRY.backend_for(dev).runtime(dev).info.fp64


@pytest.mark.parametrize("layout", list(PACKED))
def test_packed_panels_match_the_interpreter(layout: str, ocl, cpu_strategy) -> None:  # noqa: ANN001
    ls, rs, attrs = PACKED[layout]
    _check(_packed_case(layout, ls, rs, attrs, DType.FLOAT32, np.random.default_rng(7)), ocl, packed=layout != "k0")


@pytest.mark.parametrize("dt", [DType.FLOAT64, DType.FLOAT16, DType.INT32], ids=lambda d: d.value)
def test_packed_panels_deeper_than_one_slab(dt: DType, ocl, cpu_strategy, monkeypatch) -> None:  # noqa: ANN001
    """k deeper than one packed slab: partial sums wait in __local accumulators between
    slabs (the last slab partial), every dtype's accumulator and store."""
    from axle_opencl import dots

    if dt is DType.FLOAT64 and not ocl_has_fp64(ocl):
        return
    monkeypatch.setattr(dots, "PANEL_BYTES", 1024)  # 4- or 8-deep slabs of 32 columns
    case = _packed_case(f"slabs_{dt.value}", (37, 29), (29, 40), dict(lhs_contracting=(1,), rhs_contracting=(0,)),
                        dt, np.random.default_rng(8))
    _check(case, ocl)


def test_packed_panels_propagate_nan_and_inf(ocl, cpu_strategy) -> None:  # noqa: ANN001
    """NaN and inf reach exactly the outputs they reach in the interpreter; the zero
    padding past the last column (inf * 0 = NaN there) is never stored."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((35, 20)).astype(np.float32)
    c = rng.standard_normal((20, 20)).astype(np.float32)
    a[3, 4], a[10, 0], a[34, 19] = np.inf, np.nan, -np.inf
    c[7, 2], c[5, 19] = np.inf, np.nan
    b = Builder("packed_nonfinite")
    p, q = b.parameter("f32[35,20]"), b.parameter("f32[20,20]")
    module = b.build(b.dot_general(p, q, lhs_contracting=(1,), rhs_contracting=(0,)))
    (src,) = compile_module(module, ocl, optimize=False).kernel_sources().values()
    assert "packed rhs panels" in src
    (actual,) = run_case(OpCase("packed-nonfinite", module, [a, c]), ocl, optimize=False)
    (expected,) = evaluate(module, a, c)
    assert np.isnan(expected).any() and np.isinf(expected).any()
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(actual), np.isinf(expected))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_packed_panels_run_the_epilogue(ocl, cpu_strategy, monkeypatch) -> None:  # noqa: ANN001
    """tanh(x @ w + bias) as one output fusion over the packed kernel: the epilogue finishes
    every stored element (a partial panel, several slabs), the dot itself is never stored."""
    from axle_opencl import dots

    monkeypatch.setattr(dots, "PANEL_BYTES", 2048)
    b = Builder("packed_epilogue")
    x, w, bias = b.parameter("f32[40,23]"), b.parameter("f32[23,50]"), b.parameter("f32[50]")
    y = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    module = b.build(b.tanh(b.add(y, b.broadcast_in_dim(bias, shape=(40, 50), broadcast_dimensions=(1,)))))
    rng = np.random.default_rng(10)
    inputs = [rng.standard_normal(t.shape).astype(np.float32) for t in module.entry.parameter_types]
    exe, optimized = compile_case(module, ocl)
    assert [f.attr["kind"] for f in optimized.entry.nodes if f.op is Op.FUSION] == ["output"]
    (src,) = exe.kernel_sources().values()
    assert "packed rhs panels" in src and "_epi(" in src
    (actual,) = run_case(OpCase("packed-epilogue", module, inputs), ocl)
    np.testing.assert_allclose(actual, evaluate(module, *inputs)[0], rtol=1e-5, atol=1e-5)


def test_packed_panels_fit_the_device_local_memory() -> None:
    """The slab and the partial sums of a group's rows (k deeper than one slab) fit the
    device's local memory; a device with too little for one tile gets an unpacked kernel."""
    import re

    from axle_opencl.dots import dot_kernel_cpu
    from axle_opencl.kernels import DeviceInfo

    b = Builder("packed_local")
    p, q = b.parameter("f32[600,3000]"), b.parameter("f32[3000,64]")
    dot = b.build(b.dot_general(p, q, lhs_contracting=(1,), rhs_contracting=(0,))).entry.root
    for local in (1 << 20, 64 << 10, 8 << 10, 1 << 10):
        dev = DeviceInfo(is_gpu=False, compute_units=2, max_work_group=4096, local_mem=local, fp64=True, float_lanes=16)
        k = dot_kernel_cpu(dot, dev)
        assert k is not None
        arrays = re.findall(r"__local float(\d+) \w+\[(\d+)\];", k.source)
        assert sum(4 * int(lanes) * int(count) for lanes, count in arrays) <= local
        assert ("packed rhs panels" in k.source) == (local > 1 << 10), local
