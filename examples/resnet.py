"""ResNet-18 (He et al., 2015) on axle: basic blocks with batch norm, as pure functions over
pytrees, forward (inference batch norm) and a full training step under ``axle.jit``.

    params, state = init(config, seed=0)           # parameters and batch-norm running stats
    logits = forward(config, params, state, x)     # inference: the running statistics
    step = make_train_step(config)                 # jit: loss, grad, SGD with momentum
    params, state, velocity, loss = step(params, state, velocity, x, labels)

Two variants of the same network: ``IMAGENET`` (224x224 inputs: a 7x7 stride-2 stem and a
3x3 stride-2 max pool) and ``CIFAR`` (32x32 inputs: a 3x3 stride-1 stem, no pool). Both
have four stages of two basic blocks (64, 128, 256, 512 channels; the first block of each
later stage halves the resolution, its shortcut a 1x1 stride-2 convolution with batch
norm), global average pooling and one dense layer. ``ResNetConfig`` shrinks it for tests.

Layout NCHW, kernels OIHW (PyTorch's), so the parameters map one to one to
``torchvision.models.resnet18`` (benchmarks/bench_models.py builds the same network there).

    python examples/resnet.py                      # CIFAR-size training steps on random data
    python examples/resnet.py --variant imagenet --batch 1 --device cpu:0
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import axle
import axle.numpy as anp
from axle import nn
from axle.optimizers import sgd

Params = dict[str, Any]


@dataclass(frozen=True)
class ResNetConfig:
    """The shape of the network: static under jit (hashable)."""

    #: basic blocks per stage (ResNet-18: 2, 2, 2, 2)
    blocks: tuple[int, ...] = (2, 2, 2, 2)
    #: output channels per stage
    widths: tuple[int, ...] = (64, 128, 256, 512)
    #: "imagenet" (7x7/2 conv + 3x3/2 max pool) or "cifar" (3x3/1 conv, no pool)
    stem: str = "imagenet"
    in_channels: int = 3
    num_classes: int = 1000
    #: batch norm: running statistics move by this much per training step
    bn_momentum: float = 0.1
    bn_eps: float = 1e-5


IMAGENET = ResNetConfig()
CIFAR = ResNetConfig(stem="cifar", num_classes=10)

#: stem convolution per variant: (kernel, stride, padding, max pool after it)
_STEMS: dict[str, tuple[int, int, int, bool]] = {"imagenet": (7, 2, 3, True), "cifar": (3, 1, 1, False)}


def block_strides(config: ResNetConfig) -> list[list[int]]:
    """The stride of every block: 2 for the first block of each stage after the first."""
    return [[2 if (s > 0 and b == 0) else 1 for b in range(n)] for s, n in enumerate(config.blocks)]


def _conv_w(rng: np.random.Generator, out_c: int, in_c: int, k: int) -> np.ndarray:
    """He (fan-out) normal init, as torchvision's ResNet."""
    std = np.sqrt(2.0 / (out_c * k * k))
    return (rng.standard_normal((out_c, in_c, k, k)) * std).astype(np.float32)


def _bn(c: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Batch-norm parameters (scale 1, shift 0) and running statistics (mean 0, var 1)."""
    return ({"gamma": np.ones(c, np.float32), "beta": np.zeros(c, np.float32)},
            {"mean": np.zeros(c, np.float32), "var": np.ones(c, np.float32)})


def init(config: ResNetConfig, seed: int = 0) -> tuple[Params, Params]:
    """(params, state): float32 NumPy pytrees (put them on a device with axle.device_put).
    ``state`` holds the batch-norm running statistics, which training updates but the
    gradient never touches."""
    if config.stem not in _STEMS:
        raise ValueError(f"ResNetConfig.stem must be one of {', '.join(_STEMS)}, got {config.stem!r}")
    rng = np.random.default_rng(seed)
    k = _STEMS[config.stem][0]
    c0 = config.widths[0]
    bn_p, bn_s = _bn(c0)
    params: Params = {"stem": {"w": _conv_w(rng, c0, config.in_channels, k), "bn": bn_p}, "stages": []}
    state: Params = {"stem": {"bn": bn_s}, "stages": []}
    in_c = c0
    for width, strides in zip(config.widths, block_strides(config)):
        p_stage, s_stage = [], []
        for stride in strides:
            p_blk: Params = {"w1": _conv_w(rng, width, in_c, 3), "w2": _conv_w(rng, width, width, 3)}
            s_blk: Params = {}
            p_blk["bn1"], s_blk["bn1"] = _bn(width)
            p_blk["bn2"], s_blk["bn2"] = _bn(width)
            if stride != 1 or in_c != width:
                p_blk["down_w"] = _conv_w(rng, width, in_c, 1)
                p_blk["down_bn"], s_blk["down_bn"] = _bn(width)
            p_stage.append(p_blk)
            s_stage.append(s_blk)
            in_c = width
        params["stages"].append(p_stage)
        state["stages"].append(s_stage)
    bound = 1.0 / np.sqrt(in_c)  # PyTorch's nn.Linear init
    params["fc"] = {"w": rng.uniform(-bound, bound, (in_c, config.num_classes)).astype(np.float32),
                    "b": rng.uniform(-bound, bound, (config.num_classes,)).astype(np.float32)}
    return params, state


def _batch_norm(config: ResNetConfig, x: Any, p: Params, s: Params, training: bool) -> tuple[Any, Params]:
    y, mean, var = nn.batch_norm(x, p["gamma"], p["beta"], s["mean"], s["var"], training=training,
                                 momentum=config.bn_momentum, eps=config.bn_eps)
    return y, {"mean": mean, "var": var}


def _block(config: ResNetConfig, x: Any, p: Params, s: Params, stride: int, training: bool) -> tuple[Any, Params]:
    """relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""
    new: Params = {}
    h, new["bn1"] = _batch_norm(config, nn.conv(x, p["w1"], stride=stride, padding=1), p["bn1"], s["bn1"], training)
    h = nn.relu(h)
    h, new["bn2"] = _batch_norm(config, nn.conv(h, p["w2"], padding=1), p["bn2"], s["bn2"], training)
    if "down_w" in p:
        x, new["down_bn"] = _batch_norm(config, nn.conv(x, p["down_w"], stride=stride), p["down_bn"],
                                        s["down_bn"], training)
    return nn.relu(h + x), new


def apply(config: ResNetConfig, params: Params, state: Params, x: Any, training: bool) -> tuple[Any, Params]:
    """(logits [N, classes], new state). In training the batch statistics normalize and the
    running ones move toward them; in inference the running ones normalize, unchanged."""
    k, stride, pad, pool = _STEMS[config.stem]
    new: Params = {"stem": {}, "stages": []}
    h = nn.conv(x, params["stem"]["w"], stride=stride, padding=pad)
    h, new["stem"]["bn"] = _batch_norm(config, h, params["stem"]["bn"], state["stem"]["bn"], training)
    h = nn.relu(h)
    if pool:
        h = nn.max_pool(h, 3, 2, padding=1)
    for p_stage, s_stage, strides in zip(params["stages"], state["stages"], block_strides(config)):
        s_new = []
        for p_blk, s_blk, st in zip(p_stage, s_stage, strides):
            h, s_out = _block(config, h, p_blk, s_blk, st, training)
            s_new.append(s_out)
        new["stages"].append(s_new)
    h = anp.mean(h, axis=(2, 3))  # global average pooling
    return h @ params["fc"]["w"] + params["fc"]["b"], new


def forward(config: ResNetConfig, params: Params, state: Params, x: Any) -> Any:
    """Inference logits (batch norm with the running statistics)."""
    return apply(config, params, state, x, training=False)[0]


def loss_fn(config: ResNetConfig, params: Params, state: Params, x: Any, labels: Any) -> tuple[Any, Params]:
    """(mean softmax cross-entropy, new batch-norm state), batch norm in training mode."""
    logits, new_state = apply(config, params, state, x, training=True)
    return nn.cross_entropy(logits, labels), new_state


def train_step(config: ResNetConfig, params: Params, state: Params, velocity: Params, x: Any, labels: Any,
               lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 0.0) -> tuple[Params, Params, Params, Any]:
    """One step of SGD with (heavy-ball) momentum on the cross-entropy, L2 weight decay
    added to the gradient as PyTorch's SGD does: (params, state, velocity, loss)."""
    (loss, new_state), grads = axle.value_and_grad(lambda p: loss_fn(config, p, state, x, labels),
                                                   has_aux=True)(params)
    if weight_decay:
        grads = axle.tree_util.tree_map(lambda g, p: g + weight_decay * p, grads, params)
    params, velocity = sgd(lr, momentum).update(grads, velocity, params)
    return params, new_state, velocity, loss


def make_forward(config: ResNetConfig, device: Any = None) -> Any:
    """``forward`` compiled for ``device``: f(params, state, x) -> logits."""
    return axle.jit(lambda params, state, x: forward(config, params, state, x), device=device)


def make_train_step(config: ResNetConfig, lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 0.0,
                    device: Any = None) -> Any:
    """``train_step`` compiled for ``device``:
    f(params, state, velocity, x, labels) -> (params, state, velocity, loss)."""
    return axle.jit(lambda params, state, velocity, x, labels: train_step(
        config, params, state, velocity, x, labels, lr, momentum, weight_decay), device=device)


def init_velocity(params: Params) -> Params:
    """SGD's momentum buffers: zeros like the parameters."""
    return axle.tree_util.tree_map(np.zeros_like, params)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="ResNet-18 training steps on random data.")
    ap.add_argument("--variant", choices=["cifar", "imagenet"], default="cifar")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default=None, help="device name, e.g. cpu:0, opencl:0")
    args = ap.parse_args(argv)
    config = CIFAR if args.variant == "cifar" else IMAGENET
    size = 32 if args.variant == "cifar" else 224
    dev = axle.device(args.device) if args.device else axle.default_device()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 3, size, size)).astype(np.float32)
    labels = rng.integers(0, config.num_classes, args.batch).astype(np.int32)
    params, state = axle.device_put(init(config), dev)
    velocity = axle.device_put(init_velocity(params), dev)
    step = make_train_step(config, device=dev)
    print(f"ResNet-18 ({args.variant}), batch {args.batch} at {size}x{size}, on {dev.name}")
    for i in range(args.steps):
        t0 = time.perf_counter()
        params, state, velocity, loss = step(params, state, velocity, x, labels)
        print(f"step {i}: loss {float(loss):.4f}  ({(time.perf_counter() - t0) * 1e3:.0f} ms)")
    t0 = time.perf_counter()
    logits = np.asarray(make_forward(config, dev)(params, state, x))
    print(f"forward: logits {logits.shape}, {(time.perf_counter() - t0) * 1e3:.0f} ms (first call compiles)")


if __name__ == "__main__":
    main()
