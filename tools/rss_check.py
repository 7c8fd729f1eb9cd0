"""Resident memory over many new input shapes: the executable caches must stay bounded.

    python tools/rss_check.py                      # 10,000 shapes on cpu:0, default bound
    python tools/rss_check.py --shapes 2000 --device opencl:0 --cache-size 64

Calls one jitted function with ``--shapes`` distinct input shapes (each a trace, a compile
and a new LLVM engine or OpenCL program), samples the process's RSS, and compares the
RSS after ``--warmup`` shapes (when every cache has filled to its bound) with the largest
RSS seen afterwards. Exits 1 when growth after warm-up exceeds ``--tolerance`` (10%).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=int, default=10_000)
    ap.add_argument("--warmup", type=int, default=1_000, help="shapes before the baseline (caches filled)")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--cache-size", type=int, default=0, help="--jit_cache_size (0: the default)")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--every", type=int, default=500, help="print a sample every N shapes")
    args = ap.parse_args(argv)

    import axle
    import axle.numpy as anp

    axle.config.update(retrace_warning_threshold=-1)  # every call is a retrace, on purpose
    if args.cache_size:
        axle.config.update(jit_cache_size=args.cache_size)
    f = axle.jit(lambda x: anp.tanh(x) * 2.0 + 1.0, device=args.device)
    print(f"device {args.device}, jit_cache_size {axle.config.jit_cache_size}, {args.shapes} shapes, "
          f"warm-up {args.warmup}; RSS at start {rss_mb():.1f} MiB", flush=True)
    t0 = time.perf_counter()
    baseline, peak = 0.0, 0.0
    for n in range(1, args.shapes + 1):
        x = np.full((n,), 0.5, np.float32)
        y = np.asarray(f(x))
        if n % 97 == 0:  # spot-check results: an evicted-and-freed engine must never run
            np.testing.assert_allclose(y, np.tanh(x) * 2.0 + 1.0, rtol=1e-5)
        if n == args.warmup:
            baseline = rss_mb()
        elif n > args.warmup:
            peak = max(peak, rss_mb())
        if n % args.every == 0:
            print(f"  {n:>6} shapes  RSS {rss_mb():8.1f} MiB  cache {len(f._cache)}  "
                  f"{time.perf_counter() - t0:7.1f} s", flush=True)
    growth = (peak - baseline) / baseline if baseline else 0.0
    ok = growth <= args.tolerance
    print(f"RSS after warm-up {baseline:.1f} MiB, peak after {peak:.1f} MiB: growth {100 * growth:+.1f}% "
          f"(limit {100 * args.tolerance:.0f}%) over {args.shapes - args.warmup} new shapes -> "
          f"{'OK' if ok else 'FAIL'}; {time.perf_counter() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
