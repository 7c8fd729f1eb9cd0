"""Eager (op-by-op) execution: each primitive outside jit runs as its own one-op
executable on the operands' device, compiled once per signature and cached."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import counters as stats
from ..backend import Device, Executable
from ..compiler import compile_module, flags_key
from ..errors import DeviceError
from ..ir.builder import Builder, make_node
from ..ir.module import Computation, Module
from ..ir.ops import Op, canonical_attrs
from ..ir.types import TensorType
from ..lru import LRU
from ..placement import default_device
from .array import Array
from .device_put import to_buffer
from .lazy import lazy_active, record
from .source import user_location
from .tracing import Tracer, aval_of, current_trace, is_weak

#: one-op executables by (op, attributes, operand types, device, flags), bounded
#: (--jit_cache_size): the least recently used are dropped and their code freed
_cache: LRU[Executable] = LRU()


def _placement(operands: Sequence[Any]) -> tuple[Device, bool]:
    """Where an eager op runs and whether its result is committed there. Committed arrays
    fix the device (two different ones are the user's error, never a silent copy);
    uncommitted operands follow it, as in JAX. Without a committed operand the op runs
    where its arrays are, or on the default device when they disagree or there are none."""
    arrays = [x for x in operands if isinstance(x, Array)]
    committed = {x.device for x in arrays if x.committed}
    if len(committed) > 1:
        names = ", ".join(sorted(d.name for d in committed))
        raise DeviceError(f"operands are committed to different devices ({names}); move them to one with "
                          f"axle.device_put", where=user_location())
    if committed:
        return committed.pop(), True
    devs = {x.device for x in arrays}
    return (devs.pop() if len(devs) == 1 else default_device()), False


def colocate(values: Sequence[Any]) -> list[Any]:
    """The operands of an op that mixes arrays with uncommitted values (scalars, NumPy data,
    arrays made without a device), the uncommitted ones moved first to the device the op
    will run on when that is not the default device: work done on them before the op
    (broadcasting a scalar) then runs there, not on the default device followed by a
    full-size copy (eager) or a cluster of its own (lazy). On the default device, and while
    tracing, they stay as they are (a lazy or traced scalar is a literal the optimizer folds)."""
    if current_trace() is not None or not any(isinstance(v, Array) for v in values):
        return list(values)
    device, _ = _placement(values)
    if device == default_device():
        return list(values)

    def moved(v: Any) -> Any:
        if isinstance(v, Tracer) or isinstance(v, Array) and (v.committed or v.device == device):
            return v
        return Array(to_buffer(v, device), weak=is_weak(v))

    return [moved(v) for v in values]


def one_op_module(op: Op, types: Sequence[TensorType], attrs: dict[str, Any]) -> Module:
    b = Builder(op.value.replace("-", "_"))
    params = [b.parameter(t) for t in types]
    b.loc = user_location()
    node = make_node(op, params, attrs, loc=b.loc)
    return Module(b.name, Computation(b.name, tuple(params), node))


def executable_for(op: Op, types: tuple[TensorType, ...], attrs: dict[str, Any], device: Device) -> Executable:
    key = (op, canonical_attrs(op, attrs), types, device, flags_key())
    exe = _cache.get(key)
    if exe is None:
        module = one_op_module(op, types, attrs)
        exe = compile_module(module, device, optimize=False)
        stats.record("compiles", function=f"eager:{op.value}", device=device.name)
        exe = _cache.put(key, exe)
    return exe


def apply_eager(op: Op, operands: Sequence[Any], attrs: dict[str, Any]) -> Array:
    device, committed = _placement(operands)
    weak = bool(operands) and all(is_weak(x) for x in operands)
    if lazy_active():
        return record(op, operands, attrs, device, weak, committed)
    types = tuple(aval_of(x) for x in operands)
    exe = executable_for(op, types, attrs, device)
    (out,) = exe.execute([to_buffer(x, device) for x in operands])
    stats.record("eager_ops", device=device.name)
    stats.record("kernel_launches", function=f"eager:{op.value}", device=device.name)
    return Array(out, weak=weak, committed=committed)
