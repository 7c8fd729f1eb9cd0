"""Checks of the execution contract beyond right answers on one call.

- ``kernels/``: a fusion runs as one kernel (``report()["kernels"]``), not one per op;
- ``inputs/``: executing leaves the argument buffers bit-identical;
- ``threads/``: two threads running one executable, or two executables, at once;
- ``random/``: small random programs (axle.testing.random_modules), optimized and not;
- ``late/``: results read back right when ``to_host`` comes at once, or after other work
  (a device that completes work after ``execute`` returned must wait in ``to_host``).

The kernel-count rule (docs/writing-a-backend.md, "The conformance kit"): for the module
the backend compiled, each launch the optimizer planned (a fusion, or an op it left
unfused) may take at most one kernel, or two when it holds a reduction (a device may
split a long reduction into a partial pass and a final pass). ``report()["kernels"]``
must be an integer no larger than that budget, and at least one when the module has a
fusion. A fusion rendered as one kernel per member op exceeds the budget as soon as the
fusion has more members than its allowance, which every fused case has.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from ..backend import Device, Executable
from ..frontend.device_put import to_buffer
from ..interpreter import evaluate
from ..ir.builder import Builder
from ..ir.dtypes import is_float_numpy
from ..ir.module import Module
from ..ir.ops import CORE_PRIMITIVES, Op
from ..ir.types import TensorType
from ..partition import placement_of
from ..registry import REGISTRY
from .cases import OpCase, assert_case_close, cases_for, fused_cases, random_input
from .check import Check
from .fuzz import FAILURES, Config, Program, check_program
from .random_modules import random_module
from .session import compile_case

#: ops that are plumbing, not launches or members (values, views of tuples)
_NOT_LAUNCHED = frozenset({Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT})
#: random programs in the kit: seeds and their largest size
RANDOM_SEEDS, RANDOM_MAX_NODES = range(36), 12
THREAD_ROUNDS = 12


# --------------------------------------------------------------------------- helpers


def _execute(exe: Executable, inputs: Sequence[np.ndarray], device: Device) -> list[np.ndarray]:
    backend = REGISTRY.backend_for(device)
    return [np.asarray(backend.to_host(o)) for o in exe.execute([to_buffer(x, device) for x in inputs])]


def _compare(case: OpCase, inputs: Sequence[np.ndarray], actual: list[np.ndarray], device: Device,
             what: str) -> None:
    other = OpCase(f"{case.id} ({what})", case.module, list(inputs))
    assert_case_close(other, actual, evaluate(case.module, *inputs), device)


def _fresh_inputs(case: OpCase, seed: int) -> list[np.ndarray]:
    """Other inputs of the case's types (specials only where the case had them)."""
    rng = np.random.default_rng(seed)
    special = any(is_float_numpy(x.dtype) and not np.isfinite(x).all() for x in case.inputs)
    out = []
    for p, x in zip(case.module.entry.parameters, case.inputs):
        assert isinstance(p.type, TensorType)
        positive = x.dtype.kind in "iuf" and x.size > 0 and bool(np.all(x > 0))
        out.append(np.asarray(random_input(rng, p.type, special=special, positive=positive)))
    return out


def _find(cases: list[OpCase], *ids: str) -> list[OpCase]:
    by_id = {c.id: c for c in cases}
    return [by_id[i] for i in ids]


# ----------------------------------------------------------------- one kernel per fusion


def kernel_budget(module: Module) -> tuple[int, int, int]:
    """(fusions, most kernels allowed, kernels if every member op were its own kernel)
    for the module a backend compiled; see the module docstring for the rule."""
    fusions = most = per_op = 0
    for n in module.entry.nodes:
        if n.op in _NOT_LAUNCHED:
            continue
        members = [n]
        if n.op is Op.FUSION:
            fusions += 1
            members = [m for m in n.attr["computation"].nodes if m.op not in _NOT_LAUNCHED]
        passes = 2 if any(m.op is Op.REDUCE for m in members) else 1
        most += passes
        per_op += len(members)
    return fusions, most, per_op


def _kernel_check(case: OpCase) -> Check:
    def run(device: Device) -> None:
        exe, compiled = compile_case(case.module, device)
        _compare(case, case.inputs, _execute(exe, case.inputs, device), device, "kernel count")
        summary = placement_of(exe)
        if summary is not None and summary.fallback:
            return  # part of it ran on the host: the device's kernels are not the module's
        report = exe.report()
        kernels = report.get("kernels")
        assert isinstance(kernels, int) and not isinstance(kernels, bool), (
            f"report() must give 'kernels', the launches per call, as an int; it gave {report!r}")
        fusions, most, per_op = kernel_budget(compiled)
        assert kernels <= most, (
            f"report()['kernels'] is {kernels}, but the optimized module plans at most {most} (one kernel per "
            f"fusion or unfused op, two where it reduces); one kernel per member op would be {per_op}: "
            f"is a fusion compiled as several kernels?")
        assert kernels >= 1 or not fusions, f"report()['kernels'] is {kernels} for a module with {fusions} fusions"

    return Check(f"kernels/{case.id}", "kernels", run, case.module, case)


# ------------------------------------------------------------------ inputs unchanged


def _inputs_check(case: OpCase) -> Check:
    def run(device: Device) -> None:
        backend = REGISTRY.backend_for(device)
        exe, _ = compile_case(case.module, device)
        args = [to_buffer(x, device) for x in case.inputs]
        outs = exe.execute(args)
        for o in outs:
            backend.to_host(o)  # the kernels have finished writing
        backend.synchronize(device)
        for i, (a, x) in enumerate(zip(args, case.inputs)):
            back = np.asarray(backend.to_host(a))
            assert back.dtype == x.dtype and back.shape == x.shape, (
                f"argument {i} reads back as {back.dtype}{list(back.shape)} after execution, "
                f"was {x.dtype}{list(x.shape)}")
            if back.tobytes() == np.ascontiguousarray(x).tobytes():
                continue
            with np.errstate(invalid="ignore"):
                differ = ~((back == x) | (np.isnan(back) & np.isnan(x))) if is_float_numpy(x.dtype) else back != x
            bad = np.flatnonzero(differ)
            first = tuple(int(j) for j in np.unravel_index(int(bad[0]), x.shape)) if bad.size else ()
            raise AssertionError(
                f"argument {i} ({x.dtype}{list(x.shape)}) changed in device memory by execution: "
                f"{bad.size} of {x.size} elements differ" +
                (f", first at index {first}: was {x[first]!r}, now {back[first]!r}" if bad.size
                 else " in their bits only (the sign of a zero, a NaN payload)") +
                "; a kernel must not write into its inputs")

    return Check(f"inputs/{case.id}", "inputs", run, case.module, case)


# --------------------------------------------------------------------------- threads


def _threads_check(cases: list[OpCase]) -> Check:
    """Two threads at once: on one executable (one case), or each on its own (two cases)."""
    pair = cases if len(cases) == 2 else cases * 2

    def run(device: Device) -> None:
        exes = [compile_case(c.module, device)[0] for c in pair]
        inputs = [[_fresh_inputs(c, 100 * t + r) for r in range(THREAD_ROUNDS)] for t, c in enumerate(pair)]
        start = threading.Barrier(2)
        errors: list[str] = []

        def work(t: int) -> None:
            try:
                start.wait(timeout=60)
                for r, xs in enumerate(inputs[t]):
                    _compare(pair[t], xs, _execute(exes[t], xs, device), device, f"thread {t}, round {r}")
            except BaseException as e:  # noqa: BLE001 - re-raised in the check's thread
                errors.append(f"thread {t}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, "\n".join(errors)

    which = f"same-executable/{pair[0].id}" if len(cases) == 1 else f"two-executables/{cases[0].id}+{cases[1].id}"
    return Check(f"threads/{which}", "threads", run, _joint_module(cases), pair[0])


def _joint_module(cases: list[OpCase]) -> Module:
    """A module holding every case's ops (what ``claimed`` reads): the first case's, or
    both cases' entry roots side by side."""
    if len(cases) == 1:
        return cases[0].module

    b = Builder("pair")
    roots = []
    for c in cases:
        env = {}
        for p in c.module.entry.parameters:
            env[p.uid] = b.parameter(p.tensor_type)
        for n in c.module.entry.nodes:
            if n.op is not Op.PARAMETER:
                env[n.uid] = n.replace(operands=tuple(env[o.uid] for o in n.operands))
        root = env[c.module.entry.root.uid]
        roots += [b.get_tuple_element(root, index=i) for i in range(len(root.operands))] \
            if c.module.entry.root.op is Op.TUPLE else [root]
    return b.build(*roots)


# ---------------------------------------------------------------------- late results


def _late_check(case: OpCase) -> Check:
    def run(device: Device) -> None:
        backend = REGISTRY.backend_for(device)
        exe, _ = compile_case(case.module, device)
        xs = [case.inputs, _fresh_inputs(case, 1), _fresh_inputs(case, 2)]
        # at once: to_host must wait for the kernels that write the results
        first = exe.execute([to_buffer(x, device) for x in xs[0]])
        _compare(case, xs[0], [np.asarray(backend.to_host(o)) for o in first], device, "to_host at once")
        # later: two calls in flight, other work queued, then read back in reverse order
        a = exe.execute([to_buffer(x, device) for x in xs[1]])
        b = exe.execute([to_buffer(x, device) for x in xs[2]])
        filler = [to_buffer(np.full(4096, 7, np.float32), device) for _ in range(4)]
        _compare(case, xs[2], [np.asarray(backend.to_host(o)) for o in b], device, "second call, read first")
        _compare(case, xs[1], [np.asarray(backend.to_host(o)) for o in a], device, "first call, read last")
        for f in filler:
            assert np.asarray(backend.to_host(f))[0] == 7, "a filler transfer read back wrong"

    return Check(f"late/{case.id}", "late", run, case.module, case)


# -------------------------------------------------------------------- random programs


def _random_check(seed: int) -> Check:
    n_nodes = 1 + seed % RANDOM_MAX_NODES
    module, inputs = random_module(seed, n_nodes)

    def run(device: Device) -> None:
        for optimize in (True, False):
            outcome = check_program(Program(seed, n_nodes), Config(device.name, optimize))
            assert outcome.kind not in FAILURES, f"{outcome.kind} ({'optimized' if optimize else 'unoptimized'}): " \
                                                 f"{outcome.detail}"

    return Check(f"random/random_module({seed},{n_nodes})", "random", run, module,
                 OpCase(f"random_module({seed}, {n_nodes})", module, inputs))


# ------------------------------------------------------------------------------ all


def contract_checks(quick: bool = False) -> list[Check]:
    fused = fused_cases()
    firsts = [cases_for(op)[0] for op in sorted(CORE_PRIMITIVES, key=lambda o: o.value)]
    out = [_kernel_check(c) for c in fused]
    out += [_inputs_check(c) for c in (fused[::4] + firsts if quick else fused + firsts)]
    soft, seed_, moments, ints = _find(fused, "softmax-f32[33, 17]", "seed-f32[1029]", "moments-f64[33, 17]",
                                       "int-chain-s32")
    out += [_threads_check([soft]), _threads_check([seed_]), _threads_check([moments, ints])]
    out += [_late_check(c) for c in (seed_, soft, moments, ints)]
    out += [_random_check(s) for s in (RANDOM_SEEDS[::3] if quick else RANDOM_SEEDS)]
    return out
