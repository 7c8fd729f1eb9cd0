"""docs/writing-a-backend.md, step by step, in a temporary folder.

The commands (```console blocks, `$ ...`) and Python blocks of the doc's walk-through
section are executed as written: scaffold `acme`, pip-install it, see `acme:0` in
`axle devices`, run the conformance kit on it, jit a function whose `dot` is outside acme's
capabilities and compare the placement summary with the one the doc shows, then the
strict-placement refusal.

The commands run in a virtual environment of the test's own that sees this one's packages
(``own_venv``), so that installing acme changes nothing the other tests see: the test runs
beside them (make test's parallel pass). The kit runs its quick set: acme is the template
renamed, whose renderer passes the whole kit in tests/conformance (as the derived C device
of tests/sdk/test_derived_backend.py runs it)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from axle.testing import require_backend
from axle.testing.kit import claimed, kit_checks

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "writing-a-backend.md"


def walkthrough_blocks() -> list[tuple[str, str]]:
    """(language, body) of each fenced block between the walkthrough markers."""
    text = DOC.read_text()
    section = text.split("<!-- walkthrough:start -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", section, re.S)]


def own_venv(where: Path) -> str:
    """The Python of a new virtual environment that sees this environment's packages (a .pth
    file adding its site-packages as a site dir, whose own .pth files, the editable installs,
    are read too) and installs into its own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    purelib = sysconfig.get_path("purelib", vars={"base": str(where), "platbase": str(where)})
    this = sysconfig.get_path("purelib")
    Path(purelib, "_this_environment.pth").write_text(f"import site; site.addsitedir({this!r})\n")
    return str(where / "bin" / "python")


def to_argv(command: str, python: str) -> list[str]:
    """A documented command as ``python`` runs it."""
    words = shlex.split(command)
    if words[0] == "axle":
        return [python, "-m", "axle", *words[1:]]
    if words[:2] == ["pip", "install"]:
        # no dependency resolution and no build isolation: fast, and works offline
        return [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", *words[2:]]
    if words[:3] == ["python", "-m", "axle.testing"]:
        return [python, *words[1:], "--quick"]
    if words[0] == "python":
        return [python, *words[1:]]
    raise AssertionError(f"the walkthrough runs a command this test does not know: {command}")


def normalize_host(text: str) -> str:
    return re.sub(r"\b(cpu|interpreter):0\s*", "HOST ", text)


def test_doc_walkthrough(tmp_path):
    blocks = walkthrough_blocks()
    commands = [line[2:] for lang, body in blocks if lang == "console" for line in body.splitlines()
                if line.startswith("$ ")]
    assert [c.split()[:2] for c in commands] == [["axle", "new-backend"], ["pip", "install"], ["axle", "devices"],
                                                 ["python", "-m"]], commands
    env = {k: v for k, v in os.environ.items() if k not in ("AXLE_BACKENDS", "AXLE_FLAGS")}
    python = own_venv(tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    outputs = {}
    try:
        for command in commands:
            r = subprocess.run(to_argv(command, python), cwd=work, env=env, capture_output=True, text=True,
                               timeout=600)
            assert r.returncode == 0, f"`{command}` failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            outputs[command.split()[1]] = r.stdout
        assert (work / "axle-acme" / "axle_acme" / "backend.py").is_file()
        assert re.search(r"^\s+\*?\s*acme:0\s", outputs["devices"], re.M), outputs["devices"]
        kit = outputs["-m"]
        assert "axle conformance: acme" in kit and "failed" not in kit.splitlines()[-1], kit[-2000:]
        # acme claims what the template claims (the same backend renamed)
        quick, template = kit_checks(quick=True), require_backend("template")
        n_claimed = sum(1 for c in quick if claimed(c, template))
        assert n_claimed > 500 and len(quick) - n_claimed > 100
        assert re.search(rf"claimed by the device:\s+{n_claimed} passed, 0 failed", kit), kit[-3000:]
        assert re.search(rf"not claimed \(host fallback\):\s+{len(quick) - n_claimed} passed, 0 failed", kit), \
            kit[-3000:]

        script = "\n".join(body for lang, body in blocks if lang == "python")
        r = subprocess.run([python, "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        shown = next(body for lang, body in blocks if lang == "" and body.startswith("placement for"))
        printed = r.stdout[r.stdout.index("placement for"):r.stdout.index("refused:")]
        assert normalize_host(printed.strip()) == normalize_host(shown.strip())
        assert "[host fallback: dot: op 'dot' is not in the device's capabilities]" in printed
        refusal = r.stdout[r.stdout.index("refused:"):]
        assert re.match(r"refused: strict placement: 'dot' \(f32\[4,5\], f32\[5,3\]\) -> f32\[4,3\] cannot run on "
                        r"acme:0", refusal), refusal

        # the same refusal from the environment, for a whole process
        first = next(body for lang, body in blocks if lang == "python")
        r = subprocess.run([python, "-c", first], cwd=work, capture_output=True, text=True, timeout=300,
                           env={**env, "AXLE_FLAGS": "--strict_placement"})
        assert r.returncode != 0 and "PlacementError: strict placement: 'dot'" in r.stderr, r.stderr[-2000:]
    finally:
        subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", "axle-acme"], capture_output=True)
    # nothing went into this environment
    r = subprocess.run([sys.executable, "-m", "axle", "devices"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "acme" not in r.stdout, r.stdout


@pytest.mark.parametrize("command", ["axle new-backend acme ./axle-acme", "pip install -e ./axle-acme"])
def test_readme_and_doc_agree(command):
    readme = (ROOT / "backends" / "template" / "README.md").read_text()
    assert command in readme and command in DOC.read_text()
