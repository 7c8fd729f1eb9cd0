"""Real architectures as ONNX graphs (built with onnx.helper, random weights), run through
axle.onnx on every device and compared with onnxruntime:

- a ResNet (ResNet-18: basic blocks [2, 2, 2, 2], widths 64..512, 224x224 input),
- a MobileNet-style net (depthwise-separable convolutions),
- a GPT-2-style decoder stack (token and position embedding gathers, pre-LayerNorm causal
  self-attention, GELU MLP, the output projection tied to the token embedding),
- an LSTM (the seeds' 3 x 60, 10 steps).

    python examples/onnx_models.py            # small versions, every device
    python examples/onnx_models.py --full     # ResNet-18 at 224x224, GPT-2 768 wide
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20


class Graph:
    """A tiny builder: nodes, initializers (seeded random weights), fresh names."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def weight(self, shape: tuple[int, ...], scale: float | None = None, base: str = "w") -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1 / np.sqrt(max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * s).astype(np.float32), base)

    def const(self, value: np.ndarray, base: str = "c") -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], out: str,
              out_shape: list[int]) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name, inputs,
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        onnx.checker.check_model(m)
        return m


def _conv_bn(g: Graph, x: str, cin: int, cout: int, k: int, stride: int, relu: bool = True,
             group: int = 1) -> str:
    w = g.weight((cout, cin // group, k, k))
    y = g.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)
    scale = g.const((1 + 0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    bias = g.const((0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    mean = g.const((0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    var = g.const((1 + 0.1 * g.rng.random(cout)).astype(np.float32))
    y = g.op("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
    return g.op("Relu", [y]) if relu else y


def resnet(blocks: tuple[int, ...] = (2, 2, 2, 2), width: int = 64, size: int = 224, classes: int = 1000,
           batch: int = 1) -> onnx.ModelProto:
    """ResNet with basic blocks (ResNet-18 by default), NCHW, inference BatchNorm."""
    g = Graph(0)
    x = _conv_bn(g, "x", 3, width, 7, 2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, n in enumerate(blocks):
        cout = width * 2 ** stage
        for b in range(n):
            stride = 2 if stage > 0 and b == 0 else 1
            y = _conv_bn(g, x, cin, cout, 3, stride)
            y = _conv_bn(g, y, cout, cout, 3, 1, relu=False)
            short = x if stride == 1 and cin == cout else _conv_bn(g, x, cin, cout, 1, stride, relu=False)
            x = g.op("Relu", [g.op("Add", [y, short])])
            cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    y = g.op("Gemm", [x, g.weight((classes, cin)), g.const(np.zeros(classes, np.float32))], transB=1)
    return g.model("resnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])], y,
                   [batch, classes])


def mobilenet(widths: tuple[int, ...] = (32, 64, 128, 256), size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """MobileNet-style: depthwise 3x3 (group = channels) then pointwise 1x1, ReLU6 as Clip."""
    g = Graph(1)
    x = _conv_bn(g, "x", 3, widths[0], 3, 2)
    cin = widths[0]
    for cout in widths[1:]:
        x = _conv_bn(g, x, cin, cin, 3, 2, group=cin)
        x = _conv_bn(g, x, cin, cout, 1, 1, relu=False)
        x = g.op("Clip", [x, g.const(np.float32(0)), g.const(np.float32(6))])
        cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    y = g.op("Gemm", [x, g.weight((classes, cin)), g.const(np.zeros(classes, np.float32))], transB=1)
    return g.model("mobilenet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])], y,
                   [1, classes])


def _layer_norm(g: Graph, x: str, d: int) -> str:
    return g.op("LayerNormalization", [x, g.const(np.ones(d, np.float32)), g.const(np.zeros(d, np.float32))],
                axis=-1, epsilon=1e-5)


def _linear(g: Graph, x: str, din: int, dout: int) -> str:
    return g.op("Add", [g.op("MatMul", [x, g.weight((din, dout))]), g.const(np.zeros(dout, np.float32))])


def gpt2(vocab: int = 50257, width: int = 768, heads: int = 12, blocks: int = 2, tokens: int = 64) -> onnx.ModelProto:
    """A GPT-2-style decoder stack over int64 token ids [1, tokens] -> logits [1, tokens, vocab]."""
    g = Graph(2)
    hd = width // heads
    wte = g.weight((vocab, width), 0.02, "wte")
    x = g.op("Add", [g.op("Gather", [wte, "ids"]), g.op("Gather", [g.weight((tokens, width), 0.01, "wpe"),
                                                                    g.const(np.arange(tokens)[None, :])])])
    causal = g.const(np.triu(np.full((tokens, tokens), -1e9, np.float32), 1))
    split_shape = g.const(np.array([1, tokens, heads, hd], np.int64))
    merge_shape = g.const(np.array([1, tokens, width], np.int64))
    scale = g.const(np.float32(1 / np.sqrt(hd)))
    for _ in range(blocks):
        h = _layer_norm(g, x, width)
        qkv = _linear(g, h, width, 3 * width)
        q, k, v = g.op("Split", [qkv, g.const(np.array([width] * 3, np.int64))], n_out=3, axis=-1)
        q, k, v = (g.op("Transpose", [g.op("Reshape", [t, split_shape])], perm=[0, 2, 1, 3]) for t in (q, k, v))
        s = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), scale])
        p = g.op("Softmax", [g.op("Add", [s, causal])], axis=-1)
        a = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3]), merge_shape])
        x = g.op("Add", [x, _linear(g, a, width, width)])
        h = _layer_norm(g, x, width)
        h = g.op("Gelu", [_linear(g, h, width, 4 * width)], approximate="tanh")
        x = g.op("Add", [x, _linear(g, h, 4 * width, width)])
    x = _layer_norm(g, x, width)
    logits = g.op("MatMul", [x, g.op("Transpose", [wte], perm=[1, 0])])  # tied to the token embedding
    return g.model("gpt2", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, tokens])], logits,
                   [1, tokens, vocab])


def lstm(input_size: int = 3, hidden: int = 60, steps: int = 10, batch: int = 1) -> onnx.ModelProto:
    """One LSTM layer over [steps, batch, input_size]; the last hidden state as the output."""
    g = Graph(3)
    w = g.weight((1, 4 * hidden, input_size))
    r = g.weight((1, 4 * hidden, hidden))
    b = g.const(np.zeros((1, 8 * hidden), np.float32))
    _, yh = g.op("LSTM", ["x", w, r, b], n_out=2, hidden_size=hidden)
    return g.model("lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, input_size])], yh,
                   [1, batch, hidden])


SMALL: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet": lambda: resnet((1, 1), width=8, size=32, classes=10),
    "mobilenet": lambda: mobilenet((8, 16, 32), size=32, classes=10),
    "gpt2": lambda: gpt2(vocab=97, width=32, heads=4, blocks=2, tokens=8),
    "lstm": lambda: lstm(),
}
FULL: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet18": lambda: resnet(), "mobilenet": lambda: mobilenet(), "gpt2": lambda: gpt2(), "lstm": lambda: lstm(),
}


def inputs_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs of the declared shapes (token ids below the vocabulary)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == TensorProto.INT64:
            vocab = next(i.dims[0] for i in model.graph.initializer if i.name.startswith("wte"))
            out[vi.name] = rng.integers(0, vocab, shape).astype(np.int64)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def compare(model: onnx.ModelProto, device: str) -> float:
    """The largest difference between axle on ``device`` and onnxruntime, relative to the
    largest reference value."""
    import onnxruntime as ort

    import axle.onnx

    feeds = inputs_for(model)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = np.asarray(axle.onnx.load(model, device=device)(**feeds)[0])
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="the full-size models (slow on small machines)")
    p.add_argument("--devices", nargs="*", default=None, help="devices (default: every device)")
    args = p.parse_args(argv)
    import axle

    devices = args.devices or [d.name for d in axle.devices()]
    worst = 0.0
    for name, build in (FULL if args.full else SMALL).items():
        model = build()
        for dev in devices:
            err = compare(model, dev)
            worst = max(worst, err)
            print(f"{name:<10} {dev:<14} max |axle - onnxruntime| / max |onnxruntime| = {err:.2e}", flush=True)
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
