"""Shared fixtures. In CI (CI=true) nothing may be skipped: a missing backend fails."""
from __future__ import annotations

from axle.testing import IN_CI, require_backend  # noqa: F401 - re-exported for tests
