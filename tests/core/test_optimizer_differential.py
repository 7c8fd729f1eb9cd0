"""Differential tests: random well-typed modules (1-40 nodes, every primitive) compute the
same values before and after the full pipeline and after every single pass.

Every pass but transpose-fold and layout promises bit-exact results (NaN-aware; -0.0 and +0.0 are
told apart), so the comparison is exact rather than within a tolerance; one ULP could
otherwise flip a later compare and make a tolerance meaningless. transpose-fold and layout
change a dot's operand layout, which may change the reference's summation order: they are
checked on their own, within the dot tolerance."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axle.config import config
from axle.interpreter import evaluate
from axle.ir.verifier import verify
from axle.passes import (CSE, DCE, AlgebraicSimplifier, ConstantFolding, Fusion, LayoutAssignment, TransposeFolding,
                         optimize)
from axle.ir import Builder, DType, Op
from axle.ir.dtypes import is_float_numpy
from axle.passes.policy import FusionPolicy
from axle.testing.random_modules import GENERATED_OPS, random_module
from axle.testing.cases import assert_close, tolerance

# CI runs a fixed set of examples (no flaky red builds); local runs explore new ones
IN_CI = os.environ.get("CI", "").lower() == "true"
SETTINGS = settings(max_examples=40, deadline=None, derandomize=IN_CI, suppress_health_check=[HealthCheck.too_slow])


def assert_same(actual: list[np.ndarray], expected: list[np.ndarray], what: str) -> None:
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape, f"{what}: result {i} is {a.dtype}{a.shape}, expected {e.dtype}{e.shape}"
        if is_float_numpy(e.dtype):  # bfloat16 included (kind V)
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
    "fusion-no-row-low-cost": lambda: Fusion(FusionPolicy(row_fusion=False, max_inline_cost=40)),
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


POLICIES = [None, FusionPolicy(max_inline_cost=40), FusionPolicy(row_fusion=False, multi_output=False),
            FusionPolicy(max_fusion_nodes=4, duplicate_cheap=False, max_fused_constant_elements=100)]


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40), policy=st.sampled_from(POLICIES))
def test_full_pipeline_preserves_values(seed, n, policy):
    m, inputs = random_module(seed, n)
    expected = evaluate(m, *inputs)
    saved = config.disable_passes
    config.update(disable_passes="transpose-fold,layout")  # the passes exact only within tolerance
    try:
        out = optimize(m, backend=_Backend(policy))
    finally:
        config.update(disable_passes=saved)
    verify(out)
    assert_same(evaluate(out, *inputs), expected, f"optimize(random_module({seed}, {n}))")


@pytest.mark.parametrize("name", list(SINGLE_PASSES))
@settings(max_examples=20, deadline=None, derandomize=IN_CI, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40))
def test_each_pass_preserves_values(name, seed, n):
    m, inputs = random_module(seed, n)
    expected = evaluate(m, *inputs)
    out, changed = SINGLE_PASSES[name]().run(m)
    assert changed == (out is not m)
    verify(out)
    assert_same(evaluate(out, *inputs), expected, f"{name}(random_module({seed}, {n}))")


#: a random (batched) product with each operand stored transposed or not
dot_cases = given(m=st.integers(1, 9), k=st.integers(0, 9), n=st.integers(1, 9), batch=st.integers(0, 3),
                  tl=st.booleans(), tr=st.booleans(),
                  dt=st.sampled_from([DType.FLOAT32, DType.FLOAT64, DType.INT32]), seed=st.integers(0, 2**16))


@settings(max_examples=30, deadline=None, derandomize=IN_CI)
@dot_cases
def test_transpose_folding_matches_within_dot_tolerance(m, k, n, batch, tl, tr, dt, seed):
    b = Builder("dot")
    shapes, nb = _dot_shapes(m, k, n, batch, tl, tr)
    lhs, rhs = (b.parameter((s, dt)) for s in shapes)
    perm = tuple(range(nb)) + (nb + 1, nb)
    lt = b.transpose(lhs, permutation=perm) if tl else lhs
    rt = b.transpose(rhs, permutation=perm) if tr else rhs
    mod = b.build(b.dot_general(lt, rt, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
                                lhs_contracting=(nb + 1,), rhs_contracting=(nb,)))
    out, changed = TransposeFolding().run(mod)
    assert changed == (tl or tr)
    assert Op.TRANSPOSE not in {x.op for x in out.entry.nodes}
    _assert_dot_close(out, mod, shapes, dt, k, seed, "transpose-fold")


@settings(max_examples=20, deadline=None, derandomize=IN_CI)
@dot_cases
def test_batch_broadcast_folding_matches_within_dot_tolerance(m, k, n, batch, tl, tr, dt, seed):
    """matmul([B, M, K], w) with w broadcast along B (and stored transposed or not): one
    product of B * M rows with w, the same values within the dot tolerance."""
    b = Builder("dot")
    wshape = (n, k) if tr else (k, n)
    x, w = b.parameter(((batch + 1, m, k), dt)), b.parameter((wshape, dt))
    wt = b.transpose(w, permutation=(1, 0)) if tr else w
    bw = b.broadcast_in_dim(wt, shape=(batch + 1, k, n), broadcast_dimensions=(1, 2))
    mod = b.build(b.dot_general(x, bw, lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,)))
    out, changed = TransposeFolding().run(mod)
    assert changed and [x.op for x in out.entry.nodes if x.op is not Op.PARAMETER] == [Op.DOT_GENERAL]
    _assert_dot_close(out, mod, [(batch + 1, m, k), wshape], dt, k, seed, "transpose-fold (batch broadcast)")


def _dot_shapes(m: int, k: int, n: int, batch: int, tl: bool, tr: bool) -> tuple[list[tuple[int, ...]], int]:
    """Operand shapes of a (batched) [m,k] x [k,n] product, each stored transposed or not."""
    bs = (batch,) if batch else ()
    return [bs + ((k, m) if tl else (m, k)), bs + ((n, k) if tr else (k, n))], len(bs)


def _assert_dot_close(out, mod, shapes, dt, k, seed, what):
    rng = np.random.default_rng(seed)
    args = [(rng.standard_normal(s) * 4).astype(dt.np) for s in shapes]
    rtol, atol = tolerance(dt, Op.DOT_GENERAL, max(k, 1))
    assert_close(evaluate(out, *args)[0], evaluate(mod, *args)[0], rtol, atol, what)


@settings(max_examples=30, deadline=None, derandomize=IN_CI)
@dot_cases
def test_layout_assignment_matches_within_dot_tolerance(m, k, n, batch, tl, tr, dt, seed):
    """transpose(dot(a, b)) -> dot(b, a) with swapped dims, for every operand layout."""
    b = Builder("dot")
    shapes, nb = _dot_shapes(m, k, n, batch, tl, tr)
    lhs, rhs = (b.parameter((s, dt)) for s in shapes)
    d = b.dot_general(lhs, rhs, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
                      lhs_contracting=(nb if tl else nb + 1,), rhs_contracting=(nb + 1 if tr else nb,))
    mod = b.build(b.transpose(d, permutation=tuple(range(nb)) + (nb + 1, nb)))
    out, changed = LayoutAssignment().run(mod)
    assert changed and Op.TRANSPOSE not in {x.op for x in out.entry.nodes}
    _assert_dot_close(out, mod, shapes, dt, k, seed, "layout")
