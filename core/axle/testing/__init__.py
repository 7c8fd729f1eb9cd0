"""The conformance kit: op cases over shapes and dtypes compared with the interpreter
(cases.py), the whole kit as checks (kit.py), its pytest plugin (plugin.py:
``pytest --axle-backend NAME``) and ``python -m axle.testing NAME``."""
from .cases import (
    OpCase,
    assert_close,
    cases_for,
    check_case,
    control_cases,
    core_cases,
    fused_cases,
    random_input,
    run_case,
    tolerance,
)
from .environment import IN_CI, require_backend

__all__ = ["OpCase", "assert_close", "cases_for", "check_case", "control_cases", "core_cases", "fused_cases",
           "random_input", "run_case", "tolerance", "IN_CI", "require_backend"]
