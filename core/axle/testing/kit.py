"""The conformance kit: every check a backend must pass, as data.

A :class:`Check` is one named test (an op case, a fusion, a transfer, caching, an error
path). :func:`claimed` reads the device's capabilities: a claimed check must run entirely
on the device (it runs under strict placement, so a host fallback fails it); a check the
device does not claim runs through the core's host fallback, and the kit reports it
apart from the claimed ones. Used by the pytest plugin (``pytest --axle-backend NAME``),
by ``python -m axle.testing NAME`` and by the repository's tests/conformance.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

import axle

from ..backend import Device
from ..compiler import compile_module, optimize_for
from ..frontend.device_put import to_buffer
from ..ir.builder import Builder
from ..ir.dtypes import ALL_DTYPES, BASE_DTYPES, DType
from ..ir.module import Module, Node
from ..ir.ops import CORE_PRIMITIVES, Op
from ..ir.types import TensorType
from ..lowering.plan import kernel_plan
from ..registry import REGISTRY
from .cases import OpCase, _case, cases_for, check_case, control_cases, fused_cases, random_input
from .check import Check
from .check import claimed as claimed  # the kit's API: tests and suite.py import it from here
from .check import run_check as run_check  # the kit's API: tests import it from here
from .contract import contract_checks

#: Bytes of the "large buffer" checks: big enough to cross any 32-bit index or
#: work-group-size assumption a backend might make on small inputs.
LARGE_ELEMENTS = (1 << 22) + 3


# ------------------------------------------------------------------------------ checks


def _case_check(case: OpCase, category: str, *, unoptimized: bool = True) -> Check:
    """A case run optimized and (for programs, where it differs) also op by op."""
    def run(device: Device, case: OpCase = case) -> None:
        check_case(case, device)
        if unoptimized:
            check_case(case, device, optimize=False)

    return Check(f"{category}/{case.id}", category, run, case.module, case, (True, False) if unoptimized else (True,))


def _bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 (NumPy kind 'V', which NumPy's testing cannot compare with NaN) as its bits."""
    return x.view(np.uint16) if x.dtype.kind == "V" else x


def _transfer_check(dt: DType, shape: tuple[int, ...]) -> Check:
    def run(device: Device) -> None:
        backend = REGISTRY.backend_for(device)
        x = np.array(random_input(np.random.default_rng(len(shape)), TensorType(dt, shape)))
        buf = backend.to_device(x, device)
        assert buf.device == device and buf.type == TensorType(dt, shape), f"to_device gave {buf.type} on {buf.device}"
        back = np.asarray(backend.to_host(buf))
        assert back.dtype == x.dtype and back.shape == x.shape, f"to_host gave {back.dtype}{list(back.shape)}"
        np.testing.assert_array_equal(_bits(back), _bits(x))
        with np.errstate(all="ignore"):  # the device copy must not alias the host array
            x[...] = np.logical_not(x) if dt is DType.BOOL else x + 1
        backend.synchronize(device)
        np.testing.assert_array_equal(_bits(np.asarray(backend.to_host(buf))), _bits(back))
        # across devices: device -> interpreter -> device keeps every bit
        a = axle.device_put(back, device)
        b = axle.device_put(a, "interpreter:0")
        np.testing.assert_array_equal(_bits(axle.device_put(b, device).numpy()), _bits(back))
        backend.free(buf)

    return Check(f"transfer/{dt.value}{list(shape)}", "transfer", run)


def _program(name: str, types: list[TensorType], build: Callable, category: str, **kw: object) -> Check:
    return _case_check(_case(name, build, types, np.random.default_rng(11), **kw), category)


def _large_checks() -> list[Check]:
    t = TensorType(DType.FLOAT32, (LARGE_ELEMENTS,))
    return [
        _program("large-add-mul", [t, t], lambda b, p: b.mul(b.add(p[0], p[1]), p[1]), "large", special=False),
        _program("large-sum", [t], lambda b, p: b.reduce(p[0], kind="sum", axes=(0,)), "large", special=False,
                 small=True),
        _program("large-rows-max", [TensorType(DType.FLOAT32, (4099, 1031))],
                 lambda b, p: b.reduce(p[0], kind="max", axes=(1,)), "large"),
    ]


def _empty_checks() -> list[Check]:
    out = []
    for shape in ((0,), (0, 5), (5, 0), (2, 0, 3)):
        t = TensorType(DType.FLOAT32, shape)
        out.append(_program(f"empty-chain{list(shape)}", [t, t], lambda b, p: b.exp(b.add(p[0], p[1])), "empty"))
        out.append(_program(f"empty-sum{list(shape)}", [t], lambda b, p, s=shape: b.reduce(
            p[0], kind="sum", axes=tuple(range(len(s)))), "empty"))
    return out


def _caching_check() -> Check:
    t = TensorType(DType.FLOAT32, (9,))
    rep = _case("caching", lambda b, p: b.add(b.mul(p[0], p[1]), p[0]), [t, t], np.random.default_rng(0)).module

    def run(device: Device) -> None:
        fn = axle.jit(lambda x, y: x * y + x, device=device)
        x, y = np.arange(9, dtype=np.float32), np.full(9, 2, np.float32)
        for _ in range(3):
            np.testing.assert_array_equal(fn(x, y).numpy(), x * y + x)
        assert fn.trace_count == 1 and fn.cache_hits == 2, (fn.trace_count, fn.cache_hits)
        np.testing.assert_array_equal(fn(x[:4], y[:4]).numpy(), x[:4] * y[:4] + x[:4])
        assert fn.trace_count == 2, "a new shape must compile a new executable"
        a = axle.device_put(x, device)  # device-resident inputs hit the same cache entry
        np.testing.assert_array_equal(fn(a, y).numpy(), x * y + x)
        assert fn.trace_count == 2

    return Check("caching/jit-retrace-and-hits", "caching", run, rep)


def _error_checks() -> list[Check]:
    t = TensorType(DType.FLOAT32, (3,))
    rep = _case("errors", lambda b, p: b.add(p[0], p[1]), [t, t], np.random.default_rng(0)).module

    def shape_mismatch(device: Device) -> None:
        fn = axle.jit(lambda x, y: x + y, device=device)
        try:
            fn(np.zeros(3, np.float32), np.zeros(4, np.float32))
        except axle.errors.ShapeError as e:
            assert "add" in str(e) and "[3]" in str(e) and "[4]" in str(e), str(e)
        else:
            raise AssertionError("adding f32[3] and f32[4] did not raise ShapeError")

    def unknown_device(device: Device) -> None:
        try:
            axle.device(f"{device.backend}:9999")
        except axle.errors.DeviceError as e:
            assert device.name in str(e), f"the message should list the available devices: {e}"
        else:
            raise AssertionError(f"{device.backend}:9999 resolved to a device")

    def wrong_arity(device: Device) -> None:
        exe = compile_module(rep, device)
        try:
            exe.execute([to_buffer(np.zeros(3, np.float32), device)])
        except Exception:  # noqa: BLE001 - any exception is right; returning is not
            return
        raise AssertionError("executing with 1 argument instead of 2 returned instead of raising")

    def bad_value(device: Device) -> None:
        try:
            axle.device_put(np.array(["a"]), device)
        except TypeError:
            return
        raise AssertionError("placing a string array on the device did not raise TypeError")

    return [Check("errors/shape-mismatch", "errors", shape_mismatch, rep),
            Check("errors/unknown-device", "errors", unknown_device),
            Check("errors/wrong-arity", "errors", wrong_arity, rep),
            Check("errors/non-numeric-value", "errors", bad_value)]


def _base_dtypes_only(case: OpCase) -> bool:
    return all(n.dtype in BASE_DTYPES for n in case.module.entry.nodes if isinstance(n.type, TensorType))


def _quick(cases: list[OpCase]) -> list[OpCase]:
    """A few cases per op: every fourth of those in the first contract's dtypes (a stable
    smoke set, whatever dtypes join the table), or of all when the op has none there."""
    base = [c for c in cases if _base_dtypes_only(c)] or cases
    return base[::max(1, len(base) // 4)]


def kit_checks(quick: bool = False) -> list[Check]:
    """Every check; ``quick`` keeps a few cases per op (for smoke runs), all the rest."""
    out: list[Check] = []
    for op in sorted(CORE_PRIMITIVES, key=lambda o: o.value):
        cat = "dot" if op is Op.DOT_GENERAL else f"op.{op.value}"
        cases = cases_for(op)
        out += [_case_check(c, cat, unoptimized=False) for c in (_quick(cases) if quick else cases)]
    for case in fused_cases():
        multi = case.module.entry.root.op is Op.TUPLE
        out.append(_case_check(case, "multi-output" if multi else "fusion"))
    out += [_case_check(case, "control") for case in control_cases()]
    for dt in ALL_DTYPES:
        for shape in ((), (0,), (1,), (7,), (3, 0, 2), (5, 129)):
            out.append(_transfer_check(dt, shape))
    out.append(_transfer_check(DType.FLOAT32, (LARGE_ELEMENTS,)))
    out += _large_checks() + _empty_checks() + [_caching_check()] + _error_checks()
    return out + contract_checks(quick)


_BY_ID: dict[str, Check] = {}


def check_named(check_id: str) -> Check:
    """The kit's check with this id (rebuilds its module and inputs: the way to repeat a
    failure the kit printed, e.g. ``check_named(ID).case.inputs``)."""
    if not _BY_ID:
        _BY_ID.update((c.id, c) for c in kit_checks())
    try:
        return _BY_ID[check_id]
    except KeyError:
        raise KeyError(f"the kit has no check {check_id!r}") from None


def builder_module(name: str, build: Callable[[Builder], Node]) -> Module:
    """A module from a builder callback (used by axle doctor's tiny kernel)."""
    b = Builder(name)
    return b.build(build(b))


def plan_signature(module: Module) -> tuple:
    """What a backend built on the shared kernel plan (axle.lowering.plan: cpu, opencl)
    compiles from ``module``: each launch's computation (structure, attributes, types),
    kind and buffer wiring, the constants and the results; kernel names left out."""
    kp = kernel_plan(module, assign_buffers=False)
    launches = tuple((l.computation.structural_key if l.computation is not None else None, l.kind, l.is_bitcast,
                      l.inputs, l.outputs) for l in kp.launches)
    consts = tuple(sorted((k, v.dtype.str, v.shape, v.tobytes()) for k, v in kp.constants.items()))
    return launches, consts, tuple(kp.results)


def kit_compiles_same(case: OpCase, module: Module, device: Device, *, program: bool = False) -> bool:
    """Whether the kit's own check of ``case`` on ``device`` already compiles exactly the
    kernels of ``module`` (a form of ``case.module`` a backend test runs with the same
    inputs): the kit runs every op case optimized, and whole programs (fused_cases,
    ``program``) optimized and unoptimized. Backend tests use it to leave out the forms
    the kit runs already (DESIGN.md: op cases run once per backend)."""
    sig = plan_signature(module)
    if program and sig == plan_signature(case.module):
        return True
    return sig == plan_signature(optimize_for(case.module, device))
