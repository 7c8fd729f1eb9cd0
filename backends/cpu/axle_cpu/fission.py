"""Keeping inlined kernels small: materialize what would be recomputed too often.

A kernel computes its outputs by inlining producers at the index each consumer asks
for. Values read at the same index by elementwise users are shared (memoized), but a
value read through index-changing ops (reverse, transpose, slice, pad, concatenate,
broadcast, reduce...) at several different indices is emitted once per index pattern;
chains of those grow the code exponentially (``add(x, reverse(x))`` nested k times emits
x 2^k times). ``split`` estimates the number of emitted evaluations per node and, while
the kernel is over budget, turns the most re-evaluated node into a separate kernel whose
result the rest reads from memory (like XLA's fusion cost checks, applied backend-side).
"""
from __future__ import annotations

from collections import defaultdict

from axle.ir.module import Computation, Node
from axle.ir.ops import Op

#: estimated evaluations (weighted) above which a kernel is split
BUDGET = 3000
_CHEAP = (Op.PARAMETER, Op.CONSTANT, Op.IOTA)


def _weight(n: Node) -> int:
    if n.op is Op.POW and not n.dtype.is_float:
        return 64  # up to 63 square-and-multiply rounds per element
    return 30 if n.traits.transcendental else 1


def evaluations(root: Node) -> dict[int, int]:
    """Estimated emissions of each node reachable from ``root``."""
    from axle.ir.module import post_order

    nodes = post_order([root])
    outputs = {o.uid for o in (root.operands if root.op is Op.TUPLE else (root,))}
    same: dict[int, int] = defaultdict(int)
    moved: dict[int, int] = defaultdict(int)
    est: dict[int, int] = {}
    for n in reversed(nodes):
        if n.op is Op.TUPLE:
            continue
        e = max(same[n.uid], 1 if n.uid in outputs else 0) + moved[n.uid]
        est[n.uid] = e
        for o in n.operands:
            if n.traits.elementwise and o.shape == n.shape:
                same[o.uid] = max(same[o.uid], e)
            else:
                moved[o.uid] += e
    return est


def cost(root: Node) -> int:
    from axle.ir.module import post_order

    est = evaluations(root)
    return sum(est.get(n.uid, 0) * _weight(n) for n in post_order([root]) if n.op is not Op.TUPLE)


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


def split(comp: Computation) -> tuple[list[Computation], Computation]:
    """(producers, consumer): producer j takes the original parameters plus the results
    of producers 0..j-1 as extra parameters; the consumer takes all of them."""
    params = list(comp.parameters)
    chosen: list[Node] = []
    repl: dict[int, Node] = {}
    root = comp.root
    origin: dict[int, Node] = {}
    # A pad evaluates its operand at clamped indices for every padding element too, and
    # LLVM's optimizer was seen to take minutes on transcendental chains under a padded
    # (interior) index: such operands are computed by their own kernel.
    from axle.ir.module import post_order

    for n in post_order([root]):
        if n.op is Op.PAD and n.operands[0].op not in _CHEAP and n.operands[0].uid not in repl and any(
                m.traits.transcendental for m in post_order([n.operands[0]])):
            m = n.operands[0]
            repl[m.uid] = Node(Op.PARAMETER, (), (("index", len(params) + len(chosen)),), m.type, name="mat")
            chosen.append(m)
    if chosen:
        root = _substitute(comp.root, repl, origin)
    while cost(root) > BUDGET:
        est = evaluations(root)
        from axle.ir.module import post_order

        cands = [n for n in post_order([root]) if n.op not in _CHEAP and n.op is not Op.TUPLE
                 and est.get(n.uid, 0) > 1 and n.uid not in repl]
        if not cands:
            break
        m = origin.get(max(cands, key=lambda n: est[n.uid]).uid)
        m = m if m is not None else max(cands, key=lambda n: est[n.uid])
        if m.uid in repl:
            break
        p = Node(Op.PARAMETER, (), (("index", len(params) + len(chosen)),), m.type, name=f"mat{len(chosen)}")
        chosen.append(m)
        repl[m.uid] = p
        root = _substitute(comp.root, repl, origin)
    if not chosen:
        return [], comp
    # Producers in dependency order: a chosen node may read earlier-chosen ones.
    order = {n.uid: i for i, n in enumerate(comp.nodes)}
    ranked = sorted(chosen, key=lambda n: order.get(n.uid, 0))
    mat_params = []
    producers = []
    done: dict[int, Node] = {}
    for j, m in enumerate(ranked):
        ps = params + mat_params
        pr = _substitute(m, {k: v for k, v in done.items()}) if done else m
        producers.append(Computation(f"{comp.name}_part{j}", tuple(ps), pr))
        p = Node(Op.PARAMETER, (), (("index", len(params) + j),), m.type, name=f"mat{j}")
        mat_params.append(p)
        done[m.uid] = p
    consumer = Computation(comp.name, tuple(params + mat_params), _substitute(comp.root, done))
    return producers, consumer
