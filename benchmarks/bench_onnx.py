"""ONNX models (examples/onnx_models.py, random weights) through ``axle.onnx.load`` on cpu:0
against onnxruntime's CPU execution provider (2 threads) and, where a jax version of the
model exists, jax.jit: ResNet-18 at 224x224 batch 1, the seeds' LSTM (3 inputs x 60 hidden,
10 steps, batch 1; also as examples/lstm.py writes it with ``lax.scan`` under axle.jit)
and a GPT-2-style stack (768 wide, 12 heads, 2 blocks, 64 tokens, 50,257-token vocabulary,
output projection tied to the token embedding). ``quick`` runs the examples' small versions.

Every implementation's output is checked against onnxruntime's before it is timed. Inputs
are placed on the device once (jax and axle) or passed as NumPy arrays (onnxruntime)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:  # first: it sets the thread-waiting policy of the libraries NumPy loads
    from benchmarks.common import Row, load_example, measure
except ImportError:  # run as a script from benchmarks/
    from common import Row, load_example, measure  # type: ignore[no-redef]

import numpy as np

import axle
import axle.onnx

SUITE = "onnx models on cpu:0"
ORT_THREADS = 2
#: the tolerance of tests/onnx/test_models.py: max |impl - onnxruntime| / max |onnxruntime|
REL_TOL = 1e-4
#: calls of each implementation right after its first, back to back: axle-cpu measures on
#: its first calls whether each kernel pays to split across threads, which it must do
#: while no other library's threads spin on the cores (measure() interleaves them); it
#: decides on a kernel's first 10 launches (axle_cpu.executable._Launch.LAUNCHES)
SETTLE_CALLS = 11
#: each timed call follows calls of its own for at least this long (common.measure):
#: onnxruntime's pool spins for tens of milliseconds after a call
SETTLE_MS = 100.0


def _ort_session(model: Any) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ORT_THREADS
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _sync(r: Any) -> np.ndarray:
    """The first output as a NumPy array (waits for device work; included in the time)."""
    first = r[0] if isinstance(r, (tuple, list)) else r
    if hasattr(first, "block_until_ready"):
        first = first.block_until_ready()
    return np.asarray(first)


def _check(fns: dict[str, Callable[[], Any]], want: np.ndarray, what: str) -> float:
    """Every implementation gives onnxruntime's output (relative to its largest value) before
    it is timed; returns the worst relative difference."""
    worst = 0.0
    scale = max(float(np.max(np.abs(want))), 1e-30)
    for name, fn in fns.items():
        got = _sync(fn())
        for _ in range(SETTLE_CALLS):  # axle-cpu's thread splits, measured before others spin
            _sync(fn())
        if got.shape != want.shape:
            raise AssertionError(f"{what}: {name} gives shape {got.shape}, onnxruntime {want.shape}")
        err = float(np.max(np.abs(got - want))) / scale
        if not err < REL_TOL:
            raise AssertionError(f"{what}: {name} differs from onnxruntime by {err:.3g} (relative)")
        worst = max(worst, err)
    return worst


def _onnx_impls(model: Any, dev: Any, with_jax: bool = False) -> tuple[dict[str, Callable[[], Any]], np.ndarray]:
    """onnxruntime, axle.onnx on ``dev`` (initializers as arguments, its default) and,
    with ``with_jax``, axle.onnx with the initializers as compile-time constants
    (``constants=True``) and the graph written in jax (when importable) over the example's
    seeded inputs, and the reference output (onnxruntime's)."""
    ex = load_example("onnx_models")
    feeds = ex.inputs_for(model)
    session = _ort_session(model)
    f = axle.onnx.load(model, device=dev)
    placed = {k: axle.device_put(v, dev) for k, v in feeds.items()}
    fns: dict[str, Callable[[], Any]] = {"onnxruntime": lambda: session.run(None, feeds),
                                         "axle-cpu (axle.onnx)": lambda: f(**placed)}
    if with_jax:
        fc = axle.onnx.load(model, device=dev, constants=True)
        fns["axle-cpu (axle.onnx, initializers as constants)"] = lambda: fc(**placed)
    jax = _jax() if with_jax else None
    if jax is not None:
        jf, weights = _jax_model(jax, model)
        jfeeds = jax.device_put(feeds)
        fns["jax.jit"] = lambda: jf(weights, jfeeds)
    return fns, session.run(None, feeds)[0]


def _row(workload: str, fns: dict[str, Callable[[], Any]], want: np.ndarray, repeats: int) -> Row:
    err = _check(fns, want, workload)
    times = measure(fns, repeats=repeats, warmup=1, sync=_sync, settle_ms=SETTLE_MS)
    return Row(SUITE, workload, times, extra={"max rel. diff vs onnxruntime": f"{err:.1e}"},
               baseline="onnxruntime")


# ---------------------------------------------------------------- jax versions


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    vals = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in vals.items()}  # strings come as bytes


def _jax_ops(jax: Any) -> dict[str, Callable[..., Any]]:
    """The ONNX ops the example models use, in jax: ``op(attrs, *inputs) -> output(s)``.
    Shape-giving inputs (Split's sizes, Reshape's shape) arrive as NumPy constants."""
    import jax.numpy as jnp
    from jax import lax

    def conv(a: dict, x: Any, w: Any, b: Any = None) -> Any:
        p = a.get("pads", [0, 0, 0, 0])
        y = lax.conv_general_dilated(x, w, tuple(a.get("strides", (1, 1))), [(p[0], p[2]), (p[1], p[3])],
                                     feature_group_count=a.get("group", 1))
        return y if b is None else y + b[:, None, None]

    def batch_norm(a: dict, x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
        k = scale / jnp.sqrt(var + a.get("epsilon", 1e-5))
        return x * k[:, None, None] + (bias - mean * k)[:, None, None]

    def max_pool(a: dict, x: Any) -> Any:
        (kh, kw), (sh, sw), p = a["kernel_shape"], a.get("strides", (1, 1)), a.get("pads", [0, 0, 0, 0])
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, kh, kw), (1, 1, sh, sw),
                                 ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))

    def layer_norm(a: dict, x: Any, scale: Any, bias: Any) -> Any:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + a.get("epsilon", 1e-5)) * scale + bias

    def split(a: dict, x: Any, sizes: np.ndarray) -> Any:
        return jnp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=a.get("axis", 0))

    def gemm(a: dict, x: Any, w: Any, c: Any) -> Any:
        return (x.T if a.get("transA") else x) @ (w.T if a.get("transB") else w) + c

    return {
        "Conv": conv, "BatchNormalization": batch_norm, "MaxPool": max_pool, "Gemm": gemm,
        "LayerNormalization": layer_norm, "Split": split,
        "Relu": lambda a, x: jax.nn.relu(x),
        "Add": lambda a, x, y: x + y,
        "Mul": lambda a, x, y: x * y,
        "MatMul": lambda a, x, y: x @ y,
        "GlobalAveragePool": lambda a, x: x.mean((2, 3), keepdims=True),
        "Flatten": lambda a, x: x.reshape(int(np.prod(x.shape[:a.get("axis", 1)])), -1),
        "Gather": lambda a, x, i: jnp.take(x, i, axis=a.get("axis", 0)),
        "Reshape": lambda a, x, shape: x.reshape(tuple(int(d) for d in shape)),
        "Transpose": lambda a, x: jnp.transpose(x, a.get("perm")),
        "Softmax": lambda a, x: jax.nn.softmax(x, axis=a.get("axis", -1)),
        "Gelu": lambda a, x: jax.nn.gelu(x, approximate=a.get("approximate", "none") == "tanh"),
    }


def _jax_model(jax: Any, model: Any) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The model's graph written out in jax op by op and jitted as one program (XLA sees the
    whole model, as it would a hand-written jax version), and its float weights as device
    arrays (arguments, not constants folded into the program, as axle.onnx places them)."""
    from onnx import numpy_helper

    ops = _jax_ops(jax)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consts = {k: v for k, v in inits.items() if v.dtype.kind in "iu"}  # ids, sizes and shapes
    nodes = [(n.op_type, _attrs(n), list(n.input), list(n.output)) for n in model.graph.node]
    out = model.graph.output[0].name

    def forward(weights: dict[str, Any], feeds: dict[str, Any]) -> Any:
        env = {**consts, **weights, **feeds}
        for op, attrs, ins, outs in nodes:
            res = ops[op](attrs, *(env[i] for i in ins))
            env.update(zip(outs, res if len(outs) > 1 else [res]))
        return env[out]

    weights = {k: jax.device_put(v) for k, v in inits.items() if k not in consts}
    return jax.jit(forward), weights


# ---------------------------------------------------------------- the LSTM in axle and jax


def _ifgo(m: np.ndarray, h: int) -> np.ndarray:
    """ONNX's gate blocks (i, o, f, c) along the first axis as examples/lstm.py's columns
    (i, f, g, o): [4h, n] -> [n, 4h]."""
    return np.concatenate([m[g * h:(g + 1) * h] for g in (0, 2, 3, 1)], axis=0).T


def _lstm_params(model: Any) -> dict[str, np.ndarray]:
    """The single ONNX LSTM node's W [1, 4h, in], R [1, 4h, h], B [1, 8h] as examples/lstm.py's
    layer {W [in, 4h], U [h, 4h], b [4h]} (B's two halves, Wb and Rb, summed)."""
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = next(n for n in model.graph.node if n.op_type == "LSTM")
    w, r, b = (inits[n][0] for n in node.input[1:4])
    h = r.shape[1]
    bias = (b[:4 * h] + b[4 * h:])[:, None]
    return {"W": np.ascontiguousarray(_ifgo(w, h)), "U": np.ascontiguousarray(_ifgo(r, h)),
            "b": np.ascontiguousarray(_ifgo(bias, h)[0])}


def _jax_lstm_last(jax: Any) -> Callable[..., Any]:
    """One LSTM layer in jax (the input projection before a lax.scan), its last hidden state
    [1, B, H] as the ONNX model's Y_h."""
    import jax.numpy as jnp

    def forward(p: dict[str, Any], xs: Any) -> Any:
        h = p["U"].shape[0]
        t, b = xs.shape[0], xs.shape[1]
        xw = (xs.reshape(t * b, -1) @ p["W"] + p["b"]).reshape(t, b, 4 * h)

        def cell(carry: Any, xp: Any) -> Any:
            hh, c = carry
            z = xp + hh @ p["U"]
            i, f, g, o = (z[:, k * h:(k + 1) * h] for k in range(4))
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            hh = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (hh, c), hh

        zero = jnp.zeros((b, h), xs.dtype)
        (last, _), _ = jax.lax.scan(cell, (zero, zero), xw)
        return last[None]

    return jax.jit(forward)


def _jax() -> Any:
    try:
        import jax
        return jax
    except ImportError:  # jax is optional: its column is left out
        return None


def _lstm_row(dev: Any, quick: bool) -> Row:
    ex, lstm = load_example("onnx_models"), load_example("lstm")
    model = ex.lstm()
    fns, want = _onnx_impls(model, dev)
    x = ex.inputs_for(model)["x"]
    p = _lstm_params(model)
    native = axle.jit(lambda layer, xs: lstm.lstm_layer(layer, xs)[-1:], device=dev)
    dp, dx = axle.device_put(p, dev), axle.device_put(x, dev)
    fns["axle-cpu (examples/lstm.py)"] = lambda: native(dp, dx)
    jax = _jax()
    if jax is not None:
        jf = _jax_lstm_last(jax)
        jp, jx = jax.device_put(p), jax.device_put(x)
        fns["jax.jit"] = lambda: jf(jp, jx)
    steps, batch, inputs = x.shape
    hidden = p["U"].shape[0]
    return _row(f"LSTM {inputs} x {hidden}, {steps} steps, batch {batch}", fns, want, 20 if quick else 80)


def run(quick: bool) -> list[Row]:
    ex = load_example("onnx_models")
    dev = axle.device("cpu:0")
    if quick:
        resnet, resnet_name = ex.SMALL["resnet"](), "ResNet (basic blocks [1, 1], width 8), 32x32, batch 1"
        gpt2, gpt2_name = ex.SMALL["gpt2"](), "GPT-2-style stack (32 wide, 4 heads, 2 blocks, 8 tokens, vocab 97)"
    else:
        resnet, resnet_name = ex.resnet(), "ResNet-18, 224x224, batch 1"
        gpt2, gpt2_name = ex.gpt2(), "GPT-2-style stack (768 wide, 12 heads, 2 blocks, 64 tokens, vocab 50,257, tied)"
    reps = 3 if quick else 10
    return [_row(resnet_name, *_onnx_impls(resnet, dev, with_jax=True), reps),
            _lstm_row(dev, quick),
            _row(gpt2_name, *_onnx_impls(gpt2, dev, with_jax=True), reps)]
