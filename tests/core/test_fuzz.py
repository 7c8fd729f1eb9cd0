"""The differential campaign's machinery (axle.testing.fuzz): the worker pool survives
crashes and hangs and counts them, the shrinker keeps a failure while it cuts the module,
repros print as IR text the parser reads back, the comparison tells a backend's wrong
answer from a program whose reference is unstable, and the generator makes the patterns
that found backend bugs. Runs on the interpreter only; the slice on every backend is
tests/backends/test_differential_campaign.py."""
from __future__ import annotations

import ctypes
import time

import numpy as np

from axle.interpreter import evaluate
from axle.ir import Builder, DType, Op, parse_module
from axle.testing.fuzz import (
    CRASH,
    HANG,
    OK,
    Config,
    Outcome,
    Pool,
    Program,
    _stable_mismatch,
    check_program,
    run_campaign,
    shrink,
)
from axle.testing.random_modules import random_module

INTERP = Config("interpreter:0", True)


def test_pool_counts_a_segfault_and_a_hang_and_keeps_going():
    with Pool(1, timeout=5) as pool:
        tasks = [(ctypes.string_at, (0,)), (time.sleep, (60,)), (check_program, (Program(3, 12), INTERP))]
        outcomes = [o for _, o in pool.imap(tasks)]
    assert [o.kind for o in outcomes] == [CRASH, HANG, OK], outcomes
    assert "SIGSEGV" in outcomes[0].detail


def test_campaign_summary_counts_every_config():
    summary = run_campaign(4, 10, [INTERP, Config("interpreter:0", False)], workers=1)
    assert summary.run == {"interpreter:0 optimized": 4, "interpreter:0 unoptimized": 4}
    assert not summary.findings and summary.total("mismatch") == 0
    assert "interpreter:0 unoptimized" in summary.table()


def _has_exp(m, xs) -> bool:  # noqa: ANN001
    return any(n.op is Op.EXP for n in m.entry.nodes)


def test_shrink_keeps_the_failure_and_the_values():
    # The smallest module keeping the failure is the path from an exp to the first result,
    # which depends on the seed (and the generator's stream changes whenever an op joins
    # the op table): shrink the first three candidates, each must keep its failure and be
    # cut to a fifth or less and to at most 7 nodes.
    seeds = [s for s in range(100) if _has_exp(*random_module(s, 30)) and len(random_module(s, 30)[0].entry.nodes) > 40]
    sizes = [_shrunk_size(seed) for seed in seeds[:3]]  # each cut to 7 nodes or fewer and a fifth
    assert len(sizes) == 3, sizes


def _shrunk_size(seed: int) -> int:
    m, xs = random_module(seed, 30)
    first = evaluate(m, *xs)[0]

    def still_fails(c, cxs):  # noqa: ANN001
        # a node replaced by a parameter holding its value leaves every result as it was
        out = evaluate(c, *cxs)
        return _has_exp(c, cxs) and any(o.tobytes() == first.tobytes() and o.dtype == first.dtype for o in out)

    small, small_xs = shrink(m, xs, still_fails)
    assert still_fails(small, small_xs)
    # the floor is the exp, its path to the root and their leaves: 4 to 7 nodes over the
    # first qualifying seeds, and the seed moves whenever an op joins the generator's stream
    assert len(small.entry.nodes) <= 7 and 5 * len(small.entry.nodes) < len(m.entry.nodes), (seed, small.as_text())
    # the repro's text reads back (to the values: a NaN constant's sign and payload print as nan)
    again = parse_module(small.as_text())
    for a, b in zip(evaluate(again, *small_xs), evaluate(small, *small_xs), strict=True):
        np.testing.assert_array_equal(a, b)
    return len(small.entry.nodes)


def _assert_unstable_at_48_only(m) -> None:  # noqa: ANN001
    """m (f32[2] -> f32[2], cos of exp) on [48, 0.5]: a moved result at 48 is unstable,
    a wrong one at 0.5 a finding."""
    xs = [np.array([48.0, 0.5], np.float32)]
    expected = evaluate(m, *xs)
    moved = [expected[0].copy()]
    moved[0][0] = -expected[0][0] + 0.5
    assert not _stable_mismatch(m, xs, moved, expected)
    garbage = [expected[0].copy()]
    garbage[0][1] = 7.0  # cos(exp(0.5)) is stable: a wrong value there is a finding
    assert _stable_mismatch(m, xs, garbage, expected)


def test_wrong_nan_is_a_mismatch_but_an_unstable_reference_is_not():
    b = Builder("cos_of_exp")  # cos(exp(48)): one ulp of exp moves cos anywhere in [-1, 1]
    x = b.parameter("f32[2]")
    _assert_unstable_at_48_only(b.build(b.cos(b.exp(x))))

    b = Builder("nan_in_exp")
    y = b.parameter("f32[3]")
    m2 = b.build(b.exp(b.sub(b.log(y), b.log(y))))
    ys = [np.array([-1.0, 2.0, 0.0], np.float32)]
    want = evaluate(m2, *ys)
    assert _stable_mismatch(m2, ys, [np.array([0.0, 1.0, np.nan], np.float32)], want)


def test_check_program_reports_a_backend_exception_as_an_error():
    out = check_program(Program(0, 5), Config("interpreter:7", True))
    assert isinstance(out, Outcome) and out.kind == "error" and "interpreter:7" in out.detail


def test_generator_makes_the_patterns_that_found_bugs():
    seen: set[str] = set()
    for seed in range(200):
        m, _ = random_module(seed, 20)
        for n in m.entry.nodes:
            ops = [o.op for o in n.operands]
            if n.op is Op.PAD and n.dtype is DType.FLOAT16 and any(n.attr["interior"]):
                seen.add("f16 interior pad")
            if n.op in (Op.DIV, Op.REM) and n.dtype is DType.INT64:
                seen.add("int64 div/rem")
            if n.op is Op.LOG and ops == [Op.NEG]:
                seen.add("log of a negative")
            if n.traits.transcendental and Op.DIV in ops or n.op is Op.EXP and Op.SUB in ops:
                seen.add("nan into a transcendental")
            if n.op is Op.REDUCE and n.operands[0].traits.elementwise and any(
                    o.traits.elementwise for o in n.operands[0].operands):
                seen.add("chain into a reduction")
    assert seen == {"f16 interior pad", "int64 div/rem", "log of a negative", "nan into a transcendental",
                    "chain into a reduction"}


def test_an_interrupted_campaign_reports_what_it_ran(monkeypatch):
    """Ctrl-C during a long `make fuzz` prints the counts so far instead of a traceback."""
    import axle.testing.fuzz as fuzz

    monkeypatch.setattr(fuzz, "PROGRESS_EVERY", 0.0)  # a log line after every run
    calls = []

    def log(line: str) -> None:
        calls.append(line)
        if len(calls) == 3:
            raise KeyboardInterrupt

    summary = fuzz.run_campaign(1000, 0, [INTERP], workers=1, log=log)
    assert summary.interrupted and 3 <= summary.run[INTERP.name] < 1000
    assert summary.table().endswith("(interrupted)")


# ------------------------------------------------------------- control programs (issue 16)


def _control_features(comp, inside: tuple[Op, ...] = ()) -> set[str]:  # noqa: ANN001
    """What a control program's computation (and those it calls) holds, by where it is."""
    seen: set[str] = set()
    in_loop = Op.WHILE in inside
    for n in comp.nodes:
        if n.op is Op.WHILE:
            body, cond = n.attr["body"], n.attr["condition"]
            seen |= {"loop in a loop"} if in_loop else set()
            seen |= {"loop in a branch"} if Op.CONDITIONAL in inside else set()
            seen |= {"data-dependent exit"} if cond.root.op is Op.AND else set()
            seen |= {"carries that swap"} if any(o.op is Op.PARAMETER and o.attr["index"] != k for k, o in
                                                 enumerate(body.root.operands)) else set()
            for o in n.operands[2:]:
                seen |= {"size-0 carry"} if 0 in o.shape else {"scalar carry"} if not o.shape else set()
                seen.add(f"{o.dtype.value} carry")
            seen |= _control_features(body, inside + (Op.WHILE,))
        elif n.op is Op.CONDITIONAL:
            seen |= {"conditional in a loop"} if in_loop else set()
            seen |= {"conditional by a pred"} if n.operands[0].dtype is DType.BOOL else set()
            for branch in n.attr["branches"]:
                seen |= _control_features(branch, inside + (Op.CONDITIONAL,))
        elif in_loop and n.op in (Op.DYNAMIC_SLICE, Op.DYNAMIC_UPDATE_SLICE):
            starts = n.operands[1 if n.op is Op.DYNAMIC_SLICE else 2:]
            if starts and starts[0].op is Op.PARAMETER:  # the loop's counter
                seen.add("slice by the counter" if n.op is Op.DYNAMIC_SLICE else "scan row update")
        elif inside and n.op in (Op.DOT_GENERAL, Op.REDUCE):
            seen.add(f"{n.op.value} in a body")
        elif inside and n.traits.elementwise and any(o.traits.elementwise for o in n.operands):
            seen.add("fusible chain in a body")
    return seen


def test_control_programs_hold_the_loops_the_fuzzer_needs():
    """random_module(..., control=True): loops with data-dependent exits, nested loops and
    conditionals, carries of several dtypes and shapes, bodies holding chains, reductions,
    dots, slices by the counter and scans; the same program for the same seed."""
    seen: set[str] = set()
    for seed in range(60):
        m, xs = random_module(seed, 10, control=True)
        again, xs2 = random_module(seed, 10, control=True)
        assert again.as_text() == m.as_text() and all(a.tobytes() == b.tobytes() for a, b in zip(xs, xs2))
        seen |= _control_features(m.entry)
    want = {"loop in a loop", "loop in a branch", "conditional in a loop", "conditional by a pred",
            "data-dependent exit", "size-0 carry", "scalar carry", "slice by the counter", "scan row update",
            "dot in a body", "reduce in a body", "fusible chain in a body", "carries that swap"}
    assert want <= seen, want - seen
    assert len({s for s in seen if s.endswith(" carry")} - {"size-0 carry", "scalar carry"}) >= 5, seen


def test_program_for_mixes_control_programs_at_a_fixed_share():
    """The campaign's programs: a quarter of the seeds (by default) are control programs;
    a seed's size never depends on the share, and the other seeds keep their programs."""
    from axle.testing.fuzz import CONTROL_SHARE, program_for

    default = [program_for(s) for s in range(400)]
    share = sum(p.control for p in default) / len(default)
    assert CONTROL_SHARE == 0.25 and 0.18 < share < 0.32, share
    assert not any(program_for(s, control=0.0).control for s in range(400))
    assert all(program_for(s, control=1.0).control for s in range(400))
    assert [program_for(s, control=1.0).n_nodes for s in range(400)] == [p.n_nodes for p in default]
    p = next(p for p in default if p.control)
    assert p.build()[0].as_text() == random_module(p.seed, p.n_nodes, control=True)[0].as_text()
    assert p.name == f"random_module({p.seed}, {p.n_nodes}, control=True)"


def test_an_unstable_reference_inside_a_loop_body_is_not_a_mismatch():
    """The reference is perturbed inside loop bodies too: cos(exp(x)) on each trip of a loop
    (exp(48): one ulp moves cos anywhere) is unstable, a wrong value where the body is stable
    is a finding; the program's tolerance sees the transcendental in the body."""
    from axle.testing.cases import program_tolerance, tolerance

    b = Builder("loop")
    x = b.parameter("f32[2]")
    i32 = "s32[]"
    body = Builder("body")
    i, v = body.parameter(i32), body.parameter("f32[2]")
    body_c = body.computation(body.add(i, body.constant(np.int32(1))), body.cos(body.exp(v)))
    cond = Builder("cond")
    ci, _ = cond.parameter(i32), cond.parameter("f32[2]")
    loop = b.op(Op.WHILE, b.constant(np.int32(0)), x, body=body_c,
                condition=cond.computation(cond.compare(ci, cond.constant(np.int32(1)), direction="lt")))
    m = b.build(b.get_tuple_element(loop, index=1))
    _assert_unstable_at_48_only(m)
    assert program_tolerance(m, np.dtype(np.float32)) == tuple(8 * t for t in tolerance(DType.FLOAT32, Op.EXP))


def test_campaign_runs_control_programs():
    summary = run_campaign(3, 7, [INTERP], workers=1, control=1.0)
    assert summary.run == {"interpreter:0 optimized": 3} and not summary.findings
