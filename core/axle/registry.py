"""Backend discovery through the ``axle.backends`` entry-point group.

Plugins are loaded lazily, once, under a lock, each in its own thread with a time bound
(``--backend_timeout``). A plugin that fails to import, to initialize, that hangs, reports
no device, or that was built for another contract version is recorded with its reason
(``axle devices`` shows it) and never stops the others. ``AXLE_BACKENDS=cpu,interpreter``
selects and orders the backends; the others are not even imported.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from .backend import API_VERSION, Backend, BackendUnavailable, Device
from .config import config
from .errors import DeviceError
from .forksafe import renew_in_child
from .gcfreeze import freeze_long_lived, loading_may_freeze

NAMESPACE = "axle.backends"
log = logging.getLogger("axle.registry")
#: the core modules plugins import, imported before the loader threads start: two threads
#: importing submodules of one package at once can deadlock Python's per-module import
#: locks (seen as a _DeadlockError on axle.passes.policy while two backends loaded)
_SHARED_MODULES = ("axle.passes", "axle.lowering.plan", "axle.lowering.index", "axle.lowering.c")


@dataclass(frozen=True)
class BackendStatus:
    name: str
    available: bool
    reason: str = ""
    backend: Backend | None = None
    module: str = ""


def _compatible(version: object) -> str | None:
    """None if a plugin's api_version fits this core; otherwise why not."""
    if not (isinstance(version, tuple) and len(version) == 2 and all(isinstance(v, int) for v in version)):
        return f"api_version {version!r} is not a (major, minor) tuple"
    major, minor = version
    if major != API_VERSION[0]:
        return (f"built for backend API {major}.{minor}, but this axle provides {API_VERSION[0]}.x "
                f"(>= {API_VERSION[0]}.0); install a plugin release for API {API_VERSION[0]}")
    return None


def _entry_points(namespace: str) -> dict[str, Any]:
    """The group's entry points by name (the first of duplicates), without importing them."""
    out: dict[str, Any] = {}
    for ep in importlib.metadata.entry_points(group=namespace):
        out.setdefault(ep.name, ep)
    return out


def installed_names(namespace: str = NAMESPACE) -> list[str]:
    """The names of every installed backend, sorted, without importing any (whatever
    AXLE_BACKENDS selects: ``axle new-backend`` must not reuse a name that is only hidden)."""
    return sorted(_entry_points(namespace))


#: the bytes-keyed dict behind os.environ on POSIX: read without encoding the name, since
#: every jit call resolves its device under the current AXLE_BACKENDS
_ENVIRON: dict | None = getattr(os.environ, "_data", None) if os.name == "posix" else None
if not isinstance(_ENVIRON, dict):
    _ENVIRON = None


def _selection() -> object:
    """The raw AXLE_BACKENDS value (None when unset), as cheaply as it can be read."""
    return _ENVIRON.get(b"AXLE_BACKENDS") if _ENVIRON is not None else os.environ.get("AXLE_BACKENDS")


def _selected() -> list[str] | None:
    """The backend names AXLE_BACKENDS selects, in its order; None: every installed one."""
    wanted = os.environ.get("AXLE_BACKENDS", "").strip()
    return [n.strip() for n in wanted.split(",") if n.strip()] if wanted else None


class Registry:
    def __init__(self, namespace: str = NAMESPACE) -> None:
        self.namespace = namespace
        self._lock = threading.RLock()
        self._statuses: dict[str, BackendStatus] | None = None  # the plugins asked so far
        self._eps: dict[str, Any] | None = None
        # Names already resolved ((name, AXLE_BACKENDS) -> Device): every jit call resolves
        # its device, and a scan over every backend's devices cost more than the kernel.
        # Only successes are kept; reset() forgets them with the plugins.
        self._resolved: dict[tuple[str, object], Device] = {}

    # -- loading ---------------------------------------------------------------------
    def _load(self, names: list[str] | None) -> dict[str, BackendStatus]:
        """Loads the named plugins (every installed one for None) not loaded yet, each in
        its own thread, waiting at most ``config.backend_timeout`` seconds for all: a plugin
        that hangs in its import, constructor or ``devices()`` is recorded as timed out and
        left behind (its daemon thread can never block the process's exit)."""
        if self._statuses is None or self._eps is None:
            self._statuses, self._eps = {}, _entry_points(self.namespace)
        found = self._statuses
        todo = [self._eps[n] for n in (self._eps if names is None else names) if n in self._eps and n not in found]
        if todo:
            freeze = loading_may_freeze()  # not when the program has state of its own by now
            found.update(self._load_bounded(todo))
            if freeze:
                freeze_long_lived()  # the plugins' modules and devices live as long as the process
        return found

    def _load_bounded(self, eps: list[Any]) -> dict[str, BackendStatus]:
        limit = config.backend_timeout
        results: dict[str, BackendStatus] = {}
        stage: dict[str, str] = {}
        threads = []
        for name in _SHARED_MODULES:
            importlib.import_module(name)
        for ep in eps:
            t = threading.Thread(target=self._load_one, args=(ep, results, stage), daemon=True,
                                 name=f"axle-load-{ep.name}")
            t.start()
            threads.append((ep, t))
        deadline = time.monotonic() + limit
        out: dict[str, BackendStatus] = {}
        for ep, t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
            st = results.get(ep.name)
            if st is None:  # still running: a plugin that hangs never stops the others
                where = stage.get(ep.name, "import")
                log.warning("axle backend %r timed out after %g s in %s", ep.name, limit, where)
                st = BackendStatus(ep.name, False, f"timed out after {limit:g} s in {where} "
                                   "(raise --backend_timeout in AXLE_FLAGS if it is only slow)", module=ep.value)
            out[ep.name] = st
        return out

    def _load_one(self, ep: Any, results: dict[str, BackendStatus], stage: dict[str, str]) -> None:
        stage[ep.name] = "import"
        try:
            cls = ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break the others
            log.warning("axle backend %r failed to import: %s", ep.name, e)
            results[ep.name] = BackendStatus(ep.name, False, f"import failed: {type(e).__name__}: {e}", module=ep.value)
            return
        results[ep.name] = self._init(ep.name, cls, ep.value, stage)

    def _init(self, name: str, cls: type, module: str, stage: dict[str, str] | None = None) -> BackendStatus:
        stage = {} if stage is None else stage
        why = _compatible(getattr(cls, "api_version", None))
        if why:
            return BackendStatus(name, False, why, module=module)
        try:
            stage[name] = "__init__()"
            backend = cls()
            if not isinstance(backend, Backend):
                return BackendStatus(name, False, f"{module} is not an axle.Backend subclass", module=module)
            stage[name] = "devices()"
            devices = list(backend.devices())
        except BackendUnavailable as e:
            return BackendStatus(name, False, str(e), module=module)
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break the others
            log.warning("axle backend %r failed to initialize:\n%s", name, traceback.format_exc())
            return BackendStatus(name, False, f"initialization failed: {type(e).__name__}: {e}", module=module)
        if not devices:
            return BackendStatus(name, False, "no devices found", backend=None, module=module)
        if getattr(backend, "name", name) != name:
            return BackendStatus(name, False, f"entry point {name!r} names a backend called {backend.name!r}",
                                 module=module)
        return BackendStatus(name, True, "", backend, module)

    def statuses(self) -> dict[str, BackendStatus]:
        """Every backend found (available or not), in selection order. Only the backends
        AXLE_BACKENDS selects are ever loaded (all of them when it is unset)."""
        names = _selected()
        with self._lock:
            found = dict(self._load(names))
        if names is not None:
            return {n: found.get(n, BackendStatus(n, False, "not installed (named in AXLE_BACKENDS)"))
                    for n in names}
        ordered = sorted(found.values(), key=lambda s: (-(s.backend.priority if s.backend else -1), s.name))
        return {s.name: s for s in ordered}

    def reset(self) -> None:
        """Forgets loaded plugins (tests, or after installing a plugin in-process)."""
        with self._lock:
            self._statuses = None
            self._eps = None
            self._resolved = {}

    # -- queries ---------------------------------------------------------------------
    def backends(self) -> dict[str, Backend]:
        return {n: s.backend for n, s in self.statuses().items() if s.available and s.backend}

    def backend(self, name: str) -> Backend:
        found = self._statuses
        if found is not None and not _selection():  # the hot path: no sorting
            st = found.get(name)
            if st is not None and st.available and st.backend is not None:
                return st.backend
        st = self.statuses().get(name)
        if st is None or not st.available or st.backend is None:
            reason = st.reason if st else "not installed"
            raise DeviceError(f"backend {name!r} is not available: {reason}")
        return st.backend

    def devices(self) -> list[Device]:
        out: list[Device] = []
        for b in self.backends().values():
            out.extend(b.devices())
        return out

    def device(self, name: str | Device) -> Device:
        """Resolves 'cpu:0', 'cpu' (index 0) or a backend alias such as 'opencl:0:1'."""
        if isinstance(name, Device):
            return name
        memo = (name, _selection())
        found = self._resolved.get(memo)
        if found is not None:
            return found
        found = self._find_device(name)
        self._resolved[memo] = found
        return found

    def _find_device(self, name: str) -> Device:
        backend_name = name.split(":", 1)[0]
        for dev in self.devices():
            if dev.backend == backend_name and (name in (dev.name, *dev.aliases)
                                                or name == dev.backend and dev.index == 0):
                return dev
        available = ", ".join(d.name for d in self.devices()) or "none"
        reason = ""
        st = self.statuses().get(backend_name)
        if st is not None and not st.available:
            reason = f" (backend {backend_name!r} is unavailable: {st.reason})"
        raise DeviceError(f"unknown device {name!r}{reason}; available devices: {available}")

    def backend_for(self, device: Device) -> Backend:
        return self.backend(device.backend)

    def default_device(self) -> Device:
        env = _selection()
        found = self._resolved.get(("", env))  # "" names no device: the default's entry
        if found is None:
            found = self._resolved[("", env)] = self._choose_default()
        return found

    def _choose_default(self) -> Device:
        best: tuple[int, int, Device] | None = None
        for rank, b in enumerate(self.backends().values()):
            for d in b.devices():
                # AXLE_BACKENDS order dominates; otherwise device priority decides.
                score = -rank if os.environ.get("AXLE_BACKENDS") else b.device_priority(d)
                if best is None or score > best[0]:
                    best = (score, -d.index, d)
        if best is None:
            reasons = "; ".join(f"{s.name}: {s.reason}" for s in self.statuses().values()) or "no plugins installed"
            raise DeviceError(f"no axle device is available ({reasons})")
        return best[2]


REGISTRY = Registry()
renew_in_child(REGISTRY, "_lock", threading.RLock)
