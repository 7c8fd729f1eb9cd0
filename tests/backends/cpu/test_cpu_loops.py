"""Loops and conditionals compiled natively on the cpu: the condition and body (or the
branches) flattened into the step table between control records that the native step
runner executes (axle_cpu/plan.py, runner.py), no Python per iteration, carries updated in
place, and loops the runner cannot run (a custom call or sort inside) left to the host."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax, profiler
from axle.ir.ops import Op
from axle.registry import REGISTRY
from axle.testing.cases import check_case, control_cases, device_claims, strict_placement

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "aot"))
import models  # noqa: E402  # the seeds' stacked LSTM (3 layers of 60) and its NumPy reference

WARM = 6  # calls after which every kernel's threading is measured and the schedule fixed


def _exe(f):  # noqa: ANN001, ANN202
    (entry,) = f._cache.values()
    return entry.executable


def _no_python_per_iteration(monkeypatch) -> None:  # noqa: ANN001
    """Makes any Python-side control step or interpreter call fail the test."""
    import axle.interpreter
    from axle_cpu import executable

    def fail(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a loop step ran in Python")

    monkeypatch.setattr(executable, "_control", fail)
    monkeypatch.setattr(axle.interpreter, "evaluate_computation", fail)


# ---------------------------------------------------------------- the kit's control cases


def test_kit_control_cases_are_claimed_and_run_natively(cpu) -> None:  # noqa: ANN001
    """Every kit loop and conditional (0, 1, many trips, nested, a conditional inside a
    loop, size-0 carries, out-of-range indices) is claimed, so it runs under strict
    placement: a host fallback would raise."""
    cases = control_cases()
    assert all(device_claims(c.module, cpu) for c in cases)
    with strict_placement():
        for case in cases:
            check_case(case, cpu)
            check_case(case, cpu, optimize=False)


# ----------------------------------------------------------------------- placement, no host


def test_loop_is_placed_on_cpu_and_runs_without_python_per_iteration(cpu, monkeypatch) -> None:  # noqa: ANN001
    def fn(x, n):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, n, lambda i, v: v * 0.5 + i.astype(anp.float32), x)

    x = np.arange(4, dtype=np.float32)
    f = axle.jit(fn, device=cpu)
    compiled = f.lower(x, np.int32(3)).compile()
    text = str(compiled.placement())
    assert "on cpu:0" in text and "while" in text and "fallback" not in text
    report = compiled.executable.report()
    assert report["host_steps"] == 0 and report["control_steps"] > 0
    for _ in range(WARM):
        f(x, np.int32(3))
    exe = _exe(f)
    assert exe._fast is not None, "a plan of kernels and control records is one native call"
    _no_python_per_iteration(monkeypatch)
    want = x.copy()
    for i in range(1000):
        want = want * np.float32(0.5) + np.float32(i)
    np.testing.assert_allclose(np.asarray(f(x, np.int32(1000))), want, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(f(x, np.int32(0))), x)  # 0 trips: the carry as given


def test_loop_running_a_sort_goes_to_the_host_and_the_summary_says_so(cpu) -> None:  # noqa: ANN001
    """The cpu sorts in a host step, which the native runner cannot call: the loop is
    refused (with the reason) and runs whole on the host, still correct."""
    def fn(x):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, 2, lambda i, v: anp.sort(v * -1.0), x)

    x = np.array([3.0, -1.0, 2.0], np.float32)
    f = axle.jit(fn, device=cpu)
    text = str(f.lower(x).compile().placement())
    assert "host fallback: while" in text and "on interpreter:0" in text
    np.testing.assert_array_equal(np.asarray(f(x)), np.sort(-np.sort(-x)))


def test_refusal_names_the_host_step(cpu) -> None:  # noqa: ANN001
    def fn(x):  # noqa: ANN001, ANN202
        return lax.cond(x[0] > 0, lambda v: anp.sort(v), lambda v: v, x)

    x = np.array([3.0, -1.0, 2.0], np.float32)
    module = axle.jit(fn, device=cpu).lower(x).optimize()
    (node,) = [n for n in module.entry.nodes if n.op is Op.CONDITIONAL]
    why = REGISTRY.backend_for(cpu).capabilities(cpu).refusal(node)
    assert why is not None and "sort" in why and "host step" in why


# ------------------------------------------------------------------------------ programs


def test_stacked_lstm_scan_matches_numpy(cpu, monkeypatch) -> None:  # noqa: ANN001
    args = models.lstm_inputs()
    f = axle.jit(models.lstm, device=cpu)
    want = models.lstm_numpy(*args)
    np.testing.assert_allclose(np.asarray(f(*args)), want, rtol=1e-5, atol=1e-6)
    assert "fallback" not in str(f.lower(*args).compile().placement())
    for _ in range(WARM):
        f(*args)
    _no_python_per_iteration(monkeypatch)
    np.testing.assert_allclose(np.asarray(f(*args)), want, rtol=1e-5, atol=1e-6)


def test_scan_writes_the_stacked_outputs_in_place(cpu) -> None:  # noqa: ANN001
    """scan's stacked ``ys`` is a carry the body updates with dynamic_update_slice: the
    update kernel writes into the carry's own buffer (its output slot is the carry's), and
    no copy inside the loop touches it, whatever the trip count."""
    from axle_cpu.plan import ControlStep, KernelStep

    def fn(xs):  # noqa: ANN001, ANN202
        return lax.scan(lambda h, x: (anp.tanh(h + x), h * x), anp.zeros(8, anp.float32), xs)

    xs = np.random.default_rng(1).standard_normal((50, 8)).astype(np.float32)
    compiled = axle.jit(fn, device=cpu).lower(xs).compile()
    plan = compiled.executable.plan
    (start, end), = plan.regions
    loop = plan.steps[start:end]
    (dus,) = [s for s in loop if isinstance(s, KernelStep) and s.spec.comp.root.op is Op.DYNAMIC_UPDATE_SLICE]
    stacked = dus.ins[0]
    assert dus.outs == [stacked], "the update is written over the carried buffer itself"
    inits = [s for s in plan.steps[start:end] if isinstance(s, ControlStep) and s.kind == "copy" and stacked in s.outs]
    assert [s.label.endswith("(init)") for s in inits] == [True], "copied once, before the loop, never per trip"
    h, ys = compiled(xs)
    hr, ysr = np.zeros(8, np.float32), []
    for x in xs:
        ysr.append(hr * x)
        hr = np.tanh(hr + x)
    np.testing.assert_allclose(np.asarray(h), hr, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ys), np.stack(ysr), rtol=1e-5, atol=1e-6)


def test_swapped_carry_values_are_staged(cpu) -> None:  # noqa: ANN001
    """A body returning its carry permuted: each new value is copied out before any copy
    overwrites it."""
    def fn(a, b, c, n):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, n, lambda i, v: (v[1], v[2], v[0] + 1.0), (a, b, c))

    a, b, c = (np.full(3, k, np.float32) for k in (1.0, 2.0, 3.0))
    f = axle.jit(fn, device=cpu)
    for n in (0, 1, 2, 3, 7):
        v = [a, b, c]
        for _ in range(n):
            v = [v[1], v[2], v[0] + np.float32(1)]
        for got, want in zip(f(a, b, c, np.int32(n)), v):
            np.testing.assert_array_equal(np.asarray(got), want)


def test_loops_inside_conditionals_and_conditionals_inside_loops(cpu, monkeypatch) -> None:  # noqa: ANN001
    def fn(x, k):  # noqa: ANN001, ANN202
        def twice_n(v):  # noqa: ANN001, ANN202
            return lax.fori_loop(0, k, lambda i, w: w * 2.0, v)

        def step(i, v):  # noqa: ANN001, ANN202
            return lax.switch(i % 3, [lambda w: w + 1.0, lambda w: -w, twice_n], v)

        return lax.cond(k > 2, lambda v: lax.fori_loop(0, k, step, v), twice_n, x)

    def numpy_fn(x, k):  # noqa: ANN001, ANN202
        if k <= 2:
            return x * np.float32(2.0 ** k)
        for i in range(k):
            x = [x + np.float32(1), -x, x * np.float32(2.0 ** k)][i % 3]
        return x

    x = np.array([0.5, -1.0, 2.0], np.float32)
    f = axle.jit(fn, device=cpu)
    assert "fallback" not in str(f.lower(x, np.int32(1)).compile().placement())
    for _ in range(WARM):
        f(x, np.int32(4))
    _no_python_per_iteration(monkeypatch)
    for k in (0, 1, 2, 3, 5, 8):
        np.testing.assert_allclose(np.asarray(f(x, np.int32(k))), numpy_fn(x, k), rtol=1e-6)


def test_size_zero_carry_and_zero_trips(cpu) -> None:  # noqa: ANN001
    def fn(e, x, n):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, n, lambda i, v: (v[0] * 2.0, v[1] + v[1]), (e, x))

    e, x = np.zeros((0, 3), np.float32), np.ones(2, np.float32)
    f = axle.jit(fn, device=cpu)
    for n in (0, 4):
        got_e, got_x = f(e, x, np.int32(n))
        assert np.asarray(got_e).shape == (0, 3)
        np.testing.assert_array_equal(np.asarray(got_x), x * np.float32(2 ** n))


# ------------------------------------------------------------- the steps walked in Python


def test_profiled_loop_records_each_kernel_and_matches(cpu, tmp_path) -> None:  # noqa: ANN001
    """Under the profiler the executable runs step by step (one timeline event per kernel
    launch): the control steps then run in Python, with the runner's semantics."""
    def fn(x, n):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, n, lambda i, v: lax.cond(i % 2 == 0, lambda w: w * 3.0, lambda w: w - 1.0, v), x)

    x = np.array([1.0, 2.0], np.float32)
    f = axle.jit(fn, device=cpu)
    want = np.asarray(f(x, np.int32(5)))
    with profiler.trace(str(tmp_path / "t.json")) as events:
        got = np.asarray(f(x, np.int32(5)))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, ((((x * 3 - 1) * 3) - 1) * 3).astype(np.float32))
    # the true branch's kernel (a multiply, fused or not), once per even trip
    assert sum(1 for e in events if "multiply" in e.get("name", "") and e.get("ph") == "X") == 3, \
        sorted({e.get("name") for e in events})


def test_loop_holding_a_host_step_is_walked_in_python(cpu, monkeypatch) -> None:  # noqa: ANN001
    """A loop whose body lowers to a host step (a shape the kernels leave to the host) is
    walked step by step, its jumps taken in Python: still correct."""
    from axle_cpu import plan as cpu_plan

    real = cpu_plan._Lowering._step

    def with_host_step(self, launch, ins, outs, blas):  # noqa: ANN001, ANN202
        if any(n.op is Op.TANH for n in launch.computation.nodes):  # the kernel with the tanh, fused or not
            return cpu_plan.HostStep(cpu_plan._interp_host(launch.computation), ins, outs,
                                     list(launch.output_types), f"{launch.label}(host)")
        return real(self, launch, ins, outs, blas)

    monkeypatch.setattr(cpu_plan._Lowering, "_step", with_host_step)

    def fn(x, n):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, n, lambda i, v: anp.tanh(v) + 1.0, x)

    x = np.array([0.25, -3.0], np.float32)
    f = axle.jit(fn, device=cpu)
    for _ in range(WARM):
        got = np.asarray(f(x, np.int32(4)))
    exe = _exe(f)
    assert exe._walked and exe._fast is None
    want = x
    for _ in range(4):
        want = np.tanh(want) + np.float32(1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---------------------------------------------------- carries passed, moved, repeated, constant

_X = np.array([1.0, -2.0, 3.0], np.float32)
ODD_CARRIES = {
    "identity body": (lambda x, n: lax.fori_loop(0, n, lambda i, v: v, x), (_X, np.int32(3))),
    "constant body": (lambda x, n: lax.fori_loop(0, n, lambda i, v: anp.ones(3, anp.float32), x), (_X, np.int32(2))),
    "pred carried": (lambda x: lax.while_loop(lambda c: c[0], lambda c: (c[1].sum() < 100.0, c[1] * 2.0),
                                              (x.sum() < 100.0, x)), (_X,)),
    "one operand twice": (lambda a: lax.fori_loop(0, 3, lambda i, v: (v[0] + 1.0, v[1]), (a, a)), (_X,)),
    "one value returned twice": (lambda a: lax.fori_loop(0, 3, lambda i, v: (v[0] * 2.0, v[0] * 2.0), (a, a)), (_X,)),
    "reversed scan": (lambda xs: lax.scan(lambda c, r: (c + r, c * r), anp.zeros(3, anp.float32), xs, reverse=True),
                      (np.arange(12, dtype=np.float32).reshape(4, 3),)),
    "branch returns its operand": (lambda a, p: lax.cond(p, lambda v: v, lambda v: v * 2.0, a), (_X, np.bool_(True))),
    "switch of tuples": (lambda a, k: lax.switch(k, [lambda v: (v, v + 1.0), lambda v: (v * 0.0, v)], a),
                         (_X, np.int32(1))),
    "loop in scan": (lambda xs: lax.scan(lambda c, r: (lax.fori_loop(0, 2, lambda i, w: w + r, c), c.sum()),
                                         anp.zeros(3, anp.float32), xs), (np.ones((5, 3), np.float32),)),
    "integer carries": (lambda n: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 3),
                                                 (np.int32(0), np.int64(1))), (np.int32(10),)),
}


@pytest.mark.parametrize("name", list(ODD_CARRIES))
def test_odd_carries_match_the_interpreter(name: str, cpu) -> None:  # noqa: ANN001
    """Carry values passed through, constant, repeated, moved, and loops in scans: equal to
    the interpreter, on the first call and on the fast path."""
    fn, args = ODD_CARRIES[name]
    want = axle.jit(fn, device=REGISTRY.device("interpreter:0"))(*args)
    f = axle.jit(fn, device=cpu)
    for _ in range(WARM + 1):
        got = f(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert _exe(f)._fast is not None
