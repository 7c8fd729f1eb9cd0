"""docs/ stays true to the code."""
from __future__ import annotations

from pathlib import Path

from axle.ir.ops import OPS

ROOT = Path(__file__).resolve().parents[2]


def test_ir_doc_lists_every_op():
    text = (ROOT / "docs" / "ir.md").read_text()
    missing = [op.value for op in OPS if f"`{op.value}`" not in text]
    assert not missing, f"docs/ir.md does not describe: {missing}"


def test_readme_links_exist():
    import re

    readme = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\((docs/[^)]+)\)", readme):
        assert (ROOT / link).exists(), link
