"""Fixtures of the example tests (the loader: example_loader.py)."""
from __future__ import annotations

import pytest
from example_loader import load_example


@pytest.fixture(scope="session")
def mnist_example():  # noqa: ANN201
    return load_example("mnist_softmax")


@pytest.fixture(scope="session")
def seed_example():  # noqa: ANN201
    return load_example("seed_reduce_sum")
