"""Splitting a fused computation whose inlined kernel would be too big.

The fusion pass never forms a group over its policy's ``max_inline_cost`` (the estimate of
:mod:`axle.passes.inline_cost`), but a module may carry fusions written by hand (parsed IR
text, tests, other tools). For those, :func:`split` materializes values into producer
computations of their own, while the consumer is over budget, so that no backend emits an
exponentially large kernel: the most re-evaluated value first, and first of all every pad
operand holding transcendental functions (see ``padded_transcendental``). The kernel plan
applies it to every fusion; on a module fused by the fusion pass it changes nothing.
"""
from __future__ import annotations

from ..ir.module import Computation, Node, post_order
from ..ir.ops import Op
from ..passes.inline_cost import CHEAP_LEAVES, evaluations, inline_cost


def _substitute(root: Node, repl: dict[int, Node], origin: dict[int, Node] | None = None) -> Node:
    """``root`` with nodes (by uid) replaced; ``origin`` records rebuilt -> original."""
    memo: dict[int, Node] = {}

    def rb(n: Node) -> Node:
        if n.uid in repl:
            return repl[n.uid]
        if n.uid in memo:
            return memo[n.uid]
        ops = tuple(rb(o) for o in n.operands)
        r = n if all(a is b for a, b in zip(ops, n.operands)) else Node(n.op, ops, n.attrs, n.type, loc=n.loc,
                                                                       name=n.name)
        memo[n.uid] = r
        if origin is not None:
            origin[r.uid] = n
        return r

    return rb(root)


def split(comp: Computation, budget: int) -> tuple[list[Computation], Computation]:
    """(producers, consumer): producer j takes the original parameters plus the results
    of producers 0..j-1 as extra parameters; the consumer takes all of them. No producers
    when ``comp`` is within ``budget`` and pads no transcendental chain."""
    params = list(comp.parameters)
    chosen: list[Node] = []
    repl: dict[int, Node] = {}
    root = comp.root
    origin: dict[int, Node] = {}

    def materialize(m: Node) -> None:
        repl[m.uid] = Node(Op.PARAMETER, (), (("index", len(params) + len(chosen)),), m.type,
                           name=f"mat{len(chosen)}")
        chosen.append(m)

    for n in post_order([root]):
        x = n.operands[0] if n.op is Op.PAD else None
        if x is not None and x.op not in CHEAP_LEAVES and x.uid not in repl and any(
                m.traits.transcendental for m in post_order([x])):
            materialize(x)
    if chosen:
        root = _substitute(comp.root, repl, origin)
    while inline_cost([root]) > budget:
        est = evaluations([root])
        cands = [n for n in post_order([root]) if n.op not in CHEAP_LEAVES and n.op is not Op.TUPLE
                 and est.get(n.uid, 0) > 1 and n.uid not in repl]
        if not cands:
            break
        m = origin.get(max(cands, key=lambda n: est[n.uid]).uid)
        m = m if m is not None else max(cands, key=lambda n: est[n.uid])
        if m.uid in repl:
            break
        materialize(m)
        root = _substitute(comp.root, repl, origin)
    if not chosen:
        return [], comp
    # Producers in dependency order: a chosen node may read earlier-chosen ones.
    order = {n.uid: i for i, n in enumerate(comp.nodes)}
    ranked = sorted(chosen, key=lambda n: order.get(n.uid, 0))
    mat_params: list[Node] = []
    producers = []
    done: dict[int, Node] = {}
    for j, m in enumerate(ranked):
        ps = params + mat_params
        pr = _substitute(m, dict(done)) if done else m
        producers.append(Computation(f"{comp.name}_part{j}", tuple(ps), pr))
        p = Node(Op.PARAMETER, (), (("index", len(params) + j),), m.type, name=f"mat{j}")
        mat_params.append(p)
        done[m.uid] = p
    consumer = Computation(comp.name, tuple(params + mat_params), _substitute(comp.root, done))
    return producers, consumer
