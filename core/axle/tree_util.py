"""``axle.tree_util``: pytrees as jax has them.

A pytree is a nest of tuples, lists, dicts (keys sorted), namedtuples, ``None`` (a node
with no children) and registered node types, whose other values are leaves. ``jit``,
``grad``, ``jvp``, ``vmap`` and the optimizers flatten with the same registry, so a class
registered here (``register_pytree_node`` or ``register_dataclass``) can be passed to and
returned from all of them.

    leaves, td = tree_flatten({"w": w, "b": (b0, b1)})
    tree_unflatten(td, [2 * x for x in leaves])
    tree_map(lambda p, g: p - 0.1 * g, params, grads)
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from .errors import ArgumentError
from .frontend.pytree import TreeDef, flatten, register_pytree_node, tree_map, unflatten

__all__ = ["PyTreeDef", "register_dataclass", "register_pytree_node", "tree_flatten", "tree_leaves", "tree_map",
           "tree_structure", "tree_unflatten", "treedef_is_leaf"]

PyTreeDef = TreeDef
T = TypeVar("T", bound=type)


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """(leaves in order, structure); ``is_leaf(x)`` true stops the flattening at ``x``."""
    return flatten(tree, is_leaf)


def tree_unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """The tree of structure ``treedef`` holding ``leaves``."""
    return unflatten(treedef, list(leaves))


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    return flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> TreeDef:
    return flatten(tree, is_leaf)[1]


def treedef_is_leaf(treedef: TreeDef) -> bool:
    return treedef.kind == "leaf"


def register_dataclass(cls: T | None = None, data_fields: Sequence[str] | None = None,
                       meta_fields: Sequence[str] = ()) -> Any:
    """Registers a dataclass as a pytree node: ``data_fields`` (default: every field not in
    ``meta_fields``) are children, ``meta_fields`` (hashable) are part of the structure,
    so a change in them retraces a jit function. Usable as ``@register_dataclass``."""
    def register(c: T) -> T:
        if not dataclasses.is_dataclass(c):
            raise ArgumentError(f"register_dataclass: {c.__name__} is not a dataclass")
        names = [f.name for f in dataclasses.fields(c)]
        meta = tuple(meta_fields)
        data = tuple(data_fields) if data_fields is not None else tuple(n for n in names if n not in meta)
        unknown = sorted(set(data + meta) - set(names))
        if unknown or set(data) & set(meta):
            raise ArgumentError(f"register_dataclass({c.__name__}): data_fields {list(data)} and meta_fields "
                                f"{list(meta)} must be distinct fields of the class (fields: {names})")

        def flatten_fn(x: Any) -> tuple[list[Any], tuple[Any, ...]]:
            return [getattr(x, n) for n in data], tuple(getattr(x, n) for n in meta)

        def unflatten_fn(aux: tuple[Any, ...], children: Iterable[Any]) -> Any:
            kw = dict(zip(data, children))
            kw.update(zip(meta, aux))
            obj = object.__new__(c)  # as jax: no __init__/__post_init__ re-run on traced leaves
            for k, v in kw.items():
                object.__setattr__(obj, k, v)  # frozen dataclasses too
            return obj

        register_pytree_node(c, flatten_fn, unflatten_fn)
        return c

    return register if cls is None else register(cls)
