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

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import distributed
from ..backend import Device
from ..errors import ArgumentError, TracingError
from ..ir.collectives import run_replicas
from ..placement import resolve
from ..sharding import Mesh, NamedSharding, PartitionSpec
from .collectives import AxisEnv, axis_env
from .device_put import ShardedArray, device_put
from .jit import Compiled, jit
from .pytree import flatten, unflatten
from .source import user_location
from .tracing import Tracer

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


def _stack_outputs(per_replica: Sequence[Any], out_tree: Any, axis: int) -> Any:
    leaves = [flatten(o)[0] for o in per_replica]
    stacked = [np.stack([np.asarray(rep[k]) for rep in leaves], axis=axis) for k in range(len(leaves[0]))]
    return unflatten(out_tree, [device_put(s) for s in stacked])


class PmapFunction:
    """``fn`` mapped over the leading axis of its arguments, one replica per slice."""

    def __init__(self, fn: Callable[..., Any], axis_name: str | None, devices: Sequence[Any] | None,
                 in_axes: int | None = 0, out_axes: int = 0) -> None:
        self.fn = fn
        self.axis_name = axis_name or "_pmap"
        self.devices = devices
        self.in_axes = in_axes
        self.out_axes = out_axes
        self._cache: dict[Any, tuple[list[Compiled], Any]] = {}

    def __call__(self, *args: Any) -> Any:
        leaves, tree = flatten(list(args))
        arrays = [_host(x) for x in leaves]
        sizes = {a.shape[0] for a in arrays if a.ndim}
        if self.in_axes != 0 or len(sizes) != 1 or any(a.ndim == 0 for a in arrays):
            raise ArgumentError(f"pmap: every argument must have the same leading (mapped) axis; got shapes "
                                f"{[a.shape for a in arrays]}", where=user_location())
        n = sizes.pop()
        devices = [resolve(d) for d in self.devices] if self.devices is not None else [resolve(None)] * n
        if len(devices) != n:
            raise ArgumentError(f"pmap: the mapped axis has size {n} but {len(devices)} devices were given",
                                where=user_location())
        # in a multi-process run (axle.distributed) the axis spans every process's replicas
        world = distributed.world()
        total = n * (world.process_count if world else 1)
        key = (tree, tuple((a.shape[1:], a.dtype.str) for a in arrays), tuple(devices), total)
        if key not in self._cache:
            example = unflatten(tree, [a[0] for a in arrays])
            self._cache[key] = _compile_each(lambda *xs: self.fn(*xs), AxisEnv((self.axis_name,), (total,)), example,
                                             devices)
        compiled, out_tree = self._cache[key]
        per = [unflatten(tree, [a[r] for a in arrays]) for r in range(n)]
        outs = run_replicas(n, lambda r: compiled[r](*per[r]), total=total,
                            first=world.process_index * n if world else 0, outer=world.allgather if world else None)
        return _stack_outputs(outs, out_tree, self.out_axes)


def pmap(fn: Callable[..., Any] | None = None, axis_name: str | None = None, *, devices: Sequence[Any] | None = None,
         in_axes: int | None = 0, out_axes: int = 0) -> Any:
    """``fn`` run once per slice of its arguments' leading axis, each slice a replica on its
    own device (``devices``; default: the default device for all), with ``axis_name``
    bound for the collectives inside (``axle.lax.psum(x, axis_name)``...). Results are
    stacked along ``out_axes``. jit, grad and vmap compose inside ``fn``."""
    if fn is None:
        return lambda f: PmapFunction(f, axis_name, devices, in_axes, out_axes)
    return PmapFunction(fn, axis_name, devices, in_axes, out_axes)


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
