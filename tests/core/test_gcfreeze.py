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
