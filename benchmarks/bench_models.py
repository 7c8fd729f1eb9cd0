"""ResNet-18 (examples/resnet.py) on axle-cpu against jax.jit, torch (eager and
``torch.compile``) and, for inference, onnxruntime: the same network with the same weights
in each, checked to agree before anything is timed.

Rows: forward at 224x224 (batch 1 and 32, inference batch norm) and a training step at
32x32 (CIFAR variant, batch 32: forward with batch norm in training mode, cross-entropy,
gradient, SGD with momentum). torch runs a functional copy of the network (torch.nn.functional
over the same parameter pytree); the ONNX model is built with onnx's helper API from that
pytree. A missing library drops its column. The first call (trace and compile) of each
implementation is reported in an extra column.

``quick`` shrinks everything (64x64 forward batch 1, 16x16 training at batch 4). Set
``AXLE_BENCH_RESNET`` to pick rows and sizes, e.g. ``fwd:224:1,fwd:224:32,train:32:32``
(kind, image size, batch): batch 32 at 224x224 takes seconds per call.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable
from typing import Any

try:  # first: it sets the thread-waiting policy of the libraries NumPy loads
    from benchmarks.common import Row, measure
except ImportError:  # run as a script from benchmarks/
    from common import Row, measure  # type: ignore[no-redef]

import numpy as np

SUITE = "models"
HERE = os.path.dirname(os.path.abspath(__file__))
HYPER = {"lr": 0.1, "momentum": 0.9}
FULL = "fwd:224:1,fwd:224:32,train:32:32"
QUICK = "fwd:64:1,train:16:4"
#: calls of each implementation right after its first (see _first_calls): axle-cpu decides
#: its splits on a kernel's first 10 launches (axle_cpu.executable._Launch.LAUNCHES)
SETTLE_CALLS = 11
#: each timed call follows calls of its own for at least this long (common.measure)
SETTLE_MS = 100.0


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("_axle_example_resnet", os.path.join(HERE, "..", "examples",
                                                                                        "resnet.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _optional(name: str) -> Any:
    try:
        return __import__(name)
    except Exception:  # noqa: BLE001 - every peer is optional
        return None


def _sync(r: Any) -> Any:
    leaves = r if isinstance(r, (tuple, list)) else [r]
    for x in leaves:
        if hasattr(x, "block_until_ready"):
            x.block_until_ready()
        elif hasattr(x, "detach"):
            x.detach()
        else:
            np.asarray(x)
    return r


# ---------------------------------------------------------------- the network in torch


def _torch_net(torch: Any, R: Any, config: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(forward(params, state, x) -> logits (inference), loss(params, state, x, labels)
    with batch norm in training mode updating ``state`` in place), over torch tensors in
    the example's pytree layout."""
    F = torch.nn.functional
    k, stride, pad, pool = R._STEMS[config.stem]
    strides = R.block_strides(config)

    def bn(x: Any, p: Any, s: Any, training: bool) -> Any:
        return F.batch_norm(x, s["mean"], s["var"], p["gamma"], p["beta"], training, config.bn_momentum,
                            config.bn_eps)

    def apply(params: Any, state: Any, x: Any, training: bool) -> Any:
        h = F.relu(bn(F.conv2d(x, params["stem"]["w"], stride=stride, padding=pad), params["stem"]["bn"],
                      state["stem"]["bn"], training))
        if pool:
            h = F.max_pool2d(h, 3, 2, 1)
        for ps, ss, sts in zip(params["stages"], state["stages"], strides):
            for p, s, st in zip(ps, ss, sts):
                r = F.relu(bn(F.conv2d(h, p["w1"], stride=st, padding=1), p["bn1"], s["bn1"], training))
                r = bn(F.conv2d(r, p["w2"], padding=1), p["bn2"], s["bn2"], training)
                if "down_w" in p:
                    h = bn(F.conv2d(h, p["down_w"], stride=st), p["down_bn"], s["down_bn"], training)
                h = F.relu(r + h)
        return h.mean(dim=(2, 3)) @ params["fc"]["w"] + params["fc"]["b"]

    def forward(params: Any, state: Any, x: Any) -> Any:
        return apply(params, state, x, False)

    def loss(params: Any, state: Any, x: Any, labels: Any) -> Any:
        return F.cross_entropy(apply(params, state, x, True), labels)

    return forward, loss


def _torch_impls(torch: Any, R: Any, config: Any, kind: str, params: Any, state: Any, x: np.ndarray,
                 labels: np.ndarray) -> dict[str, Callable[[], Any]]:
    from torch.utils._pytree import tree_leaves, tree_map

    forward, loss = _torch_net(torch, R, config)
    tp = tree_map(lambda a: torch.from_numpy(np.array(a)), params)
    ts = tree_map(lambda a: torch.from_numpy(np.array(a)), state)
    tx, ty = torch.from_numpy(x), torch.from_numpy(labels.astype(np.int64))
    if kind == "fwd":
        cf = torch.compile(forward)

        def eager() -> Any:
            with torch.inference_mode():
                return forward(tp, ts, tx)

        def compiled() -> Any:
            with torch.inference_mode():
                return cf(tp, ts, tx)

        return {"torch eager": eager, "torch.compile": compiled}

    def step(fn: Callable[..., Any]) -> Callable[[], Any]:
        """A training loop of its own (parameters, statistics, optimizer), so that each
        implementation's first step starts from the same weights."""
        p, s = tree_map(torch.clone, tp), tree_map(torch.clone, ts)
        leaves = tree_leaves(p)
        for t in leaves:
            t.requires_grad_(True)
        opt = torch.optim.SGD(leaves, lr=HYPER["lr"], momentum=HYPER["momentum"])

        def run() -> Any:
            opt.zero_grad(set_to_none=True)
            out = fn(p, s, tx, ty)
            out.backward()
            opt.step()
            return out.detach()

        return run

    return {"torch eager": step(loss), "torch.compile": step(torch.compile(loss))}


# ---------------------------------------------------------------- the network in jax


def _jax_impls(jax: Any, R: Any, config: Any, kind: str, params: Any, state: Any, x: np.ndarray,
               labels: np.ndarray) -> dict[str, Callable[[], Any]]:
    jnp, lax = jax.numpy, jax.lax
    k, stride, pad, pool = R._STEMS[config.stem]
    strides = R.block_strides(config)
    m, eps = config.bn_momentum, config.bn_eps

    def conv(x: Any, w: Any, s: int, p: int) -> Any:
        return lax.conv_general_dilated(x, w, (s, s), [(p, p), (p, p)], dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def bn(x: Any, p: Any, s: Any, training: bool) -> tuple[Any, Any]:
        c = (None, slice(None), None, None)
        if training:
            mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
            n = x.size / x.shape[1]
            new = {"mean": (1 - m) * s["mean"] + m * mean, "var": (1 - m) * s["var"] + m * var * n / (n - 1)}
        else:
            mean, var, new = s["mean"], s["var"], s
        return (x - mean[c]) * lax.rsqrt(var[c] + eps) * p["gamma"][c] + p["beta"][c], new

    def apply(params: Any, state: Any, x: Any, training: bool) -> tuple[Any, Any]:
        new: Any = {"stem": {}, "stages": []}
        h, new["stem"]["bn"] = bn(conv(x, params["stem"]["w"], stride, pad), params["stem"]["bn"],
                                  state["stem"]["bn"], training)
        h = jax.nn.relu(h)
        if pool:
            h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)])
        for ps, ss, sts in zip(params["stages"], state["stages"], strides):
            s_new = []
            for p, s, st in zip(ps, ss, sts):
                b: Any = {}
                r, b["bn1"] = bn(conv(h, p["w1"], st, 1), p["bn1"], s["bn1"], training)
                r, b["bn2"] = bn(conv(jax.nn.relu(r), p["w2"], 1, 1), p["bn2"], s["bn2"], training)
                if "down_w" in p:
                    h, b["down_bn"] = bn(conv(h, p["down_w"], st, 0), p["down_bn"], s["down_bn"], training)
                h = jax.nn.relu(r + h)
                s_new.append(b)
            new["stages"].append(s_new)
        return h.mean(axis=(2, 3)) @ params["fc"]["w"] + params["fc"]["b"], new

    jp, js = jax.device_put(params), jax.device_put(state)
    jx, jy = jax.device_put(x), jax.device_put(labels)
    if kind == "fwd":
        f = jax.jit(lambda p, s, x: apply(p, s, x, False)[0])
        return {"jax.jit": lambda: f(jp, js, jx)}

    def loss(p: Any, s: Any, x: Any, y: Any) -> tuple[Any, Any]:
        logits, new = apply(p, s, x, True)
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean(), new

    @jax.jit
    def step(p: Any, s: Any, v: Any, x: Any, y: Any) -> Any:
        (value, new), g = jax.value_and_grad(loss, has_aux=True)(p, s, x, y)
        v = jax.tree_util.tree_map(lambda v_, g_: HYPER["momentum"] * v_ + g_, v, g)
        p = jax.tree_util.tree_map(lambda p_, v_: p_ - HYPER["lr"] * v_, p, v)
        return p, new, v, value

    carry = [jp, js, jax.tree_util.tree_map(jnp.zeros_like, jp)]

    def run() -> Any:
        p, s, v, value = step(*carry, jx, jy)
        carry[:] = [p, s, v]
        return value

    return {"jax.jit": run}


# ---------------------------------------------------------------- the network in ONNX


def _onnx_model(onnx: Any, R: Any, config: Any, params: Any, state: Any) -> Any:
    """The inference network as an ONNX graph (opset 17): Conv, BatchNormalization, Relu,
    MaxPool, Add, GlobalAveragePool, Flatten, Gemm; weights as initializers."""
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    inits: list[Any] = []
    names = iter(range(1 << 30))

    def const(a: np.ndarray) -> str:
        name = f"w{next(names)}"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(a, np.float32), name))
        return name

    def node(op: str, ins: list[str], **attrs: Any) -> str:
        out = f"t{next(names)}"
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def conv_bn(x: str, w: np.ndarray, p: Any, s: Any, stride: int, pad: int) -> str:
        kk = w.shape[2]
        y = node("Conv", [x, const(w)], kernel_shape=[kk, kk], strides=[stride, stride], pads=[pad] * 4)
        return node("BatchNormalization", [y, const(p["gamma"]), const(p["beta"]), const(s["mean"]),
                                           const(s["var"])], epsilon=config.bn_eps)

    k, stride, pad, pool = R._STEMS[config.stem]
    h = node("Relu", [conv_bn("x", params["stem"]["w"], params["stem"]["bn"], state["stem"]["bn"], stride, pad)])
    if pool:
        h = node("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for ps, ss, sts in zip(params["stages"], state["stages"], R.block_strides(config)):
        for p, s, st in zip(ps, ss, sts):
            r = node("Relu", [conv_bn(h, p["w1"], p["bn1"], s["bn1"], st, 1)])
            r = conv_bn(r, p["w2"], p["bn2"], s["bn2"], 1, 1)
            if "down_w" in p:
                h = conv_bn(h, p["down_w"], p["down_bn"], s["down_bn"], st, 0)
            h = node("Relu", [node("Add", [r, h])])
    flat = node("Flatten", [node("GlobalAveragePool", [h])])
    nodes.append(helper.make_node("Gemm", [flat, const(params["fc"]["w"]), const(params["fc"]["b"])], ["logits"]))
    graph = helper.make_graph(nodes, "resnet18", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _onnx_impls(R: Any, config: Any, params: Any, state: Any, x: np.ndarray) -> dict[str, Callable[[], Any]]:
    onnx, ort = _optional("onnx"), _optional("onnxruntime")
    if onnx is None or ort is None:
        return {}
    model = _onnx_model(onnx, R, config, params, state)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return {"onnxruntime": lambda: sess.run(None, {"x": x})[0]}


# ---------------------------------------------------------------- rows


def _axle_impls(R: Any, config: Any, kind: str, params: Any, state: Any, x: np.ndarray,
                labels: np.ndarray) -> dict[str, Callable[[], Any]]:
    import axle

    dev = axle.device("cpu:0")
    p, s, dx = axle.device_put((params, state, x), dev)
    if kind == "fwd":
        f = R.make_forward(config, dev)
        return {"axle-cpu": lambda: f(p, s, dx)}
    step = R.make_train_step(config, device=dev, **HYPER)
    carry = [p, s, axle.device_put(R.init_velocity(params), dev)]

    def run() -> Any:
        p_, s_, v_, loss = step(*carry, dx, labels)
        carry[:] = [p_, s_, v_]
        return loss

    return {"axle-cpu": run}


def _first_calls(fns: dict[str, Callable[[], Any]]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Seconds of each implementation's first call (tracing and compiling) and its result.
    Each then runs ``SETTLE_CALLS`` more times at once (untimed): axle-cpu measures on its
    first calls whether each kernel pays to split across threads, which it must do while
    no other library's threads spin on the cores (measure() interleaves the libraries)."""
    secs, outs = {}, {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        out = _sync(fn())
        secs[name] = round(time.perf_counter() - t0, 2)
        for _ in range(SETTLE_CALLS):
            _sync(fn())
        outs[name] = np.asarray(out.detach() if hasattr(out, "detach") else out, np.float64)
    return secs, outs


def _check_agree(workload: str, outs: dict[str, np.ndarray], rtol: float) -> float:
    """Every implementation computes the same numbers (logits, or the first step's loss):
    a benchmark of a wrong answer is worthless. Returns the largest relative difference."""
    ref = outs["axle-cpu"]
    scale = max(1e-6, float(np.abs(ref).max()))
    worst = max(float(np.abs(o - ref).max()) / scale for o in outs.values())
    if worst > rtol:
        raise RuntimeError(f"{workload}: the implementations disagree (max relative difference {worst:.2e}): "
                           + ", ".join(f"{k} {np.ravel(v)[:3]}" for k, v in outs.items()))
    return worst


def _row(R: Any, kind: str, size: int, batch: int, repeats: int) -> Row:
    config = R.IMAGENET if size >= 64 else R.CIFAR
    torch, jax = _optional("torch"), _optional("jax")
    rng = np.random.default_rng(0)
    params, state = R.init(config, seed=0)
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    labels = rng.integers(0, config.num_classes, batch).astype(np.int32)
    fns = _axle_impls(R, config, kind, params, state, x, labels)
    if jax is not None:
        fns.update(_jax_impls(jax, R, config, kind, params, state, x, labels))
    if torch is not None:
        fns.update(_torch_impls(torch, R, config, kind, params, state, x, labels))
    if kind == "fwd":
        fns.update(_onnx_impls(R, config, params, state, x))
    what = "forward" if kind == "fwd" else "training step (SGD momentum, BN training)"
    workload = f"ResNet-18 {what} {size}x{size} batch {batch}"
    first, outs = _first_calls(fns)
    worst = _check_agree(workload, outs, 1e-3)
    # the first calls were the warm-up; onnxruntime's pool spins for tens of ms after a call
    times = measure(fns, repeats=repeats, warmup=0, sync=_sync, settle_ms=SETTLE_MS)
    extra: dict[str, Any] = {"first call s": first, "max rel diff": worst}
    flops = _forward_flops(R, config, size) * batch * (1 if kind == "fwd" else 3)
    extra["GFLOP/s"] = {k: round(flops / (t * 1e-3) / 1e9, 1) for k, t in times.items()}
    return Row(SUITE, workload, times, extra, baseline="axle-cpu")


def _forward_flops(R: Any, config: Any, size: int) -> float:
    """2 x multiply-adds of the convolutions and the dense layer of one image (the
    training step counts 3x: forward, and two convolutions per layer backward)."""
    k, stride, pad, pool = R._STEMS[config.stem]
    hw = (size + 2 * pad - k) // stride + 1
    c = config.widths[0]
    total = 2.0 * hw * hw * c * config.in_channels * k * k
    if pool:
        hw = (hw + 2 - 3) // 2 + 1
    in_c = c
    for width, strides in zip(config.widths, R.block_strides(config)):
        for st in strides:
            out = (hw - 1) // st + 1
            total += 2.0 * out * out * width * in_c * 9 + 2.0 * out * out * width * width * 9
            if st != 1 or in_c != width:
                total += 2.0 * out * out * width * in_c
            hw, in_c = out, width
    return total + 2.0 * in_c * config.num_classes


def _plan(quick: bool) -> list[tuple[str, int, int]]:
    spec = os.environ.get("AXLE_BENCH_RESNET") or (QUICK if quick else FULL)
    out = []
    for item in spec.split(","):
        kind, size, batch = item.strip().split(":")
        if kind not in ("fwd", "train"):
            raise ValueError(f"AXLE_BENCH_RESNET: kind must be fwd or train, got {item!r}")
        out.append((kind, int(size), int(batch)))
    return out


def run(quick: bool) -> list[Row]:
    R = _example()
    rows = []
    for kind, size, batch in _plan(quick):
        # a training step or a batch of 32 takes seconds in some implementations
        repeats = 10 if kind == "fwd" and batch == 1 and not quick else 3
        rows.append(_row(R, kind, size, batch, repeats))
    return rows
