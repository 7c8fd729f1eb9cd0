"""SPMD over several devices: ``pmap`` (one replica per slice of a leading axis) and
``shard_map`` (one replica per position of a mesh), with the collectives of
frontend/collectives.py (``axle.lax.psum``...) inside.

The function is traced once, for one replica's shapes, with its axis names bound to mesh
axes (an :class:`AxisEnv`); each collective resolves its axis names to explicit replica
groups at trace time, so the traced module holds plain IR collectives. The module is
compiled once per distinct device and run by one thread per replica, each in a
``replica_context`` of one rendezvous: the device runs the kernels between collectives,
the core's host communicator (ir/collectives.py) the collectives themselves, reached
through the partitioner's host clusters.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import distributed
from .. import numpy as anp
from ..autodiff.batching import move_axis
from ..autodiff.vectorize import _axes_per_leaf, _in_axes, _leaf_names, vmap_replicas
from ..backend import Device
from ..compiler import flags_key
from ..errors import ArgumentError, TracingError
from ..ir.collectives import run_replicas
from ..ir.traffic import collective_signature
from ..lru import LRU
from ..placement import resolve
from ..sharding import Mesh, NamedSharding, PartitionSpec
from .collectives import AxisEnv, axis_env, current_axis_env
from .device_put import ShardedArray, device_put
from .jit import Compiled, Lowered, jit, static_key
from .pytree import flatten, unflatten
from .source import user_location
from .tracing import Tracer, current_trace

# ------------------------------------------------------------------ running replicas


def _run_replicas(compiled: Sequence[Compiled], args: Sequence[Sequence[Any]]) -> list[Any]:
    """Replica r runs ``compiled[r]`` on ``args[r]``, a thread per replica meeting at one rendezvous."""
    return run_replicas(len(args), lambda r: compiled[r](*args[r]))


def _host(x: Any) -> np.ndarray:
    if isinstance(x, ShardedArray):
        return np.asarray(x)
    if isinstance(x, Tracer):
        raise TracingError("pmap/shard_map inside a traced function (jit, grad, vmap) is not offered: "
                           "put jit and grad inside the mapped function", where=user_location())
    return np.asarray(x)


def _compile_each(fn: Callable[..., Any], env: AxisEnv, example: Sequence[Any],
                  devices: Sequence[Device]) -> tuple[list[Compiled], Any]:
    """``fn`` traced once per distinct device (under ``env``) and compiled there; one
    entry per replica, and the output tree."""
    by_device: dict[Device, Compiled] = {}
    with axis_env(env):
        for d in devices:
            if d not in by_device:
                by_device[d] = jit(fn, device=d).lower(*example).compile()
    first = next(iter(by_device.values()))
    return [by_device[d] for d in devices], first.lowered.out_tree


Axis = int | None


def _leaf_size(x: Any, axis: int, name: str) -> int:
    shape = tuple(x.shape) if isinstance(x, (Tracer, ShardedArray)) else np.shape(x)
    if not -len(shape) <= axis < len(shape):
        raise ArgumentError(f"pmap: in_axes {axis} is out of range for {name} of shape {shape}", where=user_location())
    return int(shape[axis])


def _mapped_size(leaves: Sequence[Any], axes: Sequence[Axis], names: Sequence[str]) -> int:
    """The common size of the mapped axes, or an error naming each argument's."""
    sizes = [(name, _leaf_size(x, a, name)) for x, a, name in zip(leaves, axes, names) if a is not None]
    if not sizes:
        raise ArgumentError("pmap: no argument is mapped (every in_axes is None)", where=user_location())
    if len({s for _, s in sizes}) > 1:
        raise ArgumentError("pmap: the mapped axes differ in size: " + ", ".join(f"{n} has {s}" for n, s in sizes),
                            where=user_location())
    return sizes[0][1]


def _outputs(per_replica: Sequence[Any], out_tree: Any, out_axes: Any) -> Any:
    """Per output leaf: the replicas' values stacked along its out axis, or (None) replica 0's."""
    leaves = [flatten(o)[0] for o in per_replica]
    axes = _axes_per_leaf(out_axes, out_tree, "pmap out_axes")
    out = [np.asarray(leaves[0][k]) if a is None else
           np.stack([np.asarray(rep[k]) for rep in leaves], axis=_out_axis(a, np.ndim(leaves[0][k]), k))
           for k, a in enumerate(axes)]
    return unflatten(out_tree, [device_put(o) for o in out])


def _out_axis(axis: int, rank: int, k: int) -> int:
    if not -(rank + 1) <= axis <= rank:
        raise ArgumentError(f"pmap: out_axes {axis} is out of range for output {k} of per-replica rank {rank}",
                            where=user_location())
    return axis % (rank + 1)


def _nested_check() -> None:
    if current_axis_env() is not None:
        raise TracingError("pmap inside the function of another pmap or shard_map is not offered: map over both "
                           "axes at once with axle.shard_map on a 2-d Mesh", where=user_location())


def _summary(axis_name: str, n: int, per_leaf: Sequence[Sequence[np.ndarray]]) -> str:
    shapes = ", ".join(f"{p[0].dtype}{list(p[0].shape)}" for p in per_leaf)
    return f"{n} replicas of axis {axis_name!r} on ({shapes})"


def _digest(compiled: Compiled) -> str:
    """The traced module's collectives, hashed: processes whose collectives differ would
    make MPI calls that do not match."""
    return hashlib.sha256(collective_signature(compiled.lowered.module).encode()).hexdigest()


class PmapFunction:
    """``fn`` mapped over an axis of its arguments (``in_axes``), one replica per slice."""

    def __init__(self, fn: Callable[..., Any], axis_name: str | None, devices: Sequence[Any] | None,
                 in_axes: Any = 0, out_axes: Any = 0, static_broadcasted_argnums: int | Sequence[int] = ()) -> None:
        self.fn = fn
        self.axis_name = axis_name or "_pmap"
        self.devices = devices
        self.in_axes = in_axes
        self.out_axes = out_axes
        self.static = ((static_broadcasted_argnums,) if isinstance(static_broadcasted_argnums, int)
                       else tuple(static_broadcasted_argnums))
        # bounded like every executable cache (--jit_cache_size): a pmap fed ever new shapes
        # keeps only its most recent programs
        self._cache: LRU[tuple[list[Compiled], Any]] = LRU()

    def _split_static(self, args: Sequence[Any]) -> tuple[list[Any], Any, Callable[..., Any], tuple[Any, ...]]:
        """(dynamic args, their in_axes, fn taking only them, the static values)."""
        static = sorted({i % len(args) if -len(args) <= i < len(args) else i for i in self.static})
        if any(not 0 <= i < len(args) for i in static):
            raise ArgumentError(f"pmap: static_broadcasted_argnums {self.static} name an argument past the "
                                f"{len(args)} given", where=user_location())
        in_axes = self.in_axes
        if isinstance(in_axes, (tuple, list)):
            if len(in_axes) != len(args):
                raise ArgumentError(f"pmap: in_axes has {len(in_axes)} entries for {len(args)} positional arguments",
                                    where=user_location())
            in_axes = tuple(a for i, a in enumerate(in_axes) if i not in static)
        values = tuple(args[i] for i in static)
        dyn = [a for i, a in enumerate(args) if i not in static]
        if not static:
            return dyn, in_axes, self.fn, ()

        def fn(*xs: Any) -> Any:
            full, it = [], iter(xs)
            for i in range(len(args)):
                full.append(args[i] if i in static else next(it))
            return self.fn(*full)
        return dyn, in_axes, fn, values

    def __call__(self, *args: Any) -> Any:
        _nested_check()
        dyn, in_axes, fn, statics = self._split_static(args)
        leaves, tree = flatten(tuple(dyn))
        axes = _in_axes(in_axes, tree, "pmap")
        names = _leaf_names(tree, len(dyn))
        n = _mapped_size(leaves, axes, names)
        if self.devices is not None and len(self.devices) != n:
            mapped = ", ".join(name for name, a in zip(names, axes) if a is not None)
            raise ArgumentError(f"pmap: the mapped axis has size {n} ({mapped}) but {len(self.devices)} devices were "
                                "given: one replica per device", where=user_location())
        if current_trace() is not None or any(isinstance(x, Tracer) for x in leaves):
            return self._in_trace(fn, dyn, in_axes, n)
        devices = [resolve(d) for d in self.devices] if self.devices is not None else [resolve(None)] * n
        arrays = [_host(x) for x in leaves]
        per_leaf = [[a] * n if ax is None else list(np.moveaxis(a, ax, 0)) for a, ax in zip(arrays, axes)]
        # in a multi-process run (axle.distributed) the axis spans every process's replicas
        world = distributed.world()
        total = n * (world.process_count if world else 1)
        # the settings too (as jit's key): a program compiled before --check_indices or a
        # backend flag changed must not answer; static values by type and bits (static_key)
        key = (tree, tuple((p[0].shape, p[0].dtype.str) for p in per_leaf), tuple(axes), tuple(devices), total,
               static_key(statics), flags_key())
        try:
            hash(key)
        except TypeError:
            raise ArgumentError(f"pmap: static arguments must be hashable, got {list(statics)!r}",
                                where=user_location()) from None
        entry = self._cache.get(key)
        if entry is None:
            example = unflatten(tree, [p[0] for p in per_leaf])
            entry = self._cache.put(key, _compile_each(lambda *xs: fn(*xs), AxisEnv((self.axis_name,), (total,)),
                                                       example, devices))
            if world is not None:  # once per program: every process must run this one
                world.agree("a pmap's program", _summary(self.axis_name, n, per_leaf), _digest(entry[0][0]))
        compiled, out_tree = entry
        per = [unflatten(tree, [p[r] for p in per_leaf]) for r in range(n)]
        outs = run_replicas(n, lambda r: compiled[r](*per[r]), total=total,
                            first=world.process_index * n if world else 0, outer=world.allgather if world else None,
                            processes=world)
        return _outputs(outs, out_tree, self.out_axes)

    def lower(self, *args: Any) -> Lowered:
        """Replica 0's program for these arguments, on the first replica's device: its
        ``.explain()`` lists the collectives and the bytes each moves per step."""
        dyn, in_axes, fn, _ = self._split_static(args)
        leaves, tree = flatten(tuple(dyn))
        axes = _in_axes(in_axes, tree, "pmap")
        n = _mapped_size(leaves, axes, _leaf_names(tree, len(dyn)))
        example = [_host(x) if a is None else np.take(_host(x), 0, axis=a) for x, a in zip(leaves, axes)]
        device = resolve(self.devices[0]) if self.devices else resolve(None)
        with axis_env(AxisEnv((self.axis_name,), (n * distributed.process_count(),))):
            return jit(fn, device=device).lower(*unflatten(tree, example))

    def _in_trace(self, fn: Callable[..., Any], dyn: Sequence[Any], in_axes: Any, n: int) -> Any:
        """Inside jit, grad, vmap or a loop body: the replicas are one batch of the enclosing
        computation (its device), the collectives exchanges between the batch's rows."""
        if distributed.process_count() > 1:
            raise TracingError("pmap inside jit, grad or vmap over several processes is not offered: call the "
                               "pmap outermost (jit and grad inside it)", where=user_location())
        env = AxisEnv((self.axis_name,), (n,))

        def one(*xs: Any) -> Any:
            with axis_env(env):
                return fn(*xs)

        out = vmap_replicas(one, in_axes, 0, n)(*dyn)
        leaves, out_tree = flatten(out)
        axes = _axes_per_leaf(self.out_axes, out_tree, "pmap out_axes")
        moved = [x[0] if a is None else _move_out(x, _out_axis(a, len(x.shape) - 1, k)) for k, (x, a) in
                 enumerate(zip(leaves, axes))]
        return unflatten(out_tree, moved)


def _move_out(x: Any, axis: int) -> Any:
    return x if axis == 0 else move_axis(x, 0, axis, len(x.shape))


def pmap(fn: Callable[..., Any] | None = None, axis_name: str | None = None, *, devices: Sequence[Any] | None = None,
         in_axes: Any = 0, out_axes: Any = 0, static_broadcasted_argnums: int | Sequence[int] = ()) -> Any:
    """``fn`` run once per slice of its arguments' mapped axis, each slice a replica on its
    own device (``devices``; default: the default device for all), with ``axis_name``
    bound for the collectives inside (``axle.lax.psum(x, axis_name)``...).

    ``in_axes`` (as vmap's: an int, None for an argument every replica gets whole, or one
    entry per positional argument, each an int, None or a tree of them) says which axis
    of each argument is mapped; ``out_axes`` (the same for the outputs) where the
    replicas' results are stacked; None takes replica 0's (the output must be the same on
    every replica: a psum makes it so). ``static_broadcasted_argnums``: arguments passed
    as Python values to every replica (hashable; a new value compiles again).

    jit, grad and vmap compose inside ``fn``; called inside jit, grad, vmap or a loop
    body, the pmap runs its replicas as one batch of the enclosing computation, on its
    device (docs/distributed.md)."""
    if fn is None:
        return lambda f: PmapFunction(f, axis_name, devices, in_axes, out_axes, static_broadcasted_argnums)
    return PmapFunction(fn, axis_name, devices, in_axes, out_axes, static_broadcasted_argnums)


# ------------------------------------------------------------------ sharded arrays and shard_map


def _specs(specs: Any, n: int, what: str) -> list[PartitionSpec]:
    if isinstance(specs, PartitionSpec):
        return [specs] * n
    out = list(specs)
    if len(out) != n or not all(isinstance(s, PartitionSpec) for s in out):
        raise ArgumentError(f"shard_map: {what} must be a PartitionSpec or one per {what[:-6]} ({n}), got {specs!r}",
                            where=user_location())
    return out


def shard_map(fn: Callable[..., Any], mesh: Mesh, in_specs: Any, out_specs: Any) -> Callable[..., Any]:
    """``fn`` run once per mesh position on that position's blocks of the arguments
    (split as ``in_specs`` says, one PartitionSpec per argument, arrays only), with the
    mesh's axis names bound for the collectives inside. The results are assembled as
    ``out_specs`` says; over mesh axes an out spec leaves out, the result must be
    replicated (a psum makes it so) and the first replica's block is taken."""
    env = AxisEnv(mesh.axis_names, tuple(mesh.devices.shape))
    cache: dict[Any, tuple[list[Compiled], Any]] = {}

    def mapped(*args: Any) -> Any:
        if distributed.process_count() > 1:
            raise ArgumentError("shard_map: a mesh of one process's devices only; across processes use axle.pmap",
                                where=user_location())
        _nested_check()
        if current_trace() is not None or any(isinstance(a, Tracer) for a in args):
            return _shard_map_in_trace(fn, mesh, env, args, in_specs, out_specs)
        arrays = [_host(a) for a in args]
        ins = [NamedSharding(mesh, s) for s in _specs(in_specs, len(arrays), "in_specs")]
        for i, (a, s) in enumerate(zip(arrays, ins)):
            s.check(a.shape, f"shard_map argument {i}")
        devices = mesh.flat_devices()
        per = [[s.block(a, r) for a, s in zip(arrays, ins)] for r in range(mesh.size)]
        key = tuple((a.shape, a.dtype.str) for a in arrays)
        if key not in cache:
            cache[key] = _compile_each(fn, env, per[0], devices)
        compiled, out_tree = cache[key]
        outs = _run_replicas(compiled, per)
        leaves = [flatten(o)[0] for o in outs]
        outs_s = [NamedSharding(mesh, s) for s in _specs(out_specs, len(leaves[0]), "out_specs")]
        whole = [s.assemble([np.asarray(rep[k]) for rep in leaves]) for k, s in enumerate(outs_s)]
        return unflatten(out_tree, [device_put(w) for w in whole])

    return mapped


def _shard_map_in_trace(fn: Callable[..., Any], mesh: Mesh, env: AxisEnv, args: Sequence[Any], in_specs: Any,
                        out_specs: Any) -> Any:
    """shard_map inside jit, grad, vmap or a loop body: the mesh positions are one batch
    of the enclosing computation (as pmap's, vectorize.vmap_replicas), each argument's
    blocks stacked in replica order, the results' blocks put back together."""
    ins = [NamedSharding(mesh, s) for s in _specs(in_specs, len(args), "in_specs")]
    stacked = []
    for i, (a, s) in enumerate(zip(args, ins)):
        a = a if isinstance(a, Tracer) else _host(a)
        s.check(tuple(a.shape), f"shard_map argument {i}")
        stacked.append(anp.stack([s.block(a, r) for r in range(mesh.size)]))

    def one(*xs: Any) -> Any:
        with axis_env(env):
            return fn(*xs)

    out = vmap_replicas(one, 0, 0, mesh.size)(*stacked)
    leaves, out_tree = flatten(out)
    outs = [NamedSharding(mesh, s) for s in _specs(out_specs, len(leaves), "out_specs")]
    return unflatten(out_tree, [_assemble_traced(x, s) for x, s in zip(leaves, outs)])


def _assemble_traced(stacked: Any, sharding: NamedSharding) -> Any:
    """The whole array from the replicas' blocks (rows of ``stacked``), as
    NamedSharding.assemble does: the first replica holding each block gives it."""
    rank = len(stacked.shape) - 1
    first: dict[tuple[int, ...], int] = {}
    for r in range(sharding.mesh.size):
        first.setdefault(tuple(sharding.block_index(d, r)[0] for d in range(rank)), r)
    counts = [sharding.block_index(d, 0)[1] for d in range(rank)]

    def build(at: tuple[int, ...]) -> Any:
        if len(at) == rank:
            return stacked[first[at]]
        return anp.concatenate([build(at + (i,)) for i in range(counts[len(at)])], axis=len(at))
    return build(())
