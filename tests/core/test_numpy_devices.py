"""A representative slice of the frontend (numpy, nn, grad, random) on every installed
device, in every execution mode, against NumPy. Only the interpreter is guaranteed; the
compiled backends (cpu, opencl...) join automatically when they are installed."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


# ---- placement: uncommitted operands follow a committed array (issue 12) ----------------
# Python scalars, lists, NumPy data and arrays made without naming a device are uncommitted:
# an op mixing them with an array committed to a non-default device runs on that device.
# Each case is f(x, xp) with xp = axle.numpy, or numpy for the reference value.
BASE = np.array([-2.0, 0.5, 3.0], np.float32)
MIXED: dict[str, Callable[[Any, Any], Any]] = {
    "x + scalar": lambda x, xp: x + 1.5,
    "scalar - x (reversed)": lambda x, xp: 1.5 - x,
    "scalar * x (reversed)": lambda x, xp: 2 * x,
    "scalar / x (reversed)": lambda x, xp: 1.0 / x,
    "x ** scalar": lambda x, xp: x ** 2,
    "x // scalar": lambda x, xp: x // 2.0,
    "x % scalar": lambda x, xp: x % 2.0,
    "x > scalar": lambda x, xp: x > 0.0,
    "scalar == x": lambda x, xp: 0.5 == x,
    "x - numpy": lambda x, xp: x - np.full(3, 0.25, np.float32),
    "numpy + x (reversed)": lambda x, xp: np.full(3, 0.25, np.float32) + x,
    "list + x (reversed)": lambda x, xp: [1.0, 2.0, 3.0] + x,
    "x * uncommitted array": lambda x, xp: x * xp.asarray(np.float32(3)),
    "add": lambda x, xp: xp.add(x, 2.0),
    "subtract (scalar first)": lambda x, xp: xp.subtract(2.0, x),
    "maximum": lambda x, xp: xp.maximum(x, 0),
    "minimum": lambda x, xp: xp.minimum(1.0, x),
    "power": lambda x, xp: xp.power(x, 3),
    "logaddexp": lambda x, xp: xp.logaddexp(x, 0.0),
    "where (scalar branch)": lambda x, xp: xp.where(x > 0, x, 0.0),
    "where (host condition)": lambda x, xp: xp.where(np.array([True, False, True]), 1.0, x),
    "clip": lambda x, xp: xp.clip(x, -1.0, 1.0),
}
NON_DEFAULT = [d.name for d in axle.devices() if d != axle.default_device()]


def _lazily(mode: str, fn: Callable[[], Any]) -> Any:
    if mode == "eager":
        return fn()
    if mode == "jit_scope":
        with axle.jit_scope():
            return fn()
    previous = axle.config.jit_level
    axle.config.update(jit_level="auto")
    try:
        return fn().block_until_ready()
    finally:
        axle.config.update(jit_level=previous)


def _ops_on_default_device() -> int:
    counts = axle.stats()["per_device"].get(axle.default_device().name, {})
    return counts.get("eager_ops", 0) + counts.get("lazy_ops", 0)


@pytest.mark.parametrize("mode", ("eager", "jit_scope", "auto"))
@pytest.mark.parametrize("dev", NON_DEFAULT)
def test_uncommitted_operands_follow_the_committed_array(dev, mode):
    x = axle.device_put(BASE, dev)
    for name, fn in MIXED.items():
        before = _ops_on_default_device()
        got = _lazily(mode, lambda fn=fn: fn(x, anp))
        assert got.device.name == dev, f"{name} on {dev} ({mode}) ran on {got.device.name}"
        # the host operands travel, not their broadcasts: nothing runs on the default device
        assert _ops_on_default_device() == before, f"{name} ({mode}): ops ran on the default device"
        np.testing.assert_allclose(np.asarray(got), fn(BASE.copy(), np), rtol=1e-6, atol=1e-6,
                                   err_msg=f"{name} on {dev} ({mode})")


@pytest.mark.parametrize("dev", NON_DEFAULT)
def test_arrays_committed_to_different_devices_are_refused(dev):
    other = "interpreter:0" if dev != "interpreter:0" else axle.default_device().name
    a, b = axle.device_put(BASE, dev), axle.device_put(BASE, other)
    for fn in (lambda: a + b, lambda: anp.where(a > 0, b, 1.0), lambda: anp.maximum(b, a)):
        with pytest.raises(axle.errors.DeviceError, match="committed to different devices") as e:
            fn()
        assert dev in str(e.value) and other in str(e.value) and "test_numpy_devices.py" in str(e.value)


def test_results_keep_their_placement():
    assert NON_DEFAULT, "only the default device is installed"
    dev = NON_DEFAULT[0]
    x = axle.device_put(BASE, dev)
    assert x.committed and (x + 1.0).committed and anp.sum(x * 2).committed
    loose = anp.asarray(BASE)  # no device named: the default device, uncommitted
    assert loose.device == axle.default_device() and not loose.committed and not (loose + 1.0).committed
    assert axle.jit(lambda v: v + 1.0, device=dev)(loose).committed
    assert not axle.jit(lambda v: v + 1.0)(loose).committed


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


@pytest.mark.parametrize("dev", NON_DEFAULT)
def test_like_functions_make_their_array_on_xs_device(dev):
    """zeros_like/ones_like/full_like/empty_like without device=: x's device (the array API
    standard infers it from x), committed when x is; they were made on the default device."""
    x = axle.device_put(BASE, dev)
    for fn, want in ((anp.zeros_like, 0.0), (anp.ones_like, 1.0), (lambda v: anp.full_like(v, 7.0), 7.0),
                     (anp.empty_like, 0.0)):
        out = fn(x)
        assert out.device.name == dev and out.committed
        np.testing.assert_array_equal(np.asarray(out), np.full_like(BASE, want))
    with axle.device(dev):
        loose = anp.asarray(BASE)  # made there as the default device of the block: uncommitted
    out = anp.zeros_like(loose)
    assert out.device.name == dev and not out.committed
    named = anp.zeros_like(x, device="interpreter:0")
    assert named.device.name == "interpreter:0" and named.committed
