"""Contract versioning: a newer minor version loads, another major version is refused with
a message saying which versions fit, and optional methods have working defaults."""
from __future__ import annotations

import numpy as np
import pytest

import axle
from axle.backend import API_VERSION, Backend, Buffer, Capabilities, CompileOptions, Device
from axle.backends.interpreter import InterpreterExecutable
from axle.ir.types import TensorType
from axle.registry import Registry, _compatible


class Minimal(Backend):
    """Only the abstract methods: what a plugin written against 1.0 implements."""

    name = "minimal"

    def devices(self):  # noqa: ANN201
        return [Device("minimal", 0)]

    def compile(self, module, device, options):  # noqa: ANN001, ANN201
        return InterpreterExecutable(module, device)

    def to_device(self, array, device):  # noqa: ANN001, ANN201
        from axle.ir.dtypes import dtype

        return Buffer(device, TensorType(dtype(array.dtype), array.shape), np.array(array))

    def to_host(self, buffer):  # noqa: ANN001, ANN201
        return buffer.handle


@pytest.mark.parametrize("version, ok", [((API_VERSION[0], 0), True), ((API_VERSION[0], 99), True),
                                         ((API_VERSION[0] + 1, 0), False), ((0, 9), False)])
def test_major_version_decides(version, ok):
    cls = type("V", (Minimal,), {"api_version": version})
    status = Registry()._init("minimal", cls, "fake:V")
    assert status.available is ok
    if not ok:
        assert f"built for backend API {version[0]}.{version[1]}" in status.reason
        assert f"this axle provides {API_VERSION[0]}.x" in status.reason
        assert f"install a plugin release for API {API_VERSION[0]}" in status.reason


def test_malformed_version_is_refused_with_a_message():
    assert "not a (major, minor) tuple" in _compatible("1.0")
    status = Registry()._init("minimal", type("V", (Minimal,), {"api_version": "1.0"}), "fake:V")
    assert not status.available and "'1.0'" in status.reason


def test_optional_methods_have_defaults():
    b = Minimal()
    dev = b.devices()[0]
    assert b.capabilities(dev) == Capabilities()
    assert b.passes() == [] and b.fusion_policy() is None and b.device_priority(dev) == 0
    b.synchronize(dev)
    buf = b.to_device(np.arange(3, dtype=np.float32), dev)
    b.free(buf)
    exe = b.compile(axle.jit(lambda x: x + 1).lower(np.ones(3, np.float32)).module, dev, CompileOptions())
    assert exe.kernel_sources() == {}
    np.testing.assert_array_equal(b.to_host(exe.execute([buf])[0]), [1, 2, 3])
