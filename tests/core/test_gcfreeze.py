"""The objects of axle's import and of the loading of its backends are frozen (``gc.freeze``,
axle/gcfreeze.py), so that no full collection scans them again (the process's first one
landed in the first call of a cached program); ``--no_gc_freeze`` leaves the collector as
it is, and objects made afterwards are collected as ever. Each case runs in a new process:
this one imported axle long ago."""
from __future__ import annotations

import json
import os
import subprocess
import sys

_PROBE = """
import gc, json, sys
before = gc.get_freeze_count()
import axle
after_import = gc.get_freeze_count()
axle.REGISTRY.backends()  # loads every selected backend
after_load = gc.get_freeze_count()

class Node:
    pass

import weakref
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after the freeze: the collector still frees it
alive = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"before": before, "after_import": after_import, "after_load": after_load,
                  "cycle_freed": alive() is None, "enabled": gc.isenabled()}))
"""


def _probe(flags: str) -> dict[str, object]:
    env = {**os.environ, "AXLE_FLAGS": f"{os.environ.get('AXLE_FLAGS', '')} {flags}".strip(),
           "AXLE_BACKENDS": "interpreter"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_and_backend_loading_freeze_what_they_made() -> None:
    r = _probe("")
    assert r["before"] == 0
    # every module of axle and NumPy is in the permanent generation after the import
    assert r["after_import"] > 10000
    assert r["after_load"] > r["after_import"]  # the backend's objects too
    assert r["cycle_freed"] and r["enabled"]


def test_no_gc_freeze_leaves_the_collector_alone() -> None:
    r = _probe("--no_gc_freeze")
    assert r["before"] == r["after_import"] == r["after_load"] == 0
    assert r["cycle_freed"] and r["enabled"]


_LATE_LOAD = """
import gc, json, weakref
import axle

class Node:
    pass

made = [Node() for _ in range(5000)]  # the program's own state, made after the import
held = Node()
held.self = held  # alive in a cycle when the backends load
held.data = bytearray(1 << 20)
alive = weakref.ref(held)
axle.REGISTRY.backends()  # the first device use loads the backends
del held, made
gc.collect()
print(json.dumps({"freed": alive() is None, "frozen": gc.get_freeze_count()}))
"""


def test_a_late_backend_loading_freezes_none_of_the_programs_state() -> None:
    """Backends load at the program's first device use, anywhere in it: freezing all that
    is tracked then would keep whatever the program had alive in a cycle (here 1 MB) from
    ever being freed once dropped. When the program has made more than a few objects since
    axle's import (``LOAD_FREEZE_MAX_NEW``), the loading freezes nothing."""
    env = {**os.environ, "AXLE_BACKENDS": "interpreter"}
    out = subprocess.run([sys.executable, "-c", _LATE_LOAD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["frozen"] > 10000  # the import's objects still are
    assert r["freed"]
