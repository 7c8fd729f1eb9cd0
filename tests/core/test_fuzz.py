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


def test_wrong_nan_is_a_mismatch_but_an_unstable_reference_is_not():
    b = Builder("cos_of_exp")  # cos(exp(48)): one ulp of exp moves cos anywhere in [-1, 1]
    x = b.parameter("f32[2]")
    m = b.build(b.cos(b.exp(x)))
    xs = [np.array([48.0, 0.5], np.float32)]
    expected = evaluate(m, *xs)
    moved = [expected[0].copy()]
    moved[0][0] = -expected[0][0] + 0.5
    assert not _stable_mismatch(m, xs, moved, expected)
    garbage = [expected[0].copy()]
    garbage[0][1] = 7.0  # cos(exp(0.5)) is stable: a wrong value there is a finding
    assert _stable_mismatch(m, xs, garbage, expected)

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
