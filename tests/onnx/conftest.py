"""Prints the ONNX node suite's pass counts per backend at the end of a run that ran it."""
from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    suite = sys.modules.get("test_node_suite")
    if suite is None:
        return
    for dev, c in suite.COUNTS.items():
        if c["passed"] + c["failed"]:
            terminalreporter.write_line(
                f"ONNX node suite on {dev}: {c['passed']} passed, {c['failed']} failed of the cases run "
                f"({len(suite.IN_SCOPE)} in scope, {len(suite.OUT_OF_SCOPE)} out of scope)")
