"""Loads a benchmarks/*.py script as a module under test (the scripts are not a package)."""
from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def load_bench() -> Callable[[str], ModuleType]:
    """``load_bench("bench_cpu.py")``: benchmarks/bench_cpu.py, imported with benchmarks/ on
    sys.path (the scripts import ``common``) under a private module name."""
    def load(filename: str) -> ModuleType:
        sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
        name = f"_{filename.removesuffix('.py')}_under_test"
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", filename))
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up
        spec.loader.exec_module(mod)
        return mod

    return load
