"""Named devices and the default device: axle.devices(), axle.device(name), and
``with device:``, which makes a device the default for the block (per thread).

The contract keeps :class:`~axle.backend.Device` a plain value; this layer gives it the
context-manager protocol (as a NumPy-style config context, like JAX's
``default_device``), so ``with axle.device("interpreter:0"):`` works for every device
of every backend. Moving data to a device is the frontend's ``axle.device_put``."""
from __future__ import annotations

import threading

from .backend import Device
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


def _enter(dev: Device) -> Device:
    push_default(dev)
    return dev


def _exit(dev: Device, *exc: object) -> None:
    pop_default()


# ``with device:``: attached here, where the default-device stack lives, so that the
# contract's Device needs nothing above it (axle/__init__ imports this module).
Device.__enter__ = _enter  # type: ignore[method-assign]  # attached protocol, see above
Device.__exit__ = _exit  # type: ignore[method-assign]  # attached protocol, see above
