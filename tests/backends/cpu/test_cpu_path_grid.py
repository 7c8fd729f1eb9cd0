"""The cpu kernels' code paths at their thresholds: for each size or stride threshold that
picks a path (gemm.py's COLUMNS_OUTER_MIN, CONV_COLUMNS_OUTER_MIN, SPLIT_K_MIN and
SPLIT_K_RATIO, the micro-tile height that reads B in place, VECMAT_BLOCK, PACK_KB, the
indirect convolution's IND_MIN_RUN; the row kernels' SHORT_ROW and ROW_CACHE_BYTES, the
blocked transpose's MIN_BYTES, the packed sort's _PACKED_MIN, threads'
LOOP_SPLIT_ELEMENTS, the pooled buffers' MMAP_MIN), a shape just below it and one at it,
for each operand layout the path distinguishes, on 1 thread and split over 2 (forced),
against the interpreter. Each case also asserts the path it was written for, so that a
moved threshold cannot leave a case testing nothing new.

The small-shape tests elsewhere never reach these paths: a wide ``x @ w.T`` of one row
(N >= 256, columns split by panels of the swapped product) wrote only C's first column."""
from __future__ import annotations

import ctypes
import math
from dataclasses import replace

import numpy as np
import pytest
from llvmlite import ir
from test_cpu_conv import _window, check_conv, conv_inputs, conv_module
from test_cpu_gemm import dot_module, inputs

import axle
import axle.numpy as anp
from axle import lax
from axle.compiler import compile_optimized
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Module
from axle.ir.ops import Op
from axle.testing.cases import OpCase, assert_case_close, assert_close, bias_relu, row_softmax, tolerance

RNG = np.random.default_rng(23)
MM = dict(lhs_contracting=(1,), rhs_contracting=(0,))  # A [M, K] @ B [K, N]
BT = dict(lhs_contracting=(1,), rhs_contracting=(1,))  # x @ w.T: B [N, K]
AT = dict(lhs_contracting=(0,), rhs_contracting=(0,))  # A.T @ B: A [K, M]
BATCH0 = dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))


def _gemm_consts() -> dict[str, int]:
    from axle_cpu import gemm

    return {"cols": gemm.COLUMNS_OUTER_MIN, "kmin": gemm.SPLIT_K_MIN, "ratio": gemm.SPLIT_K_RATIO,
            "pack_kb": gemm.PACK_KB, "vm": gemm.VECMAT_BLOCK}


def _mr(dt: str, n: int, attrs: dict) -> int:
    """The host's micro-tile height for a dot with N columns (unbalanced: M a multiple of
    every height), the most rows that read B in place."""
    from axle_cpu.gemm import Layout, _host_bits, tiles

    node = dot_module(dt, (8, 8), (n, 8) if attrs is BT else (8, n), **attrs).entry.root
    lay = replace(Layout.of(node), m=720720)  # divisible by every height up to 16
    return tiles(node.dtype, _host_bits(), lay).mr


def _paths(exe) -> set[str]:  # noqa: ANN001
    """The GEMM paths the compiled dot takes (its kernel's decisions, gemm.py)."""
    from axle_cpu.gemm import GemmSpec, _Emitter, _host_bits

    (spec,) = [launch.step.spec for launch, _ in exe._steps if launch is not None
               and isinstance(launch.step.spec, GemmSpec)]
    em = _Emitter(ir.Module(), spec, spec.vector_bits or _host_bits())
    flags = {"columns": spec.columns_outer, "batch_outer": spec.batch_outer, "split_k": spec.split_reduce_size > 0,
             "swap": em.swap, "rowdot": em.lay.rowdot, "vecmat": em.vecmat, "direct_a": em.direct_a is not None,
             "direct_b": em.direct_b is not None, "accumulate": em.accumulate, "ind": bool(em.ind_seg),
             "lines": em.ind_lines, "epilogue": spec.epilogue}
    return {k for k, v in flags.items() if v}


def _compile(m: Module, cpu, threads: str, monkeypatch):  # noqa: ANN001, ANN202
    """``m`` compiled (optimized: a dot and its epilogue fuse) on ``threads`` threads; on 2
    every kernel is split (forced), as the pool cuts it (CHUNKS pieces per thread)."""
    from axle_cpu import threads as pool

    be = axle.REGISTRY.backend("cpu")
    monkeypatch.setenv("AXLE_CPU_THREADS", threads)
    be._cache.clear()
    exe, _ = compile_optimized(m, cpu)
    for launch, _ in exe._steps:
        if launch is not None:
            launch.parallel = threads != "1"
    assert pool.pool().n == int(threads)
    return exe


def _run_both(m: Module, xs: list[np.ndarray], cpu, monkeypatch) -> tuple[list[np.ndarray], set[str]]:  # noqa: ANN001
    """The results on 1 thread and on 2 (split), and the dot's paths."""
    be = axle.REGISTRY.backend("cpu")
    outs, paths = [], set()
    for nt in ("1", "2"):
        exe = _compile(m, cpu, nt, monkeypatch)
        paths = _paths(exe) if _has_gemm(exe) else set()
        outs.append(be.to_host(exe.execute([be.to_device(x, cpu) for x in xs])[0]))
    be._cache.clear()
    return outs, paths


def _has_gemm(exe) -> bool:  # noqa: ANN001
    from axle_cpu.gemm import GemmSpec

    return any(launch is not None and isinstance(launch.step.spec, GemmSpec) for launch, _ in exe._steps)


# ================================================================ dot_general


def _dot_epilogue(dt: str, ls: tuple[int, ...], rs: tuple[int, ...], attrs: dict, epi: str) -> Module:
    """relu(dot + bias[last dim]) (the classifier / dense layer), or the dot converted to
    dtype ``epi``."""
    b = Builder("dot_epi")
    x = b.parameter(f"{dt}[{','.join(map(str, ls))}]")
    y = b.parameter(f"{dt}[{','.join(map(str, rs))}]")
    d = b.dot_general(x, y, **attrs)
    return b.build(bias_relu(b, d) if epi == "bias_relu" else b.convert(d, dtype=epi))


def _check(m: Module, xs: list[np.ndarray], got: np.ndarray, cpu) -> None:  # noqa: ANN001
    """Against the interpreter: integers exactly; floats within the kit's tolerance plus
    the dot's forward error bound (K eps |x|.|w|: any summation order)."""
    assert_case_close(OpCase(m.name, m, xs), [got], evaluate(m, *xs), cpu)


def _case(name: str, dt: str, ls: tuple[int, ...], rs: tuple[int, ...], attrs: dict, want: str,
          epi: str | None = None) -> tuple:
    return pytest.param(dt, ls, rs, attrs, want, epi, id=name)


C = _gemm_consts()
NW = C["cols"]  # the first wide N
KS = C["kmin"]  # the first split K
#: N for which K = SPLIT_K_MIN is exactly SPLIT_K_RATIO times the output's longer side
NR_EDGE = C["kmin"] // C["ratio"]

# name, dtype, lhs, rhs, dims, paths ("+x": taken, "-x": not), epilogue ("bias_relu", or
# a dtype to convert the dot to)
DOT_CASES = [
    # COLUMNS_OUTER_MIN: columns split by NR-wide panels, A read in place
    _case("cols-below", "f32", (37, 45), (45, NW - 1), MM, "-columns +direct_a"),
    _case("cols-at", "f32", (37, 45), (45, NW), MM, "+columns +direct_a"),
    _case("cols-at-f64-bt", "f64", (37, 45), (NW + 1, 45), BT, "+columns"),
    _case("cols-at-s32-at", "s32", (45, 37), (45, NW + 3), AT, "+columns +direct_a"),
    _case("cols-at-s64-batch", "s64", (2, 9, 45), (2, 45, NW + 5), BATCH0, "+columns"),
    _case("cols-at-batch-middle", "f32", (9, 3, 45), (45, 3, NW),
          dict(lhs_batch=(1,), rhs_batch=(1,), lhs_contracting=(2,), rhs_contracting=(0,)), "+columns"),
    _case("cols-at-batch-last", "f32", (45, 9, 2), (2, NW, 45),
          dict(lhs_batch=(2,), rhs_batch=(0,), lhs_contracting=(0,), rhs_contracting=(2,)), "+columns"),
    # A's free dims do not merge (a table): never split by columns, never read in place
    _case("cols-table-a", "f32", (5, 45, 4), (45, NW), MM, "-columns -direct_a"),
    # float16 accumulates all of K in float32 (its own loop order): rows only
    _case("cols-f16", "f16", (9, 45), (45, NW + 7), MM, "-columns +accumulate"),
    _case("cols-k1", "f32", (37, 1), (1, NW), MM, "+columns"),
    _case("cols-at-bias-relu", "f32", (37, 45), (45, NW + 1), MM, "+columns +epilogue", "bias_relu"),
    # an epilogue whose output cannot hold partial sums (convert): all of K accumulated first
    _case("cols-at-convert-f64", "f32", (37, 45), (45, NW), MM, "-columns +accumulate +epilogue", "f64"),
    _case("cols-below-convert-f16", "f32", (37, 600), (600, NW - 1), MM, "-columns +accumulate +epilogue", "f16"),
    _case("convert-s32-s8", "s32", (9, 45), (45, 70), MM, "+accumulate +epilogue", "s8"),
    _case("convert-f32-bf16", "f32", (9, 45), (45, NW + 1), MM, "+accumulate +epilogue -columns", "bf16"),
    _case("convert-s64-u16", "s64", (9, 45), (45, 70), MM, "+accumulate +epilogue", "u16"),
    _case("convert-f64-f32-bt", "f64", (9, 45), (70, 45), BT, "+accumulate +epilogue", "f32"),
    _case("convert-vecmat-t", "f32", (1, 45), (NW, 45), BT, "+swap +rowdot +accumulate +epilogue", "f64"),
    _case("convert-matvec", "f32", (37, 45), (45, 1), MM, "+rowdot +accumulate +epilogue", "f16"),
    _case("convert-vecmat", "f32", (1, 45), (45, 33), MM, "-vecmat +accumulate +epilogue", "bool"),
    # the epilogue's index when N is several dims (bias on the last, 17): never by rows
    _case("cols-at-split-n-bias-relu", "f32", (37, 45), (45, 16, 17), MM, "+columns +epilogue", "bias_relu"),
    _case("cols-at-s32-bias-relu", "s32", (9, 45), (45, NW + 9), MM, "+columns +epilogue", "bias_relu"),
    _case("cols-f16-bias-relu", "f16", (9, 45), (45, NW + 9), MM, "-columns +accumulate +epilogue", "bias_relu"),
    _case("cols-at-batch-bias-relu", "f32", (2, 9, 45), (2, 45, NW), BATCH0, "+columns +epilogue", "bias_relu"),
    _case("direct-b-bias-relu", "f32", (2, 45), (45, NW + 1), MM, "+direct_b +columns +epilogue", "bias_relu"),
    # an empty contraction: zeros (through the epilogue) over the column split
    _case("empty-k-wide", "f32", (37, 0), (0, NW + 1), MM, "+columns"),
    _case("empty-k-wide-bias-relu", "f32", (37, 0), (0, NW + 1), MM, "+columns +epilogue", "bias_relu"),
    # one row of C: x @ w (B streamed: vecmat) and x @ w.T (swapped: row dots)
    _case("vecmat-below", "f32", (1, 45), (45, NW - 1), MM, "+vecmat -columns"),
    _case("vecmat-at", "f32", (1, 45), (45, NW), MM, "+vecmat +columns"),
    _case("vecmat-at-s32", "s32", (1, 45), (45, NW + 1), MM, "+vecmat +columns"),
    # float16's one row: its float32 block over a column range cut anywhere (2 threads)
    _case("row-f16-wide", "f16", (1, 45), (45, NW + 44), MM, "-vecmat +accumulate -columns"),
    _case("vecmat-block", "f64", (1, 13), (13, C["vm"] // 8 + 3), MM, "+vecmat +columns"),
    _case("vecmat-t-below", "f32", (1, 45), (NW - 1, 45), BT, "+swap +rowdot -columns"),
    _case("vecmat-t-at", "f32", (1, 45), (NW, 45), BT, "+swap +rowdot +columns"),
    _case("vecmat-t-at-s64", "s64", (1, 45), (NW + 2, 45), BT, "+swap +rowdot +columns"),
    _case("vecmat-t-at-1d", "f64", (45,), (NW + 1, 45), dict(lhs_contracting=(0,), rhs_contracting=(1,)),
          "+swap +rowdot +columns"),
    _case("vecmat-t-at-batch", "f32", (3, 1, 45), (3, NW, 45),
          dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(2,)), "+swap +rowdot +columns"),
    _case("vecmat-t-at-bias-relu", "f32", (1, 45), (NW + 3, 45), BT, "+swap +rowdot +columns +epilogue", "bias_relu"),
    _case("vecmat-t-below-bias-relu", "f32", (1, 45), (NW - 3, 45), BT, "+swap +rowdot -columns +epilogue",
          "bias_relu"),
    _case("vecmat-t-at-f16", "f16", (1, 45), (NW, 45), BT, "+swap +rowdot -columns"),
    _case("vecmat-t-at-batch-bias-relu", "f32", (3, 1, 45), (3, NW + 1, 45),
          dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(2,)),
          "+swap +rowdot +columns +epilogue", "bias_relu"),
    _case("vecmat-t-at-f16-bias-relu", "f16", (1, 45), (NW, 45), BT, "+swap +rowdot -columns +epilogue", "bias_relu"),
    _case("vecmat-t-split-n-bias-relu", "f32", (1, 45), (16, 17, 45),
          dict(lhs_contracting=(1,), rhs_contracting=(2,)), "+swap +rowdot +columns +epilogue", "bias_relu"),
    _case("vecmat-at-bias-relu", "f64", (1, 45), (45, NW + 1), MM, "+vecmat +columns +epilogue", "bias_relu"),
    # one column of C: A @ x (row dots), A.T @ x (swapped: a vector-matrix product)
    _case("matvec-wide", "f32", (NW + 3, 45), (45, 1), MM, "+rowdot -swap -columns"),
    _case("matvec-wide-1d", "s32", (NW + 1, 45), (45,), dict(lhs_contracting=(1,), rhs_contracting=(0,)), "+rowdot"),
    _case("matvec-t-wide", "f32", (45, NW + 3), (45, 1), AT, "+swap +vecmat"),
    _case("matvec-t-wide-bias-relu", "f32", (45, NW + 3), (45, 1), AT, "+swap +vecmat +epilogue", "bias_relu"),
    # SPLIT_K_MIN: a long K into a small output is split by K across threads
    _case("splitk-below", "f32", (5, KS - 1), (KS - 1, 33), MM, "-split_k"),
    _case("splitk-at", "f32", (5, KS), (KS, 33), MM, "+split_k"),
    _case("splitk-at-f64-bt", "f64", (5, KS + 1), (33, KS + 1), BT, "+split_k"),
    _case("splitk-at-s32-at", "s32", (KS, 5), (KS, 33), AT, "+split_k"),
    _case("splitk-at-batch", "f32", (2, 3, KS), (2, KS, 9), BATCH0, "+split_k"),
    _case("splitk-at-vecmat", "f32", (1, KS + 3), (KS + 3, 9), MM, "+split_k +vecmat"),
    _case("splitk-at-f16", "f16", (5, KS), (KS, 33), MM, "-split_k +accumulate"),
    _case("splitk-at-batched-vecmat", "f64", (4, 1, KS), (4, KS, 9), BATCH0, "+split_k +vecmat"),
    _case("splitk-vecvec", "f32", (1, KS), (KS, 1), MM, "-split_k +rowdot"),
    _case("splitk-at-bias-relu", "f32", (5, KS), (KS, 33), MM, "-split_k +epilogue", "bias_relu"),
    # SPLIT_K_RATIO: K at 16 times the output's longer side (here N = 256: columns split too)
    _case("splitk-ratio-at", "f32", (3, KS), (KS, NR_EDGE), MM, "+split_k +columns"),
    _case("splitk-ratio-below", "f32", (3, KS), (KS, NR_EDGE + 1), MM, "-split_k +columns"),
    # the dtypes the GEMM does not take (and widening dots): the loop nest's dot, split by
    # threads as any loop kernel, at the GEMM's sizes
    _case("loop-dot-wide-s8", "s8", (3, 45), (45, NW + 1), MM, "-epilogue"),
    _case("loop-dot-long-k-bf16", "bf16", (3, KS), (KS, 5), MM, "-epilogue"),
    _case("loop-dot-one-row-u16-bt", "u16", (1, 45), (NW, 45), BT, "-epilogue"),
    _case("widen-s8-s32-long-k", "s8", (3, KS), (KS, 5), dict(MM, preferred_element_type=DType.INT32), "-epilogue"),
    _case("widen-f16-f32-wide-bt", "f16", (1, 45), (NW + 1, 45), dict(BT, preferred_element_type=DType.FLOAT32),
          "-epilogue"),
    _case("vecmat-at-batch", "f32", (3, 1, 45), (3, 45, NW), BATCH0, "+vecmat +columns"),
    # PACK_KB: a B with K contiguous (x @ w.T) packed a column's K chunk at a time
    _case("packkb-at", "f32", (37, C["pack_kb"] + 1), (70, C["pack_kb"] + 1), BT, "-direct_b"),
]


def _direct_b_rows(dt: str, attrs: dict) -> int:
    """The most rows of C whose B is read in place: the rows of one micro-tile (two on
    512-bit vectors, DIRECT_B_TILES_512), the tile being the one ``tiles`` picks for
    that many rows (a few rows take a shorter tile)."""
    from axle_cpu.gemm import DIRECT_B_TILES_512, Layout, _host_bits, tiles

    per = DIRECT_B_TILES_512 if _host_bits() >= 512 else 1
    node = dot_module(dt, (8, 8), (8, 300), **attrs).entry.root
    m = 1
    while m <= per * tiles(node.dtype, _host_bits(), replace(Layout.of(node), m=m)).mr:
        m += 1
    return m - 1


def _direct_b_cases() -> list:
    """B read in place (no packing) when C's rows fit the row tiles B serves in place:
    at and just above that count, A row-major and transposed."""
    out = []
    for dt in ("f32", "f64"):
        for attrs, tag in ((MM, "mm"), (AT, "at")):
            mr = _direct_b_rows(dt, attrs)
            for m, want in ((mr, "+direct_b"), (mr + 1, "-direct_b")):
                ls = (m, 45) if attrs is MM else (45, m)
                out.append(_case(f"direct-b-{tag}-{dt}-m{m}", dt, ls, (45, 300), attrs, want))
    return out


@pytest.mark.parametrize("dt,ls,rs,attrs,want,epi", DOT_CASES + _direct_b_cases())
def test_dot_paths_at_thresholds(dt, ls, rs, attrs, want, epi, cpu, monkeypatch) -> None:  # noqa: ANN001
    """Each dot path just below / at its threshold, per layout, on 1 thread and split over
    2 (forced), against the interpreter; the split gives the same bits unless it splits K."""
    m = dot_module(dt, ls, rs, **attrs) if epi is None else _dot_epilogue(dt, ls, rs, attrs, epi)
    xs = inputs(m)
    (one, two), paths = _run_both(m, xs, cpu, monkeypatch)
    for tag in want.split():
        assert (tag[1:] in paths) is (tag[0] == "+"), f"{m.name}: paths {sorted(paths)}, wanted {want}"
    _check(m, xs, one, cpu)
    _check(m, xs, two, cpu)
    if "split_k" not in paths:
        np.testing.assert_array_equal(one, two)


# ================================================================ convolution


CONV_CASES = [
    # CONV_COLUMNS_OUTER_MIN: an NCHW convolution's pixel columns split by threads (11 x 11
    # = 121 pixels below, 12 x 12 = 144 at); the kernel read in place
    ("nchw-pixels-below", (2, 5, 11, 11), (6, 5, 1, 1), ("NCHW", "OIHW", "NCHW"), _window(2), "-columns"),
    ("nchw-pixels-at", (2, 5, 14, 14), (6, 5, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2, low=(1, 1), high=(1, 1)),
     "+columns"),
    # IND_MIN_RUN: runs of >= 16 input features read in place through row pointers; a
    # shorter run by kernel rows (a run times the kernel's width: IND_MIN_LINE) from 3
    ("nhwc-run-below", (2, 6, 5, 15), (3, 3, 15, 7), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1), high=(1, 1)),
     "+ind +lines"),
    ("nhwc-run-at", (2, 6, 5, 16), (3, 3, 16, 7), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1), high=(1, 1)),
     "+ind -lines"),
    ("nhwc-line-below", (2, 6, 5, 1), (3, 2, 1, 7), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1), high=(1, 1)),
     "-ind"),
    ("nhwc-line-at", (2, 6, 5, 1), (3, 3, 1, 7), ("NHWC", "HWIO", "NHWC"), _window(2, low=(1, 1), high=(1, 1)),
     "+ind +lines"),
]


@pytest.mark.parametrize("name,xs_shape,ws_shape,layouts,window,want", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_paths_at_thresholds(name, xs_shape, ws_shape, layouts, window, want, cpu, monkeypatch) -> None:  # noqa: ANN001
    m = conv_module((name, xs_shape, ws_shape, layouts, window), DType.FLOAT32)
    xs = conv_inputs(m)
    (one, two), paths = _run_both(m, xs, cpu, monkeypatch)
    for tag in want.split():
        assert (tag[1:] in paths) is (tag[0] == "+"), f"{name}: paths {sorted(paths)}, wanted {want}"
    check_conv(m, xs, one)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("vector_bits", [0, 256, 128], ids=["host", "avx2", "sse"])
def test_dot_thresholds_disjoint_ranges(vector_bits: int, cpu) -> None:  # noqa: ANN001
    """The kernels at the column split and split-K thresholds, with the host's tiles and
    AVX2's and SSE's (other NR-wide column panels), called over odd pieces of their ranges
    (the pool cuts only into equal chunks): the pieces give the single call's bits; slices
    of a split K sum to the product."""
    from test_cpu_gemm import _call, _kernel

    for dt, ls, rs, attrs in (("f32", (37, 45), (45, NW + 70), MM), ("f64", (1, 45), (NW + 70, 45), BT),
                              ("s32", (1, 45), (45, NW + 70), MM), ("f32", (3, KS), (KS, NR_EDGE), MM)):
        m = dot_module(dt, ls, rs, **attrs)
        xs = inputs(m)
        _jit, fn, (outer, inner) = _kernel(m, vector_bits)
        whole = np.zeros(m.entry.root.shape, xs[0].dtype)
        _call(fn, xs, whole, [(0, outer, 0, inner)])
        _check(m, xs, whole, cpu)
        for ranges in ([(a, b, 0, inner) for a, b in _pieces(outer)], [(0, outer, a, b) for a, b in _pieces(inner)]):
            pieces = np.full(m.entry.root.shape, 99, xs[0].dtype)
            _call(fn, xs, pieces, ranges)
            np.testing.assert_array_equal(pieces, whole, err_msg=f"{m.name} {ls} {rs} over {ranges}")
        k = ls[-1]
        if k >= KS:  # the pool's reduction chunks: each call sums its slice of K
            parts = []
            for a, b in _pieces(k):
                part = np.full(m.entry.root.shape, 99, xs[0].dtype)
                ptrs = (ctypes.c_void_p * 3)(*(v.ctypes.data for v in (*xs, part)))
                fn(ptrs, 0, outer, 0, inner, a, b)
                parts.append(part)
            _check(m, xs, np.sum(parts, axis=0, dtype=xs[0].dtype), cpu)


def _pieces(n: int) -> list[tuple[int, int]]:
    cuts = sorted({0, min(1, n), n // 3, n // 3 + 1, max(n - 2, 0), n})
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if a < b]


# ================================================================ the other kernels


def _unary(name: str, dt: str, shape: tuple[int, ...], body) -> Module:  # noqa: ANN001
    b = Builder(name)
    x = b.parameter(f"{dt}[{','.join(map(str, shape))}]")
    return b.build(*body(b, x))


def _softmax(b: Builder, x) -> tuple:  # noqa: ANN001
    return (row_softmax(b, x),)


def _sums(axes: tuple[int, ...]):  # noqa: ANN202
    """A multi-output reduction: the sum and the max over ``axes``."""
    return lambda b, x: (b.reduce(x, kind="sum", axes=axes), b.reduce(x, kind="max", axes=axes))


def _transposed(perm: tuple[int, ...]):  # noqa: ANN202
    return lambda b, x: (b.transpose(x, permutation=perm),)


def _pool(k: int, s: int):  # noqa: ANN202
    """A k x k max pool of stride s over the last two axes, padded by 1."""
    def body(b: Builder, x) -> tuple:  # noqa: ANN001
        r = len(x.shape)
        lead = (1,) * (r - 2)
        return (b.reduce_window(x, kind="max", window_dimensions=lead + (k, k), window_strides=lead + (s, s),
                                base_dilations=(1,) * r, window_dilations=(1,) * r, padding_low=(0,) * (r - 2) + (1, 1),
                                padding_high=(0,) * (r - 2) + (1, 1)),)
    return body


def _sorted(b: Builder, x) -> tuple:  # noqa: ANN001
    return (b.sort(x, dimension=len(x.shape) - 1, num_keys=1, descending=0, index=0),)


def _other_consts() -> dict[str, int]:
    from axle_cpu import emitter, sort, transpose

    return {"short": emitter.KernelSpec.SHORT_ROW, "cache": emitter.KernelEmitter.ROW_CACHE_BYTES // 8,
            "tbytes": transpose.MIN_BYTES, "packed": sort._PACKED_MIN}


O = _other_consts()
#: f32 [rows, cols] with rows * cols * 4 = MIN_BYTES and cols * 4 a multiple of 512
T_COLS = 256
T_ROWS = O["tbytes"] // 4 // T_COLS

# name, dtype, input shape, body, the kernel kind wanted (the plan's spec kind), and
# fixed_columns where it matters
OTHER_CASES = [
    # SHORT_ROW: rows up to it walked whole (split by rows only); a lone row split by columns
    ("softmax-short", "f32", (3, O["short"]), _softmax, "row"),
    ("softmax-long", "f32", (3, O["short"] + 1), _softmax, "row"),
    ("softmax-one-row-short", "f64", (1, O["short"]), _softmax, "row"),
    ("softmax-one-row-long", "f64", (1, O["short"] + 1), _softmax, "row"),
    # ROW_CACHE_BYTES: the row's exp cached on the stack up to this many elements
    ("softmax-cached", "f32", (2, O["cache"]), _softmax, "row"),
    ("softmax-uncached", "f32", (2, O["cache"] + 1), _softmax, "row"),
    ("softmax-one-row-uncached", "f32", (1, O["cache"] + 1), _softmax, "row"),
    # reductions: by rows, a column reduction split along its reduced axis, all axes
    ("sum-rows", "f32", (3, 5000), _sums((1,)), "input"),
    ("sum-columns", "f32", (5000, 3), _sums((0,)), "input"),
    ("sum-columns-s32", "s32", (4097, 70), _sums((0,)), "input"),
    ("sum-all-f64", "f64", (70, 129), _sums((0, 1)), "input"),
    ("sum-middle-f16", "f16", (3, 700, 5), _sums((1,)), "input"),
    # MIN_BYTES: a transpose bringing the last dim inwards takes the blocked kernel from it
    ("transpose-below", "f32", (T_ROWS - 1, T_COLS), _transposed((1, 0)), "loop"),
    ("transpose-at", "f32", (T_ROWS, T_COLS), _transposed((1, 0)), "transpose"),
    ("transpose-at-f64", "f64", (T_ROWS // 2 + 3, T_COLS), _transposed((1, 0)), "transpose"),
    ("transpose-at-batch", "f32", (4, T_ROWS // 4, T_COLS), _transposed((0, 2, 1)), "transpose"),
    ("transpose-at-rotate", "f32", (T_ROWS // 4, 4, T_COLS), _transposed((1, 2, 0)), "transpose"),
    ("transpose-at-s8", "s8", (2 * T_ROWS, 2 * T_COLS), _transposed((1, 0)), "transpose"),
    # reduce_window with unit column stride (column loop) and stride 2 (short constant rows)
    ("pool-stride1-short", "f32", (2, 3, 9, O["short"]), _pool(3, 1), "loop"),
    ("pool-stride1-long", "f32", (2, 3, 9, O["short"] + 5), _pool(3, 1), "loop"),
    ("pool-stride2-short", "f32", (2, 3, 9, O["short"]), _pool(3, 2), "loop"),
    ("pool-stride2-long", "f32", (2, 3, 9, 2 * O["short"] + 1), _pool(3, 2), "loop"),
    # _PACKED_MIN: rows this long sort packed (key << 32 | column), shorter ones stably
    ("sort-short", "f32", (3, O["packed"] - 1), _sorted, "sort"),
    ("sort-packed", "f32", (3, O["packed"]), _sorted, "sort"),
    ("sort-packed-f16", "f16", (2, O["packed"] + 1), _sorted, "sort"),
    ("sort-packed-s32", "s32", (2, O["packed"] + 7), _sorted, "sort"),
]


def _other_inputs(m: Module) -> list[np.ndarray]:
    """Random values with ties (sort stability), signed zeros and, for floats, a NaN."""
    (p,) = m.entry.parameters
    t = p.type
    if t.dtype.is_int:
        return [RNG.integers(-5, 6, size=t.shape).astype(t.dtype.np)]
    x = np.round(RNG.standard_normal(t.shape) * 4) / 4
    flat = x.reshape(-1)
    flat[::7] = -0.0
    if m.entry.root.op.name == "SORT" or "sort" in m.name:
        flat[3] = np.nan
    return [x.astype(t.dtype.np)]


@pytest.mark.parametrize("name,dt,shape,body,kind", OTHER_CASES, ids=[c[0] for c in OTHER_CASES])
def test_other_kernels_at_thresholds(name, dt, shape, body, kind, cpu, monkeypatch) -> None:  # noqa: ANN001
    """Row fusions, reductions, transposes, reduce_window and sort just below and at their
    thresholds, on 1 thread and split over 2 (forced), against the interpreter (a split
    reduction sums in another order: within the kit's tolerance; anything else bit-exact)."""
    m = _unary(name.replace("-", "_"), dt, shape, body)
    xs = _other_inputs(m)
    wants = evaluate(m, *xs)
    be = axle.REGISTRY.backend("cpu")
    for nt in ("1", "2"):
        exe = _compile(m, cpu, nt, monkeypatch)
        kinds = {s.spec.kind if hasattr(s, "spec") else "sort" for _, s in exe._steps}
        assert kind in kinds, f"{name}: kernels {kinds}"
        outs = exe.execute([be.to_device(x, cpu) for x in xs])
        for got, want in zip((be.to_host(o) for o in outs), wants):
            exact = kind in ("transpose", "sort", "loop") or got.dtype.kind != "f"
            rtol, atol = (0, 0) if exact else tolerance(DType(dt), None, max(shape))
            assert_close(got, want, rtol, atol, f"{name} on {nt} thread(s)")
    be._cache.clear()


def _loop_bodies(n: int) -> list:
    """Loop bodies whose largest array has ``n`` elements: a wide vector-matrix product
    and its activation, a long-K product into a small output (split K outside loops), a
    row fusion."""
    side = math.isqrt(n)
    return [
        ("vecmat", lambda x, w: anp.tanh(x @ w), (1, side), (side, side)),
        ("splitk", lambda x, w: x + 1e-3 * ((x @ w) @ w.T), (n // KS, KS), (KS, 3)),
        ("softmax", lambda x, w: anp.exp(x) / anp.sum(anp.exp(x), axis=1, keepdims=True) * w, (n // 256, 256),
         (1, 256)),
    ]


@pytest.mark.parametrize("at", [False, True], ids=["below", "at"])
def test_kernels_in_loops_at_the_split_threshold(at: bool, cpu, monkeypatch) -> None:  # noqa: ANN001
    """Inside a loop the native runner splits a kernel across threads (no timing) when its
    largest array reaches LOOP_SPLIT_ELEMENTS: just below and at it, on 2 threads, the loop
    gives NumPy's numbers (a split-K product split by its rows there)."""
    from axle_cpu import threads

    n = threads.LOOP_SPLIT_ELEMENTS if at else threads.LOOP_SPLIT_ELEMENTS - 600
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    axle.REGISTRY.backend("cpu")._cache.clear()
    for name, body, xs, ws in _loop_bodies(n):
        x = RNG.standard_normal(xs).astype(np.float32)
        w = (RNG.standard_normal(ws) / math.sqrt(ws[0])).astype(np.float32)
        f = axle.jit(lambda x, w, k, body=body: lax.fori_loop(0, k, lambda i, v: body(v, w), x), device=cpu)
        compiled = f.lower(x, w, np.int32(3)).compile()
        splits = [launch.loop_split() for launch, _ in compiled.executable._steps if launch is not None]
        assert any(splits) is at, f"{name}: {splits}"
        want = x
        for _ in range(3):
            with axle.device("interpreter:0"):
                want = np.asarray(body(want, w))
        np.testing.assert_allclose(np.asarray(f(x, w, np.int32(3))), want, rtol=2e-4, atol=2e-5, err_msg=name)
    axle.REGISTRY.backend("cpu")._cache.clear()


@pytest.mark.parametrize("at", [False, True], ids=["below", "at"])
def test_buffers_at_the_pooled_size(at: bool, cpu) -> None:  # noqa: ANN001
    """Outputs and arenas from MMAP_MIN bytes are pooled mappings (smaller ones one block
    per call): just below and at it, results held from earlier calls keep their values
    while later calls (the mapping pool, the same executable) run, and two outputs and a
    temporary of that size never overlap."""
    from axle_cpu.memory import MMAP_MIN

    n = MMAP_MIN // 4 - (0 if at else 1)
    b = Builder("pooled")
    x = b.parameter(f"f32[{n}]")
    y = b.parameter(f"f32[{n}]")
    e = b.exp(b.mul(x, y))
    t = b.sort(b.add(e, x), dimension=0, num_keys=1, descending=0, index=0)  # a temporary between two kernels
    m = b.build(b.add(t, y), b.sub(e, y))
    exe, _ = compile_optimized(m, cpu)
    be = axle.REGISTRY.backend("cpu")
    calls = [[RNG.standard_normal(n).astype(np.float32) for _ in range(2)] for _ in range(3)]
    held = [exe.execute([be.to_device(a, cpu) for a in xs]) for xs in calls]
    for xs, outs in zip(calls, held):
        for got, want in zip((be.to_host(o) for o in outs), evaluate(m, *xs)):
            assert_close(got, want, *tolerance(DType.FLOAT32, Op.EXP), f"{n} elements")


def test_random_programs_reach_the_thresholds() -> None:
    """The random-program generator's threshold sizes (random_modules.threshold_pattern)
    still straddle the cpu thresholds, and some programs of the first seeds use them."""
    from axle.ir.dotdims import DotDims
    from axle.testing import random_modules as rm
    from axle_cpu import emitter, gemm

    for sizes, at in ((rm.WIDE_SIZES, gemm.COLUMNS_OUTER_MIN), (rm.LONG_K_SIZES, gemm.SPLIT_K_MIN),
                      (rm.ROW_SIZES, emitter.KernelSpec.SHORT_ROW + 1),
                      (rm.ROW_SIZES, emitter.KernelEmitter.ROW_CACHE_BYTES // 8 + 1)):
        assert at - 1 in sizes and at in sizes, (sizes, at)
    dots = [DotDims.of(n) for seed in range(300) for c in rm.random_module(seed, 1 + seed % 40)[0].computations()
            for n in c.nodes if n.op is Op.DOT_GENERAL]
    assert any(d.n >= gemm.COLUMNS_OUTER_MIN for d in dots) and any(d.k >= gemm.SPLIT_K_MIN for d in dots)
