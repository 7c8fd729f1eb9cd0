"""``axle.nn.relu``'s derivative on every installed backend: 1 where x > 0 and 0 elsewhere,
0 at x == 0 (as jax.nn.relu, torch.relu and ONNX Runtime's training gradient; maximum's own
rule splits the tie and gave 0.5), at -0, +-tiny, +-inf and NaN too, eagerly and under jit,
vmap, jvp, vjp, the Jacobians and second order."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import nn
from axle.testing import require_backend

BACKENDS = sorted(axle.REGISTRY.backends())


def _points(dt: type) -> np.ndarray:
    tiny = np.finfo(dt).tiny
    return np.array([0.0, -0.0, tiny, -tiny, np.inf, -np.inf, np.nan, 1.5, -2.0], dt)


def _mask(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (x > 0).astype(x.dtype)


def _loss(x: Any) -> Any:
    return anp.sum(nn.relu(x) * 3.0)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_relu_derivative_is_zero_at_zero(backend: str, dt: type) -> None:
    require_backend(backend)
    dev = f"{backend}:0"
    x = _points(dt)
    want = _mask(x)
    with axle.device(dev):
        eager = np.asarray(axle.grad(_loss)(x))
    assert eager.dtype == dt
    np.testing.assert_array_equal(eager, 3.0 * want)
    jitted = np.asarray(axle.jit(axle.grad(_loss), device=dev)(x))
    np.testing.assert_array_equal(jitted, 3.0 * want)
    inner_jit = np.asarray(axle.jit(axle.grad(axle.jit(_loss)), device=dev)(x))
    np.testing.assert_array_equal(inner_jit, 3.0 * want)
    # ReLU after ReLU: the outer one sees exact zeros from the inner one
    twice = np.asarray(axle.jit(axle.grad(lambda v: anp.sum(nn.relu(nn.relu(v)))), device=dev)(x))
    np.testing.assert_array_equal(twice, want)
    per_example = np.asarray(axle.jit(axle.vmap(axle.grad(nn.relu)), device=dev)(x))
    np.testing.assert_array_equal(per_example, want)

    def transforms(v: Any, t: Any, ct: Any) -> Any:
        y, tan = axle.jvp(nn.relu, (v,), (t,))
        _, pull = axle.vjp(nn.relu, v)
        return y, tan, pull(ct)[0], axle.jacrev(nn.relu)(v), axle.jacfwd(nn.relu)(v)

    t = np.full(x.shape, 2.0, dt)
    y, tan, ct, jr, jf = axle.jit(transforms, device=dev)(x, t, t)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(np.asarray(y), np.where(x > 0, x, np.where(np.isnan(x), x, 0)))
    np.testing.assert_array_equal(np.asarray(tan), 2.0 * want)
    np.testing.assert_array_equal(np.asarray(ct), 2.0 * want)
    np.testing.assert_array_equal(np.asarray(jr), np.diag(want))
    np.testing.assert_array_equal(np.asarray(jf), np.diag(want))


@pytest.mark.parametrize("backend", BACKENDS)
def test_relu_second_order(backend: str) -> None:
    require_backend(backend)
    dev = f"{backend}:0"
    x = np.array([-1.0, 0.0, 0.0, 2.0])
    # d/dx sum(relu'(x) * x) = relu'(x) (relu'' is 0): 0 at the zeros
    gg = axle.jit(axle.grad(lambda v: anp.sum(axle.grad(_loss)(v) * v)), device=dev)(x)
    np.testing.assert_array_equal(np.asarray(gg), 3.0 * _mask(x))
    h = axle.jit(axle.hessian(_loss), device=dev)(x)
    np.testing.assert_array_equal(np.asarray(h), np.zeros((4, 4)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_relu_derivative_inside_a_scan(backend: str) -> None:
    require_backend(backend)
    from axle import lax
    x = np.array([-1.0, 0.0, 2.0, 0.0])

    def loss(v: Any) -> Any:  # carry: relu(c + x_t) (exact zeros reach it); ys: relu(x_t)
        c, ys = lax.scan(lambda c, xt: (nn.relu(c + xt), nn.relu(xt)), 0.0, v)
        return anp.sum(ys) + c

    # c: 0, relu(-1)=0, relu(0)=0 (a tie: no gradient), relu(2)=2, relu(2)=2
    got = axle.jit(axle.grad(loss), device=f"{backend}:0")(x)
    np.testing.assert_array_equal(np.asarray(got), [0.0, 0.0, 2.0, 1.0])
