"""The indexing ops on cpu:0 beyond the kit: an embedding lookup plus positions is one
kernel under jit, and scatter / dynamic-update-slice write in place over a dying operand
(no copy of it: its buffer becomes the result's)."""
from __future__ import annotations

import numpy as np
import pytest

import axle
from axle import lax
from axle.interpreter import evaluate

DN = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))


def embed(mode: str):  # noqa: ANN201
    def f(wte, wpe, ids):  # noqa: ANN001, ANN202
        pos = lax.iota(np.int32, (ids.shape[0],))
        d = wte.shape[1]
        return (lax.gather(wte, ids[:, None], DN, (1, d), mode=mode)
                + lax.gather(wpe, pos[:, None], DN, (1, d), mode=mode))
    return f


@pytest.mark.parametrize("mode", ["clip", "fill"])
def test_token_plus_position_embedding_is_one_kernel(cpu, mode: str) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    wte = rng.standard_normal((1000, 64)).astype(np.float32)
    wpe = rng.standard_normal((16, 64)).astype(np.float32)
    ids = np.array([3, 999, 0, 17, 17, 500, 2, 1], np.int32)
    f = axle.jit(embed(mode), device=cpu)
    compiled = f.lower(wte, wpe, ids).compile()
    assert compiled.report()["kernels"] == 1, compiled.report()["steps"]
    np.testing.assert_array_equal(np.asarray(f(wte, wpe, ids)), wte[ids] + wpe[np.arange(8)])


def test_updates_run_in_place_on_a_dying_operand(cpu) -> None:  # noqa: ANN001
    """A 4 MiB operand computed by a kernel, then a dynamic-update-slice of one row and a
    scatter-add of three: one 4 MiB temporary for the three values (each update takes its
    operand's buffer, where copies would need three), and the results are right."""
    def f(x, row, i, ids, rows):  # noqa: ANN001, ANN202
        y = lax.dynamic_update_slice(x * 2.0, row, (i, 0))
        return lax.scatter_add(y, ids[:, None], rows, lax.ScatterDimensionNumbers(
            update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))) - 1.0

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1024, 1024)).astype(np.float32)
    row = rng.standard_normal((1, 1024)).astype(np.float32)
    ids = np.array([5, 1023, 5], np.int32)
    rows = rng.standard_normal((3, 1024)).astype(np.float32)
    args = (x, row, np.int32(700), ids, rows)
    jf = axle.jit(f, device=cpu)
    compiled = jf.lower(*args).compile()
    rep = compiled.report()
    # (the few bytes beyond 4 MiB: the reshaped ids)
    assert rep["in_place"] >= 2 and x.nbytes <= rep["temp_bytes"] < x.nbytes + 4096, rep
    assert rep["naive_temp_bytes"] >= 3 * x.nbytes
    want = evaluate(jf.lower(*args).module, *args)[0]
    np.testing.assert_array_equal(np.asarray(jf(*args)), want)
    expected = x * 2.0
    expected[700] = row[0]
    np.add.at(expected, ids, rows)
    np.testing.assert_allclose(np.asarray(jf(*args)), expected - 1.0, rtol=1e-6)
