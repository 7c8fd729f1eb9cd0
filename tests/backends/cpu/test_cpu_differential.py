"""The optimizer's random well-typed programs (every primitive, 1-40 nodes), optimized
with the CPU backend's own fusion policy and run on cpu:0, match the interpreter.

Floats are compared within a tolerance that allows for the ulp-level differences of
inlined transcendental approximations compounding through a chain of ops."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axle.compiler import compile_module
from axle.interpreter import evaluate
from axle.passes.random_modules import random_module
from axle.placement import to_buffer


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40))
def test_random_programs_match_interpreter(seed: int, n: int, cpu) -> None:  # noqa: ANN001
    m, inputs = random_module(seed, n)
    expected = evaluate(m, *inputs)
    exe = compile_module(m, cpu, optimize=True)
    got = [np.asarray(o.handle) for o in exe.execute([to_buffer(x, cpu) for x in inputs])]
    assert len(got) == len(expected)
    for i, (a, e) in enumerate(zip(got, expected)):
        assert a.dtype == e.dtype and a.shape == e.shape, f"result {i}: {a.dtype}{a.shape} vs {e.dtype}{e.shape}"
        if e.dtype.kind == "f":
            tol = {2: 2e-2, 4: 1e-4, 8: 1e-10}[e.dtype.itemsize]
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=tol, atol=tol,
                                       equal_nan=True, err_msg=f"random_module({seed}, {n}) result {i}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"random_module({seed}, {n}) result {i}")
