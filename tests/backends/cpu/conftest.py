"""Fixtures for the CPU backend tests."""
from __future__ import annotations

import pytest

from axle.testing import require_backend


@pytest.fixture(scope="session")
def cpu():  # noqa: ANN201
    return require_backend("cpu")
