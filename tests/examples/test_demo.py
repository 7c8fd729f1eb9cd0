"""`make demo` runs examples/demo.py: every device gets the seed example right, the
fused-kernel section runs on every compiling backend, and the real programs (a loop, a
convolution layer) are right everywhere."""
from __future__ import annotations

import subprocess
import sys

from example_loader import EXAMPLES

import axle


def test_demo_runs_and_every_device_is_right() -> None:
    out = subprocess.run([sys.executable, str(EXAMPLES / "demo.py")], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert "WRONG" not in out
    for dev in axle.devices():
        assert any(line.startswith(dev.name) and line.rstrip().endswith("ok") for line in out.splitlines()), dev.name
    assert "== fused kernels" in out
    compiling = {d.name for d in axle.devices() if d.backend not in ("interpreter", "template")}
    rows = [line.split() for line in out.split("== fused kernels")[1].split("== real programs")[0].splitlines()]
    rows = [r for r in rows if r and r[0] in compiling]
    assert len(rows) == len(compiling)
    assert all(r[1] == "1" for r in rows)  # softmax is one fused kernel everywhere
    # real programs: the LSTM's loop and the conv layer are right on every device; the cpu runs
    # the loop natively and the conv layer with its epilogue as one kernel
    real = [line.split() for line in out.split("== real programs")[1].splitlines()[2:]]
    by_dev = {r[0]: r for r in real if r}
    for dev in axle.devices():
        assert by_dev[dev.name][-1] == "ok", by_dev[dev.name]
    assert by_dev["cpu:0"][1] == "native" and by_dev["cpu:0"][-3] == "1"
    cnn = out.split("== a small CNN")[1].splitlines()[1]
    assert float(cnn.rsplit("test accuracy", 1)[1]) >= 0.97, cnn
