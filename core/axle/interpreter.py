"""The NumPy reference interpreter: the living specification of every op and the
oracle every backend is tested against."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .ir.module import Computation, Module, Node
from .ir.ops import OPS, Op
from .ir.types import TensorType


def _check_input(p: Node, value: np.ndarray) -> np.ndarray:
    t = p.tensor_type
    arr = np.asarray(value)
    if arr.shape != t.shape or arr.dtype != t.dtype.np:
        raise TypeError(f"parameter {p.attr['index']} expects {t}, got {arr.dtype}{list(arr.shape)}")
    return arr


def eval_node(n: Node, args: Sequence[Any]) -> Any:
    """One node's value from its operands' values."""
    if n.op is Op.FUSION:
        return evaluate_computation(n.attr["computation"], args)
    kwargs = {k: v for k, v in n.attrs}
    if n.traits.control:  # the op's reference runs its sub-computations through this interpreter
        kwargs["call"] = evaluate_computation
    out = OPS[n.op].reference(*args, **kwargs)
    if isinstance(n.type, TensorType):
        out = np.asarray(out)
        assert out.shape == n.type.shape and out.dtype == n.type.dtype.np, (
            f"reference of {n.op.value} returned {out.dtype}{list(out.shape)}, expected {n.type}")
    return out


def evaluate_computation(comp: Computation, args: Sequence[Any]) -> Any:
    env: dict[int, Any] = {}
    for p, a in zip(comp.parameters, args, strict=True):
        env[p.uid] = _check_input(p, a)
    for n in comp.nodes:
        if n.op is Op.PARAMETER:
            continue
        env[n.uid] = eval_node(n, [env[o.uid] for o in n.operands])
    return env[comp.root.uid]


def evaluate(module: Module, *args: Any) -> list[np.ndarray]:
    """Runs the module's entry on NumPy arrays; returns its results as a list."""
    out = evaluate_computation(module.entry, [np.asarray(a) for a in args])
    return list(out) if isinstance(out, tuple) else [out]
