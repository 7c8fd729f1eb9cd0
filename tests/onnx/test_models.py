"""Small versions of examples/onnx_models.py's architectures (ResNet, MobileNet-style,
GPT-2-style stack, LSTM), built as ONNX graphs with random weights: axle.onnx's outputs
match onnxruntime's on every in-tree device (cpu:0 in the fast tier)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from axle.testing import require_backend

_PATH = Path(__file__).resolve().parents[2] / "examples" / "onnx_models.py"
_SPEC = importlib.util.spec_from_file_location("onnx_models_example", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
models = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(models)

_PARAMS = [pytest.param(name, dev, marks=() if dev == "cpu:0" else pytest.mark.full_only)
           for name in models.SMALL for dev in ("cpu:0", "opencl:0", "template:0")]


@pytest.mark.parametrize(("name", "device"), _PARAMS)
def test_model_matches_onnxruntime(name: str, device: str) -> None:
    require_backend(device.split(":")[0])
    err = models.compare(models.SMALL[name](), device)
    assert err < 1e-4, f"{name} on {device}: relative difference {err:.2e} from onnxruntime"
