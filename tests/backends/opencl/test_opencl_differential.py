"""The optimizer's random programs (axle.testing.random_modules: every primitive, 1-40
nodes) run optimized on opencl:0 and match the interpreter on the original module."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axle.interpreter import evaluate
from axle.testing.random_modules import random_module
from axle.testing.cases import OpCase, assert_program_close, check_case, fused_cases, run_case
from ocl_fusing import opencl_device


@pytest.fixture(scope="module")
def ocl():  # noqa: ANN201
    return opencl_device()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40))
def test_random_programs_optimized_on_opencl(seed: int, n: int, ocl) -> None:  # noqa: ANN001
    m, inputs = random_module(seed, n)
    expected = evaluate(m, *inputs)
    actual = run_case(OpCase(f"random({seed},{n})", m, inputs), ocl, optimize=True)
    assert_program_close(m, actual, expected, f"random_module({seed}, {n})")


FUSED = fused_cases()


@pytest.mark.parametrize("case", FUSED, ids=[c.id for c in FUSED])
def test_programs_through_the_optimizer(case: OpCase, ocl) -> None:  # noqa: ANN001
    check_case(case, ocl, optimize=True)
    if case.id.startswith(("seed", "gelu", "softmax")):  # one fusion -> one kernel
        from axle.compiler import compile_module

        assert compile_module(case.module, ocl).report()["kernels"] == 1
