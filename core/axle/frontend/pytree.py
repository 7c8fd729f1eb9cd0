"""Pytrees: nested tuples, lists and dicts of leaves (arrays, scalars)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TreeDef:
    kind: str  # "leaf", "none", "tuple", "list", "dict"
    children: tuple["TreeDef", ...] = ()
    keys: tuple[Any, ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)


_LEAF = TreeDef("leaf")
_NONE = TreeDef("none")


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    leaves: list[Any] = []

    def rec(x: Any) -> TreeDef:
        if x is None:
            return _NONE
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return TreeDef("tuple", tuple(rec(c) for c in x))
        if isinstance(x, list):
            return TreeDef("list", tuple(rec(c) for c in x))
        if isinstance(x, dict):
            keys = tuple(sorted(x, key=repr))
            return TreeDef("dict", tuple(rec(x[k]) for k in keys), keys)
        leaves.append(x)
        return _LEAF

    td = rec(tree)
    return leaves, td


def unflatten(td: TreeDef, leaves: list[Any]) -> Any:
    it = iter(leaves)

    def rec(t: TreeDef) -> Any:
        if t.kind == "leaf":
            return next(it)
        if t.kind == "none":
            return None
        kids = [rec(c) for c in t.children]
        if t.kind == "tuple":
            return tuple(kids)
        if t.kind == "list":
            return kids
        return dict(zip(t.keys, kids))

    return rec(td)


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    leaves, td = flatten(tree)
    others = [flatten(r)[0] for r in rest]
    return unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])


def leaves(tree: Any) -> list[Any]:
    return flatten(tree)[0]
