"""Plugin discovery: broken plugins are reported and isolated; AXLE_BACKENDS filters/orders."""
from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

import axle
from axle.registry import Registry

PLUGINS = {
    "fake_broken_import": "raise ImportError('libfoo.so: cannot open shared object file')\n",
    "fake_bad_init": textwrap.dedent("""
        from axle.backends.interpreter import InterpreterBackend
        class Backend(InterpreterBackend):
            name = "badinit"
            def __init__(self):
                raise RuntimeError("driver version mismatch")
    """),
    "fake_no_devices": textwrap.dedent("""
        from axle.backends.interpreter import InterpreterBackend
        class Backend(InterpreterBackend):
            name = "nodev"
            def devices(self):
                return []
    """),
    "fake_old_api": textwrap.dedent("""
        from axle.backends.interpreter import InterpreterBackend
        class Backend(InterpreterBackend):
            name = "oldapi"
            api_version = (0, 3)
    """),
    "fake_good": textwrap.dedent("""
        from axle.backend import Device
        from axle.backends.interpreter import InterpreterBackend
        class Backend(InterpreterBackend):
            name = "good"
            priority = 10**6
            def __init__(self):
                self._device = Device("good", 0, "a second host device")
    """),
}
ENTRY_POINTS = {
    "broken": "fake_broken_import:Backend",
    "badinit": "fake_bad_init:Backend",
    "nodev": "fake_no_devices:Backend",
    "oldapi": "fake_old_api:Backend",
    "good": "fake_good:Backend",
}


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    """A directory on sys.path holding fake plugins and a dist-info declaring them."""
    for mod, src in PLUGINS.items():
        (tmp_path / f"{mod}.py").write_text(src)
    dist = tmp_path / "axle_fake_plugins-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: axle-fake-plugins\nVersion: 0.0\n")
    lines = "\n".join(f"{k} = {v}" for k, v in ENTRY_POINTS.items())
    (dist / "entry_points.txt").write_text(f"[axle.backends]\n{lines}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return tmp_path


def test_broken_plugins_are_reported_and_others_load(plugin_path, monkeypatch):
    monkeypatch.delenv("AXLE_BACKENDS", raising=False)
    reg = Registry()
    st = reg.statuses()
    assert not st["broken"].available and "libfoo.so" in st["broken"].reason
    assert not st["badinit"].available and "driver version mismatch" in st["badinit"].reason
    assert not st["nodev"].available and "no devices" in st["nodev"].reason
    assert not st["oldapi"].available and "API 0.3" in st["oldapi"].reason and "1.x" in st["oldapi"].reason
    assert st["interpreter"].available and st["good"].available
    names = [d.name for d in reg.devices() if d.name in ("good:0", "interpreter:0")]  # other real backends may be installed
    assert names == ["good:0", "interpreter:0"]  # priority order
    assert reg.default_device().name == "good:0"


def test_axle_backends_filters_and_orders(plugin_path, monkeypatch):
    monkeypatch.setenv("AXLE_BACKENDS", "interpreter,good")
    reg = Registry()
    assert list(reg.statuses()) == ["interpreter", "good"]
    assert reg.default_device().name == "interpreter:0"
    monkeypatch.setenv("AXLE_BACKENDS", "good")
    assert [d.name for d in reg.devices()] == ["good:0"]
    monkeypatch.setenv("AXLE_BACKENDS", "interpreter,missing")
    st = reg.statuses()
    assert not st["missing"].available and "not installed" in st["missing"].reason


def test_cli_devices_shows_reasons(plugin_path):
    env_path = str(plugin_path)
    code = "import sys; sys.path.insert(0, %r); from axle.cli import main; main(['devices'])" % env_path
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "AXLE_BACKENDS": ""}).stdout
    assert "interpreter:0" in out
    assert "broken       unavailable: import failed: ImportError: libfoo.so" in out
    assert "oldapi       unavailable: built for backend API 0.3" in out
    assert "default device:" in out


def test_unknown_device_lists_available():
    with pytest.raises(axle.errors.DeviceError, match=r"unknown device 'tpu:0'.*available devices: .*interpreter:0"):
        axle.device("tpu:0")


def test_registry_loads_once_thread_safe():
    import threading

    reg = Registry()
    results = []
    threads = [threading.Thread(target=lambda: results.append(id(reg.statuses()["interpreter"].backend)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1


HANGING = textwrap.dedent("""
    import threading
    from axle.backends.interpreter import InterpreterBackend
    STARTED = []
    class Backend(InterpreterBackend):
        name = "hangs"
        def devices(self):
            STARTED.append(1)
            threading.Event().wait()  # a driver that never answers
""")


@pytest.fixture
def hanging_plugin(plugin_path, monkeypatch):
    (plugin_path / "fake_hangs.py").write_text(HANGING)
    eps = plugin_path / "axle_fake_plugins-0.0.dist-info" / "entry_points.txt"
    eps.write_text(eps.read_text() + "hangs = fake_hangs:Backend\n")
    importlib.invalidate_caches()
    monkeypatch.setattr(axle.config, "backend_timeout", 0.5)
    return plugin_path


def test_hanging_plugin_times_out_and_others_work(hanging_plugin, monkeypatch):
    monkeypatch.delenv("AXLE_BACKENDS", raising=False)
    reg = Registry()
    st = reg.statuses()
    assert not st["hangs"].available
    assert st["hangs"].reason.startswith("timed out after 0.5 s in devices()")
    assert st["interpreter"].available and "interpreter:0" in [d.name for d in reg.devices()]
    assert reg.device("interpreter:0").name == "interpreter:0"


def test_unselected_plugin_is_never_asked(hanging_plugin, monkeypatch):
    import sys as _sys

    monkeypatch.delitem(_sys.modules, "fake_hangs", raising=False)  # an earlier test imported it
    monkeypatch.setenv("AXLE_BACKENDS", "interpreter")
    reg = Registry()
    assert [d.name for d in reg.devices()] == ["interpreter:0"]
    assert "hangs" not in reg.statuses()
    assert "fake_hangs" not in _sys.modules  # not even imported


def test_backend_timeout_flag(monkeypatch):
    from axle.config import Config

    c = Config()
    c.load_flags("--backend_timeout=2.5 --jit_cache_size=7")
    assert (c.backend_timeout, c.jit_cache_size) == (2.5, 7)
    for bad in ("--backend_timeout=0", "--jit_cache_size=-1", "--jit_cache_size=x"):
        with pytest.raises(axle.errors.AxleError, match="backend_timeout|jit_cache_size"):
            Config().load_flags(bad)
