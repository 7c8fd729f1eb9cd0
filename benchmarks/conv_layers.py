"""Per-layer convolution throughput on axle-cpu: each distinct convolution of ResNet-18's
forward at 224x224 (the 7x7/2 stem, the 3x3/1 layers at 56, 28, 14 and 7 pixels, the 3x3/2
and 1x1/2 downsampling layers), in GFLOP per CPU-second against the one-thread FMA peak
measured in the same run and, when onnxruntime is installed, against its single Conv node
on one thread (``intra_op_num_threads=1``) with the same weights.

Not a ``bench_*`` module (``make bench`` does not run it): a tool for working on the
convolution kernels. Times are CPU seconds of one thread (``AXLE_CPU_THREADS=1``, set
here), the best of several calls, so that a loaded machine slows nothing it measures::

    python benchmarks/conv_layers.py --batch 32 --batch 1 [--layout NCHW] [--only 3x3/1]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ["AXLE_CPU_THREADS"] = "1"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# after the thread settings, which the libraries read when they load
import bench_cpu
import numpy as np

#: name, kernel size, stride, padding, input features, output features, input size
LAYERS = [("stem 7x7/2", 7, 2, 3, 3, 64, 224),
          ("3x3/1 56 64", 3, 1, 1, 64, 64, 56),
          ("3x3/2 56->28 64-128", 3, 2, 1, 64, 128, 56),
          ("3x3/1 28 128", 3, 1, 1, 128, 128, 28),
          ("1x1/2 56->28 64-128", 1, 2, 0, 64, 128, 56),
          ("3x3/2 28->14 128-256", 3, 2, 1, 128, 256, 28),
          ("3x3/1 14 256", 3, 1, 1, 256, 256, 14),
          ("1x1/2 28->14 128-256", 1, 2, 0, 128, 256, 28),
          ("3x3/2 14->7 256-512", 3, 2, 1, 256, 512, 14),
          ("3x3/1 7 512", 3, 1, 1, 512, 512, 7),
          ("1x1/2 14->7 256-512", 1, 2, 0, 256, 512, 14)]


def cpu_best(fn: Callable[[], Any], calls: int, budget_s: float = 1.5) -> float:
    """The fewest CPU seconds of ``fn`` over at least ``calls`` calls (more within the budget)."""
    fn()
    best, start, i = float("inf"), time.process_time(), 0
    while i < calls or (time.process_time() - start < budget_s and i < 50):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
        i += 1
    return best


def one_thread_peak() -> float:
    """bench_cpu's FMA peak loop, timed in CPU seconds (its wall clock counts the other
    processes of a loaded machine), the best of three."""
    wall = bench_cpu.time.perf_counter
    bench_cpu.time.perf_counter = time.process_time
    try:
        return max(bench_cpu.fma_peak_gflops() for _ in range(3))
    finally:
        bench_cpu.time.perf_counter = wall


def ort_conv(k: int, s: int, p: int, w_oihw: np.ndarray) -> Any:
    """A one-thread onnxruntime session of one Conv node (NCHW, the weights an initializer),
    or None without onnx/onnxruntime."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w_oihw, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def layer_row(axle: Any, n: int, layer: tuple, nchw: bool, peak: float, rng: np.random.Generator) -> str:
    from axle import lax

    name, k, s, p, ci, co, hw = layer
    x = rng.standard_normal((n, hw, hw, ci)).astype(np.float32)
    w = (rng.standard_normal((k, k, ci, co)) * 0.05).astype(np.float32)
    x_nchw, w_oihw = np.ascontiguousarray(x.transpose(0, 3, 1, 2)), np.ascontiguousarray(w.transpose(3, 2, 0, 1))
    dn = ("NCHW", "OIHW", "NCHW") if nchw else ("NHWC", "HWIO", "NHWC")
    f = axle.jit(lambda a, b: lax.conv_general_dilated(a, b, (s, s), [(p, p), (p, p)], dimension_numbers=dn),
                 device="cpu:0")
    dx, dw = axle.device_put((x_nchw, w_oihw) if nchw else (x, w), "cpu:0")
    out = np.asarray(f(dx, dw))
    out_nhwc = out.transpose(0, 2, 3, 1) if nchw else out
    flops = 2 * n * out_nhwc.shape[1] * out_nhwc.shape[2] * co * ci * k * k
    calls = 3 if flops > 5e9 else 8
    t = cpu_best(lambda: f(dx, dw).block_until_ready(), calls)
    line = f"{name:22s} | {t * 1e3:8.2f} | {flops / t / 1e9:6.1f} | {100 * flops / t / 1e9 / peak:4.0f}%"
    sess = ort_conv(k, s, p, w_oihw)
    if sess is not None:
        ref = sess.run(None, {"x": x_nchw})[0].transpose(0, 2, 3, 1)
        err = float(np.abs(ref - out_nhwc).max() / np.abs(ref).max())
        if err > 1e-4:
            raise AssertionError(f"{name}: axle-cpu and onnxruntime differ (max relative difference {err:.1e})")
        to = cpu_best(lambda: sess.run(None, {"x": x_nchw}), calls)
        line += f" | {to * 1e3:8.2f} | {flops / to / 1e9:6.1f} | {to / t:5.2f}"
    return line


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, action="append", help="batch sizes (default 32 and 1)")
    ap.add_argument("--layout", choices=["NHWC", "NCHW"], default="NHWC",
                    help="NHWC/HWIO (the layout pass's choice for big maps) or NCHW/OIHW")
    ap.add_argument("--only", default="", help="only the layers whose name contains this")
    args = ap.parse_args(argv)
    import axle

    peak = one_thread_peak()
    print(f"one-thread FMA peak {peak:.1f} GFLOP/s (CPU time); layout {args.layout}")
    rng = np.random.default_rng(0)
    for n in args.batch or [32, 1]:
        print(f"batch {n}: layer | axle ms | GFLOP/s | of peak | onnxruntime ms | GFLOP/s | ort/axle")
        for layer in LAYERS:
            if args.only in layer[0]:
                print(layer_row(axle, n, layer, args.layout == "NCHW", peak, rng), flush=True)


if __name__ == "__main__":
    main()
