"""The conformance kit as a pytest plugin and as `python -m axle.testing NAME`: it passes a
good backend, and separates claimed-but-failing checks from unclaimed ones."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

LIAR = textwrap.dedent("""
    from axle.backend import Buffer, Capabilities, Device
    from axle.backends.interpreter import InterpreterBackend, InterpreterExecutable
    from axle.ir.ops import CORE_PRIMITIVES, Op

    class Exe(InterpreterExecutable):
        def execute(self, args):
            outs = super().execute(args)
            if any(n.op is Op.ADD for c in self.module.computations() for n in c.nodes):  # a broken add
                outs = [Buffer(b.device, b.type, (b.handle + 1).astype(b.handle.dtype)) for b in outs]
            return outs

    class Backend(InterpreterBackend):
        name = "liar"
        def __init__(self):
            self._device = Device("liar", 0, "claims add, gets it wrong; does not claim dot")
        def capabilities(self, device):
            return Capabilities(ops=CORE_PRIMITIVES - {Op.DOT_GENERAL})
        def compile(self, module, device, options):
            return Exe(module, device)
""")


def env_with(tmp_path) -> dict[str, str]:
    (tmp_path / "liar_plugin.py").write_text(LIAR)
    dist = tmp_path / "axle_liar-0.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: axle-liar\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text("[axle.backends]\nliar = liar_plugin:Backend\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AXLE_BACKENDS", "AXLE_FLAGS", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(tmp_path)
    return env


def test_pytest_plugin_runs_the_kit_on_the_template(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pytest", "--axle-backend", "template", "--axle-quick", "-q",
                        "-p", "no:cacheprovider"], cwd=tmp_path, env=env_with(tmp_path), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    out = r.stdout
    assert "axle conformance: template" in out
    assert re.search(r"claimed by the device:\s+\d+ passed, 0 failed", out)
    assert re.search(r"not claimed \(host fallback\):\s+[1-9]\d* passed, 0 failed", out)
    assert re.search(r"dot\s+claimed 0/0\s+fallback (\d+)/\1", out)  # the template claims no dot


def test_claimed_but_failing_is_reported_apart_from_unclaimed(tmp_path):
    r = subprocess.run([sys.executable, "-m", "axle.testing", "liar", "-k", "op.add or dot"], cwd=tmp_path,
                       env=env_with(tmp_path), capture_output=True, text=True, timeout=600)
    out = r.stdout
    assert r.returncode == 1, out[-3000:]
    assert re.search(r"claimed by the device:\s+\d+ passed, [1-9]\d* failed", out), out[-3000:]
    assert re.search(r"not claimed \(host fallback\):\s+[1-9]\d* passed, 0 failed", out)
    failing = out.split("CLAIMED BUT FAILING (backend bugs):", 1)[1]
    assert "\n  op.add/add-f32[7]\n" in failing and "dot/" not in failing.split("\n\n")[0]
    assert "NOT CLAIMED, FALLBACK FAILING" not in out


def test_unknown_backend_is_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "axle.testing", "nosuch"], cwd=tmp_path, env=env_with(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "no backend 'nosuch' is installed" in r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "axle.testing"], capture_output=True, text=True)
    assert r.returncode == 2 and "usage: python -m axle.testing NAME" in r.stderr


def test_in_process_failures_print_the_check_inputs_module_and_sources(tmp_path):
    r = subprocess.run([sys.executable, "-m", "axle.testing", "liar", "--in-process", "-k", "op.add/add-f32[7]"],
                       cwd=tmp_path, env=env_with(tmp_path), capture_output=True, text=True, timeout=600)
    out = r.stdout
    assert r.returncode == 1, out[-3000:]
    report = out.split("check op.add/add-f32[7] on liar:0 FAILED: AssertionError", 1)[1]
    assert "--- inputs ---\n  %0: float32[7] = [" in report and "check_named('op.add/add-f32[7]')" in report
    assert "--- module ---\nmodule @add_f32_7" in report
    assert "--- kernel_sources() of add_f32_7 on liar:0, optimized ---\n(none reported)" in report
