"""benchmarks/bench_opencl.py's eager dispatch row: axle's eager adds are held back behind
the runtime's gate (runtime.py, ``hold``) on the queue the row's pyopencl baselines share,
so the row must let them go before it finishes that queue. Run in a process of its own
with a time limit: a wait on a held queue never returns."""
from __future__ import annotations

import importlib.util
import os
import re
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


def test_eager_split_reports_each_variant_per_add() -> None:
    """benchmarks/eager_split.py (docs/backend-opencl.md, "Eager"): wall, main-thread CPU,
    process CPU and read time per add for axle, its calls alone and (when installed) jax."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "eager_split.py"), "--samples", "2",
                          "--calls", "20"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line.split()[0] + (" (enqueue)" if "(enqueue)" in line else ""): line
            for line in out.stdout.splitlines()[1:] if line.strip()}
    has_jax = importlib.util.find_spec("jax") is not None  # an optional peer (make bench installs it)
    assert set(rows) == {"axle", "axle (enqueue)"} | ({"jax"} if has_jax else set()), out.stdout
    for line in rows.values():
        values = [float(v) for v in re.findall(r"(?:wall|thread|process|read) +([0-9.]+)", line)]
        assert len(values) == 4 and all(v >= 0 for v in values), line  # wall, main thread, process, read
