"""gather, dynamic-slice, scatter and dynamic-update-slice on every backend against the
interpreter, bit for bit: clamped starts, out-of-bounds scatter windows dropped, duplicate
indices combined in index order, size-0 and size-1 arrays, s32 and s64 indices, every
operand dtype; alone, fused with producers and consumers, optimized and not. (The kit's
op rows cover the ops too; these are the lowering's corner cases.)"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.module import Module
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.testing import require_backend
from axle.testing.cases import OpCase, run_case

BACKENDS = ("cpu", "opencl", "template")
OPERAND_DTYPES = (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64, DType.BOOL)
INDEX_DTYPES = (DType.INT32, DType.INT64)


def build(name: str, types: list[TensorType], body: Callable[[Builder, list], object]) -> Module:
    b = Builder(name)
    params = [b.parameter(t, name=f"p{i}") for i, t in enumerate(types)]
    return b.build(body(b, params))


def values(dt: DType, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt is DType.BOOL:
        return rng.random(shape) < 0.5
    if dt.is_int:
        return rng.integers(-50, 50, shape).astype(dt.np)
    return rng.standard_normal(shape).astype(dt.np)


def check(module: Module, inputs: list[np.ndarray], backend: str) -> None:
    dev = require_backend(backend)
    want = evaluate(module, *inputs)
    for optimize in (True, False):
        got = run_case(OpCase(module.name, module, inputs), dev, optimize=optimize)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape, module.name
            np.testing.assert_array_equal(g, w, err_msg=f"{module.name} on {backend} (optimize={optimize})")


def take_rows(table: TensorType, ids: TensorType) -> Callable[[Builder, list], object]:
    """``table[ids]`` for 1-D ids: gather rows (the embedding lookup)."""
    return lambda b, p: b.gather(p[0], p[1], offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                                 index_vector_dim=1, slice_sizes=(1, table.shape[1]))


# ----------------------------------------------------------------------------- gather


@pytest.mark.parametrize("idt", INDEX_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("dt", OPERAND_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_rows_clamped(backend: str, dt: DType, idt: DType) -> None:
    table = TensorType(dt, (7, 5))
    ids = np.array([0, 6, 3, -1, 7, 100, -100, 3], idt.np)  # out of range ids clamp to the ends
    m = build("gather_rows", [table, TensorType(idt, ids.shape)], take_rows(table, TensorType(idt, ids.shape)))
    check(m, [values(dt, table.shape), ids], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_windows_index_vector_dims(backend: str) -> None:
    """2-D windows at 2-D start vectors (index_vector_dim 0 and last), offset dims first,
    a start partly out of range (clamped so the whole window fits)."""
    x = TensorType(DType.FLOAT32, (6, 7, 3))
    starts = np.array([[0, 0], [5, 6], [2, -3], [4, 1]], np.int32)  # [batch, 2]
    for ivd, idx in ((1, starts), (0, np.ascontiguousarray(starts.T))):
        m = build(f"gather_windows_{ivd}", [x, TensorType(DType.INT32, idx.shape)], lambda b, p, ivd=ivd: b.gather(
            p[0], p[1], offset_dims=(0, 1, 2), collapsed_slice_dims=(), start_index_map=(1, 0), index_vector_dim=ivd,
            slice_sizes=(2, 3, 3)))
        check(m, [values(DType.FLOAT32, x.shape), idx], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_size_zero_and_one(backend: str) -> None:
    one = TensorType(DType.FLOAT32, (1, 4))
    m = build("gather_one_row", [one, TensorType(DType.INT64, (3,))], take_rows(one, TensorType(DType.INT64, (3,))))
    check(m, [values(DType.FLOAT32, one.shape), np.array([0, 5, -2], np.int64)], backend)
    table = TensorType(DType.FLOAT32, (5, 4))
    none = TensorType(DType.INT32, (0,))
    m = build("gather_no_ids", [table, none], take_rows(table, none))
    check(m, [values(DType.FLOAT32, table.shape), np.zeros(0, np.int32)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_gathers_and_an_add_fused(backend: str) -> None:
    """``wte[ids] + wpe[pos]``, with an index computed in the kernel (ids + 1)."""
    wte, wpe = TensorType(DType.FLOAT32, (50, 16)), TensorType(DType.FLOAT32, (12, 16))
    ids = TensorType(DType.INT32, (8,))

    def body(b: Builder, p: list) -> object:
        shifted = b.add(p[2], b.broadcast_in_dim(b.constant(np.int32(1)), shape=(8,), broadcast_dimensions=()))
        pos = b.iota(shape=(8,), dtype=DType.INT32, dimension=0)
        return b.add(take_rows(wte, ids)(b, [p[0], shifted]), take_rows(wpe, ids)(b, [p[1], pos]))

    m = build("embed", [wte, wpe, ids], body)
    check(m, [values(DType.FLOAT32, wte.shape), values(DType.FLOAT32, wpe.shape, 1),
              np.array([3, 49, 0, -4, 7, 7, 60, 1], np.int32)], backend)


# ----------------------------------------------------------------------- dynamic slices


@pytest.mark.parametrize("idt", INDEX_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("dt", OPERAND_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_slice_clamped(backend: str, dt: DType, idt: DType) -> None:
    x = TensorType(dt, (9, 6))
    s = TensorType(idt, ())
    m = build("dynamic_slice", [x, s, s], lambda b, p: b.op(Op.DYNAMIC_SLICE, p[0], p[1], p[2], slice_sizes=(4, 6)))
    for i, j in ((2, 0), (7, -3), (-5, 2), (100, 100)):
        check(m, [values(dt, x.shape), np.array(i, idt.np), np.array(j, idt.np)], backend)


@pytest.mark.parametrize("idt", INDEX_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("dt", OPERAND_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_update_slice_clamped(backend: str, dt: DType, idt: DType) -> None:
    x, u, s = TensorType(dt, (9, 6)), TensorType(dt, (3, 2)), TensorType(idt, ())
    m = build("dynamic_update_slice", [x, u, s, s],
              lambda b, p: b.op(Op.DYNAMIC_UPDATE_SLICE, p[0], p[1], p[2], p[3]))
    for i, j in ((2, 0), (8, 5), (-5, 2), (100, -100)):
        check(m, [values(dt, x.shape), values(dt, u.shape, 1), np.array(i, idt.np), np.array(j, idt.np)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_update_slice_of_a_computed_operand(backend: str) -> None:
    """The operand is a temporary that dies at the update (in place where the backend
    assigns buffers), the update is computed too, and the result feeds another kernel."""
    x, u, s = TensorType(DType.FLOAT32, (64, 33)), TensorType(DType.FLOAT32, (5, 33)), TensorType(DType.INT32, ())

    def body(b: Builder, p: list) -> object:
        y = b.op(Op.DYNAMIC_UPDATE_SLICE, b.op(Op.ABS, p[0]), b.op(Op.NEG, p[1]), p[2], b.constant(np.int32(0)))
        return b.op(Op.MUL, y, y)

    m = build("dus_in_place", [x, u, s], body)
    check(m, [values(DType.FLOAT32, x.shape), values(DType.FLOAT32, u.shape, 1), np.array(40, np.int32)], backend)


# ---------------------------------------------------------------------------- scatter


def scatter_rows(kind: str) -> Callable[[Builder, list], object]:
    """``x.at[ids].<kind>(updates)`` over rows."""
    return lambda b, p: b.scatter(p[0], p[1], p[2], update_window_dims=(1,), inserted_window_dims=(0,),
                                  scatter_dims_to_operand_dims=(0,), index_vector_dim=1, kind=kind)


@pytest.mark.parametrize("kind", ["replace", "add", "mul", "min", "max"])
@pytest.mark.parametrize("dt", OPERAND_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_duplicates_and_out_of_bounds(backend: str, dt: DType, kind: str) -> None:
    """Duplicate ids combine in index order (the last one wins for replace), ids out of
    range (negative or past the end) are dropped."""
    x, ids = TensorType(dt, (6, 5)), np.array([1, 4, 1, -1, 6, 1, 0, 4, 100], np.int64)
    u = TensorType(dt, (len(ids), 5))
    m = build(f"scatter_{kind}", [x, TensorType(DType.INT64, ids.shape), u], scatter_rows(kind))
    check(m, [values(dt, x.shape), ids, values(dt, u.shape, 1)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_float_sum_order(backend: str) -> None:
    """Float adds of duplicates in index order: 1e8 + 1 - 1e8 ... depends on the order."""
    x = TensorType(DType.FLOAT32, (3,))
    ids = np.array([0, 0, 0, 2, 2, 0], np.int32)
    upd = np.array([1e8, 1.0, -1e8, 3.0, 1e-7, 1.0], np.float32)
    m = build("scatter_order", [x, TensorType(DType.INT32, ids.shape), TensorType(DType.FLOAT32, upd.shape)],
              lambda b, p: b.scatter(p[0], p[1], p[2], update_window_dims=(), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,), index_vector_dim=1, kind="add"))
    check(m, [np.zeros(3, np.float32), ids, upd], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_overlapping_windows(backend: str) -> None:
    """Windows of 3 rows at overlapping starts: they meet at different window positions,
    so the updates must still apply one after another; a window running past the end is
    dropped whole (not clamped)."""
    x = TensorType(DType.FLOAT32, (8, 2))
    starts = np.array([0, 1, 2, 1, 6, 5], np.int32)
    u = TensorType(DType.FLOAT32, (len(starts), 3, 2))
    for kind in ("replace", "add"):
        m = build(f"scatter_windows_{kind}", [x, TensorType(DType.INT32, starts.shape), u],
                  lambda b, p, kind=kind: b.scatter(p[0], p[1], p[2], update_window_dims=(1, 2),
                                                    inserted_window_dims=(), scatter_dims_to_operand_dims=(0,),
                                                    index_vector_dim=1, kind=kind))
        check(m, [values(DType.FLOAT32, x.shape), starts, values(DType.FLOAT32, u.shape, 1)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_size_zero_and_one(backend: str) -> None:
    x = TensorType(DType.FLOAT32, (1, 3))
    ids = TensorType(DType.INT32, (2,))
    m = build("scatter_one_row", [x, ids, TensorType(DType.FLOAT32, (2, 3))], scatter_rows("add"))
    check(m, [values(DType.FLOAT32, x.shape), np.array([0, 1], np.int32), values(DType.FLOAT32, (2, 3), 1)],
          backend)
    x = TensorType(DType.FLOAT32, (4, 3))
    none = TensorType(DType.INT32, (0,))
    m = build("scatter_nothing", [x, none, TensorType(DType.FLOAT32, (0, 3))], scatter_rows("add"))
    check(m, [values(DType.FLOAT32, x.shape), np.zeros(0, np.int32), np.zeros((0, 3), np.float32)], backend)


# ------------------------------------------------------------------ a training loop


@pytest.mark.parametrize("backend", BACKENDS)
def test_minibatch_training_loop_with_traced_starts(backend: str) -> None:
    """Linear regression by minibatch SGD: each jit step slices its batch at a traced start
    (dynamic-slice) and writes its loss into a history buffer at a traced position
    (dynamic-update-slice, in place where the backend assigns buffers); one compiled
    executable serves every step, and the result is NumPy's."""
    import axle
    from axle import lax

    dev = require_backend(backend)
    rng = np.random.default_rng(0)
    n, d, bs, steps = 64, 5, 8, 12
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x @ rng.standard_normal(d).astype(np.float32)).astype(np.float32)

    def step(w, hist, xs, ys, i, k):  # noqa: ANN001, ANN202
        xb = lax.dynamic_slice(xs, (i, 0), (bs, d))
        yb = lax.dynamic_slice(ys, (i,), (bs,))
        err = (xb * w[None, :]).sum(axis=1) - yb
        loss = (err * err).mean()
        w = w - 0.1 * (xb * err[:, None]).sum(axis=0) * (2.0 / bs)
        return w, lax.dynamic_update_slice(hist, loss.reshape((1,)), (k,))

    jstep = axle.jit(step, device=dev)
    axle.reset_stats()
    w, hist = np.zeros(d, np.float32), np.zeros(steps, np.float32)
    w_np, hist_np = w.copy(), hist.copy()
    for k in range(steps):
        i = np.int32((k * bs) % n)
        w, hist = jstep(w, hist, x, y, i, np.int32(k))
        xb, yb = x[i:i + bs], y[i:i + bs]
        err = (xb * w_np[None, :]).sum(axis=1) - yb
        hist_np[k] = (err * err).mean()
        w_np = w_np - np.float32(0.1) * (xb * err[:, None]).sum(axis=0) * np.float32(2.0 / bs)
    np.testing.assert_allclose(np.asarray(w), w_np, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(hist), hist_np, rtol=1e-4, atol=1e-6)
    assert np.asarray(hist)[-1] < np.asarray(hist)[0]
    assert axle.stats()["traces"] == 1  # the starts are traced: no retrace per step
