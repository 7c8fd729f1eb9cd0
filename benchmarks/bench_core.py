"""Core overheads, independent of any compiled backend:

- the seed example ``sum(x + y*z)`` on every available device, eager (one kernel per op)
  and jit (optimized), against NumPy;
- per-op dispatch cost of eager execution on tiny arrays, against NumPy's own dispatch;
- the latency of turning a function into an executable (trace, optimize, backend compile)
  for the seed example and an MLP step, relative to tracing alone;
- a new process's first call (the MNIST MLP training step, a row softmax) without the
  persistent compile cache and with it, against a warm call plus the trace
  (``first_call.py`` in subprocesses).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from statistics import median

import numpy as np
from common import Row, measure

import axle
import axle.numpy as anp


def seed(x, y, z):
    return anp.sum(x + y * z)


def mlp(w1, w2, x):
    h = anp.maximum(x @ w1, 0.0)
    logits = h @ w2
    e = anp.exp(logits - anp.max(logits, axis=1, keepdims=True))
    return e / anp.sum(e, axis=1, keepdims=True)


def _sync(out):
    return np.asarray(out)


def seed_rows(quick: bool) -> list[Row]:
    n = 1 << (14 if quick else 20)
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    rows = []
    for dev in axle.devices():
        xs, ys, zs = axle.device_put((x, y, z), dev)
        f = axle.jit(seed, device=dev)
        _sync(f(xs, ys, zs))

        def eager(xs=xs, ys=ys, zs=zs, dev=dev):
            with dev:
                return seed(xs, ys, zs)

        times = measure({"numpy": lambda: np.sum(x + y * z), "axle jit": lambda f=f: f(xs, ys, zs),
                         "axle eager": eager}, repeats=5 if quick else 15, sync=_sync)
        rows.append(Row("core", f"seed sum(x+y*z) n={n} on {dev.name}", times,
                        extra={"jit kernels": f.lower(xs, ys, zs).compile().report().get("kernels", "?")}))
    return rows


#: the eager dispatch rows: (name, function of (module, a f32[8], a f32[4,4])), each run
#: with NumPy, jax's eager mode and axle.numpy on every device
DISPATCH_OPS = {
    "add f32[8]": lambda m, x, y: m.add(x, x),
    "exp f32[8]": lambda m, x, y: m.exp(x),
    "sum f32[8]": lambda m, x, y: m.sum(x),
    "matmul f32[4,4]": lambda m, x, y: m.matmul(y, y),
}


def dispatch_rows(quick: bool) -> list[Row]:
    """Per-op cost of eager dispatch on tiny arrays (a cached signature: the hot path)
    on every device, against NumPy's own dispatch and jax's eager mode (jax.numpy on
    jax arrays), in microseconds per call. Each sample is CALLS calls, the last result
    waited for (read back, a device's queue drained); the ratios are jax's time over each
    implementation's (at or above 1x: at or under jax's dispatch)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:  # jax is optional
        jax = None
    a, m = np.ones(8, np.float32), np.ones((4, 4), np.float32)
    rows = []
    for dev in axle.devices():
        xa, xm = axle.device_put((a, m), dev)
        for name, op in DISPATCH_OPS.items():
            if name != "add f32[8]" and quick:
                continue
            fns = {"numpy": _per_call(lambda op=op: op(np, a, m)),
                   "axle eager": _per_call(lambda op=op, xa=xa, xm=xm: op(anp, xa, xm), _sync)}
            # each sample starts with the device idle: on an asynchronous device (opencl:0)
            # the kernels another sample left queued would otherwise run in this one's wait
            idle = {"axle eager": lambda xa=xa: xa.block_until_ready()}
            if name == "add f32[8]":  # the calls alone, the device idle when they start: on an
                # asynchronous device (opencl:0) what they cost the program apart from its time
                # to run the kernels (which it pays at its next wait)
                fns["axle eager (enqueue)"] = _per_call(lambda xa=xa: anp.add(xa, xa))
                idle["axle eager (enqueue)"] = idle["axle eager"]
            if jax is not None:
                ja, jm = jax.device_put(a), jax.device_put(m)
                fns["jax eager"] = _per_call(lambda op=op, ja=ja, jm=jm: op(jnp, ja, jm),
                                             lambda r: r.block_until_ready())
            times = measure(fns, repeats=5 if quick else 40, warmup=3, before=idle)
            us = {k: round(v / CALLS * 1e3, 2) for k, v in times.items()}
            rows.append(Row("core", f"eager dispatch {name} on {dev.name} (per call)",
                            {k: v / CALLS for k, v in times.items()}, extra={"us": us},
                            baseline="jax eager" if jax is not None else "numpy", kind="dispatch"))
    return rows


#: calls per timed sample of the jit-call rows: one call is a few microseconds, below what a
#: single perf_counter pair measures well
CALLS = 200


def _per_call(fn, sync=None):
    """CALLS calls of ``fn``, then ``sync`` on the last result (waiting for a device's
    queue: the calls before it stay queued, as eager ops in a program do)."""
    def run():
        for _ in range(CALLS):
            out = fn()
        return out if sync is None else sync(out)
    return run


def jit_call_rows(quick: bool) -> list[Row]:
    """A cached jit call of a one-kernel function (``x + 1`` on f32[8]) with device
    arrays: what every call costs before its kernels (the dispatch path of jit.py and the
    backend's execute), against NumPy's own call and jax.jit's. Milliseconds per call."""
    try:
        import jax
    except ImportError:  # jax is optional
        jax = None
    a = np.arange(8, dtype=np.float32)
    rows = []
    for dev in axle.devices():
        f = axle.jit(lambda x: x + 1, device=dev)
        xa = axle.device_put(a, dev)
        fns = {"numpy": _per_call(lambda: a + 1), "axle jit": _per_call(lambda f=f, xa=xa: f(xa))}
        if jax is not None and dev.backend == "cpu":
            jf, ja = jax.jit(lambda x: x + 1), jax.device_put(a)
            fns["jax.jit"] = _per_call(lambda: jf(ja).block_until_ready())
        times = measure(fns, repeats=5 if quick else 40, warmup=3)
        rows.append(Row("core", f"jit call x+1 f32[8] on {dev.name} (per call)",
                        {k: v / CALLS for k, v in times.items()}))
    return rows


def _latency(fn, args, dev, repeats: int) -> dict[str, float]:
    """Median ms of: trace; trace + optimize; trace + optimize + backend compile."""
    samples: dict[str, list[float]] = {"trace": [], "trace+optimize": [], "trace+compile": []}
    for _ in range(repeats):
        jf = axle.jit(fn, device=dev)
        t0 = time.perf_counter()
        low = jf.lower(*args)
        t1 = time.perf_counter()
        low.optimize()
        t2 = time.perf_counter()
        low.compile()
        t3 = time.perf_counter()
        samples["trace"].append((t1 - t0) * 1e3)
        samples["trace+optimize"].append((t2 - t0) * 1e3)
        # compile() optimizes again, so trace+compile = trace + (optimize + backend compile)
        samples["trace+compile"].append((t1 - t0 + t3 - t2) * 1e3)
    return {k: median(v) for k, v in samples.items()}


def latency_rows(quick: bool) -> list[Row]:
    rng = np.random.default_rng(0)
    seed_args = tuple(np.ones(1024, np.float32) for _ in range(3))
    mlp_args = (rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((32, 10)).astype(np.float32),
                rng.standard_normal((16, 64)).astype(np.float32))
    rows = []
    for dev in axle.devices():
        for name, fn, args in (("seed", seed, seed_args), ("mlp+softmax", mlp, mlp_args)):
            rows.append(Row("core", f"compile latency {name} on {dev.name}",
                            _latency(fn, args, dev, 3 if quick else 10), baseline="trace"))
    return rows


def _first_call(workload: str, device: str, cache: str, then: int = 0) -> dict[str, float]:
    """``first_call.py`` in a new process with ``--compile_cache=cache`` (running the
    program ``then`` more times after its measurements)."""
    env = {**os.environ, "AXLE_FLAGS": f"{os.environ.get('AXLE_FLAGS', '')} --compile_cache={cache}"}
    # as an installed package has its bytecode: without it each module imported lazily in
    # the first call (a backend's planner, its cache reader) is compiled from source there
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "first_call.py"),
                          workload, device, "--then", str(then)], env=env, capture_output=True, text=True,
                         timeout=600)
    if out.returncode:
        raise RuntimeError(f"first_call.py {workload} {device} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fresh_process_rows(quick: bool) -> list[Row]:
    """A new process's first call (trace + optimize + compile + run) with the compile cache
    off, and with a cache an earlier process filled (median of several processes), against
    the same process's warm call plus its trace (the goal: within 1.2x of that)."""
    rows = []
    names = {d.name for d in axle.devices()}
    for device in [d for d in ("cpu:0", "opencl:0") if d in names]:
        for workload, label in (("mnist_mlp", "MNIST MLP 784-1024-1024-10 SGD step, batch 128"),
                                ("softmax", "row softmax [4096, 1024] f32")):
            off = _first_call(workload, device, "off")
            with tempfile.TemporaryDirectory(prefix="axle-bench-cache-") as cache:
                _first_call(workload, device, cache, then=10)  # fills it, as a program run a while
                hits = [_first_call(workload, device, cache) for _ in range(2 if quick else 5)]
            times = {"no disk cache": off["first_ms"], "disk cache": median(h["first_ms"] for h in hits),
                     "warm call + trace": median(h["warm_ms"] + h["trace_ms"] for h in hits)}
            # CPU time, best of the processes: what a loaded machine disturbs least
            cpu = min(hits, key=lambda h: h["first_cpu_ms"])
            ratio = cpu["first_cpu_ms"] / min(h["warm_cpu_ms"] + h["trace_cpu_ms"] for h in hits)
            rows.append(Row("core", f"first call in a new process: {label} on {device}", times,
                            {"disk cache hits": hits[0]["disk_cache_hits"],
                             "CPU ms, disk cache": round(cpu["first_cpu_ms"], 2),
                             "CPU ratio to warm call + trace": round(ratio, 2)}, baseline="warm call + trace"))
    return rows


def run(quick: bool) -> list[Row]:
    return (seed_rows(quick) + dispatch_rows(quick) + jit_call_rows(quick) + latency_rows(quick)
            + fresh_process_rows(quick))
