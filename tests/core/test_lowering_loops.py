"""axle.lowering.loops.known_trip_count: the trip count a backend may run a loop by without
reading its condition back, found through fusions, refused where the counter would wrap."""
from __future__ import annotations

import numpy as np
import pytest

import axle
from axle import lax
from axle.ir.builder import Builder
from axle.ir.module import Computation, Node
from axle.ir.ops import Op
from axle.lowering.loops import known_trip_count
from axle.passes import optimize
from axle.passes.control import static_trip_count


def _loops(module) -> list[Node]:  # noqa: ANN001
    return [n for c in module.computations() for n in c.nodes if n.op is Op.WHILE]


def _sub(name: str, types: list[str], build) -> Computation:  # noqa: ANN001
    b = Builder(name)
    ps = [b.parameter(t, name=f"q{i}") for i, t in enumerate(types)]
    out = build(b, ps)
    return b.computation(b.op(Op.TUPLE, *out) if isinstance(out, tuple) else out)


def _counted(dt: str, start: int, step: int, bound: int) -> Node:
    """while (i < bound) { i += step; x *= 2 } over (i: dt, x: f32[3]), i from ``start``."""
    npt = np.dtype({"s8": np.int8, "s32": np.int32, "u8": np.uint8}[dt])
    cond = _sub("cond", [f"{dt}[]", "f32[3]"], lambda c, p: c.compare(p[0], c.constant(npt.type(bound)),
                                                                     direction="lt"))
    body = _sub("body", [f"{dt}[]", "f32[3]"], lambda c, p: (c.add(p[0], c.constant(npt.type(step))),
                                                             c.add(p[1], p[1])))
    b = Builder("loop")
    x = b.parameter("f32[3]")
    loop = b.op(Op.WHILE, b.constant(npt.type(start)), x, condition=cond, body=body)
    m = b.build(b.get_tuple_element(loop, index=1))
    (n,) = _loops(m)
    return n


@pytest.mark.parametrize(("dt", "start", "step", "bound", "trips"), [
    ("s32", 0, 1, 10, 10), ("s32", 3, 4, 20, 5), ("s32", 5, 1, 2, 0), ("u8", 0, 50, 250, 5),
    ("s8", -100, 100, 50, 2), ("s8", 0, 1, 127, 127)])
def test_counted_loops_have_their_trip_count(dt, start, step, bound, trips):
    assert known_trip_count(_counted(dt, start, step, bound)) == trips


@pytest.mark.parametrize(("dt", "start", "step", "bound"), [("s8", 0, 100, 127), ("u8", 0, 100, 255)])
def test_a_counter_that_would_wrap_has_no_known_count(dt, start, step, bound):
    # s8: 0, 100, then 200 wraps to -56 < 127: the loop does not stop after 2 trips
    loop = _counted(dt, start, step, bound)
    assert known_trip_count(loop) is None and static_trip_count(loop) is None  # reverse mode reads it too


def test_fori_loop_and_scan_have_a_known_count_and_a_traced_bound_has_none():
    x = np.ones(3, np.float32)
    fixed = axle.jit(lambda x: lax.fori_loop(2, 9, lambda i, v: v * 2.0, x)).lower(x).module
    scanned = axle.jit(lambda xs: lax.scan(lambda c, r: (c + r, c), np.float32(0), xs)).lower(x).module
    traced = axle.jit(lambda x, n: lax.fori_loop(0, n, lambda i, v: v * 2.0, x)).lower(x, np.int32(4)).module
    assert [known_trip_count(n) for n in _loops(fixed)] == [7]
    assert [known_trip_count(n) for n in _loops(scanned)] == [3]
    assert [known_trip_count(n) for n in _loops(traced)] == [None]


def _fused(comp: Computation) -> Computation:
    """``comp`` with each non-parameter root operand (or the root) wrapped in a fusion."""
    def wrap(n: Node, b: Builder) -> Node:
        if n.op is Op.PARAMETER:
            return n
        fb = Builder("fused")
        ps = [fb.parameter(o.type) for o in n.operands]
        inner = fb.computation(fb.op(n.op, *ps, **dict(n.attrs)))
        return b.op(Op.FUSION, *n.operands, computation=inner, kind="loop")

    b = Builder(comp.name)
    root = comp.root
    if root.op is Op.TUPLE:
        return Computation(comp.name, comp.parameters, b.op(Op.TUPLE, *[wrap(o, b) for o in root.operands]))
    return Computation(comp.name, comp.parameters, wrap(root, b))


def test_the_count_is_found_through_fusions():
    loop = _counted("s32", 0, 3, 10)
    cond, body = _fused(loop.attr["condition"]), _fused(loop.attr["body"])
    assert cond.root.op is Op.FUSION and body.root.operands[0].op is Op.FUSION
    fused = loop.replace(attrs=(("condition", cond), ("body", body)))
    assert known_trip_count(fused) == 4


def test_the_optimized_scan_keeps_its_count():
    x = np.ones((5, 3), np.float32)
    m = optimize(axle.jit(lambda xs: lax.scan(lambda c, r: (c * 0.5 + r, c), np.zeros(3, np.float32), xs))
                 .lower(x).module)
    assert [known_trip_count(n) for n in _loops(m)] == [5]


def test_a_body_whose_carry_comes_whole_from_a_nested_loop_has_no_known_count():
    inner = _counted("s32", 0, 1, 3)
    body = Computation("body", inner.attr["body"].parameters,
                       inner.replace(operands=tuple(inner.attr["body"].parameters)))
    outer = inner.replace(attrs=(("condition", inner.attr["condition"]), ("body", body)))
    assert known_trip_count(outer) is None
