"""Broken plugins are reported with their reason by `axle devices` and `axle doctor`,
while the other backends keep working (fake plugins declared through a temporary
dist-info on sys.path, as in tests/core/test_registry.py)."""
from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

import axle.registry
from axle.doctor import diagnose, format_table
from axle.registry import Registry

PLUGINS = {
    "sdkfake_import": "raise ImportError('libacme.so: cannot open shared object file')\n",
    "sdkfake_nodev": textwrap.dedent("""
        from axle.backends.interpreter import InterpreterBackend
        class Backend(InterpreterBackend):
            name = "nodev"
            def devices(self):
                return []
    """),
    "sdkfake_newapi": textwrap.dedent("""
        from axle.backends.interpreter import InterpreterBackend
        class Backend(InterpreterBackend):
            name = "newapi"
            api_version = (2, 0)
    """),
    "sdkfake_wrong": textwrap.dedent("""
        import numpy as np
        from axle.backend import Buffer, Device
        from axle.backends.interpreter import InterpreterBackend, InterpreterExecutable
        class Exe(InterpreterExecutable):
            def execute(self, args):
                return [Buffer(b.device, b.type, b.handle + 1) for b in super().execute(args)]
        class Backend(InterpreterBackend):
            name = "wrong"
            def __init__(self):
                self._device = Device("wrong", 0, "adds one to every result")
            def compile(self, module, device, options):
                return Exe(module, device)
    """),
    "sdkfake_crash": textwrap.dedent("""
        from axle.backend import Device
        from axle.backends.interpreter import InterpreterBackend
        class Backend(InterpreterBackend):
            name = "crash"
            def __init__(self):
                self._device = Device("crash", 0, "cannot compile")
            def compile(self, module, device, options):
                raise RuntimeError("kernel compiler segfaulted")
    """),
}
ENTRY_POINTS = {"acme": "sdkfake_import:Backend", "nodev": "sdkfake_nodev:Backend",
                "newapi": "sdkfake_newapi:Backend", "wrong": "sdkfake_wrong:Backend", "crash": "sdkfake_crash:Backend"}


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    for mod, src in PLUGINS.items():
        (tmp_path / f"{mod}.py").write_text(src)
    dist = tmp_path / "axle_sdk_fakes-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: axle-sdk-fakes\nVersion: 0.0\n")
    lines = "\n".join(f"{k} = {v}" for k, v in ENTRY_POINTS.items())
    (dist / "entry_points.txt").write_text(f"[axle.backends]\n{lines}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("AXLE_BACKENDS", raising=False)
    importlib.invalidate_caches()
    return tmp_path


def run_cli(plugin_path, *args: str) -> subprocess.CompletedProcess:
    code = f"import sys; sys.path.insert(0, {str(plugin_path)!r}); from axle.cli import main; sys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})


def test_diagnose_rows(plugin_path, monkeypatch):
    import axle.doctor as doctor

    reg = Registry()
    # the tiny kernel runs through this registry: every core module that holds the global one
    original = axle.registry.REGISTRY
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "axle" and getattr(module, "REGISTRY", None) is original:
            monkeypatch.setattr(module, "REGISTRY", reg)
    rows = {r.backend: r for r in diagnose(reg)}
    assert rows["interpreter"].ok and rows["interpreter"].kernel == "ok"
    assert not rows["acme"].ok and "libacme.so" in rows["acme"].reason
    assert not rows["nodev"].ok and "no devices" in rows["nodev"].reason
    assert not rows["newapi"].ok and "API 2.0" in rows["newapi"].reason and "1.x" in rows["newapi"].reason
    assert not rows["wrong"].ok and "wrong result" in rows["wrong"].reason
    # a device that cannot compile still gets the right answer through the host fallback,
    # which hides nothing from the doctor
    assert not rows["crash"].ok and "compile failed on crash:0: RuntimeError: kernel compiler segfaulted" \
        in rows["crash"].reason
    table = format_table(list(rows.values()))
    assert table.splitlines()[0].split() == ["backend", "status", "api", "devices", "claims", "tiny",
                                                  "kernel", "reason"]
    claimed, total = rows["interpreter"].claims.split()[0].split("/")
    assert claimed == total  # the interpreter claims every core primitive


def test_cli_devices_and_doctor_show_reasons(plugin_path):
    devices = run_cli(plugin_path, "devices").stdout
    assert "interpreter:0" in devices and "wrong:0" in devices
    assert "acme         unavailable: import failed: ImportError: libacme.so" in devices
    assert "nodev        unavailable: no devices found" in devices
    assert "newapi       unavailable: built for backend API 2.0, but this axle provides 1.x" in devices

    r = run_cli(plugin_path, "doctor")
    assert r.returncode == 1
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.strip()}
    assert lines["interpreter"].split()[1] == "ok"
    assert lines["acme"].split()[1] == "FAIL" and "libacme.so: cannot open shared object file" in lines["acme"]
    assert lines["nodev"].split()[1] == "FAIL" and "no devices found" in lines["nodev"]
    assert lines["newapi"].split()[1] == "FAIL" and "install a plugin release for API 1" in lines["newapi"]
    assert lines["wrong"].split()[1] == "FAIL" and "wrong result" in lines["wrong"]
    assert lines["crash"].split()[1] == "FAIL" and "kernel compiler segfaulted" in lines["crash"]
    assert "not working:" in r.stdout and "interpreter" not in r.stdout.split("not working:")[1]


def test_doctor_passes_on_a_healthy_install():
    r = subprocess.run([sys.executable, "-m", "axle", "doctor"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "template" in r.stdout and "interpreter" in r.stdout
    template = next(line for line in r.stdout.splitlines() if line.startswith("template"))
    claimed, total = template.split()[4].split("/")
    assert 0 < int(claimed) < int(total)  # a partial backend, and the doctor says how partial
