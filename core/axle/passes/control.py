"""Rewrites of control flow: loops whose trip count is known to be 0 or 1 and conditionals
whose branch is known become straight-line code (``ControlFlowSimplifier``), and values a
loop body computes from loop-invariant carries only are computed once, before the loop
(``LoopInvariantCodeMotion``). Both go through :func:`rebuild_module`, so they reach
loops nested in loop bodies and branches too."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..interpreter import eval_node
from ..ir.builder import make_node
from ..ir.computation import inline
from ..ir.module import Computation, Module, Node, post_order
from ..ir.ops import Op, branch_index
from ..ir.types import Type
from .constant_fold import DEFAULT_MAX_ELEMENTS
from .pipeline import Pass
from .rewrite import rebuild_module

#: the most nodes a trip-count check evaluates (the condition's cone over the carry)
_MAX_EVAL_NODES = 256


def results_of(root: Node) -> list[Node]:
    """The values a computation root returns: a tuple's elements, or its tuple-typed value
    read element by element."""
    if root.op is Op.TUPLE:
        return list(root.operands)
    n = len(root.type.elements)  # type: ignore[union-attr]  # only tuple-typed roots reach here
    return [make_node(Op.GET_TUPLE_ELEMENT, [root], {"index": i}, loc=root.loc) for i in range(n)]


def known_value(node: Node) -> np.ndarray | None:
    """The value of ``node`` when it depends on constants only (small cones, no side
    effects), evaluated by the reference interpreter; None otherwise."""
    cone = post_order([node])
    if len(cone) > _MAX_EVAL_NODES:
        return None
    for n in cone:
        if n.op is Op.PARAMETER or n.traits.side_effect:
            return None
        if not n.traits.structural and getattr(n.type, "size", 0) > DEFAULT_MAX_ELEMENTS:
            return None
    env: dict[int, object] = {}
    for n in cone:
        env[n.uid] = eval_node(n, [env[o.uid] for o in n.operands])
    return np.asarray(env[node.uid])


def _carry_tuple(like: Node, values: Sequence[Node]) -> Node:
    return make_node(Op.TUPLE, list(values), loc=like.loc)


def _simplify_while(n: Node) -> Node | None:
    cond, body = n.attr["condition"], n.attr["body"]
    init = list(n.operands)
    first = known_value(inline(cond, init))
    if first is None:
        return None
    if not bool(first):  # trip count 0: the result is the initial carry
        return _carry_tuple(n, init)
    after_one = results_of(inline(body, init))
    second = known_value(inline(cond, after_one))
    if second is not None and not bool(second):  # trip count 1: the body, once
        return _carry_tuple(n, after_one)
    return None


def _simplify_conditional(n: Node) -> Node | None:
    index, *operands = n.operands
    value = known_value(index)
    if value is None:
        return None
    branches = n.attr["branches"]
    return inline(branches[branch_index(value, len(branches))], operands)


_SIMPLIFY: dict[Op, Callable[[Node], Node | None]] = {
    Op.WHILE: _simplify_while,
    Op.CONDITIONAL: _simplify_conditional,
}


def simplify_control(n: Node) -> Node | None:
    """A loop run 0 or 1 times, or a conditional with a known index, as plain nodes."""
    rule = _SIMPLIFY.get(n.op) if n.traits.control else None
    return rule(n) if rule is not None else None


class ControlFlowSimplifier(Pass):
    """Loops with a known trip count of 0 or 1 and conditionals with a known branch
    become straight-line code."""

    name = "control-simplify"

    def run(self, module: Module) -> tuple[Module, bool]:
        out = rebuild_module(module, simplify_control)
        return out, out is not module


# ----------------------------------------------------------------------------- LICM


def _invariant_params(body: Computation) -> set[int]:
    """Body parameters the body returns unchanged: their value is the same every iteration."""
    root = body.root
    if root.op is not Op.TUPLE:
        return set()
    return {p.uid for p, r in zip(body.parameters, root.operands) if r is p}


def _hoistable(body: Computation) -> list[Node]:
    """The maximal invariant values the loop-varying part of the body reads: computed from
    invariant parameters (and constants) only, with some real work (not a parameter or a
    constant themselves), no side effects and no nested control flow."""
    inv_params = _invariant_params(body)
    invariant: dict[int, bool] = {}
    reads_param: dict[int, bool] = {}
    for n in body.nodes:
        if n.op is Op.PARAMETER:
            invariant[n.uid] = reads_param[n.uid] = n.uid in inv_params
        elif n.op is Op.CONSTANT:
            invariant[n.uid], reads_param[n.uid] = True, False
        else:
            ok = not (n.traits.side_effect or n.traits.control or n.traits.structural)
            invariant[n.uid] = ok and all(invariant[o.uid] for o in n.operands)
            reads_param[n.uid] = any(reads_param[o.uid] for o in n.operands)
    wanted: dict[int, Node] = {}
    readers = [n for n in body.nodes if not invariant[n.uid]]
    for r in readers:
        for o in r.operands:
            if invariant[o.uid] and reads_param[o.uid] and o.op is not Op.PARAMETER:
                wanted.setdefault(o.uid, o)
    return list(wanted.values())


def _extend(comp: Computation, types: Sequence[Type], replace: dict[int, Node] | None = None,
            extra_results: bool = False) -> Computation:
    """``comp`` with parameters of ``types`` appended; nodes in ``replace`` (by uid) read the
    new parameters instead; with ``extra_results``, its root tuple returns them too."""
    base = len(comp.parameters)
    new_params = [make_node(Op.PARAMETER, (), {"index": base + k}, type=t, name=f"hoisted{k}")
                  for k, t in enumerate(types)]
    env: dict[int, Node] = {p.uid: p for p in comp.parameters}
    subst = {uid: new_params[k] for k, uid in enumerate(replace or {})}
    for n in comp.nodes:
        if n.uid in env:
            continue
        if n.uid in subst:
            env[n.uid] = subst[n.uid]
            continue
        ops = tuple(env[o.uid] for o in n.operands)
        env[n.uid] = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
    root = env[comp.root.uid]
    if extra_results:
        root = make_node(Op.TUPLE, list(root.operands) + new_params, loc=root.loc)
    return Computation(comp.name, comp.parameters + tuple(new_params), root)


def hoist_invariants(n: Node) -> Node | None:
    """A loop computing invariant values once, before it: each becomes a new carry the body
    passes through unchanged."""
    if n.op is not Op.WHILE:
        return None
    body, cond = n.attr["body"], n.attr["condition"]
    hoisted = _hoistable(body)
    if not hoisted:
        return None
    init = list(n.operands)
    outside = [inline(Computation(body.name, body.parameters, h), init) for h in hoisted]
    types = [h.type for h in hoisted]
    new_body = _extend(body, types, {h.uid: h for h in hoisted}, extra_results=True)
    new_cond = _extend(cond, types)
    loop = make_node(Op.WHILE, init + outside, {"condition": new_cond, "body": new_body}, loc=n.loc, name=n.name)
    return _carry_tuple(n, [make_node(Op.GET_TUPLE_ELEMENT, [loop], {"index": k}, loc=n.loc)
                            for k in range(len(init))])


class LoopInvariantCodeMotion(Pass):
    """Moves work that reads only loop-invariant carries (and constants) out of loop bodies."""

    name = "licm"

    def run(self, module: Module) -> tuple[Module, bool]:
        out = rebuild_module(module, hoist_invariants)
        return out, out is not module


# ----------------------------------------------------------------------- trip counts


def _constant_int(n: Node) -> int | None:
    if n.op is Op.CONSTANT and n.type.shape == () and n.dtype.is_int:  # type: ignore[union-attr]  # constants are arrays
        return int(n.attr["value"].array)
    return None


def _unfused(n: Node) -> Node:
    """The value of ``n`` in plain ops when the fusion pass put it in a fusion (or read it
    from a multi-output one): trip counts are read before fusion and after it."""
    if n.op is Op.GET_TUPLE_ELEMENT and n.operands[0].op is Op.FUSION:
        root = _unfused(n.operands[0])
        return root.operands[n.attr["index"]] if root.op is Op.TUPLE else n
    if n.op is Op.FUSION:
        return inline(n.attr["computation"], list(n.operands))
    return n


def static_trip_count(loop: Node) -> int | None:
    """The number of trips of a counted loop (a carry that starts at a constant, grows by a
    positive constant per trip and is compared ``lt`` with a constant or a constant carry
    the body passes through), else None: the trip count depends on data. The condition
    and the step may sit in fusions (an optimized loop)."""
    cond, body = loop.attr["condition"], loop.attr["body"]
    test, root = _unfused(cond.root), body.root
    if test.op is not Op.COMPARE or test.attr["direction"] != "lt" or root.op is not Op.TUPLE:
        return None
    counter, limit = test.operands
    if counter.op is not Op.PARAMETER:
        return None
    k = counter.attr["index"]
    bound = _constant_int(limit)
    if bound is None and limit.op is Op.PARAMETER:
        j = limit.attr["index"]
        if root.operands[j] is body.parameters[j]:  # passed through unchanged
            bound = _constant_int(loop.operands[j])
    start = _constant_int(loop.operands[k])
    step_node = _unfused(root.operands[k])
    if bound is None or start is None or step_node.op is not Op.ADD:
        return None
    a, b = step_node.operands
    step = _constant_int(b) if a is body.parameters[k] else _constant_int(a) if b is body.parameters[k] else None
    if step is None or step <= 0:
        return None
    trips = max(0, -(-(bound - start) // step))
    # a counter that would wrap past its dtype's largest value comes back below the bound
    # and the loop goes on: the count is not the formula's then
    if trips and start + trips * step > int(np.iinfo(counter.dtype.np).max):
        return None
    return trips
