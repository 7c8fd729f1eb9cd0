"""Examples are scripts, not a package: load them by path. (A module of its own, not
conftest: another directory's conftest module may hold the name ``conftest`` first.)"""
from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
