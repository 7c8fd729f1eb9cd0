"""The before/after table in docs/optimizer.md is what the report command prints. (Every
op case of the conformance kit optimized against the interpreter is the kit's own check on
the interpreter backend, tests/conformance: the kit runs op cases optimized.)"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "optimizer.md"


def test_report_command_prints_the_table_recorded_in_docs():
    out = subprocess.run([sys.executable, "-m", "axle.testing.optimizer_report"], capture_output=True, text=True, check=True).stdout
    table = out.strip()
    assert table.startswith("| program |") and "seed" in table and "MLP backward" in table
    assert table in DOCS.read_text(), "docs/optimizer.md does not hold the current table; rerun python -m axle.testing.optimizer_report"
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    for program, kb, ka, tb, ta, *_ in rows:
        assert int(ka) < int(kb), f"{program}: the optimizer did not reduce kernels"
        assert int(ta.replace(",", "")) <= int(tb.replace(",", "")), f"{program}: more temporaries after"


def test_docs_show_the_current_default_pipeline():
    from axle.passes import default_pipeline

    assert default_pipeline().describe() in DOCS.read_text()
