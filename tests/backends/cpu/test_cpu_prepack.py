"""Constant GEMM operands packed once, at compile time (plan.py ``_Lowering.prepacked``,
gemm.py ``pack_b``): a convolution or dot whose B (a weight) is a constant reads it as the
NR-wide panels the kernel would pack on every call. Against the same program with the
weight as a parameter: the same bits (the same panels, the same K blocks, the same sums),
across layouts, groups, strides, dtypes, thread splits and the compile cache; the plan
says which kernels read a prepacked B, and holds the weight once when nothing else reads
it."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from test_cpu_conv import CONFIGS, conv_inputs, conv_module

import axle
import axle.numpy as anp
from axle.backend import CompileOptions
from axle.compiler import compile_module
from axle.ir import Builder, DType, Module
from axle.ir.conv import conv_dimension_numbers
from axle.ir.dtypes import dtype as to_dtype
from axle.ir.types import TensorType
from axle_cpu import gemm, plan

RNG = np.random.default_rng(23)
CONV = {c[0]: c for c in CONFIGS}
#: NHWC-family outputs: the kernel is B (packed); NCHW ones put it in A (read in place)
PREPACKED_CONVS = ["2d-nhwc-same", "2d-nhwc-stride2", "grouped-nhwc", "indirect-grouped-strided",
                   "indirect-batch-groups", "several-k-blocks-nhwc", "k-block-inside-a-feature-run",
                   "indirect-lhs-dilation", "3d-ndhwc", "depthwise-nhwc", "mixed-layouts", "2d-rhs-dilation",
                   "batch-1-out-1"]
UNPACKED_CONVS = ["2d-nchw-same", "grouped-nchw", "depthwise-nchw", "weight-gradient-nchw"]


def _backend():  # noqa: ANN202
    return axle.REGISTRY.backend("cpu")


def _compile(m: Module, cpu, **flags: str):  # noqa: ANN001, ANN202
    return _backend().compile(m, cpu, CompileOptions(optimized=False, flags=flags))


def _execute(exe, xs: list[np.ndarray], cpu) -> np.ndarray:  # noqa: ANN001
    be = _backend()
    return be.to_host(exe.execute([be.to_device(x, cpu) for x in xs])[0])


def _prepacked(exe) -> list[str]:  # noqa: ANN001
    return [s.label for s in exe.plan.steps if isinstance(s, plan.KernelStep) and s.label.endswith("(prepacked)")]


def _conv_pair(cfg: tuple, dt: DType) -> tuple[Module, Module, np.ndarray, np.ndarray]:
    """The convolution with its kernel as a parameter, and with it as a constant."""
    name, xs, ws, layouts, window = cfg
    param = conv_module(cfg, dt)
    x, w = conv_inputs(param)
    b = Builder(name.replace("-", "_") + "_const")
    xp = b.parameter(TensorType(dt, xs))
    const = b.build(b.convolution(xp, b.constant(w), **conv_dimension_numbers(*layouts), **window))
    return param, const, x, w


@pytest.mark.parametrize("dt", [DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32], ids=lambda d: d.value)
@pytest.mark.parametrize("name", PREPACKED_CONVS + UNPACKED_CONVS)
def test_constant_conv_kernel_gives_the_parameter_kernels_bits(name, dt, cpu) -> None:  # noqa: ANN001
    param, const, x, w = _conv_pair(CONV[name], dt)
    want = _execute(_compile(param, cpu), [x, w], cpu)
    exe = _compile(const, cpu)
    got = _execute(exe, [x], cpu)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name
    assert bool(_prepacked(exe)) == (name in PREPACKED_CONVS), (name, _prepacked(exe))
    unpacked = _compile(const, cpu, cpu_prepack="false")
    assert not _prepacked(unpacked) and _execute(unpacked, [x], cpu).tobytes() == want.tobytes()


MM = dict(lhs_batch=(), rhs_batch=(), lhs_contracting=(1,), rhs_contracting=(0,))
BMM = dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))
# name: lhs shape, rhs shape, dims, prepacked
DOTS = [
    ("one-k-block", (37, 45), (45, 70), MM, True),
    ("two-k-blocks-ragged-n", (100, 600), (600, 130), MM, True),
    ("wide-columns-outer", (40, 64), (64, 700), MM, True),
    ("transposed-b", (50, 96), (83, 96), dict(MM, rhs_contracting=(1,)), True),
    ("batched", (3, 37, 45), (3, 45, 70), BMM, True),
    ("free-dims-table", (30, 20), (4, 20, 9), dict(MM, rhs_contracting=(1,)), True),
    ("few-rows-read-in-place", (5, 64), (64, 80), MM, False),
]


def _dot_pair(dt: str, ls: tuple, rs: tuple, dims: dict) -> tuple[Module, Module, np.ndarray, np.ndarray]:
    npdt = np.dtype({"f32": np.float32, "f64": np.float64, "f16": np.float16, "s32": np.int32}[dt])
    if npdt.kind == "i":
        x, w = (RNG.integers(-9, 10, size=s).astype(npdt) for s in (ls, rs))
    else:
        x, w = (RNG.standard_normal(s).astype(npdt) for s in (ls, rs))
    mods = []
    for const in (False, True):
        b = Builder(f"dot_{const}")
        xp = b.parameter(TensorType(to_dtype(npdt), ls))
        wp = b.constant(w) if const else b.parameter(TensorType(to_dtype(npdt), rs))
        mods.append(b.build(b.dot_general(xp, wp, **dims)))
    return mods[0], mods[1], x, w


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "s32"])
@pytest.mark.parametrize("name,ls,rs,dims,packed", DOTS, ids=[d[0] for d in DOTS])
def test_constant_dot_weight_gives_the_parameter_weights_bits(name, ls, rs, dims, packed, dt, cpu) -> None:  # noqa: ANN001
    param, const, x, w = _dot_pair(dt, ls, rs, dims)
    want = _execute(_compile(param, cpu), [x, w], cpu)
    exe = _compile(const, cpu)
    got = _execute(exe, [x], cpu)
    assert got.tobytes() == want.tobytes(), name
    packed = packed or dt == "f16"  # float16 packs (widens) every B, few rows or not
    assert bool(_prepacked(exe)) == packed, (name, _prepacked(exe))
    if packed:  # the weight is held once, packed: the kernel was its only reader
        assert len(exe.plan.constants) == 1
        (arr,) = exe.plan.constants.values()
        assert arr.ctypes.data % 64 == 0 and arr.ndim == 4


def test_a_weight_read_elsewhere_too_is_kept(cpu, monkeypatch) -> None:  # noqa: ANN001
    """A constant that another step reads as it is (a tied embedding's gather, here a
    product) stays beside its packed copy, up to PREPACK_KEPT_BYTES of copies; past that
    its kernel packs it per call (memory does not double for a large shared weight)."""
    w = RNG.standard_normal((64, 96)).astype(np.float32)
    x = RNG.standard_normal((40, 64)).astype(np.float32)
    b = Builder("tied")
    xp, wc = b.parameter(TensorType(DType.FLOAT32, x.shape)), b.constant(w)
    y = b.dot_general(xp, wc, **MM)
    m = b.build(y, b.mul(wc, wc))
    exe = _compile(m, cpu)
    assert _prepacked(exe)
    shapes = sorted(a.shape for a in exe.plan.constants.values())
    assert (64, 96) in shapes and any(len(s) == 4 for s in shapes), shapes
    be = _backend()
    got = exe.execute([be.to_device(x, cpu)])
    ref = _execute(_compile(m, cpu, cpu_prepack="false"), [x], cpu)
    assert be.to_host(got[0]).tobytes() == ref.tobytes()
    assert be.to_host(got[1]).tobytes() == (w * w).tobytes()
    monkeypatch.setattr(plan, "PREPACK_KEPT_BYTES", w.nbytes // 2)
    be._cache.clear()  # (the executable above is cached by module and flags)
    exe = _compile(m, cpu)
    assert not _prepacked(exe) and [a.shape for a in exe.plan.constants.values()] == [(64, 96)]
    assert not any(getattr(k, "prepacked_b", False) for k in exe.plan.kernels.values())
    got = exe.execute([be.to_device(x, cpu)])
    assert be.to_host(got[0]).tobytes() == ref.tobytes() and be.to_host(got[1]).tobytes() == (w * w).tobytes()


def _ranges(n: int, unit_count: int) -> list[tuple[int, int]]:
    cuts = sorted({0, n, *(min(n, k * unit_count) for k in (1, 2))})
    return list(zip(cuts, cuts[1:]))


@pytest.mark.parametrize("case", ["conv:grouped-nhwc", "conv:several-k-blocks-nhwc", "dot:two-k-blocks-ragged-n",
                                  "dot:wide-columns-outer", "dot:batched"])
def test_prepacked_kernel_over_thread_ranges(case, cpu) -> None:  # noqa: ANN001
    """The kernel called over disjoint pieces of its outer and inner ranges, as the thread
    pool splits it (a prepacked B's columns count NR-wide panels), gives the whole call's
    result, which is the parameter weight's."""
    from axle_cpu.executable import KFUNC, compile_kernels

    kind, name = case.split(":")
    if kind == "conv":
        param, m, x, w = _conv_pair(CONV[name], DType.FLOAT32)
    else:
        _, ls, rs, dims, _ = next(d for d in DOTS if d[0] == name)
        param, m, x, w = _dot_pair("f32", ls, rs, dims)
    p = plan.build_plan(m, arena=False)
    (step,) = [s for s in p.steps if isinstance(s, plan.KernelStep)]
    spec = step.spec
    assert isinstance(spec, gemm.GemmSpec) and spec.prepacked_b and spec.column_unit > 1
    jit = compile_kernels([spec], f"prepack_{name.replace('-', '_')}")
    fn = KFUNC(jit.address(spec.name))
    ins = [x if s < p.n_params else p.constants[s] for s in step.ins]
    outer, inner = spec.loop_sizes

    def call(ranges: list[tuple[int, int, int, int]]) -> np.ndarray:
        out = np.zeros(m.entry.root.shape, np.float32)
        ptrs = (ctypes.c_void_p * 3)(*(a.ctypes.data for a in (*ins, out)))
        for o0, o1, i0, i1 in ranges:
            fn(ptrs, o0, o1, i0, i1, 0, 2**63 - 1)
        return out

    whole = call([(0, outer, 0, inner)])
    by_outer = call([(a, b, 0, inner) for a, b in _ranges(outer, max(1, outer // 3))])
    by_inner = call([(0, outer, a, b) for a, b in _ranges(inner, max(1, inner // 3))])
    assert whole.tobytes() == by_outer.tobytes() == by_inner.tobytes(), case
    assert whole.tobytes() == _execute(_compile(param, cpu), [x, w], cpu).tobytes(), case


W = RNG.standard_normal((3, 3, 32, 48)).astype(np.float32)  # HWIO, closed over: a constant
XC = RNG.standard_normal((1, 10, 9, 32)).astype(np.float32)


def _conv_program(x):  # noqa: ANN001, ANN202
    y = axle.lax.conv_general_dilated(x, W, (1, 1), [(1, 1), (1, 1)], dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return anp.maximum(y, 0.0)


def test_compile_cache_round_trip_of_a_prepacked_executable(compile_cache) -> None:  # noqa: ANN001
    """The packed constant is stored with the plan and read back (realigned for the
    kernel's aligned loads): a new process's executable computes the same bits."""
    from test_cpu_plan_cache import _new_process

    def compiled():  # noqa: ANN202
        return compile_module(axle.jit(_conv_program, device="cpu:0").lower(XC).module, axle.device("cpu:0"))

    _new_process()
    exe = compiled()
    assert _prepacked(exe)
    want = _run(exe)
    _new_process()
    axle.reset_stats()
    exe2 = compiled()
    assert axle.stats()["disk_cache_corrupt"] == 0
    assert all(not isinstance(s, plan.KernelStep) or not isinstance(s.spec, gemm.GemmSpec) for s in exe2.plan.steps)
    assert [s.label for s in exe2.plan.steps] == [s.label for s in exe.plan.steps]
    assert all(a.ctypes.data % 64 == 0 for a in exe2.plan.constants.values())
    assert _run(exe2) == want


def _run(exe) -> bytes:  # noqa: ANN001
    dev = axle.device("cpu:0")
    be = axle.REGISTRY.backend_for(dev)
    return be.to_host(exe.execute([be.to_device(XC, dev)])[0]).tobytes()
