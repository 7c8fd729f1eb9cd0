"""Every ```python block of README.md and docs/*.md runs as written.

Each doc's blocks run in order in one fresh namespace, so a later block may use the names an
earlier block of the same doc made (the set-up lines live in the doc itself). A block that is
not meant to run (a fragment of a plugin, pseudo-code) says so right before its fence:

    <!-- not run: <reason> -->

and the reason is required. Output listings are ```text, not ```python; one marked

    <!-- output of the block above -->

is compared with what the nearest python block above it printed. docs/ops/ is generated
(tests/sdk/test_explain_op.py checks it) and the blocks of the writing-a-backend walk-through
(between ``<!-- walkthrough:start -->`` and ``<!-- walkthrough:end -->``) are run, with their
scaffolded plugin, by tests/sdk/test_walkthrough.py: both are left out here.

Each doc runs in its own subprocess, in a temporary folder: the blocks change process-wide
state (``axle.config.update(jit_level="auto")``, the default-device stack, loaded plugins),
write files (a trace, graphs, an AOT object) and import what they use; a fresh interpreter
per doc keeps one doc's state out of the next one's and out of this pytest process, and
proves each doc's imports are complete. Blocks are compiled with the doc as their file name
and their doc line numbers, so a traceback (and axle's own source-line errors) point at the
doc line that failed. Every backend of this machine loads (CI has them all) and each doc runs
with cpu:0, then, in the full sweep, opencl:0 and template:0 as the default device: "the
default device" in a doc means each of them in turn.

Names in prose go stale too: every `axle.x.y` (or `axle_cpu.x`...) a doc writes in
backticks must resolve to a module or an attribute."""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from axle.testing import require_backend

ROOT = Path(__file__).resolve().parents[2]
#: README.md and docs/*.md; not docs/ops/, which `axle explain-op --write-docs` generates
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:(.*?)-->")
OUTPUT = "<!-- output of the block above -->"
WALKTHROUGH = re.compile(r"<!-- walkthrough:start -->.*?<!-- walkthrough:end -->", re.S)
#: labels that would hide Python from this test (and from most renderers' highlighting)
OTHER_PYTHON_LABELS = ("py", "python3", "pycon", "ipython")
#: the backends the blocks run with (the first one named in AXLE_BACKENDS gives the default device)
BACKENDS = ("cpu", "opencl", "template", "interpreter")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # the doc line of the block's first code line
    lang: str
    body: str
    not_run: str | None  # the reason given by a `<!-- not run: ... -->` marker, if any
    in_walkthrough: bool
    shows_output: bool  # marked as the output of the block above


def doc_blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    walkthrough = [m.span() for m in WALKTHROUGH.finditer(text)]
    out = []
    for m in FENCE.finditer(text):
        before = text[:max(m.start() - 1, 0)].rsplit("\n", 1)[-1]  # the line right before the fence
        marker = NOT_RUN.fullmatch(before.strip())
        out.append(Block(doc, text.count("\n", 0, m.start(2)) + 1, m.group(1), m.group(2),
                         marker.group(1).strip() if marker else None,
                         any(a <= m.start() < b for a, b in walkthrough), before.strip() == OUTPUT))
    return out


def runs(block: Block) -> bool:
    return block.lang == "python" and block.not_run is None and not block.in_walkthrough


def blocks_to_run(doc: Path) -> list[Block]:
    return [b for b in doc_blocks(doc) if runs(b)]


def shown_outputs(doc: Path) -> list[tuple[Block, int | None]]:
    """Each output listing with the index (in blocks_to_run) of the block whose output it shows."""
    out, last = [], None
    for b in doc_blocks(doc):
        if runs(b):
            last = 0 if last is None else last + 1
        elif b.shows_output:
            out.append((b, last))
    return out


#: run in the subprocess: exec each block in one namespace, with its doc line numbers; what
#: each block prints is also kept, in the file named by argv[1]
DRIVER = r"""
import contextlib, io, json, sys
ns, printed = {"__name__": "__main__"}, []
for path, line, body in json.load(sys.stdin):
    print(f"--- block at {path}:{line}", flush=True)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile("\n" * (line - 1) + body, path, "exec"), ns)
    finally:
        sys.stdout.write(buf.getvalue())
    printed.append(buf.getvalue())
    with open(sys.argv[1], "w") as f:
        json.dump(printed, f)
"""


def run_doc(doc: Path, cwd: Path, default: str) -> subprocess.CompletedProcess[str]:
    """Runs the doc's blocks with every backend loaded and ``default``'s first device the
    default device (AXLE_BACKENDS names it first)."""
    blocks = [(str(b.doc), b.line, b.body) for b in blocks_to_run(doc)]
    env = {k: v for k, v in os.environ.items() if k != "AXLE_FLAGS"}
    env["AXLE_BACKENDS"] = ",".join(dict.fromkeys([default, *BACKENDS]))
    # faulthandler: a crash in native code (a driver, LLVM) prints where it happened
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", DRIVER, PRINTED], input=json.dumps(blocks),
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


RUNNABLE_DOCS = [d for d in DOCS if blocks_to_run(d)]
PRINTED = "printed.json"  # in the doc's temporary folder
#: the fast tier runs each doc on cpu:0; the full sweep on the other devices as well
DEFAULTS = ["cpu", *(pytest.param(name, marks=pytest.mark.full_only) for name in ("opencl", "template"))]


@pytest.mark.parametrize("default", DEFAULTS)
@pytest.mark.parametrize("doc", RUNNABLE_DOCS, ids=[d.name for d in RUNNABLE_DOCS])
def test_doc_blocks_run(doc: Path, default: str, tmp_path: Path) -> None:
    for name in BACKENDS:
        require_backend(name)
    r = run_doc(doc, tmp_path, default)
    assert r.returncode == 0, f"{doc.name} on {default}: a block failed\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    printed = json.loads((tmp_path / PRINTED).read_text())
    for listing, index in shown_outputs(doc):
        assert index is not None and trimmed(printed[index]) == trimmed(listing.body), \
            f"{doc.name}:{listing.line}: the listing is not what the block above prints"


def trimmed(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def marker_problems(doc: Path) -> list[str]:
    """A `not run` marker must give its reason and stand right before a ```python fence;
    no block may hide Python under another label."""
    text = doc.read_text()
    blocks = doc_blocks(doc)
    first_code_line = {b.line: b for b in blocks}
    problems = []
    for m in NOT_RUN.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        block = first_code_line.get(line + 2)  # the marker's line, the fence's line, the first code line
        if not m.group(1).strip():
            problems.append(f"{doc.name}:{line}: `not run` without a reason")
        if block is None or block.lang != "python":
            problems.append(f"{doc.name}:{line}: `not run` marker not right before a ```python fence")
    problems += [f"{doc.name}:{b.line - 1}: an output listing shows no python block's output"
                 for b, index in shown_outputs(doc) if index is None or b.lang != "text"]
    return problems + [f"{doc.name}:{b.line - 1}: label the block ```python (or ```text for output)"
                       for b in blocks if b.lang in OTHER_PYTHON_LABELS]


def test_markers_are_well_formed() -> None:
    problems = [p for doc in DOCS for p in marker_problems(doc)]
    assert not problems, problems


def test_marker_convention(tmp_path: Path) -> None:
    """The parser on a small doc: a marked block is not run, an unmarked one is, an output
    listing belongs to the run block above it, and a marker without a reason, a stray marker,
    an output listing with no block above it or a ```py label is reported."""
    doc = tmp_path / "d.md"
    doc.write_text(f"{OUTPUT}\n```text\nearly\n```\n"
                   "<!-- not run: a fragment of a plugin -->\n```python\nclass B(Backend): ...\n```\n"
                   f"```python\nprint(1)\n```\n{OUTPUT}\n```text\n1\n```\n"
                   "<!-- not run: -->\n```python\ny\n```\n"
                   "<!-- not run: stray -->\n\n```python\nz\n```\n```py\nw\n```\n")
    blocks = doc_blocks(doc)
    assert [(b.line, b.not_run) for b in blocks] == [
        (3, None), (7, "a fragment of a plugin"), (10, None), (14, None), (18, ""), (23, None), (26, None)]
    assert [b.body for b in blocks_to_run(doc)] == ["print(1)\n", "z\n"]
    assert [(b.line, index) for b, index in shown_outputs(doc)] == [(3, None), (14, 0)]
    assert marker_problems(doc) == ["d.md:16: `not run` without a reason",
                                    "d.md:20: `not run` marker not right before a ```python fence",
                                    "d.md:2: an output listing shows no python block's output",
                                    "d.md:25: label the block ```python (or ```text for output)"]


def has_attributes(obj: object, names: list[str]) -> bool:
    for name in names:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def resolves(name: str) -> bool:
    """``axle.passes.schedule.schedule``, ``axle.config.update``, ``axle_cpu.aot.compile_aot``:
    an importable module, then attributes (the longest module first)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        if has_attributes(module, parts[i:]):
            return True
    return False


def test_named_apis_exist() -> None:
    """Every `axle.x.y` (and `axle_cpu.x`...) a doc names in backticks exists: a moved module
    or a renamed function shows here even where no block uses it."""
    for name in ("cpu", "opencl", "template"):
        require_backend(name)
    named = {(doc.name, n) for doc in DOCS for n in re.findall(r"`(axle(?:_\w+)?(?:\.\w+)+)", doc.read_text())}
    missing = sorted(f"{doc}: {n}" for doc, n in named if not resolves(n))
    assert len(named) > 100 and not missing, missing


def test_walkthrough_blocks_left_to_their_test() -> None:
    """The walk-through's python blocks are the ones tests/sdk/test_walkthrough.py runs."""
    doc = ROOT / "docs" / "writing-a-backend.md"
    inside = [b for b in doc_blocks(doc) if b.in_walkthrough and b.lang == "python"]
    assert len(inside) == 2 and "acme:0" in inside[0].body
    assert not set(inside) & set(blocks_to_run(doc))
