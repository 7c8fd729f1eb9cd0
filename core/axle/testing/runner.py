"""Running the kit's checks in worker processes, and what a failing check prints.

The kit is for bringing a device up, where crashes and hangs are the common failures: each
check runs in a worker process (axle.testing.workers) within a time limit, so a kernel
that segfaults or never returns fails its own check, with its id, and the run goes on.
Workers keep a compile cache for the whole run (axle.testing.session); checks that share
a module go to the same worker, so its executable is compiled once per worker.

Every failure, whether the check raised, crashed its worker or hung, is reported by
:func:`failure_report`: the check's id and device, what went wrong, the inputs (their
values when small, else their types and how to rebuild them), the module text and the
``kernel_sources()`` of every executable the check compiled (sent to the parent right
after each compile, so they survive a crash in the kernel).
"""
from __future__ import annotations

import contextlib
import threading
import traceback
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import devices
from ..backend import Device
from ..ir.dtypes import is_float_numpy
from ..registry import REGISTRY
from . import workers
from .check import Check, run_check
from .kit import check_named
from .prebuild import batches, prebuild_checks
from .session import kit_session, recording

#: seconds one check may run in a worker before it is reported as a hang
DEFAULT_TIMEOUT_S = 120.0
#: kinds of check outcomes (CRASH and HANG are the workers' names)
PASSED, FAILED, CRASH, HANG = "passed", "failed", workers.CRASH, workers.HANG
#: inputs with at most this many elements are printed in full
PRINTED_ELEMENTS = 64
#: lines of one kernel's source a report prints (the rest: kernel_sources() in a repro)
SOURCE_LINES = 400


# ------------------------------------------------------------------------- in a worker

_session = contextlib.ExitStack()


def setup_worker() -> None:
    """A kit worker's setup: every backend loaded (start-up is not a check's time) and
    the run-wide compile cache on for the worker's life."""
    warnings.simplefilter("ignore")  # placement warnings of unclaimed checks: the summary says it
    devices()
    _session.enter_context(kit_session())


def run_in_worker(check_id: str, device_name: str) -> None:
    """Runs the kit's check ``check_id`` on a device (in a worker); raises when it fails."""
    run_check(check_named(check_id), REGISTRY.device(device_name))


def prebuild_in_worker(check_ids: tuple[str, ...], device_name: str) -> None:
    """Builds ahead, in one batch, what the worker's next checks compile (axle.testing.prebuild).
    Its own task: should the batch crash or hang the worker, no check is blamed (each then
    builds its own kernels, and the one at fault fails)."""
    prebuild_checks([check_named(i) for i in check_ids], REGISTRY.device(device_name))


# ---------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome; ``report`` is :func:`failure_report`'s text ("" when it passed)."""

    check_id: str
    kind: str
    report: str = ""

    @property
    def passed(self) -> bool:
        return self.kind == PASSED


def _inputs_text(check: Check) -> str:
    if check.case is None:
        return "  (no inputs: the check makes its own)"
    lines = []
    with np.printoptions(threshold=PRINTED_ELEMENTS, floatmode="unique", linewidth=100):
        for i, x in enumerate(check.case.inputs):
            x = np.asarray(x)
            head = f"  %{i}: {x.dtype}{list(x.shape)}"
            if x.size <= PRINTED_ELEMENTS:
                lines.append(f"{head} = {np.array2string(x, separator=', ')}")
            else:
                floating = is_float_numpy(x.dtype)
                finite = x[np.isfinite(x)] if floating else x
                numeric = floating or x.dtype.kind in "iu"
                span = f", {finite.min()!r} .. {finite.max()!r}" if finite.size and numeric else ""
                lines.append(f"{head}{span} ({x.size} elements, not printed)")
    lines.append(f"  repeat with: axle.testing.kit.check_named({check.id!r}).case (module and inputs)")
    return "\n".join(lines) if check.case.inputs else "  (none)"


def _sources_text(notes: Iterable[object]) -> str:
    """The kernel sources the check's executables reported, each executable once."""
    seen: set[tuple] = set()
    parts = []
    for note in notes:
        if not (isinstance(note, tuple) and len(note) == 2 and isinstance(note[1], dict)):
            continue
        label, sources = note
        key = (label, tuple(sorted(sources.items())))
        if key in seen:
            continue
        seen.add(key)
        body = [f"=== {name} ===\n{_clip(src)}" for name, src in sources.items()]
        parts.append(f"--- kernel_sources() of {label} ---\n" + ("\n".join(body) if body else "(none reported)"))
    return "\n".join(parts) or "--- kernel_sources() ---\n(none: no executable was compiled before the failure)"


def _clip(source: str) -> str:
    lines = source.rstrip().splitlines()
    if len(lines) <= SOURCE_LINES:
        return "\n".join(lines)
    return "\n".join(lines[:SOURCE_LINES] + [f"... ({len(lines) - SOURCE_LINES} more lines)"])


def failure_report(check: Check, device_name: str, kind: str, error: str, trace: str = "",
                   notes: Sequence[object] = (), stacks: str = "", output: str = "") -> str:
    """What a failing check prints: see the module docstring."""
    what = {CRASH: "CRASHED", HANG: "HUNG", FAILED: "FAILED"}.get(kind, kind.upper())
    parts = [f"check {check.id} on {device_name} {what}: {error.strip()}"]
    if trace.strip() and not error.startswith("AssertionError"):
        parts.append(f"--- traceback ---\n{trace.strip()}")
    parts.append(f"--- inputs ---\n{_inputs_text(check)}")
    if check.module is not None:
        parts.append(f"--- module ---\n{check.module.as_text().rstrip()}")
    parts.append(_sources_text(notes))
    if stacks:
        parts.append(f"--- Python stacks of the worker (faulthandler) ---\n{stacks}")
    if output:
        parts.append(f"--- what the worker printed ---\n{output}")
    return "\n".join(parts)


def run_here(check: Check, device: Device) -> CheckResult:
    """Runs a check in this process (no crash isolation: for debuggers), reporting a
    failure as the workers do."""
    with recording() as record:
        try:
            run_check(check, device)
        except Exception as e:  # noqa: BLE001 - reported with the check's id, module and sources
            return CheckResult(check.id, FAILED, failure_report(
                check, getattr(device, "name", str(device)), FAILED, f"{type(e).__name__}: {e}",
                traceback.format_exc(), list(record)))
    return CheckResult(check.id, PASSED)


# ---------------------------------------------------------------------------- the run


class KitRunner:
    """Runs checks on a device in ``workers`` worker processes, all dispatched at once in
    the order given (with affinity by module); :meth:`result` waits for one check's."""

    def __init__(self, device_name: str, checks: Sequence[Check], workers_: int = 1,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.device_name = device_name
        self.checks = {c.id: c for c in checks}
        self.results: dict[str, CheckResult] = {}
        self.error: BaseException | None = None
        self._done = threading.Condition()
        self._pool: workers.Pool | None = None
        self._stop = False
        self._workers = max(1, workers_)
        self._keys: dict[str, object] = {}
        self._thread = threading.Thread(target=self._drive, args=(workers_, timeout), daemon=True,
                                        name="axle-kit-runner")
        self._thread.start()

    def _drive(self, n: int, timeout: float) -> None:
        try:
            self._pool = workers.Pool(n, timeout, setup="axle.testing.runner:setup_worker", capture=True)
            if self._stop:
                return
            for (fn, (cid, _)), answer in self._pool.imap(self._tasks(), affinity=self._affinity):
                if fn is run_in_worker:  # (a prebuild's outcome is no check's: see prebuild_in_worker)
                    self._record(CheckResult(cid, *self._outcome(self.checks[cid], answer)))
                if self._stop:
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the waiting test
            with self._done:
                self.error = e
                self._done.notify_all()
        finally:
            if self._pool is not None:
                self._pool.close()
            with self._done:
                self._stop = True
                self._done.notify_all()

    def _tasks(self) -> list[workers.Task]:
        """The checks as tasks, those sharing a module one after the other (so that the
        worker's small compile cache still holds its executables: kernels/X and inputs/X
        run right after fusion/X, not a thousand checks later); before each batch of a
        worker's share (axle.testing.prebuild.batches), a task that builds the batch's
        kernels together (prebuild_in_worker)."""
        groups: dict[object, list[str]] = {}
        for cid, check in self.checks.items():
            groups.setdefault(self._key(check), []).append(cid)
        shares: dict[int, list[str]] = {}
        for key, queue in workers.deal(groups, self._workers).items():
            shares.setdefault(queue, []).extend(groups[key])
        ahead = {batch[0]: tuple(batch) for ids in shares.values() for batch in batches(ids)}
        tasks: list[workers.Task] = []
        for ids in groups.values():
            for cid in ids:
                if cid in ahead:
                    tasks.append((prebuild_in_worker, (ahead[cid], self.device_name)))
                tasks.append((run_in_worker, (cid, self.device_name)))
        return tasks

    def _affinity(self, task: workers.Task) -> object:
        first = task[1][0]  # a check's id, or the ids a prebuild task builds ahead for
        return self._key(self.checks[first if isinstance(first, str) else first[0]])

    def _key(self, check: Check) -> object:
        key = self._keys.get(check.id)
        if key is None:
            key = self._keys[check.id] = check.module.as_text() if check.module is not None else check.id
        return key

    def _outcome(self, check: Check, answer: object) -> tuple[str, str]:
        if isinstance(answer, workers.Lost):
            return answer.kind, failure_report(check, self.device_name, answer.kind, answer.detail, "",
                                               answer.notes, answer.stacks, answer.output)
        if isinstance(answer, workers.Raised):
            return FAILED, failure_report(check, self.device_name, FAILED, answer.error, answer.traceback,
                                          answer.notes, "", answer.output)
        return PASSED, ""

    def _record(self, result: CheckResult) -> None:
        with self._done:
            self.results[result.check_id] = result
            self._done.notify_all()

    def result(self, check_id: str) -> CheckResult:
        """The check's outcome, once its worker answered."""
        with self._done:
            while check_id not in self.results:
                if self.error is not None:
                    raise self.error
                if self._stop:
                    raise RuntimeError(f"the kit run stopped before check {check_id} ran")
                self._done.wait()
            return self.results[check_id]

    def close(self) -> None:
        """Stops the run: waits for no check still running (their workers are killed)."""
        with self._done:
            self._stop = True
        if self._pool is not None:
            self._pool.terminate()
        self._thread.join()
