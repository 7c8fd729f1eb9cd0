"""axle.onnx: ONNX models as axle functions (the ``onnx`` extra: ``pip install 'axle[onnx]'``).

    import axle.onnx
    f = axle.onnx.load("model.onnx", device="cpu:0")
    (y,) = f(x)                      # by position, or f(input_name=x); as_dict=True for names
    axle.onnx.check("model.onnx")    # every unsupported node, before anything runs

Each ONNX op is one entry of :data:`OPS` (op type -> converter onto axle.lax / axle.numpy
/ axle.nn, supported opset range, static inputs, attribute check); docs/onnx.md lists them."""
from __future__ import annotations

from . import ops_control, ops_elementwise, ops_nn, ops_resize, ops_shape  # noqa: F401 - they fill OPS
from .function import OnnxFunction, check, load
from .table import MAX_OPSET, MIN_OPSET, OPS, OnnxImportError, OpEntry

__all__ = ["MAX_OPSET", "MIN_OPSET", "OPS", "OnnxFunction", "OnnxImportError", "OpEntry", "check", "load"]
