"""The target-independent optimizer."""
from __future__ import annotations

from typing import Any

from ..ir.module import Module


def optimize(module: Module, backend: Any = None) -> Module:
    """Runs the default pipeline (and the backend's passes) over a module.

    The pipeline itself arrives with the optimizer; until then modules are compiled
    as traced, one kernel per op."""
    return module
