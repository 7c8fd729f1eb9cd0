"""The conformance suite pytest collects for ``--axle-backend NAME`` (see plugin.py)."""
from __future__ import annotations

from typing import Any


def test_conformance(axle_check: Any, axle_device: Any, record_property: Any) -> None:
    from axle.testing.kit import claimed, run_check

    record_property("axle_claimed", claimed(axle_check, axle_device))
    record_property("axle_category", axle_check.category)
    run_check(axle_check, axle_device)
