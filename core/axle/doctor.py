"""``axle doctor``: checks every installed backend and says why one does not work.

For each backend: did it import and initialize (with which contract version), which
devices it has, and does a tiny kernel compile, run on each device and match the
reference interpreter. One row per backend; the reason column says what to fix.

``axle doctor`` checks each backend in its own worker process (:func:`diagnose_isolated`),
within :data:`TIMEOUT_S`: a backend that segfaults or hangs in its import, its
constructor or its kernel gets a FAIL row saying where, and the table is still printed
whole. :func:`diagnose` is the same check in this process.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace

import numpy as np

from .backend import Device
from .compiler import compile_module
from .frontend.device_put import to_buffer
from .interpreter import evaluate
from .ir.builder import Builder
from .ir.dtypes import DType
from .ir.module import Module
from .ir.ops import CORE_PRIMITIVES
from .ir.types import TensorType
from .partition import HOST_BACKENDS, placement_of
from .registry import NAMESPACE, REGISTRY, BackendStatus, Registry, _entry_points, _selected
from .testing.cases import assert_close, tolerance
from .testing.workers import Lost, Pool, Raised, note

#: seconds one backend's check may take in its worker (import, devices, tiny kernels)
TIMEOUT_S = 120.0

#: the tiny kernel: sum(x * y + x) over an odd length, every backend's smallest fusion
TINY_N = 17


@dataclass
class DoctorRow:
    backend: str
    ok: bool
    api: str = "-"
    devices: str = "-"
    #: core primitives the first device claims (the rest runs on the host)
    claims: str = "-"
    kernel: str = "-"
    reason: str = ""
    #: the backend's priority (the table's order: highest first, as ``axle devices``)
    priority: int = -1


def _tiny_module() -> Module:
    b = Builder("doctor_tiny_kernel")
    t = TensorType(DType.FLOAT32, (TINY_N,))
    x, y = b.parameter(t, name="x"), b.parameter(t, name="y")
    return b.build(b.reduce(b.add(b.mul(x, y), x), kind="sum", axes=(0,)))


def check_kernel(device: Device) -> str:
    """Runs the tiny kernel on a device; '' when it matches the interpreter, else why not.
    Raises on failures to compile or run."""
    module = _tiny_module()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(TINY_N).astype(np.float32) for _ in range(2)]
    with warnings.catch_warnings():  # a failed compile is reported in the table instead
        warnings.simplefilter("ignore")
        exe = compile_module(module, device)
    out = exe.execute([to_buffer(x, device) for x in xs])
    got = np.asarray(REGISTRY.backend_for(device).to_host(out[0]))
    rtol, atol = tolerance(DType.FLOAT32, None, TINY_N)
    try:
        assert_close(got, evaluate(module, *xs)[0], rtol, atol, "tiny kernel")
    except AssertionError as e:
        return f"wrong result: {str(e).strip().splitlines()[0]}"
    summary = placement_of(exe)
    failed = [c.reason for c in summary.clusters if c.reason.startswith("compile failed")] if summary else []
    if failed:
        return f"{failed[0]} (the host ran it instead)"
    return UNCLAIMED if summary and summary.fallback else ""


#: not a failure: a partial backend may leave the tiny kernel's ops to the host
UNCLAIMED = "ran on the host fallback (the device does not claim these ops)"


def diagnose(registry: Registry = REGISTRY) -> list[DoctorRow]:
    """One row per installed backend, checked in this process."""
    return [diagnose_status(st) for st in registry.statuses().values()]


def diagnose_status(st: BackendStatus) -> DoctorRow:
    """A backend's row from its registry status: its devices, claims and tiny kernel."""
    if not st.available or st.backend is None:
        return DoctorRow(st.name, False, reason=st.reason)
    b = st.backend
    devs = list(b.devices())
    row = DoctorRow(st.name, True, f"{b.api_version[0]}.{b.api_version[1]}", ", ".join(d.name for d in devs),
                    priority=b.priority)
    try:
        note("capabilities()")
        row.claims = f"{len(CORE_PRIMITIVES & b.capabilities(devs[0]).ops)}/{len(CORE_PRIMITIVES)} ops"
    except Exception as e:  # noqa: BLE001 - the table reports it
        row.claims = "?"
        row.reason = f"capabilities() failed: {type(e).__name__}: {e}"
    results = []
    for d in devs:
        note(replace(row))  # what is known so far, should the kernel take the process down
        note(f"the tiny kernel on {d.name}")  # where a crash or hang happened
        try:
            why = check_kernel(d)
        except Exception as e:  # noqa: BLE001 - the table reports it
            why = f"{type(e).__name__}: {e}".strip().splitlines()[0]
        results.append((d, why))
    bad = [(d, w) for d, w in results if w and w != UNCLAIMED]
    row.kernel = "ok" if not bad else "FAILED"
    row.ok = not bad
    row.reason = "; ".join(filter(None, [row.reason] + [f"{d.name}: {w}" for d, w in results if w]))
    return row


def diagnose_one(name: str) -> DoctorRow:
    """The row of backend ``name`` (in a worker): only it and the host backends are
    loaded, so that another plugin's crash at import cannot take this row down."""
    warnings.simplefilter("ignore")  # the row says what failed
    os.environ["AXLE_BACKENDS"] = ",".join(dict.fromkeys([name, *HOST_BACKENDS]))
    REGISTRY.reset()
    note("import, __init__() and devices()")
    return diagnose_status(REGISTRY.statuses()[name])


def backend_names() -> list[str]:
    """The backends ``axle doctor`` checks: those AXLE_BACKENDS selects, else every
    installed one (found without importing any)."""
    return _selected() or sorted(_entry_points(NAMESPACE))


def diagnose_isolated(names: list[str] | None = None, timeout: float = TIMEOUT_S) -> list[DoctorRow]:
    """:func:`diagnose` with each backend checked in a worker process: a crash or a hang
    is that backend's FAIL row (saying what it was doing), never the whole table's end."""
    names = backend_names() if names is None else names
    rows: dict[str, DoctorRow] = {}
    with Pool(1, timeout, capture=True) as pool:
        for (_, (name,)), answer in pool.imap([(diagnose_one, (n,)) for n in names]):
            if isinstance(answer, Lost):
                answer = _lost_row(name, answer)
            elif isinstance(answer, Raised):
                answer = DoctorRow(name, False, reason=f"the check raised {answer.error}")
            rows[name] = answer
    order = {n: i for i, n in enumerate(names)}
    return sorted(rows.values(), key=lambda r: (-r.priority, r.backend) if not _selected() else order[r.backend])


def _lost_row(name: str, lost: Lost) -> DoctorRow:
    """The row of a backend whose check crashed or hung: what was known before, and where."""
    known = [n for n in lost.notes if isinstance(n, DoctorRow)]
    stages = [n for n in lost.notes if isinstance(n, str)]
    where = f" in {stages[-1]}" if stages else ""
    said = f"; it printed: {lost.output.splitlines()[-1]}" if lost.output else ""
    row = replace(known[-1]) if known else DoctorRow(name, False)
    row.ok = False
    if stages and stages[-1].startswith("the tiny kernel"):
        row.kernel = lost.kind.upper()
    row.reason = "; ".join(filter(None, [row.reason, f"{lost.kind}{where}: {lost.detail}{said}"]))
    return row


def format_table(rows: list[DoctorRow]) -> str:
    head = ("backend", "status", "api", "devices", "claims", "tiny kernel", "reason")
    body = [(r.backend, "ok" if r.ok else "FAIL", r.api, r.devices, r.claims, r.kernel, r.reason) for r in rows]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = []
    for cells in [head, *body]:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + "  " + cells[-1])
    return "\n".join(line.rstrip() for line in lines)


def main(timeout: float = TIMEOUT_S) -> int:
    rows = diagnose_isolated(timeout=timeout)
    if not rows:
        print("no axle backends are installed (entry-point group 'axle.backends')")
        return 1
    print(format_table(rows))
    failing = [r.backend for r in rows if not r.ok]
    print(f"\n{len(rows) - len(failing)} of {len(rows)} backends work" +
          (f"; not working: {', '.join(failing)}" if failing else ""))
    return 1 if failing else 0
