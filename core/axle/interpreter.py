"""The NumPy reference interpreter: the living specification of every op and the
oracle every backend is tested against."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .ir.collectives import run_replicas
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


@dataclass(frozen=True)
class _Step:
    """One node of a computation, ready to run: its reference, attributes and operand slots."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    operands: tuple[int, ...]
    result: tuple[tuple[int, ...], np.dtype] | None  # shape and dtype; None for a tuple


def _fusion_fn(comp: Computation) -> Callable[..., Any]:
    return lambda *xs: evaluate_computation(comp, xs)


@functools.lru_cache(maxsize=1024)
def _program(comp: Computation) -> tuple[_Step, ...]:
    """``comp``'s nodes after its parameters as steps over value slots (slot i: the i-th of
    ``comp.nodes``), made once per computation: a loop runs its body's steps every trip."""
    slot = {n.uid: i for i, n in enumerate(comp.nodes)}
    steps = []
    for n in comp.nodes[len(comp.parameters):]:
        kwargs = {k: v for k, v in n.attrs}
        if n.op is Op.FUSION:
            fn, kwargs = _fusion_fn(n.attr["computation"]), {}
        else:
            fn = OPS[n.op].reference
            if n.traits.control:
                kwargs["call"] = evaluate_computation
        result = (n.type.shape, n.type.dtype.np) if isinstance(n.type, TensorType) else None
        steps.append(_Step(fn, kwargs, tuple(slot[o.uid] for o in n.operands), result))
    return tuple(steps)


def evaluate_computation(comp: Computation, args: Sequence[Any]) -> Any:
    values: list[Any] = [_check_input(p, a) for p, a in zip(comp.parameters, args, strict=True)]
    for step in _program(comp):
        out = step.fn(*[values[i] for i in step.operands], **step.kwargs)
        if step.result is not None:
            out = np.asarray(out)
            assert out.shape == step.result[0] and out.dtype == step.result[1], (
                f"a reference returned {out.dtype}{list(out.shape)}, expected {step.result[1]}{list(step.result[0])}")
        values.append(out)
    return values[-1] if comp.nodes[-1] is comp.root else values[comp.nodes.index(comp.root)]


def evaluate(module: Module, *args: Any) -> list[np.ndarray]:
    """Runs the module's entry on NumPy arrays; returns its results as a list."""
    out = evaluate_computation(module.entry, [np.asarray(a) for a in args])
    return list(out) if isinstance(out, tuple) else [out]


def evaluate_spmd(module: Module, replica_args: Sequence[Sequence[Any]]) -> list[list[np.ndarray]]:
    """Runs the module as an SPMD program: replica r on ``replica_args[r]``, each replica in a
    thread of its own, its collectives exchanging values with the others through one
    rendezvous (ir/collectives.py). Threads, not a lock-step walk over the nodes, so that
    collectives inside loops and conditionals meet like any others. Returns each replica's
    results. A replica that raises stops the others and its error is raised here."""
    return run_replicas(len(replica_args), lambda r: evaluate(module, *replica_args[r]))
