"""Differential tests: random well-typed modules (1-40 nodes, every primitive) compute the
same values before and after the full pipeline and after every single pass.

The optimizer promises bit-exact results (NaN-aware; -0.0 and +0.0 are told apart), so
the comparison is exact rather than within a tolerance."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axle.interpreter import evaluate
from axle.ir.verifier import verify
from axle.passes import CSE, DCE, AlgebraicSimplifier, ConstantFolding, Fusion, optimize
from axle.passes.policy import FusionPolicy
from axle.passes.random_modules import GENERATED_OPS, random_module

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_same(actual: list[np.ndarray], expected: list[np.ndarray], what: str) -> None:
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape, f"{what}: result {i} is {a.dtype}{a.shape}, expected {e.dtype}{e.shape}"
        if e.dtype.kind == "f":
            assert np.array_equal(a, e, equal_nan=True), f"{what}: result {i} differs:\n{a}\nexpected\n{e}"
            both = ~np.isnan(e)
            assert np.array_equal(np.signbit(a[both]), np.signbit(e[both])), f"{what}: result {i} signs of zero differ"
        else:
            assert np.array_equal(a, e), f"{what}: result {i} differs:\n{a}\nexpected\n{e}"


SINGLE_PASSES = {
    "simplify": AlgebraicSimplifier,
    "constant-fold": ConstantFolding,
    "cse": CSE,
    "dce": DCE,
    "fusion": Fusion,
    "fusion-dot-epilogue-no-row": lambda: Fusion(FusionPolicy(dot_epilogue=True, row_fusion=False)),
    "fusion-tiny-no-dup-no-mof": lambda: Fusion(FusionPolicy(max_fusion_nodes=3, duplicate_cheap=False,
                                                             multi_output=False)),
}


def test_generator_covers_every_primitive():
    seen = set()
    for seed in range(300):
        m, _ = random_module(seed, 12)
        seen |= {n.op for n in m.entry.nodes}
    assert set(GENERATED_OPS) <= seen


class _Backend:
    """Only what optimize() asks of a backend: its passes and fusion policy."""

    name = "test"

    def __init__(self, policy: FusionPolicy | None) -> None:
        self.policy = policy

    def passes(self) -> list:
        return []

    def fusion_policy(self) -> FusionPolicy | None:
        return self.policy


POLICIES = [None, FusionPolicy(dot_epilogue=True), FusionPolicy(row_fusion=False, multi_output=False),
            FusionPolicy(max_fusion_nodes=4, duplicate_cheap=False, max_fused_constant_elements=100)]


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40), policy=st.sampled_from(POLICIES))
def test_full_pipeline_preserves_values(seed, n, policy):
    m, inputs = random_module(seed, n)
    expected = evaluate(m, *inputs)
    out = optimize(m, backend=_Backend(policy))
    verify(out)
    assert_same(evaluate(out, *inputs), expected, f"optimize(random_module({seed}, {n}))")


@pytest.mark.parametrize("name", list(SINGLE_PASSES))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40))
def test_each_pass_preserves_values(name, seed, n):
    m, inputs = random_module(seed, n)
    expected = evaluate(m, *inputs)
    out, changed = SINGLE_PASSES[name]().run(m)
    assert changed == (out is not m)
    verify(out)
    assert_same(evaluate(out, *inputs), expected, f"{name}(random_module({seed}, {n}))")
