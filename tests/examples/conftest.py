"""Examples are scripts, not a package: load them by path."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str):  # noqa: ANN201
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def mnist_example():  # noqa: ANN201
    return load_example("mnist_softmax")


@pytest.fixture(scope="session")
def seed_example():  # noqa: ANN201
    return load_example("seed_reduce_sum")
