"""``axle explain``: what the compiler did with one function, for one signature and device.

    print(axle.jit(step).lower(w, b, x, y).explain())

shows the optimized module; each kernel (a fusion with the ops inside it, or a lone op)
and, for each neighbouring kernel it was not fused with, why; the buffers (what the
backend's buffer assignment reports, plus every value written to memory between
kernels); where each kernel runs (placement, fallbacks to the host); and the code the
backend generated. ``Explanation.to_html()`` adds the pass-by-pass graph pictures.

The reasons for unfused neighbours are the fusion pass's own records
(``Module.fusion_records``, :mod:`axle.ir.fusion_record`): explain reads them and never
re-derives a fusion decision. Placement is the partitioner's (:func:`axle.partition.place_nodes`,
cost guard included).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import distributed, passes
from .backend import Capabilities, Device
from .compiler import optimize_for
from .config import config
from .device_compile import expand_for
from .explain_html import explanation_html
from .frontend.jit import Lowered
from .ir.dot import module_to_dot
from .ir.fusion_record import FusionRecord
from .ir.module import Computation, Module, Node
from .ir.opcodes import PLUMBING
from .ir.ops import Op
from .ir.printer import _node_names
from .ir.traffic import Traffic, traffic
from .partition import host_devices, place_nodes, unsupported_reason
from .passes import policy_for
from .passes.fusion import why_alone
from .passes.pipeline import disabled_passes, run_pass
from .passes.policy import FusionPolicy
from .registry import REGISTRY

#: entry nodes that are not kernels of their own
HOST = "interpreter:0"  # the host reference backend, when the partitioner names none


def host_device_name(device: Device) -> str:
    """Where work the device cannot run goes: the partitioner's first host, when present."""
    hosts = host_devices(device)
    return hosts[0].name if hosts else HOST


@dataclass
class Neighbour:
    """A kernel next to another one in the dataflow, and why they stay apart."""

    name: str
    direction: str  # "producer" (edges are listed under their consumer)
    reason: str
    #: the fusion pass's reason code (ir.fusion_record.REASON_CODES), "placement" when a
    #: transfer separates them, "" when no record covers the edge
    code: str = ""


@dataclass
class Kernel:
    """One launch of the optimized module: a fusion or a lone op."""

    name: str
    op: str
    kind: str  # fusion kind, or "op" for a lone op
    ops: list[str]  # ops inside (a fusion) or [op]
    type: str
    bytes_out: int
    device: str
    neighbours: list[Neighbour] = field(default_factory=list)
    #: why it runs on the host instead of the requested device ("" when it does not)
    fallback_reason: str = ""
    #: its value is a result of the function (else a temporary read by later kernels)
    is_output: bool = False
    #: the fusion pass's record of this fusion (None for a lone op, or a fusion it did not form)
    record: FusionRecord | None = None
    #: a loop's or conditional's computations ("condition", "body", "branch 0"...) with the
    #: kernels each launches (per trip of a loop, per call of a branch), fused like the entry's
    calls: list[tuple[str, list[Kernel]]] = field(default_factory=list)

    @property
    def title(self) -> str:
        if self.op == Op.FUSION.value:
            return f"%{self.name} ({self.kind}) [{', '.join(sorted(set(self.ops)))}]"
        return f"%{self.name}" + ("" if self.name.split(".")[0] == self.op else f" ({self.op})")


@dataclass
class Explanation:
    """Everything ``explain`` found; ``str()`` is the text report."""

    function: str
    device: Device
    traced: Module
    optimized: Module
    #: (stage name, module) from the traced module to the optimized one
    stages: list[tuple[str, Module]]
    kernels: list[Kernel]
    report: dict[str, Any]
    kernel_sources: dict[str, str]
    reasons_source: str  # "the fusion pass's records", or why there are none
    policy: FusionPolicy
    #: entry node uid -> device name, for pictures colored by placement
    placement: dict[int, str] = field(default_factory=dict)
    #: the partitioner's summary of the compiled executable (clusters, transfers), if any
    placement_summary: str | None = None
    #: caveats about what is shown (e.g. a partitioned executable)
    notes: list[str] = field(default_factory=list)
    #: the collectives of an SPMD program (pmap, shard_map) and what each moves
    communication: list[Traffic] = field(default_factory=list)

    # -- text ---------------------------------------------------------------------
    def buffers_text(self) -> list[str]:
        out = []
        for key in _BUFFER_KEYS:
            if key in self.report:
                out.append(f"  {key:<17} {_fmt(self.report[key])}")
        if not out:
            out.append("  (this backend's report has no buffer assignment: temp_bytes/peak_bytes unknown)")
        written = [k for k in self.kernels if not k.is_output]
        total = sum(k.bytes_out for k in written)
        out.append(f"  temporaries (kernel results read by later kernels): {len(written)}, {_bytes(total)} in all")
        for k in sorted(written, key=lambda k: -k.bytes_out)[:12]:
            out.append(f"    %{k.name:<24} {k.type:<22} {_bytes(k.bytes_out):>10}")
        return out

    def placement_text(self) -> list[str]:
        counts: dict[str, int] = {}
        for k in self.kernels:
            counts[k.device] = counts.get(k.device, 0) + 1
        out = ["  " + ", ".join(f"{d}: {n} kernel{'s' if n != 1 else ''}" for d, n in counts.items())]
        fallbacks = [k for k in self.kernels if k.device != self.device.name]
        for k in fallbacks:
            out.append(f"  fallback: %{k.name} ({', '.join(sorted(set(k.ops)))}) runs on {k.device}: "
                       f"{k.fallback_reason or self.device.name + ' does not support it'}")
        if not fallbacks:
            out.append(f"  everything runs on {self.device.name} (no fallback)")
        for k in self.kernels:  # e.g. axle.numpy.linalg's LAPACK calls
            if k.op == Op.CUSTOM_CALL.value and k.device == self.device.name:
                out.append(f"  host step: %{k.name} (custom-call) runs its target's registered Python reference on "
                           f"the host ({k.device}'s runtime copies its operands and result; the in-tree backends "
                           f"all do so)")
        if self.placement_summary:
            out += ["  as compiled (partitioner):"] + ["    " + ln for ln in self.placement_summary.splitlines()]
        if self.communication:
            out.append(f"  collectives: {len(self.communication)}, each a host step between the device's kernels "
                       "(see -- communication --)")
        return out

    def communication_text(self) -> list[str]:
        """Per collective: kind, replica groups, bytes per replica and in all, local or
        cross-process; then the step's totals (collectives in loops count once per trip)."""
        out = []
        names = _node_names(self.optimized.entry)
        for t in self.communication:
            name = names.get(t.node.uid, t.node.op.value) if not t.in_loop else f"{t.node.op.value} (in a loop)"
            out.append(f"  %{name}: {t.describe()}")
        step = [t for t in self.communication if not t.in_loop]
        out.append(f"  per step: {len(step)} collective{'s' if len(step) != 1 else ''}, "
                   f"{_bytes(sum(t.bytes_per_replica for t in step))} per replica, "
                   f"{_bytes(sum(t.total_bytes for t in step))} over all replicas"
                   + (" (plus those in loops, per trip)" if len(step) < len(self.communication) else ""))
        return out

    def text(self, source: bool = True) -> str:
        inner = " and the loop and branch kernels listed under them" if any(k.calls for k in self.kernels) else ""
        lines = [f"== explain {self.function} on {self.device.name} "
                 f"({len(self.kernels)} kernel launch{'es' if len(self.kernels) != 1 else ''} per call{inner}) ==",
                 *[f"note: {n}" for n in self.notes],
                 "", "-- optimized module --", self.optimized.as_text().rstrip(), "",
                 f"-- kernels (why neighbours were not fused: {self.reasons_source}) --"]
        for k in self.kernels:
            lines.append(f"  {k.title}  -> {k.type}  on {k.device}")
            if k.op == Op.FUSION.value:
                lines.append(f"      {len(k.ops)} ops inside: {', '.join(k.ops)}")
            if k.record is not None:
                lines.append(f"      fusion pass: {k.record.kind} fusion %{k.record.fusion} of "
                             f"{', '.join(k.record.members)}")
            for nb in k.neighbours:
                code = f"[{nb.code}] " if nb.code else ""
                lines.append(f"      not fused with {nb.direction} %{nb.name}: {code}{nb.reason}")
            lines += _calls_text(k, "      ")
        lines += ["", "-- buffers --", *self.buffers_text(), "", "-- placement --", *self.placement_text()]
        if self.communication:
            lines += ["", "-- communication (collectives, bytes moved) --", *self.communication_text()]
        if source:
            lines += ["", f"-- generated code ({self.device.backend}) --"]
            if not self.kernel_sources:
                lines.append(f"  (backend {self.device.backend!r} generates no source code"
                             + (": it evaluates the module with NumPy)" if self.device.backend == "interpreter"
                                else ")"))
            for name, src in self.kernel_sources.items():
                lines += [f"// ---- {name} ----", src.rstrip()]
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.text()

    # -- pictures -----------------------------------------------------------------
    def dot(self, stage: int = -1) -> str:
        """DOT of one stage (default: the optimized module, colored by placement)."""
        name, module = self.stages[stage]
        # Color by device only when there is more than one; else keep the op-kind colors.
        several = len({d for d in self.placement.values()}) > 1
        placement = self.placement if module is self.optimized and several else None
        return module_to_dot(module, placement=placement, host=host_device_name(self.device),
                             title=f"{self.function}: {name}")

    def to_html(self) -> str:
        """A self-contained HTML page: the pass-by-pass pictures side by side, then the
        text sections."""
        return explanation_html(self)


#: the buffer-assignment facts of ``Compiled.report()``, in display order
_BUFFER_KEYS = ("temp_bytes", "naive_temp_bytes", "peak_bytes", "parameter_bytes", "output_bytes",
                "constant_bytes", "temp_buffers", "in_place")


def _fmt(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v} ({_bytes(v)})" if v >= 1024 else str(v)
    return str(v)


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _calls_text(k: Kernel, indent: str) -> list[str]:
    """The kernels a loop's or conditional's computations launch, nested loops included."""
    lines = []
    per = "trip" if k.op == Op.WHILE.value else "call"
    for role, subs in k.calls:
        lines.append(f"{indent}{role}: {len(subs)} kernel launch{'es' if len(subs) != 1 else ''} per {per}")
        for s in subs:
            lines.append(f"{indent}  {s.title}  -> {s.type}")
            if s.record is not None:
                lines.append(f"{indent}    fusion pass: {s.record.kind} fusion %{s.record.fusion} of "
                             f"{', '.join(s.record.members)}")
            lines += _calls_text(s, indent + "    ")
    return lines


# -- fusion reasons -------------------------------------------------------------------

def _inner_ops(n: Node) -> list[str]:
    if n.op is Op.FUSION:
        return [m.op.value for m in n.attr["computation"].nodes
                if not m.traits.structural and m.op is not Op.CONSTANT]
    return [n.op.value]


def recorded_reason(module: Module, producer: Node, consumer: Node) -> tuple[str, str] | None:
    """The fusion pass's (code, sentence) for why entry kernels ``producer`` and
    ``consumer`` are apart, read from the records (None when no record covers the edge):
    the consumer fusion's producer entry for the parameter the value enters through, else
    the producer fusion's consumer entry for the output the consumer reads, else, between
    two lone ops of a module the pass fused, why it left one of them alone."""
    rec = module.fusion_record(consumer)
    if rec is not None:
        comp = consumer.attr["computation"]
        ports = {comp.parameters[i].name for i, o in enumerate(consumer.operands)
                 if producer in _through_plumbing_up(o)}
        for nf in rec.reasons("producer"):
            if nf.port in ports:
                return nf.code, nf.text
    rec = module.fusion_record(producer)
    if rec is not None:
        outs = {str(o.attr["index"]) if o.op is Op.GET_TUPLE_ELEMENT else "0"
                for o in consumer.operands if producer in _through_plumbing_up(o)}
        ops = set(_inner_ops(consumer)) if consumer.op is Op.FUSION else {consumer.op.value}
        for nf in rec.reasons("consumer"):
            if nf.port in outs and nf.neighbour in ops:
                return nf.code, nf.text
    if module.fusion_records and producer.op is not Op.FUSION and consumer.op is not Op.FUSION:
        why = why_alone(consumer) or why_alone(producer)
        if why is not None:
            return why.code, why.text
    return None


# -- gathering ------------------------------------------------------------------------

def _launched(comp: Computation) -> list[Node]:
    return [n for n in comp.nodes if n.op not in PLUMBING]


def _through_plumbing_up(n: Node) -> list[Node]:
    """The kernels that produce ``n`` (looking through tuples and tuple reads)."""
    if n.op in (Op.PARAMETER, Op.CONSTANT):
        return []
    if n.op in (Op.TUPLE, Op.GET_TUPLE_ELEMENT):
        return [k for o in n.operands for k in _through_plumbing_up(o)]
    return [n]


#: the computations a control op calls, as explain names them
_CALLEES: dict[Op, Callable[[Node], list[tuple[str, Computation]]]] = {
    Op.WHILE: lambda n: [("condition", n.attr["condition"]), ("body", n.attr["body"])],
    Op.CONDITIONAL: lambda n: [(f"branch {k}", c) for k, c in enumerate(n.attr["branches"])],
}


def _called_kernels(n: Node, module: Module, device: str) -> list[tuple[str, list[Kernel]]]:
    """The kernels of each computation the control op ``n`` calls, on ``n``'s device (a
    loop or conditional runs whole on one device), with the fusion pass's records."""
    out = []
    for role, comp in _CALLEES[n.op](n) if n.op in _CALLEES else ():
        names = _node_names(comp)
        results = {k.uid for k in _through_plumbing_up(comp.root)}
        out.append((f"{role} %{comp.name}", [Kernel(
            name=names[m.uid], op=m.op.value, kind=m.attr["kind"] if m.op is Op.FUSION else "op",
            ops=_inner_ops(m), type=str(m.type), bytes_out=m.type.nbytes, device=device,
            is_output=m.uid in results, record=module.fusion_record(m),
            calls=_called_kernels(m, module, device)) for m in _launched(comp)]))
    return out


def placement(module: Module, device: Device, caps: Capabilities) -> tuple[dict[int, str], dict[int, str]]:
    """Where each entry kernel runs and why each one off ``device`` is: the partitioner's
    decision (:func:`axle.partition.place_nodes`, its cost guard included) as device names;
    nodes it does not place (parameters, constants, tuples) are on ``device``."""
    hosts = host_devices(device)
    host = hosts[0] if hosts else Device(HOST.split(":")[0], 0)
    _, place, why = place_nodes(module, device, caps, host)
    names = {n.uid: place[n.uid].name if n.uid in place else device.name for n in module.entry.nodes}
    # the device's own words for a node it refuses; the cost guard's for one it moved
    reasons = {n.uid: unsupported_reason(caps, n) or why[n.uid] for n in module.entry.nodes if n.uid in why}
    return names, reasons


def _stages(lowered: Lowered, optimized: Module) -> list[tuple[str, Module]]:
    """The module after each top-level pipeline entry that changed it (a fixed-point
    group counts as one entry), from the traced module to the one the backend compiled.
    Without a pass manager (or with the optimizer off): traced and optimized only."""
    snaps: list[tuple[str, Module]] = [("traced", lowered.module)]
    expanded, decomposed = expand_for(lowered.module, lowered.device)
    if decomposed:  # extended ops the device does not claim, in their decompositions
        snaps.append((f"expand-extended ({', '.join(sorted(decomposed))})", expanded))
    pipeline_for = getattr(passes, "pipeline_for", None)
    if pipeline_for is not None and config.optimize:
        module = expanded
        skip = disabled_passes()
        for entry in pipeline_for(REGISTRY.backend_for(lowered.device), lowered.device).entries:
            if entry.item.name in skip:
                continue
            module, changed = run_pass(entry.item, module)
            if changed:
                snaps.append((entry.item.name, module))
        if module.as_text() == optimized.as_text():
            if len(snaps) > 1:
                snaps[-1] = (snaps[-1][0], optimized)  # the very object explained below
            return snaps
    if optimized is not lowered.module:
        snaps.append(("optimized", optimized))
    return snaps


def explain(lowered: Lowered, *, source: bool = True) -> Explanation:
    """Optimizes and compiles ``lowered`` (from ``axle.jit(f).lower(*args)``) and
    gathers what happened. ``source=False`` skips nothing but the code listing."""
    device = lowered.device
    backend = REGISTRY.backend_for(device)
    compiled = lowered.compile()
    # The module the backend compiled, when Compiled records it; else optimize again. A
    # partitioned executable records the module as given (each cluster is optimized on
    # its own): then show the whole module optimized for the device, and say so.
    optimized = getattr(compiled, "module", None)
    notes: list[str] = []
    if optimized is None or (optimized is lowered.module and config.optimize):
        if optimized is lowered.module:
            notes.append("the executable is partitioned across devices and each cluster is optimized on its "
                         "own; shown: the whole module optimized for the device, before partitioning")
        optimized = optimize_for(lowered.module, device) if config.optimize else expand_for(lowered.module, device)[0]
    report = dict(compiled.report())
    sources = dict(compiled.executable.kernel_sources()) if source else {}
    policy = policy_for(backend, device)
    caps = backend.capabilities(device)
    where, off_device = placement(optimized, device, caps)
    summary_fn = getattr(compiled, "placement", None)  # the partitioner's summary, when present
    summary = summary_fn() if callable(summary_fn) else None

    comp = optimized.entry
    names = _node_names(comp)
    launched = _launched(comp)
    consumers: dict[int, list[Node]] = {n.uid: [] for n in launched}
    for n in launched:
        for o in n.operands:
            for p in _through_plumbing_up(o):
                if n not in consumers[p.uid]:
                    consumers[p.uid].append(n)

    recorded = bool(optimized.fusion_records)

    def neighbour(p: Node, c: Node) -> Neighbour:
        if where[p.uid] != where[c.uid]:
            return Neighbour(names[p.uid], "producer", f"they run on different devices ({where[p.uid]} vs "
                                                       f"{where[c.uid]}); a transfer separates them", "placement")
        r = recorded_reason(optimized, p, c)
        if r is None:
            return Neighbour(names[p.uid], "producer", "no fusion record covers this edge" if recorded
                             else "the fusion pass made no records for this module (optimizer off, or nothing to fuse)")
        return Neighbour(names[p.uid], "producer", r[1], r[0])

    outputs = {k.uid for k in _through_plumbing_up(comp.root)}
    kernels: list[Kernel] = []
    for n in launched:
        # Each producer->consumer edge is explained once, under the consumer.
        producers: list[Node] = []
        for o in n.operands:
            for p in _through_plumbing_up(o):
                if p not in producers:
                    producers.append(p)
        neighbours = [neighbour(p, n) for p in producers]
        kernels.append(Kernel(
            name=names[n.uid], op=n.op.value, kind=n.attr["kind"] if n.op is Op.FUSION else "op",
            ops=_inner_ops(n), type=str(n.type), bytes_out=n.type.nbytes, device=where[n.uid],
            neighbours=neighbours, is_output=n.uid in outputs, record=optimized.fusion_record(n),
            fallback_reason=off_device.get(n.uid, ""), calls=_called_kernels(n, optimized, where[n.uid])))
    return Explanation(
        function=lowered.module.name, device=device, traced=lowered.module, optimized=optimized,
        stages=_stages(lowered, optimized), kernels=kernels, report=report, kernel_sources=sources,
        reasons_source="the fusion pass's records" if recorded else "none: the fusion pass made no records",
        policy=policy, placement=where, placement_summary=str(summary) if summary is not None else None,
        notes=notes, communication=traffic(optimized, distributed.process_count()))


# ``Lowered.explain()``: the frontend's class gets its tools-layer method here, as axle.numpy
# attaches the array methods, so that jit needs nothing above it (axle/__init__ imports this).
Lowered.explain = explain  # type: ignore[method-assign]  # attached method, see above
