"""``axle run MODEL.onnx``: load, compile, run, and report (shapes, kernels, placement,
compile and run time), optionally timed and compared with onnxruntime."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import onnx

from ..errors import AxleError
from .check import problems
from .function import OnnxFunction, _load_model
from .table import DTYPES


def random_inputs(model: onnx.ModelProto, given: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """Values for the model's inputs: ``given`` ones, seeded random ones of the declared
    shapes for the rest (floats normal, integers and bools zero: safe as indices)."""
    rng = np.random.default_rng(seed)
    init = {i.name for i in model.graph.initializer}
    out: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        if vi.name in given:
            out[vi.name] = given[vi.name]
            continue
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if any(d is None for d in dims):
            raise AxleError(f"axle run: input {vi.name!r} has dynamic dims {[d.dim_param for d in t.shape.dim]}: "
                            f"give its value with --input {vi.name}=FILE.npy")
        dt = DTYPES.get(t.elem_type, np.dtype(np.float32))
        shape = tuple(int(d) for d in dims if d is not None)
        out[vi.name] = rng.standard_normal(shape).astype(dt) if dt.kind == "f" else np.zeros(shape, dt)
    return out


def _parse_inputs(items: list[str]) -> dict[str, np.ndarray]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise AxleError(f"axle run: --input {item!r} must look like NAME=FILE.npy")
        out[name] = np.load(path)
    return out


def _summary(f: OnnxFunction, inputs: dict[str, np.ndarray]) -> list[str]:
    expl = f.lower(**inputs).explain(source=False)
    lines = [f"kernels: {len(expl.kernels)}", "placement:", *expl.placement_text()]
    return lines


def _compare(model: onnx.ModelProto, inputs: dict[str, np.ndarray], outs: dict[str, np.ndarray]) -> int:
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]  # no stubs; the test extra, an optional comparison
    except ImportError:
        print("compare: onnxruntime is not installed (pip install onnxruntime)")
        return 1
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)))
    status = 0
    for name, got in outs.items():
        want = ref[name]
        if got.shape != want.shape:
            print(f"compare {name}: shape {got.shape} vs onnxruntime {want.shape}: DIFFERENT")
            status = 1
            continue
        if got.dtype.kind == "f":
            err = float(np.max(np.abs(got.astype(np.float64) - want)) if got.size else 0.0)
            tol = 1e-3 * (1 + float(np.max(np.abs(want))) if want.size else 1)
            ok = err <= tol
            print(f"compare {name}: max abs difference {err:.3g} (tolerance {tol:.3g}): {'ok' if ok else 'DIFFERENT'}")
        else:
            ok = bool(np.array_equal(got, want))
            print(f"compare {name}: {'equal' if ok else 'DIFFERENT'}")
        status |= not ok
    return status


def run(args: argparse.Namespace) -> int:
    try:
        model = _load_model(args.model)
        if args.check:
            found = problems(model)
            for p in found:
                print(p)
            print(f"{args.model}: {len(found)} problem{'s' if len(found) != 1 else ''}"
                  + ("" if found else ": every node is supported"))
            return 1 if found else 0
        f = OnnxFunction(model, device=args.device, constants=args.initializers_as_constants)
        inputs = random_inputs(model, _parse_inputs(args.input), args.seed)
        t0 = time.perf_counter()
        outs = {k: np.asarray(v) for k, v in f(as_dict=True, **inputs).items()}
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        f(**inputs)
        again = time.perf_counter() - t0
        print(f"model {args.model}: {f!r}")
        for name, v in outs.items():
            print(f"output {name}: {v.dtype}{list(v.shape)}")
        print(*_summary(f, inputs), sep="\n")
        print(f"compile + first run: {first * 1e3:.1f} ms; run: {again * 1e3:.3f} ms")
        if args.bench:
            times = []
            for _ in range(args.bench):
                t0 = time.perf_counter()
                res = f(**inputs)
                np.asarray(res[0])
                times.append(time.perf_counter() - t0)
            ts = np.array(times) * 1e3
            print(f"bench {args.bench} runs: median {np.median(ts):.3f} ms, min {ts.min():.3f} ms")
        if args.compare:
            return _compare(model, inputs, outs)
    except AxleError as e:
        print(f"axle run: {e}", file=sys.stderr)
        return 2
    return 0


def lower_model(model: Any, device: Any = None) -> Any:
    """``axle explain MODEL.onnx``: the jit ``Lowered`` of the model on seeded inputs."""
    m = _load_model(model)
    return OnnxFunction(m, device=device).lower(**random_inputs(m, {}))
