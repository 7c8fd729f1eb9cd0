"""Timelines: trace-event JSON format, eager vs jit kernel events, spans, process-wide
trace_to, kernel names that map back to fusions."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import axle
import axle.numpy as anp
from axle import profiler
from axle.compiler import compile_module
from axle.ir.builder import Builder, make_node
from axle.ir.ops import Op

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEV = "interpreter:0"

# The trace-event format (JSON object form) as a JSON schema, checked by an independent
# small walker below, so that profiler.validate is not the only judge of its own output.
EVENT_SCHEMA = {
    "required": ["name", "ph", "pid"],
    "properties": {
        "name": str, "ph": str, "pid": int, "tid": int, "ts": (int, float), "dur": (int, float),
        "cat": str, "args": dict, "s": str,
    },
}


def _schema_check(obj: dict) -> None:
    assert set(obj) >= {"traceEvents"}
    assert obj.get("displayTimeUnit", "ms") in ("ms", "ns")
    for ev in obj["traceEvents"]:
        for key in EVENT_SCHEMA["required"]:
            assert key in ev, f"{ev} lacks {key}"
        for key, typ in EVENT_SCHEMA["properties"].items():
            if key in ev:
                assert isinstance(ev[key], typ) and not isinstance(ev[key], bool), f"{key} of {ev}"
        if ev["ph"] == "X":
            assert ev["dur"] >= 0 and "ts" in ev and "tid" in ev
        if ev["ph"] != "M":
            assert "ts" in ev


def model_fn(x, y, z):
    return anp.sum(x + y * z)


def _seed_inputs(n: int = 1000):
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(n).astype(np.float32) for _ in range(3))


def test_trace_file_is_valid_trace_event_json(tmp_path):
    path = tmp_path / "timeline.json"
    x, y, z = _seed_inputs()
    with axle.device(DEV):
        f = axle.jit(model_fn)
        with profiler.trace(str(path)):
            out = f(x, y, z)
            float(out)
    obj = json.loads(path.read_text())
    assert profiler.validate(obj) == []
    _schema_check(obj)
    # device tracks are named through metadata events
    names = [e["args"]["name"] for e in obj["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert f"device {DEV}" in names


def test_validate_rejects_malformed_traces():
    good = {"name": "k", "ph": "X", "ts": 1.0, "dur": 2.0, "pid": 1, "tid": 1}
    assert profiler.validate({"traceEvents": [good]}) == []
    assert profiler.validate({"events": []})  # no traceEvents
    assert profiler.validate("nope")
    assert any("dur" in p for p in profiler.validate([dict(good, dur=-1)]))
    assert any("phase" in p for p in profiler.validate([dict(good, ph="Q")]))
    assert any("tid" in p for p in profiler.validate([dict(good, tid="device x")]))
    assert any("ts" in p for p in profiler.validate([dict(good, ts="now")]))
    assert any("'E'" in p for p in profiler.validate([{"ph": "E", "ts": 1, "pid": 1, "tid": 1}]))
    assert any("args" in p for p in profiler.validate([dict(good, args=[1])]))


def test_seed_eager_three_kernel_events():
    x, y, z = _seed_inputs()
    with axle.device(DEV):
        xs, ys, zs = axle.device_put((x, y, z))
        with profiler.trace() as events:
            model_fn(xs, ys, zs)
    kernels = profiler.kernels(events)
    assert [k["name"].split(".")[0] for k in kernels] == ["multiply", "add", "reduce"]
    assert all(k["tid"] == f"device {DEV}" for k in kernels)


def test_seed_jit_kernel_events_match_the_executable():
    x, y, z = _seed_inputs()
    with axle.device(DEV):
        f = axle.jit(model_fn)
        f(x, y, z)  # compile outside the recording
        xs, ys, zs = axle.device_put((x, y, z))
        with profiler.trace() as events:
            f(xs, ys, zs)
        report = f.lower(xs, ys, zs).compile().report()
    kernels = profiler.kernels(events)
    assert len(kernels) == report["kernels"]
    # every op of the seed example shows up in some kernel's name
    joined = " ".join(k["name"] for k in kernels)
    for op in ("add", "multiply", "reduce"):
        assert op in joined
    # no tracing or compiling on a cache hit
    assert not [e for e in events if e["cat"] in ("trace", "compile")]


def test_seed_jit_is_one_fused_kernel_event():
    """The seed's point: eager launches three kernels, jit launches one fused kernel."""
    x, y, z = _seed_inputs()
    with axle.device(DEV):
        f = axle.jit(model_fn)
        xs, ys, zs = axle.device_put((x, y, z))
        f(xs, ys, zs)
        with profiler.trace() as events:
            f(xs, ys, zs)
    (kernel,) = profiler.kernels(events)
    assert kernel["name"] == "fusion [add, multiply, reduce]"


def test_spans_for_tracing_optimizer_compile_and_transfers(compile_cache):  # noqa: ANN001
    # a cache of its own: an optimized module another test left in the session's cache
    # would be loaded, and no optimizer pass would run (nor show)
    x, y, z = _seed_inputs()
    with axle.device(DEV), profiler.trace() as events:
        out = axle.jit(model_fn)(x, y, z)
        np.asarray(out)
    cats = {e["cat"] for e in events}
    assert {"trace", "optimize", "pass", "compile", "transfer", "kernel"} <= cats
    passes = {e["name"] for e in events if e["cat"] == "pass"}
    assert "fusion" in passes  # each optimizer pass is a box of its own
    transfers = [e for e in events if e["cat"] == "transfer"]
    # three arguments in, one result out, each with its byte count
    assert sum(e["name"].startswith("to ") for e in transfers) == 3
    assert sum(e["name"].startswith("from ") for e in transfers) == 1
    assert {e["args"]["bytes"] for e in transfers if e["name"].startswith("to ")} == {4000}


def _fused_seed_module(n: int = 16):
    inner = Builder("fused_computation")
    a, b, c = (inner.parameter(f"f32[{n}]") for _ in range(3))
    r = inner.op(Op.REDUCE, inner.op(Op.ADD, a, inner.op(Op.MUL, b, c)), axes=(0,), kind="sum")
    comp = inner.computation(r)
    outer = Builder("seed")
    x, y, z = (outer.parameter(f"f32[{n}]", name=s) for s in "xyz")
    fused = make_node(Op.FUSION, (x, y, z), {"kind": "input", "computation": comp})
    return outer.build(outer.op(Op.NEG, fused))


def test_kernel_names_map_back_to_fusions():
    module = _fused_seed_module()
    dev = axle.device(DEV)
    exe = compile_module(module, dev, optimize=False)
    args = [axle.device_put(np.ones(16, np.float32), dev).buffer for _ in range(3)]
    with profiler.trace() as events:
        (out,) = exe.execute(args)
    names = [k["name"] for k in profiler.kernels(events)]
    assert names == ["fusion [add, multiply, reduce]", "negate"]
    by_uid = profiler.kernel_names(module)  # what backends use for the same names
    assert [by_uid[n.uid] for n in module.entry.nodes if n.op in (Op.FUSION, Op.NEG)] == names
    assert float(out.handle) == -32.0
    assert len(names) == exe.report()["kernels"]


def test_nested_traces_each_get_their_events(tmp_path):
    x, y, z = _seed_inputs()
    with axle.device(DEV):
        xs, ys, zs = axle.device_put((x, y, z))
        with profiler.trace(str(tmp_path / "outer.json")) as outer:
            model_fn(xs, ys, zs)
            with profiler.trace() as inner:
                model_fn(xs, ys, zs)
    assert len(profiler.kernels(inner)) == 3
    assert len(profiler.kernels(outer)) == 6
    assert not profiler.enabled()


def test_nothing_recorded_outside_a_trace():
    assert not profiler.enabled()
    with profiler.span("x", "test"):
        pass
    profiler.kernel_event("k", DEV, 0.0, 1.0)
    with profiler.trace() as events:
        pass
    assert events == []


def test_summary_counts_launches():
    x, y, z = _seed_inputs()
    with axle.device(DEV):
        xs, ys, zs = axle.device_put((x, y, z))
        with profiler.trace() as events:
            model_fn(xs, ys, zs)
            model_fn(xs, ys, zs)
    text = profiler.summary(events)
    assert "kernel" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("multiply"))
    assert line.split()[1] == "2"


def test_trace_to_flag_writes_at_process_exit(tmp_path):
    out = tmp_path / "sub" / "proc.json"
    script = textwrap.dedent(f"""
        import numpy as np, axle, axle.numpy as anp
        with axle.device("{DEV}"):
            x = axle.device_put(np.ones(8, np.float32))
            float(anp.sum(x * x + x))
    """)
    env = dict(os.environ, AXLE_FLAGS=f"--trace_to={out}")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=ROOT, timeout=120)
    obj = json.loads(out.read_text())
    assert profiler.validate(obj) == []
    kernels = [e for e in obj["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == 3


def test_trace_to_set_at_runtime_and_switched_off(tmp_path):
    out = tmp_path / "rt.json"
    try:
        axle.config.update(trace_to=str(out))
        with axle.device(DEV):
            x = axle.device_put(np.ones(4, np.float32))
            np.asarray(x + x)
    finally:
        axle.config.update(trace_to="")
    assert not profiler.enabled()
    obj = json.loads(out.read_text())  # switching off writes what was recorded
    assert profiler.validate(obj) == []
    assert [e["name"] for e in obj["traceEvents"] if e.get("cat") == "kernel"] == ["add"]


def test_cli_trace_summary(tmp_path, capsys):
    from axle.cli import main

    path = tmp_path / "t.json"
    with axle.device(DEV), profiler.trace(str(path)):
        x = axle.device_put(np.ones(4, np.float32))
        np.asarray(x * x)
    assert main(["trace", str(path)]) == 0
    assert "valid trace-event JSON" in capsys.readouterr().out
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 0}]}))
    assert main(["trace", str(path)]) == 1
    assert "1 problems" in capsys.readouterr().out
