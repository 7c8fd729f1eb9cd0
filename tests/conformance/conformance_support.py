"""tests/conftest.py's require_backend, loaded by path: pytest imports that file as a
conftest, not as a package module, so `from tests.conftest import ...` only works when
the repository root happens to be on sys.path."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(f"axle_root_conftest_{__name__}",
                                               Path(__file__).resolve().parents[1] / "conftest.py")
_root = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(_root)  # type: ignore[union-attr]
require_backend = _root.require_backend
IN_CI = _root.IN_CI
