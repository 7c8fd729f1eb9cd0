"""docs/writing-a-backend.md, "Make it real": a second C-like device derived from the
scaffold by changing only its dialect and toolchain lines, built as a wheel (not editable),
installed into a folder, passes the whole conformance kit with every check claimed.

The section's ```console commands run as written (in a temporary folder) and its ```diff
blocks are applied to the scaffolded copy, each of whose removed and context lines must be
in the copy verbatim: a template change that breaks the chapter fails here. Everything is
built and installed under the test's temporary folder (nothing goes into this environment),
so the test runs beside the others in make test's parallel pass."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from axle.testing.kit import kit_checks

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "writing-a-backend.md"


def section() -> str:
    text = DOC.read_text()
    return text.split("<!-- make-it-real:start -->", 1)[1].split("<!-- make-it-real:end -->", 1)[0]


def blocks(lang: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"```{lang}\n(.*?)```", section(), re.S)]


def apply_diff(text: str, diff: str) -> str:
    """The hunk's old lines (context and '-') replaced by its new lines (context and '+')."""
    old = [line[1:] for line in diff.splitlines() if line[:1] in (" ", "-")]
    new = [line[1:] for line in diff.splitlines() if line[:1] in (" ", "+")]
    before, after = "\n".join(old) + "\n", "\n".join(new) + "\n"
    assert text.count(before) == 1, f"the doc's diff does not match the scaffold:\n{before}"
    return text.replace(before, after)


def run(command: str, cwd: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A documented command as this venv runs it: leading VAR=value words set the environment."""
    words = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if k not in ("AXLE_BACKENDS", "AXLE_FLAGS", "PYTHONPATH")}
    env.update(extra_env or {})
    while "=" in words[0]:
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    tool = {"axle": ["-m", "axle"], "pip": ["-m", "pip", "-q"], "python": []}[words[0]]
    r = subprocess.run([sys.executable, *tool, *words[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, f"`{command}` failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


def test_derived_c_device_passes_the_kit_from_a_wheel(tmp_path: Path) -> None:
    commands = [line[2:] for body in blocks("console") for line in body.splitlines() if line.startswith("$ ")]
    assert [c.split()[0] for c in commands] == ["axle", "pip", "pip", "PYTHONPATH=./site"], commands
    scaffold, *rest = commands
    run(scaffold, tmp_path)
    (name,) = [p.name[len("axle-"):] for p in tmp_path.iterdir() if p.name.startswith("axle-")]
    codegen = tmp_path / f"axle-{name}" / f"axle_{name}" / "codegen.py"
    original = codegen.read_text()
    text = original
    diffs = blocks("diff")
    assert len(diffs) == 2, "one diff for the dialect, one for the toolchain"
    for diff in diffs:
        text = apply_diff(text, diff)
    codegen.write_text(text)
    # only the dialect and toolchain lines differ from the template
    changed = [line for line in text.splitlines() if line not in original.splitlines()]
    assert changed and all(re.match(r"\s+\w+ = |COMPILER", line) for line in changed), changed

    build, install, kit = rest
    run(build, tmp_path)
    run(install, tmp_path)
    # kernel binaries cached in the temporary folder (--compile_cache): this run compiles with
    # the device's own toolchain, never loading a binary an earlier run left in the user's cache
    cache = {"AXLE_FLAGS": f"--compile_cache={tmp_path / 'kernel-cache'}"}
    site = tmp_path / "site"
    assert (site / f"axle_{name}" / "codegen.py").read_text() == text, "the kit must run the installed wheel"
    assert not list(site.glob("__editable__*")) and not list(site.glob("*.pth")), "installed editable"
    # the kit's quick set (620 checks, every op, the control checks whole): the C renderer
    # passes the full kit as the template in tests/conformance; this run checks the wheel,
    # the dialect and the toolchain, without compiling 6,000 kernels with the device's cc
    out = run(kit + " --quick", tmp_path, cache).stdout
    claimed = re.search(r"claimed by the device:\s+(\d+) passed, (\d+) failed", out)
    fallback = re.search(r"not claimed \(host fallback\):\s+(\d+) passed, (\d+) failed", out)
    assert claimed and fallback, out[-3000:]
    # every check, the loops and conditionals too (the template runs them over its own kernels),
    # but the collectives: no backend claims them, the core's host communicator runs them
    quick = kit_checks(quick=True)
    n_collective = sum(1 for c in quick if c.module is not None
                       and any(n.traits.collective for n in c.module.entry.nodes))
    assert n_collective > 0
    assert (int(claimed.group(1)), int(claimed.group(2))) == (len(quick) - n_collective, 0), out[-3000:]
    assert (int(fallback.group(1)), int(fallback.group(2))) == (n_collective, 0), out[-3000:]
    # the device compiled its own dialect
    probe = (f"import numpy as np, axle; f = axle.jit(lambda x: x * 2 + 1, device='{name}:0'); "
             "x = np.ones(3, np.float32); print(f(x)); print(*f.lower(x).compile().executable.kernel_sources().values())")
    src = run(f"PYTHONPATH=./site python -c {shlex.quote(probe)}", tmp_path, cache).stdout
    assert "[3. 3. 3.]" in src and "for (long long" in src and "__restrict__" in src, src
    # the probe's kernel was compiled into the test's cache (the kit's worker processes
    # compile into private caches of their own: axle.testing's worker pool)
    assert list((tmp_path / "kernel-cache").rglob("*.bin")), "the probe compiled in the test's cache"
