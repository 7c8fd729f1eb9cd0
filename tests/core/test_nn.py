"""axle.nn decompositions, axle.random and axle.optimizers against NumPy references, in
all four execution modes."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from modes_util import DEVICE, MODES, check_all_modes, run_mode

import axle
import axle.numpy as anp
import axle.random as ar
from axle import nn, optimizers
from axle.errors import DTypeError, ShapeError

RNG = np.random.default_rng(3)


def np_log_softmax(x, axis=-1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (4, 10), (2, 3, 5)], ids=str)
def test_activations_softmax(dt, shape):
    x = (RNG.standard_normal(shape) * 4).astype(dt)
    check_all_modes(
        lambda a: (nn.relu(a), nn.sigmoid(a), nn.softmax(a), nn.log_softmax(a), nn.log_softmax(a, axis=0),
                   nn.logsumexp(a, axis=-1)),
        lambda a: (np.maximum(a, 0), (1 / (1 + np.exp(-a))).astype(dt), np.exp(np_log_softmax(a)).astype(dt),
                   np_log_softmax(a), np_log_softmax(a, 0), np.log(np.exp(a).sum(-1)).astype(dt)),
        x)


@pytest.mark.parametrize("labels", ["int", "onehot"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(labels, reduction):
    logits = RNG.standard_normal((6, 5)).astype(np.float32) * 3
    y = RNG.integers(0, 5, 6)
    lab = y if labels == "int" else np.eye(5, dtype=np.float32)[y]
    per = -np_log_softmax(logits)[np.arange(6), y]
    want = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction].astype(np.float32)
    check_all_modes(lambda z, t: nn.cross_entropy(z, t, reduction=reduction), lambda z, t: want, logits, lab,
                    tolerance={"rtol": 1e-5, "atol": 1e-6})


def test_layer_norm_and_sibling_reductions():
    x = RNG.standard_normal((4, 8)) * 3 + 1
    g, b = RNG.standard_normal(8), RNG.standard_normal(8)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    check_all_modes(lambda a, g_, b_: nn.layer_norm(a, g_, b_), lambda a, g_, b_: (a - mu) / np.sqrt(var + 1e-5) * g_ + b_,
                    x, g, b, tolerance={"rtol": 1e-9, "atol": 1e-9})
    # mean and variance are two reductions of the same operand (sum x and sum x*x): siblings
    text = axle.jit(lambda a: nn.layer_norm(a)).lower(x).as_text()
    reduces = [line for line in text.splitlines() if " reduce(" in line]
    assert len(reduces) == 2, text
    assert any("reduce(%p" in r or "reduce(%a" in r for r in reduces), text
    # ...which the optimizer fuses into one kernel holding both reductions
    lowered = axle.jit(lambda a: nn.layer_norm(a), device=DEVICE).lower(x)
    assert lowered.compile().report()["kernels"] == 1
    module = lowered.optimize()
    fused = [c for c in module.computations() if c is not module.entry]
    assert any(sum(1 for n in c.nodes if n.op.value == "reduce") == 2 for c in fused)


def np_conv2d(x, w, stride, pad):
    x = np.pad(x, ((0, 0), (0, 0), pad[0], pad[1]))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), x.dtype)
    for i, j in itertools.product(range(oh), range(ow)):
        patch = x[:, :, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw]
        out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out


@pytest.mark.parametrize("stride,padding,pad", [(1, "VALID", ((0, 0), (0, 0))), (2, "SAME", ((1, 1), (0, 1))),
                                                ((1, 2), 1, ((1, 1), (1, 1))), (1, ((0, 1), (2, 0)), ((0, 1), (2, 0)))],
                         ids=str)
def test_conv2d(stride, padding, pad):
    x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    st = (stride, stride) if isinstance(stride, int) else stride
    check_all_modes(lambda a, k, c: nn.conv2d(a, k, c, stride=stride, padding=padding),
                    lambda a, k, c: np_conv2d(a, k, st, pad) + c.reshape(1, 4, 1, 1), x, w, b,
                    tolerance={"rtol": 1e-4, "atol": 1e-5})


def test_pooling_and_dense():
    x = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    check_all_modes(lambda a: (nn.max_pool(a), nn.avg_pool(a), nn.max_pool(a, 3, 1)),
                    lambda a: (a.reshape(2, 3, 3, 2, 2, 2).max((3, 5)), a.reshape(2, 3, 3, 2, 2, 2).mean((3, 5)),
                               np.max([a[:, :, i:i + 4, j:j + 2] for i in range(3) for j in range(3)], 0)), x)
    w, b = RNG.standard_normal((4, 5)), RNG.standard_normal(5)
    check_all_modes(nn.dense, lambda a, w_, b_: a @ w_ + b_, RNG.standard_normal((3, 4)), w, b)


def test_nn_errors():
    with axle.device(DEVICE):
        with pytest.raises(ShapeError, match="conv2d") as e:
            nn.conv2d(np.ones((1, 2, 4, 4)), np.ones((3, 4, 3, 3)))
        assert "test_nn.py" in str(e.value)
        with pytest.raises(ShapeError, match="cross_entropy"):
            nn.cross_entropy(np.ones((3, 4)), np.array([1, 2]))
        with pytest.raises(DTypeError, match="one_hot"):
            nn.one_hot(np.array([1.5]), 3)


# ------------------------------------------------------------------ random


def test_random_is_deterministic_across_modes():
    def sample(k):
        k1, k2 = ar.split(k)
        return ar.uniform(k1, (4, 3)), ar.normal(k2, (5,), np.float64), ar.randint(k1, (6,), -3, 4), ar.split(k, 3)

    outs = [run_mode(m, sample, ar.key(123)) for m in MODES]
    for o in outs[1:]:
        for a, b in zip(o, outs[0]):
            np.testing.assert_array_equal(a, b)
    u, n, r, keys = outs[0]
    assert u.dtype == np.float32 and ((0 <= u) & (u < 1)).all()
    assert n.dtype == np.float64 and r.dtype == np.int32 and ((-3 <= r) & (r < 4)).all()
    assert len(set(keys.tolist())) == 3


def test_random_distribution_statistics():
    with axle.device(DEVICE):
        k1, k2 = ar.split(ar.key(0))
        u = np.asarray(ar.uniform(k1, (20000,), np.float64, minval=-2.0, maxval=3.0))
        z = np.asarray(ar.normal(k2, (20000,)))
        perm = np.asarray(ar.permutation(ar.key(5), 10))
        assert not np.array_equal(np.asarray(ar.uniform(ar.key(1), (8,))), np.asarray(ar.uniform(ar.key(2), (8,))))
        assert not np.array_equal(np.asarray(ar.fold_in(ar.key(1), 1)), np.asarray(ar.fold_in(ar.key(1), 2)))
    assert -2 <= u.min() and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert sorted(perm.tolist()) == list(range(10))
    with pytest.raises(DTypeError, match="key"):
        ar.uniform(np.float32(1.0), (2,))


# ------------------------------------------------------------------ optimizers


def quad_loss(p):
    return anp.sum((p["w"] - 3.0) ** 2) + anp.sum(p["b"][0] ** 2)


@pytest.mark.parametrize("make", [lambda: optimizers.sgd(0.1), lambda: optimizers.sgd(0.05, momentum=0.9),
                                  lambda: optimizers.sgd(0.05, momentum=0.9, nesterov=True),
                                  lambda: optimizers.adam(0.2)], ids=["sgd", "momentum", "nesterov", "adam"])
def test_optimizers_converge_and_jit_equals_eager(make):
    opt = make()
    start = {"w": np.zeros(3, np.float32), "b": [np.ones(2, np.float32)]}

    def train(params, jit):
        step = lambda p, s: opt.update(axle.grad(quad_loss)(p), s, p)  # noqa: E731
        step = axle.jit(step) if jit else step
        state = opt.init(params)
        for _ in range(150):
            params, state = step(params, state)
        return params

    with axle.device(DEVICE):
        eager = train(start, False)
        jitted = train(start, True)
    np.testing.assert_allclose(np.asarray(eager["w"]), 3.0, atol=2e-2)
    np.testing.assert_allclose(np.asarray(eager["b"][0]), 0.0, atol=2e-2)
    assert np.asarray(eager["w"]).dtype == np.float32
    np.testing.assert_allclose(np.asarray(jitted["w"]), np.asarray(eager["w"]), rtol=1e-5, atol=1e-6)


def test_sgd_momentum_matches_formula():
    opt = optimizers.sgd(0.1, momentum=0.5)
    p = {"x": np.array([1.0])}
    g = {"x": np.array([2.0])}
    with axle.device(DEVICE):
        s = opt.init(p)
        p1, s = opt.update(g, s, p)
        p2, s = opt.update(g, s, p1)
    # v1 = 2, x1 = 1 - 0.2 = 0.8; v2 = 0.5*2 + 2 = 3, x2 = 0.8 - 0.3 = 0.5
    np.testing.assert_allclose(np.asarray(p1["x"]), [0.8])
    np.testing.assert_allclose(np.asarray(p2["x"]), [0.5])


@pytest.mark.parametrize("layer", [
    lambda x: nn.avg_pool(x, 2, layout="NCW"),
    lambda x: nn.adaptive_avg_pool(x, 2, layout="NCW"),
    lambda x: nn.batch_norm(x, training=True)[0],
    lambda x: nn.group_norm(x, 1),
], ids=["avg_pool", "adaptive_avg_pool", "batch_norm", "group_norm"])
def test_bfloat16_layers_keep_bfloat16(layer):
    """bfloat16's NumPy kind is 'V', not 'f': these layers took it for an integer input
    and silently returned float32."""
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 4).astype(ml_dtypes.bfloat16)
    assert np.asarray(layer(x)).dtype == ml_dtypes.bfloat16
