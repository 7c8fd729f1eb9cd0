"""``--check_indices``: runtime checks of traced indices.

Inside ``jit`` an index's value is unknown while tracing, so an out-of-range traced index
follows the documented semantics (clamped gathers, filled ``take``, dropped scatter
updates). With ``AXLE_FLAGS=--check_indices`` (``config.check_indices``) each such op also
computes a flag, ``any(index out of range)``; the flags become extra outputs of the
compiled module, and the jit call raises an :class:`axle.errors.OutOfBoundsError` naming the op
and the user's line when one is set. Concrete (eager) indices are checked at once.
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import lax
from ..config import config
from ..errors import OutOfBoundsError
from ..ir.module import Module, Node
from ..registry import REGISTRY
from .source import user_location
from .tracing import Tracer

#: module -> (message, where) of each flag output, which follow the user's outputs
_CHECKS: weakref.WeakKeyDictionary[Module, tuple[tuple[str, str | None], ...]] = weakref.WeakKeyDictionary()


def enabled() -> bool:
    return config.check_indices


def add_index_check(out_of_range: Any, message: str) -> None:
    """Records the bool flag ``out_of_range`` (any shape) of a traced index op on the
    current jit trace; a no-op when checks are off or nothing is being traced for jit."""
    if not config.check_indices or not isinstance(out_of_range, Tracer):
        return
    checks = getattr(out_of_range.trace, "index_checks", None)
    if checks is not None:
        checks.append((_any(out_of_range), message, user_location()))


def _any(flag: Tracer) -> Tracer:
    """``axle.numpy.any(flag)`` in primitives (axle.numpy is built on this module)."""
    if flag.dtype != np.bool_:
        flag = lax.convert(flag, np.dtype(np.bool_))
    return lax.reduce(flag, "or", tuple(range(flag.ndim))) if flag.ndim else flag


def raise_now(out_of_range: np.ndarray, message: str) -> None:
    """The eager form: a concrete index is checked immediately."""
    if np.any(out_of_range):
        raise OutOfBoundsError(message, where=user_location())


def replayed(flag: Any, message: str, where: str | None) -> None:
    """A flag of ``axle.grad``'s traced forward pass, replayed in the caller's mode: a
    concrete value is checked now, a value of an enclosing jit trace joins its checks."""
    if isinstance(flag, Tracer):
        checks = getattr(flag.trace, "index_checks", None)
        if checks is not None:
            checks.append((flag, message, where))
    elif bool(np.asarray(flag)):
        raise OutOfBoundsError(message + " (found by --check_indices)", where=where)


def with_checks(trace: Any, nodes: list[Node]) -> tuple[list[Node], tuple[tuple[str, str | None], ...]]:
    """The module's outputs plus one flag per recorded check, and the checks' messages."""
    checks = getattr(trace, "index_checks", ())
    if not checks:
        return nodes, ()
    flags = [trace.to_node(flag) for flag, _, _ in checks]
    return nodes + flags, tuple((message, where) for _, message, where in checks)


def register(module: Module, checks: tuple[tuple[str, str | None], ...]) -> None:
    if checks:
        _CHECKS[module] = checks


def has_checks(module: Module) -> bool:
    return module in _CHECKS


def split_and_raise(module: Module, outs: Sequence[Any]) -> list[Any]:
    """The user's outputs of a checked module; raises for the first flag that is set."""
    checks = _CHECKS[module]
    n = len(outs) - len(checks)
    for (message, where), flag in zip(checks, outs[n:]):
        if bool(np.asarray(REGISTRY.backend_for(flag.device).to_host(flag))):
            raise OutOfBoundsError(message + " (found by --check_indices)", where=where)
    return list(outs[:n])
