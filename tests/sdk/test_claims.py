"""Claims by predicate (issue 13): a device refines its Capabilities per op with a predicate
that gives the reason it refuses (shape, rank, attributes, fusion kind); the placement
summary and strict-mode errors print it; `limits["max_fusion_nodes"]` bounds the fusions
built for the device; an overridden `supports()` is reported by name, not with an empty
dtype. On the template backend, whose capabilities the tests replace."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.backend import Capabilities
from axle.compiler import compile_optimized
from axle.errors import BackendError, PlacementError
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.module import Module, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.partition import placement_of, unsupported_reason
from axle.passes import optimize
from axle.passes.fusion import fusion_size
from axle.frontend.device_put import to_buffer
from axle.testing import require_backend

F32 = DType.FLOAT32


@pytest.fixture
def dev():
    return require_backend("template")


def with_caps(monkeypatch, make) -> None:
    """The template's capabilities become ``make(its own capabilities)``."""
    import axle_template.backend as tb

    base = tb.TemplateBackend.capabilities
    monkeypatch.setattr(tb.TemplateBackend, "capabilities", lambda self, d: make(base(self, d)))


def run(module: Module, device, *inputs: np.ndarray):
    exe, compiled = compile_optimized(module, device)
    backend = axle.REGISTRY.backend_for(device)
    outs = [np.asarray(backend.to_host(b)) for b in exe.execute([to_buffer(x, device) for x in inputs])]
    for got, want in zip(outs, evaluate(module, *inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    return exe, compiled


def trailing_only(n: Node) -> str | None:
    rank = n.operands[0].type.rank
    axes = tuple(sorted(n.attr["axes"]))
    if axes == tuple(range(rank - len(axes), rank)):
        return None
    return f"reduces axes {list(axes)} of a rank-{rank} operand; this device reduces trailing axes only"


def two_reductions() -> Module:
    b = Builder("two_reductions")
    x = b.parameter(TensorType(F32, (4, 6)), name="x")
    return b.build(b.reduce(x, kind="sum", axes=(0,)), b.reduce(x, kind="sum", axes=(1,)))


def test_a_predicates_reason_is_in_the_placement_summary(dev, monkeypatch):
    with_caps(monkeypatch, lambda c: dataclasses.replace(c, predicates={Op.REDUCE: trailing_only}))
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    exe, _ = run(two_reductions(), dev, x)
    s = placement_of(exe)
    assert s.ops_on("template:0") == {"reduce": 1}  # the trailing-axis reduce stays on the device
    assert sum(s.ops_on(c.device)["reduce"] for c in s.clusters if c.device != "template:0") == 1
    assert "reduce: reduces axes [0] of a rank-2 operand; this device reduces trailing axes only" in str(s)


def test_strict_placement_prints_the_predicates_reason(dev, monkeypatch):
    with_caps(monkeypatch, lambda c: dataclasses.replace(c, predicates={Op.REDUCE: trailing_only}))
    monkeypatch.setattr(axle.config, "strict_placement", True)
    with pytest.raises(PlacementError, match=r"strict placement: 'reduce' \(f32\[4,6\]\) -> f32\[6\] cannot run on "
                                             r"template:0: reduces axes \[0\] of a rank-2 operand; this device "
                                             r"reduces trailing axes only"):
        compile_optimized(two_reductions(), dev)


def test_a_rank_predicate_through_jit(dev, monkeypatch):
    def rank_le_2(n: Node) -> str | None:
        return None if n.type.rank <= 2 else f"rank {n.type.rank} > 2"

    with_caps(monkeypatch, lambda c: dataclasses.replace(c, predicates={Op.EXP: rank_le_2}))
    f = axle.jit(lambda a, b: anp.exp(a) + anp.sum(anp.exp(b)), device=dev)
    a, b = np.ones((2, 3), np.float32), np.ones((2, 2, 2), np.float32)
    np.testing.assert_allclose(np.asarray(f(a, b)), np.exp(a) + np.exp(b).sum(), rtol=1e-6)
    s = f.lower(a, b).compile().placement()
    assert "exponential: rank 3 > 2" in str(s) and s.ops_on("template:0")["exponential"] == 1


class RankLimited(Capabilities):
    """An old-style refinement: an override of supports() that cannot say why."""

    def supports(self, node: Node) -> bool:
        return super().supports(node) and not (node.op is Op.EXP and node.type.rank > 1)


def test_an_overridden_supports_is_named_instead_of_an_empty_dtype(dev):
    b = Builder("ranks")
    x = b.parameter(TensorType(F32, (2, 3)), name="x")
    m = b.build(b.neg(b.exp(x)))
    caps = RankLimited()
    exp = m.entry.root.operands[0]
    why = unsupported_reason(caps, exp)
    assert why == ("op 'exponential' is refused by RankLimited.supports(), which gives no reason "
                   "(Capabilities.predicates can give one)")
    assert unsupported_reason(caps, m.entry.root) is None
    # inside a fusion, the override still decides and is still named
    (fused,) = [n for n in optimize(m).entry.nodes if n.op is Op.FUSION]
    assert unsupported_reason(caps, fused) == f"fusion holds {why}"


def chain(n: int) -> Module:
    b = Builder("chain")
    v = x = b.parameter(TensorType(F32, (8,)), name="x")
    for i in range(n):
        v = b.add(b.mul(v, x), x) if i % 2 else b.exp(b.neg(v))
    return b.build(v)


def fused_sizes(m: Module) -> list[int]:
    return [fusion_size(n.attr["computation"]) for n in m.entry.nodes if n.op is Op.FUSION]


def test_max_fusion_nodes_bounds_the_fusions_built_for_the_device(dev, monkeypatch):
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    _, unbounded = run(chain(6), dev, x)
    assert fused_sizes(unbounded) == [12]  # one kernel while the device sets no limit
    with_caps(monkeypatch, lambda c: dataclasses.replace(c, limits={"max_fusion_nodes": 5}))
    exe, bounded = run(chain(6), dev, x)
    assert placement_of(exe).ops_on("template:0")  # still all on the device, in smaller kernels
    assert not placement_of(exe).fallback
    sizes = fused_sizes(bounded)
    assert sum(sizes) == 12 and max(sizes) <= 5 and len(sizes) >= 3, sizes


def test_a_fusion_above_max_fusion_nodes_is_refused_with_a_reason(dev, monkeypatch):
    """A module fused elsewhere (compiled with optimize=False) keeps its fusions: the device
    refuses the one above its limit, and the summary says why."""
    prefused = optimize(chain(6))
    assert fused_sizes(prefused) == [12]
    with_caps(monkeypatch, lambda c: dataclasses.replace(c, limits={"max_fusion_nodes": 5}))
    exe, _ = compile_optimized(prefused, dev, optimize=False)
    s = placement_of(exe)
    assert s.fallback and "the loop fusion has 12 ops, above the device's max_fusion_nodes=5" in str(s)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    got = axle.REGISTRY.backend_for(dev).to_host(exe.execute([to_buffer(x, dev)])[0])
    np.testing.assert_allclose(np.asarray(got), evaluate(chain(6), x)[0], rtol=1e-5)


def softmax(x):
    e = anp.exp(x - anp.max(x, axis=-1, keepdims=True))
    return e / anp.sum(e, axis=-1, keepdims=True)


def test_a_fusion_kind_predicate_keeps_the_fusion_pass_from_building_that_kind(dev, monkeypatch):
    x = np.random.default_rng(0).standard_normal((4, 9)).astype(np.float32)
    module = axle.jit(softmax, device=dev).lower(x).module
    _, free = run(module, dev, x)
    assert "row" in {n.attr["kind"] for n in free.entry.nodes if n.op is Op.FUSION}

    def no_rows(n: Node) -> str | None:
        return "row fusions are not supported" if n.attr["kind"] == "row" else None

    with_caps(monkeypatch, lambda c: dataclasses.replace(c, predicates={Op.FUSION: no_rows}))
    exe, vetoed = run(module, dev, x)
    kinds = {n.attr["kind"] for n in vetoed.entry.nodes if n.op is Op.FUSION}
    assert kinds and "row" not in kinds, kinds
    assert not placement_of(exe).fallback  # smaller kernels, all on the device


@pytest.mark.parametrize(("predicate", "message"), [
    (lambda n: False, r"returned False: a predicate returns None to accept a node or a non-empty reason"),
    (lambda n: "", r"returned '': a predicate returns None"),
    (lambda n: n.attr["no such attribute"], r"raised KeyError: 'no such attribute' on exponential f32\[4\]"),
])
def test_a_predicate_that_breaks_the_convention_is_a_backend_error(dev, monkeypatch, predicate, message):
    with_caps(monkeypatch, lambda c: dataclasses.replace(c, predicates={Op.EXP: predicate}))
    b = Builder("bad_predicate")
    m = b.build(b.exp(b.parameter(TensorType(F32, (4,)), name="x")))
    with pytest.raises(BackendError, match=r"the device's capability predicate for op 'exponential' " + message):
        compile_optimized(m, dev)


def test_max_elements_sends_big_ops_to_the_host(dev, monkeypatch):
    with_caps(monkeypatch, lambda c: dataclasses.replace(c, limits={"max_elements": 10}))
    b = Builder("elements")
    m = b.build(b.exp(b.parameter(TensorType(F32, (4,)))), b.exp(b.parameter(TensorType(F32, (100,)))))
    exe, _ = run(m, dev, np.ones(4, np.float32), np.ones(100, np.float32))
    s = placement_of(exe)
    assert s.ops_on("template:0") == {"exponential": 1}
    assert "needs a 100-element buffer, above the device's max_elements=10" in str(s)


def test_the_guides_predicate_example_prints_what_the_guide_shows(dev, monkeypatch):
    """docs/writing-a-backend.md, "Claims by predicate": its predicates, run on the template
    device, print the placement summary the guide shows (device name and spacing aside)."""
    import re
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md").read_text()
    section = guide.split("### Claims by predicate", 1)[1].split("\n#", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"```text\n(placement for .*?)```", section, re.S).group(1)
    ns = {"Op": Op, "Capabilities": Capabilities}
    exec(code, ns)  # noqa: S102 - the guide's own example
    predicates = {Op.REDUCE: ns["trailing_axes_only"], Op.FUSION: ns["no_row_kernels"]}
    with_caps(monkeypatch, lambda c: dataclasses.replace(c, predicates=predicates))
    f = axle.jit(lambda x: anp.sum(anp.exp(x), axis=0), device=dev)
    x = np.ones((4, 3), np.float32)
    np.testing.assert_allclose(np.asarray(f(x)), np.exp(x).sum(axis=0), rtol=1e-6)

    def norm(text: str) -> str:
        text = re.sub(r"\b(acme|template):0", "DEVICE", text)
        return re.sub(r"[ ]+", " ", re.sub(r"\b(cpu|interpreter):0", "HOST", text)).strip()

    assert norm(str(f.lower(x).compile().placement())) == norm(shown)


def test_a_device_that_refuses_every_loop_fusion_gets_plain_ops(dev, monkeypatch):
    """Even a one-op group becomes a fusion node; when the device refuses that, the op is
    handed to it unfused (one kernel each), not dropped or crashed on."""
    with_caps(monkeypatch, lambda c: dataclasses.replace(
        c, predicates={Op.FUSION: lambda n: "no loop kernels" if n.attr["kind"] == "loop" else None}))
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    exe, compiled = run(chain(3), dev, x)
    assert not fused_sizes(compiled) and not placement_of(exe).fallback
    assert {n.op for n in compiled.entry.nodes} >= {Op.EXP, Op.NEG, Op.MUL, Op.ADD}
