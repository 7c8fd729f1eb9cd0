"""Fusion decisions, as the fusion pass records them on the module (``Module.fusion_records``).

The fusion pass (:mod:`axle.passes.fusion`) is the only place that decides fusion. For
each fusion it forms it writes one :class:`FusionRecord`: the kind, the member ops and,
for each neighbour (producer or consumer) it left out, a :class:`NotFused` with a
machine-readable code (:data:`REASON_CODES`) and a sentence. ``axle explain``, the
placement summary and the backends read these records; none of them re-derives them.

A record names its fusion by the fused computation's name, which the pass makes unique in
the module and which every later rewrite keeps (a fusion rebuilt over new operands keeps its
computation; dead-output pruning keeps its name). A producer entry names the fused
computation's parameter the value enters through (``p3``: parameter names survive pruning
too). :func:`carry_records` re-checks records against a new entry computation whenever a
pass makes one (``Module.with_entry``), so a record never names a fusion or a parameter
that no longer exists: a fusion merged away or rewritten loses its record; a module built
from scratch (``Module(name, entry)``, the parser, the partitioner's clusters) has none.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .computation import called_computations
from .opcodes import Op

if TYPE_CHECKING:
    from .module import Computation, Node

#: reason code -> what it means (the text of each NotFused says it for the case at hand)
REASON_CODES: dict[str, str] = {
    "result": "the producer's value is a result of the function (and has other readers): it is written to memory",
    "multiple-consumers": "the value is read by several kernels; fusing it into each would recompute it",
    "duplicate-reduction": "a reduction read by several kernels is never recomputed in each of them",
    "not-fusible": "the neighbour may not sit inside a fusion (side effect, custom call, plumbing)",
    "no-kind": "the neighbour is fusible compute of no fusion kind (neither elementwise, movement, "
               "reduction nor contraction): a kernel of its own",
    "contraction": "a contraction (dot) is a kernel of its own: producers are not inlined into it, and it "
                   "takes no epilogue (the backend's policy has dot_epilogue off, or no consumer group took it)",
    "dot-operand": "a producer of a dot's operand stays out of the dot's output fusion: the GEMM reads its "
                   "operands from memory tile by tile",
    "epilogue": "a consumer that is not elementwise over a dot's output (a reduction, a transpose...) stays "
                "out of the dot's output fusion",
    "max-fusion-nodes": "the fusion would have more ops than the policy's max_fusion_nodes",
    "inline-cost": "the fused kernel would evaluate more than the policy's max_inline_cost per element",
    "padded-transcendental": "a pad would re-evaluate a transcendental for every padded element",
    "broadcast-recompute": "a broadcast would re-evaluate slow ops (a transcendental, a division, a square "
                           "root) for every element it repeats their value along the output's innermost dim: a "
                           "kernel of its own computes the value once",
    "multi-output-off": "the fusion would export several values and the policy has multi_output off",
    "tuple-value": "a tuple value cannot be a fusion output",
    "iteration-space": "different iteration spaces (output shapes) in one loop fusion",
    "row-fusion-off": "a reduction's consumers need a row fusion, which the policy has off",
    "reduction-axes": "a row fusion reduces trailing axes only",
    "reduction-shape": "reductions over different shapes or axes in one fusion",
    "row-mismatch": "a consumer would read another row's reduction (or mixes shapes a row kernel cannot index)",
    "big-constant": "the constant has more elements than the policy's max_fused_constant_elements",
    "vetoed": "the device's fusion predicate refused the fusion",
    "in-place-update": "the neighbour writes windows into its operand (scatter, dynamic-update-slice): a kernel "
                       "of its own, run in place over that operand's buffer",
    "epilogue-store": "the value finishes a contraction's epilogue and several kernels read it: the "
                      "contraction's kernel computes it once and stores it, rather than each reader recomputing "
                      "it from the contraction's output",
    "strided-transpose": "a big transpose that moves its operand's contiguous axis is a kernel of its own (a "
                         "tiled transpose), not a strided access inside a fusion that computes other values",
}


@dataclass(frozen=True)
class NotFused:
    """A neighbour of a fusion that was left out, and why."""

    direction: str  # "producer" (the fusion reads its value) or "consumer" (it reads the fusion's)
    neighbour: str  # the neighbour's op, e.g. "dot_general"
    member: str  # the op of the member on this side of the edge
    code: str  # a key of REASON_CODES
    text: str  # the sentence for this case, with the numbers (e.g. the cost and the limit)
    #: where the edge meets the fusion: for a producer the fused computation's parameter name
    #: the value enters through ("p3"), for a consumer the output index it reads ("0")
    port: str

    def __post_init__(self) -> None:
        assert self.code in REASON_CODES, f"unknown fusion reason code {self.code!r}"
        assert self.direction in ("producer", "consumer"), self.direction


@dataclass(frozen=True)
class FusionRecord:
    """One fusion the fusion pass formed."""

    fusion: str  # the fused computation's name, unique in the module
    kind: str  # one of ir.ops.FUSION_KINDS
    members: tuple[str, ...]  # the ops inside, in topological order (see members_of)
    not_fused: tuple[NotFused, ...] = ()
    #: the fused computation as recorded: when a later pass rewrites it (dead outputs
    #: pruned), output indices may have moved and consumer entries are dropped
    computation: Computation | None = field(default=None, compare=False, repr=False)

    def reasons(self, direction: str) -> list[NotFused]:
        return [n for n in self.not_fused if n.direction == direction]


def members_of(comp: Computation) -> tuple[str, ...]:
    """The ops of a fused computation as a record lists them: every node but its
    parameters and tuple root, in topological order."""
    return tuple(n.op.value for n in comp.nodes if n.op not in (Op.PARAMETER, Op.TUPLE))


def fusion_nodes(comp: Computation) -> list[Node]:
    """The fusion nodes of ``comp`` and of the computations its loops and conditionals call
    (bodies, conditions, branches, nested to any depth): the fusion pass fuses each of
    those computations, and its records name fusions in all of them."""
    out: list[Node] = []
    for n in comp.nodes:
        if n.op is Op.FUSION:
            out.append(n)
        elif n.traits.control:
            for sub in called_computations(n):
                out += fusion_nodes(sub)
    return out


def carry_records(records: tuple[FusionRecord, ...], entry: Computation) -> tuple[FusionRecord, ...]:
    """The records that still describe fusions of ``entry``, brought up to date: a record
    whose fusion is gone is dropped, one whose computation was rewritten gets its members
    again and keeps only the producer entries whose parameter still exists (and its
    consumer entries only when the outputs are unchanged in number)."""
    if not records:
        return ()
    fusions = {n.attr["computation"].name: n for n in fusion_nodes(entry)}
    out = []
    for r in records:
        node = fusions.get(r.fusion)
        if node is None:
            continue
        comp = node.attr["computation"]
        if comp is r.computation:
            out.append(r)
            continue
        params = {p.name for p in comp.parameters}
        same_outputs = r.computation is not None and len(r.computation.result_types) == len(comp.result_types)
        kept = tuple(n for n in r.not_fused
                     if (n.port in params if n.direction == "producer" else same_outputs))
        out.append(replace(r, kind=node.attr["kind"], members=members_of(comp), not_fused=kept, computation=comp))
    return tuple(out)
