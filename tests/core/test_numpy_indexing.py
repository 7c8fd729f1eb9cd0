"""axle.numpy indexing with traced integer arrays and scalars (gather / scatter), against
NumPy, under jit on every installed device (interpreter always; cpu and opencl when
installed): x[ids], x[i], x[i, :, j], x[ids1, ids2] broadcasting, mixed with slices, None
and Ellipsis; take, take_along_axis; .at[...] set/add/multiply/min/max/get; jax's rules for
out-of-range traced indices; the minibatch training loop of issue 15."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.ir.ops import Op

DEVICES = [d.name for d in axle.devices() if d.backend in ("interpreter", "cpu", "opencl")]
RNG = np.random.default_rng(15)
X = RNG.standard_normal((4, 5, 6)).astype(np.float32)
I4 = np.array([3, -1, 0, 3], np.int32)  # negative and duplicate
I5 = np.array([[4, 0], [2, -5]], np.int64)
I6 = np.array([5, 1], np.int32)


def _run(dev, fn, *args):
    with axle.device(dev):
        out = axle.jit(fn)(*args)
    return [np.asarray(o) for o in out] if isinstance(out, (tuple, list)) else np.asarray(out)


# (name, axle/NumPy function of (x, *index arrays), index arrays): the same code indexes both
GETITEM = [
    ("x[ids]", lambda x, a: x[a], (I4,)),
    ("x[scalar]", lambda x, i: x[i], (np.int32(-2),)),
    ("x[i, :, j]", lambda x, i, j: x[i, :, j], (np.int64(1), np.int32(4))),
    ("x[:, ids2d]", lambda x, a: x[:, a], (I5,)),
    ("x[ids1, ids2] broadcast", lambda x, a, b: x[a[:, None], b], (I4[:2], I5[0])),
    ("x[ids1, :, ids2] apart", lambda x, a, b: x[a, :, b], (I4[:2], I6)),
    ("x[..., ids]", lambda x, a: x[..., a], (I6,)),
    ("x[None, ids, 1:4]", lambda x, a: x[None, a, 1:4], (I4,)),
    ("x[::-1, ids, None, ::2]", lambda x, a: x[::-1, a, None, ::2], (I5,)),
    ("x[ids, 2, ids]", lambda x, a, b: x[a, 2, b], (I4[:2], I6)),
    ("x[1, ids] int first", lambda x, a: x[1, a], (I5,)),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name, fn, idx", GETITEM, ids=[g[0] for g in GETITEM])
def test_traced_getitem_matches_numpy(dev, name, fn, idx):
    np.testing.assert_array_equal(_run(dev, fn, X, *idx), fn(X, *idx), err_msg=f"{name} on {dev}")


@pytest.mark.parametrize("dev", DEVICES)
def test_traced_getitem_is_one_gather_not_a_one_hot(dev):
    """x[ids] with traced ids traces to one gather (O(result) work where the device claims
    gather), not the compare-select-reduce over the whole table it used to be."""
    with axle.device(dev):
        traced = axle.jit(lambda x, a: x[a]).lower(X, I4).module
    ops = [n.op for n in traced.entry.nodes]
    assert ops.count(Op.GATHER) == 1
    assert Op.REDUCE not in ops and Op.DOT_GENERAL not in ops


ATS = [
    ("set", lambda x, a, v: x.at[a].set(v), lambda x, a, v: _np_set(x, a, v)),
    ("add", lambda x, a, v: x.at[a].add(v), lambda x, a, v: _np_at(np.add, x, a, v)),
    ("multiply", lambda x, a, v: x.at[a].multiply(v), lambda x, a, v: _np_at(np.multiply, x, a, v)),
    ("min", lambda x, a, v: x.at[a].min(v), lambda x, a, v: _np_at(np.minimum, x, a, v)),
    ("max", lambda x, a, v: x.at[a].max(v), lambda x, a, v: _np_at(np.maximum, x, a, v)),
    ("get", lambda x, a, v: x.at[a].get(), lambda x, a, v: x[a]),
]


def _np_set(x, a, v):
    y = x.copy()
    y[a] = v  # NumPy: the last duplicate wins, as scatter's index order
    return y


def _np_at(ufunc, x, a, v):
    y = x.copy()
    ufunc.at(y, a, v)
    return y


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name, fn, ref", ATS, ids=[a[0] for a in ATS])
def test_traced_at_updates_match_numpy(dev, name, fn, ref):
    x = RNG.integers(-4, 5, (5, 3)).astype(np.float32)  # small integers: any summation order is exact
    a = np.array([1, -1, 1, 3], np.int32)  # duplicates and a negative index
    v = RNG.integers(-3, 4, (4, 3)).astype(np.float32)
    np.testing.assert_array_equal(_run(dev, fn, x, a, v), ref(x, a, v), err_msg=f"{name} on {dev}")


@pytest.mark.parametrize("dev", DEVICES)
def test_traced_at_with_slices_and_two_index_arrays(dev):
    x = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    a, b = np.array([0, 2], np.int64), np.array([[4], [1]], np.int32)

    def f(x, a, b):
        return x.at[1:, a, b].set(-1), x.at[::-1, 2].add(7), x.at[a[0], :, b[1, 0]].max(40)

    want0 = x.copy()
    want0[1:, a, b] = -1
    want1 = x.copy()
    want1[::-1, 2] += 7
    want2 = x.copy()
    want2[0, :, 1] = np.maximum(want2[0, :, 1], 40)
    for g, w in zip(_run(dev, f, x, a, b), (want0, want1, want2)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dev", DEVICES)
def test_traced_out_of_range_indices_clamp_on_read_and_drop_on_update(dev):
    x = np.arange(5, dtype=np.float32)
    i = np.array([7, -9, 2], np.int32)
    got_read, got_set, got_take = _run(dev, lambda x, i: (x[i], x.at[i].set(-1.0), anp.take(x, i)), x, i)
    np.testing.assert_array_equal(got_read, [4, 0, 2])  # clamped
    np.testing.assert_array_equal(got_set, [0, 1, -1, 3, 4])  # out-of-range updates dropped
    np.testing.assert_array_equal(got_take, [np.nan, np.nan, 2])  # take fills by default


@pytest.mark.parametrize("dev", DEVICES)
def test_take_and_take_along_axis_with_traced_indices(dev):
    x = RNG.standard_normal((3, 7)).astype(np.float64)
    i = np.array([[6, 0], [-7, 3]], np.int64)
    j = np.array([[6], [0], [2]], np.int32)

    def f(x, i, j):
        return anp.take(x, i, axis=1), anp.take(x, i[0], axis=None), anp.take_along_axis(x, j, axis=1)

    got = _run(dev, f, x, i, j)
    for g, w in zip(got, (np.take(x, i, axis=1), np.take(x, i[0]), np.take_along_axis(x, j, axis=1))):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dev", DEVICES)
def test_lax_dynamic_slices_match_numpy(dev):
    x = np.arange(24, dtype=np.int64).reshape(4, 6)

    def f(x, i, j):
        return (lax.dynamic_slice(x, (i, j), (2, 3)), lax.dynamic_slice_in_dim(x, j, 4, axis=1),
                lax.dynamic_index_in_dim(x, i, 0, keepdims=False),
                lax.dynamic_update_slice(x, np.full((2, 2), -1, np.int64), (i, j)),
                lax.dynamic_update_slice_in_dim(x, np.zeros((4, 1), np.int64), j, axis=1))

    for i, j in ((1, 2), (-1, 9), (3, -2)):  # negative starts count from the end, then clamp (jax)
        ci, cj = (i % 4 if i < 0 else i), (j % 6 if j < 0 else j)
        si, sj = min(ci, 2), min(cj, 3)
        w3 = x.copy()
        w3[min(ci, 2):min(ci, 2) + 2, min(cj, 4):min(cj, 4) + 2] = -1
        w4 = x.copy()
        w4[:, min(cj, 5)] = 0
        want = (x[si:si + 2, sj:sj + 3], x[:, min(cj, 2):min(cj, 2) + 4], x[min(ci, 3)], w3, w4)
        for g, w in zip(_run(dev, f, x, np.int32(i), np.int64(j)), want):
            np.testing.assert_array_equal(g, w, err_msg=f"{dev} starts {(i, j)}")


@pytest.mark.parametrize("dev", DEVICES)
def test_placement_summary_names_the_decomposed_ops(dev):
    """A device that does not claim gather/scatter runs their decomposition, and says so."""
    from axle.compiler import compile_module
    from axle.ir.builder import Builder
    from axle.partition import placement_of
    from axle.registry import REGISTRY

    b = Builder("emb")
    table, ids = b.parameter("f32[6,3]"), b.parameter("s32[4]")
    g = b.gather(table, ids, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                 index_vector_dim=1, slice_sizes=(1, 3))
    device = next(d for d in axle.devices() if d.name == dev)
    summary = placement_of(compile_module(b.build(g), device))
    claimed = Op.GATHER in REGISTRY.backend_for(device).capabilities(device).ops
    assert summary is not None
    assert summary.decomposed == ({} if claimed else {"gather": 1})
    assert ("decomposed for" in str(summary)) != claimed
    assert not summary.fallback


# ---------------------------------------------------------- must show: a minibatch training loop


def _train_reference(data, labels, w, steps, batch, lr):
    losses = np.zeros(steps, np.float32)
    for s in range(steps):
        start = min((s * batch) % len(data), len(data) - batch)
        xb, yb = data[start:start + batch], labels[start:start + batch]
        err = xb @ w - yb
        losses[s] = np.mean(err * err)
        w = w - lr * (2.0 / batch) * (xb.T @ err)
    return w, losses


@pytest.mark.parametrize("dev", [d for d in DEVICES if d in ("cpu:0", "opencl:0")] or ["interpreter:0"])
def test_minibatch_training_loop_with_dynamic_slice_and_at_set(dev):
    """Issue 15's must-show: each jitted step slices its batch with a traced start
    (dynamic_slice) and records its loss with ``.at[step].set`` (traced step) in a buffer
    carried across steps, matching NumPy on cpu:0 and opencl:0."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((40, 5)).astype(np.float32)
    labels = (data @ np.array([1.0, -2.0, 0.5, 3.0, 0.0], np.float32)).astype(np.float32)
    steps, batch, lr = 12, 8, np.float32(0.05)

    @axle.jit
    def step(w, losses, s, start):
        xb = lax.dynamic_slice(data, (start, np.int32(0)), (batch, 5))
        yb = lax.dynamic_slice_in_dim(labels, start, batch)

        def loss_fn(w_):
            err = xb @ w_ - yb
            return anp.mean(err * err)

        loss, g = axle.value_and_grad(loss_fn)(w)
        return w - lr * g, losses.at[s].set(loss)

    with axle.device(dev):
        w, losses = np.zeros(5, np.float32), np.zeros(steps, np.float32)
        for s in range(steps):
            w, losses = step(w, losses, np.int32(s), np.int32((s * batch) % len(data)))
        w, losses = np.asarray(w), np.asarray(losses)
    want_w, want_losses = _train_reference(data, labels, np.zeros(5, np.float32), steps, batch, lr)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(w, want_w, rtol=2e-5, atol=1e-5)


# ------------------------------------------------ nn and random on the indexing primitives


@pytest.mark.parametrize("dev", DEVICES)
def test_cross_entropy_with_integer_labels_is_a_gather_and_matches_numpy(dev):
    from axle import nn

    logits = RNG.standard_normal((5, 7)).astype(np.float32)
    labels = np.array([6, 0, 3, 3, 1], np.int32)
    with axle.device(dev):
        f = axle.jit(lambda x, y: nn.cross_entropy(x, y, reduction="none"))
        got = np.asarray(f(logits, labels))
        nodes = f.lower(logits, labels).module.entry.nodes
    z = logits - logits.max(1, keepdims=True)
    want = -(z - np.log(np.exp(z).sum(1, keepdims=True)))[np.arange(5), labels]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert any(n.op is Op.GATHER for n in nodes)
    assert not any(n.op is Op.COMPARE and n.shape == logits.shape for n in nodes)  # no one-hot of the classes


@pytest.mark.parametrize("dev", DEVICES)
def test_random_keys_and_fold_in_from_traced_values(dev):
    import axle.random as ar

    with axle.device(dev):
        step_keys = axle.jit(lambda k, s: ar.uniform(ar.fold_in(k, s), (3,)))
        from_seed = axle.jit(lambda s: ar.normal(ar.key(s), (4,)))
        for s in (0, 5, -3):
            np.testing.assert_array_equal(np.asarray(step_keys(ar.key(7), np.int32(s))),
                                          np.asarray(ar.uniform(ar.fold_in(ar.key(7), s), (3,))))
            np.testing.assert_array_equal(np.asarray(from_seed(np.int64(s))), np.asarray(ar.normal(ar.key(s), (4,))))
        perm = np.asarray(axle.jit(lambda k: ar.permutation(k, 9))(ar.key(2)))
    assert sorted(perm.tolist()) == list(range(9))
