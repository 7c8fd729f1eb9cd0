"""The conformance kit and `axle doctor` survive backends that crash and hang.

A scaffold from `axle new-backend` is broken on purpose, the way bring-ups break: its
kernels segfault on sine, never return on cosine, write into their input on negate,
every fusion is compiled as one kernel per op, and its batched builds (the kit's
prebuild) segfault. The kit must finish, fail exactly those
checks with their ids, module text and kernel sources, and exit non-zero; the doctor must
print its whole table. The scaffold is found through a dist-info on PYTHONPATH (no pip
install: these tests stay fast)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import tomllib

from axle.ir.ops import BASE_PRIMITIVES, CORE_PRIMITIVES
from axle.scaffold import new_backend
from axle_template.backend import CLAIMED_EXTENDED

NAME = "brk"
BREAKAGE = textwrap.dedent('''

    # ---- broken on purpose by tests/sdk/test_kit_crashes.py ----
    import contextlib as _contextlib
    import ctypes as _ctypes
    import os as _os
    import threading as _threading

    import numpy as _np

    from axle.ir.module import Computation as _Computation, Module as _Module
    from axle.ir.ops import Op as _Op


    def _unfused(module):
        """The module with every fusion's members inlined: compiled, one kernel per op."""
        env = {}
        for n in module.entry.nodes:
            ops = tuple(env[o.uid] for o in n.operands)
            if n.op is _Op.FUSION:
                inner = {}
                for m in n.attr["computation"].nodes:
                    inner[m.uid] = ops[m.attr["index"]] if m.op is _Op.PARAMETER else \\
                        m.replace(operands=tuple(inner[o.uid] for o in m.operands))
                env[n.uid] = inner[n.attr["computation"].root.uid]
            else:
                env[n.uid] = n if n.op is _Op.PARAMETER else n.replace(operands=ops)
        entry = module.entry
        return _Module(module.name, _Computation(entry.name, entry.parameters, env[entry.root.uid]))


    @_contextlib.contextmanager
    def _crashing_batch(self, device):
        """A batched build (axle.testing.prebuild) that kills the worker: no check may be
        blamed for it, each check then compiles on its own."""
        yield
        _ctypes.string_at(0)


    def _broken(compile_):
        def compile(self, module, device, options):
            module = _unfused(module)
            exe = compile_(self, module, device, options)
            ops, execute = {n.op for n in module.entry.nodes}, exe.execute

            def run(args):
                if _Op.SIN in ops or _os.environ.get("BRK_EVERY_KERNEL") == "segfault":
                    _ctypes.string_at(0)  # reads address 0: SIGSEGV
                if _Op.COS in ops or _os.environ.get("BRK_EVERY_KERNEL") == "hang":
                    _threading.Event().wait()  # never completes
                outs = execute(args)
                if _Op.NEG in ops:
                    _np.asarray(args[0].handle).reshape(-1)[:1] += 1  # writes into its input
                return outs

            exe.execute = run
            return exe

        return compile
''')


@pytest.fixture(scope="module")
def broken_env(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("scaffold")
    out = new_backend(NAME, root / f"axle-{NAME}")
    entry = tomllib.loads((out / "pyproject.toml").read_text())["project"]["entry-points"]["axle.backends"][NAME]
    module, cls = entry.split(":")
    init = out / module / "__init__.py"
    init.write_text(init.read_text() + BREAKAGE + f"\n{cls}.compile = _broken({cls}.compile)\n"
                    f"{cls}.batched_builds = _crashing_batch\n")
    dist = out / f"axle_{NAME}-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: axle-{NAME}\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text(f"[axle.backends]\n{NAME} = {entry}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AXLE_FLAGS", "PYTEST_ADDOPTS")}
    # the host fallback runs on the interpreter; the other backends are not needed here
    path = os.pathsep.join(filter(None, [str(out), os.environ.get("PYTHONPATH")]))
    # a compile cache of its own, as every test's (tests/conftest.py): the user's may be
    # over its size bound, and then every write scans it (seconds: checks hang at 8 s)
    cache = tmp_path_factory.mktemp("compile-cache")
    env.update(PYTHONPATH=path, AXLE_BACKENDS=f"{NAME},interpreter",
               AXLE_FLAGS=f"--{NAME}_claim_all=true --compile_cache={cache}")
    return env


#: check id -> what the kit must say about it
BROKEN = {
    "op.sine/sine-f32[3, 5]": "CRASHED: worker died: killed by SIGSEGV",
    "op.cosine/cosine-f32[3, 5]": "HUNG: no result within 8 s",
    "inputs/negate-s32[]": "changed in device memory by execution",
    "kernels/softmax-f32[4, 5]": "is a fusion compiled as several kernels?",
}
PASSING = "op.add/add-f32[1, 1, 1]"


def sections(out: str) -> dict[str, str]:
    """Each failing check's report, by id (pytest prints one section per failure)."""
    found = {}
    for m in re.finditer(r"_{3,} test_conformance\[(.+?)\] _{3,}\n(.*?)(?=\n_{5,} |\n={10,} )", out, re.S):
        found[m.group(1)] = m.group(2)
    return found


def test_kit_survives_crashes_and_hangs_and_reports_each(broken_env, tmp_path):
    select = " or ".join(["sine-f32[3", "cosine-f32[3", "inputs/negate-s32", "kernels/softmax-f32[4",
                          "op.add/add-f32[1"])
    r = subprocess.run([sys.executable, "-m", "axle.testing", NAME, "--quick", "-n", "2", "--timeout", "8",
                        "-k", select], cwd=tmp_path, env=broken_env, capture_output=True, text=True, timeout=300)
    out = r.stdout
    assert r.returncode == 1, out[-4000:] + r.stderr[-2000:]
    assert re.search(r"claimed by the device:\s+1 passed, 4 failed", out), out[-3000:]
    reports = sections(out)
    assert set(reports) == set(BROKEN), out[-6000:]
    for check_id, says in BROKEN.items():
        text = reports[check_id]
        assert f"check {check_id} on {NAME}:0" in text and says in text, text[:3000]
        assert "--- module ---\nHloModule" in text or "--- module ---\n" in text
        assert re.search(r"--- kernel_sources\(\) of .* on brk:0, optimized ---\n=== k\d", text), text[-3000:]
        assert "--- inputs ---\n  %0: " in text
    assert "CRASHED (the worker process died): 1\n  op.sine/sine-f32[3, 5]" in out
    assert "HUNG (killed at the time limit): 1\n  op.cosine/cosine-f32[3, 5]" in out
    assert "Python stacks of the worker" in reports["op.cosine/cosine-f32[3, 5]"]  # where it hangs
    assert f"test_conformance[{PASSING}]" not in "".join(reports)


@pytest.mark.parametrize("breakage, cell, says", [
    ("segfault", "CRASH", "crash in the tiny kernel on brk:0: worker died: killed by SIGSEGV"),
    ("hang", "HANG", "hang in the tiny kernel on brk:0: no result within 8 s")])
def test_doctor_prints_its_whole_table_when_a_backend_crashes_or_hangs(broken_env, breakage, cell, says):
    env = {**broken_env, "BRK_EVERY_KERNEL": breakage, "AXLE_BACKENDS": f"interpreter,{NAME},template"}
    r = subprocess.run([sys.executable, "-m", "axle", "doctor", "--timeout", "8"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[1:] if line.strip()}
    assert rows["interpreter"].split()[1] == "ok" and rows["template"].split()[1] == "ok", r.stdout
    # what was known before the kernel ran (api, devices, claims) is still shown
    # the scaffold claims every core op its renderer lowers: all but the extended ones it
    # leaves to the core's decompositions (convolution, reduce-window)
    lowered = CORE_PRIMITIVES & (BASE_PRIMITIVES | CLAIMED_EXTENDED)
    every = f"{len(lowered)}/{len(CORE_PRIMITIVES)}"
    assert rows[NAME].split()[1:6] == ["FAIL", "1.0", f"{NAME}:0", every, "ops"] and says in rows[NAME], r.stdout
    assert rows[NAME].split()[6] == cell, r.stdout
    assert f"2 of 3 backends work; not working: {NAME}" in r.stdout
