"""A fixed slice of `make fuzz` in CI: the first seeds of the differential campaign
(axle.testing.fuzz, the same code and comparison) on every installed backend, optimized
and not, with 0 mismatches, errors, crashes and hangs. The slice is sized to add about
three minutes to CI on a 2-core machine: 250 programs on 6 configs take about 100 s of
CPU (0.39 s per program for all six), so 50 s on two idle cores, about 3 minutes on a
loaded one (docs/reliability.md, "Running the campaigns"). It runs the plain programs of
those seeds (``--control 0``); a second, smaller slice runs control programs alone."""
from __future__ import annotations

import axle
from axle.ir.ops import Op
from axle.testing.fuzz import FAILURES, default_configs, program_for, run_campaign

#: programs per config: seeds 0..SLICE-1 of `make fuzz`
SLICE = 200


def test_fixed_slice_of_the_differential_campaign() -> None:
    configs = default_configs()
    # every backend that loaded, optimized and not (an installed one that failed to load
    # fails tests/conformance in CI)
    assert {c.device for c in configs} == {f"{b}:0" for b in axle.REGISTRY.backends() if b != "interpreter"}
    assert len(configs) == 2 * len({c.device for c in configs}) > 0
    # the plain programs (control=0): the control programs have their own slice below
    summary = run_campaign(SLICE, 0, configs, shrink_budget=100, control=0.0)
    assert summary.run == {c.name: SLICE for c in configs}, summary.table()
    failures = {k: summary.total(k) for k in FAILURES}
    assert not summary.findings and not any(failures.values()), (
        f"{failures}\n{summary.table()}\n\n" + "\n".join(f.report() for f in summary.findings))


#: the control slice: programs of at most CONTROL_NODES steps, seeds CONTROL_SEEDS, all with
#: loops and conditionals (control=1); 3 of the 6 keep a loop, 3 a conditional (267 nodes
#: in all their computations: a cheap run of 6 seeds)
CONTROL_SEEDS, CONTROL_NODES = range(1, 7), 12


def test_fixed_slice_of_control_programs() -> None:
    """Loops (data-dependent exits, nesting, scans, slices by the counter) and conditionals
    on every backend, optimized and not: a few seeds only, so that CI stays fast (the
    campaign runs a quarter of its programs with them, docs/reliability.md)."""
    held = [{n.op for n in program_for(s, CONTROL_NODES, 1.0).build()[0].entry.nodes} for s in CONTROL_SEEDS]
    assert sum(Op.WHILE in ops for ops in held) >= 3 and sum(Op.CONDITIONAL in ops for ops in held) >= 3, held
    configs = default_configs()
    summary = run_campaign(len(CONTROL_SEEDS), CONTROL_SEEDS.start, configs, max_nodes=CONTROL_NODES,
                           shrink_budget=100, control=1.0)
    assert summary.run == {c.name: len(CONTROL_SEEDS) for c in configs}, summary.table()
    failures = {k: summary.total(k) for k in FAILURES}
    assert not summary.findings and not any(failures.values()), (
        f"{failures}\n{summary.table()}\n\n" + "\n".join(f.report() for f in summary.findings))
