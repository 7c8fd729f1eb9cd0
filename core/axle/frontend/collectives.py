"""The collectives used inside ``axle.pmap`` and ``axle.shard_map`` (frontend/spmd.py):
``axle.lax.psum``, ``pmean``, ``pmax``, ``pmin``, ``all_gather``, ``psum_scatter``,
``all_to_all``, ``ppermute`` and ``axis_index``, jax's names and semantics.

An SPMD trace binds its axis names to mesh axes (an :class:`AxisEnv`); each function here
resolves its axis names to explicit replica groups at trace time, so the traced module
holds plain IR collectives (ir/collectives.py)."""
from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError, TracingError
from ..ir.ops import Op
from .array import Array
from .bind import bind
from .pytree import tree_map
from .source import user_location
from .tracing import Tracer

Value = Any
AxisName = str | tuple[str, ...]


# ------------------------------------------------------------------ axis names at trace time


@dataclass(frozen=True)
class AxisEnv:
    """The mesh axes an SPMD trace binds: names, sizes and replica-id strides (row-major)."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def count(self) -> int:
        return math.prod(self.sizes)

    def stride(self, name: str) -> int:
        return math.prod(self.sizes[self.names.index(name) + 1:])

    def size(self, name: str) -> int:
        return self.sizes[self.names.index(name)]


_ENV = threading.local()


@contextlib.contextmanager
def axis_env(env: AxisEnv) -> Iterator[None]:
    prev = getattr(_ENV, "env", None)
    _ENV.env = env
    try:
        yield
    finally:
        _ENV.env = prev


def current_axis_env() -> AxisEnv | None:
    """The axes of the pmap/shard_map being traced (None: outside one)."""
    env: AxisEnv | None = getattr(_ENV, "env", None)
    return env


def _resolve(what: str, axis_name: AxisName) -> tuple[AxisEnv, tuple[str, ...]]:
    env: AxisEnv | None = getattr(_ENV, "env", None)
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    if env is None:
        raise TracingError(f"{what}: axis name {axis_name!r} is not bound: call it inside axle.pmap or "
                           "axle.shard_map", where=user_location())
    unknown = [n for n in names if n not in env.names]
    if unknown or len(set(names)) != len(names):
        raise TracingError(f"{what}: axis name(s) {axis_name!r} are not distinct names of the bound axes "
                           f"{env.names}", where=user_location())
    return env, names


def replica_groups(env: AxisEnv, names: Sequence[str]) -> tuple[tuple[int, ...], int]:
    """(flat replica_groups, group_size) of the axes ``names``: replicas that differ only
    along them share a group, ordered as those axes' row-major index in the given order."""
    size = math.prod(env.size(n) for n in names)
    groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for r in range(env.count):
        coords = dict(zip(env.names, np.unravel_index(r, env.sizes)))
        key = tuple(int(coords[n]) for n in env.names if n not in names)
        pos = 0
        for n in names:
            pos = pos * env.size(n) + int(coords[n])
        groups.setdefault(key, []).append((pos, r))
    flat = tuple(r for key in sorted(groups) for _, r in sorted(groups[key]))
    return flat, size


def _group_attrs(what: str, axis_name: AxisName) -> tuple[dict[str, Any], int]:
    env, names = _resolve(what, axis_name)
    flat, size = replica_groups(env, names)
    return {"replica_groups": flat, "group_size": size}, size


def _array(x: Value) -> Value:
    return x if isinstance(x, (Tracer, Array)) else np.asarray(x)


def _reduce(kind: str) -> Callable[[Value, AxisName], Value]:
    def f(x: Value, axis_name: AxisName) -> Value:
        attrs, _ = _group_attrs(f"p{kind}", axis_name)
        return tree_map(lambda v: bind(Op.ALL_REDUCE, _array(v), kind=kind, **attrs), x)

    f.__name__ = f"p{kind}"
    f.__doc__ = f"The {kind} over the replicas of ``axis_name`` (a name or a tuple of names), on every replica."
    return f


psum = _reduce("sum")
pmax = _reduce("max")
pmin = _reduce("min")


def pmean(x: Value, axis_name: AxisName) -> Value:
    """The mean over the replicas of ``axis_name``."""
    _, size = _group_attrs("pmean", axis_name)
    return tree_map(lambda v: psum(v, axis_name) / np.asarray(size, np.asarray(v).dtype
                                                                if not isinstance(v, (Tracer, Array)) else v.dtype),
                    x)


def _dim(what: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ArgumentError(f"{what}: axis {axis} is out of range for rank {rank}", where=user_location())
    return axis % rank


def all_gather(x: Value, axis_name: AxisName, *, axis: int = 0, tiled: bool = False) -> Value:
    """Every replica's ``x`` of the group: stacked on a new ``axis`` (or, ``tiled``,
    concatenated along ``axis``), in the group's order."""
    attrs, _ = _group_attrs("all_gather", axis_name)

    def one(v: Value) -> Value:
        v = _array(v)
        if tiled:
            return bind(Op.ALL_GATHER, v, dimension=_dim("all_gather", axis, v.ndim), **attrs)
        d = _dim("all_gather", axis, v.ndim + 1)
        shape = list(v.shape)
        shape.insert(d, 1)
        return bind(Op.ALL_GATHER, v.reshape(tuple(shape)), dimension=d, **attrs)
    return tree_map(one, x)


def psum_scatter(x: Value, axis_name: AxisName, *, scatter_dimension: int = 0, tiled: bool = False) -> Value:
    """The group's sum, split along ``scatter_dimension``: replica i of the group gets
    block i (``tiled``), or row i with that dimension dropped (its size must be the group's)."""
    attrs, size = _group_attrs("psum_scatter", axis_name)

    def one(v: Value) -> Value:
        v = _array(v)
        d = _dim("psum_scatter", scatter_dimension, v.ndim)
        if not tiled and v.shape[d] != size:
            raise ArgumentError(f"psum_scatter: dimension {d} of {tuple(v.shape)} must be the group size {size} "
                                "(or pass tiled=True)", where=user_location())
        out = bind(Op.REDUCE_SCATTER, v, kind="sum", dimension=d, **attrs)
        return out if tiled else out.reshape(tuple(s for i, s in enumerate(out.shape) if i != d))
    return tree_map(one, x)


def all_to_all(x: Value, axis_name: AxisName, split_axis: int, concat_axis: int, *, tiled: bool = True) -> Value:
    """Block j of ``x`` along ``split_axis`` goes to replica j of the group, which
    concatenates what it receives along ``concat_axis`` (jax's tiled form)."""
    if not tiled:
        raise ArgumentError("all_to_all: only the tiled form is offered (tiled=True)", where=user_location())
    attrs, _ = _group_attrs("all_to_all", axis_name)
    return tree_map(lambda v: bind(Op.ALL_TO_ALL, _array(v), split_dimension=_dim("all_to_all", split_axis, v.ndim),
                                   concat_dimension=_dim("all_to_all", concat_axis, v.ndim), **attrs), x)


def ppermute(x: Value, axis_name: str, perm: Sequence[tuple[int, int]]) -> Value:
    """Sends ``x`` from axis index i to axis index j for each (i, j) of ``perm``; an index
    no pair targets gets zeros."""
    env, (name,) = _resolve("ppermute", axis_name)
    size, stride = env.size(name), env.stride(name)
    pairs = [(int(i), int(j)) for i, j in perm]
    if any(not (0 <= v < size) for p in pairs for v in p):
        raise ArgumentError(f"ppermute: {pairs} names an index outside axis {name!r} of size {size}",
                            where=user_location())
    flat = []
    for r in range(env.count):  # each replica at index i of the axis sends along every pair from i
        i = (r // stride) % size
        for src, dst in pairs:
            if src == i:
                flat += [r, r + (dst - i) * stride]
    return tree_map(lambda v: bind(Op.COLLECTIVE_PERMUTE, _array(v), source_target_pairs=tuple(flat)), x)


def axis_index(axis_name: str) -> Value:
    """This replica's index along the mesh axis ``axis_name`` (s32[])."""
    env, (name,) = _resolve("axis_index", axis_name)
    rid = bind(Op.REPLICA_ID)
    return (rid // np.int32(env.stride(name))) % np.int32(env.size(name))
