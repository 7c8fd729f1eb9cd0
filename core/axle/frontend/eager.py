"""Eager (op-by-op) execution: each primitive outside jit runs as its own one-op
executable on the operands' device, compiled once per signature and cached."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import counters as stats
from ..backend import Buffer, Device, Executable
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

#: The hot path of eager ops: by :func:`_signature` (op, each operand's type, device and
#: committed flag, the flags), what :func:`apply_eager` found for an attribute-free op on
#: concrete, non-weak arrays of one device: the executable's ``execute``, whether the result
#: is committed, and its launch counter. Such a call places, types and compiles the same way
#: every time, so a hit skips all of that (bounded like the executables).
_launchers: LRU[tuple[Callable[[list[Buffer]], list[Buffer]], bool, Callable[[], int]]] = LRU()


def _signature(op: Op, operands: Sequence[Any]) -> tuple | None:
    """The hot-path key of ``op`` on ``operands``, or None when they are not all concrete
    non-weak arrays on one device (placement, promotion or a pending value to force)."""
    key: list[Any] = [op, flags_key()]
    device = None
    for x in operands:
        if type(x) is not Array or x.weak:
            return None
        buf = x._buffer
        if buf is None:
            return None
        if device is None:
            device = buf.device
            key.append(device)
        elif buf.device is not device and buf.device != device:
            return None
        key += (buf.type, x.committed)
    return tuple(key)


def launch_cached(op: Op, *operands: Any) -> Array | None:
    """``op`` (no attributes) on ``operands`` through the hot path when this signature ran
    eagerly before; None otherwise (the caller takes the full path, which fills it). Never
    while tracing or recording a lazy cluster."""
    key = _signature(op, operands)
    if key is None or current_trace() is not None or lazy_active():
        return None
    hit = _launchers.peek(key)
    if hit is None:
        return None
    run, committed, tick = hit
    (out,) = run([x._buffer for x in operands])
    tick()
    return Array(out, committed=committed)


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
    if not attrs:
        fast = launch_cached(op, *operands)
        if fast is not None:
            return fast
    device, committed = _placement(operands)
    weak = bool(operands) and all(is_weak(x) for x in operands)
    if lazy_active():
        return record(op, operands, attrs, device, weak, committed)
    types = tuple(aval_of(x) for x in operands)
    exe = executable_for(op, types, attrs, device)
    (out,) = exe.execute([to_buffer(x, device) for x in operands])
    tick = stats.eager_counter(f"eager:{op.value}", device.name)
    tick()
    key = None if attrs or not operands else _signature(op, operands)
    if key is not None:
        _launchers.put(key, (exe.execute, committed, tick))
    return Array(out, weak=weak, committed=committed)
