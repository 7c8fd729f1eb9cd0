"""Named devices and placement: axle.devices(), axle.device(name), axle.device_put."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import profiler
from .backend import Buffer, Device
from .frontend.array import Array
from .registry import REGISTRY

_local = threading.local()


def devices(backend: str | None = None) -> list[Device]:
    """Every available device (of one backend when named), default-device backend first."""
    devs = REGISTRY.devices()
    return [d for d in devs if backend is None or d.backend == backend]


def default_device() -> Device:
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    return REGISTRY.default_device()


def device(name: str | Device) -> Device:
    """The device called ``name`` ('cpu:0', 'opencl:0', 'opencl:0:1', or a backend name
    for its first device). Use it as a context manager to make it the default device:
    ``with axle.device("interpreter:0"): ...``."""
    return REGISTRY.device(name)


def push_default(dev: Device) -> None:
    if not hasattr(_local, "stack"):
        _local.stack = []
    _local.stack.append(dev)


def pop_default() -> None:
    _local.stack.pop()


def resolve(dev: str | Device | None) -> Device:
    if dev is None:
        return default_device()
    return REGISTRY.device(dev)


def to_buffer(x: Any, dev: Device) -> Buffer:
    """The value of x as a buffer on dev, transferring only when needed."""
    if isinstance(x, Array):
        if x.device == dev:
            return x.buffer
        host = x.numpy()
    else:
        from .frontend.validate import host_array

        host = host_array(x, "device_put")  # refuses dtypes axle would have to convert
    host = np.asarray(host, order="C")
    with profiler.span(f"to {dev.name}", "transfer", bytes=host.nbytes, shape=host.shape, dtype=host.dtype):
        return REGISTRY.backend_for(dev).to_device(host, dev)


def device_put(x: Any, dev: str | Device | None = None) -> Any:
    """Copies x (an array, scalar or pytree of them) to a device and returns axle Arrays,
    committed to ``dev`` when one is named (eager ops then run there and bring uncommitted
    operands along), uncommitted on the default device when not."""
    from .frontend.pytree import tree_map

    target = resolve(dev)
    committed = dev is not None
    return tree_map(lambda leaf: Array(to_buffer(leaf, target), weak=isinstance(leaf, (bool, int, float)),
                                       committed=committed), x)
