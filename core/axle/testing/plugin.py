"""pytest plugin of the conformance kit: ``pytest --axle-backend NAME``.

Registered through the ``pytest11`` entry point of the axle distribution (or load it with
``-p axle.testing.plugin``). Without ``--axle-backend`` it does nothing. With it, and no
test paths on the command line, pytest collects the kit (``axle/testing/suite.py``)
against ``NAME:0`` (or the device given, ``--axle-backend acme:1``), and the summary
separates checks the device claims from checks it does not claim (those ran through the
host fallback).

Each check runs in a worker process (axle.testing.runner) with a time limit
(``--axle-timeout``, default 120 s): a check that crashes or hangs its worker fails with
its id, module and kernel sources, and the run goes on. ``--axle-workers N`` runs N
workers at once; ``--axle-in-process`` runs the checks in pytest's own process (for a
debugger: no crash isolation).
"""
from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest

import axle

from .environment import SUITE
from .kit import kit_checks
from .runner import DEFAULT_TIMEOUT_S, KitRunner, run_here
from .session import kit_session

#: the run's KitRunner, in the pytest config's stash
RUNNER: pytest.StashKey[Any] = pytest.StashKey()
#: with --axle-in-process: the run's compile cache, open until the session ends
IN_PROCESS: pytest.StashKey[contextlib.ExitStack] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("axle", "axle backend conformance kit")
    group.addoption("--axle-backend", default=None, metavar="NAME",
                    help="run the axle conformance kit against backend NAME (device NAME:0, or NAME:INDEX)")
    group.addoption("--axle-quick", action="store_true", default=False,
                    help="a few cases per op instead of every dtype and shape")
    group.addoption("--axle-workers", type=int, default=1, metavar="N",
                    help="worker processes running checks at once (default 1)")
    group.addoption("--axle-timeout", type=float, default=None, metavar="SECONDS",
                    help="seconds one check may run before it is reported as a hang (default 120)")
    group.addoption("--axle-in-process", action="store_true", default=False,
                    help="run the checks in this process (no crash isolation; for a debugger)")


def pytest_configure(config: pytest.Config) -> None:
    target = config.getoption("--axle-backend", default=None)
    if not target:
        return
    device_for(target)  # an unknown or unavailable backend stops here, with the reason
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        config.args = [SUITE]  # `pytest --axle-backend NAME` alone runs the kit
    config.pluginmanager.register(_Report(target), "axle-conformance-report")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Hands every selected check to the worker processes at once (they run while pytest
    reports them one by one, so ``--axle-workers`` runs them in parallel)."""
    config = session.config
    target = config.getoption("--axle-backend", default=None)
    if not target or config.getoption("collectonly"):
        return
    if config.getoption("--axle-in-process"):
        config.stash[IN_PROCESS] = contextlib.ExitStack()
        config.stash[IN_PROCESS].enter_context(kit_session())  # the run's compile cache, as in a worker
        return

    checks = [item.callspec.params["axle_check"] for item in session.items
              if hasattr(item, "callspec") and "axle_check" in item.callspec.params]
    if checks:
        timeout = config.getoption("--axle-timeout") or DEFAULT_TIMEOUT_S
        config.stash[RUNNER] = KitRunner(device_for(target).name, checks, max(1, config.getoption("--axle-workers")),
                                         timeout)


def pytest_sessionfinish(session: pytest.Session) -> None:
    runner = session.config.stash.get(RUNNER, None)
    if runner is not None:
        runner.close()
    here = session.config.stash.get(IN_PROCESS, None)
    if here is not None:
        here.close()


def check_result(config: pytest.Config, check: Any, device: Any) -> Any:
    """The check's :class:`axle.testing.runner.CheckResult`: from the workers, or run in
    this process with ``--axle-in-process``."""
    runner = config.stash.get(RUNNER, None)
    return run_here(check, device) if runner is None else runner.result(check.id)


def device_for(target: str) -> Any:
    """The device a ``--axle-backend`` value names, or a usage error saying why not."""
    name = target if ":" in target else f"{target}:0"
    backend = name.split(":", 1)[0]
    st = axle.REGISTRY.statuses().get(backend)
    if st is None:
        found = ", ".join(axle.REGISTRY.statuses()) or "none"
        raise pytest.UsageError(f"--axle-backend {target}: no backend {backend!r} is installed "
                                f"(installed: {found}); did you `pip install -e` it?")
    if not st.available:
        raise pytest.UsageError(f"--axle-backend {target}: backend {backend!r} is unavailable: {st.reason}")
    return axle.device(name)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "axle_check" not in metafunc.fixturenames:
        return

    checks = kit_checks(quick=metafunc.config.getoption("--axle-quick"))
    metafunc.parametrize("axle_check", checks, ids=[c.id for c in checks])


@pytest.fixture(scope="session")
def axle_device(request: pytest.FixtureRequest) -> Any:
    target = request.config.getoption("--axle-backend")
    if not target:
        pytest.fail("the axle conformance suite needs --axle-backend NAME")
    return device_for(target)


class _Report:
    """Collects claimed / not-claimed outcomes and prints them after the run."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.outcomes: Counter = Counter()
        self.failed: dict[bool, list[str]] = {True: [], False: []}
        self.categories: dict[str, Counter] = {}
        #: checks whose worker crashed or hung, by kind
        self.lost: dict[str, list[str]] = {"crash": [], "hang": []}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if "axle_claimed" not in props or (report.when != "call" and report.passed):
            return
        claimed = bool(props["axle_claimed"])
        outcome = "passed" if report.passed else "failed"
        self.outcomes[(claimed, outcome)] += 1
        self.categories.setdefault(str(props["axle_category"]), Counter())[(claimed, outcome)] += 1
        if report.failed:
            nid = report.nodeid  # ".../suite.py::test_conformance[<check id>]"; ids hold brackets too
            self.failed[claimed].append(nid[nid.index("[") + 1:-1] if nid.endswith("]") else nid)
            if props.get("axle_outcome") in self.lost:
                self.lost[str(props["axle_outcome"])].append(self.failed[claimed][-1])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        o = self.outcomes
        tr.section(f"axle conformance: {self.target}")
        tr.write_line(f"claimed by the device:      {o[(True, 'passed')]} passed, {o[(True, 'failed')]} failed")
        tr.write_line(f"not claimed (host fallback): {o[(False, 'passed')]} passed, {o[(False, 'failed')]} failed")
        for cat, c in sorted(self.categories.items()):
            tr.write_line(f"  {cat:<28} claimed {c[(True, 'passed')]}/{c[(True, 'passed')] + c[(True, 'failed')]}"
                          f"   fallback {c[(False, 'passed')]}/{c[(False, 'passed')] + c[(False, 'failed')]}")
        for claimed, title in ((True, "CLAIMED BUT FAILING (backend bugs)"),
                               (False, "NOT CLAIMED, FALLBACK FAILING (report to axle)")):
            if self.failed[claimed]:
                tr.write_line(f"{title}: {len(self.failed[claimed])}")
                for nid in self.failed[claimed][:30]:
                    tr.write_line(f"  {nid}")
        for kind, title in (("crash", "CRASHED (the worker process died)"),
                            ("hang", "HUNG (killed at the time limit)")):
            if self.lost[kind]:
                tr.write_line(f"{title}: {len(self.lost[kind])}")
                for nid in self.lost[kind][:30]:
                    tr.write_line(f"  {nid}")
