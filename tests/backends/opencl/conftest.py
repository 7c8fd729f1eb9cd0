"""Fixtures for the OpenCL backend tests."""
from __future__ import annotations

import pytest

from axle.config import config
from ocl_fusing import opencl_device


@pytest.fixture(scope="module")
def ocl():  # noqa: ANN201
    """opencl:0 (in CI a missing OpenCL device fails the run)."""
    return opencl_device()


@pytest.fixture(params=["cpu", "gpu"])
def strategy(request):  # noqa: ANN001, ANN201
    """Each test twice: with the CPU launch strategy (chunks, vector types, register
    blocks without local memory) and the GPU one (one work-item per element or row,
    local-memory tiles), both valid OpenCL that PoCL runs."""
    config.backend_flags["opencl_strategy"] = request.param
    yield request.param
    config.backend_flags.pop("opencl_strategy", None)
