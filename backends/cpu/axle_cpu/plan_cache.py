"""The plan of an optimized module across processes: its steps, slots, constants, arena
layout and, per kernel, the few facts running it reads (``LaunchFacts``), kept in the cpu
backend's compile cache (``--compile_cache``, subdirectory ``cpu``) under the optimized
module's digest. With the object code of the whole plan (stored under the same digest:
``executable.module_key``) it is the executable: a new process's first call of a cached
program neither parses the module nor plans nor emits a kernel
(``CpuBackend.cached_executable``; docs/backend-cpu.md, "Persistent compile cache").

The key is everything an object's key holds (``target.object_key``: code of axle and this
backend, LLVM, host CPU and features, ``--cpu_*`` flags) plus the digest and every setting.
An entry is JSON checked value by value (``axle.cache_json``): constants as dtype, shape
and base64 bytes, a step's kind from a fixed set, every kernel a step names present, a
combine kind a known reduce kind. One that does not read back whole is a miss counted as
corrupt (``disk_cache_corrupt``): the module is parsed and planned again and the entry
rewritten. A plan holding a host step (a custom call, a sort, a BLAS dot) keeps Python
functions of IR nodes and is not stored."""
from __future__ import annotations

import json
from typing import Any, NamedTuple

from axle import cache_json
from axle.cache_json import array_json, as_bool, as_int, as_ints, as_str, read_array, read_type, type_json
from axle.ir.reductions import REDUCE_KINDS

from .plan import ControlStep, HostStep, KernelStep, LaunchSpec, Plan
from .runner import CONTROL
from .target import DISK, object_key

#: bumped when an entry's layout changes
FORMAT = "axle-cpu-plan-1"


class LaunchFacts(NamedTuple):
    """A kernel of a cached plan: what running it reads (plan.LaunchSpec), no computation.
    (Named tuples: a frozen dataclass costs about 0.5 ms to define, in a first call.)"""

    name: str
    loop_sizes: tuple[int, int]
    split_reduce_size: int
    reduce_split_first: bool
    fixed_columns: bool
    largest_array: int
    combine_kinds: tuple[str, ...]


class CachedPlan(NamedTuple):
    plan: Plan
    #: the optimized module's name (the object's and the split decisions' keys hold it)
    name: str
    #: whether LLVM's loop interleaving was on for the object (its key holds it)
    interleave: bool


def plan_key(module_digest: str, settings: str) -> bytes:
    """The key of the plan of the optimized module ``module_digest`` (``settings``: every
    setting, as the object's key holds them: ``executable._settings``)."""
    return object_key(f"plan:{FORMAT}\0{module_digest}\0{settings}", True)


def load(key: bytes) -> CachedPlan | None:
    """The plan stored under ``key`` (None: none, or an entry that does not read back whole)."""
    return cache_json.load(DISK, key, _cached)


def entry(plan: Plan, name: str, interleave: bool) -> bytes | None:
    """The entry of ``plan``, or None when it holds a host step."""
    if any(isinstance(s, HostStep) for s in plan.steps):
        return None
    kernels = {s.spec.name: s.spec for s in plan.steps if isinstance(s, KernelStep)}
    return json.dumps({
        "name": name, "interleave": interleave, "n_params": plan.n_params,
        "param_types": [type_json(t) for t in plan.param_types],
        "constants": [[slot, array_json(a)] for slot, a in plan.constants.items()],
        "kernels": [_facts_json(k) for k in kernels.values()],
        "steps": [_step_json(s) for s in plan.steps], "results": plan.results,
        "result_types": [type_json(t) for t in plan.result_types], "n_slots": plan.n_slots,
        "temp_bytes": plan.temp_bytes, "temp_offsets": [[s, o] for s, o in plan.temp_offsets.items()],
        "regions": [list(r) for r in plan.regions]}).encode()


def store(key: bytes, payload: bytes) -> None:
    DISK.put(key, payload)


def _facts_json(k: LaunchSpec) -> dict[str, Any]:
    return {"name": k.name, "loop_sizes": list(k.loop_sizes), "split_reduce_size": k.split_reduce_size,
            "reduce_split_first": k.reduce_split_first, "fixed_columns": k.fixed_columns,
            "largest_array": k.largest_array, "combine_kinds": list(k.combine_kinds)}


def _step_json(s: KernelStep | HostStep | ControlStep) -> dict[str, Any]:
    assert not isinstance(s, HostStep), "a plan with a host step is not stored"
    common = {"ins": s.ins, "outs": s.outs, "out_types": [type_json(t) for t in s.out_types], "label": s.label}
    if isinstance(s, KernelStep):
        return {"t": "kernel", "kernel": s.spec.name, **common}
    return {"t": "control", "kind": s.kind, "arg": s.arg, "width": s.width, **common}


# -- reading (every value checked: a wrong one raises, and the entry is a miss) ------

def _facts(d: dict[str, Any]) -> LaunchFacts:
    outer, inner = as_ints(d["loop_sizes"])
    kinds = tuple(as_str(k) for k in d["combine_kinds"])
    if any(k and k not in REDUCE_KINDS for k in kinds):
        raise ValueError(f"unknown combine kind in {kinds}")
    return LaunchFacts(as_str(d["name"]), (outer, inner), as_int(d["split_reduce_size"]),
                       as_bool(d["reduce_split_first"]), as_bool(d["fixed_columns"]), as_int(d["largest_array"]),
                       kinds)


def _step(d: dict[str, Any], kernels: dict[str, LaunchFacts]) -> KernelStep | ControlStep:
    ins, outs, label = as_ints(d["ins"]), as_ints(d["outs"]), as_str(d["label"])
    types = [read_type(t) for t in d["out_types"]]
    if d["t"] == "kernel":
        return KernelStep(kernels[as_str(d["kernel"])], ins, outs, types, label)
    if d["t"] != "control" or d["kind"] not in CONTROL:
        raise ValueError(f"unknown plan step {d['t']!r}")
    return ControlStep(as_str(d["kind"]), ins, outs, types, label, as_int(d["arg"]), as_int(d["width"]))


def _cached(d: dict[str, Any]) -> CachedPlan:
    kernels = {f.name: f for f in map(_facts, d["kernels"])}
    regions = [(a, b) for a, b in map(as_ints, d["regions"])]
    plan = Plan(as_int(d["n_params"]), [read_type(t) for t in d["param_types"]],
                {as_int(slot): read_array(a) for slot, a in d["constants"]},
                [_step(s, kernels) for s in d["steps"]], as_ints(d["results"]),
                [read_type(t) for t in d["result_types"]], as_int(d["n_slots"]), {}, as_int(d["temp_bytes"]),
                {as_int(s): as_int(o) for s, o in d["temp_offsets"]}, regions)
    slots = [s for step in plan.steps for s in step.ins + step.outs] + plan.results + list(plan.constants)
    slots += list(plan.temp_offsets)
    if any(not 0 <= s < plan.n_slots for s in slots) or len(plan.param_types) != plan.n_params \
            or any(not 0 <= o <= plan.temp_bytes for o in plan.temp_offsets.values()):
        raise ValueError("a slot or an arena offset out of range")
    return CachedPlan(plan, as_str(d["name"]), as_bool(d["interleave"]))
