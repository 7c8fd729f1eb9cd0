"""The conformance suite pytest collects for ``--axle-backend NAME`` (see plugin.py)."""
from __future__ import annotations

from typing import Any

import pytest

from axle.testing.kit import claimed
from axle.testing.plugin import check_result


def test_conformance(axle_check: Any, axle_device: Any, record_property: Any, request: Any) -> None:
    record_property("axle_claimed", claimed(axle_check, axle_device))
    record_property("axle_category", axle_check.category)
    result = check_result(request.config, axle_check, axle_device)
    record_property("axle_outcome", result.kind)
    if not result.passed:
        pytest.fail(result.report, pytrace=False)
