"""Choosing devices in tests. In CI (``CI=true``) nothing may be skipped: a backend that
is not available fails the test run instead of quietly skipping it."""
from __future__ import annotations

import os

from ..backend import Device

IN_CI = os.environ.get("CI", "").lower() == "true"


def require_backend(name: str) -> Device:
    """The backend's first device; fails in CI and skips elsewhere when it is unavailable."""
    import pytest

    from ..registry import REGISTRY

    st = REGISTRY.statuses().get(name)
    if st is None or not st.available:
        msg = f"backend {name!r} unavailable: {st.reason if st else 'not installed'}"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return REGISTRY.device(f"{name}:0")
