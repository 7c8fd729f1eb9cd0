"""The pass manager: passes, named pipelines, fixed points, verification and dumps.

A pass maps a module to a module (modules are immutable) and says whether it changed
anything. A :class:`Pipeline` is a flat, named list whose every entry carries the reason
it sits where it does; a :class:`FixedPoint` repeats a group until nothing changes.
Between passes the verifier runs when ``axle.config.check_passes`` is set (and always
under pytest), passes named in ``config.disable_passes`` are skipped, and passes whose
name matches ``config.dump_pass_re`` are dumped to ``config.dump_to``.
"""
from __future__ import annotations

import abc
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import profiler
from ..config import config
from ..ir.module import Module
from ..ir.verifier import verify
from .dump import dump_after, dump_before, wants_dump


class Pass(abc.ABC):
    """One module-to-module transformation.

    ``run`` returns the new module (or the same object) and whether anything changed;
    it must never mutate its input."""

    #: unique, stable name (used by dumps, ``--disable_passes`` and traces)
    name: str = "pass"

    @abc.abstractmethod
    def run(self, module: Module) -> tuple[Module, bool]:
        """Transforms ``module``; returns ``(new_module, changed)``."""

    def __repr__(self) -> str:
        return f"<pass {self.name}>"


class FunctionPass(Pass):
    """A pass from a pure function ``Module -> Module`` that returns its argument when it
    has nothing to do."""

    def __init__(self, name: str, fn: Callable[[Module], Module]) -> None:
        self.name = name
        self.fn = fn

    def run(self, module: Module) -> tuple[Module, bool]:
        out = self.fn(module)
        return out, out is not module


@dataclass(frozen=True)
class Entry:
    """One pipeline step and why it is placed there."""

    item: Pass
    why: str


def _entries(items: Sequence[Entry | tuple[Pass, str]]) -> list[Entry]:
    out = []
    for it in items:
        e = it if isinstance(it, Entry) else Entry(it[0], it[1])
        assert isinstance(e.item, Pass), f"pipeline entry {e.item!r} is not a Pass"
        assert e.why.strip(), f"pipeline entry {e.item.name} needs a why-comment"
        out.append(e)
    return out


def disabled_passes() -> set[str]:
    return {p.strip() for p in config.disable_passes.split(",") if p.strip()}


def checks_on() -> bool:
    """Verifier between passes: on when asked for, and always inside a pytest run."""
    return config.check_passes or "PYTEST_CURRENT_TEST" in os.environ


def run_pass(p: Pass, module: Module) -> tuple[Module, bool]:
    """Runs one pass with its trace span, dumps and verification."""
    dumping = wants_dump(p.name)
    if dumping:
        dump_before(module, p.name)
    with profiler.span(p.name, "pass", module=module.name):
        out, changed = p.run(module)
    if dumping:
        dump_after(out, p.name, changed)
    if changed and checks_on() and not isinstance(p, (Pipeline, FixedPoint)):
        try:
            verify(out)
        except Exception as e:  # name the guilty pass, keep the verifier's message
            raise type(e)(f"after pass {p.name}: {e}") from e
    return out, changed


class Pipeline(Pass):
    """A named, flat list of passes run in order."""

    def __init__(self, name: str, entries: Sequence[Entry | tuple[Pass, str]]) -> None:
        self.name = name
        self.entries = _entries(entries)

    def run(self, module: Module) -> tuple[Module, bool]:
        skip = disabled_passes()
        changed = False
        for e in self.entries:
            if e.item.name in skip:
                continue
            module, c = run_pass(e.item, module)
            changed |= c
        return module, changed

    def extended(self, more: Sequence[Entry | tuple[Pass, str]]) -> Pipeline:
        """A copy with more entries appended (e.g. a backend's passes)."""
        return Pipeline(self.name, list(self.entries) + _entries(more))

    def describe(self, indent: str = "", why: str = "", label: str = "") -> str:
        """The pipeline as readable text: one line per pass with its reason."""
        head = f"{indent}{self.name}{label}:"
        lines = [f"{head:<26} # {why}" if why else head]
        for e in self.entries:
            if isinstance(e.item, (Pipeline, FixedPoint)):
                lines.append(e.item.describe(indent + "  ", e.why))
            else:
                lines.append(f"{indent + '  ' + e.item.name:<26} # {e.why}")
        return "\n".join(lines)


class FixedPoint(Pass):
    """Repeats a group of passes until none changes the module (or a bound is hit)."""

    def __init__(self, name: str, entries: Sequence[Entry | tuple[Pass, str]], max_iterations: int = 16) -> None:
        self.name = name
        self.group = Pipeline(name, entries)
        self.max_iterations = max_iterations
        self.iterations = 0  # of the last run, for tests and reports

    @property
    def entries(self) -> list[Entry]:
        return self.group.entries

    def run(self, module: Module) -> tuple[Module, bool]:
        changed = False
        for i in range(self.max_iterations):
            module, c = self.group.run(module)
            self.iterations = i + 1
            if not c:
                break
            changed = True
        return module, changed

    def describe(self, indent: str = "", why: str = "") -> str:
        return self.group.describe(indent, why, label=" (fixed point)")
