"""Lazy clusters: manual (``with axle.jit_scope():``) and automatic (``jit_level="auto"``)
clustering of eager code.

While lazy execution is on, a primitive applied to concrete or pending arrays is not run:
it is recorded as a node of the thread's current *cluster* and returns a pending
:class:`Array`. The cluster is compiled (with the full optimizer, so fusion applies) and run
as one executable when

- a value is needed: ``np.asarray``, ``print``, ``float()``, ``bool()`` (Python control
  flow), passing it to a ``jit`` function or another device, or
- the ``jit_scope`` ends, or
- the program comes round a loop: the op about to be recorded was issued from the same
  place in the user's code (code object and bytecode offset), with the same operand types,
  as the cluster's first op. A training loop that never reads a value thus runs as one
  cluster per iteration, the same structure each time, compiled once and then cached, or
- the cluster grows past :data:`MAX_CLUSTER_OPS` (a fallback bound on graph size).

Its outputs are exactly the pending arrays still alive at flush time (tracked with weak
references): temporaries the program dropped are never written to memory, which is what
lets ``sum(x + y*z)`` become a single fused kernel. Executables are cached by the
cluster's structure, so a training loop compiles each distinct step shape once.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import counters as stats
from ..backend import Buffer, Device, Executable
from ..compiler import compile_module, flags_key
from ..config import config
from ..ir.builder import make_node
from ..ir.literal import Literal
from ..ir.module import Computation, Module, Node
from ..ir.ops import Op
from ..lru import LRU
from .array import Array
from .device_put import to_buffer
from .source import user_frame
from .tracing import aval_of, scope_opened
from .validate import host_array

#: A cluster is flushed once it holds this many ops.
MAX_CLUSTER_OPS = 1000

#: Operands that say where to read or write, not what to compute: the start indices of the
#: dynamic slices, from this position on. A host scalar there becomes a parameter of the
#: cluster, not a literal: ``x[t]`` in a Python loop (a dynamic slice, see numpy/_index.py)
#: then records the same cluster for every ``t`` and hits the compile cache, where a
#: literal would put ``t`` in the cluster's key (one compile per value of ``t``).
INDEX_OPERANDS_FROM = {Op.DYNAMIC_SLICE: 1, Op.DYNAMIC_UPDATE_SLICE: 2}

_state = threading.local()
#: cluster executables by structure, bounded (--jit_cache_size) like every executable cache
_exe_cache: LRU[Executable] = LRU()


@dataclass
class FlushInfo:
    """What the most recent flush ran (for tests and the seed example)."""

    ops: int
    outputs: int
    kernels: int
    executable: Executable
    module: Module
    cache_hit: bool


_last: list[FlushInfo] = []


def last_flush() -> FlushInfo | None:
    """Information about the last cluster this process flushed (None if none yet)."""
    return _last[-1] if _last else None


class Cluster:
    """Ops recorded since the last flush, on one device."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.params: list[Node] = []
        self.inputs: list[Buffer] = []
        self._param_of: dict[int, Node] = {}  # id(buffer) -> parameter
        self._keep: list[Any] = []  # keeps buffers alive so ids stay unique
        self.pending: list[weakref.ref[Array]] = []
        self.ops = 0
        self.flushed = False
        self.first_site: tuple | None = None  # where the cluster's first op came from

    def _param(self, buf: Buffer) -> Node:
        node = self._param_of.get(id(buf))
        if node is None:
            node = make_node(Op.PARAMETER, (), {"index": len(self.params)}, type=buf.type,
                             name=f"in{len(self.params)}")
            self.params.append(node)
            self.inputs.append(buf)
            self._keep.append(buf)
            self._param_of[id(buf)] = node
        return node

    def node_for(self, x: Any, literal: bool = True) -> Node:
        if isinstance(x, Array):
            if x._buffer is None and x._lazy[0] is self:
                return x._lazy[1]
            return self._param(to_buffer(x, self.device))  # forces another cluster's value
        arr = host_array(x, "axle")
        if arr.ndim == 0 and literal:  # scalars become literals: cheap, and they let the optimizer fold
            return make_node(Op.CONSTANT, (), {"value": Literal(arr)})
        return self._param(to_buffer(arr, self.device))

    def record(self, op: Op, operands: Sequence[Any], attrs: dict[str, Any], weak: bool, loc: str | None,
               committed: bool = False) -> Array:
        first_index = INDEX_OPERANDS_FROM.get(op, len(operands))
        nodes = [self.node_for(x, literal=k < first_index) for k, x in enumerate(operands)]
        node = make_node(op, nodes, attrs, loc=loc)
        out = Array(None, weak=weak, lazy=(self, node), committed=committed)
        self.pending.append(weakref.ref(out))
        self.ops += 1
        stats.record("lazy_ops", device=self.device.name)
        return out

    def flush(self) -> None:
        """Compiles and runs every still-referenced pending array of this cluster."""
        if self.flushed:
            return
        self.flushed = True
        if getattr(_state, "cluster", None) is self:
            _state.cluster = None
        live = [a for a in (r() for r in self.pending) if a is not None and a._buffer is None]
        self.pending.clear()
        if not live:
            return
        outs: list[Node] = []
        seen: set[int] = set()
        for a in live:
            n = a._lazy[1]
            if n.uid not in seen:
                seen.add(n.uid)
                outs.append(n)
        root = outs[0] if len(outs) == 1 else make_node(Op.TUPLE, outs)
        comp = Computation("cluster", tuple(self.params), root)
        module = Module("cluster", comp)
        key = (comp.structural_key, self.device, flags_key())
        exe = _exe_cache.get(key)
        hit = exe is not None
        if exe is None:
            exe = _exe_cache.put(key, compile_module(module, self.device))
            stats.record("compiles", function="cluster", device=self.device.name)
        else:
            stats.record("cache_hits", function="cluster", device=self.device.name)
        results = exe.execute(self.inputs)
        by_uid = dict(zip((n.uid for n in outs), results))
        for a in live:
            a._buffer = by_uid[a._lazy[1].uid]
            a._lazy = None
        kernels = stats.kernel_count(exe)
        stats.record("clusters", function="cluster", device=self.device.name)
        stats.record("executions", function="cluster", device=self.device.name)
        stats.record("kernel_launches", kernels, function="cluster", device=self.device.name)
        _last[:] = [FlushInfo(self.ops, len(outs), kernels, exe, module, hit)]
        self.inputs, self._keep, self._param_of = [], [], {}


def _scope_depth() -> int:
    return getattr(_state, "depth", 0)


def lazy_active() -> bool:
    """True when eager ops should be recorded into a cluster instead of run."""
    return getattr(_state, "depth", 0) > 0 or config.jit_level == "auto"


def _where(op: Op) -> tuple[tuple, str | None]:
    """(where in the user's code this op comes from + what it is, 'file:line (fn)')."""
    f = user_frame()
    if f is None:
        return (None, op), None
    loc = f"{f.f_code.co_filename}:{f.f_lineno} ({f.f_code.co_name})"
    return (f.f_code, f.f_lasti, op), loc


def _site(where: tuple, operands: Sequence[Any]) -> tuple:
    """``where`` + the operands' types: the same op of the same line on the same types is
    the program coming round a loop. Built only when ``where`` already matches, as the
    operands' types cost more to read than the frame."""
    return where if where[0] is None else (*where, tuple(aval_of(x) for x in operands))


def record(op: Op, operands: Sequence[Any], attrs: dict[str, Any], device: Device, weak: bool,
           committed: bool = False) -> Array:
    where, loc = _where(op)
    cluster: Cluster | None = getattr(_state, "cluster", None)
    if cluster is not None and (cluster.device != device or (
            cluster.ops and cluster.first_site is not None and cluster.first_site[:len(where)] == where
            and _site(where, operands) == cluster.first_site)):
        cluster.flush()  # another device, or the program came round a loop
        cluster = None
    if cluster is None:
        cluster = Cluster(device)
        cluster.first_site = _site(where, operands)
        _state.cluster = cluster
    out = cluster.record(op, operands, attrs, weak, loc, committed)
    if cluster.ops >= MAX_CLUSTER_OPS:
        cluster.flush()
    return out


def flush() -> None:
    """Runs the current thread's pending cluster now (a no-op when there is none)."""
    cluster = getattr(_state, "cluster", None)
    if cluster is not None:
        cluster.flush()


@contextmanager
def jit_scope() -> Iterator[None]:
    """Manual clustering: eager ops inside are recorded and run as one compiled cluster
    when a value is needed or the scope ends::

        with axle.jit_scope():
            y = x + x * z        # nothing runs yet
        print(y)                 # already computed when the scope ended
    """
    flush()  # ops before the scope form their own cluster (auto mode)
    _state.depth = _scope_depth() + 1
    scope_opened(1)
    try:
        yield
    finally:
        _state.depth -= 1
        scope_opened(-1)
        flush()
