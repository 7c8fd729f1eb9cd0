"""Running one function in axle's four execution modes (shared by the frontend tests)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import axle
from axle.frontend.pytree import flatten, tree_map

MODES = ("eager", "jit", "jit_scope", "auto")
DEVICE = "interpreter:0"


def _host(out: Any) -> Any:
    return tree_map(lambda v: np.asarray(v), out)


def run_mode(mode: str, fn: Callable[..., Any], *args: Any, device: str = DEVICE) -> Any:
    """fn(*args) in ``mode``; array arguments are placed on ``device`` first; returns host values."""
    dev = axle.device(device)
    with dev:
        placed = axle.device_put(args, dev)
        if mode == "eager":
            return _host(fn(*placed))
        if mode == "jit":
            return _host(axle.jit(fn, device=dev)(*placed))
        if mode == "jit_scope":
            before = axle.stats()["eager_ops"]
            with axle.jit_scope():
                out = fn(*placed)
                assert axle.stats()["eager_ops"] == before, "ops inside jit_scope ran eagerly"
            return _host(out)
        if mode == "auto":
            previous = axle.config.jit_level
            axle.config.update(jit_level="auto")
            try:
                before = axle.stats()["eager_ops"]
                out = _host(fn(*placed))
                assert axle.stats()["eager_ops"] == before, "ops in auto mode ran eagerly"
                return out
            finally:
                axle.config.update(jit_level=previous)
    raise ValueError(mode)


def tol(dt: Any) -> dict[str, float]:
    dt = np.dtype(dt)
    if dt == np.float16:
        return {"rtol": 2e-3, "atol": 2e-3}
    if dt == np.float32:
        return {"rtol": 2e-5, "atol": 1e-6}
    if dt == np.float64:
        return {"rtol": 1e-11, "atol": 1e-12}
    return {"rtol": 0, "atol": 0}


def check_all_modes(fn: Callable[..., Any], ref: Callable[..., Any], *args: Any, tolerance: dict | None = None) -> None:
    """fn in every mode equals NumPy's ``ref`` within tolerance, and the modes agree with
    each other to the last few ulps (same program, same primitives)."""
    want = ref(*args)
    outs = {m: run_mode(m, fn, *args) for m in MODES}
    w_leaves = flatten(want)[0]
    for m, got in outs.items():
        g_leaves = flatten(got)[0]
        assert len(g_leaves) == len(w_leaves), m
        for g, w in zip(g_leaves, w_leaves):
            w = np.asarray(w)
            assert g.shape == w.shape, f"{m}: shape {g.shape} != NumPy {w.shape}"
            assert g.dtype == w.dtype, f"{m}: dtype {g.dtype} != NumPy {w.dtype}"
            t = tolerance or tol(w.dtype)
            np.testing.assert_allclose(g, w, equal_nan=True, err_msg=f"mode {m}", **t)
    base = flatten(outs["eager"])[0]
    for m in MODES[1:]:
        for g, b in zip(flatten(outs[m])[0], base):
            t = tol(b.dtype)
            np.testing.assert_allclose(g, b, rtol=t["rtol"] / 10, atol=t["atol"] / 10, equal_nan=True,
                                       err_msg=f"mode {m} differs from eager")
