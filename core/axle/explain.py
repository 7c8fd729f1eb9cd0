"""``axle explain``: what the compiler did with one function, for one signature and device.

    print(axle.jit(step).lower(w, b, x, y).explain())

shows the optimized module; each kernel (a fusion with the ops inside it, or a lone op)
and, for each neighbouring kernel it was not fused with, why; the buffers (what the
backend's buffer assignment reports, plus every value written to memory between
kernels); where each kernel runs (placement, fallbacks to the host); and the code the
backend generated. ``Explanation.to_html()`` adds the pass-by-pass graph pictures.

The reasons for unfused neighbours come from the fusion pass when it records them
(``module`` attribute ``fusion_reasons`` or a ``why_not_fused`` function in
``axle.passes.fusion``); otherwise they are derived here from the op traits and the
backend's :class:`~axle.passes.policy.FusionPolicy`, and say so.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import passes
from .backend import Capabilities, Device
from .compiler import optimize_for
from .config import config
from .explain_html import explanation_html
from .frontend.jit import Lowered
from .ir.module import Computation, Module, Node
from .ir.opcodes import PLUMBING
from .ir.dot import module_to_dot
from .ir.ops import Op
from .ir.printer import _node_names
from .partition import host_devices, unsupported_reason
from .passes import fusion as fusion_pass
from .passes import policy_for
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
    reasons_source: str  # "fusion pass" or "derived from op traits and the fusion policy"
    policy: FusionPolicy
    #: entry node uid -> device name, for pictures colored by placement
    placement: dict[int, str] = field(default_factory=dict)
    #: the partitioner's summary of the compiled executable (clusters, transfers), if any
    placement_summary: str | None = None
    #: caveats about what is shown (e.g. a partitioned executable)
    notes: list[str] = field(default_factory=list)

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
        if self.placement_summary:
            out += ["  as compiled (partitioner):"] + ["    " + ln for ln in self.placement_summary.splitlines()]
        return out

    def text(self, source: bool = True) -> str:
        lines = [f"== explain {self.function} on {self.device.name} "
                 f"({len(self.kernels)} kernel launch{'es' if len(self.kernels) != 1 else ''} per call) ==",
                 *[f"note: {n}" for n in self.notes],
                 "", "-- optimized module --", self.optimized.as_text().rstrip(), "",
                 f"-- kernels (why neighbours were not fused: {self.reasons_source}) --"]
        for k in self.kernels:
            lines.append(f"  {k.title}  -> {k.type}  on {k.device}")
            if k.op == Op.FUSION.value:
                lines.append(f"      {len(k.ops)} ops inside: {', '.join(k.ops)}")
            for nb in k.neighbours:
                lines.append(f"      not fused with {nb.direction} %{nb.name}: {nb.reason}")
        lines += ["", "-- buffers --", *self.buffers_text(), "", "-- placement --", *self.placement_text()]
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


# -- fusion reasons -------------------------------------------------------------------

def _inner_ops(n: Node) -> list[str]:
    if n.op is Op.FUSION:
        return [m.op.value for m in n.attr["computation"].nodes
                if not m.traits.structural and m.op is not Op.CONSTANT]
    return [n.op.value]


def _ends_in_reduce(n: Node) -> bool:
    if n.op is Op.FUSION:
        root = n.attr["computation"].root
        roots = root.operands if root.op is Op.TUPLE else (root,)
        return any(r.traits.reduction for r in roots)
    return n.traits.reduction


def _why_no_row(producer: Node, policy: FusionPolicy) -> str:
    """Why a row fusion (reduce over trailing axes, broadcast back) did not absorb it."""
    if not policy.row_fusion:
        return " (row fusion is off in this backend's policy)"
    comp_nodes = producer.attr["computation"].nodes if producer.op is Op.FUSION else [producer]
    for r in (m for m in comp_nodes if m.traits.reduction):
        rank = len(r.operands[0].shape)
        axes = tuple(sorted(r.attr["axes"]))
        if axes != tuple(range(rank - len(axes), rank)):
            return f" (it reduces axes {list(axes)}; a row fusion needs the trailing axes)"
    return " (no row fusion fits: the consumer mixes other reductions or shapes)"


def _is_dot_kernel(n: Node) -> bool:
    """A lone dot, or an output fusion (a dot with its epilogue)."""
    return n.op is Op.DOT_GENERAL or (n.op is Op.FUSION and n.attr["kind"] == "output")


def _not_fusible(n: Node) -> bool:
    if n.op is Op.FUSION:
        return False
    return not n.traits.fusible or n.traits.side_effect


def _out_shape(n: Node) -> tuple[int, ...] | None:
    t = n.type
    return getattr(t, "shape", None)


def derived_reason(producer: Node, consumer: Node, users: int, policy: FusionPolicy,
                   placement: dict[int, str], optimizer_fused: bool = True) -> str:
    """Why the fusion pass would keep ``producer`` and ``consumer`` in separate kernels,
    judged from traits and the policy (the first rule that applies)."""
    dp, dc = placement.get(producer.uid), placement.get(consumer.uid)
    if dp and dc and dp != dc:
        return f"they run on different devices ({dp} vs {dc}); a transfer separates them"
    for n in (producer, consumer):
        if _not_fusible(n):
            return f"{n.op.value} is never fused (not fusible / side effects): it is a kernel of its own"
    if _is_dot_kernel(producer):
        if policy.dot_epilogue:
            return "the dot could take an elementwise epilogue, but this consumer is not a pure elementwise op on its result"
        return "a dot stays its own kernel: this backend's fusion policy has dot_epilogue=False"
    if _is_dot_kernel(consumer):
        return "a dot reads its operands tile by tile, several times each; producers are not inlined into it"
    if _ends_in_reduce(producer):
        if users > 1:
            return (f"the producer ends in a reduction and has {users} consumers: a reduction is never "
                    f"recomputed in several kernels, so its result goes through memory")
        return "the producer ends in a reduction: its consumers need the finished result" + _why_no_row(producer, policy)
    size = len(_inner_ops(producer)) + len(_inner_ops(consumer))
    if size > policy.max_fusion_nodes:
        return f"together they have {size} ops, more than max_fusion_nodes={policy.max_fusion_nodes}"
    if users > 1 and not (producer.op is not Op.FUSION and producer.traits.cheap):
        return (f"the producer has {users} consumers; fusing it into each would recompute it "
                f"(it is not cheap enough to duplicate)")
    ps, cs = _out_shape(producer), _out_shape(consumer)
    if ps is not None and cs is not None and ps != cs and not _ends_in_reduce(consumer):
        return f"different iteration shapes ({list(ps)} vs {list(cs)})"
    if not optimizer_fused:
        return "the optimizer formed no fusions in this module (optimizer off, or not in this build)"
    return "no rule derived here forbids it: the fusion pass chose to keep them apart"


def _pass_reasons(module: Module) -> Callable[[Node, Node], str | None] | None:
    """The fusion pass's own explanation, when it offers one."""
    recorded = getattr(module, "fusion_reasons", None)
    if isinstance(recorded, dict):
        return lambda p, c: recorded.get((p.uid, c.uid))
    fn = getattr(fusion_pass, "why_not_fused", None)
    if fn is None:
        return None
    return lambda p, c: fn(module, p, c)


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


def _unsupported_reason(caps: Capabilities, node: Node) -> str:
    """The partitioner's words for why ``caps`` does not cover ``node``, when it has them."""
    return unsupported_reason(caps, node) or ""


def placement_of(module: Module, device: Device, caps: Capabilities) -> dict[int, str]:
    """Where each entry kernel runs: on ``device`` when its capabilities cover the node,
    else on the host reference backend (what the partitioner does)."""
    out: dict[int, str] = {}
    host = host_device_name(device)
    for n in module.entry.nodes:
        out[n.uid] = device.name if caps.supports(n) else host
    return out


def _stages(lowered: "Lowered", optimized: Module) -> list[tuple[str, Module]]:
    """The module after each top-level pipeline entry that changed it (a fixed-point
    group counts as one entry), from the traced module to the one the backend compiled.
    Without a pass manager (or with the optimizer off): traced and optimized only."""
    snaps: list[tuple[str, Module]] = [("traced", lowered.module)]
    pipeline_for = getattr(passes, "pipeline_for", None)
    if pipeline_for is not None and config.optimize:
        module = lowered.module
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


def explain(lowered: "Lowered", *, source: bool = True) -> Explanation:
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
        optimized = optimize_for(lowered.module, device) if config.optimize else lowered.module
    report = dict(compiled.report())
    sources = dict(compiled.executable.kernel_sources()) if source else {}
    policy = policy_for(backend, device)
    caps = backend.capabilities(device)
    placement = placement_of(optimized, device, caps)
    summary_fn = getattr(compiled, "placement", None)  # the partitioner's summary, when present
    summary = summary_fn() if callable(summary_fn) else None
    pass_reason = _pass_reasons(optimized)

    comp = optimized.entry
    names = _node_names(comp)
    launched = _launched(comp)
    consumers: dict[int, list[Node]] = {n.uid: [] for n in launched}
    for n in launched:
        for o in n.operands:
            for p in _through_plumbing_up(o):
                if n not in consumers[p.uid]:
                    consumers[p.uid].append(n)

    def reason(p: Node, c: Node) -> str:
        if pass_reason is not None:
            r = pass_reason(p, c)
            if r:
                return r
        return derived_reason(p, c, len(consumers[p.uid]), policy, placement, fused_any)

    outputs = {k.uid for k in _through_plumbing_up(comp.root)}
    fused_any = any(n.op is Op.FUSION for n in launched)
    kernels: list[Kernel] = []
    for n in launched:
        # Each producer->consumer edge is explained once, under the consumer.
        producers: list[Node] = []
        for o in n.operands:
            for p in _through_plumbing_up(o):
                if p not in producers:
                    producers.append(p)
        neighbours = [Neighbour(names[p.uid], "producer", reason(p, n)) for p in producers]
        kernels.append(Kernel(
            name=names[n.uid], op=n.op.value, kind=n.attr["kind"] if n.op is Op.FUSION else "op",
            ops=_inner_ops(n), type=str(n.type), bytes_out=n.type.nbytes, device=placement[n.uid],
            neighbours=neighbours, is_output=n.uid in outputs,
            fallback_reason="" if placement[n.uid] == device.name else _unsupported_reason(caps, n)))
    return Explanation(
        function=lowered.module.name, device=device, traced=lowered.module, optimized=optimized,
        stages=_stages(lowered, optimized), kernels=kernels, report=report, kernel_sources=sources,
        reasons_source="fusion pass" if pass_reason is not None else "derived from op traits and the fusion policy",
        policy=policy, placement=placement, placement_summary=str(summary) if summary is not None else None,
        notes=notes)


# ``Lowered.explain()``: the frontend's class gets its tools-layer method here, as axle.numpy
# attaches the array methods, so that jit needs nothing above it (axle/__init__ imports this).
Lowered.explain = explain  # type: ignore[attr-defined]  # attached method, see above
