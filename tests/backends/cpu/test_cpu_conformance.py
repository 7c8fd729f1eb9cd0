"""Every core primitive (all dtypes, size-0/1 dims, odd sizes, NaN/inf) against the
interpreter on cpu:0: one kernel per op (unoptimized modules, as eager mode compiles
them) and the same programs inside one hand-built fusion."""
from __future__ import annotations

import pytest

from axle.testing.cases import OpCase, check_case, core_cases, fused_cases

from cpu_fusing import fuse_all

CASES = list(core_cases()) + fused_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_unfused(case: OpCase, cpu) -> None:  # noqa: ANN001
    check_case(case, cpu, optimize=False)


FUSABLE = [(c, m) for c in CASES if (m := fuse_all(c.module)) is not None]


@pytest.mark.parametrize("case,fused", FUSABLE, ids=[c.id for c, _ in FUSABLE])
def test_fused(case: OpCase, fused, cpu, monkeypatch) -> None:  # noqa: ANN001
    assert any(n.op.value == "fusion" for n in fused.entry.nodes)
    # check_case derives its tolerance (reduction length, transcendental op) from the
    # module's entry nodes; run the fused module but keep the original module's view.
    import axle.testing.cases as cases

    real_run = cases.run_case
    monkeypatch.setattr(cases, "run_case", lambda c, d, optimize=True: real_run(
        OpCase(c.id + "-fused", fused, c.inputs, c.ops), d, optimize=False))
    check_case(case, cpu, optimize=False)
