"""The kernel plan of an optimized module across processes: the plan (steps, slots, and
every kernel's rendered source, argument layout and launch shape) kept in the OpenCL
backend's compile cache (``--compile_cache``, subdirectory ``opencl``), so that a new
process's first call of a cached program neither plans nor renders a kernel: the sources
come from the entry, and the program binary is then found on disk by them
(runtime.build_program). docs/backend-opencl.md, "Persistent compile cache".

The key is the optimized module's digest (``CompileOptions.module_digest``: the plan is made
from that module alone), the device description code generation reads (``DeviceInfo``,
after ``--opencl_strategy``), the platform, device and driver, the backend flags and every
setting, and the code of axle and of this backend (``diskcache.code_version``).

An entry is JSON parsed strictly: types as (dtype name, shape), arrays (constants) as
dtype, shape and base64 bytes read back with ``np.frombuffer`` (an axle dtype only),
nothing unpickled or evaluated. An entry that does not read back whole is a miss counted
as corrupt (``disk_cache_corrupt``): the module is planned again and the entry rewritten.
A plan holding a host step (a custom call: it keeps the IR node) is not stored."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import pyopencl as cl

import axle
from axle import cache_json
from axle.cache_json import array_json as _array_json
from axle.cache_json import as_bool as _bool
from axle.cache_json import as_int as _int
from axle.cache_json import as_ints as _ints
from axle.cache_json import as_str as _str
from axle.cache_json import read_array as _array
from axle.cache_json import read_type as _type
from axle.cache_json import type_json as _type_json
from axle.config import config
from axle.diskcache import cache_root, code_version

from .kernels import DeviceInfo, Kernel
from .plan import AliasStep, BranchStep, HostStep, KernelStep, LoopStep, Plan
from .runtime import DISK

#: bumped when an entry's layout changes
FORMAT = "axle-opencl-plan-1"
_CODE_DIRS = (os.path.dirname(axle.__file__), os.path.dirname(__file__))
if cache_root() is not None:
    # a per-process cost (about 200 stats, 0.5 ms), paid with the rest of loading this
    # backend rather than inside a cached program's first call (axle.module_cache keys
    # with the same directories)
    code_version(*_CODE_DIRS)


class _Uncacheable(Exception):
    """A plan this format cannot hold (a host step)."""


def plan_key(module_digest: str, dev: cl.Device, info: DeviceInfo, flags: Mapping[str, str]) -> bytes:
    """The key of the plan of the optimized module ``module_digest`` for ``dev``."""
    settings = repr(sorted((k, v) for k, v in vars(config).items() if not k.startswith("compile_cache")))
    parts = [FORMAT, code_version(*_CODE_DIRS), axle.__version__, dev.platform.name, dev.platform.version,
             dev.name, dev.driver_version, repr(info), repr(sorted(flags.items())), settings, module_digest]
    return "\0".join(parts).encode()


def load(key: bytes) -> Plan | None:
    """The plan stored under ``key`` (None: none, or an entry that does not read back whole)."""
    return cache_json.load(DISK, key, _plan)


def entry(plan: Plan) -> bytes | None:
    """The entry of ``plan`` (before an executable uploads its constants), or None when it
    holds a host step."""
    try:
        return json.dumps(_plan_json(plan)).encode()
    except _Uncacheable:
        return None


def store(key: bytes, payload: bytes) -> None:
    DISK.put(key, payload)


def enabled() -> bool:
    return DISK.enabled()


# -- writing -----------------------------------------------------------------------

def _input_json(v: Any) -> Any:
    return ["const", _array_json(v[1])] if isinstance(v, tuple) else v


def _kernel_json(k: Kernel) -> dict[str, Any]:
    return {"name": k.name, "source": k.source, "what": k.what, "body": k.body, "uses_fp64": k.uses_fp64,
            "outputs": [[o, j, _type_json(t)] for o, j, t in k.outputs],
            "inputs": [["param", v] if kind == "param" else ["const", _array_json(v)] for kind, v in k.inputs],
            "scalars": list(k.scalars), "global_size": list(k.global_size),
            "local_size": None if k.local_size is None else list(k.local_size)}


def _step_json(s: Any) -> dict[str, Any]:
    if isinstance(s, KernelStep):
        return {"t": "kernel", "kernel": _kernel_json(s.kernel), "inputs": [_input_json(v) for v in s.inputs],
                "outputs": list(s.outputs), "label": s.label, "in_place": s.in_place}
    if isinstance(s, AliasStep):
        return {"t": "alias", "src": s.src, "dst": s.dst, "type": _type_json(s.type)}
    if isinstance(s, LoopStep):
        return {"t": "loop", "cond": _plan_json(s.cond), "body": _plan_json(s.body), "trips": s.trips,
                "inputs": list(s.inputs), "outputs": list(s.outputs), "owned": list(s.owned), "label": s.label}
    if isinstance(s, BranchStep):
        return {"t": "branch", "branches": [_plan_json(b) for b in s.branches], "index": s.index,
                "index_type": _type_json(s.index_type), "inputs": list(s.inputs), "outputs": list(s.outputs),
                "owned": list(s.owned), "label": s.label}
    assert isinstance(s, HostStep), f"unknown plan step {type(s).__name__}"
    raise _Uncacheable("a host step")


def _plan_json(p: Plan) -> dict[str, Any]:
    return {"steps": [_step_json(s) for s in p.steps], "params": list(p.params),
            "constants": [[slot, _array_json(a)] for slot, a in p.constants.items()],
            "results": [[slot, _type_json(t)] for slot, t in p.results], "consumed": sorted(p.consumed),
            "param_types": [_type_json(t) for t in p.param_types]}


# -- reading (every value checked: a wrong one raises, and the entry is a miss) ------

def _slot(v: Any) -> Any:
    """A kernel step's output: a slot, or a sort kernel's scratch buffer, named by a tuple
    of its own (sort.sort_launch; written to JSON as a list)."""
    if isinstance(v, list):
        tag, owner, k = v
        if tag != "sort-scratch":
            raise ValueError(f"unknown kernel output {tag!r}")
        return (tag, _int(owner), _int(k))
    return _int(v)


def _input(v: Any) -> Any:
    if isinstance(v, list):
        tag, arr = v
        if tag != "const":
            raise ValueError(f"unknown kernel step input {tag!r}")
        return ("const", _array(arr))
    return _int(v)


def _kernel(d: dict[str, Any]) -> Kernel:
    inputs: list[tuple[str, Any]] = []
    for kind, v in d["inputs"]:
        inputs.append(("param", _int(v)) if kind == "param" else ("const", _array(v)) if kind == "const"
                      else _bad(kind))
    outputs = [(_str(o), _int(j), _type(t)) for o, j, t in d["outputs"]]
    local = d["local_size"]
    return Kernel(_str(d["name"]), _str(d["source"]), _str(d["what"]), outputs, inputs, _ints(d["scalars"]),
                  tuple(_ints(d["global_size"])), None if local is None else tuple(_ints(local)),
                  _bool(d["uses_fp64"]), _str(d["body"]))


def _bad(kind: Any) -> Any:
    raise ValueError(f"unknown kernel input kind {kind!r}")


def _step(d: dict[str, Any]) -> Any:
    tag = d["t"]
    if tag == "kernel":
        return KernelStep(_kernel(d["kernel"]), [_input(v) for v in d["inputs"]], [_slot(v) for v in d["outputs"]],
                          _str(d["label"]), _bool(d["in_place"]))
    if tag == "alias":
        return AliasStep(_int(d["src"]), _int(d["dst"]), _type(d["type"]))
    if tag == "loop":
        trips = d["trips"]
        return LoopStep(_plan(d["cond"]), _plan(d["body"]), None if trips is None else _int(trips),
                        _ints(d["inputs"]), _ints(d["outputs"]), [_bool(b) for b in d["owned"]], _str(d["label"]))
    if tag == "branch":
        return BranchStep([_plan(b) for b in d["branches"]], _int(d["index"]), _type(d["index_type"]),
                          _ints(d["inputs"]), _ints(d["outputs"]), [_bool(b) for b in d["owned"]],
                          _str(d["label"]))
    raise ValueError(f"unknown plan step {tag!r}")


def _plan(d: dict[str, Any]) -> Plan:
    return Plan([_step(s) for s in d["steps"]], _ints(d["params"]),
                {_int(slot): _array(a) for slot, a in d["constants"]},
                [(_int(slot), _type(t)) for slot, t in d["results"]], frozenset(_ints(d["consumed"])),
                [_type(t) for t in d["param_types"]])
