"""examples/resnet.py against an independent NumPy float64 ResNet (tests/examples/
resnet_numpy.py, hand-written backward): inference forward and one full training step
(batch norm in training mode, its running statistics, SGD with momentum and weight decay)
of small versions of both variants on every device; the full-size parameter counts."""
from __future__ import annotations

import numpy as np
import pytest
import resnet_numpy as ref
from example_loader import load_example

import axle
from axle.tree_util import tree_leaves, tree_map

R = load_example("resnet")

#: both variants, shrunk: an identity block (4 -> 4 channels) then a stride-2 block with a
#: 1x1 shortcut (4 -> 8 channels); the ImageNet stem's stride-2 conv and max pool halve 16 twice
SMALL = {
    "cifar": (R.ResNetConfig(blocks=(1, 1), widths=(4, 8), stem="cifar", num_classes=5), 8),
    "imagenet": (R.ResNetConfig(blocks=(1, 1), widths=(4, 8), stem="imagenet", num_classes=5), 16),
}
DEVICES = ["cpu:0", "opencl:0", "template:0", "interpreter:0"]
HYPER = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3}
#: PoCL compiles the ImageNet stem's training step (~130 kernels) in one to two minutes on
#: 2 cores: the full sweep runs it, the fast tier has the CIFAR one on opencl
_SLOW = {("opencl:0", "imagenet")}
TRAIN_CASES = [pytest.param(d, v, id=f"{d}-{v}", marks=[pytest.mark.full_only] if (d, v) in _SLOW else [])
               for d in DEVICES for v in SMALL]


def _f64(tree):  # noqa: ANN001, ANN202
    return tree_map(lambda a: np.asarray(a, np.float64), tree)


def _setup(variant: str, batch: int = 3):  # noqa: ANN202
    """A small net with non-trivial batch-norm parameters and running statistics, a
    non-zero momentum buffer, a batch and its labels."""
    config, size = SMALL[variant]
    rng = np.random.default_rng(1)
    params, state = R.init(config, seed=2)
    for bn in _bns(params):
        bn["gamma"][:] = rng.uniform(0.5, 1.5, bn["gamma"].shape)
        bn["beta"][:] = rng.uniform(-0.3, 0.3, bn["beta"].shape)
    for st in _bns(state):
        st["mean"][:] = rng.uniform(-0.2, 0.2, st["mean"].shape)
        st["var"][:] = rng.uniform(0.5, 2.0, st["var"].shape)
    velocity = tree_map(lambda p: (0.01 * rng.standard_normal(p.shape)).astype(np.float32), params)
    x = rng.standard_normal((batch, config.in_channels, size, size)).astype(np.float32)
    labels = rng.integers(0, config.num_classes, batch).astype(np.int32)
    return config, params, state, velocity, x, labels


def _bns(tree):  # noqa: ANN001, ANN202
    """Every batch-norm dict (parameters or statistics) of a params or state tree."""
    out = []
    if isinstance(tree, dict):
        if {"gamma", "beta"} <= tree.keys() or {"mean", "var"} <= tree.keys():
            return [tree]
        for v in tree.values():
            out += _bns(v)
    elif isinstance(tree, list):
        for v in tree:
            out += _bns(v)
    return out


def _close(got, want, rtol: float) -> None:  # noqa: ANN001
    """Leaf by leaf, relative to each leaf's largest value (batch-norm gradients of a
    tiny batch mix terms of very different sizes)."""
    gl, wl = tree_leaves(got), tree_leaves(want)
    assert len(gl) == len(wl)
    for g, w in zip(gl, wl):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max())))


@pytest.mark.parametrize("variant", list(SMALL))
@pytest.mark.parametrize("device", DEVICES)
def test_forward_matches_numpy(device: str, variant: str) -> None:
    config, params, state, _, x, _ = _setup(variant)
    dev = axle.device(device)
    got = np.asarray(R.make_forward(config, dev)(*axle.device_put((params, state, x), dev)))
    want = ref.forward(config, _f64(params), _f64(state), x.astype(np.float64))
    assert got.shape == (x.shape[0], config.num_classes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device, variant", TRAIN_CASES)
def test_train_step_matches_numpy(device: str, variant: str) -> None:
    config, params, state, velocity, x, labels = _setup(variant)
    dev = axle.device(device)
    step = R.make_train_step(config, device=dev, **HYPER)
    p1, s1, v1, loss = step(*axle.device_put((params, state, velocity, x), dev), labels)
    wp, ws, wv, wloss = ref.train_step(config, _f64(params), _f64(state), _f64(velocity), x.astype(np.float64),
                                       labels, tree_map=tree_map, **HYPER)
    assert abs(float(loss) - wloss) <= 1e-4 * max(1.0, abs(wloss))
    _close(v1, wv, 2e-3)  # the momentum buffer: m v + gradient + weight decay
    _close(p1, wp, 2e-3)
    _close(s1, ws, 1e-4)  # the running statistics moved toward the batch's
    assert any(not np.allclose(a, b) for a, b in zip(tree_leaves(s1), tree_leaves(state)))


def test_numpy_reference_gradient_is_the_loss_slope() -> None:
    """The oracle's own check: its hand-written gradient against central differences of its
    loss, along a random direction, in float64."""
    config, params, state, _, x, labels = _setup("imagenet")
    params, state, x = _f64(params), _f64(state), x.astype(np.float64)
    rng = np.random.default_rng(5)
    direction = tree_map(lambda p: rng.standard_normal(p.shape), params)
    _, grads, _ = ref.loss_and_grads(config, params, state, x, labels)
    slope = sum(float(np.sum(g * d)) for g, d in zip(tree_leaves(grads), tree_leaves(direction)))
    eps = 1e-6

    def loss_at(t: float) -> float:
        moved = tree_map(lambda p, d: p + t * d, params, direction)
        return ref.loss_and_grads(config, moved, state, x, labels)[0]

    fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps)
    assert abs(fd - slope) <= 1e-5 * max(1.0, abs(slope))


def test_train_steps_reduce_the_loss() -> None:
    """A few steps on one batch on cpu:0: the loss falls (the update has the right sign)."""
    config, params, state, _, x, labels = _setup("cifar")
    dev = axle.device("cpu:0")
    step = R.make_train_step(config, device=dev, **HYPER)
    params, state, x = axle.device_put((params, state, x), dev)
    velocity = axle.device_put(R.init_velocity(params), dev)
    losses = []
    for _ in range(8):
        params, state, velocity, loss = step(params, state, velocity, x, labels)
        losses.append(float(loss))
    assert losses[-1] < 0.6 * losses[0], losses


@pytest.mark.parametrize("config, count", [(R.IMAGENET, 11_689_512), (R.CIFAR, 11_173_962)],
                         ids=["imagenet", "cifar"])
def test_full_size_is_resnet18(config, count: int) -> None:  # noqa: ANN001
    """The parameter counts of torchvision's resnet18 (ImageNet) and the usual CIFAR-10
    ResNet-18 (3x3 stem, 10 classes): batch-norm scales and shifts included, running
    statistics not."""
    params, state = R.init(config)
    assert sum(p.size for p in tree_leaves(params)) == count
    assert len(R.block_strides(config)) == 4 and all(len(s) == 2 for s in R.block_strides(config))
    assert sum(s.size for s in tree_leaves(state)) == 2 * sum(bn["gamma"].size for bn in _bns(params))
