"""docs/ stays true to the code."""
from __future__ import annotations

import re
from pathlib import Path

from axle.ir.ops import OPS

ROOT = Path(__file__).resolve().parents[2]


def test_ir_doc_lists_every_op():
    text = (ROOT / "docs" / "ir.md").read_text()
    missing = [op.value for op in OPS if f"`{op.value}`" not in text]
    assert not missing, f"docs/ir.md does not describe: {missing}"


def test_readme_links_exist():
    readme = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\((docs/[^)]+)\)", readme):
        assert (ROOT / link).exists(), link


def test_cited_test_files_and_tests_exist():
    """Every `tests/...py` (and `tests/...py::test_name`) that a doc cites exists: a doc that
    points at a renamed file sends its reader nowhere (aot.md cited test_aot.py once)."""
    cited = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for path, name in cited.findall(doc.read_text()):
            f = ROOT / path
            if not f.is_file() or (name and not re.search(rf"^(async )?def {name}\b", f.read_text(), re.M)):
                missing.append(f"{doc.relative_to(ROOT)}: {path}{'::' + name if name else ''}")
    assert not missing, missing
