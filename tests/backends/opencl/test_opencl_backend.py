"""The OpenCL backend beyond op conformance: devices, launch strategies, reductions
that need work-groups and second passes, errors, caching, profiling, empty arrays."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import axle
from axle.backend import BackendUnavailable
from axle.compiler import compile_module
from axle.config import config
from axle.backend import CompileOptions
from axle.errors import AxleError, BackendError
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.types import TensorType
from axle.testing.cases import OpCase, assert_close, check_case, core_cases, run_case, tolerance
from ocl_fusing import check_float_dot, fuse_whole, is_float_dot, opencl_device


@pytest.fixture(scope="module")
def ocl():  # noqa: ANN201
    return opencl_device()


@pytest.fixture
def gpu_strategy():  # noqa: ANN201
    """Compile with the GPU launch strategy (one work-item per element, work-group
    reductions, no vector types): valid OpenCL that PoCL runs too."""
    config.backend_flags["opencl_strategy"] = "gpu"
    yield
    config.backend_flags.pop("opencl_strategy", None)


def _backend(dev):  # noqa: ANN001, ANN202
    return axle.REGISTRY.backend_for(dev)


# ------------------------------------------------------------------------- devices


def test_devices_named_with_aliases_and_properties(ocl) -> None:  # noqa: ANN001
    devs = axle.devices("opencl")
    assert [d.name for d in devs] == [f"opencl:{i}" for i in range(len(devs))]
    d0 = devs[0]
    assert d0.aliases and axle.device(d0.aliases[0]) == d0
    for key in ("platform", "device", "type", "compute_units", "global_memory"):
        assert key in d0.properties
    assert d0.kind in ("gpu", "cpu", "accelerator")


def test_cli_lists_opencl_properties(ocl, capsys) -> None:  # noqa: ANN001
    from axle.cli import main

    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "opencl:0" in out and "platform=" in out and "compute_units=" in out


class _FakeDev(SimpleNamespace):
    pass


def _fake_platforms(monkeypatch, layout):  # noqa: ANN001, ANN202
    import pyopencl as cl

    plats = []
    for pname, devs in layout:
        ds = [_FakeDev(type=cl.device_type.GPU if t == "gpu" else cl.device_type.CPU, name=n,
                       max_compute_units=4, global_mem_size=2**30, extensions="cl_khr_fp64") for n, t in devs]
        plats.append(SimpleNamespace(name=pname, get_devices=lambda ds=ds: ds))
    monkeypatch.setattr(cl, "get_platforms", lambda: plats)


def test_gpus_come_first_in_a_stable_order(monkeypatch) -> None:  # noqa: ANN001
    from axle_opencl import OpenCLBackend

    _fake_platforms(monkeypatch, [("P0", [("cpu0", "cpu")]), ("P1", [("gpuA", "gpu"), ("gpuB", "gpu")])])
    b = OpenCLBackend()
    devs = b.devices()
    assert [d.properties["device"] for d in devs] == ["gpuA", "gpuB", "cpu0"]
    assert [d.aliases[0] for d in devs] == ["opencl:1:0", "opencl:1:1", "opencl:0:0"]
    prio = [b.device_priority(d) for d in devs]
    assert prio[0] == prio[1] > 100 > prio[2]


def test_no_platform_is_unavailable_not_an_import_error(monkeypatch) -> None:  # noqa: ANN001
    import pyopencl as cl

    from axle.registry import Registry
    from axle_opencl import OpenCLBackend

    def boom():  # noqa: ANN202
        raise cl.Error("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", boom)
    with pytest.raises(BackendUnavailable, match="no OpenCL platform"):
        OpenCLBackend()
    st = Registry()._init("opencl", OpenCLBackend, "axle_opencl:OpenCLBackend")
    assert not st.available and "no OpenCL platform" in st.reason


# ---------------------------------------------------------------- launch strategies

STRATEGY_OPS = ("add", "exponential", "reduce.sum", "reduce.max", "dot.", "transpose", "pad", "concatenate")


@pytest.mark.parametrize("case", [c for c in core_cases() if c.id.startswith(STRATEGY_OPS) and
                                  ("-f32" in c.id or "-s32" in c.id)], ids=lambda c: c.id)
def test_gpu_strategy_kernels_run_correctly(case: OpCase, ocl, gpu_strategy) -> None:  # noqa: ANN001
    if is_float_dot(case):
        check_float_dot(case, case.module, ocl)
    else:
        check_case(case, ocl, optimize=False)


def _sources(module, dev) -> str:  # noqa: ANN001
    return "\n".join(compile_module(module, dev, optimize=False).kernel_sources().values())


def test_cpu_strategy_is_chunked_and_vectorized(ocl) -> None:  # noqa: ANN001
    b = Builder("ew")
    x = b.parameter("f32[4099]")
    src = _sources(b.build(b.exp(b.mul(x, x))), ocl) if ocl.kind == "cpu" else ""
    if ocl.kind == "cpu":
        assert "chunk" in src and "vload" in src and "get_global_id(0) * chunk" in src


def test_gpu_strategy_is_one_item_per_element(ocl, gpu_strategy) -> None:  # noqa: ANN001
    b = Builder("ew")
    x = b.parameter("f32[4099]")
    src = _sources(b.build(b.exp(b.mul(x, x))), ocl)
    assert "if (i < n)" in src and "vload" not in src and "chunk;" not in src


def test_elementwise_programs_serve_every_shape(ocl) -> None:  # noqa: ANN001
    names = set()
    for n in (100, 1029, 4099):
        b = Builder("ew")
        x = b.parameter(f"f32[{n}]")
        names |= set(compile_module(b.build(b.add(x, x)), ocl, optimize=False).kernel_sources())
    assert len(names) == 1


def test_programs_cached_by_source(ocl) -> None:  # noqa: ANN001
    rt = _backend(ocl).runtime(ocl)
    b = Builder("c")
    x = b.parameter("f32[33,17]")
    m = b.build(b.transpose(b.sin(x), permutation=(1, 0)))
    compile_module(m, ocl, optimize=False)
    before = dict(rt._programs.items())
    compile_module(m, ocl, optimize=False)
    assert dict(rt._programs.items()) == before


# ---------------------------------------------------------------------- reductions


def _check(module, inputs, dev, n_red: int = 1) -> None:  # noqa: ANN001
    expected = evaluate(module, *inputs)
    actual = run_case(OpCase("t", module, inputs), dev, optimize=False)
    for a, e in zip(actual, expected):
        rtol, atol = tolerance(DType(axle.ir.dtypes.dtype(e.dtype).value), None, n_red)
        assert_close(a, e, rtol, atol)


REDUCTIONS = [((4099,), (0,)), ((3, 5001), (1,)), ((5001, 3), (0,)), ((2, 2049, 3), (0, 1)), ((100003,), (0,)),
              ((7, 1025), (1,))]


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("shape,axes", REDUCTIONS, ids=str)
@pytest.mark.parametrize("strategy", ["cpu", "gpu"])
def test_long_reductions_use_work_groups(shape, axes, kind, strategy, ocl) -> None:  # noqa: ANN001
    config.backend_flags["opencl_strategy"] = strategy
    try:
        rng = np.random.default_rng(1)
        dt = np.int32 if kind == "prod" else np.float32
        x = (rng.integers(-2, 3, shape) if kind == "prod" else rng.standard_normal(shape)).astype(dt)
        b = Builder("r")
        p = b.parameter(TensorType(axle.ir.dtypes.dtype(dt), shape))
        m = fuse_whole(b.build(b.reduce(b.mul(p, p), kind=kind, axes=axes)), wrap=False, kind="input")
        _check(m, [x], ocl, math.prod(shape[a] for a in axes))
        src = _sources(m, ocl)
        assert "__local" in src and "barrier(CLK_LOCAL_MEM_FENCE)" in src
    finally:
        config.backend_flags.pop("opencl_strategy", None)


@pytest.mark.parametrize("parts, pad", [(3, 5), (8, 0)])
def test_full_reduction_is_split_in_two_launches(parts: int, pad: int, ocl) -> None:  # noqa: ANN001
    """The plan's split of a long reduction (padded for a length that is no multiple of the
    parts): partials, then their combination, right numbers; without padding the partials
    read the [parts, chunk] view of the fused producer in floatN vectors on a CPU device (a
    reshape keeps row-major order), as the unsplit reduction does. The length is a multiple
    of the device's least part (8192 elements on PoCL, 2048 per work-item of a group on a GPU)."""
    n = parts * _backend(ocl).runtime(ocl).info.split_reductions[1] + pad
    b = Builder("seed")
    ps = [b.parameter(f"f32[{n}]") for _ in range(3)]
    m = fuse_whole(b.build(b.reduce(b.add(ps[0], b.mul(ps[1], ps[2])), kind="sum", axes=(0,))), wrap=False,
                   kind="input")
    exe = compile_module(m, ocl, optimize=False)
    assert exe.report()["kernels"] == 2
    if ocl.kind == "cpu" and n % 8 == 0:
        assert "vload" in "\n".join(exe.kernel_sources().values())
    rng = np.random.default_rng(0)
    _check(m, [rng.standard_normal(n).astype(np.float32) for _ in range(3)], ocl, n)


def test_multi_output_input_fusion(ocl) -> None:  # noqa: ANN001
    b = Builder("moments")
    x = b.parameter("f64[6,3001]")
    m = fuse_whole(b.build(b.reduce(x, kind="sum", axes=(1,)), b.reduce(b.mul(x, x), kind="sum", axes=(1,))),
                   wrap=True, kind="input")
    assert compile_module(m, ocl, optimize=False).report()["kernels"] == 1
    _check(m, [np.random.default_rng(2).standard_normal((6, 3001))], ocl, 3001)


@pytest.mark.parametrize("rows,cols", [(5, 1000), (129, 33), (1, 1), (3, 7)])
def test_row_fusion_layer_norm_one_kernel(rows: int, cols: int, ocl) -> None:  # noqa: ANN001
    b = Builder("ln")
    x = b.parameter(f"f32[{rows},{cols}]")
    inv_n = b.broadcast_in_dim(b.constant(np.float32(1 / cols)), shape=(rows,), broadcast_dimensions=())
    mean = b.mul(b.reduce(x, kind="sum", axes=(1,)), inv_n)
    var = b.sub(b.mul(b.reduce(b.mul(x, x), kind="sum", axes=(1,)), inv_n), b.mul(mean, mean))
    inv = b.rsqrt(b.add(var, b.broadcast_in_dim(b.constant(np.float32(1e-3)), shape=(rows,), broadcast_dimensions=())))
    y = b.mul(b.sub(x, b.broadcast_in_dim(mean, shape=(rows, cols), broadcast_dimensions=(0,))),
              b.broadcast_in_dim(inv, shape=(rows, cols), broadcast_dimensions=(0,)))
    m = fuse_whole(b.build(y, mean), wrap=False, kind="row")
    assert compile_module(m, ocl, optimize=False).report()["kernels"] == 1
    _check(m, [np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)], ocl, cols * 4)


# -------------------------------------------------------------------------- errors


def test_build_failure_shows_log_source_and_op(ocl) -> None:  # noqa: ANN001
    from axle_opencl.kernels import Kernel

    rt = _backend(ocl).runtime(ocl)
    bad = Kernel("axle_bad", "__kernel void axle_bad(__global float* o) { o[0] = undefined_thing; }\n",
                 "add -> f32[3] (at model.py:12)", [], [])
    with pytest.raises(BackendError) as e:
        rt.kernel(bad)
    msg = str(e.value)
    assert "add -> f32[3] (at model.py:12)" in msg and "undefined_thing" in msg and "generated source" in msg


@pytest.fixture
def strict():  # noqa: ANN201
    """Strict placement: a compile failure is an error instead of a host fallback."""
    saved = config.strict_placement
    config.update(strict_placement=True)
    yield
    config.update(strict_placement=saved)


def test_f64_without_fp64_is_a_compile_error(ocl, monkeypatch, strict) -> None:  # noqa: ANN001
    rt = _backend(ocl).runtime(ocl)
    monkeypatch.setattr(rt, "info", replace(rt.info, fp64=False))
    b = Builder("f64")
    x = b.parameter("f64[3]")
    with pytest.raises(AxleError, match=r"add.*f64\[3\].*cl_khr_fp64"):
        compile_module(b.build(b.add(x, x)), ocl, optimize=False)


def test_huge_arrays_are_refused_with_the_op(ocl, strict) -> None:  # noqa: ANN001
    b = Builder("big")
    x = b.parameter("f32[65536,65536]")
    with pytest.raises(AxleError, match="negate"):
        compile_module(b.build(b.neg(x)), ocl, optimize=False)
    # the backend itself refuses it too (kernels index with int)
    with pytest.raises(BackendError, match="negate.*2\\^31"):
        _backend(ocl).compile(b.build(b.neg(x)), ocl, CompileOptions(optimized=False))


# ------------------------------------------------------------- runtime behaviour


def test_empty_arrays_never_touch_the_device(ocl) -> None:  # noqa: ANN001
    be = _backend(ocl)
    buf = be.to_device(np.zeros((0, 3), np.float32), ocl)
    assert buf.handle is None
    assert be.to_host(buf).shape == (0, 3)
    b = Builder("e")
    x = b.parameter("f32[0,3]")
    exe = compile_module(b.build(b.exp(x), b.reduce(x, kind="sum", axes=(0,))), ocl, optimize=False)
    outs = exe.execute([buf])
    assert outs[0].handle is None
    np.testing.assert_array_equal(be.to_host(outs[1]), np.zeros(3, np.float32))


@pytest.mark.parametrize("value", [np.float32(2.5), np.array(7, np.int64), np.array(True)])
def test_scalars_round_trip_as_scalars(value, ocl) -> None:  # noqa: ANN001
    be = _backend(ocl)
    buf = be.to_device(value, ocl)
    assert buf.type.shape == ()
    back = be.to_host(buf)
    assert back.shape == () and back.dtype == np.asarray(value).dtype and back == value


def test_profiler_records_kernel_events(ocl, tmp_path) -> None:  # noqa: ANN001
    b = Builder("prof")
    x = b.parameter("f32[1000]")
    exe = compile_module(b.build(b.exp(b.neg(x))), ocl, optimize=False)
    buf = _backend(ocl).to_device(np.ones(1000, np.float32), ocl)
    path = tmp_path / "trace.json"
    with axle.profiler.trace(str(path)):
        exe.execute([buf])
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 2 and all(e["dur"] >= 0 for e in kernels)


def test_reshape_outside_fusions_is_free(ocl) -> None:  # noqa: ANN001
    b = Builder("rs")
    x = b.parameter("f32[6]")
    exe = compile_module(b.build(b.reshape(x, shape=(2, 3))), ocl, optimize=False)
    assert exe.report()["kernels"] == 0
    out = exe.execute([_backend(ocl).to_device(np.arange(6, dtype=np.float32), ocl)])[0]
    np.testing.assert_array_equal(_backend(ocl).to_host(out), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_eager_numpy_on_opencl(ocl) -> None:  # noqa: ANN001
    import axle.numpy as anp

    x = np.linspace(-2, 2, 37).astype(np.float32)
    with ocl:
        y = anp.tanh(anp.asarray(x)) * 2.0 + 1.0
    np.testing.assert_allclose(np.asarray(y), np.tanh(x) * 2 + 1, rtol=1e-5, atol=1e-6)


def test_nan_to_int_and_half_nan_payloads_guarded_by_hand(ocl) -> None:  # noqa: ANN001
    """NVIDIA's OpenCL (H100, driver 580.159) converts a double NaN, or any NaN to a 64-bit
    type, to the type's minimum with convert_<t>_sat_rtz (the spec says 0), and its
    vload_half returns one NaN for every half NaN (bitcasts read the payload): the kernels
    guard both themselves. PoCL follows the spec, so here the source shows the guards and
    the values the semantics."""
    b = Builder("nan")
    x, f, h = b.parameter("f64[4]"), b.parameter("f32[4]"), b.parameter("f16[3]")
    module = b.build(b.convert(x, dtype="s32"), b.convert(f, dtype="u64"), b.bitcast_convert(h, dtype="u16"),
                     b.bitcast_convert(b.bitcast_convert(h, dtype="s16"), dtype="f16"))
    src = _sources(module, ocl)
    assert "(isnan(" in src and "convert_int_sat_rtz" in src and "convert_ulong_sat_rtz" in src
    assert "axle_ldh(" in src and "vload_half(i, p)" in src
    xs = [np.array([np.nan, -np.nan, 3.7, -1e300]), np.array([np.nan, np.inf, -2.5, 7.9], np.float32),
          np.array([0x7E01, 0xFC02, 0x3C00], np.uint16).view(np.float16)]
    got = compile_module(module, ocl, optimize=False).execute([_backend(ocl).to_device(a, ocl) for a in xs])
    got = [np.asarray(_backend(ocl).to_host(g)) for g in got]
    np.testing.assert_array_equal(got[0], [0, 0, 3, np.iinfo(np.int32).min])
    np.testing.assert_array_equal(got[1], [0, np.iinfo(np.uint64).max, 0, 7])
    np.testing.assert_array_equal(got[2], [0x7E01, 0xFC02, 0x3C00])
    assert got[3].view(np.uint16)[2] == 0x3C00 and np.isnan(got[3][:2]).all()


def test_an_unregistered_gpu_driver_is_named_with_its_fix(tmp_path) -> None:  # noqa: ANN001
    """A driver mount with NVIDIA's OpenCL library but no ICD file (a GPU container's usual
    state) lists no GPU: axle-opencl says why and how to register it; nothing when the
    platform is listed or an ICD file names the library."""
    from axle_opencl.backend import unregistered_drivers

    lib_dir, vendors = tmp_path / "lib", tmp_path / "vendors"
    lib_dir.mkdir()
    vendors.mkdir()
    (lib_dir / "libnvidia-opencl.so.1").write_bytes(b"")
    (vendors / "pocl.icd").write_text("libpocl.so.2\n")
    (hint,) = unregistered_drivers(["Portable Computing Language"], (str(lib_dir),), str(vendors))
    assert "NVIDIA" in hint and f"echo {lib_dir}/libnvidia-opencl.so.1 > {vendors}/nvidia.icd" in hint
    assert unregistered_drivers(["NVIDIA CUDA"], (str(lib_dir),), str(vendors)) == []
    assert unregistered_drivers([], (str(tmp_path / "none"),), str(vendors)) == []
    (vendors / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    assert unregistered_drivers([], (str(lib_dir),), str(vendors)) == []
