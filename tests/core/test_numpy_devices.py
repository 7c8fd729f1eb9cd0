"""A representative slice of the frontend (numpy, nn, grad, random) on every installed
device, in every execution mode, against NumPy. Only the interpreter is guaranteed; the
compiled backends (cpu, opencl...) join automatically when they are installed."""
from __future__ import annotations

import numpy as np
import pytest
from modes_util import MODES, run_mode, tol

import axle
import axle.numpy as anp
import axle.random as ar
from axle import nn
from axle.frontend.pytree import flatten

RNG = np.random.default_rng(11)
X = RNG.standard_normal((6, 10)).astype(np.float32)
W = RNG.standard_normal((10, 4)).astype(np.float32)
LABELS = RNG.integers(0, 4, 6)


def program(x, w, labels):
    logits = x @ w
    loss, g = axle.value_and_grad(lambda w_: nn.cross_entropy(x @ w_, labels))(w)
    return (anp.sum(x + x * x), nn.softmax(logits), anp.argmax(logits, 1), x[labels], x[:, ::3].T,
            anp.mean(anp.tanh(x), axis=0), loss, g, ar.uniform(ar.key(3), (5,)))


def reference(x, w, labels):
    logits = x @ w
    e = np.exp(logits - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    onehot = np.eye(4, dtype=np.float32)[labels]
    loss = np.float32(-np.mean(np.sum(onehot * np.log(p), 1)))
    g = (x.T @ (p - onehot) / len(x)).astype(np.float32)
    return (np.sum(x + x * x), p, np.argmax(logits, 1), x[labels], x[:, ::3].T, np.mean(np.tanh(x), 0), loss, g,
            None)


@pytest.mark.parametrize("mode", MODES)
def test_frontend_on_every_device(mode):
    devices = axle.devices()
    assert any(d.name == "interpreter:0" for d in devices)
    want = reference(X, W, LABELS)
    baseline = run_mode(mode, program, X, W, LABELS, device="interpreter:0")
    for dev in devices:
        got = run_mode(mode, program, X, W, LABELS, device=dev.name)
        for i, (g, w, b) in enumerate(zip(flatten(got)[0], want, flatten(baseline)[0])):
            if w is None:  # random bits: identical on every backend
                np.testing.assert_array_equal(g, b, err_msg=f"{dev.name} {mode} output {i}")
                continue
            t = tol(np.asarray(w).dtype)
            np.testing.assert_allclose(g, w, rtol=max(t["rtol"], 1e-5) * 5, atol=max(t["atol"], 1e-6) * 5,
                                       err_msg=f"{dev.name} {mode} output {i}")


@pytest.mark.parametrize("dev", [d.name for d in axle.devices()])
def test_lax_reduce_takes_axes_in_any_order(dev):
    """lax.reduce sorts its axes (a set) for the IR; opencl read out of bounds on (1, 0)."""
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4) - 5
    placed = axle.device_put(x, dev)
    for axes in ((1, 0), (2, 0), (2, 1, 0), (0, 2, 1), (2, 1)):
        for kind in ("sum", "max"):
            want = getattr(x, kind)(axis=axes)
            eager = axle.lax.reduce(placed, kind, axes)
            jitted = axle.jit(lambda v, k=kind, a=axes: axle.lax.reduce(v, k, a), device=dev)(placed)
            for how, got in (("eager", eager), ("jit", jitted)):
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, err_msg=f"{kind} {axes} {how} on {dev}")
