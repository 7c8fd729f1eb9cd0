"""Eager (op-by-op) execution: each primitive outside jit runs as its own one-op
executable on the operands' device, compiled once per signature and cached."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .. import counters as stats
from .. import profiler
from ..backend import Buffer, Device, Executable
from ..compiler import compile_module, flags_key
from ..config import config
from ..errors import DeviceError
from ..ir.builder import Builder, make_node
from ..ir.module import Computation, Module
from ..ir.ops import Op, canonical_attrs, plain_attrs
from ..ir.types import TensorType
from ..lru import LRU
from ..placement import default_device
from .array import Array
from .device_put import to_buffer
from .lazy import lazy_active, record
from .source import user_location
from .tracing import OPEN_SCOPES, Tracer, aval_of, current_trace, is_weak

#: one-op executables by (op, attributes, operand types, device, flags), bounded
#: (--jit_cache_size): the least recently used are dropped and their code freed
_cache: LRU[Executable] = LRU()


class _Hot(NamedTuple):
    """A hot-path entry: how to run one eager signature again."""

    launch: Callable[[Sequence[Buffer]], list[Buffer]] | None  # Executable.launcher()
    execute: Callable[[Sequence[Buffer]], list[Buffer]]  # while the profiler records
    committed: bool  # whether the result is committed
    tick: Callable[[], int]  # its launch counter
    out_id: int  # the result's hot id (_hot_id), stamped on each result's buffer


#: The hot path of eager ops: by :func:`_signature` (op, attributes, each operand's type,
#: device and committed flag, the flags), what :func:`apply_eager` found for an op with
#: plain attributes (ops.plain_attrs) on concrete, non-weak arrays of one device. Such a
#: call places, types, checks and compiles the same way every time (its attributes, types
#: and device are in the key), so a hit skips all of that (bounded like the executables).
_launchers: LRU[_Hot] = LRU()


#: A small int for each (device, type) of a buffer the hot path saw, stamped on the buffer
#: (``Buffer.hot_id``): a key of ints hashes in C, where hashing the device and type (frozen
#: dataclasses) calls Python twice per operand, most of an eager op's lookup. Ids are never
#: reused (a counter), so a full table is simply dropped: buffers stamped before keep ids
#: that still mean their device and type.
_hot_ids: dict[tuple[Device, TensorType], int] = {}
_next_hot_id = itertools.count(1).__next__
_HOT_IDS_MAX = 4096


def _hot_id(buf: Buffer) -> int:
    """``buf``'s hot-path id of its device and type, stamped on it (first use)."""
    dt = (buf.device, buf.type)
    hid = _hot_ids.get(dt)
    if hid is None:
        if len(_hot_ids) >= _HOT_IDS_MAX:
            _hot_ids.clear()
        hid = _hot_ids.setdefault(dt, _next_hot_id())  # racing threads agree on one id
    buf.__dict__["hot_id"] = hid  # the frozen buffer's dict, written once (as Buffer.__init__ does)
    return hid


def _signature(op: Op, operands: Sequence[Any], attrs: tuple[tuple[str, Any], ...] = ()) -> tuple | None:
    """The hot-path key of ``op`` with attributes ``attrs`` (plain, as given) on
    ``operands``, or None when they are not all concrete non-weak arrays on one device
    (placement, promotion or a pending value to force). The key (as :func:`launch_cached`
    builds it) holds the op, its attributes, the flags, and per operand its buffer's
    :func:`_hot_id` (device and type) and its committed flag."""
    device = None
    key: list[Any] = [op, attrs, flags_key()]
    for x in operands:
        if type(x) is not Array or x.weak or x._buffer is None:
            return None
        buf = x._buffer
        if device is None:
            device = buf.device
        elif buf.device is not device and buf.device != device:
            return None
        key += (buf.hot_id or _hot_id(buf), x.committed)
    return tuple(key) if device is not None else None


#: _launchers.peek without the call around it
_peek = _launchers.peeker()


def launch_cached(op: Op, operands: Sequence[Any], attrs: tuple[tuple[str, Any], ...] = ()) -> Array | None:
    """``op`` with attributes ``attrs`` (plain, as given) on ``operands`` through the hot
    path (see :data:`_launchers`) when this signature ran eagerly before; None otherwise
    (the caller takes the full path, which fills it). Never while tracing or recording a
    lazy cluster; through ``execute`` while the profiler records (an event per kernel).
    Written out (the key as :func:`_signature` builds it, without its device check: ids
    name the device, and no key of operands on two devices is ever stored): each call
    here is a sizable part of an eager op's cost."""
    if config.jit_level == "auto" or OPEN_SCOPES[0] and (current_trace() is not None or lazy_active()):
        return None
    key: list[Any] = [op, attrs, flags_key()]
    buffers: list[Buffer] = []
    for x in operands:
        if type(x) is not Array or x.weak:
            return None
        buf = x._buffer
        if buf is None:
            return None
        key += (buf.hot_id or _hot_id(buf), x.committed)
        buffers.append(buf)
    hit = _peek(tuple(key))
    if hit is None:
        return None
    run = hit.launch if hit.launch is not None and not profiler.enabled() else hit.execute
    try:
        (out,) = run(buffers)
    except (MemoryError, OSError):  # out of memory: the full path reports it (bind) with the op and types
        return None
    hit.tick()
    out.__dict__["hot_id"] = hit.out_id  # the next op on this result finds its key at once
    return Array(out, False, None, hit.committed)


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
    items = tuple(attrs.items()) if attrs else ()
    hot = not items or plain_attrs(items)
    if hot:
        fast = launch_cached(op, operands, items)
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
    key = _signature(op, operands, items) if hot else None
    if key is not None:
        _launchers.put(key, _Hot(exe.launcher(), exe.execute, committed, tick, _hot_id(out)))
    return Array(out, weak=weak, committed=committed)
