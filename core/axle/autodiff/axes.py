"""Moving one axis of a traced value: shared by the batching rules and the collectives'
replica-batch rules (which batching imports, so it cannot be batching's)."""
from __future__ import annotations

from typing import Any

from .. import lax

Value = Any


def move_axis(x: Value, src: int, dst: int, rank: int) -> Value:
    """``x`` with its dimension ``src`` moved to position ``dst`` (a transpose, or x itself)."""
    if src == dst:
        return x
    perm = [d for d in range(rank) if d != src]
    perm.insert(dst, src)
    return lax.transpose(x, perm)
