"""benchmarks/bench_opencl.py's eager dispatch row: axle's eager adds are held back behind
the runtime's gate (runtime.py, ``hold``) on the queue the row's pyopencl baselines share,
so the row must let them go before it finishes that queue. Run in a process of its own
with a time limit: a wait on a held queue never returns."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
import bench_opencl
row = bench_opencl._eager_add(3)
print(sorted(row.times_ms))
"""


def test_the_eager_dispatch_row_finishes_its_queue_without_hanging() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(bench=os.path.join(ROOT, "benchmarks"))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "axle-opencl" in out.stdout and "pyopencl call" in out.stdout
