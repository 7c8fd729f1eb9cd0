"""Fixtures for the CPU backend tests."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

# tests/conftest.py is imported by pytest as a conftest, not as a package module: load
# its require_backend by path.
_spec = importlib.util.spec_from_file_location("axle_tests_root_conftest",
                                               pathlib.Path(__file__).resolve().parents[2] / "conftest.py")
_root = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(_root)  # type: ignore[union-attr]
require_backend = _root.require_backend


@pytest.fixture(scope="session")
def cpu():  # noqa: ANN201
    return require_backend("cpu")
