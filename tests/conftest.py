"""Shared fixtures. In CI (CI=true) nothing may be skipped: a missing backend fails."""
from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require_backend(name: str):  # noqa: ANN201
    """The backend's first device; fails in CI and skips elsewhere when it is unavailable."""
    import axle

    st = axle.REGISTRY.statuses().get(name)
    if st is None or not st.available:
        reason = st.reason if st else "not installed"
        msg = f"backend {name!r} unavailable: {reason}"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return axle.device(f"{name}:0")
