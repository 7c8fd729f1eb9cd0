"""The convolution layout pass (passes/conv_layout.py) on examples/resnet.py's training
step: an NCHW program on a device that prefers NHWC/HWIO keeps only the transposes that
its parameters' layout and the weight gradients make unavoidable, and computes the same
values. No backend needed: the pass runs with the cpu backend's preference spelled here."""
from __future__ import annotations

from collections import Counter

import numpy as np
from example_loader import load_example

import axle
from axle.config import config
from axle.interpreter import evaluate
from axle.ir import Module, Node, Op
from axle.passes import ConvLayout, LayoutAssignment, default_pipeline
from axle.tree_util import tree_leaves

R = load_example("resnet")

#: the cpu backend's preference (backends/cpu: CONV_LAYOUT), and the same with every copy free
CPU = ConvLayout(lhs="NSC", rhs="SIO", out="NSC", kernel_copy_min_pixels=1024)
ALWAYS = ConvLayout(lhs="NSC", rhs="SIO", out="NSC")


def _step_module(cfg, batch: int, size: int) -> tuple[Module, list[np.ndarray]]:  # noqa: ANN001
    params, state = R.init(cfg, seed=0)
    velocity = R.init_velocity(params)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cfg.in_channels, size, size)).astype(np.float32)
    labels = rng.integers(0, cfg.num_classes, batch).astype(np.int32)
    args = (params, state, velocity, x, labels)
    step = axle.jit(lambda *a: R.train_step(cfg, *a), device="interpreter:0")
    return step.lower(*args).module, tree_leaves(args)


def _optimized(m: Module, pref: ConvLayout) -> Module:
    saved = config.disable_passes
    config.disable_passes = "fusion"  # the transposes as nodes, not inside fusions
    try:
        return default_pipeline(layout=LayoutAssignment(pref)).run(m)[0]
    finally:
        config.disable_passes = saved


def _weight_gradient(conv: Node) -> bool:
    """A weight gradient's kernel is the output gradient: larger than its 3x3 (1x1) result."""
    a = conv.attr
    kernel = np.prod([conv.operands[1].shape[d] for d in a["kernel_spatial_dimensions"]])
    return bool(kernel > np.prod([conv.shape[d] for d in a["output_spatial_dimensions"]]))


def _kind(t: Node, users: list[Node]) -> str:
    """Why a transpose is there (the classes the test allows)."""
    src, perm = t.operands[0], t.attr["permutation"]
    if src.op is Op.PARAMETER and perm == (2, 3, 1, 0):
        return "weight to HWIO"  # a parameter in the program's OIHW: once per call
    if src.op is Op.PARAMETER and perm == (0, 2, 3, 1):
        return "image to NHWC"  # the program's input
    if src.op is Op.CONVOLUTION and all(u.op is not Op.CONVOLUTION for u in users):
        return "weight gradient to OIHW"  # for the update of the OIHW parameter
    if users and all(u.op is Op.CONVOLUTION and _weight_gradient(u) for u in users):
        return "weight-gradient operand"  # x as CHWN (batch contracted), dy as HWNC
    return f"other: {src.op.value} {perm} -> {sorted({u.op.value for u in users})}"


def _transposes(m: Module) -> Counter:
    users = m.entry.users
    return Counter(_kind(n, users[n.uid]) for n in m.entry.nodes if n.op is Op.TRANSPOSE)


def test_a_residual_networks_training_step_keeps_only_the_unavoidable_transposes() -> None:
    # two blocks (the second strided, with a 1x1 shortcut), every convolution in NHWC/HWIO
    cfg = R.ResNetConfig(blocks=(1, 1), widths=(4, 8), stem="cifar", num_classes=5)
    m, args = _step_module(cfg, 2, 8)
    opt = _optimized(m, ALWAYS)
    convs = [n for n in opt.entry.nodes if n.op is Op.CONVOLUTION]
    assert len(convs) == 17 and all(c.attr["output_feature_dimension"] == 3 for c in convs)
    # Per weight (six): its copy into HWIO, shared by the forward convolution and, reversed,
    # by the input gradient's (the 1x1 shortcut's is read as HWOI, a reshape: no copy), and
    # its gradient back to OIHW for the update of the OIHW parameter. Per weight gradient,
    # its two operands (the activation with its batch as the contracted feature, CHWN, and
    # the output gradient as HWNC; the second block's two share their input's): a weight
    # gradient contracts batch and pixels, which no layout of the forward pass has
    # innermost. The image, once. No transpose between two ops that both run in the device
    # layout: batch norm, relu, the residual adds, their gradients and the pooling's stay in it.
    assert _transposes(opt) == {"weight to HWIO": 5, "weight gradient to OIHW": 6, "weight-gradient operand": 11,
                                "image to NHWC": 1}
    want, got = evaluate(m, *args), evaluate(opt, *args)
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-4, atol=2e-4)


def test_the_cifar_resnet18_training_step_on_the_cpu_preference() -> None:
    # batch 32: every convolution has enough pixels to repay its weights' copy (those of
    # 4x4 maps because the input gradient shares it), so all run in NHWC/HWIO, and only
    # the unavoidable transposes remain (main before this pass's cost model: 79)
    m, _ = _step_module(R.CIFAR, 32, 32)
    opt = _optimized(m, CPU)
    kinds = _transposes(opt)
    weights = sum(1 for p in tree_leaves(R.init(R.CIFAR)[0]) if p.ndim == 4)
    assert weights == 20 and not [k for k in kinds if k.startswith("other")], kinds
    assert kinds["weight to HWIO"] <= weights and kinds["weight gradient to OIHW"] <= weights
    assert kinds["weight-gradient operand"] <= 2 * weights and kinds["image to NHWC"] == 1
    assert sum(kinds.values()) <= 68
    # batch 2: convolutions of 16x16 maps and smaller keep the program's layout (their
    # weights' copies would cost more than they gain): the boundaries between the two
    # layouts add transposes of small activations and their gradients (main: 90)
    m, _ = _step_module(R.CIFAR, 2, 32)
    assert sum(_transposes(_optimized(m, CPU)).values()) <= 46


def test_the_imagenet_resnet18_forward_crosses_from_nhwc_to_nchw_once() -> None:
    # batch 1 at 224x224: the stem and the 56x56 and 28x28 stages run in NHWC (the 28x28
    # ones because their input already is: moving it back would cost more than their
    # weights' copies), the 14x14 and 7x7 ones keep NCHW (weights larger than their maps)
    cfg = R.IMAGENET
    params, state = R.init(cfg, seed=0)
    x = np.zeros((1, 3, 224, 224), np.float32)
    fwd = axle.jit(lambda p, s, a: R.forward(cfg, p, s, a), device="interpreter:0")
    opt = _optimized(fwd.lower(params, state, x).module, CPU)
    users = opt.entry.users
    kinds = _transposes(opt)
    assert kinds["image to NHWC"] == 1 and kinds["weight to HWIO"] == 9
    # one transpose back, of the 28x28 stage's output, read by both convolutions after it
    (back,) = [t for t in opt.entry.nodes if t.op is Op.TRANSPOSE and _kind(t, users[t.uid]).startswith("other")]
    assert back.shape == (1, 128, 28, 28) and [u.op for u in users[back.uid]] == [Op.CONVOLUTION] * 2
    assert sum(kinds.values()) == 11
