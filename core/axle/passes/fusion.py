"""Fusion: groups of nodes become ``fusion`` nodes, one kernel each (docs/ir.md, "Fusions").

Two phases, then materialization:

1. **Producer into consumer** (operands-last walk, like XLA's instruction fusion). A
   node joins the group of its users when all its users sit in that one group, so no
   value leaves a group except through its root and no cycle can form. A *cheap*
   node (broadcast, constant, iota, convert...) with users in several groups is
   recomputed in each of them when the policy allows; an expensive one (exp, a reduce,
   a dot) is never duplicated. A reduce joins a consumer group only as a ``row`` fusion
   (reduction over trailing axes broadcast back along the kept dims); a dot joins only
   as the head of an ``output`` fusion when the backend's policy has ``dot_epilogue``.
2. **Siblings** (multi-output): groups that read the same operand and are not connected
   by any path are merged when the result is still a valid kind (e.g. two reductions
   of ``x`` over the same axes: ``x`` is read once). A tuple root carries the outputs.

Every candidate group is checked by :func:`classify`, which names its kind (loop, input,
row, output) or refuses it; the backend's :class:`~axle.passes.policy.FusionPolicy`
bounds what it accepts, including the size of the kernel that inlines the group
(:mod:`axle.passes.inline_cost`).
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..ir.builder import make_node
from ..ir.module import Computation, Module, Node
from ..ir.ops import Op
from ..ir.types import TensorType, squeeze
from .inline_cost import inline_cost, padded_transcendental
from .pipeline import Pass
from .policy import DEFAULT_POLICY, FusionPolicy

# --------------------------------------------------------------------- node classes


def loop_fusible(n: Node) -> bool:
    """Computes one output element from the same positions of its inputs (or from
    indices): elementwise ops, data movement, iota, constants."""
    t = n.traits
    return (t.fusible and not t.structural and not t.side_effect and not t.reduction
            and (t.elementwise or t.movement or not n.operands))


def is_reduction(n: Node) -> bool:
    t = n.traits
    return t.reduction and t.fusible and not t.side_effect


def is_contraction(n: Node) -> bool:
    """A dot: fusible compute that is neither elementwise, movement nor a reduction."""
    t = n.traits
    return (t.fusible and not t.structural and not t.side_effect and not t.reduction
            and not t.elementwise and not t.movement and bool(n.operands))


def is_kernel(n: Node) -> bool:
    """Needs a kernel of its own when not fused (constants are data, not kernels)."""
    return n.op is not Op.CONSTANT and (loop_fusible(n) or is_reduction(n) or is_contraction(n))


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
    veto refuses the fusion node it would become.

    ``members`` in topological order; ``roots`` are the values the group exports."""
    kind = _kind(members, roots, policy)
    if kind is None or policy.veto is None:
        return kind
    return None if policy.veto(build_fusion(members, roots, kind)) else kind


def _kind(members: Sequence[Node], roots: Sequence[Node], policy: FusionPolicy) -> str | None:
    if len(members) > policy.max_fusion_nodes:
        return None
    inside = {m.uid for m in members}
    if inline_cost(roots, inside) > policy.max_inline_cost:
        return None
    if any(m.op is Op.PAD for m in members) and padded_transcendental(roots, inside) is not None:
        return None
    if len(roots) > 1 and not policy.multi_output:
        return None
    if any(not isinstance(r.type, TensorType) for r in roots):
        return None
    dots = [m for m in members if is_contraction(m)]
    reds = [m for m in members if is_reduction(m)]
    if dots:
        if len(dots) > 1 or reds or not policy.dot_epilogue:
            return None
        d = dots[0]
        if any(o.uid in inside for o in d.operands):
            return None  # the dot's operands come from memory; only its epilogue fuses
        epilogue = _downstream(members, [d])
        for m in members:
            if m.uid in epilogue and m is not d and not (m.traits.elementwise and m.shape == d.shape):
                return None
        if any(r.uid not in epilogue or r.shape != d.shape for r in roots):
            return None
        return "output"
    if not reds:
        return "loop" if len({r.shape for r in roots}) == 1 else None
    shapes_axes = {(r.operands[0].shape, r.attr["axes"]) for r in reds}
    used_inside = {o.uid for m in members for o in m.operands}
    if (len(shapes_axes) == 1 and all(r.uid not in used_inside for r in reds)
            and {r.uid for r in roots} == {r.uid for r in reds}):
        return "input"
    if not policy.row_fusion or len(shapes_axes) != 1:
        return None
    ((S, axes),) = shapes_axes
    k = len(S) - len(axes)
    if axes != tuple(range(k, len(S))):
        return None  # a row kernel reduces trailing axes
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
        if m.op is Op.RESHAPE and reduced(m.shape) and reduced(src.shape):
            continue
        if m.op is Op.BROADCAST_IN_DIM and m.shape == S and reduced(src.shape):
            dims = m.attr["broadcast_dimensions"]
            if [dims[i] for i, d in enumerate(src.shape) if d != 1] == lead:
                continue
        return None  # would read another row's reduction
    if any(r.shape != S and not reduced(r.shape) for r in roots):
        return None
    return "row"


def build_fusion(members: Sequence[Node], roots: Sequence[Node], kind: str,
                 order: Callable[[Node], int] | None = None, source: Callable[[Node], Node] = lambda o: o) -> Node:
    """The fusion node of a group: each value it reads from outside (sorted by ``order``,
    else in first-use order) becomes a parameter, and the fusion's operand is ``source(value)``."""
    inside = {m.uid for m in members}
    external = list({o.uid: o for m in members for o in m.operands if o.uid not in inside}.values())
    if order is not None:
        external.sort(key=order)
    inner: dict[int, Node] = {}
    for i, o in enumerate(external):
        inner[o.uid] = make_node(Op.PARAMETER, (), {"index": i}, type=o.type, name=f"p{i}", loc=o.loc)
    for m in members:
        inner[m.uid] = m.replace(operands=tuple(inner[o.uid] for o in m.operands))
    outs = [inner[r.uid] for r in roots]
    root = outs[0] if len(outs) == 1 else make_node(Op.TUPLE, outs)
    head = roots[-1]
    comp = Computation(f"fused_{head.name or head.op.value}", tuple(inner[o.uid] for o in external), root)
    return make_node(Op.FUSION, [source(o) for o in external], {"kind": kind, "computation": comp},
                     loc=head.loc, name="fusion")


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
        root = comp.root
        # values the caller reads: the root, or the elements of a root tuple
        self.outputs = {o.uid for o in root.operands} if root.op is Op.TUPLE else {root.uid}
        self.groups_of: dict[int, list[Group]] = {}
        self.home: dict[int, Group] = {}  # the group that exports a node's value
        self.groups: list[Group] = []

    # -- phase 1 ----------------------------------------------------------------
    def _kind_with(self, g: Group, n: Node) -> str | None:
        members = g.sorted_members(self.index)
        members.append(n)
        members.sort(key=lambda m: self.index[m.uid])
        return classify(members, g.roots, self.policy)

    def _accepts(self, g: Group, n: Node) -> bool:
        if n.op is Op.CONSTANT and n.tensor_type.size > self.policy.max_fused_constant_elements:
            return False
        if is_contraction(n):
            users_inside = [u for u in self.users[n.uid] if u.uid in g.members]
            if not all(u.traits.elementwise for u in users_inside):
                return False
        elif any(is_contraction(m) and m in self.users[n.uid] for m in g.members.values()):
            return False  # a dot's operands are not fused into its output fusion
        return self._kind_with(g, n) is not None

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
            if not (loop_fusible(n) or is_reduction(n) or is_contraction(n)):
                continue
            external = n.uid in self.outputs
            user_groups: list[Group] = []
            for u in self.users[n.uid]:
                gs = self.groups_of.get(u.uid)
                if not gs:
                    external = True
                for g in gs or ():
                    if g not in user_groups:
                        user_groups.append(g)
            if not external and len(user_groups) == 1 and self._accepts(user_groups[0], n):
                g = user_groups[0]
                self._add(g, n)
                self.home[n.uid] = g
                continue
            if n.traits.cheap and loop_fusible(n) and self.policy.duplicate_cheap and user_groups:
                taken = [g for g in user_groups if self._accepts(g, n)]
                for g in taken:
                    self._add(g, n)
                if not external and len(taken) == len(user_groups):
                    continue  # every reader recomputes it: no kernel of its own
                if n.op is Op.CONSTANT:
                    continue  # the remaining readers read the constant itself
                self._new_group(n)
                continue
            if n.op is Op.CONSTANT:
                continue
            self._new_group(n)

    # -- phase 2 ----------------------------------------------------------------
    def _unit_edges(self) -> dict[object, set[object]]:
        """Producer -> consumer edges between groups and unfused nodes."""
        edges: dict[object, set[object]] = {}

        def unit(n: Node) -> object:
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
    def _reaches(edges: dict[object, set[object]], a: object, b: object) -> bool:
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
                    if self._try_merge(a, b):
                        merged = True
                        break
                if merged:
                    break

    def _try_merge(self, a: Group, b: Group) -> bool:
        members = {**a.members, **b.members}
        ordered = sorted(members.values(), key=lambda n: self.index[n.uid])
        roots = sorted(a.roots + b.roots, key=lambda n: self.index[n.uid])
        if classify(ordered, roots, self.policy) is None:
            return False
        edges = self._unit_edges()
        if self._reaches(edges, a, b) or self._reaches(edges, b, a):
            return False
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
        units: list[object] = list(self.groups) + [n.uid for n in self.comp.nodes if n.uid not in self.home]
        indeg = {u: 0 for u in units}
        for src, dsts in edges.items():
            for d in dsts:
                indeg[d] += 1
        ready = [u for u in units if indeg[u] == 0]
        order: list[object] = []
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
        lone_dot = len(members) == 1 and is_contraction(members[0])
        kind = None if lone_dot else classify(members, g.roots, self.policy)
        if kind is None:
            # a lone dot, or a lone op whose one-op fusion the device refuses: a plain kernel
            assert len(members) == 1, f"group {[m.op.value for m in members]} lost its kind"
            n = members[0]
            ops = tuple(env[o.uid] for o in n.operands)
            env[n.uid] = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
            return
        fusion = build_fusion(members, g.roots, kind, order=lambda o: self.index[o.uid], source=lambda o: env[o.uid])
        if len(g.roots) == 1:
            env[g.roots[0].uid] = fusion
        else:
            for i, r in enumerate(g.roots):
                env[r.uid] = make_node(Op.GET_TUPLE_ELEMENT, [fusion], {"index": i}, loc=r.loc, name=r.name)


def fuse_computation(comp: Computation, policy: FusionPolicy = DEFAULT_POLICY) -> Computation:
    """The computation with its kernels grouped into fusion nodes."""
    f = _Fuser(comp, policy)
    f.grow()
    f.merge_siblings()
    return f.materialize()


class Fusion(Pass):
    """Groups producers and consumers (and siblings) into fusion nodes under a policy."""

    name = "fusion"

    def __init__(self, policy: FusionPolicy | None = None) -> None:
        self.policy = policy or DEFAULT_POLICY

    def run(self, module: Module) -> tuple[Module, bool]:
        if any(n.op is Op.FUSION for n in module.entry.nodes):
            return module, False  # already fused: fusing again would nest kernels
        if not any(is_kernel(n) for n in module.entry.nodes):
            return module, False
        entry = fuse_computation(module.entry, self.policy)
        return (module, False) if entry is module.entry else (module.with_entry(entry), True)
