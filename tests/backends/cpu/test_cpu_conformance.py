"""Core primitives against the interpreter on cpu:0 in the forms the conformance kit does
not compile itself: the kit (tests/conformance) runs every op case optimized and every
multi-op program both ways; here run the op cases whose unoptimized module (as eager mode
compiles it) gives other kernels than the kit's, and the cases inside one hand-built
fusion where that fusion gives other kernels than the optimizer's
(``axle.testing.kit.kit_compiles_same``: the same kernel plan is the same test)."""
from __future__ import annotations

import pytest

import axle
from axle.testing.cases import OpCase, check_case, core_cases, fused_cases
from axle.testing.kit import kit_compiles_same

from cpu_fusing import fuse_all

# (Without the cpu backend, outside CI, every case is collected and skipped by ``cpu``.)
CPU = next((d for d in axle.devices() if d.backend == "cpu"), None)
CORE = list(core_cases())
PROGRAMS = fused_cases()
PROGRAM_IDS = {c.id for c in PROGRAMS}
UNFUSED = [c for c in CORE if CPU is None or not kit_compiles_same(c, c.module, CPU)]


@pytest.mark.parametrize("case", UNFUSED, ids=[c.id for c in UNFUSED])
def test_unfused(case: OpCase, cpu) -> None:  # noqa: ANN001
    check_case(case, cpu, optimize=False)


FUSABLE = [(c, m) for c in CORE + PROGRAMS if (m := fuse_all(c.module)) is not None and
           (CPU is None or not kit_compiles_same(c, m, CPU, program=c.id in PROGRAM_IDS))]


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


def test_most_op_cases_are_left_to_the_kit(cpu) -> None:  # noqa: ANN001
    """The filter above leaves out forms the kit compiles (not everything): a single
    elementwise op unoptimized is the kit's one-op fusion, a folded constant is not."""
    names = {c.id for c in UNFUSED}
    assert "add-f32[7]" not in names and "constant-f32[3]" in names
    assert len(CORE) // 20 < len(UNFUSED) < len(CORE) // 5


def test_the_kit_runs_op_cases_optimized_and_programs_both_ways(monkeypatch) -> None:  # noqa: ANN001
    """The premise of kit_compiles_same, which the filters above rely on: should the kit
    stop running a form, the forms left out here would run nowhere."""
    import axle.testing.kit as kit

    seen: list[tuple[str, bool]] = []
    monkeypatch.setattr(kit, "check_case", lambda case, device, optimize=True: seen.append((case.id, optimize)))
    checks = kit.kit_checks(quick=True)
    op = next(c for c in checks if c.category == "op.add")
    program = next(c for c in checks if c.category == "fusion")
    op.run(axle.device("interpreter:0"))
    program.run(axle.device("interpreter:0"))
    assert seen == [(op.case.id, True), (program.case.id, True), (program.case.id, False)]
