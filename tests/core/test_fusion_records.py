"""The fusion pass's records (axle.ir.fusion_record): one per fusion it forms, with its
kind, members and why each neighbour stayed out; kept true by every later pass; and the
op table's contraction trait the pass asks instead of "none of the other traits"."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.errors import ParseError
from axle.explain import _through_plumbing_up, recorded_reason
from axle.interpreter import evaluate
from axle.ir import Builder, Module, Op
from axle.ir.builder import make_node
from axle.ir.fusion_record import REASON_CODES, members_of
from axle.ir.opcodes import PLUMBING
from axle.ir.ops import OPS, Traits
from axle.ir.parser import parse_module
from axle.ir.types import TupleType
from axle.passes import CSE, DCE, Fusion, optimize
from axle.passes.fusion import classify_computation, is_contraction, why_alone
from axle.passes.policy import FusionPolicy
from axle.testing.random_modules import random_module


def _softmax(x):
    e = anp.exp(x - anp.max(x, axis=1, keepdims=True))
    return e / anp.sum(e, axis=1, keepdims=True)


def _fusions(m: Module) -> list:
    return [n for n in m.entry.nodes if n.op is Op.FUSION]


def _check_records(m: Module) -> None:
    """Every fusion has the pass's record and every record names what exists."""
    fusions = {f.attr["computation"].name: f for f in _fusions(m)}
    names = [r.fusion for r in m.fusion_records]
    assert len(names) == len(set(names)) and set(names) == set(fusions), (names, list(fusions))
    for r in m.fusion_records:
        comp = fusions[r.fusion].attr["computation"]
        assert r.kind == fusions[r.fusion].attr["kind"] and r.members == members_of(comp)
        params = {p.name for p in comp.parameters}
        for nf in r.not_fused:
            assert nf.code in REASON_CODES and nf.text
            if nf.direction == "producer":
                assert nf.port in params
            else:
                assert 0 <= int(nf.port) < len(comp.result_types)


def test_softmax_has_one_row_record_with_its_members():
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    m = optimize(axle.jit(_softmax, device="interpreter:0").lower(x).module)
    (f,) = _fusions(m)
    (rec,) = m.fusion_records
    assert m.fusion_record(f) is rec and rec.fusion == f.attr["computation"].name
    assert rec.kind == "row"
    assert rec.members == ("reduce", "broadcast", "subtract", "exponential", "reduce", "broadcast", "divide")
    assert rec.not_fused == ()  # nothing left out: its only neighbours are the parameter and the result
    _check_records(m)


def test_a_reduction_read_by_two_kernels_is_not_duplicated_and_says_so():
    b = Builder("t")
    x = b.parameter("f32[4,8]")
    s = b.reduce(b.exp(x), kind="sum", axes=(1,))
    col = b.reduce(b.mul(s, s), kind="sum", axes=(0,))  # a second kernel reading s
    row = b.div(b.exp(x), b.broadcast_in_dim(s, shape=(4, 8), broadcast_dimensions=(0,)))
    m, _ = Fusion().run(b.build(row, col))
    reasons = [(r.fusion, nf) for r in m.fusion_records for nf in r.not_fused if nf.neighbour == "reduce"]
    assert reasons and all(nf.code == "duplicate-reduction" for _, nf in reasons)
    assert "duplicate a reduction" in reasons[0][1].text
    _check_records(m)
    arg = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    for a, e in zip(evaluate(m, arg), evaluate(b.build(row, col), arg)):
        np.testing.assert_allclose(a, e, rtol=1e-6)


def test_a_fusion_over_max_inline_cost_records_the_cost_and_the_limit():
    b = Builder("t")
    x = b.parameter("f32[16]")
    v = x
    for _ in range(4):  # each level reads v at two index patterns: 2^k evaluations
        v = b.add(b.exp(v), b.reverse(b.exp(v), dimensions=(0,)))
    m, _ = Fusion(FusionPolicy(max_inline_cost=100)).run(b.build(v))
    costs = [nf for r in m.fusion_records for nf in r.not_fused if nf.code == "inline-cost"]
    assert costs and all("> max_inline_cost 100 (the backend's policy)" in nf.text for nf in costs)
    _check_records(m)


def test_a_vetoed_fusion_records_the_device_reason():
    def no_exp_with_others(f):
        ops = {n.op for n in f.attr["computation"].nodes}
        return "exp never shares a kernel here" if Op.EXP in ops and Op.NEG in ops else None

    b = Builder("t")
    x = b.parameter("f32[8]")
    m, _ = Fusion(FusionPolicy(veto=no_exp_with_others)).run(b.build(b.neg(b.exp(x))))
    (nf,) = [nf for r in m.fusion_records for nf in r.not_fused if nf.direction == "producer"]
    assert nf.code == "vetoed" and "exp never shares a kernel here" in nf.text
    _check_records(m)


def test_records_stay_true_through_cse_and_dce():
    """Two identical fusions: CSE keeps one, and the other's record goes with it."""
    b = Builder("t")
    x = b.parameter("f32[4,8]")
    a1, a2 = b.neg(b.exp(x)), b.neg(b.exp(x))  # fused apart: the pass runs before CSE here
    m, _ = Fusion(FusionPolicy(multi_output=False)).run(b.build(a1, a2))
    assert len(m.fusion_records) == 2
    merged, changed = CSE().run(m)
    assert changed and len(_fusions(merged)) < len(_fusions(m))
    _check_records(merged)
    # a module built from scratch (the parser, a partitioner cluster) has no records
    assert parse_module(merged.as_text()).fusion_records == ()


def test_records_survive_a_rewritten_fusion_and_drop_what_is_gone():
    b = Builder("t")
    x = b.parameter("f32[4,8]")
    s0, s1 = b.reduce(b.exp(x), kind="sum", axes=(1,)), b.reduce(b.neg(x), kind="max", axes=(1,))
    m, _ = Fusion().run(b.build(s0, s1))
    (f,) = _fusions(m)  # one multi-output input fusion: both read x
    assert isinstance(f.type, TupleType)
    (rec,) = m.fusion_records
    # keep only the first output: DCE prunes the fusion's dead output and its members
    gte = next(n for n in m.entry.nodes if n.op is Op.GET_TUPLE_ELEMENT and n.attr["index"] == 0)
    pruned, changed = DCE().run(m.with_entry(m.entry.with_root(make_node(Op.NEG, [gte]))))
    assert changed
    assert len(_fusions(pruned)) == 1
    (rec2,) = pruned.fusion_records
    assert rec2.fusion == rec.fusion and len(rec2.members) < len(rec.members)
    _check_records(pruned)
    # an entry without the fusion keeps no record of it
    assert m.with_entry(m.entry.with_root(x)).fusion_records == ()


@pytest.mark.parametrize("seed", range(40))
def test_records_name_only_what_exists_after_the_whole_pipeline(seed):
    m, _ = random_module(seed, 40)
    opt = optimize(m)
    _check_records(opt)
    if not opt.fusion_records:
        return
    # and they explain every edge between two kernels, whichever side is a fusion
    for k in (n for n in opt.entry.nodes if n.op not in PLUMBING):
        for p in (p for o in k.operands for p in _through_plumbing_up(o)):
            assert recorded_reason(opt, p, k) is not None, (p, k)


def test_parser_knows_the_output_kind_and_rejects_unknown_kinds():
    inner = Builder("fused")
    x, w = inner.parameter("f32[2,3]"), inner.parameter("f32[3,4]")
    comp = inner.computation(inner.neg(inner.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))))
    outer = Builder("m")
    a, b = outer.parameter("f32[2,3]"), outer.parameter("f32[3,4]")
    text = outer.build(make_node(Op.FUSION, (a, b), {"kind": "output", "computation": comp})).as_text()
    assert "kind=output" in text and parse_module(text).as_text() == text
    with pytest.raises(ParseError, match="kind='epilogue' is not a valid one of loop, input, row, output"):
        parse_module(text.replace("kind=output", "kind=epilogue"))


def test_contraction_is_a_trait_and_only_the_trait_makes_a_dot(monkeypatch):
    # convolution contracts too, but never sits in a fusion (not fusible): only a dot is one here
    assert [op for op, d in OPS.items() if d.traits.contraction and d.traits.fusible] == [Op.DOT_GENERAL]
    b = Builder("t")
    x, w = b.parameter("f32[4,8]"), b.parameter("f32[8,3]")
    d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    assert is_contraction(d) and why_alone(d).code == "contraction"
    # an op with none of the kinds' traits (a future gather, say) is no dot: a kernel of its
    # own whose neighbours are told so
    monkeypatch.setitem(OPS, Op.DOT_GENERAL, dataclasses.replace(OPS[Op.DOT_GENERAL], traits=Traits()))
    assert not is_contraction(d) and why_alone(d).code == "no-kind"
    assert classify_computation(b.build(b.neg(d)).entry) is None  # no "loop" by default either
    m, _ = Fusion().run(b.build(b.neg(d)))
    (rec,) = m.fusion_records
    (nf,) = rec.reasons("producer")
    assert (nf.neighbour, nf.code) == ("dot", "no-kind")
