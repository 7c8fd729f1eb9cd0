"""Dead-code elimination.

A computation holds only the nodes its root reaches, so unreachable instructions vanish
whenever a pass rebuilds it. What remains dead is inside values: a get-tuple-element of a
tuple built in place (forwarded to the element), fusion outputs nobody reads (dropped
from the fused root) and fusion parameters the fused computation ignores (dropped with
their operands)."""
from __future__ import annotations

from ..ir.builder import make_node
from ..ir.module import Computation, Module, Node, post_order
from ..ir.ops import Op
from ..ir.types import TupleType
from .pipeline import Pass
from .rewrite import map_called, rebuild_module


def _forward_gte(n: Node) -> Node | None:
    if n.op is Op.GET_TUPLE_ELEMENT and n.operands[0].op is Op.TUPLE:
        return n.operands[0].operands[n.attr["index"]]
    return None


def prune_fusion(fusion: Node, used_outputs: set[int] | None) -> tuple[Node, dict[int, int]] | None:
    """A copy of ``fusion`` without unused outputs and parameters, with the map from old
    to new output indices; None when nothing is dead. ``used_outputs=None``: all used."""
    comp: Computation = fusion.attr["computation"]
    root = comp.root
    multi = root.op is Op.TUPLE
    outputs = list(root.operands) if multi else [root]
    keep = sorted(used_outputs) if multi and used_outputs is not None else list(range(len(outputs)))
    assert keep, f"fusion {fusion!r} has no used output but is still reachable"
    kept = [outputs[i] for i in keep]
    reached = post_order(kept)
    used_params = sorted(n.attr["index"] for n in reached if n.op is Op.PARAMETER)
    if len(keep) == len(outputs) and len(used_params) == len(comp.parameters):
        return None
    env: dict[int, Node] = {}
    params = []
    for new_i, old_i in enumerate(used_params):
        old = comp.parameters[old_i]
        p = make_node(Op.PARAMETER, (), {"index": new_i}, type=old.type, name=old.name, loc=old.loc)
        env[old.uid] = p
        params.append(p)
    for n in reached:
        if n.op is Op.PARAMETER:
            continue
        ops = tuple(env[o.uid] for o in n.operands)
        env[n.uid] = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
    outs = [env[o.uid] for o in kept]
    new_root = outs[0] if len(outs) == 1 else make_node(Op.TUPLE, outs)
    new_comp = Computation(comp.name, tuple(params), new_root)
    node = make_node(Op.FUSION, [fusion.operands[i] for i in used_params],
                     {"kind": fusion.attr["kind"], "computation": new_comp}, loc=fusion.loc, name=fusion.name)
    return node, {old: new for new, old in enumerate(keep)}


def _used_outputs(comp: Computation) -> dict[int, set[int]]:
    """For each tuple-valued fusion: the output indices something reads."""
    used: dict[int, set[int]] = {}
    everything = [comp.root] + [o for n in comp.nodes if n.op is not Op.GET_TUPLE_ELEMENT for o in n.operands]
    for n in comp.nodes:
        if n.op is Op.GET_TUPLE_ELEMENT:
            used.setdefault(n.operands[0].uid, set()).add(n.attr["index"])
    for v in everything:  # a tuple read whole (e.g. returned) uses every element
        if isinstance(v.type, TupleType):
            used.setdefault(v.uid, set()).update(range(len(v.type.elements)))
    return used


def _prune(comp: Computation) -> Computation:
    """``comp`` without dead fusion outputs and parameters, in it and in the computations
    its loops and conditionals call (a body's fusions are pruned like the entry's)."""
    used = _used_outputs(comp)
    env: dict[int, Node] = {}
    index_maps: dict[int, dict[int, int]] = {}
    for n in comp.nodes:
        if n.op is Op.PARAMETER:
            env[n.uid] = n
            continue
        if n.op is Op.GET_TUPLE_ELEMENT and n.operands[0].uid in index_maps:
            f = env[n.operands[0].uid]
            new_index = index_maps[n.operands[0].uid][n.attr["index"]]
            env[n.uid] = (make_node(Op.GET_TUPLE_ELEMENT, [f], {"index": new_index}, loc=n.loc, name=n.name)
                          if isinstance(f.type, TupleType) else f)
            continue
        ops = tuple(env[o.uid] for o in n.operands)
        m = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
        if m.traits.control:
            m = map_called(m, _prune)
        if m.op is Op.FUSION:
            pruned = prune_fusion(m, used.get(n.uid) if isinstance(m.type, TupleType) else None)
            if pruned is not None:
                m, index_maps[n.uid] = pruned
        env[n.uid] = m
    root = env[comp.root.uid]
    return comp if root is comp.root else comp.with_root(root)


class DCE(Pass):
    """Removes dead tuple plumbing and dead fusion outputs and parameters."""

    name = "dce"

    def run(self, module: Module) -> tuple[Module, bool]:
        fwd = rebuild_module(module, _forward_gte)
        entry = _prune(fwd.entry)
        out = fwd if entry is fwd.entry else fwd.with_entry(entry)
        return out, out is not module
