"""The kit's execution-contract sections catch the bugs they are for: a device whose
``to_host`` does not wait for work still running (late/), and an executable that shares
its scratch memory between calls (threads/); a correct asynchronous device passes both.
Fake plugins derived from the interpreter, found through a dist-info on PYTHONPATH."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from axle.testing.kit import kit_checks

PLUGIN = textwrap.dedent("""
    import threading
    import time

    import numpy as np

    from axle.backend import Buffer, Device
    from axle.backends.interpreter import InterpreterBackend, InterpreterExecutable


    class Pending:
        '''A result the device writes when its kernel completes.'''
        def __init__(self):
            self.array, self.done = None, threading.Event()


    class AsyncExe(InterpreterExecutable):
        '''Returns at once; the results are written 20 ms later, as a device queue would.'''
        def execute(self, args):
            types, pending = self.module.entry.result_types, []
            pending = [Pending() for _ in types]

            def complete():
                time.sleep(0.02)
                for p, o in zip(pending, InterpreterExecutable.execute(self, args)):
                    p.array = o.handle
                    p.done.set()

            threading.Thread(target=complete, daemon=True).start()
            return [Buffer(self.device, t, p) for t, p in zip(types, pending)]


    class Waits(InterpreterBackend):
        '''A correct asynchronous device: to_host waits for the kernel.'''
        name = "waits"
        def __init__(self):
            self._device = Device(self.name, 0, "completes work late")
        def compile(self, module, device, options):
            return AsyncExe(module, device)
        def to_host(self, buffer):
            h = buffer.handle
            if isinstance(h, Pending):
                self._wait(h)
                return np.array(h.array) if h.array is not None else np.zeros(buffer.type.shape, buffer.type.dtype.np)
            return super().to_host(buffer)
        def _wait(self, pending):
            pending.done.wait()


    class Late(Waits):
        '''Reads results back without waiting for the kernel: zeros until it completes.'''
        name = "late"
        def _wait(self, pending):
            pass


    class RacyExe(InterpreterExecutable):
        '''Computes into one output area shared by every call, then copies it out.'''
        shared = {}
        def execute(self, args):
            outs = super().execute(args)
            RacyExe.shared["out"] = [o.handle for o in outs]
            time.sleep(0.002)
            return [Buffer(o.device, o.type, np.array(h)) for o, h in zip(outs, RacyExe.shared["out"])]


    class Racy(InterpreterBackend):
        name = "racy"
        def __init__(self):
            self._device = Device(self.name, 0, "not thread-safe")
        def compile(self, module, device, options):
            return RacyExe(module, device)
""")
BACKENDS = {"waits": "Waits", "late": "Late", "racy": "Racy"}


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("contract")
    (root / "kit_contract_fakes.py").write_text(PLUGIN)
    dist = root / "axle_kit_contract_fakes-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: axle-kit-contract-fakes\nVersion: 0.0\n")
    eps = "\n".join(f"{n} = kit_contract_fakes:{c}" for n, c in BACKENDS.items())
    (dist / "entry_points.txt").write_text(f"[axle.backends]\n{eps}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AXLE_FLAGS", "PYTEST_ADDOPTS")}
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    env.update(PYTHONPATH=path, AXLE_BACKENDS=f"{','.join(BACKENDS)},interpreter")
    return env


def run_kit(env: dict[str, str], backend: str, select: str, cwd) -> subprocess.CompletedProcess:  # noqa: ANN001
    return subprocess.run([sys.executable, "-m", "axle.testing", backend, "--quick", "-k", select, "--timeout", "60"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def failed_ids(out: str) -> set[str]:
    # pytest's summary line may go on with " - <message>" (it does when CI=true)
    return set(re.findall(r"FAILED \S*test_conformance\[(.+?)\](?: - |\n|$)", out, re.M))


SELECT = "late/ or threads/"
_QUICK = kit_checks(quick=True)  # built once: every pytest process collecting this file pays for it
LATE = {c.id for c in _QUICK if c.category == "late"}
THREADS = {c.id for c in _QUICK if c.category == "threads"}


def test_a_correct_asynchronous_device_passes(plugin_env, tmp_path):
    r = run_kit(plugin_env, "waits", SELECT, tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert re.search(rf"claimed by the device:\s+{len(LATE) + len(THREADS)} passed, 0 failed", r.stdout)


def test_to_host_that_does_not_wait_fails_late_checks(plugin_env, tmp_path):
    r = run_kit(plugin_env, "late", "late/", tmp_path)
    assert r.returncode == 1, r.stdout[-4000:]
    assert failed_ids(r.stdout) == LATE, r.stdout[-4000:]
    assert "(to_host at once)" in r.stdout  # the first read, made before the kernel completed


def test_executables_sharing_scratch_fail_thread_checks(plugin_env, tmp_path):
    r = run_kit(plugin_env, "racy", SELECT, tmp_path)
    assert r.returncode == 1, r.stdout[-4000:]
    assert failed_ids(r.stdout) == THREADS, r.stdout[-4000:]  # one call at a time is right
    assert re.search(r"thread [01]: AssertionError", r.stdout)


def test_kernel_budget_is_one_kernel_per_launch_and_two_where_it_reduces():
    from axle.ir import Builder, DType
    from axle.ir.types import TensorType
    from axle.passes import optimize
    from axle.testing.cases import fused_cases
    from axle.testing.contract import kernel_budget

    softmax = next(c for c in fused_cases() if c.id == "softmax-f32[4, 5]")
    fusions, most, per_op = kernel_budget(optimize(softmax.module))
    assert fusions >= 1 and most < per_op  # one kernel per member op is over the budget
    b = Builder("sum")
    x = b.parameter(TensorType(DType.FLOAT32, (1 << 20,)))
    # an unfused reduction may be split into a partial and a final pass
    assert kernel_budget(b.build(b.reduce(x, kind="sum", axes=(0,)))) == (0, 2, 1)
