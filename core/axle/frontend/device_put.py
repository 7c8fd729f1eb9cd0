"""Moving user data to a device: ``axle.device_put`` and the buffer of any value (an
Array, a NumPy array, a Python scalar) on a device, transferring only when needed."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import Buffer, Device
from ..ir.dtypes import dtype as to_dtype
from ..ir.types import TensorType
from ..placement import resolve
from ..sharding import NamedSharding
from ..transfer import host_to_device
from .array import Array
from .pytree import tree_map
from .validate import host_array, is_out_of_memory, out_of_memory_error


def to_buffer(x: Any, dev: Device) -> Buffer:
    """The value of x as a buffer on dev, transferring only when needed."""
    if isinstance(x, Array):
        if x.device == dev:
            return x.buffer
        host = x.numpy()
    else:
        host = host_array(x, "device_put")  # refuses dtypes axle would have to convert
    try:
        return host_to_device(host, dev)
    except (MemoryError, OSError) as e:  # the device refused the buffer: an axle error naming the value
        if not is_out_of_memory(e):
            raise
        raise out_of_memory_error(e, f"device_put to {dev}", [TensorType(to_dtype(host.dtype), host.shape)]) from None


def device_put(x: Any, dev: str | Device | NamedSharding | None = None) -> Any:
    """Copies x (an array, scalar or pytree of them) to a device and returns axle Arrays,
    committed to ``dev`` when one is named (a NamedSharding: split over its mesh, a
    ShardedArray) (eager ops then run there and bring uncommitted
    operands along), uncommitted on the default device when not."""
    if isinstance(dev, NamedSharding):  # split over a mesh
        return tree_map(lambda leaf: shard_array(leaf, dev), x)
    target = resolve(dev)
    committed = dev is not None
    return tree_map(lambda leaf: Array(to_buffer(leaf, target), weak=isinstance(leaf, (bool, int, float)),
                                       committed=committed), x)


# ------------------------------------------------------------------ sharded arrays


class ShardedArray:
    """An array split over a mesh's devices (``axle.device_put(x, NamedSharding(...))``):
    one block per mesh position, held on that position's device; ``np.asarray`` gathers it."""

    def __init__(self, blocks: Sequence[Array], sharding: NamedSharding, shape: tuple[int, ...]) -> None:
        self.blocks = list(blocks)
        self.sharding = sharding
        self.shape = shape
        self.dtype = np.asarray(self.blocks[0]).dtype

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.sharding.assemble([np.asarray(b) for b in self.blocks])
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"ShardedArray({self.dtype}{list(self.shape)}, {self.sharding.spec} over {self.sharding.mesh})"


def shard_array(x: Any, sharding: NamedSharding) -> ShardedArray:
    """``x`` split over ``sharding.mesh`` as ``sharding.spec`` says, each block on its device."""
    arr = np.asarray(x)
    sharding.check(arr.shape, "device_put")
    from_device = sharding.mesh.flat_devices()
    blocks = [device_put(np.ascontiguousarray(sharding.block(arr, r)), from_device[r])
              for r in range(sharding.mesh.size)]
    return ShardedArray(blocks, sharding, arr.shape)
