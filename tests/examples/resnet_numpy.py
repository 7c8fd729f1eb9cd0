"""An independent NumPy (float64) ResNet: forward and hand-written backward of every layer,
the oracle for examples/resnet.py (same parameter pytree, same math, no axle inside)."""
from __future__ import annotations

from typing import Any

import numpy as np

Tree = Any


def _windows(xp: np.ndarray, k: int, stride: int, out_hw: tuple[int, int]):  # noqa: ANN202 - generator
    """(a, b, the strided view of xp that kernel tap (a, b) reads) for each tap."""
    ho, wo = out_hw
    for a in range(k):
        for b in range(k):
            yield a, b, np.s_[:, :, a:a + stride * (ho - 1) + 1:stride, b:b + stride * (wo - 1) + 1:stride]


def _out_hw(x: np.ndarray, k: int, stride: int, pad: int) -> tuple[int, int]:
    return ((x.shape[2] + 2 * pad - k) // stride + 1, (x.shape[3] + 2 * pad - k) // stride + 1)


def _pad(x: np.ndarray, pad: int, value: float = 0.0) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=value)


def conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Cross-correlation, NCHW x OIHW, one einsum per kernel tap."""
    k = w.shape[2]
    hw = _out_hw(x, k, stride, pad)
    xp = _pad(x, pad)
    out = np.zeros((x.shape[0], w.shape[0], *hw))
    for a, b, view in _windows(xp, k, stride, hw):
        out += np.einsum("nchw,oc->nohw", xp[view], w[:, :, a, b])
    return out


def conv_bwd(dy: np.ndarray, x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dw) of ``conv``: each tap's contribution routed back to its inputs and weights."""
    k = w.shape[2]
    xp = _pad(x, pad)
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    for a, b, view in _windows(xp, k, stride, dy.shape[2:]):
        dw[:, :, a, b] = np.einsum("nohw,nchw->oc", dy, xp[view])
        dxp[view] += np.einsum("nohw,oc->nchw", dy, w[:, :, a, b])
    return dxp[:, :, pad:pad + x.shape[2], pad:pad + x.shape[3]], dw


def bn_train(x: np.ndarray, p: Tree, s: Tree, momentum: float, eps: float) -> tuple[np.ndarray, Tree, Tree]:
    """(y, new running stats, cache): batch statistics (biased variance) normalize; the
    running variance moves toward the unbiased one."""
    n = x.size / x.shape[1]
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    inv = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean[None, :, None, None]) * inv[None, :, None, None]
    y = xhat * p["gamma"][None, :, None, None] + p["beta"][None, :, None, None]
    new = {"mean": (1 - momentum) * s["mean"] + momentum * mean,
           "var": (1 - momentum) * s["var"] + momentum * var * n / (n - 1)}
    return y, new, (xhat, inv, p["gamma"])


def bn_train_bwd(dy: np.ndarray, cache: Tree) -> tuple[np.ndarray, Tree]:
    xhat, inv, gamma = cache
    n = xhat.size / xhat.shape[1]
    axes = (0, 2, 3)
    dgamma, dbeta = (dy * xhat).sum(axes), dy.sum(axes)
    dxhat = dy * gamma[None, :, None, None]
    dx = (inv[None, :, None, None] / n) * (n * dxhat - dxhat.sum(axes)[None, :, None, None]
                                           - xhat * (dxhat * xhat).sum(axes)[None, :, None, None])
    return dx, {"gamma": dgamma, "beta": dbeta}


def bn_infer(x: np.ndarray, p: Tree, s: Tree, eps: float) -> np.ndarray:
    c = (None, slice(None), None, None)
    return (x - s["mean"][c]) / np.sqrt(s["var"][c] + eps) * p["gamma"][c] + p["beta"][c]


def max_pool(x: np.ndarray, k: int, stride: int, pad: int) -> tuple[np.ndarray, Any]:
    hw = _out_hw(x, k, stride, pad)
    xp = _pad(x, pad, -np.inf)
    views = list(_windows(xp, k, stride, hw))
    stacked = np.stack([xp[v] for _, _, v in views])
    first = stacked.argmax(axis=0)  # the gradient goes to the first maximum of a window
    return stacked.max(axis=0), (x.shape, xp.shape, views, first, pad)


def max_pool_bwd(dy: np.ndarray, cache: Any) -> np.ndarray:
    shape, pshape, views, first, pad = cache
    dxp = np.zeros(pshape)
    for i, (_, _, v) in enumerate(views):
        dxp[v] += np.where(first == i, dy, 0.0)
    return dxp[:, :, pad:pad + shape[2], pad:pad + shape[3]]


def _strides(config: Any) -> list[list[int]]:
    return [[2 if (s > 0 and b == 0) else 1 for b in range(n)] for s, n in enumerate(config.blocks)]


def _stem(config: Any) -> tuple[int, int, bool]:
    return {"imagenet": (2, 3, True), "cifar": (1, 1, False)}[config.stem]


def forward(config: Any, params: Tree, state: Tree, x: np.ndarray) -> np.ndarray:
    """Inference logits."""
    eps = config.bn_eps
    stride, pad, pool = _stem(config)
    h = np.maximum(bn_infer(conv(x, params["stem"]["w"], stride, pad), params["stem"]["bn"],
                            state["stem"]["bn"], eps), 0)
    if pool:
        h = max_pool(h, 3, 2, 1)[0]
    for ps, ss, sts in zip(params["stages"], state["stages"], _strides(config)):
        for p, s, st in zip(ps, ss, sts):
            r = np.maximum(bn_infer(conv(h, p["w1"], st, 1), p["bn1"], s["bn1"], eps), 0)
            r = bn_infer(conv(r, p["w2"], 1, 1), p["bn2"], s["bn2"], eps)
            if "down_w" in p:
                h = bn_infer(conv(h, p["down_w"], st, 0), p["down_bn"], s["down_bn"], eps)
            h = np.maximum(r + h, 0)
    return h.mean(axis=(2, 3)) @ params["fc"]["w"] + params["fc"]["b"]


def _conv_bn(x: np.ndarray, w: np.ndarray, p: Tree, s: Tree, stride: int, pad: int, config: Any,
             tape: list) -> tuple[np.ndarray, Tree]:
    y, new, cache = bn_train(conv(x, w, stride, pad), p, s, config.bn_momentum, config.bn_eps)
    tape.append((x, w, stride, pad, cache))
    return y, new


def _conv_bn_bwd(dy: np.ndarray, rec: Any) -> tuple[np.ndarray, np.ndarray, Tree]:
    x, w, stride, pad, cache = rec
    dz, dbn = bn_train_bwd(dy, cache)
    dx, dw = conv_bwd(dz, x, w, stride, pad)
    return dx, dw, dbn


def loss_and_grads(config: Any, params: Tree, state: Tree, x: np.ndarray, labels: np.ndarray
                   ) -> tuple[float, Tree, Tree]:
    """(mean cross-entropy, gradient pytree, new batch-norm state), batch norm in training."""
    stride, pad, pool = _stem(config)
    stem_tape: list = []
    new_state: Tree = {"stem": {}, "stages": []}
    z, new_state["stem"]["bn"] = _conv_bn(x, params["stem"]["w"], params["stem"]["bn"], state["stem"]["bn"],
                                          stride, pad, config, stem_tape)
    h = np.maximum(z, 0)
    relu_stem = z > 0
    pool_cache = None
    if pool:
        h, pool_cache = max_pool(h, 3, 2, 1)
    blocks = []  # per block: (tapes, masks)
    for ps, ss, sts in zip(params["stages"], state["stages"], _strides(config)):
        s_new = []
        for p, s, st in zip(ps, ss, sts):
            tape: list = []
            new: Tree = {}
            z1, new["bn1"] = _conv_bn(h, p["w1"], p["bn1"], s["bn1"], st, 1, config, tape)
            r = np.maximum(z1, 0)
            z2, new["bn2"] = _conv_bn(r, p["w2"], p["bn2"], s["bn2"], 1, 1, config, tape)
            short = h
            if "down_w" in p:
                short, new["down_bn"] = _conv_bn(h, p["down_w"], p["down_bn"], s["down_bn"], st, 0, config, tape)
            out = z2 + short
            blocks.append((tape, z1 > 0, out > 0, "down_w" in p))
            h = np.maximum(out, 0)
            s_new.append(new)
        new_state["stages"].append(s_new)
    pooled = h.mean(axis=(2, 3))
    logits = pooled @ params["fc"]["w"] + params["fc"]["b"]
    m = logits.max(axis=1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    n = len(labels)
    loss = -logp[np.arange(n), labels].mean()
    # backward
    dlogits = np.exp(logp)
    dlogits[np.arange(n), labels] -= 1.0
    dlogits /= n
    grads: Tree = {"fc": {"w": pooled.T @ dlogits, "b": dlogits.sum(axis=0)}, "stages": []}
    dh = np.broadcast_to((dlogits @ params["fc"]["w"].T)[:, :, None, None], h.shape) / (h.shape[2] * h.shape[3])
    g_blocks = []
    for tape, mask1, mask_out, has_down in reversed(blocks):
        g: Tree = {}
        dout = dh * mask_out
        dshort = dout
        if has_down:
            dshort, g["down_w"], g["down_bn"] = _conv_bn_bwd(dout, tape[2])
        dr, g["w2"], g["bn2"] = _conv_bn_bwd(dout, tape[1])
        dx1, g["w1"], g["bn1"] = _conv_bn_bwd(dr * mask1, tape[0])
        dh = dx1 + dshort
        g_blocks.append(g)
    g_blocks.reverse()
    it = iter(g_blocks)
    grads["stages"] = [[next(it) for _ in ps] for ps in params["stages"]]
    if pool:
        dh = max_pool_bwd(dh, pool_cache)
    _, grads_stem_w, grads_stem_bn = _conv_bn_bwd(dh * relu_stem, stem_tape[0])
    grads["stem"] = {"w": grads_stem_w, "bn": grads_stem_bn}
    return float(loss), grads, new_state


def train_step(config: Any, params: Tree, state: Tree, velocity: Tree, x: np.ndarray, labels: np.ndarray,
               lr: float, momentum: float, weight_decay: float, tree_map: Any) -> tuple[Tree, Tree, Tree, float]:
    """SGD with momentum (v <- m v + g + wd p; p <- p - lr v), as examples/resnet.py."""
    loss, grads, new_state = loss_and_grads(config, params, state, x, labels)
    grads = tree_map(lambda g, p: g + weight_decay * p, grads, params)
    velocity = tree_map(lambda v, g: momentum * v + g, velocity, grads)
    params = tree_map(lambda p, v: p - lr * v, params, velocity)
    return params, new_state, velocity, loss
