"""Forward mode and vmap on every installed backend: ``jvp``, ``jacfwd``, ``jacrev`` and
``hessian`` under ``jit`` against central finite differences in float64 and against each
other; ``vmap(grad)`` per-example gradients and nested vmap against Python loops, with
kernel counts that do not depend on the batch size."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.testing import require_backend

BACKENDS = sorted(axle.REGISTRY.backends())
RNG = np.random.default_rng(5)


def _f(x: Any) -> Any:
    """R^4 -> R^3 with transcendental, reduce, dot and movement ops on the way."""
    m = anp.reshape(anp.concatenate([x, x[::-1] * 0.5]), (2, 4))
    return anp.sum(anp.tanh(m @ anp.sin(x + 1.0))) * x[:3] + anp.exp(x[1:] / 4)


def _scalar(x: Any) -> Any:
    return anp.sum(anp.sin(x) * x[::-1]) + anp.max(x) * anp.sum(x ** 2)


def _numeric_jacobian(f: Any, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    cols = [(np.asarray(f(x + eps * e)) - np.asarray(f(x - eps * e))) / (2 * eps) for e in np.eye(x.size)]
    return np.stack(cols, axis=-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_mode_and_jacobians_against_finite_differences(backend: str) -> None:
    require_backend(backend)
    dev = f"{backend}:0"
    x = RNG.uniform(-1, 1, 4)
    x[np.argmax(x)] += 0.5  # a clear maximum: no tie on the max's kink
    with axle.device("interpreter:0"):
        want_j = _numeric_jacobian(_f, x)
        want_h = _numeric_jacobian(axle.grad(_scalar), x)
    t = RNG.standard_normal(4)
    out, tan = axle.jit(lambda x, t: axle.jvp(_f, (x,), (t,)), device=dev)(x, t)
    np.testing.assert_allclose(np.asarray(tan), want_j @ t, rtol=1e-6, atol=1e-8)
    jf = np.asarray(axle.jit(axle.jacfwd(_f), device=dev)(x))
    jr = np.asarray(axle.jit(axle.jacrev(_f), device=dev)(x))
    np.testing.assert_allclose(jf, want_j, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jr, jf, rtol=1e-12, atol=1e-13)
    h = np.asarray(axle.jit(axle.hessian(_scalar), device=dev)(x))
    np.testing.assert_allclose(h, want_h, rtol=1e-6, atol=1e-7)
    _, f_jvp = axle.linearize(_f, x)
    with axle.device(dev):
        np.testing.assert_allclose(np.asarray(f_jvp(t)), want_j @ t, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_per_example_gradients_and_nesting_match_loops(backend: str) -> None:
    require_backend(backend)
    dev = f"{backend}:0"
    w = RNG.standard_normal((3, 2)).astype(np.float32)
    xs = RNG.standard_normal((5, 4, 3)).astype(np.float32)

    def loss(w: Any, x: Any) -> Any:
        return anp.mean(anp.logaddexp(0.0, x @ w) - (x @ w) * 0.3)

    got = axle.jit(axle.vmap(axle.grad(loss), in_axes=(None, 0)), device=dev)(w, xs)
    with axle.device("interpreter:0"):
        want = np.stack([np.asarray(axle.grad(loss)(w, x)) for x in xs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    # one batched computation: the kernels per call do not depend on the batch size
    step = axle.jit(axle.vmap(axle.grad(loss), in_axes=(None, 0)), device=dev)
    kernels = {n: step.lower(w, np.zeros((n, 4, 3), np.float32)).compile().report()["kernels"] for n in (4, 32)}
    assert kernels[4] == kernels[32], kernels
    pair = axle.vmap(axle.vmap(lambda a, b: anp.dot(a, b), in_axes=(None, 0)), in_axes=(0, None))
    a, b = xs[0], xs[1]
    np.testing.assert_allclose(np.asarray(axle.jit(pair, device=dev)(a, b)), a @ b.T, rtol=1e-5, atol=1e-6)


# loops and conditionals: forward mode and vmap through while and conditional

_ROWS = RNG.standard_normal((4, 3))


def _looped(x: Any) -> Any:
    """R^3 -> R^3: a scan with a cond inside, then a while_loop whose trip count depends on x."""
    def step(c: Any, r: Any) -> Any:
        return axle.lax.cond(r.sum() > 0, lambda a: a * anp.sin(a + r), lambda a: a + anp.tanh(a * r), c), c.sum()

    c, ys = axle.lax.scan(step, x, _ROWS)
    c, _ = axle.lax.while_loop(lambda s: anp.sum(s[0] * s[0]) < 30.0, lambda s: (s[0] * 1.3 + 0.1, s[1] + 1.0),
                               (c, 0.0))
    return c * ys.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_mode_and_vmap_through_loops_and_conditionals(backend: str) -> None:
    require_backend(backend)
    dev = f"{backend}:0"
    x = np.array([0.4, -0.7, 0.9])
    with axle.device("interpreter:0"):
        want_j = _numeric_jacobian(_looped, x)
    t = RNG.standard_normal(3)
    _, tan = axle.jit(lambda x, t: axle.jvp(_looped, (x,), (t,)), device=dev)(x, t)
    np.testing.assert_allclose(np.asarray(tan), want_j @ t, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(axle.jit(axle.jacfwd(_looped), device=dev)(x)), want_j, rtol=1e-6,
                               atol=1e-8)
    xs = np.stack([x, x * 2.0, -x, x * 0.1])  # different trip counts and branches per example
    with axle.device("interpreter:0"):
        want = np.stack([np.asarray(_looped(v)) for v in xs])
    np.testing.assert_allclose(np.asarray(axle.jit(axle.vmap(_looped), device=dev)(xs)), want, rtol=1e-12,
                               atol=1e-12)
