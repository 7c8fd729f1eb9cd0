"""Where an eager op's wall time goes on opencl:0 (PoCL), beside jax's eager add.

Samples of CALLS eager adds on f32[8] then a read (``bench_core.py``'s dispatch row), the
variants interleaved in one process; per add, medians of: the wall time, the main thread's
CPU time (``time.thread_time``), the process's CPU time (PoCL's worker threads included),
and the read's wall time (what the wait costs after the calls). "axle (enqueue)" is the
calls alone, the queue drained before them (the row's "(enqueue)").

``--spread`` pins the main thread to CPU 0 and PoCL's two worker threads one to each CPU:
what the scheduler does when the host's other core is idle (a quiet machine), where they
otherwise run on the main thread's core when the other one is busy. Linux only; the
workers are the threads the first OpenCL use started.

    .venv/bin/python benchmarks/eager_split.py [--spread] [--samples N] [--calls N]
"""
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from statistics import median

import numpy as np

import axle
import axle.numpy as anp


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spread", action="store_true", help="main thread on CPU 0, PoCL's workers one per CPU")
    p.add_argument("--samples", type=int, default=40)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()
    calls = a.calls
    fns: dict[str, Callable[[], object]] = {}
    try:
        import jax
        import jax.numpy as jnp

        ja = jax.device_put(np.ones(8, np.float32))
        jnp.add(ja, ja).block_until_ready()  # jax's threads started before PoCL's

        def jax_add() -> None:
            for _ in range(calls):
                out = jnp.add(ja, ja)
            out.block_until_ready()
    except ImportError:  # jax is optional
        jax_add = None  # type: ignore[assignment]
    before = _threads()
    dev = axle.device("opencl:0")
    x = axle.device_put(np.ones(8, np.float32), dev)
    np.asarray(anp.add(x, x))
    if a.spread:
        workers = sorted(_threads() - before)
        if len(workers) != 2:
            raise SystemExit(f"--spread expects PoCL's two worker threads, found {len(workers)} new threads")
        os.sched_setaffinity(0, {0})  # this thread only
        os.sched_setaffinity(workers[0], {1})
        os.sched_setaffinity(workers[1], {0})
    read = [0.0]

    def axle_add() -> None:
        for _ in range(calls):
            out = anp.add(x, x)
        t = time.perf_counter()
        np.asarray(out)
        read[0] = time.perf_counter() - t

    def enqueue() -> None:
        for _ in range(calls):
            anp.add(x, x)

    fns = {"axle": axle_add, "axle (enqueue)": enqueue}
    if jax_add is not None:
        fns["jax"] = jax_add
    res: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in fns}
    for s in range(a.samples + 3):
        for k, fn in fns.items():
            x.block_until_ready()  # the queue drained (the gate let go) before each sample
            read[0] = 0.0
            w, t, pc = time.perf_counter(), time.thread_time(), time.process_time()
            fn()
            w, t, pc = time.perf_counter() - w, time.thread_time() - t, time.process_time() - pc
            if s >= 3:  # warm-up
                res[k].append((w, t, pc, read[0]))
    print(f"{'spread' if a.spread else 'unpinned'}, load {os.getloadavg()[0]:.1f}; us per add, "
          f"medians of {a.samples} samples of {calls} adds")
    for k, rows in res.items():
        m = [1e6 * median(r[i] for r in rows) / calls for i in range(4)]
        print(f"  {k:15s} wall {m[0]:5.2f}  main thread {m[1]:5.2f}  process {m[2]:5.2f}  read {m[3]:5.2f}")


if __name__ == "__main__":
    main()
