"""The GEMM kernel (axle_cpu/gemm.py) against the interpreter: every dtype, odd sizes that
do not divide the tiles, size-0/1 dims, batch dims, transposed operands, multi-dim
groups, the matrix-vector paths, thread splits over arbitrary row/column ranges, the
tile shapes of narrower vector units, and the vector FMAs in its code."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

import axle
from axle.backend import CompileOptions
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Module, TensorType
from axle.testing.cases import assert_close, random_input, tolerance

RNG = np.random.default_rng(7)
DTYPES = ["f32", "f64", "f16", "s32", "s64"]
MM = dict(lhs_contracting=(1,), rhs_contracting=(0,))


def _backend():  # noqa: ANN202
    return axle.REGISTRY.backend("cpu")


def dot_module(dt: str, ls: tuple[int, ...], rs: tuple[int, ...], **attrs: tuple[int, ...]) -> Module:
    b = Builder("gemm")
    x = b.parameter(f"{dt}[{','.join(map(str, ls))}]")
    y = b.parameter(f"{dt}[{','.join(map(str, rs))}]")
    return b.build(b.dot_general(x, y, **attrs))


def inputs(m: Module, special: bool = False) -> list[np.ndarray]:
    out = []
    for p in m.entry.parameters:
        t = p.type
        small = t.dtype in (DType.FLOAT16, DType.INT32, DType.INT64)
        out.append(random_input(RNG, t, special=special and t.dtype.is_float, small=small))
    return out


def check_dot(m: Module, xs: list[np.ndarray], got: np.ndarray) -> None:
    """Integers exact (wrapping); floats within the forward error bound K*eps*|A|.|B| of
    any summation order, as the conformance kit checks dots."""
    want = evaluate(m, *xs)[0]
    root = m.entry.root
    if not root.dtype.is_float:
        assert_close(got, want, 0, 0, m.name)
        return
    k = math.prod(root.operands[0].shape[d] for d in root.attr["lhs_contracting"])
    mag = evaluate(m, *[np.abs(x) for x in xs])[0].astype(np.float64)
    bound = 2.0 * max(k, 1) * float(np.finfo(root.dtype.np).eps) * mag
    rtol, atol = tolerance(root.dtype, None, max(k, 1))
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert g.shape == w.shape and got.dtype == want.dtype
    same_nan = np.isnan(g) == np.isnan(w)
    assert same_nan.all(), f"{m.name}: NaN positions differ"
    fin = ~np.isnan(w)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - w)
    inf = np.isinf(w)
    assert (g[inf] == w[inf]).all(), f"{m.name}: infinities differ"
    ok = (err <= rtol * np.abs(w) + atol + bound) | inf
    assert ok[fin].all(), f"{m.name}: max error {err[fin & ~inf].max()} exceeds the dot bound"


def run(m: Module, xs: list[np.ndarray], cpu, **flags: str):  # noqa: ANN001, ANN201
    be = _backend()
    exe = be.compile(m, cpu, CompileOptions(optimized=False, flags=flags))
    return be.to_host(exe.execute([be.to_device(x, cpu) for x in xs])[0]), exe


SHAPES = [
    # (name, lhs, rhs, attrs)
    ("tiny", (1, 1), (1, 1), MM),
    ("odd", (7, 17), (17, 33), MM),
    ("edges", (33, 129), (129, 17), MM),
    ("wide", (17, 300), (300, 129), MM),
    ("k1", (129, 1), (1, 65), MM),
    ("lhs-t", (129, 33), (129, 70), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    ("rhs-t", (33, 129), (70, 129), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
    ("both-t", (129, 33), (70, 129), dict(lhs_contracting=(0,), rhs_contracting=(1,))),
    ("batch", (3, 17, 33), (3, 33, 7), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))),
    ("batch-middle", (17, 3, 33), (33, 3, 9),
     dict(lhs_batch=(1,), rhs_batch=(1,), lhs_contracting=(2,), rhs_contracting=(0,))),
    ("batch-last", (33, 17, 2), (2, 9, 33),
     dict(lhs_batch=(2,), rhs_batch=(0,), lhs_contracting=(0,), rhs_contracting=(2,))),
    ("two-contracting", (5, 7, 3), (3, 7, 9), dict(lhs_contracting=(1, 2), rhs_contracting=(1, 0))),
    ("split-free", (5, 33, 4), (33, 6, 7), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    ("matvec", (129, 67), (67,), MM),
    ("matvec-t", (67, 129), (67,), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    ("vecmat", (67,), (67, 129), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    ("vecmat-t", (67,), (129, 67), dict(lhs_contracting=(0,), rhs_contracting=(1,))),
    # wide enough (N >= COLUMNS_OUTER_MIN) that threads split the columns, computed swapped
    # as row dots: the column range is the spec's N, not the swapped product's
    ("vecmat-t-wide", (1, 45), (300, 45), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
    ("vecmat-t-wide-1d", (45,), (257, 45), dict(lhs_contracting=(0,), rhs_contracting=(1,))),
    ("vecvec", (129,), (129,), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    ("outer", (7,), (33,), dict(lhs_contracting=(), rhs_contracting=())),
    ("batched-matvec", (3, 17, 33), (3, 33),
     dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))),
    ("empty-k", (7, 0), (0, 9), MM),
    ("empty-m", (0, 7), (7, 9), MM),
    ("empty-batch", (0, 4, 5), (0, 5, 3), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))),
]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name,ls,rs,attrs", SHAPES, ids=[s[0] for s in SHAPES])
def test_gemm_matches_interpreter(name, ls, rs, attrs, dt, cpu) -> None:  # noqa: ANN001
    m = dot_module(dt, ls, rs, **attrs)
    xs = inputs(m)
    got, exe = run(m, xs, cpu)
    kinds = [launch.step.spec.kind for launch, _ in exe._steps if launch is not None]
    assert kinds == ["gemm"], exe.report()
    check_dot(m, xs, got)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_gemm_nan_inf_propagate(dt, cpu) -> None:  # noqa: ANN001
    m = dot_module(dt, (40, 70), (70, 50), **MM)
    xs = inputs(m, special=True)  # NaN, +-inf, +-0 at the start of each operand
    got, _ = run(m, xs, cpu)
    check_dot(m, xs, got)


def test_gemm_large_multi_block(cpu) -> None:  # noqa: ANN001
    """More than one K, M and N cache block (KC=512, MC=48, NC=512 for float32 on AVX-512)."""
    m = dot_module("f32", (300, 700), (700, 1100), **MM)
    xs = inputs(m)
    got, _ = run(m, xs, cpu)
    check_dot(m, xs, got)


def test_gemm_f16_accumulates_in_f32(cpu) -> None:  # noqa: ANN001
    """K spanning several K blocks: partial sums must not be rounded to half in between."""
    m = dot_module("f16", (9, 1000), (1000, 20), **MM)
    xs = [np.full((9, 1000), 0.1, np.float16), np.full((1000, 20), 0.1, np.float16)]
    got, _ = run(m, xs, cpu)
    want = evaluate(m, *xs)[0]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3)


def _kernel(m: Module, vector_bits: int = 0):  # noqa: ANN202
    """The gemm kernel of a dot module compiled alone (tiles for ``vector_bits``)."""
    from axle_cpu.executable import KFUNC, compile_kernels
    from axle_cpu.plan import build_plan

    plan = build_plan(m, arena=False, vector_bits=vector_bits)
    (spec,) = plan.kernels.values()
    assert spec.kind == "gemm"
    jit = compile_kernels([spec], f"gemm{vector_bits}")
    return jit, KFUNC(jit.address(spec.name)), spec.loop_sizes


def _call(fn, xs: list[np.ndarray], out: np.ndarray, ranges: list[tuple[int, int, int, int]]) -> None:  # noqa: ANN001
    ptrs = (ctypes.c_void_p * 3)(*(a.ctypes.data for a in (*xs, out)))
    for o0, o1, i0, i1 in ranges:
        fn(ptrs, o0, o1, i0, i1, 0, 2**63 - 1)


def _check_whole(m: Module, vector_bits: int = 0) -> None:
    """The dot module's gemm kernel, run once over its whole range, against the interpreter."""
    xs = inputs(m)
    _jit, fn, (outer, inner) = _kernel(m, vector_bits)
    out = np.zeros(m.entry.root.shape, xs[0].dtype)
    _call(fn, xs, out, [(0, outer, 0, inner)])
    check_dot(m, xs, out)


@pytest.mark.parametrize("dt", ["f32", "f16", "s64"])
@pytest.mark.parametrize("name,ls,rs,attrs", [
    ("batch", (3, 37, 45), (3, 45, 70), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))),
    ("batch-wide", (2, 37, 45), (2, 45, 300), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,),
                                                   rhs_contracting=(1,))),
    ("matvec", (3, 37, 45), (3, 45), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))),
    ("matvec-t", (3, 45, 37), (45, 3), dict(lhs_batch=(0,), rhs_batch=(1,), lhs_contracting=(1,), rhs_contracting=(0,))),
    ("vecmat-t-wide", (1, 45), (300, 45), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
], ids=["batch", "batch-wide", "matvec", "matvec-t", "vecmat-t-wide"])
def test_gemm_disjoint_ranges(name, ls, rs, attrs, dt) -> None:  # noqa: ANN001
    """Thread splits: disjoint pieces of the outer range (rows of the [batch*M, N] output,
    crossing batch boundaries; or columns for a wide output) and of the inner range give
    exactly the single-call result."""
    m = dot_module(dt, ls, rs, **attrs)
    xs = inputs(m)
    _jit, fn, (outer, inner) = _kernel(m)
    shape = m.entry.root.shape
    whole = np.zeros(shape, xs[0].dtype)
    _call(fn, xs, whole, [(0, outer, 0, inner)])
    check_dot(m, xs, whole)
    cuts = sorted({0, min(5, outer), outer // 3, outer // 3 + 1, 74 % outer, max(outer - 7, 0), outer})
    pieces = np.full(shape, 99, xs[0].dtype)
    _call(fn, xs, pieces, [(a, b, 0, inner) for a, b in zip(cuts, cuts[1:]) if a < b])
    np.testing.assert_array_equal(pieces, whole)
    if inner > 1:
        cuts = sorted({0, min(13, inner), inner // 2, inner})
        pieces = np.full(shape, 99, xs[0].dtype)
        _call(fn, xs, pieces, [(0, outer, a, b) for a, b in zip(cuts, cuts[1:]) if a < b])
        np.testing.assert_array_equal(pieces, whole)


def test_gemm_threads_same_numbers(cpu, monkeypatch) -> None:  # noqa: ANN001
    """A dot split across 2 threads (forced) gives the same bits as 1 thread."""
    from axle_cpu import threads

    m = dot_module("f32", (300, 257), (257, 290), **MM)
    xs = inputs(m)
    be = _backend()
    results = {}
    for nt in ("1", "2"):
        monkeypatch.setenv("AXLE_CPU_THREADS", nt)
        be._cache.clear()
        exe = be.compile(m, cpu, CompileOptions(optimized=False))
        for launch, _ in exe._steps:
            if launch is not None and nt == "2":
                launch.parallel = True
        results[nt] = [be.to_host(exe.execute([be.to_device(x, cpu) for x in xs])[0]) for _ in range(2)]
        assert threads.pool().n == int(nt)
    for a, b in zip(results["1"], results["2"]):
        np.testing.assert_array_equal(a, b)
    check_dot(m, xs, results["2"][0])


@pytest.mark.parametrize("vector_bits", [256, 128])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "s32"])
def test_gemm_narrow_vector_tiles(vector_bits, dt) -> None:  # noqa: ANN001
    """The tile shapes chosen for AVX2 (16 x 256-bit registers) and generic x86-64
    (SSE, 128-bit) compute the same products (run here on the host)."""
    from axle_cpu.gemm import Layout, tiles

    for ls, rs in (((37, 129), (129, 70)), ((37, 129), (129, 3)), ((1, 40), (40, 33))):
        m = dot_module(dt, ls, rs, **MM)
        t = tiles(m.entry.root.dtype, vector_bits, Layout.of(m.entry.root))
        assert t.nr % t.v == 0 and t.mr * (t.nr // t.v) <= 12, t
        _check_whole(m, vector_bits)


@pytest.mark.parametrize("vector_bits", [0, 256, 128])
@pytest.mark.parametrize("dt", ["f32", "f16", "f64", "s32"])
def test_gemm_transposed_b_packs_by_columns(vector_bits, dt) -> None:  # noqa: ANN001
    """A B stored with K contiguous (``dz @ w.T``, a backward pass's data gradient) is
    packed one column's K run at a time (a K row across NR columns ``ldb`` apart thrashes
    one L1 set when ldb is a power of two), on the host's width and AVX2's and SSE's:
    odd sizes, several K blocks and K chunks, a ragged last column panel; V x V blocks
    through an in-register transpose, the ragged columns and K rows element by element."""
    from axle_cpu.executable import llvm_module
    from axle_cpu.gemm import PACK_KB
    from axle_cpu.plan import build_plan

    for ls, rs in (((37, 700), (70, 700)), ((9, 2 * PACK_KB + 3), (129, 2 * PACK_KB + 3)), ((64, 1024), (33, 1024))):
        m = dot_module(dt, ls, rs, lhs_contracting=(1,), rhs_contracting=(1,))
        _check_whole(m, vector_bits)
    (spec,) = build_plan(m, arena=False, vector_bits=vector_bits).kernels.values()
    ir_text = str(llvm_module([spec], "t"))
    assert '"pbck.body"' in ir_text  # the column-wise packing loop
    assert ('"pbtk.body"' in ir_text) == (dt != "f16")  # its transposed V x V blocks


def test_gemm_stack_frame_is_bounded() -> None:
    """The packed buffers fit STACK_BUDGET whatever the dtype and vector width."""
    from axle_cpu.gemm import STACK_BUDGET, Layout, compute_bits, tiles

    m = dot_module("f32", (4096, 4096), (4096, 4096), **MM)
    lay = Layout.of(m.entry.root)
    for dt in (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32, DType.INT64):
        for bits in (512, 256, 128):
            t = tiles(dt, bits, lay)
            size = compute_bits(dt) // 8
            frame = (t.mc * t.kc + t.kc * t.nc) * size + (t.mc * t.nc * 4 if dt is DType.FLOAT16 else 0)
            assert frame <= STACK_BUDGET, (dt, bits, t)
            assert t.kc * t.nr * size <= 128 * 1024


def test_gemm_micro_kernel_uses_vector_fma(cpu) -> None:  # noqa: ANN001
    from axle_cpu.target import host

    m = dot_module("f32", (200, 300), (300, 260), **MM)
    _, exe = run(m, inputs(m), cpu)
    ir_text = exe.optimized_ir()
    bits = host().vector_bits
    lanes = bits // 32
    if bits >= 256:
        assert f"<{lanes} x float>" in ir_text
        assert "+fma" not in host().features or f"llvm.fma.v{lanes}f32" in ir_text or \
            f"llvm.fmuladd.v{lanes}f32" in ir_text
    asm = exe.assembly()
    if "+fma" in host().features:
        reg = {512: "zmm", 256: "ymm"}.get(bits, "xmm")
        fmas = [ln for ln in asm.splitlines() if "vfmadd" in ln and "ps" in ln and reg in ln]
        assert len(fmas) >= 12, "the micro-kernel has no vector FMAs"


def test_blas_flag_uses_numpy_matmul(cpu) -> None:  # noqa: ANN001
    """--cpu_blas=true: float dots become NumPy matmul host steps (transposed and batched
    operands through views); integer dots stay GEMM kernels."""
    for dt, ls, rs, attrs in (("f32", (3, 40, 17), (17, 3, 9), dict(lhs_batch=(0,), rhs_batch=(1,),
                                                                      lhs_contracting=(2,), rhs_contracting=(0,))),
                              ("f64", (40, 17), (9, 40), dict(lhs_contracting=(0,), rhs_contracting=(1,))),
                              ("s32", (7, 5), (5, 3), MM)):
        m = dot_module(dt, ls, rs, **attrs)
        xs = inputs(m)
        got, exe = run(m, xs, cpu, cpu_blas="true")
        assert exe.report()["host_steps"] == (1 if dt != "s32" else 0)
        check_dot(m, xs, got)


@pytest.mark.parametrize("target", ["host", "generic"])
def test_gemm_aot(target: str, tmp_path) -> None:  # noqa: ANN001
    """AOT: dots (transposed, matrix-vector, batched integer) in an object file for this
    host or for generic x86-64 (SSE tiles), run from C with no Python."""
    from test_cpu_aot import build_and_run

    from axle_cpu.aot import compile_aot

    specs = [("f32", (129, 33), (70, 129), dict(lhs_contracting=(0,), rhs_contracting=(1,))),
             ("f64", (67, 45), (45,), MM),
             ("s32", (3, 17, 33), (33, 3, 9), dict(lhs_batch=(0,), rhs_batch=(1,), lhs_contracting=(2,),
                                                     rhs_contracting=(0,)))]
    b = Builder("dots")
    params = []
    for dt, ls, rs, _ in specs:
        params += [b.parameter(f"{dt}[{','.join(map(str, ls))}]"), b.parameter(f"{dt}[{','.join(map(str, rs))}]")]
    m = b.build(*[b.dot_general(params[2 * i], params[2 * i + 1], **a) for i, (*_, a) in enumerate(specs)])
    types = [p.type for p in m.entry.parameters]
    res = compile_aot(m, types, str(tmp_path), name="dots", cpu="generic" if target == "generic" else None)
    xs = [random_input(RNG, t, special=False, small=not t.dtype.is_float) for t in types]
    got = build_and_run(res, xs, tmp_path)
    for i, (dt, ls, rs, a) in enumerate(specs):
        check_dot(dot_module(dt, ls, rs, **a), xs[2 * i:2 * i + 2], got[i])


# ------------------------------------------------------------ the shape classes' own paths

#: (name, lhs, rhs, attrs, the loop label its kernel must hold): vector-matrix products
#: streaming B's rows (``vmj``: a K not a multiple of VECMAT_ROWS, N over several C
#: blocks with a ragged tail, a strided-K matrix-vector product swapped into one, batches)
#: and a vector-matrix product whose B has K contiguous, swapped into row dots (``rd``)
VECTOR_PATHS = [
    ("vecmat-blocks", (7,), (7, 4099), dict(lhs_contracting=(0,), rhs_contracting=(0,)), "vmj"),
    ("vecmat-row", (1, 67), (67, 129), MM, "vmj"),
    ("matvec-t", (67, 129), (67,), dict(lhs_contracting=(0,), rhs_contracting=(0,)), "vmj"),
    ("vecmat-batch", (3, 45), (3, 45, 70), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(1,),
                                                rhs_contracting=(1,)), "vmj"),
    ("vecmat-n1", (1, 33), (33, 1), MM, "rd"),
    ("vecmat-k1", (1, 1), (1, 33), MM, "vmj"),
    ("vecmat-t", (67,), (129, 67), dict(lhs_contracting=(0,), rhs_contracting=(1,)), "rd"),
    ("vecmat-k0", (0,), (0, 33), dict(lhs_contracting=(0,), rhs_contracting=(0,)), "zi"),
]


@pytest.mark.parametrize("vector_bits", [0, 256])
@pytest.mark.parametrize("dt", ["f32", "f64", "s32"])
def test_gemm_vector_matrix_paths(vector_bits, dt) -> None:  # noqa: ANN001
    """The vector-matrix paths on the host's width (AVX-512 here) and AVX2's, whole and
    split into column pieces as threads split them."""
    from axle_cpu.executable import llvm_module
    from axle_cpu.plan import build_plan

    for name, ls, rs, attrs, label in VECTOR_PATHS:
        m = dot_module(dt, ls, rs, **attrs)
        xs = inputs(m)
        (spec,) = build_plan(m, arena=False, vector_bits=vector_bits).kernels.values()
        assert f'"{label}.body"' in str(llvm_module([spec], "t")), name
        _jit, fn, (outer, inner) = _kernel(m, vector_bits)
        out = np.full(m.entry.root.shape, 99, xs[0].dtype)
        _call(fn, xs, out, [(0, outer, 0, inner)])
        check_dot(m, xs, out)
        cuts = sorted({0, min(5, outer), outer // 2, outer})
        pieces = np.full(m.entry.root.shape, 99, xs[0].dtype)
        _call(fn, xs, pieces, [(a, b, 0, inner) for a, b in zip(cuts, cuts[1:]) if a < b])
        np.testing.assert_array_equal(pieces, out, err_msg=name)


@pytest.mark.parametrize("vector_bits", [0, 256])
@pytest.mark.parametrize("dt", ["f32", "f64", "s32"])
@pytest.mark.parametrize("lhs,label", [((33, 4100), "pc"), ((4100,), "vmk")], ids=["matrix", "vector"])
def test_gemm_split_k_slices_sum_to_the_product(lhs, label, vector_bits, dt) -> None:  # noqa: ANN001
    """A long K into a small output is split by K (GemmSpec.split_reduce_size), for two
    matrices or a vector-matrix product (its B streamed): each call given a slice [r0, r1)
    of K (the pool's reduction chunks, at odd cuts inside and across K blocks) writes that
    slice's partial product, and the partials sum to the product."""
    from axle_cpu.emitter import INT64_MAX
    from axle_cpu.executable import llvm_module
    from axle_cpu.plan import build_plan

    m = dot_module(dt, lhs, (4100, 20), lhs_contracting=(len(lhs) - 1,), rhs_contracting=(0,))
    xs = inputs(m)
    (spec,) = build_plan(m, arena=False, vector_bits=vector_bits).kernels.values()
    assert spec.split_reduce_size == 4100 and spec.reduce_split_first
    assert f'"{label}.body"' in str(llvm_module([spec], "t"))
    _jit, fn, (outer, inner) = _kernel(m, vector_bits)
    ptrs = lambda out: (ctypes.c_void_p * 3)(*(a.ctypes.data for a in (*xs, out)))  # noqa: E731
    whole = np.full(m.entry.root.shape, 99, xs[0].dtype)
    fn(ptrs(whole), 0, outer, 0, inner, 0, INT64_MAX)
    check_dot(m, xs, whole)
    cuts = [0, 1, 700, 2049, 4099, 4100]
    parts = [np.full(m.entry.root.shape, 99, xs[0].dtype) for _ in cuts[1:]]
    for (a, b), part in zip(zip(cuts, cuts[1:]), parts):
        fn(ptrs(part), 0, outer, 0, inner, a, b)
    check_dot(m, xs, np.sum(parts, axis=0, dtype=xs[0].dtype))


def split_k_across_threads(m: Module, xs: list[np.ndarray], cpu, monkeypatch, check):  # noqa: ANN001, ANN201
    """Runs ``m``'s one kernel split by K on 2 threads (forced), twice (the partials'
    buffers are reused), ``check(m, xs, result)`` each time; returns its launch."""
    be = _backend()
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    be._cache.clear()
    exe = be.compile(m, cpu, CompileOptions(optimized=False))
    (launch,) = [launch for launch, _ in exe._steps if launch is not None]
    launch.parallel = True
    assert launch._split_mode(2) == "reduction"
    for _ in range(2):
        check(m, xs, be.to_host(exe.execute([be.to_device(x, cpu) for x in xs])[0]))
    be._cache.clear()
    return launch


def test_gemm_split_k_across_threads(cpu, monkeypatch) -> None:  # noqa: ANN001
    """The executable splits that dot by K on 2 threads and sums the partials (inside a
    loop, where nothing sums partials, by rows)."""
    m = dot_module("f32", (33, 4100), (4100, 20), **MM)
    launch = split_k_across_threads(m, inputs(m), cpu, monkeypatch, check_dot)
    assert launch.loop_split() == "rows"  # in a loop the native runner splits its rows instead


@pytest.mark.parametrize("l2", [64 << 10, 64 << 20], ids=["small-l2", "large-l2"])
@pytest.mark.parametrize("vector_bits", [0, 256])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "s32"])
def test_gemm_row_tiles_outer_and_k_unrolled(l2, vector_bits, dt, monkeypatch) -> None:  # noqa: ANN001
    """A plain dot's macro-kernel takes each A row tile against every B micro-panel of
    the block (rows outer) when the packed B block fits its share of the L2 (the host's
    L2 replaced by a small and a large one here), else, and for a B read in place, goes
    panel by panel (columns outer); the micro-kernel's K loop over a packed B is unrolled
    by K_UNROLL with a loop over the rest (one k per iteration over a B read in place).
    Odd K over several K blocks (an odd last block), ragged row and column tiles, several
    M and N blocks, A in place (plain and transposed) and packed (split free dims, f16);
    on the host's width and AVX2's."""
    from axle_cpu import gemm
    from axle_cpu.executable import llvm_module
    from axle_cpu.plan import build_plan
    from axle_cpu.target import host

    monkeypatch.setattr(gemm, "l2_bytes", lambda: l2)
    assert gemm.K_UNROLL > 1
    for ls, rs, attrs in (((101, 1031), (1031, 600), MM),
                          ((1031, 53), (1031, 130), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
                          ((5, 61, 4), (61, 6, 70), MM),
                          ((13, 333), (333, 700), MM)):
        m = dot_module(dt, ls, rs, **attrs)
        _check_whole(m, vector_bits)
        (spec,) = build_plan(m, arena=False, vector_bits=vector_bits).kernels.values()
        assert isinstance(spec, gemm.GemmSpec)
        text = str(llvm_module([spec], "t"))
        kernel = text[text.index(f'define void @"{spec.name}"'):]
        direct_b = ls == (13, 333) and (vector_bits or host().vector_bits) >= 512 and dt != "f16"
        # the unrolled K loop, and the rest one k at a time (B read in place: one k a step)
        assert ('"ku.body"' in text) != direct_b
        assert '"k.body"' in text
        t = gemm.tiles(m.entry.root.dtype, vector_bits or host().vector_bits, gemm.Layout.of(m.entry.root))
        fits = t.kc * t.nc * gemm.compute_bits(m.entry.root.dtype) // 8 <= gemm.ROWS_OUTER_L2_SHARE * l2
        assert fits == (l2 > 1 << 20)  # a small L2 holds none of these B blocks, a large one all
        rows_first = kernel.index('"ir.cond') < kernel.index('"jr.cond')
        assert rows_first == (fits and not direct_b), (ls, dt, vector_bits, t)


def test_gemm_direct_a_tile_rows_fit_the_l1_ways() -> None:
    """A narrow N (the logits' N=10) leaves registers for a tall tile, but an A read in
    place by rows keeps one L1 line per tile row, all in one set when the row stride is a
    power of two: such a tile has at most DIRECT_A_ROWS rows on every vector width (a
    transposed A, read along its rows' contiguous dim, is not capped)."""
    from axle_cpu.gemm import DIRECT_A_ROWS, Layout, tiles

    for bits in (512, 256):
        for dt in (DType.FLOAT32, DType.FLOAT64):
            t = tiles(dt, bits, Layout.of(dot_module("f32", (128, 1024), (1024, 10), **MM).entry.root))
            assert t.mr <= DIRECT_A_ROWS, (bits, dt, t)
    lhs_t = dot_module("f32", (1024, 128), (1024, 10), lhs_contracting=(0,), rhs_contracting=(0,))
    assert tiles(DType.FLOAT32, 512, Layout.of(lhs_t.entry.root)).mr > DIRECT_A_ROWS


def test_gemm_small_m_tile_computes_the_fewest_rows() -> None:
    """A plain dot with few rows takes the tile that computes the fewest rows, the widest
    of those: M = 16 in 2 tiles of 8 rows x 48 columns on AVX-512 (not 3 of 6 x 64, 18
    rows) and 4 of 4 x 24 on AVX2 (not 3 of 6 x 16); M = 20 keeps the default 6-row
    tiles (24 rows either way), and a narrow N never gets a tile wider than itself."""
    from axle_cpu.gemm import Layout, tiles

    def tile(bits: int, dt: DType, ls: tuple[int, ...], rs: tuple[int, ...]) -> tuple[int, int]:
        t = tiles(dt, bits, Layout.of(dot_module("f32", ls, rs, **MM).entry.root))
        return t.mr, t.nr

    assert tile(512, DType.FLOAT32, (16, 1024), (1024, 1024)) == (8, 48)
    assert tile(256, DType.FLOAT32, (16, 1024), (1024, 1024)) == (4, 24)
    assert tile(512, DType.FLOAT64, (16, 1024), (1024, 1024)) == (8, 24)
    assert tile(512, DType.FLOAT32, (20, 1024), (1024, 1024)) == (5, 64)  # 24 rows as 4 x 6, balanced
    assert tile(512, DType.FLOAT32, (16, 1024), (1024, 10)) == (8, 16)  # N = 10: one vector
    assert tile(512, DType.FLOAT32, (128, 1024), (1024, 1024)) == (6, 64)  # not few rows: unchanged


SMALL_M = [
    # (name, lhs, rhs, attrs): C of few rows, B rows contiguous
    ("m16-ragged-n", (16, 37), (37, 100), MM),  # 8-row tiles; N not a multiple of NR
    ("m13-k-blocks", (13, 600), (600, 70), MM),  # two K blocks: B prefetched past the first
    ("m9-k1", (9, 1), (1, 33), MM),
    ("m16-batch", (3, 16, 33), (3, 33, 70), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,),
                                                 rhs_contracting=(1,))),
    ("m24-packed", (24, 45), (45, 75), MM),  # four 6-row tiles: B packed in chunks of K rows
    # B's K offsets a table (a batch dim between its contracting dims): packed through it
    ("k-table", (2, 7, 4, 5), (4, 2, 5, 20), dict(lhs_batch=(0,), rhs_batch=(1,), lhs_contracting=(2, 3),
                                                  rhs_contracting=(0, 2))),
]


@pytest.mark.parametrize("vector_bits", [0, 256])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16"])
def test_gemm_small_m_paths(vector_bits, dt) -> None:  # noqa: ANN001
    """The paths of a C with few rows, on the host's width and AVX2's: on 512-bit vectors
    B read in place by up to two row tiles, its rows prefetched; elsewhere (and past two
    tiles, or through an offset table) B packed in chunks of K rows (``_pack_b_by_rows``).
    Values against the interpreter, whole and split into row and column pieces as
    threads split them."""
    _check_small_m(dt, vector_bits)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_gemm_small_m_paths_on_an_avx2_target(dt, monkeypatch) -> None:  # noqa: ANN001
    """The same compiled for an AVX2 host (the target's AVX-512 features off: AVX2's
    masked loads and 16 registers for the 4 x 24 tiles), run on this one (a host without
    AVX2 runs its own target again)."""
    from axle_cpu import target

    h = target.host()
    if "+avx2" in h.features.split(","):
        avx2 = target.HostTarget(h.triple, "znver3", ",".join(
            "-" + f[1:] if f.startswith("+avx512") else f for f in h.features.split(",")))
        monkeypatch.setattr(target, "host", lambda: avx2)
        assert target.host().vector_bits == 256
    _check_small_m(dt, 0)


def _check_small_m(dt: str, vector_bits: int) -> None:
    from axle_cpu.executable import llvm_module
    from axle_cpu.gemm import DIRECT_B_TILES_512, Layout, tiles
    from axle_cpu.plan import build_plan
    from axle_cpu.target import host

    bits = vector_bits or host().vector_bits
    for name, ls, rs, attrs in SMALL_M:
        m = dot_module(dt, ls, rs, **attrs)
        xs = inputs(m)
        (spec,) = build_plan(m, arena=False, vector_bits=vector_bits).kernels.values()
        ir_text = str(llvm_module([spec], "t"))
        lay = Layout.of(m.entry.root)
        mr = tiles(m.entry.root.dtype, bits, lay).mr
        direct = (dt != "f16" and lay.b_k.table is None
                  and lay.m <= (DIRECT_B_TILES_512 if bits >= 512 else 1) * mr)
        assert ('"pbrr.body"' not in ir_text) == direct, name
        assert ("i32 0, i32 3, i32 1)" in ir_text) == (direct and bits >= 512), name  # B's prefetch
        _jit, fn, (outer, inner) = _kernel(m, vector_bits)
        out = np.full(m.entry.root.shape, 99, xs[0].dtype)
        _call(fn, xs, out, [(0, outer, 0, inner)])
        check_dot(m, xs, out)
        rows, cols = sorted({0, outer // 3, outer}), sorted({0, min(13, inner), inner})
        for ranges in ([(a, b, 0, inner) for a, b in zip(rows, rows[1:])],
                       [(0, outer, a, b) for a, b in zip(cols, cols[1:])]):
            pieces = np.full(m.entry.root.shape, 99, xs[0].dtype)
            _call(fn, xs, pieces, [r for r in ranges if r[0] < r[1] and r[2] < r[3]])
            np.testing.assert_array_equal(pieces, out, err_msg=name)


@pytest.mark.parametrize("vector_bits", [0, 256])
def test_gemm_vector_matrix_threads_share_whole_c_blocks(vector_bits) -> None:  # noqa: ANN001
    """Threads split a streamed vector-matrix product (``_vecmat``: x @ B, or a matrix-vector
    product with a strided K, swapped into one) in whole C blocks (GemmSpec.vecmat_share),
    so each reads B's rows in runs of VECMAT_BLOCK bytes, as one thread does (cut in 8
    chunks, [4096] @ [4096,4096] float32 read 2 KB runs), at least two shares where the
    width allows; other dots keep their units. The shares, at odd cuts, give the bits of
    one call."""
    from axle_cpu.gemm import VECMAT_BLOCK
    from axle_cpu.plan import build_plan

    def spec_of(m: Module):  # noqa: ANN202
        (spec,) = build_plan(m, arena=False, vector_bits=vector_bits).kernels.values()
        return spec

    vecmat = dict(lhs_contracting=(0,), rhs_contracting=(0,))
    f32_block, f64_block = VECMAT_BLOCK // 4, VECMAT_BLOCK // 8
    assert f32_block == 2048
    # [4096] @ [4096,4096]: threads split the columns, two shares of 2048 (float64: four of 1024)
    s = spec_of(dot_module("f32", (4096,), (4096, 4096), **vecmat))
    assert s.columns_outer and s.column_unit == f32_block and s.loop_sizes == (2, 1)
    s = spec_of(dot_module("f64", (4096,), (4096, 4096), **vecmat))
    assert s.column_unit == f64_block and s.loop_sizes == (4, 1)
    # [4096,4096]^T @ [4096] (swapped): the rows of its [4096, 1] output, in the same shares
    s = spec_of(dot_module("f32", (4096, 4096), (4096,), **vecmat))
    assert not s.columns_outer and s.row_unit == f32_block and s.loop_sizes == (2, 1) and s.fixed_columns
    # a narrow one: two shares of whole vectors (45 columns: 32 + 13 on AVX-512, 24 + 21 on AVX2)
    v = 16 if vector_bits == 0 else 8
    s = spec_of(dot_module("f32", (7, 45), (7,), **vecmat))
    assert s.row_unit == -(-23 // v) * v and s.loop_sizes == (2, 1)
    # not streamed: a row dot and a GEMM keep one row / NR-wide panels per unit
    assert spec_of(dot_module("f32", (4096, 4096), (4096,), **MM)).loop_sizes == (4096, 1)
    assert spec_of(dot_module("f32", (64, 512), (512, 4096), **MM)).column_unit not in (1, f32_block)

    for dt in ("f32", "f64", "s32"):
        for name, ls, rs in (("vecmat", (37,), (37, 4500)), ("matvec-t", (37, 4500), (37,))):
            m = dot_module(dt, ls, rs, **vecmat)
            xs = inputs(m)
            _jit, fn, (outer, inner) = _kernel(m, vector_bits)
            assert outer == (3 if dt != "f64" else 5) and inner == 1, (dt, name)
            whole = np.full(m.entry.root.shape, 99, xs[0].dtype)
            _call(fn, xs, whole, [(0, outer, 0, inner)])
            check_dot(m, xs, whole)
            for cuts in ([0, 1, outer], [0, outer - 1, outer], list(range(outer + 1))):
                pieces = np.full(m.entry.root.shape, 99, xs[0].dtype)
                _call(fn, xs, pieces, [(a, b, 0, inner) for a, b in zip(cuts, cuts[1:])])
                np.testing.assert_array_equal(pieces, whole, err_msg=f"{dt} {name} {cuts}")


@pytest.mark.parametrize("dt", ["f32", "f64", "f16"])
@pytest.mark.parametrize("name,ls,rs,attrs", [
    ("rowdot", (13, 257), (257,), MM),  # A's rows prefetched ROWDOT_PREFETCH bytes ahead, past its end
    ("vecmat", (41,), (41, 70), dict(lhs_contracting=(0,), rhs_contracting=(0,))),  # B's rows, clamped
    ("matvec-t", (41, 70), (41,), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
])
def test_gemm_vector_prefetch_stays_within_reach(name, ls, rs, attrs, dt) -> None:  # noqa: ANN001
    """The matrix-vector paths prefetch the matrix's lines ahead of their loads: a row dot
    ROWDOT_PREFETCH bytes along each row (past the last row's end for the last rows: only a
    hint, never a load), a streamed vector-matrix product VECMAT_PREFETCH rows ahead (the
    row clamped to K's last). With the matrix's last byte the last before an unmapped page,
    the kernel still reads no byte past it and gives the product."""
    import mmap

    from axle_cpu.executable import llvm_module
    from axle_cpu.plan import build_plan

    m = dot_module(dt, ls, rs, **attrs)
    xs = inputs(m)
    (spec,) = build_plan(m, arena=False).kernels.values()
    assert "llvm.prefetch" in str(llvm_module([spec], "t")), name
    mat = 0 if len(ls) == 2 else 1
    page = mmap.PAGESIZE
    nbytes = xs[mat].nbytes
    span = -(-nbytes // page) * page
    buf = mmap.mmap(-1, span + page)
    libc = ctypes.CDLL(None, use_errno=True)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(ctypes.c_void_p(base + span), page, 0) == 0  # PROT_NONE after the matrix
    placed = np.frombuffer(buf, xs[mat].dtype, xs[mat].size, span - nbytes).reshape(xs[mat].shape)
    placed[...] = xs[mat]
    args = list(xs)
    args[mat] = placed
    _jit, fn, (outer, inner) = _kernel(m)
    out = np.full(m.entry.root.shape, 99, xs[0].dtype)
    _call(fn, args, out, [(0, outer, 0, inner)])
    check_dot(m, xs, out)
    del placed, args
    assert libc.mprotect(ctypes.c_void_p(base + span), page, 3) == 0  # back to read-write before unmapping
    buf.close()
