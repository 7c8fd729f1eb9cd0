"""The inlined-kernel size estimate (axle.passes.inline_cost): the fusion pass forms no group
over the policy's max_inline_cost nor one padding a transcendental chain, and the kernel plan
splits a hand-written fusion that is over it (axle.lowering.fission)."""
from __future__ import annotations

import numpy as np
import pytest

from axle.interpreter import evaluate
from axle.ir import Builder, Module, Op
from axle.lowering.plan import kernel_plan
from axle.passes import optimize
from axle.passes.inline_cost import inline_cost, padded_transcendental
from axle.passes.policy import DEFAULT_POLICY
from axle.testing.random_modules import random_module

from test_lowering_plan import run_plan

RNG = np.random.default_rng(0)


def _nest(b: Builder, y, depth: int = 14):  # noqa: ANN001, ANN202
    """add(y, reverse(y)) nested: y is read at 2^depth index patterns."""
    for k in range(depth):
        y = b.add(y, b.reverse(y, dimensions=(k % 2,)))
    return y


def _fusions(m: Module) -> list:
    return [n for n in m.entry.nodes if n.op is Op.FUSION]


def test_fusion_forms_no_group_over_the_budget() -> None:
    b = Builder("blowup")
    x = b.parameter("f32[9,7]")
    m = b.build(_nest(b, b.exp(x)))
    whole = m.entry.root
    assert inline_cost([whole]) > 2 ** 14  # all of it in one kernel: exponential
    x_val = RNG.standard_normal((9, 7)).astype(np.float32)
    expected = evaluate(m, x_val)
    opt = optimize(m)
    fused = _fusions(opt)
    assert len(fused) >= 2
    for f in fused:
        assert inline_cost([f.attr["computation"].root]) <= DEFAULT_POLICY.max_inline_cost
    np.testing.assert_allclose(evaluate(opt, x_val)[0], expected[0], rtol=1e-5)


@pytest.mark.parametrize("seed", range(25))
def test_a_groups_cost_is_its_fused_computations_cost(seed: int) -> None:
    """fusion judges a candidate by (roots, members) over the entry graph; the fused
    computation it builds must cost exactly that, so the plan never splits what fusion made."""
    module, _ = random_module(1000 + seed, 30)
    for f in _fusions(optimize(module)):
        comp = f.attr["computation"]
        members = {n.uid for n in comp.nodes if n.op is not Op.PARAMETER}
        assert inline_cost([comp.root]) == inline_cost([comp.root], members | {p.uid for p in comp.parameters})
        assert inline_cost([comp.root]) <= DEFAULT_POLICY.max_inline_cost


def test_a_padded_transcendental_chain_gets_its_own_kernel() -> None:
    b = Builder("padexp")
    x = b.parameter("f32[6,5]")
    e = b.tanh(b.exp(b.mul(x, x)))
    zero = b.constant(np.float32(0.0))
    padded = b.pad(e, zero, low=(1, 2), high=(2, 0), interior=(1, 0))
    m = b.build(b.add(padded, padded))
    assert padded_transcendental([m.entry.root]) is not None
    opt = optimize(m)
    for f in _fusions(opt):
        assert padded_transcendental([f.attr["computation"].root]) is None
    x_val = RNG.standard_normal((6, 5)).astype(np.float32)
    np.testing.assert_allclose(evaluate(opt, x_val)[0], evaluate(m, x_val)[0], rtol=1e-6)


def _hand_fused(depth: int) -> Module:
    inner = Builder("f")
    p = inner.parameter("f32[5,4]")
    comp = inner.computation(_nest(inner, inner.exp(p), depth))
    b = Builder("m")
    q = b.parameter("f32[5,4]")
    return b.build(b.fusion(q, kind="loop", computation=comp))


def test_the_plan_splits_a_hand_written_fusion_over_the_budget() -> None:
    m = _hand_fused(14)
    plan = kernel_plan(m)
    parts = [launch for launch in plan.launches if launch.label.endswith("(part)")]
    assert parts and all(launch.kind == "loop" for launch in parts)
    assert plan.launches[-1].kind == "loop" and not plan.launches[-1].label.endswith("(part)")
    for launch in plan.launches:
        assert inline_cost([launch.computation.root]) <= DEFAULT_POLICY.max_inline_cost
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(run_plan(plan, [x])[0], evaluate(m, x)[0], rtol=1e-5)


def test_the_plan_leaves_a_fusion_within_the_budget_whole() -> None:
    plan = kernel_plan(_hand_fused(3))
    assert len(plan.launches) == 1
