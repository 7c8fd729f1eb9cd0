"""Device meshes and how arrays are split over them (jax.sharding's names): a
:class:`Mesh` lays devices out on named axes, a :class:`PartitionSpec` says which mesh
axes split each dimension of an array, a :class:`NamedSharding` pairs the two.

A mesh position is a replica of an SPMD run: replica ids are the row-major flat index of
the position, so the mesh axis ``k`` moves the replica id by ``stride(k)``."""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .backend import Device
from .errors import ArgumentError
from .placement import device as to_device


class PartitionSpec(tuple):  # entries: None, a name or a tuple of names
    """Per array dimension: None (not split), a mesh axis name, or a tuple of names (split
    over their product, the first one major). Dimensions past the spec are not split."""

    def __new__(cls, *entries: str | tuple[str, ...] | None) -> PartitionSpec:
        for e in entries:
            names = e if isinstance(e, tuple) else (e,)
            if not all(n is None or isinstance(n, str) for n in names):
                raise ArgumentError(f"PartitionSpec: {e!r} is not None, a mesh axis name or a tuple of names")
        return super().__new__(cls, entries)

    def axes_of(self, dim: int) -> tuple[str, ...]:
        """The mesh axes splitting dimension ``dim`` (none: not split)."""
        if dim >= len(self) or self[dim] is None:
            return ()
        e = self[dim]
        return tuple(e) if isinstance(e, tuple) else (e,)

    def __repr__(self) -> str:
        return f"PartitionSpec{tuple.__repr__(self)}"


P = PartitionSpec


class Mesh:
    """Devices laid out on named axes: ``Mesh(np.array(devices).reshape(2, 2), ("data", "model"))``.
    Devices may be given as ``Device`` objects or names ("cpu:0")."""

    def __init__(self, devices: Any, axis_names: Sequence[str]) -> None:
        arr = np.asarray(devices, dtype=object)
        names = tuple(axis_names)
        if arr.ndim != len(names) or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
            raise ArgumentError(f"Mesh: {len(names)} distinct axis names {names} for a device array of shape "
                                f"{arr.shape} (one name per dimension)")
        if arr.size == 0:
            raise ArgumentError("Mesh: needs at least one device")
        self.devices = np.empty(arr.shape, dtype=object)
        for idx, d in np.ndenumerate(arr):
            self.devices[idx] = d if isinstance(d, Device) else to_device(d)
        self.axis_names = names

    @property
    def shape(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.devices.shape))

    @property
    def size(self) -> int:
        return int(self.devices.size)

    def stride(self, name: str) -> int:
        """How far the replica id moves per step along axis ``name``."""
        k = self._index(name)
        return math.prod(self.devices.shape[k + 1:])

    def _index(self, name: str) -> int:
        if name not in self.axis_names:
            raise ArgumentError(f"Mesh: no axis {name!r} (axes: {', '.join(self.axis_names)})")
        return self.axis_names.index(name)

    def coords(self, replica: int) -> dict[str, int]:
        return dict(zip(self.axis_names, (int(c) for c in np.unravel_index(replica, self.devices.shape))))

    def flat_devices(self) -> list[Device]:
        return list(self.devices.reshape(-1))

    def __iter__(self) -> Iterator[str]:
        return iter(self.axis_names)

    def __repr__(self) -> str:
        axes = ", ".join(f"{n}={s}" for n, s in self.shape.items())
        return f"Mesh({axes}; {', '.join(d.name for d in self.flat_devices())})"


@dataclass(frozen=True)
class NamedSharding:
    """An array split over ``mesh`` as ``spec`` says (``axle.device_put(x, sharding)``)."""

    mesh: Mesh
    spec: PartitionSpec

    def block_index(self, dim: int, replica: int) -> tuple[int, int]:
        """(which block, how many blocks) of dimension ``dim`` replica ``replica`` holds."""
        coords = self.mesh.coords(replica)
        index, count = 0, 1
        for name in self.spec.axes_of(dim):
            size = self.mesh.shape[name]
            index, count = index * size + coords[name], count * size
        return index, count

    def check(self, shape: tuple[int, ...], what: str) -> None:
        """Raises ArgumentError unless ``spec`` fits an array of ``shape`` on ``mesh``."""
        if len(self.spec) > len(shape):
            raise ArgumentError(f"{what}: {self.spec} names {len(self.spec)} dimensions, the array has shape {shape}")
        used = [n for d in range(len(self.spec)) for n in self.spec.axes_of(d)]
        for n in used:
            self.mesh._index(n)
        if len(set(used)) != len(used):
            raise ArgumentError(f"{what}: {self.spec} splits over one mesh axis twice")
        for d in range(len(self.spec)):
            _, count = self.block_index(d, 0)
            if shape[d] % count:
                raise ArgumentError(f"{what}: dimension {d} (size {shape[d]}) of shape {shape} does not split "
                                    f"into {count} blocks for {self.spec} on {self.mesh}")

    def block(self, x: Any, replica: int) -> Any:
        """Replica ``replica``'s block of the whole array ``x`` (NumPy, or a tracer: shard_map in a trace)."""
        index = []
        for d in range(x.ndim):
            i, n = self.block_index(d, replica)
            step = x.shape[d] // n
            index.append(slice(i * step, (i + 1) * step))
        return x[tuple(index)]

    def assemble(self, blocks: Sequence[np.ndarray]) -> np.ndarray:
        """The whole array from every replica's block (the first replica of each block
        wins where the spec leaves mesh axes out: the array is replicated over them)."""
        first = blocks[0]
        counts = [self.block_index(d, 0)[1] for d in range(first.ndim)]
        out = np.empty(tuple(s * c for s, c in zip(first.shape, counts)), first.dtype)
        done: set[tuple[int, ...]] = set()
        for r, b in enumerate(blocks):
            where = tuple(self.block_index(d, r)[0] for d in range(first.ndim))
            if where in done:
                continue
            done.add(where)
            out[tuple(slice(i * s, (i + 1) * s) for i, s in zip(where, first.shape))] = b
        return out
