"""The campaign tools that docs/reliability.md tells users to run still run: tools/rss_check.py
and tools/parser_fuzz.py on small sizes (their full runs are measurements, not tests)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from axle.testing import require_backend

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("backend", ["cpu", "opencl"])
def test_rss_check_reports_growth_after_warmup(backend: str) -> None:
    require_backend(backend)
    # a generous tolerance: a few shapes on a shared machine measure the tool, not the bound
    p = _run(str(TOOLS / "rss_check.py"), "--shapes", "40", "--warmup", "20", "--cache-size", "8",
             "--tolerance", "10", "--device", f"{backend}:0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(rf"device {backend}:0, jit_cache_size 8, 40 shapes, warm-up 20", p.stdout), p.stdout
    assert re.search(r"RSS after warm-up [\d.]+ MiB, peak after [\d.]+ MiB: growth [+-][\d.]+% .* -> OK", p.stdout)


@pytest.mark.parametrize("flags", [[], ["-O"]])
def test_parser_fuzz_tool_finds_only_axle_errors(flags: list[str]) -> None:
    p = _run(*flags, str(TOOLS / "parser_fuzz.py"), "--n", "200", "--seed", "500")
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"200 mutants in [\d.]+ s: 0 non-axle exceptions", p.stdout), p.stdout
