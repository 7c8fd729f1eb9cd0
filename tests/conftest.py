"""Shared fixtures. In CI (CI=true) nothing may be skipped: a missing backend fails.

Tests in ``SLOW_FILES`` are marked ``slow``: ``make test-fast`` (``pytest -m "not slow"``)
leaves them out for everyday work; ``make test`` and CI run everything."""
from __future__ import annotations

import pytest

from axle.testing import IN_CI, require_backend  # noqa: F401 - re-exported for tests

#: files whose tests take 5 s or more each (end-to-end builds and installs, whole kit runs,
#: random-program campaigns, cache-bound sweeps, thread storms) or that run the whole kit
SLOW_FILES = frozenset({
    "test_conformance.py",  # the kit on every backend
    "test_concurrency.py",
    "test_differential_campaign.py",
    "test_opencl_differential.py",
    "test_cpu_cache_bounds.py",
    "test_derived_backend.py",
    "test_walkthrough.py",
    "test_wheel_install.py",
    "test_kit_crashes.py",
    "test_kit_plugin.py",
    "test_kit_contract.py",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
