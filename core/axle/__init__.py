"""axle: a compiler SDK for linear algebra on custom accelerators.

    import axle, axle.numpy as anp

    @axle.jit
    def f(x, y, z):
        return anp.sum(x + y * z)

    f(x, y, z)                          # traced, optimized, compiled for the default device
    with axle.device("interpreter:0"):  # named placement
        ...
"""
from __future__ import annotations

import importlib
import types

from . import counters as _stats
from . import errors, ir
from . import gcfreeze as _gcfreeze
from .autodiff import grad, hessian, jacfwd, jacrev, value_and_grad, vjp
from .autodiff.custom import custom_jvp, custom_vjp
from .autodiff.forward import jvp, linearize
from .autodiff.vectorize import vmap
from .backend import API_VERSION, Backend, Buffer, Capabilities, Device, Executable
from .config import config
from .frontend.array import Array
from .frontend.device_put import device_put
from .frontend.jit import compile, jit
from .frontend.lazy import jit_scope
from .frontend.pytree import tree_map
from .frontend.spmd import pmap, shard_map
from .ir.dtypes import (
    DType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .placement import default_device, device, devices
from .registry import REGISTRY

# isort: split
# imported for what they attach: the array operators and methods (numpy), ``with device:``
# (placement, above) and ``Lowered.explain()`` (explain); see axle/layers.py
from . import explain as _explain  # noqa: F401 - imported for Lowered.explain
from . import numpy as numpy

__version__ = "0.1.0"

__all__ = [
    "API_VERSION", "Array", "compile", "grad", "jit_scope", "value_and_grad", "vjp", "Backend", "Buffer",
    "Capabilities", "DType", "Device", "Executable",
    "REGISTRY", "bool_", "config", "default_device", "device", "device_put", "devices", "errors",
    "float16", "float32", "float64", "int32", "int64", "ir", "jit", "reset_stats", "stats", "tree_map",
    "hessian", "jacfwd", "jacrev", "jvp", "linearize", "vmap", "custom_jvp", "custom_vjp",
    "int8", "int16", "uint8", "uint16", "uint32", "uint64", "bfloat16",
    "pmap", "shard_map", "sharding", "distributed",
]


def stats() -> dict:
    """Counters since start (or the last ``axle.reset_stats()``): traces, compiles, cache
    hits and misses, kernel launches, eager ops; totals, per function and per device."""
    return _stats.snapshot()


def reset_stats() -> None:
    _stats.reset()


def __getattr__(name: str) -> types.ModuleType:  # lazy submodules keep `import axle` light
    if name in ("lax", "interpreter", "passes", "testing", "profiler", "nn", "random", "optimizers",
                "tree_util", "sharding", "distributed"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'axle' has no attribute {name!r}")


_gcfreeze.freeze_long_lived()  # the objects of the import live as long as the process
