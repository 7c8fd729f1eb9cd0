"""Partial backends: split a module between its device and the host, and run the pieces.

A backend declares what it runs through :class:`~axle.backend.Capabilities`. When a
module holds a node the device does not claim, :func:`partition` splits the entry
computation into *clusters*: maximal groups of nodes placed on the same device, merged
greedily without ever creating a cycle between clusters (so the clusters can run one
after another in a topological order). Values crossing from one cluster to another are
explicit transfers, counted in bytes in the placement summary.

A cost guard keeps tiny shape-only subgraphs (a reshape or broadcast between two host
ops) on the host: sending them to the device would only add two transfers.

Each cluster becomes its own module, optimized and compiled by its device's backend; a
device cluster that fails to compile is recompiled on the host with a warning naming it.
In strict placement mode (``AXLE_FLAGS=--strict_placement`` or
``axle.config.update(strict_placement=True)``) any fallback is a
:class:`~axle.errors.PlacementError` naming the op.
"""
from __future__ import annotations

import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backend import Buffer, Capabilities, Device, Executable
from .config import config
from .device_compile import compile_on_device, expand_for
from .errors import PlacementError
from .ir.builder import make_node
from .ir.module import Computation, Module, Node
from .ir.ops import Op
from .ir.types import TensorType, TupleType
from .registry import REGISTRY
from .transfer import host_to_device

#: Backends tried, in order, to run what the device cannot (the first available one
#: that is not the device's own backend).
HOST_BACKENDS: tuple[str, ...] = ("cpu", "interpreter")

#: Nodes that are never placed on their own: parameters and constants are materialized
#: by whichever cluster reads them, tuples only assemble results.
_FREE = (Op.PARAMETER, Op.CONSTANT, Op.TUPLE)


# ----------------------------------------------------------------------------- reasons


def unsupported_reason(caps: Capabilities, node: Node) -> str | None:
    """Why ``caps`` does not cover ``node`` (None when it does): an op, dtype or shape it does
    not claim (``Capabilities.refusal``), or a buffer above one of its buffer ``limits``."""
    return caps.refusal(node) or _over_limit(caps, node)


#: per-buffer limits a device may set in ``Capabilities.limits``: what each one measures
_BUFFER_LIMITS: dict[str, tuple[str, Callable[[TensorType], int]]] = {
    "max_buffer_bytes": ("byte", lambda t: t.nbytes),
    "max_elements": ("element", lambda t: t.size),
}


def _over_limit(caps: Capabilities, node: Node) -> str | None:
    if node.op in _FREE or node.op is Op.GET_TUPLE_ELEMENT:
        return None
    types = [t for t in [o.type for o in node.operands] + [node.type] if isinstance(t, TensorType)]
    for key, (unit, measure) in _BUFFER_LIMITS.items():
        limit = caps.limits.get(key)
        biggest = max((measure(t) for t in types), default=0)
        if limit is not None and biggest > limit:
            return f"op '{node.op.value}' needs a {biggest}-{unit} buffer, above the device's {key}={limit}"
    return None


def describe(node: Node) -> str:
    """``dot f32[4,5] -> f32[4,3]``-style text naming a node for messages."""
    ins = ", ".join(str(o.type) for o in node.operands)
    return f"'{node.op.value}' ({ins}) -> {node.type}"


def unsupported_nodes(module: Module, caps: Capabilities) -> list[tuple[Node, str]]:
    """The entry nodes the device cannot run, with the reason for each."""
    out = []
    for n in module.entry.nodes:
        if n.op in _FREE or n.op is Op.GET_TUPLE_ELEMENT:
            continue
        why = unsupported_reason(caps, n)
        if why:
            out.append((n, why))
    return out


def strict_error(device: Device, node: Node, why: str) -> PlacementError:
    return PlacementError(f"strict placement: {describe(node)} cannot run on {device.name}: {why}; "
                          f"it would fall back to the host", where=node.loc)


# ----------------------------------------------------------------------------- summary


@dataclass
class ClusterPlacement:
    """One cluster of the placement summary."""

    name: str
    device: str
    ops: dict[str, int]
    #: why this cluster is not on the requested device ("" when it is)
    reason: str = ""

    @property
    def fallback(self) -> bool:
        return bool(self.reason)


@dataclass
class Transfer:
    value: str
    source: str
    target: str
    nbytes: int


@dataclass
class PlacementSummary:
    """Which ops ran where and how many bytes crossed between devices per call."""

    device: str
    clusters: list[ClusterPlacement] = field(default_factory=list)
    transfers: list[Transfer] = field(default_factory=list)
    #: extended ops the device does not claim, expanded into their decompositions (op -> count)
    decomposed: dict[str, int] = field(default_factory=dict)
    #: why the device refused each decomposed op (its capability's reason, op -> reason)
    decomposed_why: dict[str, str] = field(default_factory=dict)

    @property
    def bytes_crossed(self) -> int:
        return sum(t.nbytes for t in self.transfers)

    @property
    def fallback(self) -> bool:
        return any(c.fallback for c in self.clusters)

    def ops_on(self, device: str) -> Counter:
        out: Counter = Counter()
        for c in self.clusters:
            if c.device == device:
                out.update(c.ops)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "bytes_crossed": self.bytes_crossed, "fallback": self.fallback,
                "clusters": [dict(name=c.name, device=c.device, ops=dict(c.ops), reason=c.reason)
                             for c in self.clusters],
                "transfers": [dict(value=t.value, source=t.source, target=t.target, nbytes=t.nbytes)
                              for t in self.transfers],
                "decomposed": dict(self.decomposed), "decomposed_why": dict(self.decomposed_why)}

    def __str__(self) -> str:
        lines = [f"placement for {self.device}: {len(self.clusters)} cluster(s), "
                 f"{len(self.transfers)} transfer(s), {self.bytes_crossed} bytes crossed per call"]
        for c in self.clusters:
            ops = ", ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(c.ops.items())) or "(no ops)"
            tag = f"  [host fallback: {c.reason}]" if c.fallback else ""
            lines.append(f"  {c.name:<10} on {c.device:<14} {ops}{tag}")
        for t in self.transfers:
            lines.append(f"  transfer {t.value}: {t.source} -> {t.target}, {t.nbytes} bytes")
        if self.decomposed:
            ops = ", ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(self.decomposed.items()))
            lines.append(f"  decomposed for {self.device} (not claimed): {ops}")
            lines.extend(f"    {op}: {why}" for op, why in sorted(self.decomposed_why.items()))
        return "\n".join(lines)


_SUMMARIES: weakref.WeakKeyDictionary[Executable, PlacementSummary] = weakref.WeakKeyDictionary()


def record_placement(exe: Executable, summary: PlacementSummary) -> None:
    try:
        _SUMMARIES[exe] = summary
    except TypeError:  # an executable class with __slots__ and no __weakref__
        pass


def placement_of(exe: Executable) -> PlacementSummary | None:
    """The placement summary of an executable returned by ``compile_module``."""
    if isinstance(exe, PartitionedExecutable):
        return exe.summary
    return _SUMMARIES.get(exe)


def single_device_summary(module: Module, device: Device, reason: str = "") -> PlacementSummary:
    ops = Counter(n.op.value for n in module.entry.nodes if n.op not in _FREE and n.op is not Op.GET_TUPLE_ELEMENT)
    return PlacementSummary(device.name, [ClusterPlacement("cluster.0", device.name, dict(ops), reason)])


# ------------------------------------------------------------------------ partitioning


@dataclass
class Cluster:
    id: int
    device: Device
    nodes: list[Node]
    reason: str = ""


def _is_shape_only(n: Node) -> bool:
    if n.op is Op.FUSION:  # an optimized module's fusion of movement ops only
        return all(_is_shape_only(m) for m in n.attr["computation"].nodes)
    return n.traits.movement or n.op in (Op.IOTA, Op.GET_TUPLE_ELEMENT) or n.op in _FREE


def place_nodes(module: Module, device: Device, caps: Capabilities, host: Device
                ) -> tuple[list[Node], dict[int, Device], dict[int, str]]:
    """Where the partitioner runs each placed entry node (steps 1 and 3 of
    :func:`partition`), and why each node not on ``device`` is not: the placed nodes, their
    devices and the reasons. ``axle explain`` shows this very placement."""
    nodes = [n for n in module.entry.nodes if n.op not in _FREE]
    place: dict[int, Device] = {}
    why: dict[int, str] = {}
    for n in nodes:
        if n.op is Op.GET_TUPLE_ELEMENT:  # stays with the tuple it reads
            place[n.uid] = place[n.operands[0].uid]
            continue
        reason = unsupported_reason(caps, n)
        place[n.uid] = host if reason else device
        if reason:
            why[n.uid] = f"{n.op.value}: {reason}"
    for uid in _cost_guard(_phase_clusters(nodes, place), nodes, place, host):
        why[uid] = "cost guard: shape-only ops between host ops stay on the host"
    return nodes, place, why


def partition(module: Module, device: Device, caps: Capabilities, host: Device) -> list[Cluster]:
    """Clusters of the entry computation's placed nodes, in an order they can run in.

    1. Each node goes to the device or, when the device does not claim it, to the host.
    2. Initial clusters group nodes by (placement, phase), where a node's phase counts the
       device changes on its longest path from the inputs. An edge between two clusters
       always raises the phase, so the cluster graph is acyclic from the start.
    3. Cost guard: shape-only device clusters whose neighbours are all on the host move
       to the host (then the phases are recomputed).
    4. Greedy merging of same-placement clusters while that creates no cycle.
    """
    nodes, place, why = place_nodes(module, device, caps, host)
    members = _phase_clusters(nodes, place)
    where = {n.uid: c for c, ns in members.items() for n in ns}
    _greedy_merge(members, where, nodes, place)
    order = _topo(members, _edges(members, where, nodes))
    topo_index = {n.uid: i for i, n in enumerate(module.entry.nodes)}
    out = []
    for k, c in enumerate(order):
        ns = sorted(members[c], key=lambda n: topo_index[n.uid])
        reasons = list(dict.fromkeys(why[n.uid] for n in ns if n.uid in why))
        out.append(Cluster(k, place[ns[0].uid], ns, "; ".join(reasons)))
    return out


def _phase_clusters(nodes: Sequence[Node], place: dict[int, Device]) -> dict[int, list[Node]]:
    phase: dict[int, int] = {}
    keys: dict[tuple[int, str], int] = {}
    members: dict[int, list[Node]] = {}
    for n in nodes:
        p = 0
        for o in n.operands:
            if o.uid in phase:
                p = max(p, phase[o.uid] + (place[o.uid] != place[n.uid]))
        phase[n.uid] = p
        cid = keys.setdefault((p, place[n.uid].name), len(keys))
        members.setdefault(cid, []).append(n)
    return members


def _edges(members: dict[int, list[Node]], where: dict[int, int], nodes: Sequence[Node]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {c: set() for c in members}
    for n in nodes:
        for o in n.operands:
            if o.uid in where and where[o.uid] != where[n.uid]:
                out[where[o.uid]].add(where[n.uid])
    return out


def _cost_guard(members: dict[int, list[Node]], nodes: Sequence[Node], place: dict[int, Device],
                host: Device) -> list[int]:
    """Moves shape-only device clusters whose neighbours all run on the host to the host;
    returns the uids of the nodes moved."""
    where = {n.uid: c for c, ns in members.items() for n in ns}
    edges = _edges(members, where, nodes)
    preds: dict[int, set[int]] = {c: set() for c in members}
    for a, bs in edges.items():
        for b in bs:
            preds[b].add(a)
    moved = []
    for c, ns in members.items():
        if place[ns[0].uid] == host or not all(_is_shape_only(n) for n in ns):
            continue
        neighbours = preds[c] | edges[c]
        if neighbours and all(place[members[x][0].uid] == host for x in neighbours):
            for n in ns:
                place[n.uid] = host
                moved.append(n.uid)
    return moved


def _greedy_merge(members: dict[int, list[Node]], where: dict[int, int], nodes: Sequence[Node],
                  place: dict[int, Device]) -> None:
    """Merges same-placement clusters a, b (a first in topological order) unless a path
    a -> x -> ... -> b runs through a third cluster x: that merge would make a cycle.
    Reachability is a bitset per cluster, recomputed after each merge. Greedy: after a
    merge the scan resumes where it stopped instead of revisiting earlier clusters."""
    start = 0
    while True:
        edges = _edges(members, where, nodes)
        order = _topo(members, edges)
        pos = {c: i for i, c in enumerate(order)}
        reach: dict[int, int] = {}
        for c in reversed(order):
            r = 0
            for x in edges[c]:
                r |= (1 << pos[x]) | reach[x]
            reach[c] = r
        pair = None
        for i in range(start, len(order)):
            a = order[i]
            for b in order[i + 1:]:
                if place[members[a][0].uid] == place[members[b][0].uid] and not any(
                        (reach[x] >> pos[b]) & 1 for x in edges[a] if x != b):
                    pair = (i, a, b)
                    break
            if pair:
                break
        if pair is None:
            return
        start, a, b = pair
        for n in members.pop(b):
            where[n.uid] = a
            members[a].append(n)


def _topo(members: dict[int, list[Node]], edges: dict[int, set[int]]) -> list[int]:
    indeg = {c: 0 for c in members}
    for bs in edges.values():
        for b in bs:
            indeg[b] += 1
    ready = sorted(c for c, d in indeg.items() if d == 0)
    out = []
    while ready:
        c = ready.pop(0)
        out.append(c)
        for b in sorted(edges[c]):
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    assert len(out) == len(members), "cluster graph has a cycle"
    return out


# ------------------------------------------------------------------ cluster modules


@dataclass
class ClusterModule:
    """A cluster as a standalone module: ``inputs`` are the entry nodes bound to its
    parameters, ``outputs`` the entry nodes its results stand for."""

    cluster: Cluster
    module: Module
    inputs: list[Node]
    outputs: list[Node]


def _cluster_operand(o: Node, new: dict[int, Node], inputs: list[Node]) -> Node:
    """``o`` inside a cluster's module: its copy there (``new``), else a new parameter
    (appended to ``inputs``) or, for a constant, a copy."""
    if o.uid in new:
        return new[o.uid]
    if o.op is Op.CONSTANT:  # constants are copied into every cluster that reads them
        new[o.uid] = o.replace()
    else:
        inputs.append(o)
        new[o.uid] = make_node(Op.PARAMETER, (), {"index": len(inputs) - 1}, type=o.type,
                               name=o.name or f"in{len(inputs) - 1}")
    return new[o.uid]


def cluster_modules(module: Module, clusters: Sequence[Cluster]) -> list[ClusterModule]:
    entry = module.entry
    results = list(entry.root.operands) if entry.root.op is Op.TUPLE else [entry.root]
    owner = {n.uid: c.id for c in clusters for n in c.nodes}
    out = []
    for c in clusters:
        inside = {n.uid for n in c.nodes}
        inputs: list[Node] = []
        new: dict[int, Node] = {}
        for n in c.nodes:
            new[n.uid] = n.replace(operands=tuple(_cluster_operand(o, new, inputs) for o in n.operands))
        used_outside = {o.uid for n in entry.nodes if owner.get(n.uid) != c.id and n.op is not Op.TUPLE
                        for o in n.operands}
        outputs = [n for n in c.nodes if isinstance(n.type, TensorType)
                   and (n.uid in used_outside or any(r.uid == n.uid for r in results))]
        assert all(o.uid in inside for o in outputs)
        roots = [new[o.uid] for o in outputs]
        root = roots[0] if len(roots) == 1 else make_node(Op.TUPLE, roots)
        name = f"{module.name}.cluster{c.id}"
        params = tuple(new[i.uid] for i in inputs)
        out.append(ClusterModule(c, Module(name, Computation(name, params, root)), inputs, outputs))
    return out


# ------------------------------------------------------------------------- execution


@dataclass
class Step:
    device: Device
    executable: Executable
    inputs: list[int]  # uids of entry nodes
    outputs: list[int]


class PartitionedExecutable(Executable):
    """Runs cluster executables in order, moving buffers between devices as planned."""

    def __init__(self, module: Module, device: Device, steps: list[Step], summary: PlacementSummary) -> None:
        self.module = module
        self.device = device
        self.steps = steps
        self.summary = summary

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        entry = self.module.entry
        env: dict[int, Any] = {p.uid: a for p, a in zip(entry.parameters, args, strict=True)}
        for n in entry.nodes:
            if n.op is Op.CONSTANT:
                env[n.uid] = n.attr["value"].array
        for s in self.steps:
            ins = [_on(env[u], s.device) for u in s.inputs]
            for u, b in zip(s.outputs, s.executable.execute(ins), strict=True):
                env[u] = b
        results = list(entry.root.operands) if entry.root.op is Op.TUPLE else [entry.root]
        return [_on(env[r.uid], self.device) for r in results]

    def launcher(self) -> Callable[[Sequence[Buffer]], list[Buffer]] | None:
        """Eager dispatch's hot path (``Executable.launcher``) of a module that runs whole on
        another device (an eager op its device does not claim: the template's dot runs on
        cpu:0): that step's own launcher between the copies ``execute`` makes, bound once
        (the profiler's transfer spans are execute's: the core calls it while recording)."""
        entry = self.module.entry
        results = list(entry.root.operands) if entry.root.op is Op.TUPLE else [entry.root]
        if len(self.steps) != 1 or any(n.op is Op.CONSTANT for n in entry.nodes):
            return None
        step = self.steps[0]
        if step.inputs != [p.uid for p in entry.parameters] or step.outputs != [r.uid for r in results] \
                or step.device == self.device:
            return None
        inner = step.executable.launcher() or step.executable.execute
        here, there = REGISTRY.backend_for(self.device), REGISTRY.backend_for(step.device)
        home, away = self.device, step.device

        def run(args: Sequence[Buffer]) -> list[Buffer]:
            outs = inner([there.to_device(np.asarray(here.to_host(a), order="C"), away) for a in args])
            return [here.to_device(np.asarray(there.to_host(b), order="C"), home) for b in outs]

        return run

    def report(self) -> dict[str, Any]:
        kernels = 0
        for s in self.steps:
            kernels += int(s.executable.report().get("kernels", 0))
        return {"kernels": kernels, "clusters": len(self.steps), "placement": self.summary.as_dict()}

    def kernel_sources(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for i, s in enumerate(self.steps):
            for k, v in s.executable.kernel_sources().items():
                out[f"cluster{i}/{s.device.name}/{k}"] = v
        return out

    def placement(self) -> PlacementSummary:
        return self.summary


def _on(value: Any, device: Device) -> Buffer:
    """A value of the run (a buffer, or a constant's host array) as a buffer on ``device``."""
    if isinstance(value, Buffer):
        if value.device == device:
            return value
        value = REGISTRY.backend_for(value.device).to_host(value)
    return host_to_device(value, device)


def plan_transfers(device: Device, module: Module, parts: Sequence[ClusterModule],
                   devices: Sequence[Device]) -> list[Transfer]:
    """The crossings one call makes: inputs read on another device, results brought back."""
    home: dict[int, str] = {p.uid: device.name for p in module.entry.parameters}
    out: list[Transfer] = []
    for part, dev in zip(parts, devices):
        for i in part.inputs:
            src = home.get(i.uid)
            if src is not None and src != dev.name:
                out.append(Transfer(i.name or f"%{i.op.value}", src, dev.name, i.tensor_type.nbytes))
        for o in part.outputs:
            home[o.uid] = dev.name
    root = module.entry.root
    for r in (root.operands if root.op is Op.TUPLE else (root,)):
        src = home.get(r.uid, device.name)
        if src != device.name:
            out.append(Transfer(r.name or f"%{r.op.value}", src, device.name, r.tensor_type.nbytes))
    return out


def tuple_free(module: Module) -> bool:
    """Partitioning needs tensor-typed parameters (always true for traced modules)."""
    return not any(isinstance(p.type, TupleType) for p in module.entry.parameters)


# ------------------------------------------------------------------------- compiling


class PlacementWarning(UserWarning):
    """Part of a module runs on the host instead of the requested device."""


def host_devices(device: Device) -> list[Device]:
    """The devices fallback work may run on, best first."""
    out = []
    for name in HOST_BACKENDS:
        st = REGISTRY.statuses().get(name)
        if name != device.backend and st is not None and st.available and st.backend is not None:
            out.append(st.backend.devices()[0])
    return out


def _ops_text(module: Module) -> str:
    ops = Counter(n.op.value for n in module.entry.nodes if n.op not in _FREE and n.op is not Op.GET_TUPLE_ELEMENT)
    return ", ".join(sorted(ops)) or "no ops"


def _compile_host(module: Module, device: Device, optimize: bool, keep_module: bool) -> tuple[Device, Executable]:
    errors = []
    for host in host_devices(device):
        # what the host cannot run even with its unclaimed extended ops decomposed
        refused = unsupported_nodes(expand_for(module, host)[0], REGISTRY.backend_for(host).capabilities(host))
        if refused:  # e.g. a loop: it runs whole on a host that claims it and its body
            errors.append(f"{host.name}: {describe(refused[0][0])}: {refused[0][1]}")
            continue
        try:
            return host, compile_on_device(module, host, optimize=optimize, keep_module=keep_module)[0]
        except PlacementError:
            raise
        except Exception as e:  # noqa: BLE001 - the next host backend may manage
            errors.append(f"{host.name}: {type(e).__name__}: {e}")
    raise PlacementError(f"no host backend could run {module.name} ({_ops_text(module)}) for {device.name}: "
                         + ("; ".join(errors) or f"none of {', '.join(HOST_BACKENDS)} is available "
                                                  f"(check AXLE_BACKENDS)"))


def _compile_cluster(module: Module, device: Device, optimize: bool, strict: bool, keep_module: bool = True
                     ) -> tuple[Device, Executable, str, Module]:
    """Compiles a cluster for ``device`` (on failure for the host, unless strict); returns
    the device, the executable, why it is not on ``device`` and the module compiled
    (``keep_module``: see ``compile_on_device``)."""
    try:
        exe, compiled = compile_on_device(module, device, optimize=optimize, keep_module=keep_module)
        return device, exe, "", compiled
    except PlacementError:
        raise
    except Exception as e:  # any backend failure falls back (or is reported in strict mode)
        why = f"{type(e).__name__}: {e}"
        if strict:
            first = next((n for n in module.entry.nodes if n.op not in _FREE), module.entry.root)
            raise PlacementError(f"strict placement: {module.name} ({_ops_text(module)}) failed to compile for "
                                 f"{device.name} ({why}); first op {describe(first)}", where=first.loc) from e
        host, exe = _compile_host(module, device, optimize, keep_module)
        warnings.warn(f"axle: {module.name} ({_ops_text(module)}) failed to compile for {device.name} ({why}); "
                      f"running it on {host.name}", PlacementWarning, stacklevel=4)
        return host, exe, f"compile failed on {device.name}: {why}", module


def compile_placed(module: Module, device: Device, *, optimize: bool = True,
                   keep_module: bool = True) -> tuple[Executable, Module]:
    """``compile_optimized``'s body: the extended ops ``device`` does not claim expanded into
    their decompositions, then the whole module on ``device`` when it claims every node
    (falling back to the host if compilation fails), otherwise a partitioned executable.
    Returns the executable and the module compiled (for a partitioned or fallen-back
    executable: the module given, after expansion; ``keep_module=False``: a caller that drops
    the module, which then need not be read back from the compile cache, see
    ``compile_on_device``)."""
    reasons: dict[str, str] = {}
    module, decomposed = expand_for(module, device, reasons)
    exe, compiled = _compile_expanded(module, device, optimize, keep_module)
    summary = placement_of(exe)
    if summary is not None and decomposed:
        summary.decomposed = dict(decomposed)
        summary.decomposed_why = reasons
    return exe, compiled


def _compile_expanded(module: Module, device: Device, optimize: bool, keep_module: bool = True
                      ) -> tuple[Executable, Module]:
    backend = REGISTRY.backend_for(device)
    caps = backend.capabilities(device)
    strict = config.strict_placement
    missing = unsupported_nodes(module, caps)
    if missing and strict:
        raise strict_error(device, *missing[0])
    if not missing or not tuple_free(module):
        dev, exe, why, compiled = _compile_cluster(module, device, optimize, strict, keep_module)
        if dev == device:
            record_placement(exe, single_device_summary(module, device))
            return exe, compiled
        summary = single_device_summary(module, dev, why)
        ins = list(module.entry.parameters)
        root = module.entry.root
        outs = list(root.operands) if root.op is Op.TUPLE else [root]
        part = ClusterModule(Cluster(0, dev, []), module, ins, outs)
        summary.transfers = plan_transfers(device, module, [part], [dev])
        steps = [Step(dev, exe, [p.uid for p in ins], [o.uid for o in outs])]
        return PartitionedExecutable(module, device, steps, summary), module
    hosts = host_devices(device)
    if not hosts:
        n, why = missing[0]
        raise PlacementError(f"{describe(n)} cannot run on {device.name} ({why}) and no host backend "
                             f"({', '.join(HOST_BACKENDS)}) is available for the fallback (check AXLE_BACKENDS)",
                             where=n.loc)
    parts = cluster_modules(module, partition(module, device, caps, hosts[0]))
    steps, devices = [], []
    summary = PlacementSummary(device.name)
    for part in parts:
        c = part.cluster
        if c.device == device:
            dev, exe, why, _ = _compile_cluster(part.module, device, optimize, strict, keep_module)
        else:
            dev, exe = _compile_host(part.module, device, optimize, keep_module)
            why = c.reason
        steps.append(Step(dev, exe, [i.uid for i in part.inputs], [o.uid for o in part.outputs]))
        devices.append(dev)
        ops = Counter(n.op.value for n in c.nodes if n.op is not Op.GET_TUPLE_ELEMENT)
        summary.clusters.append(ClusterPlacement(f"cluster.{c.id}", dev.name, dict(ops), why))
    summary.transfers = plan_transfers(device, module, parts, devices)
    return PartitionedExecutable(module, device, steps, summary), module

