"""axle explain: the optimized module, kernels with fusion reasons, buffers, placement,
generated code; the HTML report; the command line."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.backend import Capabilities
from axle.cli import main
from axle.explain import host_device_name, placement, recorded_reason
from axle.frontend.jit import Lowered
from axle.frontend.pytree import flatten
from axle.ir.builder import Builder, make_node
from axle.ir.ops import CORE_PRIMITIVES, Op
from axle.ir import dot as dotmod
from axle.partition import host_devices, partition
from axle.passes import optimize
from axle.testing import require_backend

DEV = "interpreter:0"


def model_fn(x, y, z):
    return anp.sum(x + y * z)


def mnist_step(w, b, x, y):
    """One step of the seed tutorial: softmax regression, cross-entropy, SGD 0.5
    (gradient written out by hand so the test needs no autodiff)."""
    logits = x @ w + b
    e = anp.exp(logits - anp.max(logits, axis=1, keepdims=True))
    p = e / anp.sum(e, axis=1, keepdims=True)
    loss = -anp.mean(anp.sum(y * anp.log(p), axis=1))
    g = (p - y) / x.shape[0]
    return w - 0.5 * (x.T @ g), b - 0.5 * anp.sum(g, axis=0), loss


def mnist_args():
    rng = np.random.default_rng(0)
    w = np.zeros((784, 10), np.float32)
    b = np.zeros(10, np.float32)
    x = rng.random((100, 784), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 100)]
    return w, b, x, y


def _explain(fn, *args, **kw):
    with axle.device(DEV):
        return axle.jit(fn).lower(*args).explain(**kw)


def test_seed_example_explained():
    x = np.ones(1024, np.float32)
    expl = _explain(model_fn, x, x, x)
    with axle.device(DEV):
        report = axle.jit(model_fn).lower(x, x, x).compile().report()
    assert len(expl.kernels) == report["kernels"]
    text = str(expl)
    for section in ("-- optimized module --", "-- kernels", "-- buffers --", "-- placement --",
                    "-- generated code (interpreter) --"):
        assert section in text
    assert expl.optimized.as_text().strip() in text
    # every computing op of the traced module is inside some kernel
    ops = [op for k in expl.kernels for op in k.ops]
    for op in ("add", "multiply", "reduce"):
        assert op in ops
    for k in expl.kernels:
        assert k.title in text and k.device == DEV
        if k.op == "fusion":
            assert f"{len(k.ops)} ops inside: {', '.join(k.ops)}" in text
    # the result is an output, everything else a temporary
    assert sum(k.is_output for k in expl.kernels) == 1
    assert "everything runs on interpreter:0 (no fallback)" in text
    assert expl.stages[0][0] == "traced" and expl.stages[-1][1] is expl.optimized
    # the optimizer fuses the whole seed into one input fusion: nothing written in between
    (k,) = expl.kernels
    assert k.title == "%fusion (input) [add, multiply, reduce]" and k.ops == ["multiply", "add", "reduce"]
    assert "fusion" in [name for name, _ in expl.stages]
    assert "temp_bytes        0" in text and "peak_bytes" in text


def test_mnist_step_explained():
    expl = _explain(mnist_step, *mnist_args())
    with axle.device(DEV):
        report = axle.jit(mnist_step).lower(*mnist_args()).compile().report()
    assert len(expl.kernels) == report["kernels"]
    dots = [k for k in expl.kernels if "dot" in k.ops]
    assert len(dots) == 2  # forward logits and the weight gradient
    # dots stay apart from their elementwise neighbours, and explain says so from the records
    reasons = [nb for k in expl.kernels for nb in k.neighbours if nb.name in {d.name for d in dots}]
    assert reasons and all(nb.code == "contraction" and "dot_epilogue off" in nb.reason for nb in reasons)
    assert expl.reasons_source == "the fusion pass's records"
    assert sum(k.is_output for k in expl.kernels) == 3  # new w, new b, loss
    assert any(k.kind == "row" for k in expl.kernels)  # the softmax, a row at a time
    assert len(expl.kernels) < len([n for n in expl.traced.entry.nodes if n.op not in (Op.PARAMETER, Op.CONSTANT)])
    text = expl.text(source=False)
    assert "generated code" not in text
    assert "temporaries (kernel results read by later kernels)" in text


def _softmax_twice(x):
    """A row-sum read by two kernels: the division and a second, column reduction."""
    e = anp.exp(x)
    s = anp.sum(e, axis=1, keepdims=True)
    return e / s, anp.sum(s * s, axis=0)


def test_explain_prints_the_fusion_pass_records():
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    expl = _explain(_softmax_twice, x)
    recorded = {r.fusion: r for r in expl.optimized.fusion_records}
    text = expl.text(source=False)
    for k in expl.kernels:
        if k.op == "fusion":  # every fusion the pass formed has its record, shown
            assert k.record is recorded[k.record.fusion] and k.record.kind == k.kind
            assert f"fusion pass: {k.kind} fusion %{k.record.fusion} of {', '.join(k.record.members)}" in text
        for nb in k.neighbours:
            assert nb.code and f"not fused with producer %{nb.name}: [{nb.code}] {nb.reason}" in text
    codes = {nb.code for k in expl.kernels for nb in k.neighbours}
    assert "duplicate-reduction" in codes or "multiple-consumers" in codes


def test_recorded_reason_reads_both_sides_of_an_edge():
    b = Builder("r")
    x = b.parameter("f32[4,8]")
    w = b.parameter("f32[8,8]")
    d = b.op(Op.DOT_GENERAL, b.op(Op.EXP, x), w, lhs_contracting=(1,), rhs_contracting=(0,), lhs_batch=(), rhs_batch=())
    m = optimize(b.build(b.op(Op.NEG, d)))
    fusions = [n for n in m.entry.nodes if n.op is Op.FUSION]
    dot = next(n for n in m.entry.nodes if n.op is Op.DOT_GENERAL)
    (exp_f,) = [f for f in fusions if f in dot.operands]
    (neg_f,) = [f for f in fusions if dot in f.operands]
    # exp -> dot: only the producer is a fusion (its consumer entry); dot -> neg: the consumer's
    assert recorded_reason(m, exp_f, dot)[0] == "contraction"
    assert recorded_reason(m, dot, neg_f)[0] == "contraction"
    # a module the pass did not fuse has no records, and explain invents none
    unfused = b.build(b.op(Op.NEG, d))
    assert unfused.fusion_records == () and recorded_reason(unfused, d, d) is None


def test_placement_follows_capabilities():
    no_exp = Capabilities(ops=CORE_PRIMITIVES - {Op.EXP})

    def f(x):
        return anp.exp(x) + 1

    m = axle.jit(f).lower(np.ones(8, np.float32)).module
    accel = axle.Device("accel", 0, kind="accelerator")  # a device without exp
    placed, why = placement(m, accel, no_exp)
    exp_node = next(n for n in m.entry.nodes if n.op is Op.EXP)
    add_node = next(n for n in m.entry.nodes if n.op is Op.ADD)
    assert placed[add_node.uid] == "accel:0"
    assert placed[exp_node.uid] == host_device_name(accel) != "accel:0"
    assert "not in the device's capabilities" in why[exp_node.uid]


def test_placement_is_the_partitioners_cost_guard_included():
    """A reshape between two host ops stays on the host (the partitioner's cost guard);
    explain used to place it on the device because the device claims reshape."""
    no_exp = Capabilities(ops=CORE_PRIMITIVES - {Op.EXP})

    def f(x):
        return anp.exp(anp.exp(x).reshape(2, 4))

    m = axle.jit(f).lower(np.ones(8, np.float32)).module
    accel = axle.Device("accel", 0, kind="accelerator")
    placed, why = placement(m, accel, no_exp)
    reshape = next(n for n in m.entry.nodes if n.op is Op.RESHAPE)
    host = host_devices(accel)[0]
    clusters = partition(m, accel, no_exp, host)
    on = {n.uid: c.device.name for c in clusters for n in c.nodes}
    assert on[reshape.uid] == host.name
    assert {u: placed[u] for u in on} == on
    assert why[reshape.uid].startswith("cost guard")


def test_fallbacks_on_a_partial_backend():
    """The template backend claims elementwise ops and reductions only: the MNIST step's
    dots fall back to the host, and explain says where, why, and what crossed."""
    dev = require_backend("template")
    expl = axle.jit(mnist_step, device=dev).lower(*mnist_args()).explain(source=False)
    dots = [k for k in expl.kernels if k.op == "dot"]
    assert len(dots) == 2 and all(k.device != dev.name for k in dots)
    assert all("'dot' is not in the device's capabilities" in k.fallback_reason for k in dots)
    text = str(expl)
    assert f"fallback: %{dots[0].name} (dot) runs on {dots[0].device}" in text
    assert "as compiled (partitioner):" in text and "bytes crossed per call" in text
    assert expl.notes and "partitioned" in expl.notes[0]
    assert any(k.kind in ("row", "loop", "input") and k.device == dev.name for k in expl.kernels)
    # the picture colors by device, the host grey
    dot = expl.dot()
    assert "cluster_legend" in dot and f'fillcolor="{dotmod._HOST_COLOR}"' in dot


def test_kernel_sources_are_listed(monkeypatch):
    from axle.backends.interpreter import InterpreterExecutable

    monkeypatch.setattr(InterpreterExecutable, "kernel_sources",
                        lambda self: {"fusion_0": "__kernel void fusion_0(global float* out) { }"})
    x = np.ones(4, np.float32)
    text = str(_explain(model_fn, x, x, x))
    assert "// ---- fusion_0 ----\n__kernel void fusion_0" in text


def _fused_lowered():
    inner = Builder("fused_computation")
    a, b_, c = (inner.parameter("f32[16]") for _ in range(3))
    comp = inner.computation(inner.op(Op.REDUCE, inner.op(Op.ADD, a, inner.op(Op.MUL, b_, c)),
                                      axes=(0,), kind="sum"))
    outer = Builder("seed")
    x, y, z = (outer.parameter("f32[16]", name=s) for s in "xyz")
    fused = make_node(Op.FUSION, (x, y, z), {"kind": "input", "computation": comp})
    module = outer.build(outer.op(Op.NEG, fused))
    return Lowered(module, axle.device(DEV), flatten(0)[1])


def test_fusion_kernel_and_html_report():
    old = axle.config.optimize
    axle.config.update(optimize=False)  # explain this hand-fused module as it is
    try:
        expl = _fused_lowered().explain()
    finally:
        axle.config.update(optimize=old)
    fusion = expl.kernels[0]
    assert fusion.title == "%fusion (input) [add, multiply, reduce]"
    assert fusion.ops == ["multiply", "add", "reduce"]
    assert "3 ops inside: multiply, add, reduce" in str(expl)
    assert fusion.neighbours == []  # its producers are parameters
    (nb,) = expl.kernels[1].neighbours
    # a fusion written by hand has no record of the fusion pass, and explain invents no reason
    assert nb.name == "fusion" and nb.direction == "producer" and nb.code == ""
    assert "made no records" in nb.reason and expl.reasons_source.startswith("none")
    page = expl.to_html()
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "%fusion (input) [add, multiply, reduce]" in page
    if shutil.which("dot"):
        assert page.count("<svg") == len(expl.stages)
    for i, (name, _) in enumerate(expl.stages):
        assert f"<h3>{i}. {name}</h3>" in page


def test_cli_explain_seed_and_mnist(tmp_path, capsys):
    src = tmp_path / "prog.py"
    src.write_text(textwrap.dedent("""
        import axle, axle.numpy as anp

        def model_fn(x, y, z):
            return anp.sum(x + y * z)

        @axle.jit
        def scaled(x, s):
            return x * s
    """))
    html = tmp_path / "out.html"
    dot = tmp_path / "g.dot"
    assert main(["explain", f"{src}:model_fn", "--arg", "f32[100]", "--arg", "f32[100]", "--arg", "float32[100]",
                 "--device", DEV, "--html", str(html), "--dot", str(dot)]) == 0
    out = capsys.readouterr().out
    assert "== explain model_fn on interpreter:0" in out and "-- kernels" in out
    page = html.read_text()
    assert "<!doctype html>" in page and dot.read_text().startswith("digraph")
    # traced, then each pipeline stage that changed the module, side by side
    assert "<h3>0. traced</h3>" in page and "fusion</h3>" in page
    assert page.count("<svg") >= 2 if shutil.which("dot") else "not installed" in page
    assert main(["explain", f"{src}:scaled", "--arg", "f32[3,4]", "--arg", "0.5", "--device", DEV]) == 0
    assert "multiply" in capsys.readouterr().out
    assert main(["explain", "tests.core.test_explain:mnist_step", "--arg", "f32[784,10]", "--arg", "f32[10]",
                 "--arg", "f32[100,784]", "--arg", "f32[100,10]", "--device", DEV, "--no-source"]) == 0
    out = capsys.readouterr().out
    assert " dot(" in out and "generated code" not in out


def test_cli_explain_the_mnist_example(capsys):
    """The tutorial's real training step (autodiff, cross-entropy), params as a pytree."""
    example = Path(__file__).resolve().parents[2] / "examples" / "mnist_softmax.py"
    assert main(["explain", f"{example}:train_step", "--arg", "{'W': f32[784,10], 'b': f32[10]}",
                 "--arg", "f32[100,784]", "--arg", "s32[100]", "--arg", "0.5", "--device", DEV]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== explain train_step on interpreter:0")
    kernels = int(out.split("(")[1].split()[0])
    assert 1 < kernels < 40  # fused: far fewer launches than the traced ops
    assert out.count(" dot(") >= 2 and "(row)" in out  # forward and gradient dots; softmax rows
    assert "temp_bytes" in out and "no fallback" in out


def test_parse_arg_pytrees():
    from axle.explain_cli import parse_arg

    tree = parse_arg("{'W': f32[784,10], 'b': float32[10], 'n': (s32[], 3)}")
    assert tree["W"].shape == (784, 10) and tree["W"].dtype == np.float32 and tree["W"].strides == (0, 0)
    assert tree["b"].shape == (10,) and tree["n"][0].dtype == np.int32 and tree["n"][1] == 3
    assert parse_arg("[f64[2], 0.5]")[1] == 0.5


@pytest.mark.parametrize("argv, message", [
    (["explain", "nofile.py:f"], "no file"),
    (["explain", "justaname"], "FILE.py:function"),
    (["explain", "tests.core.test_explain:missing"], "has no 'missing'"),
    (["explain", "no_such_pkg.mod:f"], "cannot import 'no_such_pkg.mod'"),
    (["explain", "tests.core.test_explain:model_fn", "--arg", "q32[3]"], "unknown element type"),
    (["explain", "tests.core.test_explain:model_fn", "--arg", "f32[3"], "neither an array type"),
])
def test_cli_explain_errors(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
