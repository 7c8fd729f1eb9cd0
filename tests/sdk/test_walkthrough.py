"""docs/writing-a-backend.md, step by step, in a temporary folder.

The commands (```console blocks, `$ ...`) and Python blocks of the doc's walk-through
section are executed as written: scaffold `acme`, pip-install it into this venv, see
`acme:0` in `axle devices`, run the conformance kit on it, jit a function whose `dot` is
outside acme's capabilities and compare the placement summary with the one the doc shows,
then the strict-placement refusal. The package is uninstalled afterwards."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

#: pip-installs a backend into this environment: run alone, never beside other tests
pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "writing-a-backend.md"


def walkthrough_blocks() -> list[tuple[str, str]]:
    """(language, body) of each fenced block between the walkthrough markers."""
    text = DOC.read_text()
    section = text.split("<!-- walkthrough:start -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", section, re.S)]


def to_argv(command: str) -> list[str]:
    """A documented command as this venv runs it."""
    words = shlex.split(command)
    if words[0] == "axle":
        return [sys.executable, "-m", "axle", *words[1:]]
    if words[:2] == ["pip", "install"]:
        # no dependency resolution and no build isolation: fast, and works offline
        return [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", *words[2:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
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
    outputs = {}
    try:
        for command in commands:
            r = subprocess.run(to_argv(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"`{command}` failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            outputs[command.split()[1]] = r.stdout
        assert (tmp_path / "axle-acme" / "axle_acme" / "backend.py").is_file()
        assert re.search(r"^\s+\*?\s*acme:0\s", outputs["devices"], re.M), outputs["devices"]
        kit = outputs["-m"]
        assert "axle conformance: acme" in kit and "failed" not in kit.splitlines()[-1], kit[-2000:]
        claimed = re.search(r"claimed by the device:\s+(\d+) passed, 0 failed", kit)
        fallback = re.search(r"not claimed \(host fallback\):\s+(\d+) passed, 0 failed", kit)
        assert claimed and fallback and int(claimed.group(1)) > 500 and int(fallback.group(1)) > 100, kit[-3000:]

        script = "\n".join(body for lang, body in blocks if lang == "python")
        r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
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
        r = subprocess.run([sys.executable, "-c", first], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env={**env, "AXLE_FLAGS": "--strict_placement"})
        assert r.returncode != 0 and "PlacementError: strict placement: 'dot'" in r.stderr, r.stderr[-2000:]
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "axle-acme"], capture_output=True)
    r = subprocess.run([sys.executable, "-m", "axle", "devices"], env=env, capture_output=True, text=True)
    assert "acme" not in r.stdout


@pytest.mark.parametrize("command", ["axle new-backend acme ./axle-acme", "pip install -e ./axle-acme"])
def test_readme_and_doc_agree(command):
    readme = (ROOT / "backends" / "template" / "README.md").read_text()
    assert command in readme and command in DOC.read_text()
