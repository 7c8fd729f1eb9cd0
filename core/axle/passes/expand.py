"""Expanding extended primitives a device does not claim into their decompositions.

An extended primitive (``Traits.extended``: gather, scatter, the dynamic slices...) runs
on a device only when the device claims it. For any other device the compile path runs
:func:`expand_extended` before partitioning: each unclaimed extended node whose op-table
entry has a ``decomposition`` is replaced by it (core primitives only, which the device
then claims like any others); one without a decomposition stays and goes to the host
fallback. What was expanded is returned, for the placement summary and ``explain``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..ir.builder import Builder
from ..ir.module import Module, Node
from ..ir.ops import OPS
from .rewrite import rebuild_module

#: ``claimed(node)``: whether the device runs ``node`` as it is
Claimed = Callable[[Node], bool]


def expand_node(node: Node) -> Node:
    """``node``'s decomposition (core primitives), carrying its source location."""
    fn = OPS[node.op].decomposition
    assert fn is not None, f"{node.op.value} has no decomposition"
    b = Builder(f"decompose_{node.op.name.lower()}")
    b.loc = node.loc
    return fn(b, node)


def expand_extended(module: Module, claimed: Claimed) -> tuple[Module, Counter[str]]:
    """``module`` with every unclaimed extended node that has a decomposition expanded,
    and how many nodes of each op were expanded."""
    done: Counter[str] = Counter()
    if not any(n.traits.extended for c in module.computations() for n in c.nodes):
        return module, done  # (most modules: a walk, not a rebuild; a compile expands twice)

    def rewrite(n: Node) -> Node | None:
        if not n.traits.extended or OPS[n.op].decomposition is None or claimed(n):
            return None
        done[n.op.value] += 1
        return expand_node(n)

    return rebuild_module(module, rewrite), done
