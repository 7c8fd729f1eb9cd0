"""The optimizer's random well-typed programs (every primitive, 1-40 nodes), optimized
with the CPU backend's own fusion policy and run on cpu:0, match the interpreter, by the
comparison every random-program test and `make fuzz` share (assert_program_close)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axle.interpreter import evaluate
from axle.testing.random_modules import random_module
from axle.testing.cases import OpCase, assert_program_close, run_case


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40))
def test_random_programs_match_interpreter(seed: int, n: int, cpu) -> None:  # noqa: ANN001
    m, inputs = random_module(seed, n)
    expected = evaluate(m, *inputs)
    got = run_case(OpCase(f"random({seed},{n})", m, inputs), cpu, optimize=True)
    assert_program_close(m, got, expected, f"random_module({seed}, {n})")


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12))
def test_random_programs_with_loops_and_conditionals_match_interpreter(seed: int, n: int, cpu) -> None:  # noqa: ANN001
    """The same with loops and conditionals among the ops (run natively on cpu:0 unless a
    body holds what cpu runs only on the host, a sort), optimized and op by op. Their bodies
    are random programs (nested loops, scans, dots...): 12 steps at most keeps it cheap."""
    m, inputs = random_module(seed, n, control=True)
    expected = evaluate(m, *inputs)
    for optimize in (True, False):
        got = run_case(OpCase(f"random({seed},{n},control)", m, inputs), cpu, optimize=optimize)
        assert_program_close(m, got, expected, f"random_module({seed}, {n}, control=True)")
