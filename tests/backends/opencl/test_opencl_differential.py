"""The optimizer's random programs (axle.testing.random_modules: every primitive, 1-40
nodes) run optimized on opencl:0 and match the interpreter on the original module."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axle.interpreter import evaluate
from axle.testing.cases import OpCase, assert_program_close, fused_cases, run_case
from axle.testing.random_modules import random_module
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


# The kit runs these programs optimized against the interpreter (tests/conformance); here
# the ones the optimizer makes one fusion must compile to one OpenCL kernel.
ONE_FUSION = [c for c in fused_cases() if c.id.startswith(("seed", "gelu", "softmax"))]


@pytest.mark.parametrize("case", ONE_FUSION, ids=[c.id for c in ONE_FUSION])
def test_one_fusion_programs_are_one_kernel(case: OpCase, ocl) -> None:  # noqa: ANN001
    from axle.compiler import compile_module

    assert compile_module(case.module, ocl).report()["kernels"] == 1
