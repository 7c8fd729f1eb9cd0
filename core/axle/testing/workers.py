"""A pool of worker processes that survives crashing and hanging tasks.

Used by the conformance kit (one check per task) and by the fuzz campaign (one program on
one config per task). Workers are fresh interpreters started with ``python -c`` (never
forked: forking after OpenCL use is unsafe, and callers need no ``__main__`` guard) with
the parent's ``sys.path``, so plugins found there are found in the workers too. A worker
announces itself ready after its setup (imports, backend discovery), so start-up never
counts against a task's time limit.

A task is a module-level function and its arguments; its return value comes back to the
parent. While it runs, a task may send notes (:func:`note`): the parent keeps them, so
that what a task said before it crashed (the kernel sources it compiled) is not lost. A
task whose worker dies is answered by :class:`Lost` ("crash"), one that overruns its time
limit is killed and answered by :class:`Lost` ("hang"); both carry the notes and the
Python stacks ``faulthandler`` wrote, and the worker is replaced. With ``capture`` the
workers' stdout and stderr go to a file, and what a failed task printed (a toolchain's
error, a sanitizer's report) comes back with its answer instead of on the terminal.

With an ``affinity`` key, tasks with the same key go to the same worker while it has any
(another worker takes them only when its own are done): per-worker caches, such as the
kit's compiled executables, then serve the checks that share a module.

With ``max_tasks`` a worker is replaced by a fresh one after that many tasks: a long
campaign must not inherit what its workers' drivers never give back (PoCL keeps every
OpenCL program's kernel library mapped after the program is released, so a worker
compiling thousands of programs reaches the kernel's limit on mappings and dies).
"""
from __future__ import annotations

import faulthandler
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

from ..errors import BackendError

CRASH, HANG = "crash", "hang"
STARTUP_LIMIT_S = 300
#: how long a hung worker gets to write its stacks (faulthandler) before it is killed
_STACK_DUMP_S = 1.0
_READY = "ready"
#: the most of a worker's captured output a failure carries (its end)
OUTPUT_LIMIT = 20_000

#: A task: a module-level function and its arguments (both picklable).
Task = tuple[Callable[..., Any], tuple]


@dataclass(frozen=True)
class Lost:
    """The answer for a task whose worker died (``kind`` "crash") or overran its time
    limit and was killed ("hang")."""

    kind: str
    detail: str
    notes: tuple = ()
    #: the worker's Python stacks at the crash or hang (faulthandler), if it wrote any
    stacks: str = ""
    #: what the worker printed during the task (with ``capture``)
    output: str = ""


@dataclass(frozen=True)
class Raised:
    """The answer for a task that raised: its exception and traceback, as text."""

    error: str
    traceback: str
    notes: tuple = ()
    #: what the worker printed during the task (with ``capture``)
    output: str = ""


# ------------------------------------------------------------------------- in a worker

_outbox: Connection | None = None


def note(info: Any) -> None:
    """Sends ``info`` to the parent at once (in a worker; elsewhere it does nothing)."""
    if _outbox is not None:
        _outbox.send(("note", info))


def serve(read_fd: int, write_fd: int, setup: str, stacks_path: str) -> None:
    """A worker's loop: tasks in, ("note", x)* then ("done", result) or ("raised", Raised)
    out, over its own pipes (not stdio, which a backend may print to)."""
    global _outbox

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle, not a task's
    stacks = open(stacks_path, "w")  # noqa: SIM115 - open for the worker's whole life
    faulthandler.enable(stacks, all_threads=True)
    faulthandler.register(signal.SIGUSR1, stacks, all_threads=True)  # the parent asks before killing a hang
    inbox, _outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    if setup:
        mod, fn = setup.split(":")
        getattr(importlib.import_module(mod), fn)()
    _outbox.send(_READY)
    while True:
        try:
            fn, args = inbox.recv()
        except EOFError:
            return
        try:
            message = ("done", fn(*args))
        except Exception as e:  # noqa: BLE001 - reported, and the worker lives on
            message = ("raised", Raised(f"{type(e).__name__}: {e}", traceback.format_exc()))
        _outbox.send(message)


# ---------------------------------------------------------------------------- the pool


def exit_reason(code: int | None) -> str:
    """A worker's exit status in words ("killed by SIGSEGV", "exit code 3")."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


@dataclass
class _Slot:
    proc: subprocess.Popen
    inbox: Connection  # the worker's notes and results
    outbox: Connection  # its tasks
    stacks: str  # the file its faulthandler writes to
    output: str  # the file its stdout and stderr go to ("" without capture)
    index: int = 0  # its place in the pool: which affinity queue it prefers
    task: Task | None = None
    started: float = 0.0
    output_at: int = 0  # the output file's size when the task started
    notes: list = field(default_factory=list)
    done: int = 0  # tasks answered


_P = TypeVar("_P", bound="Pool")


class Pool:
    """Worker processes that run tasks, each within ``timeout`` seconds.

    ``setup`` ("module:function") runs in each worker before it takes tasks; ``env``
    entries are added to the workers' environment; ``capture`` sends the workers' output
    to files; ``max_tasks`` (0: no limit) replaces a worker after that many tasks (see the
    module docstring)."""

    def __init__(self, workers: int, timeout: float, *, setup: str = "", env: dict[str, str] | None = None,
                 capture: bool = False, max_tasks: int = 0) -> None:
        self.timeout = timeout
        self.max_tasks = max_tasks
        self.setup = setup
        self.env = {**os.environ, **(env or {})}
        self.capture = capture
        self.scratch = tempfile.TemporaryDirectory(prefix="axle-workers-")
        self._started = 0
        self._closing = False  # terminate(): answer nothing more, start no worker
        self.slots: list[_Slot] = []
        try:
            self.slots = [self._start(i) for i in range(max(1, workers))]
            for slot in self.slots:
                self._await_ready(slot)
        except BaseException:
            self.close()
            raise

    def _start(self, index: int) -> _Slot:
        to_worker, from_worker = os.pipe(), os.pipe()
        self._started += 1
        stacks = os.path.join(self.scratch.name, f"stacks-{self._started}.txt")
        output = os.path.join(self.scratch.name, f"output-{self._started}.txt") if self.capture else ""
        code = (f"import sys; sys.path[:] = {sys.path!r}; from axle.testing.workers import serve; "
                f"serve({to_worker[0]}, {from_worker[1]}, {self.setup!r}, {stacks!r})")
        with open(output or os.devnull, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(to_worker[0], from_worker[1]),
                                    env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=out if output else None, stderr=subprocess.STDOUT if output else None)
        os.close(to_worker[0])
        os.close(from_worker[1])
        return _Slot(proc, Connection(from_worker[0], writable=False), Connection(to_worker[1], readable=False),
                     stacks, output, index)

    @staticmethod
    def _await_ready(slot: _Slot) -> None:
        """Waits for a new worker's setup (imports, backend discovery: slow on a loaded machine)."""
        if slot.inbox.poll(STARTUP_LIMIT_S):
            try:
                if slot.inbox.recv() == _READY:
                    return
            except (EOFError, OSError):
                pass
        if slot.proc.poll() is None:
            slot.proc.kill()
        code = slot.proc.wait()
        said = "\n".join(filter(None, [_read(slot.output), _read(slot.stacks)]))
        raise BackendError(f"a worker process did not start within {STARTUP_LIMIT_S} s ({exit_reason(code)}"
                           + (f"):\n{said}" if said else "; its stderr says why)"))

    def _replace(self, slot: _Slot) -> None:
        if slot.proc.poll() is None:
            slot.proc.kill()
        slot.proc.wait()
        slot.inbox.close()
        slot.outbox.close()
        if self._closing:
            return
        fresh = self._start(slot.index)
        self.slots[self.slots.index(slot)] = fresh
        self._await_ready(fresh)

    def imap(self, tasks: Iterable[Task], affinity: Callable[[Task], Hashable] | None = None
             ) -> Iterator[tuple[Task, Any]]:
        """(task, answer) pairs in completion order; the answer is the task's return value,
        :class:`Raised` or :class:`Lost`. Tasks are dispatched in the order given (with
        ``affinity``: in that order within each worker's share, see the module docstring)."""
        take = self._affine(list(tasks), affinity) if affinity else self._in_order(iter(tasks))
        while not self._closing:
            for slot in self.slots:
                if slot.task is None:
                    task = take(slot)
                    if task is not None:
                        self._dispatch(slot, task)
            busy = [s for s in self.slots if s.task is not None]
            if not busy:
                return
            left = min(s.started + self.timeout for s in busy) - time.monotonic()
            ready = set(wait([s.inbox for s in busy], max(0.0, left)))
            for slot in busy:
                task = slot.task
                done, answer = self._collect(slot, ready)
                if done:
                    yield task, answer  # type: ignore[misc]  # a busy slot has a task

    @staticmethod
    def _in_order(todo: Iterator[Task]) -> Callable[[_Slot], Task | None]:
        return lambda _slot: next(todo, None)

    def _affine(self, tasks: list[Task], affinity: Callable[[Task], Hashable]) -> Callable[[_Slot], Task | None]:
        """Deals the tasks into one queue per worker by key (each key's tasks in one queue,
        keys spread in turn); a worker whose queue is empty takes from the end of the
        longest other queue."""
        queues: list[deque[Task]] = [deque() for _ in self.slots]
        keys = [affinity(task) for task in tasks]
        home = deal(keys, len(queues))
        for task, key in zip(tasks, keys):
            queues[home[key]].append(task)

        def take(slot: _Slot) -> Task | None:
            own = queues[slot.index]
            if own:
                return own.popleft()
            longest = max(queues, key=len)
            return longest.pop() if longest else None

        return take

    def _dispatch(self, slot: _Slot, task: Task) -> None:
        slot.task, slot.started, slot.notes = task, time.monotonic(), []
        slot.output_at = os.path.getsize(slot.output) if slot.output else 0
        try:
            slot.outbox.send(task)
        except OSError:  # the worker died since its last task (or was terminated): _collect says so
            pass

    def _collect(self, slot: _Slot, ready: set) -> tuple[bool, Any]:
        timed_out = slot.task is not None and time.monotonic() - slot.started > self.timeout
        # past its time, a slot's inbox is read before it is judged: ``ready`` dates from
        # before the other slots were collected (replacing a crashed worker takes seconds
        # under load), and the notes sent since (a check's kernel sources) belong in the report
        if slot.inbox in ready or timed_out:
            try:
                while slot.inbox.poll():
                    kind, value = slot.inbox.recv()
                    if kind == "note":
                        slot.notes.append(value)
                        continue
                    slot.task = None
                    if isinstance(value, Raised):
                        value = replace(value, notes=tuple(slot.notes), output=self._output_of(slot))
                    slot.done += 1
                    if self.max_tasks and slot.done >= self.max_tasks:
                        self._replace(slot)
                    return True, value
            except (EOFError, OSError):  # the worker died mid-task
                code = slot.proc.wait()
                lost = Lost(CRASH, f"worker died: {exit_reason(code)}", tuple(slot.notes), _read(slot.stacks),
                            self._output_of(slot))
                self._replace(slot)
                return True, lost
        if timed_out:
            stacks = self._stacks_of_hung(slot)
            lost = Lost(HANG, f"no result within {self.timeout:g} s", tuple(slot.notes), stacks, self._output_of(slot))
            self._replace(slot)
            return True, lost
        return False, None

    @staticmethod
    def _output_of(slot: _Slot) -> str:
        """What the worker printed since its task started (with ``capture``)."""
        return _read(slot.output, start=slot.output_at) if slot.output else ""

    @staticmethod
    def _stacks_of_hung(slot: _Slot) -> str:
        """Where a hung worker is stuck: faulthandler dumps its stacks on SIGUSR1 (unless
        the hang holds the signal off, e.g. inside a C call that never returns)."""
        try:
            slot.proc.send_signal(signal.SIGUSR1)
        except ProcessLookupError:
            return _read(slot.stacks)
        deadline = time.monotonic() + _STACK_DUMP_S
        while time.monotonic() < deadline and not _read(slot.stacks):
            time.sleep(0.05)
        return _read(slot.stacks)

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One task on the pool; its answer."""
        return next(self.imap([(fn, args)]))[1]

    def terminate(self) -> None:
        """Kills every worker now (callable from another thread than the one in
        :meth:`imap`, which then returns); :meth:`close` still cleans up."""
        self._closing = True
        for slot in list(self.slots):
            if slot.proc.poll() is None:
                slot.proc.kill()

    def close(self) -> None:
        for slot in self.slots:
            slot.outbox.close()  # EOF: the worker returns
        for slot in self.slots:
            try:
                slot.proc.wait(10)
            except subprocess.TimeoutExpired:
                slot.proc.kill()
                slot.proc.wait()
            slot.inbox.close()
        self.slots = []
        self.scratch.cleanup()

    def __enter__(self: _P) -> _P:  # a subclass's own type (typing.Self needs 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def deal(keys: Iterable[Hashable], queues: int) -> dict[Hashable, int]:
    """The queue each affinity key's tasks go to (Pool.imap): keys in turn, in the order
    they first appear."""
    home: dict[Hashable, int] = {}
    for key in keys:
        home.setdefault(key, len(home) % max(1, queues))
    return home


def _read(path: str, limit: int = OUTPUT_LIMIT, start: int = 0) -> str:
    """The end of a file from byte ``start`` ("" when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")[-limit:].strip()
    except OSError:
        return ""
