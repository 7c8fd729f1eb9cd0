"""Pytrees: nested tuples, lists and dicts of leaves (arrays, scalars).

``flatten`` and ``unflatten`` sit on every jit call, so they are plain recursive
functions (a nested closure that calls itself is a reference cycle, which kept every
call's arrays alive until the next garbage collection) and tree definitions are
interned: equal structures are the same object, so hashing and comparing a cache key
costs nothing."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


class TreeDef:
    """The structure of a pytree; ``kind`` is "leaf", "none", "tuple", "list" or "dict".
    Build with :func:`treedef` (interned), compare by identity."""

    __slots__ = ("kind", "children", "keys", "num_leaves", "__weakref__")

    def __init__(self, kind: str, children: tuple[TreeDef, ...], keys: tuple[Any, ...]) -> None:
        self.kind = kind
        self.children = children
        self.keys = keys
        self.num_leaves: int = 1 if kind == "leaf" else sum(c.num_leaves for c in children)

    def __repr__(self) -> str:
        if self.kind in ("leaf", "none"):
            return self.kind
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.keys, self.children))
        return f"{self.kind}({inner})"

    def __reduce__(self) -> tuple:
        return treedef, (self.kind, self.children, self.keys)


_INTERNED: dict[tuple, TreeDef] = {}


def treedef(kind: str, children: tuple[TreeDef, ...] = (), keys: tuple[Any, ...] = ()) -> TreeDef:
    """The one TreeDef of this structure (children are interned, so their ids identify them)."""
    key = (kind, tuple(id(c) for c in children), keys)
    td = _INTERNED.get(key)
    if td is None:
        td = _INTERNED.setdefault(key, TreeDef(kind, children, keys))
    return td


_LEAF = treedef("leaf")
_NONE = treedef("none")


def _flatten(x: Any, leaves: list[Any]) -> TreeDef:
    if x is None:
        return _NONE
    if isinstance(x, tuple) and not hasattr(x, "_fields"):  # a namedtuple is a leaf
        return treedef("tuple", tuple([_flatten(c, leaves) for c in x]))
    if isinstance(x, list):
        return treedef("list", tuple([_flatten(c, leaves) for c in x]))
    if isinstance(x, dict):
        keys = tuple(sorted(x, key=repr))
        return treedef("dict", tuple([_flatten(x[k], leaves) for k in keys]), keys)
    leaves.append(x)
    return _LEAF


_CONTAINERS = (tuple, list, dict)


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    if type(tree) is list and not any(c is None or isinstance(c, _CONTAINERS) for c in tree):
        # The jit hot path: a flat argument list of arrays.
        return list(tree), _flat_list(len(tree))
    leaves: list[Any] = []
    td = _flatten(tree, leaves)
    return leaves, td


def _flat_list(n: int) -> TreeDef:
    td = _FLAT.get(n)
    if td is None:
        td = _FLAT.setdefault(n, treedef("list", (_LEAF,) * n))
    return td


_FLAT: dict[int, TreeDef] = {}


def _unflatten(t: TreeDef, it: Any) -> Any:
    kind = t.kind
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    kids = [_unflatten(c, it) for c in t.children]
    if kind == "tuple":
        return tuple(kids)
    if kind == "list":
        return kids
    return dict(zip(t.keys, kids))


def unflatten(td: TreeDef, leaves: list[Any]) -> Any:
    if td is _LEAF:
        return leaves[0]
    return _unflatten(td, iter(leaves))


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    leaves, td = flatten(tree)
    others = [flatten(r)[0] for r in rest]
    return unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])


def leaves(tree: Any) -> list[Any]:
    return flatten(tree)[0]
