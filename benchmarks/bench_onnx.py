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
        if got.shape != want.shape:
            raise AssertionError(f"{what}: {name} gives shape {got.shape}, onnxruntime {want.shape}")
        err = float(np.max(np.abs(got - want))) / scale
        if not err < REL_TOL:
            raise AssertionError(f"{what}: {name} differs from onnxruntime by {err:.3g} (relative)")
        worst = max(worst, err)
    return worst


def _onnx_impls(model: Any, dev: Any) -> tuple[dict[str, Callable[[], Any]], np.ndarray]:
    """onnxruntime and axle.onnx on ``dev`` over the example's seeded inputs, and the
    reference output (onnxruntime's)."""
    ex = load_example("onnx_models")
    feeds = ex.inputs_for(model)
    session = _ort_session(model)
    f = axle.onnx.load(model, device=dev)
    placed = {k: axle.device_put(v, dev) for k, v in feeds.items()}
    fns: dict[str, Callable[[], Any]] = {"onnxruntime": lambda: session.run(None, feeds),
                                         "axle-cpu (axle.onnx)": lambda: f(**placed)}
    return fns, session.run(None, feeds)[0]


def _row(workload: str, fns: dict[str, Callable[[], Any]], want: np.ndarray, repeats: int) -> Row:
    err = _check(fns, want, workload)
    times = measure(fns, repeats=repeats, warmup=1, sync=_sync)
    return Row(SUITE, workload, times, extra={"max rel. diff vs onnxruntime": f"{err:.1e}"},
               baseline="onnxruntime")


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
    return _row(f"LSTM {inputs} x {hidden}, {steps} steps, batch {batch}", fns, want, 20 if quick else 200)


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
    return [_row(resnet_name, *_onnx_impls(resnet, dev), reps),
            _lstm_row(dev, quick),
            _row(gpt2_name, *_onnx_impls(gpt2, dev), reps)]
