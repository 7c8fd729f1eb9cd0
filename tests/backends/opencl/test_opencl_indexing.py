"""The indexing ops on opencl:0 beyond the kit: an embedding lookup plus positions is one
kernel under jit (both launch strategies), and an update over an operand that dies there
takes over its buffer (no copy kernel), while one whose operand lives on gets a copy."""
from __future__ import annotations

import numpy as np

import axle
import axle.numpy as anp
from axle import lax
from axle_opencl.plan import AliasStep, KernelStep

DN = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))


def test_token_plus_position_embedding_is_one_kernel(ocl, strategy) -> None:  # noqa: ANN001
    def f(wte, wpe, ids):  # noqa: ANN001, ANN202
        pos = lax.iota(np.int32, (ids.shape[0],))
        return (lax.gather(wte, ids[:, None], DN, (1, 64), mode="fill")
                + lax.gather(wpe, pos[:, None], DN, (1, 64), mode="fill"))

    rng = np.random.default_rng(0)
    wte = rng.standard_normal((1000, 64)).astype(np.float32)
    wpe = rng.standard_normal((16, 64)).astype(np.float32)
    ids = np.array([3, 999, 0, 17, 17, 500, 2, 1], np.int32)
    jf = axle.jit(f, device=ocl)
    assert jf.lower(wte, wpe, ids).compile().report()["kernels"] == 1
    np.testing.assert_array_equal(np.asarray(jf(wte, wpe, ids)), wte[ids] + wpe[np.arange(8)])


def _steps(jf, *args):  # noqa: ANN001, ANN002, ANN202
    return jf.lower(*args).compile().executable.plan.steps


def test_update_takes_over_a_dying_operand_and_copies_a_live_one(ocl) -> None:  # noqa: ANN001
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(8, 4)
    row = -np.ones((1, 4), np.float32)
    # exp: never recomputed in two kernels, so in ``live`` the update's operand is read after it
    dying = axle.jit(lambda x, r, i: lax.dynamic_update_slice(anp.exp(x), r, (i, 0)) + 1.0, device=ocl)
    live = axle.jit(lambda x, r, i: lax.dynamic_update_slice(anp.exp(x), r, (i, 0)) + anp.exp(x), device=ocl)
    for jf, copies in ((dying, 0), (live, 1)):
        steps = _steps(jf, x, row, np.int32(3))
        labels = [s.label for s in steps if isinstance(s, KernelStep)]
        assert sum(label.endswith("(copy)") for label in labels) == copies, labels
        assert any(isinstance(s, AliasStep) for s in steps) == (copies == 0)
        e = np.exp(x)
        want = e.copy()
        want[3] = -1.0
        np.testing.assert_allclose(np.asarray(jf(x, row, np.int32(3))), want + (1.0 if copies == 0 else e), rtol=1e-6)
