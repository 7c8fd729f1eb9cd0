"""Bottom-up rebuilding of computations: the one traversal every rewrite pass shares."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.builder import make_node
from ..ir.literal import Literal
from ..ir.module import Computation, Module, Node
from ..ir.ops import Op
from ..ir.types import TensorType

#: A rewrite: given a node whose operands are already rewritten, a replacement or None.
Rewrite = Callable[[Node], "Node | None"]


def rebuild(comp: Computation, fn: Rewrite, recurse: bool = True) -> Computation:
    """Rebuilds ``comp`` operands-first, offering each node to ``fn``.

    Returns ``comp`` itself when nothing changed (passes use identity to report
    'changed'). Parameters are kept as they are. ``recurse=False``: ``fn`` sees a control
    op as it is (it handles the sub-computations itself)."""
    env: dict[int, Node] = {}
    for n in comp.nodes:
        if n.op is Op.PARAMETER:
            env[n.uid] = n
            continue
        ops = tuple(env[o.uid] for o in n.operands)
        m = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
        if m.traits.control and recurse:
            m = rebuild_called(m, fn)
        r = fn(m)
        if r is not None and r is not m:
            assert r.type == m.type, f"rewrite of {m.op.value} changed its type {m.type} -> {r.type}"
            m = r
        env[n.uid] = m
    root = env[comp.root.uid]
    return comp if root is comp.root else comp.with_root(root)


def rebuild_called(n: Node, fn: Rewrite) -> Node:
    """``n`` with the computations it calls (a loop's condition and body, a conditional's
    branches) rebuilt by ``fn`` too: every rewrite works inside sub-computations."""
    return map_called(n, lambda c: rebuild(c, fn))


def map_called(n: Node, fn: Callable[[Computation], Computation]) -> Node:
    """``n`` with each computation it calls replaced by ``fn`` of it (``n`` itself when
    ``fn`` changes none): a pass over whole computations (fusion) reaches loop bodies,
    conditions and branches through it."""
    attrs = tuple((k, _map_attr(v, fn)) for k, v in n.attrs)
    return n if all(a[1] is b[1] for a, b in zip(attrs, n.attrs)) else n.replace(attrs=attrs)


def _map_attr(v: object, fn: Callable[[Computation], Computation]) -> object:
    if isinstance(v, Computation):
        return fn(v)
    if isinstance(v, tuple) and v and all(isinstance(c, Computation) for c in v):
        out = tuple(fn(c) for c in v)
        return v if all(a is b for a, b in zip(out, v)) else out
    return v


def rebuild_module(module: Module, fn: Rewrite) -> Module:
    entry = rebuild(module.entry, fn)
    return module if entry is module.entry else module.with_entry(entry)


def like(n: Node, op: Op, operands: tuple[Node, ...] | list[Node], **attrs: object) -> Node:
    """A new node carrying ``n``'s source location."""
    return make_node(op, list(operands), attrs, loc=n.loc)


def splat(n: Node) -> np.ndarray | None:
    """The single value every element of ``n`` has, if ``n`` is a constant (or a broadcast
    of one) with all elements bitwise-equal; else None."""
    while n.op is Op.BROADCAST_IN_DIM:
        n = n.operands[0]
    if n.op is not Op.CONSTANT:
        return None
    arr = n.attr["value"].array
    if arr.size == 0:
        return None
    flat = arr.reshape(-1)
    first = flat[0]
    if arr.size == 1:
        return np.asarray(first)
    same = flat.view(np.uint8).reshape(arr.size, -1) == flat[:1].view(np.uint8).reshape(1, -1)
    return np.asarray(first) if bool(np.all(same)) else None


def is_splat(n: Node, value: object) -> bool:
    """True when every element of ``n`` equals ``value`` bitwise (so -0.0 is not 0.0)."""
    v = splat(n)
    if v is None:
        return False
    want = np.asarray(value).astype(v.dtype)
    return v.tobytes() == want.tobytes()


def full_like(n: Node, value: object) -> Node:
    """A scalar constant broadcast to ``n``'s type (cheap: fusion recomputes it inline)."""
    t = n.tensor_type
    c = make_node(Op.CONSTANT, (), {"value": Literal(np.asarray(value).astype(t.dtype.np))}, loc=n.loc)
    if not t.shape:
        return c
    return make_node(Op.BROADCAST_IN_DIM, [c], {"shape": t.shape, "broadcast_dimensions": ()}, loc=n.loc)


def nbytes(t: object) -> int:
    return t.nbytes if isinstance(t, TensorType) else 0
