"""tools/check_suppressions.py, the `make lint` check that every noqa and type: ignore says why."""
from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_suppressions.py"


def _tool():  # noqa: ANN202 - the module object
    spec = importlib.util.spec_from_file_location("_check_suppressions", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SOURCE = '''\
import os  # noqa: F401 - only whether it imports
import sys  # noqa: F401
x = 1  # type: ignore[assignment]  # a reason
y = 2  # type: ignore[assignment]
z = "# noqa: E501"  # a string, not a comment
w = 3  # noqa: E501 -
'''


def test_suppressions_without_a_reason_are_found(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(SOURCE)
    tool = _tool()
    assert [line for line, _ in tool.findings(f)] == [2, 4, 6]
    assert tool.main([str(tmp_path)]) == 1

