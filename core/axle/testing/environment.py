"""Choosing devices in tests. In CI (``CI=true``) nothing may be skipped: a backend that
is not available fails the test run instead of quietly skipping it."""
from __future__ import annotations

import os
from pathlib import Path

from ..backend import Device
from ..registry import REGISTRY

#: the kit as a pytest file (``pytest SUITE --axle-backend NAME``)
SUITE = str(Path(__file__).with_name("suite.py"))
IN_CI = os.environ.get("CI", "").lower() == "true"
#: how to get the kit's runner: pytest is the ``kit`` extra, not a dependency of axle
KIT_INSTALL = "pip install 'axle[kit]'"


def kit_unavailable() -> str | None:
    """Why the conformance kit cannot run here (its runner, pytest, does not import), or
    None. Commands that run the kit print this instead of a ModuleNotFoundError traceback."""
    try:
        import pytest  # noqa: F401 - only whether it imports
    except ImportError as e:
        return (f"the conformance kit runs on pytest, which cannot be imported here ({e}); "
                f"install it with: {KIT_INSTALL}")
    return None


def require_backend(name: str) -> Device:
    """The backend's first device; fails in CI and skips elsewhere when it is unavailable."""
    import pytest

    st = REGISTRY.statuses().get(name)
    if st is None or not st.available:
        msg = f"backend {name!r} unavailable: {st.reason if st else 'not installed'}"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return REGISTRY.device(f"{name}:0")
