"""The ONNX backend node test suite as conformance: every case the onnx package generates,
run through axle.onnx on cpu:0, opencl:0 and template:0 against the expected outputs.

- an in-scope case passes, unless onnx_expected_failures.py lists it (with its reason): then
  it must still fail, so that a newly passing case is noticed (remove it from the list);
- an out-of-scope case (a dtype axle lacks, sequences, an op outside axle's scope, an op
  version before opset 13; onnx_node_suite.out_of_scope says which) must be refused by
  axle.onnx.load with an OnnxImportError before anything runs.

The counts per backend are printed at the end of the run (docs/onnx.md records them)."""
from __future__ import annotations

import pytest
from onnx_expected_failures import EXPECTED, EXPECTED_ON
from onnx_node_suite import cases, out_of_scope, run_case

import axle.onnx as ao
from axle.testing import require_backend

DEVICES = ["cpu:0", "opencl:0", "template:0"]
_ALL = cases()
IN_SCOPE = sorted(n for n, c in _ALL.items() if out_of_scope(c) is None)
OUT_OF_SCOPE = sorted(n for n in _ALL if n not in set(IN_SCOPE))
#: the module's share of CI time (about a minute on this 2-core machine): cpu:0 runs every
#: CPU_STRIDE-th in-scope case in the full tier and every FAST_STRIDE-th in the fast tier;
#: opencl:0 (PoCL compiles each kernel for a second or more here) and template:0 run every
#: OTHER_STRIDE-th, at different offsets. The whole suite on one device, as docs/onnx.md
#: counts it: `python tests/onnx/onnx_node_suite.py DEVICE`.
CPU_STRIDE = 3
FAST_STRIDE = 10
OTHER_STRIDE = 20
#: device -> passed / failed among the cases run (printed by conftest.py at the end)
COUNTS: dict[str, dict[str, int]] = {d: {"passed": 0, "failed": 0} for d in DEVICES}


def _params() -> list[object]:
    out: list[object] = []
    for i, name in enumerate(IN_SCOPE):
        if i % FAST_STRIDE == 0:
            out.append(pytest.param(name, "cpu:0"))
        elif i % CPU_STRIDE == 0:
            out.append(pytest.param(name, "cpu:0", marks=pytest.mark.full_only))
        if i % OTHER_STRIDE == 1:
            out.append(pytest.param(name, "opencl:0", marks=pytest.mark.full_only))
        if i % OTHER_STRIDE == 11:
            out.append(pytest.param(name, "template:0", marks=pytest.mark.full_only))
    return out


def _expected(name: str, device: str) -> str | None:
    """The reason ``name`` is listed as failing on ``device``, or None."""
    return EXPECTED_ON.get(device.split(":")[0], {}).get(name) or EXPECTED.get(name)


@pytest.mark.parametrize(("name", "device"), _params())
def test_node_case(name: str, device: str) -> None:
    require_backend(device.split(":")[0])
    err = run_case(_ALL[name], device)
    COUNTS[device]["passed" if err is None else "failed"] += 1
    reason = _expected(name, device)
    if reason is None:
        assert err is None, f"{name} on {device}: {err}"
    else:
        assert err is not None, f"{name} now passes on {device}: remove it from onnx_expected_failures.py ({reason})"


@pytest.mark.parametrize("name", OUT_OF_SCOPE)
def test_out_of_scope_case_is_refused_before_running(name: str) -> None:
    with pytest.raises(ao.OnnxImportError):
        ao.load(_ALL[name].model)


def test_expected_failures_name_real_in_scope_cases() -> None:
    listed = set(EXPECTED) | {n for d in EXPECTED_ON.values() for n in d}
    stale = sorted(listed - set(IN_SCOPE))
    assert not stale, f"onnx_expected_failures.py lists cases that are not in-scope node cases: {stale}"
    assert all(r.strip() for r in EXPECTED.values())
