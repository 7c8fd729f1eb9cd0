"""Eager (op-by-op) execution: each primitive outside jit runs as its own one-op
executable on the operands' device, compiled once per signature and cached."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import counters as stats
from ..compiler import flags_key
from ..backend import Device, Executable
from ..errors import DeviceError
from ..lru import LRU
from ..ir.builder import Builder, make_node
from ..ir.module import Computation, Module
from ..ir.ops import Op, canonical_attrs
from ..ir.types import TensorType
from .array import Array
from .lazy import lazy_active, record
from .source import user_location
from .tracing import aval_of, is_weak

#: one-op executables by (op, attributes, operand types, device, flags), bounded
#: (--jit_cache_size): the least recently used are dropped and their code freed
_cache: LRU[Executable] = LRU()


def _device_of(operands: Sequence[Any]) -> Device:
    from ..placement import default_device

    devs = {x.device for x in operands if isinstance(x, Array)}
    if len(devs) > 1:
        names = ", ".join(sorted(d.name for d in devs))
        raise DeviceError(f"operands live on different devices ({names}); move them with axle.device_put",
                          where=user_location())
    return devs.pop() if devs else default_device()


def one_op_module(op: Op, types: Sequence[TensorType], attrs: dict[str, Any]) -> Module:
    b = Builder(op.value.replace("-", "_"))
    params = [b.parameter(t) for t in types]
    b.loc = user_location()
    node = make_node(op, params, attrs, loc=b.loc)
    return Module(b.name, Computation(b.name, tuple(params), node))


def executable_for(op: Op, types: tuple[TensorType, ...], attrs: dict[str, Any], device: Device) -> Executable:
    from ..compiler import compile_module

    key = (op, canonical_attrs(op, attrs), types, device, flags_key())
    exe = _cache.get(key)
    if exe is None:
        module = one_op_module(op, types, attrs)
        exe = compile_module(module, device, optimize=False)
        stats.record("compiles", function=f"eager:{op.value}", device=device.name)
        exe = _cache.put(key, exe)
    return exe


def apply_eager(op: Op, operands: Sequence[Any], attrs: dict[str, Any]) -> Array:
    from ..placement import to_buffer

    device = _device_of(operands)
    weak = bool(operands) and all(is_weak(x) for x in operands)
    if lazy_active():
        return record(op, operands, attrs, device, weak)
    types = tuple(aval_of(x) for x in operands)
    exe = executable_for(op, types, attrs, device)
    (out,) = exe.execute([to_buffer(x, device) for x in operands])
    stats.record("eager_ops", device=device.name)
    stats.record("kernel_launches", function=f"eager:{op.value}", device=device.name)
    return Array(out, weak=weak)
