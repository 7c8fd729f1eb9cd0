"""Optimizers as small pure functions over pytrees of parameters.

    opt = axle.optimizers.adam(1e-3)
    state = opt.init(params)
    params, state = opt.update(grads, state, params)   # jit-able: no hidden state

The state is a pytree of arrays, so a whole training step (loss, grad, update) can be one
``axle.jit`` function."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from . import numpy as anp
from .frontend.pytree import tree_map

Params = Any


class Optimizer(NamedTuple):
    """``init(params) -> state`` and ``update(grads, state, params) -> (params, state)``."""

    init: Callable[[Params], Any]
    update: Callable[[Params, Any, Params], tuple[Params, Any]]


def sgd_step(params: Params, grads: Params, learning_rate: float) -> Params:
    """params - learning_rate * grads, leaf by leaf."""
    return tree_map(lambda p, g: p - learning_rate * g, params, grads)


def sgd(learning_rate: float, momentum: float = 0.0, nesterov: bool = False) -> Optimizer:
    """Gradient descent, with (heavy-ball or Nesterov) momentum when ``momentum > 0``:
    v <- momentum * v + g;  p <- p - lr * v  (Nesterov: p <- p - lr * (g + momentum * v))."""

    def init(params: Params) -> Any:
        return tree_map(anp.zeros_like, params) if momentum else ()

    def update(grads: Params, state: Any, params: Params) -> tuple[Params, Any]:
        if not momentum:
            return sgd_step(params, grads, learning_rate), state
        velocity = tree_map(lambda v, g: momentum * v + g, state, grads)
        step = tree_map(lambda v, g: g + momentum * v, velocity, grads) if nesterov else velocity
        return tree_map(lambda p, s: p - learning_rate * s, params, step), velocity

    return Optimizer(init, update)


def adam(learning_rate: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """Adam (Kingma & Ba) with bias correction. State: (step, first moments, second moments)."""

    def init(params: Params) -> Any:
        zeros = tree_map(anp.zeros_like, params)
        return (anp.asarray(0.0), zeros, tree_map(anp.zeros_like, params))

    def update(grads: Params, state: Any, params: Params) -> tuple[Params, Any]:
        step, m, v = state
        step = step + 1.0
        m = tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        v = tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        corr1 = 1.0 - anp.power(b1, step)
        corr2 = 1.0 - anp.power(b2, step)

        def apply(p: Any, m_: Any, v_: Any) -> Any:
            c1, c2 = anp.astype(corr1, p.dtype), anp.astype(corr2, p.dtype)  # keep the params' dtype
            return p - learning_rate * (m_ / c1) / (anp.sqrt(v_ / c2) + eps)

        new = tree_map(apply, params, m, v)
        return new, (step, m, v)

    return Optimizer(init, update)
