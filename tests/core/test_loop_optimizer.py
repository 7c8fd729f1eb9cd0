"""The optimizer inside loop bodies, conditions and branches: each pass (simplify, constant
folding, CSE, DCE, fusion, the whole pipeline) turns a body or a branch into what it makes
of the same ops in an entry computation; fusion records, trip counts and explain see the
fused bodies."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.interpreter import evaluate
from axle.ir.builder import Builder, make_node
from axle.ir.fusion_record import fusion_nodes, members_of
from axle.ir.module import Computation, Module, Node, post_order
from axle.ir.ops import Op
from axle.ir.parser import parse_module
from axle.passes import CSE, DCE, AlgebraicSimplifier, ConstantFolding, Fusion, Pass, optimize
from axle.passes.control import static_trip_count
from axle.passes.fusion import is_kernel, why_alone
from axle.passes.pipeline import FunctionPass

Ops = Callable[[Builder, list[Node]], list[Node]]
TRIPS = 3


def splat(b: Builder, v: float, shape: tuple[int, ...]) -> Node:
    return b.broadcast_in_dim(b.constant(np.float32(v)), shape=shape, broadcast_dimensions=())


def simplifiable(b: Builder, p: list[Node]) -> list[Node]:
    return [b.neg(b.mul(p[0], splat(b, 1.0, (8,))))]  # x * 1 -> x


def foldable(b: Builder, p: list[Node]) -> list[Node]:
    two_plus_three = b.add(b.constant(np.float32(2)), b.constant(np.float32(3)))
    return [b.add(p[0], b.broadcast_in_dim(two_plus_three, shape=(8,), broadcast_dimensions=()))]


def duplicated(b: Builder, p: list[Node]) -> list[Node]:
    return [b.add(b.neg(p[0]), b.neg(p[0]))]


def dead_fusion_output(b: Builder, p: list[Node]) -> list[Node]:
    """A three-output fusion of which one output is read: DCE drops two outputs and a parameter."""
    fb = Builder("fused")
    q = [fb.parameter("f32[8]") for _ in range(3)]
    comp = fb.computation(fb.exp(q[0]), fb.add(q[0], q[1]), fb.neg(q[2]))
    f = make_node(Op.FUSION, [p[0], p[1], p[2]], {"kind": "loop", "computation": comp})
    return [b.get_tuple_element(f, index=1), p[1], p[2]]


def fusible(b: Builder, p: list[Node]) -> list[Node]:
    """A loop fusion (x * 2 + 1) and a row fusion (y - max(y) per row)."""
    x, y = p
    row_max = b.broadcast_in_dim(b.reduce(y, kind="max", axes=(1,)), shape=(8, 4), broadcast_dimensions=(0,))
    return [b.add(b.mul(x, splat(b, 2.0, (8,))), splat(b, 1.0, (8,))), b.sub(y, row_max)]


def pipeline(m: Module) -> Module:
    return optimize(m)


CASES: dict[str, tuple[Pass, Ops, list[str]]] = {
    "simplify": (AlgebraicSimplifier(), simplifiable, ["f32[8]"]),
    "constant-fold": (ConstantFolding(), foldable, ["f32[8]"]),
    "cse": (CSE(), duplicated, ["f32[8]"]),
    "dce": (DCE(), dead_fusion_output, ["f32[8]"] * 3),
    "fusion": (Fusion(), fusible, ["f32[8]", "f32[8,4]"]),
    "pipeline": (FunctionPass("default", pipeline), fusible, ["f32[8]", "f32[8,4]"]),
}


def entry_module(ops: Ops, types: list[str]) -> Module:
    b = Builder("entry")
    return b.build(*ops(b, [b.parameter(t) for t in types]))


def sub(name: str, types: list[str], build: Callable[[Builder, list[Node]], list[Node] | Node]) -> Computation:
    b = Builder(name)
    out = build(b, [b.parameter(t) for t in types])
    return b.computation(b.tuple(*out) if isinstance(out, list) else out)


def loop_module(ops: Ops, types: list[str]) -> Module:
    """``for _ in range(TRIPS): xs = ops(xs)``, the counter carried last."""
    all_types = types + ["s32[]"]
    cond = sub("cond", all_types, lambda c, p: c.compare(p[-1], c.constant(np.int32(TRIPS)), direction="lt"))
    body = sub("body", all_types, lambda c, p: ops(c, p[:-1]) + [c.add(p[-1], c.constant(np.int32(1)))])
    b = Builder("loop")
    xs = [b.parameter(t) for t in types]
    loop = b.op(Op.WHILE, *xs, b.constant(np.int32(0)), condition=cond, body=body)
    return b.build(*[b.get_tuple_element(loop, index=i) for i in range(len(types))])


def branch_module(ops: Ops, types: list[str]) -> Module:
    """``ops(xs) if k == 0 else xs``."""
    branches = (sub("branch0", types, ops), sub("branch1", types, lambda c, p: list(p)))
    b = Builder("branch")
    k = b.parameter("s32[]")
    xs = [b.parameter(t) for t in types]
    cond = b.op(Op.CONDITIONAL, k, *xs, branches=branches)
    return b.build(*[b.get_tuple_element(cond, index=i) for i in range(len(types))])


def _the(m: Module, op: Op) -> Node:
    (n,) = [n for c in m.computations() for n in c.nodes if n.op is op]
    return n


def loop_body(m: Module) -> tuple[Computation, set[int]]:
    """The body and the uids of its counter's cone (left out of the comparison)."""
    body = _the(m, Op.WHILE).attr["body"]
    return body, {n.uid for n in post_order([body.root.operands[-1]])}


def branch0(m: Module) -> tuple[Computation, set[int]]:
    return _the(m, Op.CONDITIONAL).attr["branches"][0], set()


def signature(comp: Computation, skip: set[int] = frozenset()) -> list[object]:
    """The ops of a computation in order (a fusion as its kind and members), names aside."""
    out: list[object] = []
    for n in comp.nodes:
        if n.op in (Op.PARAMETER, Op.TUPLE) or n.uid in skip:
            continue
        out.append(("fusion", n.attr["kind"], members_of(n.attr["computation"])) if n.op is Op.FUSION
                   else n.op.value)
    return out


def inputs(types: list[str], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(axle.ir.parse_type(t).shape).astype(np.float32) for t in types]


@pytest.mark.parametrize("where", ["body", "branch"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_pass_optimizes_a_body_or_branch_as_it_does_an_entry(case, where):
    p, ops, types = CASES[case]
    entry_before = entry_module(ops, types)
    entry_after, changed = p.run(entry_before)
    assert changed
    build, part = (loop_module, loop_body) if where == "body" else (branch_module, branch0)
    m = build(ops, types)
    out, changed = p.run(m)
    assert changed
    comp, skip = part(out)
    assert signature(comp, skip) == signature(entry_after.entry) != signature(entry_before.entry)
    args = inputs(types) if where == "body" else [np.int32(0)] + inputs(types)
    for got, want in zip(evaluate(out, *args), evaluate(m, *args)):
        np.testing.assert_array_equal(got, want)


def test_the_fori_loop_body_is_fused_and_its_trip_count_still_read():
    """The issue's example: the body's broadcasts, multiply and add were five launches per
    trip; fused, the body is two (the counter's add and one loop fusion), the condition one."""
    def f(x):
        return lax.fori_loop(0, 5, lambda i, c: c * 2.0 + 1.0, x)

    x = np.arange(4, dtype=np.float32)
    m = axle.jit(f).lower(x).optimize()
    loop = _the(m, Op.WHILE)
    body, cond = loop.attr["body"], loop.attr["condition"]
    assert [n.op for n in body.nodes if n.op not in (Op.PARAMETER, Op.TUPLE)] == [Op.FUSION, Op.FUSION]
    assert sorted(signature(body)) == [("fusion", "loop", ("constant", "add")),
                                       ("fusion", "loop", ("constant", "broadcast", "multiply", "constant",
                                                           "broadcast", "add"))]
    assert cond.root.op is Op.FUSION
    assert static_trip_count(loop) == 5  # read through the fused condition and step
    want = x
    for _ in range(5):
        want = want * np.float32(2) + np.float32(1)
    for d in axle.devices():
        np.testing.assert_array_equal(np.asarray(axle.jit(f, device=d)(x)), want)


def nested(x, w):
    """A fori_loop in a fori_loop, a cond in a scan: fusions at every depth."""
    def inner(j, c):
        return c * w + lax.cond(j > 0, lambda a: a * 0.5, lambda a: -a, c)

    def outer(i, c):
        return lax.fori_loop(0, 2, inner, c) - c.max()

    y = lax.fori_loop(0, 3, outer, x)
    c, ys = lax.scan(lambda c, r: (lax.cond(r.sum() > 0, lambda a: a + r, lambda a: a * r, c), c.sum()), y,
                     anp.stack([x, x * 2.0]))
    return c + ys.sum()


def test_fusion_reaches_nested_loops_and_branches_with_one_record_each():
    x = np.array([0.5, -1.0], np.float32)
    w = np.float32(0.75)
    lowered = axle.jit(nested).lower(x, w)
    traced, m = lowered.module, lowered.optimize()
    fusions = fusion_nodes(m.entry)
    names = [f.attr["computation"].name for f in fusions]
    assert len(names) == len(set(names))  # unique in the module
    assert all(m.fusion_record(f) is not None for f in fusions)  # kept through CSE and DCE after fusion
    scopes = [c for c in m.computations() if not any(c is f.attr["computation"] for f in fusions)]
    assert len(scopes) > 6
    for c in scopes:  # every fusible kernel of every body, condition and branch is in a fusion
        bare = [n.op for n in c.nodes if is_kernel(n) and why_alone(n) is None]  # not a kernel of its own
        assert not bare, (c.name, bare)
    np.testing.assert_array_equal(evaluate(m, x, w)[0], evaluate(traced, x, w)[0])
    assert parse_module(m.as_text()).as_text() == m.as_text()  # fused bodies print and parse back
    for d in axle.devices():
        np.testing.assert_array_equal(np.asarray(axle.jit(nested, device=d)(x, w)), evaluate(traced, x, w)[0])


def test_fusing_an_already_fused_module_changes_nothing():
    m = loop_module(fusible, ["f32[8]", "f32[8,4]"])
    fused, changed = Fusion().run(m)
    assert changed and not Fusion().run(fused)[1]


def test_explain_lists_the_kernels_of_a_loop_body_and_condition():
    def f(x):
        return lax.fori_loop(0, 5, lambda i, c: c * 2.0 + 1.0, x)

    e = axle.jit(f).lower(np.ones(4, np.float32)).explain()
    (loop,) = [k for k in e.kernels if k.op == "while"]
    calls = dict(loop.calls)
    assert [len(calls["condition %cond"]), len(calls["body %body"])] == [1, 2]
    assert all(k.record is not None for k in calls["body %body"])
    text = e.text(source=False)
    assert "body %body: 2 kernel launches per trip" in text
    assert "fusion pass: loop fusion %fused_add of constant, broadcast, multiply" in text
    assert "body %body: 2 kernel launch(es) per trip" in e.to_html()


def test_a_device_claims_an_optimized_loop_only_with_every_op_inside_its_fusions():
    from axle.backend import Capabilities
    from axle.ir.ops import CONTROL_OPS, CORE_PRIMITIVES

    loop = _the(optimize(loop_module(fusible, ["f32[8]", "f32[8,4]"])), Op.WHILE)
    assert any(n.op is Op.FUSION for n in loop.attr["body"].nodes)
    assert Capabilities(ops=CORE_PRIMITIVES | CONTROL_OPS).refusal(loop) is None
    why = Capabilities(ops=(CORE_PRIMITIVES | CONTROL_OPS) - {Op.REDUCE}).refusal(loop)
    assert why is not None and "while runs fusion holds op 'reduce'" in why
