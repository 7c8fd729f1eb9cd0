"""axle.jit: trace a Python function into a module, compile it for a device, cache it."""
from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import counters as stats
from .. import profiler
from ..backend import Device, Executable
from ..compiler import compile_module, compile_optimized, executable_report, flags_key, optimize_for
from ..errors import ArgumentError
from ..ir.builder import make_node
from ..ir.module import Computation, Module
from ..ir.ops import Op
from ..ir.types import TensorType
from ..ir.verifier import verify
from ..lru import LRU
from ..partition import placement_of
from ..placement import resolve
from ..recompile import note_trace
from ..registry import REGISTRY
from . import checks as checks_mod
from . import control_flow
from .array import Array
from .device_put import to_buffer
from .gcpause import gc_paused
from .pytree import TreeDef, flat_list_treedef, flatten, unflatten
from .source import user_location
from .tracing import Trace, Tracer, current_trace, leaf_aval, trace_context
from .validate import is_out_of_memory, out_of_memory_error


def static_key(value: Any) -> Any:
    """A static argument as part of a cache key: equal only for values that trace alike.
    Python's equality is not enough: ``1 == 1.0 == True`` and ``0.0 == -0.0`` trace
    different programs (an int, float or bool weak type; ``x / -0.0`` is ``-inf``), and
    ``nan != nan`` would miss the cache on every call. Each value is keyed by its type, and
    a float by its exact bits (``float.hex``: a signed zero, one key for every NaN);
    tuples and frozensets element by element. Other values keep their own equality."""
    if isinstance(value, tuple):  # namedtuples too: their type is in the key
        return type(value), tuple(static_key(v) for v in value)
    if isinstance(value, frozenset):
        return type(value), frozenset(static_key(v) for v in value)
    if isinstance(value, (float, np.floating)):
        return type(value), float(value).hex()
    if isinstance(value, (complex, np.complexfloating)):
        return type(value), complex(value).real.hex(), complex(value).imag.hex()
    return type(value), value


def _arg_names(fn: Callable[..., Any], n: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return params + [f"arg{i}" for i in range(len(params), n)]


def _leaf_names(base: str, td: TreeDef) -> list[str]:
    if td.num_leaves == 1 and td.kind == "leaf":
        return [base]
    return [f"{base}_{i}" for i in range(td.num_leaves)]


def trace_function(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                   static_argnums: tuple[int, ...], name: str) -> tuple[Module, TreeDef]:
    """Traces fn over abstract versions of its non-static arguments."""
    trace = Trace(name)
    names = _arg_names(fn, len(args))
    with profiler.span(f"trace {name}", "trace"), trace_context(trace):
        traced_args: list[Any] = []
        for i, a in enumerate(args):
            if i in static_argnums:
                traced_args.append(a)
                continue
            leaves, td = flatten(a)
            tracers = []
            for leaf, leaf_name in zip(leaves, _leaf_names(names[i], td)):
                t, weak = leaf_aval(leaf)
                tracers.append(trace.new_arg(t, leaf_name, weak))
            traced_args.append(unflatten(td, tracers))
        kw_leaves, kw_td = flatten(kwargs)
        kw_tracers = []
        for leaf, leaf_name in zip(kw_leaves, _leaf_names("kw", kw_td)):
            t, weak = leaf_aval(leaf)
            kw_tracers.append(trace.new_arg(t, leaf_name, weak))
        out = fn(*traced_args, **unflatten(kw_td, kw_tracers))
        out_leaves, out_td = flatten(out)
        nodes, checks = checks_mod.with_checks(trace, [trace.to_node(o) for o in out_leaves])
    root = nodes[0] if len(nodes) == 1 else make_node(Op.TUPLE, nodes)
    module = Module(name, Computation(name, tuple(trace.builder.params), root))
    checks_mod.register(module, checks)  # --check_indices flags follow the outputs
    verify(module)
    return module, out_td


@dataclass
class _Entry:
    module: Module
    out_tree: TreeDef
    executable: Executable
    device: Device
    kernels: int
    #: the module computes --check_indices flags (fixed when traced)
    checked: bool = False
    #: counts a cached call of it (counters.run_counter)
    count_run: Callable[[], int] = int


def _array_call(args: tuple[Any, ...], device: Device) -> tuple[tuple[tuple[TensorType, bool], ...], list[Any]] | None:
    """(``leaf_aval`` of each argument, its buffer) when every argument is a computed Array
    on ``device`` (the common call: keyed without flattening, handed over without
    converting anything), else None."""
    sig = []
    bufs = []
    for x in args:
        if type(x) is not Array:  # NumPy data, scalars, pytrees
            return None
        b = x._buffer
        if b is None or (b.device is not device and b.device != device):  # lazy, or to be transferred
            return None
        sig.append((b.type, x.weak))
        bufs.append(b)
    return tuple(sig), bufs


class Lowered:
    """A traced (not yet optimized) module for one signature and device. ``explain()``,
    what the compiler does with it, is added by the tools layer (axle.explain)."""

    def __init__(self, module: Module, device: Device, out_tree: TreeDef, committed: bool = False) -> None:
        self.module = module
        self.device = device
        self.out_tree = out_tree
        self.committed = committed  # the device was named: results are committed to it

    def as_text(self) -> str:
        return self.module.as_text()

    def as_dot(self) -> str:
        return self.module.as_dot()

    if TYPE_CHECKING:
        # attached by axle.explain at import; declared for type checkers (an axle.explain
        # Explanation: the tools layer, which this one may not name)
        def explain(self, /, *, source: bool = True) -> Any: ...

    def optimize(self) -> Module:
        """The module after the optimizer pipeline for this device's backend."""
        return optimize_for(self.module, self.device)

    def compile(self) -> Compiled:
        exe, optimized = compile_optimized(self.module, self.device)
        return Compiled(self, exe, optimized)


class Compiled:
    """A compiled executable plus the signature it was compiled for."""

    def __init__(self, lowered: Lowered, executable: Executable, module: Module | None = None) -> None:
        self.lowered = lowered
        self.executable = executable
        #: the module the backend compiled (after the optimizer)
        self.module = module if module is not None else lowered.module

    def report(self) -> dict[str, Any]:
        """``kernels`` (launches per call), ``temp_bytes``, ``peak_bytes`` and more: the
        core's buffer assignment facts overlaid with the backend executable's report, and
        ``placement`` (see :meth:`placement`)."""
        out = executable_report(self.module, self.executable)
        summary = self.placement()
        if summary is not None:
            out.setdefault("placement", summary.as_dict())
        return out

    def placement(self) -> Any:
        """Which ops run on which device and the bytes crossing per call
        (an ``axle.partition.PlacementSummary``; ``print`` it for a table)."""
        return placement_of(self.executable)

    def as_text(self) -> str:
        """The optimized module, as compiled."""
        return self.module.as_text()

    def __call__(self, *args: Any) -> Any:
        leaves = flatten(list(args))[0]
        bufs = [to_buffer(x, self.lowered.device) for x in leaves]
        outs = self.executable.execute(bufs)
        if checks_mod.has_checks(self.lowered.module):
            outs = checks_mod.split_and_raise(self.lowered.module, outs)
        return unflatten(self.lowered.out_tree, [Array(b, committed=self.lowered.committed) for b in outs])


def _buffer_on(x: Any, device: Device) -> Any:
    """The buffer of an argument on ``device``: an Array's own when it lives there, else
    transferred (or converted from NumPy data)."""
    if type(x) is Array:
        buf = x.buffer
        if buf.device is device or buf.device == device:
            return buf
    return to_buffer(x, device)


class _Inline(Exception):
    """A jit call met a Tracer among its arguments: inline the function into that trace."""


class JitFunction:
    """A function compiled on first call per (shapes, dtypes, static args, device)."""

    def __init__(self, fn: Callable[..., Any], device: Any = None, static_argnums: int | Sequence[int] = ()) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.device_spec = device
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self.name = getattr(fn, "__name__", "fn").replace("<", "").replace(">", "") or "fn"
        # Bounded (--jit_cache_size): a function called with ever new shapes keeps only
        # the most recent executables, and the evicted ones' native code is freed.
        self._cache: LRU[_Entry] = LRU()
        self._last: tuple[tuple, _Entry] | None = None  # see _lookup
        self.trace_count = 0
        self.cache_hits = 0

    def _device(self) -> Device:
        spec = self.device_spec
        if isinstance(spec, Device):
            return spec
        if isinstance(spec, str):  # a name: the registry remembers it (per AXLE_BACKENDS selection)
            return REGISTRY.device(spec)
        return resolve(spec)  # the default device: ``with device:`` blocks may change it

    def _key(self, args: Sequence[Any], kwargs: dict[str, Any], device: Device) -> tuple[tuple, list[Any]]:
        """(cache key, dynamic leaves) of a call; raises _Inline when a leaf is a Tracer
        (jit inside jit/grad)."""
        if self.static_argnums:
            dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
            values = tuple(a for i, a in enumerate(args) if i in self.static_argnums)
            if any(isinstance(x, Tracer) for x in flatten(values)[0]):
                raise _Inline
            try:
                static = static_key(values)
                hash(static)
            except TypeError:
                raise ArgumentError(f"jit({self.name}): static arguments must be hashable, got {list(values)!r}",
                                    where=user_location()) from None
        else:
            dyn, static = list(args), ()
        leaves, td = flatten((dyn, kwargs) if kwargs else dyn)
        avals = []
        for x in leaves:
            if isinstance(x, Tracer):
                raise _Inline
            avals.append(leaf_aval(x))
        return (td, tuple(avals), static, device, flags_key()), leaves

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        device = self._device()
        module, out_td = trace_function(self.fn, args, kwargs, self.static_argnums, self.name)
        return Lowered(module, device, out_td, committed=self.device_spec is not None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The dispatch path of every call. A cached call with Array arguments (no keywords,
        # no static arguments) takes the short way: its key from each buffer's type, one
        # cache lookup, the buffers handed over as they are, one counter update. Its key
        # is the one _key makes, so both ways share the cache entries.
        if current_trace() is not None:
            return self.fn(*args, **kwargs)  # jit inside jit/grad: the outer trace compiles it
        device = self._device()
        try:
            if not kwargs and not self.static_argnums:
                call = _array_call(args, device)
                if call is not None:
                    entry = self._lookup((flat_list_treedef(len(args)), call[0], (), device, flags_key()))
                    if entry is not None:
                        return self._launch(entry, call[1])
            try:
                key, leaves = self._key(args, kwargs, device)
            except _Inline:
                return self.fn(*args, **kwargs)
            return self._run(args, kwargs, device, key, leaves)
        except (MemoryError, OSError) as e:
            if not is_out_of_memory(e):
                raise
            raise out_of_memory_error(e, f"jit({self.name})") from None

    def _lookup(self, key: tuple) -> _Entry | None:
        """The cache entry of ``key``. The last one found is kept beside the cache: a loop
        calling with one signature compares its key (the same objects, so the compare is
        by identity) instead of hashing it twice under the cache's lock. That entry is
        always the cache's most recently used, so skipping the cache's reordering loses
        nothing; a new entry or clear_cache() replaces it."""
        last = self._last
        if last is not None and last[0] == key:
            return last[1]
        entry = self._cache.get(key)
        if entry is not None:
            self._last = (key, entry)
        return entry

    def _run(self, args: Sequence[Any], kwargs: dict[str, Any], device: Device, key: tuple,
             leaves: list[Any]) -> Any:
        entry = self._lookup(key)
        if entry is None:
            with gc_paused():  # a first call's burst of allocations must not set off full collections
                entry = self._compile(args, kwargs, device, key)
                bufs = [_buffer_on(x, device) for x in leaves]
                outs = self._execute(entry, bufs)
            stats.record_run(entry.kernels, function=self.name, device=device.name)
            return self._results(entry, outs)
        return self._launch(entry, [_buffer_on(x, device) for x in leaves])

    def _launch(self, entry: _Entry, bufs: list[Any]) -> Any:
        """A cached call: runs the entry's executable, counts it, wraps the results."""
        self.cache_hits += 1
        if entry.checked:  # counted as a hit even when a flag raises, as a first call would be
            stats.record("cache_hits", function=self.name, device=entry.device.name)
            outs = self._execute(entry, bufs)
            stats.record_run(entry.kernels, function=self.name, device=entry.device.name)
        else:
            outs = entry.executable.execute(bufs)
            entry.count_run()
        return self._results(entry, outs)

    @staticmethod
    def _execute(entry: _Entry, bufs: list[Any]) -> list[Any]:
        outs = entry.executable.execute(bufs)
        if entry.checked:
            outs = checks_mod.split_and_raise(entry.module, outs)
        return outs

    def _results(self, entry: _Entry, outs: list[Any]) -> Any:
        # results of a jit with a named device are committed to it (eager ops follow them)
        committed = self.device_spec is not None
        if entry.out_tree.kind == "leaf":
            return Array(outs[0], committed=committed)
        return unflatten(entry.out_tree, [Array(b, committed=committed) for b in outs])

    def _compile(self, args: Sequence[Any], kwargs: dict[str, Any], device: Device, key: tuple) -> _Entry:
        module, out_td = trace_function(self.fn, args, kwargs, self.static_argnums, self.name)
        self.trace_count += 1
        # warns when retraced too often; points at the user: -> _compile -> __call__ -> user
        note_trace(self, args, kwargs, stacklevel=5, device=device)
        exe = compile_module(module, device)
        entry_kernels = stats.kernel_count(exe)
        entry = _Entry(module, out_td, exe, device, entry_kernels, checks_mod.has_checks(module),
                       stats.run_counter(self.name, device.name, entry_kernels))
        for what in ("traces", "compiles", "cache_misses"):
            stats.record(what, function=self.name, device=device.name)
        entry = self._cache.put(key, entry)
        self._last = (key, entry)
        return entry

    def clear_cache(self) -> None:
        self._last = None
        self._cache.clear()

    def __repr__(self) -> str:
        return f"<axle.jit {self.name}>"


def jit(fn: Callable[..., Any] | None = None, *, device: Any = None,
        static_argnums: int | Sequence[int] = ()) -> Any:
    """Compiles ``fn`` for a device: ``axle.jit(f)``, ``@axle.jit``, ``@axle.jit(device="cpu:0")``."""
    if fn is None:
        return lambda f: JitFunction(f, device=device, static_argnums=static_argnums)
    return JitFunction(fn, device=device, static_argnums=static_argnums)


def compile(fn: Callable[..., Any], inputs: Sequence[Any], *,  # noqa: A001 - axle.compile, the seed's name
            device: Any = None) -> Any:
    """The seed's ``xla.compile(computation, inputs)``: traces, compiles and runs ``fn`` on
    ``inputs`` (a list of arguments) and returns its outputs. The executable is cached
    per function, so calling it again with the same shapes does not recompile."""
    try:
        jf = _compiled.get(fn)
    except TypeError:  # not weak-referenceable (a builtin): compile without the per-function cache
        return JitFunction(fn, device=device)(*inputs)
    if jf is None or jf.device_spec != device:
        jf = JitFunction(fn, device=device)
        _compiled[fn] = jf
    return jf(*inputs)


_compiled: weakref.WeakKeyDictionary[Any, JitFunction] = weakref.WeakKeyDictionary()


control_flow.EAGER_JIT[:] = [jit]  # lax's loops and branches, called eagerly, run as a jit function
