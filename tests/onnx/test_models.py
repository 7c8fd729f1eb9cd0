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


def _copies_of_weights(model: object) -> list[str]:
    """The kernels of ``model``'s optimized cpu:0 module that only move (broadcast,
    transpose...) a weight matrix: each a full copy of the weight per call."""
    import axle.onnx
    from axle.ir import Op

    feeds = models.inputs_for(model)
    entry = axle.onnx.load(model, device="cpu:0").lower(**feeds).optimize().entry
    # (initializers as arguments, the default, or constants: docs/onnx.md, "Initializers")
    weights = {n.uid for n in entry.nodes if n.op in (Op.PARAMETER, Op.CONSTANT) and len(n.shape) >= 2}
    copies = []
    for n in entry.nodes:
        body = n.attr["computation"].nodes if n.op is Op.FUSION else [n]
        moves = all(x.traits.movement or x.op is Op.PARAMETER for x in body) and n.op is not Op.PARAMETER
        if moves and any(o.uid in weights for o in n.operands):
            copies.append(f"{n.op.value} {[x.op.value for x in body]} of {[o.shape for o in n.operands]}")
    return copies


def test_gpt2_reads_its_weights_in_place() -> None:
    # matmul([1, T, D], W) broadcast W along the batch dim, and the tied logits x @ wte.T
    # transposed the embedding table (154 MB at GPT-2 size) on every call: the dots must
    # read both where they are
    require_backend("cpu")
    assert _copies_of_weights(models.SMALL["gpt2"]()) == []
