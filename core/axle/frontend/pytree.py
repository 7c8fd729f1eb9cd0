"""Pytrees: nested tuples, lists, dicts, namedtuples and registered node types of leaves
(arrays, scalars). ``axle.tree_util`` is the public face of this module; ``jit``, ``grad``,
``jvp`` and ``vmap`` flatten their arguments and results with it, so a node type registered
here flows through all of them.

``flatten`` and ``unflatten`` sit on every jit call, so they are plain recursive
functions (a nested closure that calls itself is a reference cycle, which kept every
call's arrays alive until the next garbage collection) and tree definitions are
interned: equal structures are the same object, so hashing and comparing a cache key
costs nothing."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ArgumentError


class TreeDef:
    """The structure of a pytree; ``kind`` is "leaf", "none", "tuple", "list", "dict",
    "namedtuple" (keys: the class) or "custom" (keys: the registered class and the
    flatten function's auxiliary data). Build with :func:`treedef` (interned), compare by
    identity: two equal structures are the same object, so ``==`` and ``hash`` agree."""

    __slots__ = ("kind", "children", "keys", "num_leaves", "__weakref__")

    def __init__(self, kind: str, children: tuple[TreeDef, ...], keys: tuple[Any, ...]) -> None:
        self.kind = kind
        self.children = children
        self.keys = keys
        self.num_leaves: int = 1 if kind == "leaf" else sum(c.num_leaves for c in children)

    @property
    def num_nodes(self) -> int:
        return 1 + sum(c.num_nodes for c in self.children)

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """The tree of this structure holding ``leaves`` (as :func:`tree_unflatten`)."""
        return unflatten(self, list(leaves))

    def __repr__(self) -> str:
        if self.kind in ("leaf", "none"):
            return self.kind
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.keys, self.children))
        if self.kind in ("namedtuple", "custom"):
            return f"{self.keys[0].__name__}({inner})"
        return f"{self.kind}({inner})"

    def __reduce__(self) -> tuple:
        return treedef, (self.kind, self.children, self.keys)


_INTERNED: dict[tuple, TreeDef] = {}


def treedef(kind: str, children: tuple[TreeDef, ...] = (), keys: tuple[Any, ...] = ()) -> TreeDef:
    """The one TreeDef of this structure (children are interned, so their ids identify them)."""
    key = (kind, tuple(id(c) for c in children), keys)
    try:
        td = _INTERNED.get(key)
    except TypeError:
        raise ArgumentError(f"pytree: the auxiliary data {keys[1:]!r} of a {kind} node is not hashable; "
                            f"a registered node's flatten function must return hashable aux data") from None
    if td is None:
        td = _INTERNED.setdefault(key, TreeDef(kind, children, keys))
    return td


_LEAF = treedef("leaf")
_NONE = treedef("none")

#: Registered node types: class -> (flatten: obj -> (children, aux), unflatten: (aux, children) -> obj)
_NODES: dict[type, tuple[Callable[[Any], tuple[Iterable[Any], Any]], Callable[[Any, Iterable[Any]], Any]]] = {}


def register_pytree_node(cls: type, flatten_fn: Callable[[Any], tuple[Iterable[Any], Any]],
                         unflatten_fn: Callable[[Any, Iterable[Any]], Any]) -> None:
    """Makes instances of ``cls`` pytree nodes: ``flatten_fn(obj) -> (children, aux)``
    with hashable ``aux``, ``unflatten_fn(aux, children) -> obj`` (jax's signature)."""
    if cls in _NODES or cls in (tuple, list, dict, type(None)):
        raise ArgumentError(f"register_pytree_node: {cls.__name__} is already a pytree node type")
    _NODES[cls] = (flatten_fn, unflatten_fn)


IsLeaf = Callable[[Any], bool] | None


def _flatten(x: Any, leaves: list[Any], is_leaf: IsLeaf = None) -> TreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return _LEAF
    if x is None:
        return _NONE
    if isinstance(x, tuple):
        kids = tuple([_flatten(c, leaves, is_leaf) for c in x])
        if hasattr(x, "_fields"):  # a namedtuple: a node that rebuilds its own class
            return treedef("namedtuple", kids, (type(x),))
        return treedef("tuple", kids)
    if isinstance(x, list):
        return treedef("list", tuple([_flatten(c, leaves, is_leaf) for c in x]))
    if isinstance(x, dict):
        keys = tuple(sorted(x, key=repr))
        return treedef("dict", tuple([_flatten(x[k], leaves, is_leaf) for k in keys]), keys)
    node = _NODES.get(type(x))
    if node is not None:
        children, aux = node[0](x)
        return treedef("custom", tuple([_flatten(c, leaves, is_leaf) for c in children]), (type(x), aux))
    leaves.append(x)
    return _LEAF


_CONTAINERS = (tuple, list, dict)


def flatten(tree: Any, is_leaf: IsLeaf = None) -> tuple[list[Any], TreeDef]:
    """(leaves, structure) of ``tree``; ``is_leaf(x)`` true makes the subtree ``x`` one leaf."""
    if is_leaf is None and type(tree) is list and not any(
            c is None or isinstance(c, _CONTAINERS) or type(c) in _NODES for c in tree):
        # The jit hot path: a flat argument list of arrays.
        return list(tree), _flat_list(len(tree))
    leaves: list[Any] = []
    td = _flatten(tree, leaves, is_leaf)
    return leaves, td


def flat_list_treedef(n: int) -> TreeDef:
    """The structure ``flatten`` gives a list of ``n`` leaves (the common jit argument list)."""
    td = _FLAT.get(n)
    if td is None:
        td = _FLAT.setdefault(n, treedef("list", (_LEAF,) * n))
    return td


_flat_list = flat_list_treedef


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
    if kind == "namedtuple":
        return t.keys[0](*kids)
    if kind == "custom":
        return _NODES[t.keys[0]][1](t.keys[1], kids)
    return dict(zip(t.keys, kids))


def unflatten(td: TreeDef, leaves: list[Any]) -> Any:
    if td is _LEAF:
        if len(leaves) != 1:
            raise ArgumentError(f"tree_unflatten: the structure {td} takes 1 leaf, got {len(leaves)}")
        return leaves[0]
    if len(leaves) != td.num_leaves:
        raise ArgumentError(f"tree_unflatten: the structure {td} takes {td.num_leaves} leaves, got {len(leaves)}")
    return _unflatten(td, iter(leaves))


def _node_of(x: Any) -> tuple[str, tuple[Any, ...], list[Any]] | None:
    """(kind, keys, children) of one level of ``x``, None for a leaf: how ``x`` compares
    with a TreeDef node without flattening below it."""
    if x is None:
        return "none", (), []
    if isinstance(x, tuple):
        return ("namedtuple", (type(x),), list(x)) if hasattr(x, "_fields") else ("tuple", (), list(x))
    if isinstance(x, list):
        return "list", (), list(x)
    if isinstance(x, dict):
        keys = tuple(sorted(x, key=repr))
        return "dict", keys, [x[k] for k in keys]
    node = _NODES.get(type(x))
    if node is not None:
        children, aux = node[0](x)
        return "custom", (type(x), aux), list(children)
    return None


def _matches(node: tuple[str, tuple[Any, ...], list[Any]] | None, td: TreeDef) -> bool:
    return node is not None and node[0] == td.kind and node[1] == td.keys and len(node[2]) == len(td.children)


def flatten_up_to(td: TreeDef, tree: Any, what: str = "tree") -> list[Any]:
    """The subtrees of ``tree`` at the leaves of ``td`` (``td`` must be a prefix of the
    structure of ``tree``): how tree_map pairs several trees, and vmap's axes their arguments."""
    out: list[Any] = []
    _up_to(td, tree, out, what)
    return out


def _up_to(td: TreeDef, x: Any, out: list[Any], what: str) -> None:
    if td.kind == "leaf":
        out.append(x)
        return
    node = _node_of(x)
    if not _matches(node, td):
        got = "a leaf" if node is None else repr(flatten(x)[1])
        raise ArgumentError(f"{what}: expected a node of structure {td}, got {got}")
    assert node is not None
    for c, sub in zip(td.children, node[2]):
        _up_to(c, sub, out, what)


def broadcast_prefix(prefix: Any, td: TreeDef, what: str, is_leaf: Callable[[Any], bool]) -> list[Any]:
    """One entry of ``prefix`` per leaf of ``td``: a leaf of ``prefix`` (``is_leaf``)
    stands for the whole subtree at its place (vmap's in_axes, jax's tree prefixes)."""
    out: list[Any] = []
    _prefix(prefix, td, out, what, is_leaf)
    return out


def _prefix(p: Any, td: TreeDef, out: list[Any], what: str, is_leaf: Callable[[Any], bool]) -> None:
    if is_leaf(p):
        out.extend([p] * td.num_leaves)
        return
    node = _node_of(p)
    if td.kind == "leaf" or not _matches(node, td):
        raise ArgumentError(f"{what}: {p!r} is not a prefix of the argument's structure {td}")
    assert node is not None
    for c, sub in zip(td.children, node[2]):
        _prefix(sub, c, out, what, is_leaf)


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf = None) -> Any:
    """``fn`` applied leafwise; each tree of ``rest`` has ``tree``'s structure (or a
    finer one: its subtrees at ``tree``'s leaves are passed whole)."""
    leaves, td = flatten(tree, is_leaf)
    others = [flatten_up_to(td, r, f"tree_map: tree {i + 1}") for i, r in enumerate(rest)]
    return unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])


def leaves(tree: Any, is_leaf: IsLeaf = None) -> list[Any]:
    return flatten(tree, is_leaf)[0]
