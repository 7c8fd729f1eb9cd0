"""Smoke test of benchmarks/run.py with tiny fake bench modules (no timing assertions)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def run_mod():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    spec = importlib.util.spec_from_file_location("_bench_run_under_test", os.path.join(ROOT, "benchmarks", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


FAKE = textwrap.dedent('''
    from common import Row

    def run(quick):
        assert quick is True
        return [
            Row("fake", "elementwise n=4", {"numpy": 2.0, "axle cpu": 1.0, "axle opencl": 4.0},
                extra={"GB/s": 1.5}),
            Row("fake", "reduce n=4", {"numpy": 3.0, "axle cpu": 1.5, "axle opencl": 1.0}),
            Row("fake", "matmul", {"numpy": 1.0, "axle cpu": 2.0, "axle opencl": 1.0},
                extra={"GFLOP/s": {"numpy": 10.0, "axle cpu": 5.0}}),
            Row("fake", "compile latency", {"trace": 1.0, "trace+compile": 5.0}, baseline="trace"),
            Row("fake", "eager add", {"numpy": 0.001, "axle cpu": 0.004}, kind="dispatch"),
        ]
''')

BROKEN = "def run(quick):\n    raise RuntimeError('no device here')\n"


def test_run_writes_tables_report_and_plot(run_mod, tmp_path, capsys):
    benches = tmp_path / "benches"
    benches.mkdir()
    (benches / "bench_fake.py").write_text(FAKE)
    (benches / "bench_broken.py").write_text(BROKEN)
    (benches / "helper.py").write_text("raise SystemExit('not a bench module')\n")
    out = tmp_path / "docs" / "benchmarks.md"
    status = run_mod.main(["--quick", "--dir", str(benches), "--out", str(out), "--note", "under load"])
    assert status == 1  # the broken module is reported, the others still run
    printed = capsys.readouterr().out
    assert "elementwise n=4" in printed and "failed: RuntimeError: no device here" in printed
    md = out.read_text()
    assert "- Machine: " in md and "quick mode" in md and "- Devices: " in md and "- Note: under load" in md
    assert "## fake (`benchmarks/bench_fake.py`)" in md
    assert "Failed: `RuntimeError: no device here" in md
    # ms columns, ratios (baseline / impl) and extra columns
    assert "| elementwise n=4 | 2.000 | 1.000 | 4.000 | 2.00x | 0.50x | 1.5 |  |" in md
    assert "| reduce n=4 | 3.000 | 1.500 | 1.000 | 2.00x | 3.00x |  |  |" in md
    assert "| matmul | 1.000 | 2.000 | 1.000 | 0.50x | 1.00x |  | numpy 10, axle cpu 5 |" in md
    assert "| compile latency | 1.000 | 5.000 | 0.20x |" in md  # its own table, its own baseline
    png = tmp_path / "docs" / "benchmarks.png"
    if importlib.util.find_spec("matplotlib") is None:  # the `bench` extra is optional
        assert "No plot: matplotlib is not installed" in md and not png.exists()
    else:
        assert "![speedup per suite against each row's baseline" in md
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every row as data: the next run's "before"
    saved = json.loads((tmp_path / "docs" / "benchmarks.json").read_text())
    assert saved["quick"] is True and len(saved["rows"]) == 5
    assert saved["rows"][0] == {"suite": "fake", "workload": "elementwise n=4", "baseline": "numpy",
                                "times_ms": {"numpy": 2.0, "axle cpu": 1.0, "axle opencl": 4.0}}
    assert "## Before and after" not in md  # no earlier run


def test_a_second_run_reports_before_and_after(run_mod, tmp_path):
    benches = tmp_path / "benches"
    benches.mkdir()
    (benches / "bench_fake.py").write_text(FAKE)
    out = tmp_path / "benchmarks.md"
    before = {"when": "then", "quick": True, "machine": "m", "rows": [
        {"suite": "fake", "workload": "reduce n=4", "baseline": "numpy",
         "times_ms": {"numpy": 3.0, "axle cpu": 3.0}},
        {"suite": "fake", "workload": "gone", "baseline": "numpy", "times_ms": {"numpy": 1.0, "axle cpu": 1.0}}]}
    (tmp_path / "benchmarks.json").write_text(json.dumps(before))
    assert run_mod.main(["--quick", "--dir", str(benches), "--out", str(out)]) == 0
    md = out.read_text()
    assert "## Before and after" in md and "(then, quick mode, on: m)" in md
    # the row in both runs, axle implementations only: ms and ratio then and now
    assert "| fake | reduce n=4 | axle cpu | 3.000 | 1.500 | 1.00x | 2.00x |" in md
    assert "gone" not in md and "| fake | reduce n=4 | axle opencl |" not in md
    assert len(json.loads((tmp_path / "benchmarks.json").read_text())["rows"]) == 5  # replaced


def test_panels_per_suite_and_dispatch_on_its_own_axis(run_mod):
    from common import Row

    res = run_mod.SuiteResult("bench_x", [Row("s", "w", {"numpy": 2.0, "a": 4.0}),
                                          Row("s", "lat", {"trace": 1.0, "c": 2.0}, baseline="trace"),
                                          Row("s", "add", {"numpy": 0.001, "a": 0.004}, kind="dispatch")])
    (title, _, bars), (dtitle, dlabel, dbars) = run_mod.panels([res])
    assert title == "s" and bars == [("w", {"a": 0.5}), ("lat (vs trace)", {"c": 0.5})]
    assert dtitle == "eager dispatch" and "microseconds" in dlabel
    assert dbars == [("add", {"numpy": 1.0, "a": 4.0})]


def test_only_filter_and_no_write(run_mod, tmp_path):
    benches = tmp_path / "b"
    benches.mkdir()
    (benches / "bench_fake.py").write_text(FAKE)
    (benches / "bench_broken.py").write_text(BROKEN)
    out = tmp_path / "r.md"
    assert run_mod.main(["--quick", "--dir", str(benches), "--only", "fake", "--no-write", "--out", str(out)]) == 0
    assert not out.exists()


def test_measure_rotates_the_order_and_settles_each_sample(run_mod):
    """Every implementation follows every other one equally often, each timed call follows
    an untimed call of its own (no other library's spinning threads beside it), and
    OpenBLAS/libgomp, which spin for longer than a call, are told to wait passively."""
    import common

    calls: list[str] = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    times = common.measure(fns, repeats=3, warmup=0, settle=0)
    assert set(times) == {"a", "b", "c"}
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    calls.clear()
    before = {"b": lambda: calls.append("before b")}
    common.measure(fns, repeats=2, warmup=0, before=before)
    assert calls == ["a", "a", "b", "before b", "b", "c", "c",
                     "b", "before b", "b", "c", "c", "a", "a"]
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] and os.environ["OMP_WAIT_POLICY"]
    calls.clear()
    common.measure({"a": fns["a"]}, repeats=1, warmup=0, settle=0, settle_ms=5.0)
    assert len(calls) > 2 and set(calls) == {"a"}  # called on until 5 ms had passed


def test_first_call_filler_runs_on_and_the_next_process_hits(tmp_path):
    """benchmarks/first_call.py: the process that fills the cache takes ``--then`` (the
    program run on, untimed), and the next process's first call finds every compiled piece
    on disk and writes nothing."""
    import subprocess

    script = os.path.join(ROOT, "benchmarks", "first_call.py")
    env = {**os.environ, "AXLE_FLAGS": f"--compile_cache={tmp_path}"}

    def run(*extra: str) -> dict:
        out = subprocess.run([sys.executable, script, "softmax", "cpu:0", *extra], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    filled = run("--then", "8")
    assert filled["disk_cache_hits"] == 0 and filled["disk_cache_writes"] > 0
    hit = run()
    assert hit["disk_cache_misses"] == 0 and hit["disk_cache_hits"] > 0
    assert hit["disk_cache_writes"] == 0
