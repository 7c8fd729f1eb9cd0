"""The conformance kit (axle.testing) against every installed backend.

Claimed checks run under strict placement (they must run on the device); checks a backend
does not claim run through the host fallback and must still match the interpreter, and
their placement must show the fallback. The kit's checks run in worker processes, as
``python -m axle.testing`` runs them: a kernel that crashes or hangs fails its own check."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import axle
from axle.testing.kit import claimed, kit_checks, run_check
from axle.testing.prebuild import batches, prebuild_checks
from axle.testing import require_backend
from axle.testing.runner import CheckResult, KitRunner

BACKENDS = sorted(axle.REGISTRY.backends())
CHECKS = kit_checks()


@pytest.fixture(scope="module")
def kit_results(request: pytest.FixtureRequest) -> Iterator[Callable[[str, object], CheckResult]]:
    """A check's result on a backend. At the first check, every collected ``test_kit``
    check is handed to one worker per backend, all backends at once (they run side by
    side while pytest reports them in order)."""
    runners: dict[str, KitRunner] = {}

    def start() -> None:
        chosen: dict[str, list] = {}
        for item in request.session.items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if getattr(item, "function", None) is test_kit:
                chosen.setdefault(params["backend"], []).append(params["check"])
        runners.update((b, KitRunner(f"{b}:0", checks)) for b, checks in chosen.items())

    def result(backend: str, check: object) -> CheckResult:
        if not runners:
            start()
        return runners[backend].result(check.id)  # type: ignore[attr-defined]

    yield result
    for r in runners.values():
        r.close()


@pytest.mark.parametrize("check", CHECKS, ids=[c.id for c in CHECKS])
@pytest.mark.parametrize("backend", BACKENDS)
def test_kit(backend: str, check, kit_results) -> None:  # noqa: ANN001
    result = kit_results(backend, check)
    if not result.passed:
        pytest.fail(result.report, pytrace=False)


@pytest.mark.parametrize("name", sorted(axle.REGISTRY.statuses()))
def test_every_installed_backend_is_available(name: str) -> None:
    """An installed backend missing from the kit run must be visible: fails in CI, skips
    elsewhere (e.g. no OpenCL runtime on this machine), with the registry's reason."""
    require_backend(name)


def test_template_is_installed_and_partial():
    """CI installs every backends/*/pyproject.toml: the template must be here, and its
    default capability set must leave some checks to the host fallback."""
    dev = require_backend("template")
    flags = [claimed(c, dev) for c in CHECKS]
    assert any(flags) and not all(flags)


def test_unclaimed_checks_really_fall_back():
    from axle.compiler import compile_module
    from axle.partition import placement_of

    dev = require_backend("template")
    unclaimed = [c for c in CHECKS if c.module is not None and not claimed(c, dev)]
    assert len(unclaimed) > 100
    for c in unclaimed[::25]:
        summary = placement_of(compile_module(c.module, dev))
        assert summary is not None and summary.fallback, c.id


def test_template_claim_all_passes_every_check_on_the_device(monkeypatch):
    dev = require_backend("template")
    # The checks the template claims by default ran on it in test_kit, strictly and with the
    # same kernels: here, the ones it leaves to the host fallback by default.
    by_default = {c.id for c in CHECKS if claimed(c, dev)}
    monkeypatch.setitem(axle.config.backend_flags, "template_claim_all", "true")
    # every check, the loops and conditionals too (host loops over the template's own kernels),
    # but the collectives: the core's host communicator runs them between the replicas' kernels
    def collective(c) -> bool:  # noqa: ANN001
        return c.module is not None and any(n.traits.collective for n in c.module.entry.nodes)

    assert all(claimed(c, dev) for c in CHECKS if not collective(c))
    checks = [c for c in CHECKS if not collective(c) and c.id not in by_default]
    assert len(checks) > 1000, len(checks)  # dot, convolution, gather, scatter, sort, loops...
    assert not any(claimed(c, dev) for c in CHECKS if collective(c))
    failures = []
    by_id = {c.id: c for c in checks}
    for ids in batches(list(by_id)):  # as the kit's runner does: each batch's kernels built together first
        group = [by_id[i] for i in ids]
        prebuild_checks(group, dev)
        for c in group:
            try:
                run_check(c, dev)  # strict: nothing may fall back
            except Exception as e:  # noqa: BLE001 - collected and reported together
                failures.append(f"{c.id}: {e}")
    assert not failures, "\n".join(failures[:20])


def test_kit_covers_every_primitive_and_category():
    from axle.ir.ops import CORE_PRIMITIVES

    cats = {c.category for c in CHECKS}
    # the kit on the interpreter is the optimizer's check: every op case optimized against
    # the reference (tests/core no longer repeats it)
    assert "interpreter" in BACKENDS
    for op in CORE_PRIMITIVES:
        assert ("dot" if op.value == "dot" else f"op.{op.value}") in cats, op
    assert {"fusion", "multi-output", "dot", "transfer", "large", "empty", "caching", "errors", "kernels", "inputs",
            "threads", "late", "random"} <= cats


def test_kit_catches_a_wrong_kernel(monkeypatch):
    """A kit that passes a broken backend is worthless: break the template's add."""
    import axle_template.codegen as cg

    from axle.ir.ops import Op
    from axle.lowering import c as crender
    from axle.lru import LRU

    dev = require_backend("template")
    for table in (crender.FLOAT_BINARY, crender.INT_BINARY):
        monkeypatch.setitem(table, Op.ADD, table[Op.SUB])
    monkeypatch.setattr(cg, "_BINARIES", LRU())  # an empty cache: the broken add is compiled anew
    bad = [c for c in CHECKS if c.category == "op.add"]
    failed = 0
    for c in bad:
        try:
            run_check(c, dev)
        except AssertionError:
            failed += 1
    assert failed >= len(bad) // 2
