"""Fixtures for the OpenCL backend tests."""
from __future__ import annotations

import pytest

from axle.config import config
from axle.testing.prebuild import batches
from ocl_fusing import Prebuilt, opencl_device, prebuild_tests


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


@pytest.fixture(scope="module")
def _prebuild_batches(request: pytest.FixtureRequest) -> dict[str, list[pytest.Item]]:
    """The file's tests named in its PREBUILT, in run order, cut into batches
    (axle.testing.prebuild.batches): the first test of each -> the batch."""
    prebuilt: Prebuilt = getattr(request.module, "PREBUILT", {})
    if not prebuilt:
        return {}
    items = {i.nodeid: i for i in request.session.items
             if i.path == request.path and getattr(i, "originalname", None) in prebuilt}
    return {ids[0]: [items[i] for i in ids] for ids in batches(list(items))}


@pytest.fixture(autouse=True)
def _built_ahead(request: pytest.FixtureRequest, _prebuild_batches: dict[str, list[pytest.Item]]) -> None:
    """At the first test of a batch: the kernels of the batch's tests built together
    (ocl_fusing.prebuild_tests). Each test still compiles its module itself, finding its
    kernels built."""
    batch = _prebuild_batches.get(request.node.nodeid)
    if batch:
        prebuild_tests(request.module.PREBUILT, [(i.originalname, i.callspec.params) for i in batch],
                       request.getfixturevalue("ocl"))
