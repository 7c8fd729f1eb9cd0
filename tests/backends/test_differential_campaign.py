"""A fixed slice of `make fuzz` in CI: the first seeds of the differential campaign
(axle.testing.fuzz, the same code and comparison) on every installed backend, optimized
and not, with 0 mismatches, errors, crashes and hangs. The slice is sized to add about
three minutes to CI on a 2-core machine: 250 programs on 6 configs take about 100 s of
CPU (0.39 s per program for all six), so 50 s on two idle cores, about 3 minutes on a
loaded one (docs/reliability.md, "Running the campaigns")."""
from __future__ import annotations

import axle
from axle.testing.fuzz import FAILURES, default_configs, run_campaign

#: programs per config: seeds 0..SLICE-1 of `make fuzz`
SLICE = 200


def test_fixed_slice_of_the_differential_campaign() -> None:
    configs = default_configs()
    # every backend that loaded, optimized and not (an installed one that failed to load
    # fails tests/conformance in CI)
    assert {c.device for c in configs} == {f"{b}:0" for b in axle.REGISTRY.backends() if b != "interpreter"}
    assert len(configs) == 2 * len({c.device for c in configs}) > 0
    summary = run_campaign(SLICE, 0, configs, shrink_budget=100)
    assert summary.run == {c.name: SLICE for c in configs}, summary.table()
    failures = {k: summary.total(k) for k in FAILURES}
    assert not summary.findings and not any(failures.values()), (
        f"{failures}\n{summary.table()}\n\n" + "\n".join(f.report() for f in summary.findings))
