"""Scheduling: an execution order of a computation that keeps peak memory low.

Greedy list scheduling (the idea of XLA's list scheduler): among the nodes whose
operands are ready, run the one that frees the most bytes net of what it allocates,
ties going to the traced order. A value is freed when its last reader runs; parameters
and constants are never freed (the caller and the executable own them)."""
from __future__ import annotations

import heapq

from ..ir.module import Computation, Node
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType

#: ops whose result is a view of another value (no buffer of their own)
ALIASING = frozenset({Op.GET_TUPLE_ELEMENT, Op.TUPLE})
#: ops whose storage is owned outside the temp arena
NOT_TEMP = frozenset({Op.PARAMETER, Op.CONSTANT})


def value_bytes(n: Node) -> int:
    """Bytes a node's own buffer(s) take (0 for views)."""
    if n.op in ALIASING:
        return 0
    t = n.type
    if isinstance(t, TupleType):
        return sum(e.nbytes for e in t.elements)
    return t.nbytes if isinstance(t, TensorType) else 0


def _storage(n: Node) -> list[Node]:
    """The nodes owning the buffers a value lives in (through views)."""
    if n.op is Op.GET_TUPLE_ELEMENT:
        return _storage(n.operands[0])
    if n.op is Op.TUPLE:
        return [s for o in n.operands for s in _storage(o)]
    return [n]


def schedule(comp: Computation) -> list[Node]:
    """Every node of ``comp`` once, operands before users."""
    nodes = comp.nodes
    index = {n.uid: i for i, n in enumerate(nodes)}
    users = comp.users
    pending = {n.uid: len({o.uid for o in n.operands}) for n in nodes}
    # readers of each storage node still to run, through views
    readers: dict[int, set[int]] = {n.uid: set() for n in nodes}
    for n in nodes:
        if n.op in ALIASING:
            continue
        for o in n.operands:
            for s in _storage(o):
                readers[s.uid].add(n.uid)
    keep = {s.uid for s in _storage(comp.root)}

    def gain(n: Node) -> int:
        freed = 0
        for o in {s.uid: s for op in n.operands for s in _storage(op)}.values():
            if o.op in NOT_TEMP or o.uid in keep:
                continue
            if readers[o.uid] == {n.uid}:
                freed += value_bytes(o)
        return freed - value_bytes(n)

    order: list[Node] = []
    heap: list[tuple[int, int, int]] = []
    for n in nodes:
        if pending[n.uid] == 0:
            heapq.heappush(heap, (-gain(n), index[n.uid], n.uid))
    done: set[int] = set()
    while heap:
        g, i, uid = heapq.heappop(heap)
        n = nodes[i]
        if uid in done:
            continue
        if -g != gain(n):  # stale priority: readers changed since it was pushed
            heapq.heappush(heap, (-gain(n), i, uid))
            continue
        done.add(uid)
        order.append(n)
        if n.op not in ALIASING:
            for o in n.operands:
                for s in _storage(o):
                    readers[s.uid].discard(uid)
                    if len(readers[s.uid]) == 1:  # its last reader now frees it: re-rank
                        (r,) = readers[s.uid]
                        if pending[r] == 0 and r not in done:
                            heapq.heappush(heap, (-gain(nodes[index[r]]), index[r], r))
        for u in users[uid]:
            pending[u.uid] -= 1
            if pending[u.uid] == 0:
                heapq.heappush(heap, (-gain(u), index[u.uid], u.uid))
    assert len(order) == len(nodes), "schedule missed nodes (cycle?)"
    return order
