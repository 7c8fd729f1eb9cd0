"""The conformance kit: op cases over shapes and dtypes, compared with the interpreter."""
from .cases import OpCase, assert_close, cases_for, core_cases, random_input, run_case, tolerance

__all__ = ["OpCase", "assert_close", "cases_for", "core_cases", "random_input", "run_case", "tolerance"]
