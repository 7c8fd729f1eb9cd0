"""Fusion: groups of nodes become ``fusion`` nodes, one kernel each (docs/ir.md, "Fusions").

Two phases, then materialization:

1. **Producer into consumer** (operands-last walk, like XLA's instruction fusion). A
   node joins the group of its users when all its users sit in that one group, so no
   value leaves a group except through its root and no cycle can form. A *cheap*
   node (broadcast, constant, iota, convert...) with users in several groups is
   recomputed in each of them when the policy allows; an expensive one (exp, a reduce,
   a dot) is never duplicated. A reduce joins a consumer group only as a ``row`` fusion
   (reduction over trailing axes broadcast back along the kept dims). A dot (trait
   ``contraction``) takes no producer; when the policy has ``dot_epilogue`` on it joins
   its consumers' group as an ``output`` fusion if that group is an epilogue: ops
   elementwise over the dot's output (bias add, activation, residual add, scaling,
   convert), reading other operands at the same index or through broadcasts. A
   convolution (an extended contraction, not otherwise fusible) does the same when the
   policy has ``conv_epilogue`` on (:func:`takes_epilogue`). A cheap value that finishes
   such an epilogue and that several kernels read is not recomputed in each of them (each
   would re-read the contraction's output, which then takes no epilogue): the contraction
   computes it once and stores it (``_Fuser._kept_epilogue``, code ``epilogue-store``).
2. **Siblings** (multi-output): groups that read the same operand and are not connected
   by any path are merged when the result is still a valid kind (e.g. two reductions
   of ``x`` over the same axes: ``x`` is read once). A tuple root carries the outputs.

Every candidate group is checked by :func:`decide`, which names its kind (loop, input,
row, output) or refuses it with a reason; the backend's :class:`~axle.passes.policy.FusionPolicy`
bounds what it accepts, including the size of the kernel that inlines the group
(:mod:`axle.passes.inline_cost`).

The pass records each decision on the module (``Module.fusion_records``, see
:mod:`axle.ir.fusion_record`): per fusion its kind, its members and, for each neighbour
left out, the reason code and sentence of the refusal that kept it out. ``axle explain``
and the placement summary read those records and never re-derive them.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..ir.builder import make_node
from ..ir.computation import called_computations
from ..ir.fusion_record import FusionRecord, NotFused, fusion_nodes, members_of
from ..ir.module import Computation, Module, Node
from ..ir.ops import Op
from ..ir.types import TensorType, squeeze
from .inline_cost import broadcast_recompute, inline_cost, padded_transcendental
from .pipeline import Pass
from .policy import DEFAULT_POLICY, FusionPolicy
from .rewrite import map_called, rebuild

# --------------------------------------------------------------------- node classes


def loop_fusible(n: Node) -> bool:
    """Computes one output element from the same positions of its inputs (or from
    indices): elementwise ops, data movement, indexed loads (gather, dynamic-slice: the
    position comes from loaded index values), iota, constants."""
    t = n.traits
    return (t.fusible and not t.structural and not t.side_effect and not t.reduction
            and (t.elementwise or t.movement or t.indexed or not n.operands))


def is_reduction(n: Node) -> bool:
    t = n.traits
    return t.reduction and t.fusible and not t.side_effect


def is_contraction(n: Node) -> bool:
    """A dot: the op table's ``contraction`` trait (a gather or a convolution is not one
    just because it is none of the other kinds)."""
    t = n.traits
    return t.contraction and t.fusible and not t.side_effect


def takes_epilogue(n: Node, policy: FusionPolicy) -> bool:
    """Whether ``n`` may head an ``output`` fusion under ``policy``: a dot with
    ``dot_epilogue``, a convolution (extended, else never fused) with ``conv_epilogue``."""
    t = n.traits
    if not t.contraction or t.side_effect:
        return False
    return policy.conv_epilogue if t.extended else t.fusible and policy.dot_epilogue


def is_kernel(n: Node) -> bool:
    """Needs a kernel of its own when not fused (constants are data, not kernels)."""
    return n.op is not Op.CONSTANT and (loop_fusible(n) or is_reduction(n) or is_contraction(n))


@dataclass(frozen=True)
class Refusal:
    """Why a node stays out of a group: a code of ``ir.fusion_record.REASON_CODES`` and
    the sentence for the case at hand."""

    code: str
    text: str


def why_alone(n: Node) -> Refusal | None:
    """Why the pass puts ``n`` in no group at all (None: it may join one)."""
    t = n.traits
    if not t.fusible or t.side_effect or t.structural:
        what = "has side effects" if t.side_effect else "is plumbing" if t.structural else "is not fusible"
        return Refusal("not-fusible", f"{n.op.value} {what}: it is never fused")
    if t.updates_operand:
        return Refusal("in-place-update", f"{n.op.value} writes windows into its operand: a kernel of its own, "
                                          f"run in place over the operand's buffer where the operand dies there")
    if is_contraction(n):
        return Refusal("contraction", f"{n.op.value} is a contraction: a kernel of its own (its operands are "
                                      f"read from memory tile by tile; the backend's policy has dot_epilogue off)")
    if not (loop_fusible(n) or is_reduction(n)):
        return Refusal("no-kind", f"{n.op.value} has no fusion kind: a kernel of its own")
    return None


# ------------------------------------------------------------------------ classify


def _downstream(members: Sequence[Node], sources: Iterable[Node]) -> set[int]:
    """uids of members reachable from ``sources`` through members (sources included)."""
    dep = {s.uid for s in sources}
    for m in members:  # members are in topological order
        if m.uid not in dep and any(o.uid in dep for o in m.operands):
            dep.add(m.uid)
    return dep


def classify(members: Sequence[Node], roots: Sequence[Node], policy: FusionPolicy) -> str | None:
    """The fusion kind of a candidate group, or None if no kind allows it or the device's
    veto refuses the fusion node it would become (:func:`decide` says why).

    ``members`` in topological order; ``roots`` are the values the group exports."""
    kind = decide(members, roots, policy)
    return kind if isinstance(kind, str) else None


def classify_computation(comp: Computation, policy: FusionPolicy = DEFAULT_POLICY) -> str | None:
    """:func:`classify` of a whole fused computation (a test's hand-built fusion, say):
    every node but its parameters and tuple root is a member, the root's values are the roots."""
    members = [n for n in comp.nodes if n.op not in (Op.PARAMETER, Op.TUPLE)]
    roots = list(comp.root.operands) if comp.root.op is Op.TUPLE else [comp.root]
    return classify(members, roots, policy)


def decide(members: Sequence[Node], roots: Sequence[Node], policy: FusionPolicy) -> str | Refusal:
    """:func:`classify`, with the refusal when no kind fits."""
    kind = _kind(members, roots, policy)
    if isinstance(kind, Refusal) or policy.veto is None:
        return kind
    why = policy.veto(build_fusion(members, roots, kind))
    return Refusal("vetoed", f"vetoed by the device's fusion predicate: {why}") if why else kind


def _kind(members: Sequence[Node], roots: Sequence[Node], policy: FusionPolicy) -> str | Refusal:
    if len(members) > policy.max_fusion_nodes:
        return Refusal("max-fusion-nodes", f"the fusion would have {len(members)} ops > max_fusion_nodes "
                                           f"{policy.max_fusion_nodes} (the backend's policy)")
    inside = {m.uid for m in members}
    cost = inline_cost(roots, inside)
    if cost > policy.max_inline_cost:
        return Refusal("inline-cost", f"inline cost {cost} > max_inline_cost {policy.max_inline_cost} "
                                      f"(the backend's policy)")
    if any(m.op is Op.PAD for m in members) and padded_transcendental(roots, inside) is not None:
        return Refusal("padded-transcendental", "a pad would re-evaluate a transcendental for each padded element")
    limit = policy.max_broadcast_recompute_elements
    if limit is not None and (x := broadcast_recompute(roots, inside, limit + 1)) is not None:
        return Refusal("broadcast-recompute", f"{x.op.value} {x.type} computes slow ops (a transcendental, a "
                                              f"division or a square root) and a broadcast of more than "
                                              f"max_broadcast_recompute_elements {limit} (the backend's policy) "
                                              f"repeats it along its innermost dim, re-evaluating them per "
                                              f"element: a kernel of its own computes it once")
    if len(roots) > 1 and not policy.multi_output:
        return Refusal("multi-output-off", f"the fusion would export {len(roots)} values and the backend's "
                                           f"policy has multi_output off")
    if any(not isinstance(r.type, TensorType) for r in roots):
        return Refusal("tuple-value", "a tuple value cannot be a fusion output")
    # a big strided transpose fuses only into a single-output chain of movement ops (which
    # the backend still runs as one tiled transpose): not with compute, and not as one of
    # several outputs (a multi-output kernel is a plain loop: a weight's HWIO copy exported
    # beside its flipped copy read the 512x512x3x3 kernel with a stride, 10 ms a call)
    if (big := _big_strided_transpose(members, policy)) is not None and (
            len(roots) > 1 or any(not m.traits.movement for m in members)):
        return Refusal("strided-transpose", f"transpose {big.type} moves its operand's contiguous axis and "
                                            f"exceeds max_fused_strided_transpose_bytes "
                                            f"{policy.max_fused_strided_transpose_bytes} (the backend's policy): "
                                            f"a tiled transpose kernel of its own, not a strided access in "
                                            f"this {'multi-output ' if len(roots) > 1 else ''}loop")
    dots = [m for m in members if takes_epilogue(m, policy)]
    if dots:
        return _output_kind(members, roots, dots)
    for m in members:  # a dot, or an op of no kind, is a kernel of its own: "loop" is not a default
        if (alone := why_alone(m)) is not None:
            return alone
    reds = [m for m in members if is_reduction(m)]
    if not reds:
        shapes = sorted({r.shape for r in roots})
        if len(shapes) == 1:
            return "loop"
        return Refusal("iteration-space", "different iteration spaces: a loop fusion computes one output shape, "
                                          f"these are {', '.join(str(list(x)) for x in shapes)}")
    shapes_axes = {(r.operands[0].shape, r.attr["axes"]) for r in reds}
    used_inside = {o.uid for m in members for o in m.operands}
    if (len(shapes_axes) == 1 and all(r.uid not in used_inside for r in reds)
            and {r.uid for r in roots} == {r.uid for r in reds}):
        return "input"
    if len(shapes_axes) != 1:
        return Refusal("reduction-shape", "reductions over different shapes or axes cannot share one kernel")
    if not policy.row_fusion:
        return Refusal("row-fusion-off", "the reduction's result is consumed in the group, which needs a row "
                                         "fusion; the backend's policy has row_fusion off")
    ((S, axes),) = shapes_axes
    k = len(S) - len(axes)
    if axes != tuple(range(k, len(S))):
        return Refusal("reduction-axes", f"the reduction is over axes {list(axes)} of {list(S)}; a row fusion "
                                         f"reduces trailing axes")
    L = S[:k]
    lead = [j for j in range(k) if S[j] != 1]

    def reduced(shape: tuple[int, ...]) -> bool:
        # same row-major order as L: one element per row, indexed by the row number
        return squeeze(shape) == squeeze(L)

    dependent = _downstream(members, reds)
    for m in members:
        if m.uid not in dependent or is_reduction(m):
            continue
        if m.traits.elementwise and (m.shape == S or reduced(m.shape)):
            continue
        src = m.operands[0] if m.operands else None
        if m.op is Op.RESHAPE and src is not None and reduced(m.shape) and reduced(src.shape):
            continue
        if m.op is Op.BROADCAST_IN_DIM and src is not None and m.shape == S and reduced(src.shape):
            dims = m.attr["broadcast_dimensions"]
            if [dims[i] for i, d in enumerate(src.shape) if d != 1] == lead:
                continue
        return Refusal("row-mismatch", f"{m.op.value} {m.type} would read the reduction's result at another "
                                       f"row's index: a row fusion cannot index it")
    if any(r.shape != S and not reduced(r.shape) for r in roots):
        return Refusal("row-mismatch", "an output is neither per element nor per row of the reduction")
    return "row"


def strided_transpose(n: Node) -> bool:
    """A transpose whose output's innermost non-unit axis is not its operand's: walked in
    output order, it reads its operand with a stride (one element per cache line)."""
    if n.op is not Op.TRANSPOSE:
        return False
    src = n.operands[0].shape
    kept = [a for a in n.attr["permutation"] if src[a] != 1]
    return bool(kept) and kept[-1] != max(kept)


def _big_strided_transpose(members: Sequence[Node], policy: FusionPolicy) -> Node | None:
    """A member the policy keeps out of compute fusions (max_fused_strided_transpose_bytes)."""
    limit = policy.max_fused_strided_transpose_bytes
    if limit is None:
        return None
    for m in members:
        if strided_transpose(m) and m.tensor_type.size * m.dtype.np.itemsize > limit:
            return m
    return None


def _output_kind(members: Sequence[Node], roots: Sequence[Node], dots: Sequence[Node]) -> str | Refusal:
    """``output`` when the group is one dot and its epilogue (XLA's name for a fusion whose
    producer writes the fusion's output: here the dot's tile, finished in registers by
    its consumers before it is stored), else why not. The epilogue reads the dot's element
    and same-index (or broadcast) elements of other values, so the GEMM applies it per
    output tile: every member downstream of the dot is elementwise over the dot's shape,
    the others (a bias's broadcast, a scale's constant) are loop-fusible values computed at
    the output index, and the dot's own operands come from memory."""
    if len(dots) > 1:
        return Refusal("contraction", "two contractions cannot share one kernel")
    (dot,) = dots
    inside = {m.uid for m in members}
    if any(o.uid in inside for o in dot.operands):
        return Refusal("dot-operand", f"{dot.op.value} reads its operands from memory tile by tile: a producer "
                                      f"of an operand is not inlined into the GEMM")
    if any(r.uid == dot.uid for r in roots) or len(roots) != 1:
        return Refusal("epilogue", f"an output fusion exports its epilogue's one value, not the "
                                   f"{dot.op.value}'s or several")
    shape = dot.shape
    dependent = _downstream(members, [dot])
    reds = [m for m in members if m.uid in dependent and is_reduction(m)]
    for m in reds + list(members):  # a reduction named first: the usual reason (a softmax)
        if m.uid == dot.uid:
            continue
        if m.uid in dependent:
            if not (m.traits.elementwise and m.shape == shape):
                what = "a reduction" if is_reduction(m) else f"{m.op.value} {m.type}"
                return Refusal("epilogue", f"{what} is not elementwise over the {dot.op.value}'s output "
                                           f"{list(shape)}: it cannot finish the GEMM's tiles")
        elif not loop_fusible(m):
            return Refusal("epilogue", f"{m.op.value} beside the {dot.op.value} is not computed per output element")
    return "output"


def _external(members: Sequence[Node], order: Callable[[Node], int] | None) -> list[Node]:
    """The values a group reads from outside, one parameter each, in parameter order."""
    inside = {m.uid for m in members}
    external = list({o.uid: o for m in members for o in m.operands if o.uid not in inside}.values())
    if order is not None:
        external.sort(key=order)
    return external


def build_fusion(members: Sequence[Node], roots: Sequence[Node], kind: str,
                 order: Callable[[Node], int] | None = None, source: Callable[[Node], Node] = lambda o: o,
                 name: str | None = None) -> Node:
    """The fusion node of a group: each value it reads from outside (sorted by ``order``,
    else in first-use order) becomes a parameter ``p<i>``, and the fusion's operand is
    ``source(value)``. ``name``: the fused computation's (default ``fused_<last root>``)."""
    external = _external(members, order)
    inner: dict[int, Node] = {}
    for i, o in enumerate(external):
        inner[o.uid] = make_node(Op.PARAMETER, (), {"index": i}, type=o.type, name=f"p{i}", loc=o.loc)
    for m in members:
        inner[m.uid] = m.replace(operands=tuple(inner[o.uid] for o in m.operands))
    outs = [inner[r.uid] for r in roots]
    root = outs[0] if len(outs) == 1 else make_node(Op.TUPLE, outs)
    head = roots[-1]
    comp = Computation(name or _default_name(head), tuple(inner[o.uid] for o in external), root)
    return make_node(Op.FUSION, [source(o) for o in external], {"kind": kind, "computation": comp},
                     loc=head.loc, name="fusion")


def _default_name(head: Node) -> str:
    return f"fused_{head.name or head.op.value}"


def fusion_size(comp: Computation) -> int:
    """The ops of a fused computation, as ``FusionPolicy.max_fusion_nodes`` counts them
    (its parameters and tuple root are not ops)."""
    return sum(1 for n in comp.nodes if n.op not in (Op.PARAMETER, Op.TUPLE))


# --------------------------------------------------------------------------- groups

_gid = itertools.count()


@dataclass(eq=False)
class Group:
    """A set of nodes that becomes one fusion. ``roots`` are the values it exports."""

    members: dict[int, Node] = field(default_factory=dict)
    roots: list[Node] = field(default_factory=list)
    id: int = field(default_factory=lambda: next(_gid))

    def __hash__(self) -> int:
        return self.id

    def sorted_members(self, index: dict[int, int]) -> list[Node]:
        return sorted(self.members.values(), key=lambda n: index[n.uid])


class _Fuser:
    def __init__(self, comp: Computation, policy: FusionPolicy) -> None:
        self.comp = comp
        self.policy = policy
        self.index = {n.uid: i for i, n in enumerate(comp.nodes)}
        self.users = comp.users
        #: producer -> consumer edges between units while merging siblings (None: stale)
        self._edges: dict[Group | int, set[Group | int]] | None = None
        root = comp.root
        # values the caller reads: the root, or the elements of a root tuple
        self.outputs = {o.uid for o in root.operands} if root.op is Op.TUPLE else {root.uid}
        self.groups_of: dict[int, list[Group]] = {}
        self.home: dict[int, Group] = {}  # the group that exports a node's value
        self.groups: list[Group] = []
        #: (producer uid, consumer uid) -> why the producer stayed out of the consumer's group
        self.why: dict[tuple[int, int], Refusal] = {}
        self.records: list[FusionRecord] = []
        self.names: set[str] = set()

    # -- phase 1 ----------------------------------------------------------------
    def _refusal(self, g: Group, n: Node) -> Refusal | None:
        """Why ``n`` may not join ``g`` (None: it may)."""
        if n.op is Op.CONSTANT and n.tensor_type.size > self.policy.max_fused_constant_elements:
            return Refusal("big-constant", f"the constant has {n.tensor_type.size} elements > "
                                           f"max_fused_constant_elements {self.policy.max_fused_constant_elements}")
        members = g.sorted_members(self.index)
        members.append(n)
        members.sort(key=lambda m: self.index[m.uid])
        kind = decide(members, g.roots, self.policy)
        return kind if isinstance(kind, Refusal) else None

    def _refuse(self, n: Node, users: Iterable[Node], why: Refusal) -> None:
        for u in users:
            self.why.setdefault((n.uid, u.uid), why)

    def _users_in(self, n: Node, g: Group) -> list[Node]:
        return [u for u in self.users[n.uid] if u.uid in g.members]

    def _add(self, g: Group, n: Node) -> None:
        g.members[n.uid] = n
        self.groups_of.setdefault(n.uid, []).append(g)

    def _new_group(self, n: Node) -> Group:
        g = Group()
        self._add(g, n)
        g.roots.append(n)
        self.home[n.uid] = g
        self.groups.append(g)
        return g

    def grow(self) -> None:
        for n in reversed(self.comp.nodes):
            if n.op is Op.PARAMETER or n.traits.structural:
                continue  # not a kernel: explain looks through plumbing to its source
            alone = why_alone(n)
            if alone is not None and takes_epilogue(n, self.policy):
                self._epilogue(n)
                continue
            if alone is not None:
                self._refuse(n, self.users[n.uid], alone)
                continue
            output = n.uid in self.outputs
            user_groups: list[Group] = []
            ungrouped: list[Node] = []
            for u in self.users[n.uid]:
                gs = self.groups_of.get(u.uid)
                if not gs:
                    ungrouped.append(u)
                for g in gs or ():
                    if g not in user_groups:
                        user_groups.append(g)
            for u in ungrouped:  # a dot, a custom call...: it takes no producer
                if (w := why_alone(u)) is not None:
                    self._refuse(n, [u], w)
            external = output or bool(ungrouped)
            refusal = None
            if not external and len(user_groups) == 1:
                refusal = self._refusal(user_groups[0], n)
                if refusal is None:
                    g = user_groups[0]
                    self._add(g, n)
                    self.home[n.uid] = g
                    continue
            if n.traits.cheap and loop_fusible(n) and self.policy.duplicate_cheap and user_groups:
                taken = []
                for g in user_groups:
                    r = self._refusal(g, n)
                    if r is None:
                        taken.append(g)
                    else:
                        self._refuse(n, self._users_in(n, g), r)
                own = external or len(taken) < len(user_groups)  # a kernel of its own too
                if (kept := self._kept_epilogue(n, len(taken) + int(own))) is not None:
                    for g in taken:  # the contraction's kernel finishes it and stores it once
                        self._refuse(n, self._users_in(n, g), kept)
                    self._new_group(n)
                    continue
                for g in taken:
                    self._add(g, n)
                if not external and len(taken) == len(user_groups):
                    continue  # every reader recomputes it: no kernel of its own
                if n.op is Op.CONSTANT:
                    continue  # the remaining readers read the constant itself
                self._new_group(n)
                continue
            why = refusal or self._shared(n, output, ungrouped, len(user_groups))
            if why is not None:
                for g in user_groups:
                    self._refuse(n, self._users_in(n, g), why)
            if n.op is Op.CONSTANT:
                continue
            self._new_group(n)

    def _epilogue_chain(self, n: Node) -> tuple[Node, list[Node]] | None:
        """The contraction whose epilogue ``n`` could finish, and the group (in topological
        order) that would compute ``n`` in that contraction's kernel, or None. Upstream of
        ``n``, through elementwise ops of ``n``'s shape that no one outside the group reads
        (a batch norm's scale and shift, a residual add), the latest contraction of that
        shape that takes an epilogue under the policy and that only the group reads (as the
        walk would take it: the first it meets users-first). The other values the group
        reads (the broadcast parameters, the residual, another contraction's value) are
        inputs; ``decide`` must call the group an ``output`` fusion."""
        if not (n.traits.elementwise and loop_fusible(n)) or not isinstance(n.type, TensorType):
            return None
        shape = n.shape
        upstream: dict[int, Node] = {}
        stack = list(n.operands)
        while stack and len(upstream) <= self.policy.max_fusion_nodes:
            m = stack.pop()
            if m.uid in upstream or not isinstance(m.type, TensorType) or m.shape != shape:
                continue
            if takes_epilogue(m, self.policy):
                upstream[m.uid] = m  # the chain ends at a contraction: its operands come from memory
            elif m.traits.elementwise and loop_fusible(m):
                upstream[m.uid] = m
                stack.extend(m.operands)
        chain: dict[int, Node] = {n.uid: n}
        head: Node | None = None
        for m in sorted(upstream.values(), key=lambda m: -self.index[m.uid]):  # users first
            if m.uid in self.outputs or any(u.uid not in chain for u in self.users[m.uid]):
                continue  # read by another kernel (or returned): an input of the group, not a member
            if takes_epilogue(m, self.policy):
                if head is None:
                    head = m
                    chain[m.uid] = m
                continue  # a second contraction's value is read from memory
            chain[m.uid] = m
        if head is None:
            return None
        members = sorted(chain.values(), key=lambda m: self.index[m.uid])
        return (head, members) if decide(members, [n], self.policy) == "output" else None

    def _kept_epilogue(self, n: Node, kernels: int) -> Refusal | None:
        """Why cheap ``n``, which ``kernels`` kernels would otherwise each recompute (its
        readers' groups, and a kernel of its own where it is returned or read by a kernel
        that refuses it), is instead computed once, in the epilogue of the contraction it
        finishes, and stored (None: duplicate it as usual).

        The choice is inline_cost's: with ``c`` the weighted evaluations per element of
        the chain from the contraction's value to ``n`` (every value read from memory
        counting 1, the contraction's included), recomputing it in each of the ``k``
        kernels costs ``k*c`` and the contraction's store (1), since a contraction read by
        several kernels takes no epilogue; kept, the contraction's kernel computes it from
        registers (``c - 1``) and stores it (1) and each kernel loads it (``k``). Kept when
        ``k*c + 1 > c + k``: whenever two or more kernels would read the contraction's
        value (c >= 2: an op and its read of the contraction)."""
        if kernels < 2:
            return None
        found = self._epilogue_chain(n)
        if found is None:
            return None
        head, members = found
        c = inline_cost([n], {m.uid for m in members if m.uid != head.uid})
        dup, kept = kernels * c + 1, c + kernels
        if dup <= kept:
            return None
        return Refusal("epilogue-store", f"{n.op.value} finishes the {head.op.value}'s epilogue and {kernels} kernels "
                                         f"would recompute it, each re-reading the {head.op.value}'s output "
                                         f"(inline cost {dup} per element): it is computed once in the "
                                         f"{head.op.value}'s kernel and stored ({kept})")

    def _epilogue(self, n: Node) -> None:
        """A dot joins the one group that reads it as that group's producer (an ``output``
        fusion), or stays a kernel of its own with the reason recorded for each reader."""
        users = self.users[n.uid]
        groups = list(dict.fromkeys(g for u in users for g in self.groups_of.get(u.uid, ())))
        ungrouped = [u for u in users if not self.groups_of.get(u.uid)]
        if n.uid in self.outputs or ungrouped or len(groups) != 1:
            why = self._shared(n, n.uid in self.outputs, ungrouped, len(groups))
            why = why or Refusal("contraction", f"{n.op.value}'s reader is a kernel of its own: no epilogue to take")
            self._refuse(n, users, why)
            return
        refusal = self._refusal(groups[0], n)
        if refusal is not None:
            self._refuse(n, users, refusal)
            return
        self._add(groups[0], n)
        self.home[n.uid] = groups[0]

    def _shared(self, n: Node, output: bool, ungrouped: list[Node], n_groups: int) -> Refusal | None:
        """Why ``n``, read by several kernels (or returned), joins none of them."""
        op = n.op.value
        if output:
            return Refusal("result", f"{op}'s value is a result of the function: it is written to memory "
                                     f"once and read from there, not recomputed in its readers")
        readers = n_groups + len(ungrouped)
        if readers < 2:
            return None
        if is_reduction(n):
            return Refusal("duplicate-reduction", f"the reduction is read by {readers} kernels: fusing it into "
                                                  f"each would duplicate a reduction")
        why = "its policy has duplicate_cheap off" if n.traits.cheap else f"{op} is not cheap enough to recompute"
        return Refusal("multiple-consumers", f"{op} is read by {readers} kernels: fusing it into each would "
                                             f"recompute it ({why})")

    # -- phase 2 ----------------------------------------------------------------
    def _unit_edges(self) -> dict[Group | int, set[Group | int]]:
        """Producer -> consumer edges between groups and unfused nodes."""
        edges: dict[Group | int, set[Group | int]] = {}

        def unit(n: Node) -> Group | int:
            return self.home.get(n.uid, n.uid)

        for g in self.groups:
            for m in g.members.values():
                for o in m.operands:
                    if o.uid not in g.members:
                        edges.setdefault(unit(o), set()).add(g)
        for n in self.comp.nodes:
            if n.uid in self.home:
                continue
            for o in n.operands:
                edges.setdefault(unit(o), set()).add(n.uid)
        return edges

    @staticmethod
    def _reaches(edges: dict[Group | int, set[Group | int]], a: Group | int, b: Group | int) -> bool:
        stack, seen = [a], {a}
        while stack:
            for nxt in edges.get(stack.pop(), ()):
                if nxt == b:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    def _inputs(self, g: Group) -> set[int]:
        return {o.uid for m in g.members.values() for o in m.operands if o.uid not in g.members}

    def merge_siblings(self) -> None:
        if not self.policy.multi_output:
            return
        # A pair that cannot merge never can later: members only grow, and merging other
        # groups only adds paths between units. Remembering the refusals (and the edges
        # until the next merge) keeps this linear in the merges, not merges x pairs.
        refused: set[tuple[Group, int, Group, int]] = set()
        self._edges = None
        merged = True
        while merged:
            merged = False
            fusible = [g for g in self.groups if not (len(g.members) == 1 and is_contraction(g.roots[0]))]
            readers: dict[int, list[Group]] = {}
            for g in fusible:
                for uid in self._inputs(g):
                    readers.setdefault(uid, []).append(g)
            for uid in sorted(readers, key=lambda u: self.index.get(u, -1)):
                gs = readers[uid]
                node = self.comp.nodes[self.index[uid]]
                if len(gs) < 2 or not isinstance(node.type, TensorType) or node.type.size <= 1:
                    continue
                for a, b in itertools.combinations(gs, 2):
                    key = (a, len(a.members), b, len(b.members))
                    if key in refused:
                        continue
                    if self._try_merge(a, b):
                        merged = True
                        break
                    refused.add(key)
                if merged:
                    break

    def _try_merge(self, a: Group, b: Group) -> bool:
        members = {**a.members, **b.members}
        ordered = sorted(members.values(), key=lambda n: self.index[n.uid])
        roots = sorted(a.roots + b.roots, key=lambda n: self.index[n.uid])
        if classify(ordered, roots, self.policy) is None:
            return False
        if self._edges is None:
            self._edges = self._unit_edges()
        if self._reaches(self._edges, a, b) or self._reaches(self._edges, b, a):
            return False
        self._edges = None  # the merge changes them
        for uid in b.members:
            gs = self.groups_of[uid]
            gs.remove(b)
            if a not in gs:
                gs.append(a)
            if self.home.get(uid) is b:
                self.home[uid] = a
        a.members = dict(sorted(members.items(), key=lambda kv: self.index[kv[0]]))
        a.roots = roots
        self.groups.remove(b)
        return True

    # -- materialization --------------------------------------------------------
    def materialize(self) -> Computation:
        env: dict[int, Node] = {}
        edges = self._unit_edges()
        units: list[Group | int] = list(self.groups) + [n.uid for n in self.comp.nodes if n.uid not in self.home]
        indeg = {u: 0 for u in units}
        for dsts in edges.values():
            for d in dsts:
                indeg[d] += 1
        ready = [u for u in units if indeg[u] == 0]
        order: list[Group | int] = []
        while ready:
            u = ready.pop()
            order.append(u)
            for d in edges.get(u, ()):
                indeg[d] -= 1
                if indeg[d] == 0:
                    ready.append(d)
        assert len(order) == len(units), "fusion produced a cycle between groups"
        for u in order:
            if isinstance(u, Group):
                self._emit_group(u, env)
            else:
                n = self.comp.nodes[self.index[u]]
                if n.op is Op.PARAMETER:
                    env[n.uid] = n
                    continue
                ops = tuple(env[o.uid] for o in n.operands)
                env[n.uid] = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
        root = env[self.comp.root.uid]
        return self.comp if root is self.comp.root else Computation(self.comp.name, self.comp.parameters, root)

    def _emit_group(self, g: Group, env: dict[int, Node]) -> None:
        members = g.sorted_members(self.index)
        kind = classify(members, g.roots, self.policy)
        if kind is None:
            # a lone op whose one-op fusion the device refuses: a plain kernel
            assert len(members) == 1, f"group {[m.op.value for m in members]} lost its kind"
            n = members[0]
            ops = tuple(env[o.uid] for o in n.operands)
            env[n.uid] = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
            return
        name = self._unique(_default_name(g.roots[-1]))
        order = lambda o: self.index[o.uid]  # noqa: E731 - the parameter order, twice
        fusion = build_fusion(members, g.roots, kind, order=order, source=lambda o: env[o.uid], name=name)
        self.records.append(self._record(g, members, fusion, _external(members, order)))
        if len(g.roots) == 1:
            env[g.roots[0].uid] = fusion
        else:
            for i, r in enumerate(g.roots):
                env[r.uid] = make_node(Op.GET_TUPLE_ELEMENT, [fusion], {"index": i}, loc=r.loc, name=r.name)

    def _unique(self, base: str) -> str:
        name, k = base, 0
        while name in self.names:
            k += 1
            name = f"{base}.{k}"
        self.names.add(name)
        return name

    def _record(self, g: Group, members: list[Node], fusion: Node, external: list[Node]) -> FusionRecord:
        """The decision record of a group: each neighbour left out, with its refusal."""
        comp: Computation = fusion.attr["computation"]
        out: list[NotFused] = []
        for i, o in enumerate(external):
            src = _source(o)
            if src.op is Op.PARAMETER:
                continue  # an input of the function, not a neighbour kernel
            for m in members:
                if any(x.uid == o.uid for x in m.operands):
                    why = self.why.get((o.uid, m.uid)) or why_alone(src)
                    if why is not None:
                        out.append(NotFused("producer", src.op.value, m.op.value, why.code, why.text,
                                            comp.parameters[i].name or f"p{i}"))
        for j, r in enumerate(g.roots):
            for u in self.users[r.uid]:
                if u.uid in g.members or u.op is Op.TUPLE:
                    continue
                why = self.why.get((r.uid, u.uid)) or why_alone(u)
                if why is not None:
                    out.append(NotFused("consumer", u.op.value, r.op.value, why.code, why.text, str(j)))
        return FusionRecord(comp.name, fusion.attr["kind"], members_of(comp), tuple(dict.fromkeys(out)), comp)


def _source(n: Node) -> Node:
    """The node computing a value read through tuple plumbing."""
    while n.op is Op.GET_TUPLE_ELEMENT:
        n = n.operands[0]
    return n


def fuse(comp: Computation, policy: FusionPolicy = DEFAULT_POLICY,
         names: set[str] | None = None) -> tuple[Computation, tuple[FusionRecord, ...]]:
    """The computation with its kernels grouped into fusion nodes, and the pass's record
    of each fusion (kind, members, why each neighbour stayed out). ``names``: fused
    computation names already taken in the module (the new ones are added to it)."""
    f = _Fuser(comp, policy)
    if names is not None:
        f.names = names
    f.grow()
    f.merge_siblings()
    return f.materialize(), tuple(f.records)


def fuse_nested(comp: Computation, policy: FusionPolicy, names: set[str],
                records: list[FusionRecord]) -> Computation:
    """:func:`fuse` of ``comp`` and of every computation its loops and conditionals call
    (conditions, bodies, branches, nested to any depth), innermost first. Each is fused as
    an entry of its own under the same policy: a body's results (its root tuple's elements,
    the next carry) are its outputs, its parameters (the carry) its inputs; no fusion
    crosses a loop's or a branch's boundary. Names stay unique in the module and the
    records of all of them go to ``records``."""
    def callee(c: Computation) -> Computation:
        return fuse_nested(c, policy, names, records)

    inner = rebuild(comp, lambda n: map_called(n, callee) if n.traits.control else None, recurse=False)
    out, recs = fuse(inner, policy, names)
    records.extend(recs)
    return out


def fuse_computation(comp: Computation, policy: FusionPolicy = DEFAULT_POLICY) -> Computation:
    """The computation with its kernels grouped into fusion nodes."""
    return fuse(comp, policy)[0]


class Fusion(Pass):
    """Groups producers and consumers (and siblings) into fusion nodes under a policy."""

    name = "fusion"

    def __init__(self, policy: FusionPolicy | None = None) -> None:
        self.policy = policy or DEFAULT_POLICY

    def run(self, module: Module) -> tuple[Module, bool]:
        if fusion_nodes(module.entry):
            return module, False  # already fused: fusing again would nest kernels
        if not any(is_kernel(n) for c in _control_scopes(module.entry) for n in c.nodes):
            return module, False
        records: list[FusionRecord] = []
        entry = fuse_nested(module.entry, self.policy, set(), records)
        if entry is module.entry:
            return module, False
        return Module(module.name, entry, tuple(records)), True


def _control_scopes(comp: Computation) -> list[Computation]:
    """``comp`` and the computations its loops and conditionals call, nested to any depth."""
    out = [comp]
    for n in comp.nodes:
        if n.traits.control:
            for sub in called_computations(n):
                out += _control_scopes(sub)
    return out
