"""Moving user data to a device: ``axle.device_put`` and the buffer of any value (an
Array, a NumPy array, a Python scalar) on a device, transferring only when needed."""
from __future__ import annotations

from typing import Any

from ..backend import Buffer, Device
from ..placement import resolve
from ..transfer import host_to_device
from .array import Array
from .pytree import tree_map
from .validate import host_array


def to_buffer(x: Any, dev: Device) -> Buffer:
    """The value of x as a buffer on dev, transferring only when needed."""
    if isinstance(x, Array):
        if x.device == dev:
            return x.buffer
        host = x.numpy()
    else:
        host = host_array(x, "device_put")  # refuses dtypes axle would have to convert
    return host_to_device(host, dev)


def device_put(x: Any, dev: str | Device | None = None) -> Any:
    """Copies x (an array, scalar or pytree of them) to a device and returns axle Arrays,
    committed to ``dev`` when one is named (eager ops then run there and bring uncommitted
    operands along), uncommitted on the default device when not."""
    target = resolve(dev)
    committed = dev is not None
    return tree_map(lambda leaf: Array(to_buffer(leaf, target), weak=isinstance(leaf, (bool, int, float)),
                                       committed=committed), x)
