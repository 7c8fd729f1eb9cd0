"""``axle doctor``: checks every installed backend and says why one does not work.

For each backend: did it import and initialize (with which contract version), which
devices it has, and does a tiny kernel compile, run on each device and match the
reference interpreter. One row per backend; the reason column says what to fix.
"""
from __future__ import annotations

from dataclasses import dataclass

import warnings

import numpy as np

from .registry import REGISTRY, Registry

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


def _tiny_module():  # noqa: ANN202 - axle.ir.Module
    from .ir.builder import Builder
    from .ir.dtypes import DType
    from .ir.types import TensorType

    b = Builder("doctor_tiny_kernel")
    t = TensorType(DType.FLOAT32, (TINY_N,))
    x, y = b.parameter(t, name="x"), b.parameter(t, name="y")
    return b.build(b.reduce(b.add(b.mul(x, y), x), kind="sum", axes=(0,)))


def check_kernel(device) -> str:  # noqa: ANN001 - axle.Device
    """Runs the tiny kernel on a device; '' when it matches the interpreter, else why not.
    Raises on failures to compile or run."""
    from .compiler import compile_module
    from .interpreter import evaluate
    from .partition import placement_of
    from .placement import to_buffer
    from .testing.cases import assert_close, tolerance
    from .ir.dtypes import DType

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
    rows = []
    for st in registry.statuses().values():
        if not st.available or st.backend is None:
            rows.append(DoctorRow(st.name, False, reason=st.reason))
            continue
        b = st.backend
        devs = list(b.devices())
        row = DoctorRow(st.name, True, f"{b.api_version[0]}.{b.api_version[1]}", ", ".join(d.name for d in devs))
        try:
            from .ir.ops import CORE_PRIMITIVES

            row.claims = f"{len(CORE_PRIMITIVES & b.capabilities(devs[0]).ops)}/{len(CORE_PRIMITIVES)} ops"
        except Exception as e:  # noqa: BLE001 - the table reports it
            row.claims = "?"
            row.reason = f"capabilities() failed: {type(e).__name__}: {e}"
        results = []
        for d in devs:
            try:
                why = check_kernel(d)
            except Exception as e:  # noqa: BLE001 - the table reports it
                why = f"{type(e).__name__}: {e}".strip().splitlines()[0]
            results.append((d, why))
        bad = [(d, w) for d, w in results if w and w != UNCLAIMED]
        row.kernel = "ok" if not bad else "FAILED"
        row.ok = not bad
        row.reason = "; ".join(filter(None, [row.reason] + [f"{d.name}: {w}" for d, w in results if w]))
        rows.append(row)
    return rows


def format_table(rows: list[DoctorRow]) -> str:
    head = ("backend", "status", "api", "devices", "claims", "tiny kernel", "reason")
    body = [(r.backend, "ok" if r.ok else "FAIL", r.api, r.devices, r.claims, r.kernel, r.reason) for r in rows]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = []
    for cells in [head, *body]:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + "  " + cells[-1])
    return "\n".join(line.rstrip() for line in lines)


def main() -> int:
    rows = diagnose()
    if not rows:
        print("no axle backends are installed (entry-point group 'axle.backends')")
        return 1
    print(format_table(rows))
    failing = [r.backend for r in rows if not r.ok]
    print(f"\n{len(rows) - len(failing)} of {len(rows)} backends work" +
          (f"; not working: {', '.join(failing)}" if failing else ""))
    return 1 if failing else 0
