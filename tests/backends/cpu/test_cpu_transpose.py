"""The cache-blocked transpose kernel (axle_cpu/transpose.py): equal to NumPy for odd
sizes, every element size, batched permutations and arbitrary thread ranges; chosen for a
big transpose that moves the input's contiguous dim (every permutation class)."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.ir import Builder, Module

RNG = np.random.default_rng(3)


def _module(dt: str, shape: tuple[int, ...], perm: tuple[int, ...], flip: tuple[int, ...] = (),
            flip_after: tuple[int, ...] = ()) -> Module:
    """transpose(x) of an x of ``shape``, with the dims ``flip`` of x reversed first and the
    dims ``flip_after`` of the result reversed after (a convolution's kernel copies)."""
    b = Builder("t")
    x = b.parameter(f"{dt}[{','.join(map(str, shape))}]")
    if flip:
        x = b.reverse(x, dimensions=flip)
    y = b.transpose(x, permutation=perm)
    return b.build(b.reverse(y, dimensions=flip_after) if flip_after else y)


def _kernel(m: Module):  # noqa: ANN202
    """The blocked kernel of a lone transpose, compiled alone (whatever its size)."""
    from axle_cpu.executable import KFUNC, compile_kernels
    from axle_cpu.transpose import TransposeSpec

    spec = TransposeSpec("tblock", m.entry, "transpose")
    jit = compile_kernels([spec], "tblock")
    return jit, KFUNC(jit.address(spec.name)), spec.loop_sizes


CASES = [("f32", (37, 53), (1, 0)), ("f64", (3, 17, 29), (0, 2, 1)), ("f16", (65, 3), (1, 0)),
         ("s8", (2, 3, 33, 17), (1, 0, 3, 2)), ("pred", (31, 70), (1, 0)), ("s64", (1, 9), (1, 0)),
         ("f32", (4, 5, 6), (1, 2, 0)), ("f32", (4, 5, 6), (2, 0, 1)), ("bf16", (16, 48), (1, 0)),
         # every permutation class, through the collapsed form: HWIO -> OIHW, NCHW -> NHWC,
         # NHWC -> NCHW, NCHW -> CHWN, a middle dim moved, unit and empty dims
         ("f32", (3, 3, 5, 19), (3, 2, 0, 1)), ("f32", (2, 5, 4, 3), (0, 2, 3, 1)), ("f64", (2, 4, 3, 5), (0, 3, 1, 2)),
         ("f16", (3, 17, 2, 5), (1, 2, 3, 0)), ("s8", (4, 9, 6, 10), (0, 2, 1, 3)), ("s8", (3, 1, 5, 9), (1, 3, 0, 2)),
         ("pred", (4, 0, 3), (2, 1, 0)), ("f32", (1, 1), (1, 0)), ("pred", (2, 3, 1, 20), (3, 0, 2, 1)),
         # OIHW -> HWIO: rows (I, 3x3) are one input run across I (input_run), so 16 of them
         # are a vector tile though each I has 9 elements; and with an O that breaks the run
         ("f32", (20, 7, 3, 3), (2, 3, 1, 0)), ("f64", (33, 5, 3, 3), (2, 3, 1, 0)),
         ("s8", (17, 70, 1, 3), (2, 3, 1, 0)), ("f32", (18, 4, 2, 3), (1, 2, 3, 0)),
         # NCHW -> NHWC with 2 to 7 features: narrow tiles (narrow_columns), rows of
         # whole blocks and the blocks at each image's end
         ("f32", (2, 3, 7, 9), (0, 2, 3, 1)), ("f32", (3, 2, 5, 8), (0, 2, 3, 1)), ("f64", (2, 5, 6, 7), (0, 2, 3, 1)),
         ("f16", (2, 3, 9, 9), (0, 2, 3, 1)), ("s8", (3, 4, 70), (0, 2, 1)), ("f32", (2, 7, 40), (0, 2, 1)),
         ("f32", (3, 50), (1, 0)), ("pred", (2, 3, 33), (0, 2, 1))]


@pytest.mark.parametrize("dt,shape,perm", CASES)
def test_blocked_transpose_matches_numpy(dt, shape, perm) -> None:  # noqa: ANN001
    _check(_module(dt, shape, perm), lambda x: np.transpose(x, perm))


@pytest.mark.parametrize("dt,shape,perm,flip,flip_after", [
    ("f32", (3, 3, 20, 37), (3, 2, 0, 1), (0, 1), ()), ("f64", (37, 20, 3, 3), (2, 3, 1, 0), (), (0, 1)),
    ("s8", (5, 40, 33), (0, 2, 1), (1,), (0,)), ("f16", (2, 3, 1, 35), (3, 0, 1, 2), (0, 2, 3), ()),
    # reversed row dims walked in input order (vector tiles across I), with and without a
    # reversed column dim, and a reversed row dim outside the contiguous one
    ("f32", (40, 37, 3, 3), (2, 3, 1, 0), (), (0, 1)), ("f32", (40, 37, 3, 3), (2, 3, 1, 0), (0,), (0, 1)),
    ("f32", (19, 33, 3, 3), (2, 3, 1, 0), (1,), ()), ("f64", (6, 35, 18), (0, 2, 1), (0, 1), ())])
def test_reversed_transpose_matches_numpy(dt, shape, perm, flip, flip_after) -> None:  # noqa: ANN001
    """A kernel flip and transpose (HWIO -> OIHW with H and W reversed) in one blocked kernel."""
    def want(x: np.ndarray) -> np.ndarray:
        y = np.transpose(np.flip(x, flip) if flip else x, perm)
        return np.flip(y, flip_after) if flip_after else y

    _check(_module(dt, shape, perm, flip, flip_after), want)


@pytest.mark.parametrize("dt,shape,perm", [
    ("f32", (70, 20, 3, 3), (2, 3, 1, 0)), ("f64", (100, 3, 3, 3), (2, 3, 1, 0)), ("s8", (65, 40), (1, 0)),
    ("f32", (64, 48, 3, 3), (2, 3, 1, 0)), ("f16", (3, 33, 70), (0, 2, 1))])
def test_a_transpose_whose_output_stays_in_l2_walks_panels_of_columns(dt, shape, perm) -> None:  # noqa: ANN001
    """OIHW -> HWIO of a small weight (its output within half the L2) walks its row blocks
    panel by panel of PANEL_COLUMNS columns (``paneled``): a last panel of fewer columns,
    a panel split between threads (the ranges of ``_check``), every element size; bit-equal
    to NumPy. A big output keeps one sweep of all columns per row block."""
    from axle_cpu.transpose import PANEL_COLUMNS, TransposeSpec, paneled

    m = _module(dt, shape, perm)
    spec = TransposeSpec("tblock", m.entry, "transpose")
    assert paneled(spec) and spec.loop_sizes[1] > PANEL_COLUMNS
    _check(m, lambda x: np.transpose(x, perm))
    big = TransposeSpec("tbig", _module("f32", (1024, 1024), (1, 0)).entry, "transpose")
    assert not paneled(big)


def _check(m: Module, reference) -> None:  # noqa: ANN001
    """The kernel of ``m`` over its whole loop space in one call, then in pieces by rows and
    by columns (as threads take them), bit-equal to ``reference``."""
    from axle.testing.cases import random_input

    x = random_input(RNG, m.entry.parameters[0].type)
    want = reference(x)
    _jit, fn, (outer, inner) = _kernel(m)
    ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, 0)
    rows = sorted({0, min(1, outer), outer // 2, outer})  # one call, then pieces as threads take them
    cols = sorted({0, min(3, inner), inner // 2, inner})
    for ranges in ([(0, outer, 0, inner)], [(a, b_, 0, inner) for a, b_ in zip(rows, rows[1:])],
                   [(0, outer, a, b_) for a, b_ in zip(cols, cols[1:])]):
        out = np.zeros(want.shape, want.dtype)
        ptrs[1] = out.ctypes.data
        for o0, o1, i0, i1 in ranges:
            fn(ptrs, o0, o1, i0, i1, 0, 2**63 - 1)
        np.testing.assert_array_equal(out.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


@pytest.mark.parametrize("dt,shape,perm,cols", [
    ("f32", (32, 3, 224, 224), (0, 2, 3, 1), 3), ("f16", (4, 3, 64, 64), (0, 2, 3, 1), 3),
    ("f32", (4, 7, 64, 64), (0, 2, 3, 1), 7), ("f64", (5, 2, 40), (0, 2, 1), 2),
    # not narrow: a vector tile's columns or more, one column, too many lanes, rows not
    # consecutive in the output (NHWC -> NCHW's rows are its features' strided pixels)
    ("f32", (4, 16, 64, 64), (0, 2, 3, 1), 0), ("f32", (4, 1, 64, 64), (0, 2, 3, 1), 0),
    ("f64", (4, 9, 64, 64), (0, 2, 3, 1), 0), ("f32", (4, 64, 64, 3), (0, 3, 1, 2), 0)])
def test_narrow_rows_take_the_narrow_tiles(dt, shape, perm, cols) -> None:  # noqa: ANN001
    """NCHW -> NHWC of a few features (an image's 3 channels): a block of rows is a vector
    load per feature, interleaved in registers (narrow_columns says how many columns)."""
    from axle_cpu.transpose import TransposeSpec, narrow_columns

    m = _module(dt, shape, perm)
    assert narrow_columns(TransposeSpec("t", m.entry, "transpose")) == cols
    if math.prod(shape) < 1 << 20:
        _check(m, lambda x: np.transpose(x, perm))


def test_big_transpose_takes_the_blocked_kernel(cpu) -> None:  # noqa: ANN001
    """x.T of a [640, 1024] float32 (rows 4 KB apart) is one ``transpose`` kernel, equal to
    NumPy's, and so is a [1000, 777] one (register tiles beat the plain loop there too)."""
    from axle_cpu.transpose import blocked

    for shape, want_blocked in (((640, 1024), True), ((1000, 777), True), ((2, 512, 512), True)):
        x = RNG.standard_normal(shape).astype(np.float32)
        perm = tuple(range(len(shape) - 2)) + (len(shape) - 1, len(shape) - 2)
        m = _module("f32", shape, perm)
        assert blocked(m.entry) is want_blocked
        f = axle.jit(lambda a, perm=perm: anp.transpose(a, perm), device=cpu)
        np.testing.assert_array_equal(np.asarray(f(axle.device_put(x, cpu))), np.transpose(x, perm))
        exe = f.lower(x).compile().executable
        kinds = [launch.step.spec.kind for launch, _ in exe._steps if launch is not None]
        assert ("transpose" in kinds) is want_blocked, kinds


def test_every_big_permutation_class_that_moves_the_contiguous_dim_is_blocked() -> None:
    """HWIO -> OIHW (the kernel copies of a convolution's input gradient), NCHW -> NHWC and
    NCHW -> CHWN (the weight gradient's activations) take the tiled kernel; a transpose that
    keeps the contiguous dim innermost, or a small one, keeps the plain loop."""
    from axle_cpu.transpose import blocked, collapsed

    assert collapsed((3, 3, 256, 256), (3, 2, 0, 1)) == ((9, 256, 256), (2, 1, 0), (False,) * 3)
    assert collapsed((3, 3, 256, 256), (3, 2, 0, 1), frozenset({1}))[:2] == ((3, 3, 256, 256), (3, 2, 0, 1))
    assert collapsed((32, 1, 8, 8), (1, 0, 2, 3)) == ((2048,), (0,), (False,))  # a reshape: one row copied
    for shape, perm, want in (((3, 3, 256, 256), (3, 2, 0, 1), True), ((16, 64, 32, 32), (0, 2, 3, 1), True),
                              ((16, 64, 32, 32), (1, 2, 3, 0), True), ((16, 64, 32, 32), (0, 2, 1, 3), False),
                              ((3, 3, 64, 64), (3, 2, 0, 1), False), ((64, 1, 4096), (1, 2, 0), True),
                              # OIHW -> HWIO: runs of 9 (short), from SHORT_RUN_MIN_BYTES
                              ((64, 64, 3, 3), (2, 3, 1, 0), True), ((16, 16, 3, 3), (2, 3, 1, 0), False)):
        assert blocked(_module("f32", shape, perm).entry) is want, (shape, perm)
    assert blocked(_module("f32", (3, 3, 256, 256), (3, 2, 0, 1), flip=(0, 1)).entry)


def test_rows_that_continue_each_other_in_the_input_are_one_run() -> None:
    """OIHW -> HWIO walks rows (I, 3x3): the 9 elements of one I are followed in the input
    by the next I's, so a tile's 16 rows are one vector load per column across I; an outer
    row dim whose input stride is not the run so far ends it."""
    from axle_cpu.transpose import TransposeSpec, input_run

    assert input_run((64, 9), (9, 1)) == 576 and input_run((4, 9), (10, 1)) == 9
    assert input_run((5, 4, 9), (36, 9, 1)) == 180 and input_run((4, 9), (9, 2)) == 1 and input_run((), ()) == 1
    spec = TransposeSpec("t", _module("f32", (20, 7, 3, 3), (2, 3, 1, 0)).entry, "transpose")
    row_dims, in_strides = spec._dims[:2]
    assert row_dims == (7, 9) and input_run(row_dims, in_strides) == 63


def test_a_flipped_kernel_copy_is_one_input_run() -> None:
    """OIHW -> HWIO with H and W reversed (a convolution's kernel flipped for its input
    gradient) walks its reversed 3x3 rows in input order, writing them from their output's
    end: its rows are the same one run across I as the plain copy's, so it takes the vector
    tiles (read with a negative stride it was copied element by element: 512x512x3x3
    float32 6.6 -> 1.3 ms, one thread)."""
    from axle_cpu.transpose import TransposeSpec, input_run

    plain = TransposeSpec("t", _module("f32", (20, 7, 3, 3), (2, 3, 1, 0)).entry, "transpose")._dims
    flipped = TransposeSpec("t", _module("f32", (20, 7, 3, 3), (2, 3, 1, 0), flip_after=(0, 1)).entry,
                            "transpose")._dims
    assert flipped[:2] == plain[:2] and input_run(*flipped[:2]) == 63
    assert flipped[2] == (plain[2][0], -plain[2][1]) and flipped[6] == 8 * 7 * 20 and plain[6] == 0


def test_a_weight_and_its_flipped_copy_are_two_tiled_transposes(cpu) -> None:  # noqa: ANN001
    """A weight read as HWIO (the forward convolution) and flipped (its input gradient):
    one fusion exporting both was a multi-output plain loop, a strided read (512x512x3x3:
    10 ms a call); the fusion policy keeps a big strided transpose out of multi-output
    fusions, so each copy is the tiled kernel."""
    w = RNG.standard_normal((256, 256, 3, 3)).astype(np.float32)  # 2.25 MiB: over the policy's 1 MiB

    def f(a):  # noqa: ANN001, ANN202
        t = anp.transpose(a, (2, 3, 1, 0))
        return t, anp.flip(t, (0, 1))

    jf = axle.jit(f, device=cpu)
    got = jf(axle.device_put(w, cpu))
    want = np.transpose(w, (2, 3, 1, 0))
    np.testing.assert_array_equal(np.asarray(got[0]), want)
    np.testing.assert_array_equal(np.asarray(got[1]), np.flip(want, (0, 1)))
    kinds = [launch.step.spec.kind for launch, _ in jf.lower(w).compile().executable._steps if launch is not None]
    assert kinds == ["transpose", "transpose"], kinds


def _unit_dim_module(shape: tuple[int, int], how: str) -> Module:
    """x.T of a 2-D x given a leading unit dim by a broadcast or a reshape (a matmul's batch
    of 1 over a transposed weight), or x.T broadcast along a dim of 3 (a real copy)."""
    b = Builder("t")
    x = b.parameter(f"f32[{shape[0]},{shape[1]}]")
    t = b.transpose(x, permutation=(1, 0))
    out = (1, shape[1], shape[0]) if how != "stretched" else (3, shape[1], shape[0])
    if how == "reshape":
        return b.build(b.reshape(b.reshape(t, shape=out), shape=(1,) + out))
    return b.build(b.broadcast_in_dim(t, shape=out, broadcast_dimensions=(1, 2)))


@pytest.mark.parametrize("how", ["broadcast", "reshape"])
def test_a_transpose_given_unit_dims_takes_the_blocked_kernel(cpu, how) -> None:  # noqa: ANN001
    """broadcast(x.T) to [1, N, K] was a fusion of its own read with a stride (the GPT-2
    tied logits' 154 MB table: 176 ms of CPU against the blocked kernel's 12): unit dims
    added or dropped move no element, so it is the blocked transpose, bit-equal to NumPy's."""
    from axle_cpu.transpose import blocked

    m = _unit_dim_module((37, 53), how)
    _check(m, lambda x: np.transpose(x)[None, None] if how == "reshape" else np.transpose(x)[None])
    assert blocked(_unit_dim_module((640, 1024), how).entry)
    assert not blocked(_unit_dim_module((640, 1024), "stretched").entry)  # copied 3 times: a loop
    x = RNG.standard_normal((640, 1024)).astype(np.float32)
    unit = anp.reshape if how == "reshape" else anp.broadcast_to
    f = axle.jit(lambda a: unit(anp.transpose(a), (1, 1024, 640)), device=cpu)
    np.testing.assert_array_equal(np.asarray(f(axle.device_put(x, cpu))), x.T[None])
    exe = f.lower(x).compile().executable
    kinds = [launch.step.spec.kind for launch, _ in exe._steps if launch is not None]
    assert kinds == ["transpose"], kinds


def test_a_relu_read_transposed_is_computed_once_and_transposed_by_the_tiled_kernel(cpu) -> None:  # noqa: ANN001
    """The weight gradient's pattern (issue 18): an activation read in order and as NCHW ->
    CHWN. On cpu (max_fused_strided_transpose_bytes 1 MiB) the relu is one fusion and the
    transpose the tiled kernel, not a second fusion recomputing the relu in transposed order."""
    x = RNG.standard_normal((16, 32, 32, 32)).astype(np.float32)  # 2 MiB

    def f(a):  # noqa: ANN001, ANN202
        r = anp.maximum(a * 0.5 + 1.0, 0.0)
        return r + 1.0, anp.transpose(r, (1, 2, 3, 0))

    jf = axle.jit(f, device=cpu)
    got = jf(axle.device_put(x, cpu))
    r = np.maximum(x * np.float32(0.5) + np.float32(1.0), np.float32(0.0))
    np.testing.assert_array_equal(np.asarray(got[1]), np.transpose(r, (1, 2, 3, 0)))
    np.testing.assert_allclose(np.asarray(got[0]), r + 1, rtol=1e-6)
    compiled = jf.lower(x).compile()
    maxes = [m for n in compiled.module.entry.nodes if n.op.value == "fusion"
             for m in n.attr["computation"].nodes if m.op.value == "maximum"]
    assert len(maxes) == 1
    kinds = [launch.step.spec.kind for launch, _ in compiled.executable._steps if launch is not None]
    assert kinds.count("transpose") == 1, kinds


def test_the_fusion_policy_keeps_out_what_the_blocked_kernel_takes() -> None:
    """The cpu fusion policy's strided-transpose bound is the blocked kernel's MIN_BYTES
    (written out in the backend so that the policy does not import llvmlite): a transpose
    kept out of fusions below it would run as a plain strided loop of its own."""
    import axle
    from axle_cpu import transpose

    assert axle.REGISTRY.backend("cpu").fusion_policy().max_fused_strided_transpose_bytes == transpose.MIN_BYTES
