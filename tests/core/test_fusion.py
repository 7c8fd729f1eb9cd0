"""Fusion: the must-show facts (seed, softmax, layer norm, dense+relu) and the rules it
must never break (no duplicated dot or expensive producer, no cycles, the policy)."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.interpreter import evaluate
from axle.ir import Builder, Module, Node, Op
from axle.ir.module import post_order
from axle.ir.types import TupleType
from axle.ir.verifier import verify
from axle.passes import Fusion, optimize
from axle.passes.fusion import classify_computation
from axle.passes.policy import FusionPolicy

INTERP = "interpreter:0"
f32 = np.float32


def fusions(m: Module) -> list[Node]:
    return [n for n in m.entry.nodes if n.op is Op.FUSION]


def kernels(m: Module) -> int:
    return sum(1 for n in m.entry.nodes if n.op not in (Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT))


def inner_ops(f: Node) -> list[Op]:
    return [n.op for n in f.attr["computation"].nodes if n.op is not Op.PARAMETER]


def all_ops(m: Module) -> list[Op]:
    """Every op in the module, fused or not."""
    out = []
    for n in m.entry.nodes:
        out.extend(inner_ops(n) if n.op is Op.FUSION else [n.op])
    return out


def optimized(fn, *args, policy: FusionPolicy | None = None) -> Module:
    module = axle.jit(fn, device=INTERP).lower(*args).module
    if policy is None:
        return optimize(module)

    class B:
        name = "test"

        def passes(self):
            return []

        def fusion_policy(self):
            return policy

    return optimize(module, backend=B())


def check_values(fn, args, opt: Module, rtol=1e-6):
    expected = evaluate(axle.jit(fn, device=INTERP).lower(*args).module, *args)
    for a, e in zip(evaluate(opt, *args), expected):
        np.testing.assert_allclose(a, e, rtol=rtol, equal_nan=True)


def seed(x, y, z):
    return anp.sum(x + y * z)


def softmax(x):
    e = anp.exp(x - anp.max(x, axis=-1, keepdims=True))
    return e / anp.sum(e, axis=-1, keepdims=True)


def layer_norm(x, g, b):
    mean = anp.mean(x, axis=-1, keepdims=True)
    var = anp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / anp.sqrt(var + 1e-5) * g + b


def layer_norm_moments(x):
    mean = anp.mean(x, axis=-1)
    var = anp.mean(x * x, axis=-1) - mean * mean
    return mean, var


def dense_relu(x, w, b):
    return anp.maximum(x @ w + b, 0.0)


# ------------------------------------------------------------------ must show


def test_seed_becomes_one_fusion_with_add_mul_reduce():
    x = np.arange(1024, dtype=f32)
    lowered = axle.jit(seed, device=INTERP).lower(x, x, x)
    opt = lowered.optimize()
    fs = fusions(opt)
    assert len(fs) == 1 and kernels(opt) == 1
    assert fs[0].attr["kind"] == "input"
    assert {Op.ADD, Op.MUL, Op.REDUCE} <= set(inner_ops(fs[0]))
    text = lowered.compile().as_text()
    fused_text = text[:text.index("entry")]
    for word in ("add(", "multiply(", "reduce("):
        assert word in fused_text
    assert lowered.compile().report()["kernels"] == 1


def test_decomposed_softmax_is_at_most_two_kernels():
    x = np.random.default_rng(0).standard_normal((16, 33)).astype(f32)
    opt = optimized(softmax, x)
    assert kernels(opt) <= 2
    assert kernels(opt) == 1 and fusions(opt)[0].attr["kind"] == "row"
    assert all_ops(opt).count(Op.EXP) == 1
    check_values(softmax, [x], opt)
    assert axle.jit(softmax, device=INTERP).lower(x).compile().report()["kernels"] == 1


def test_softmax_without_row_fusion_is_still_correct_and_uses_no_row_kind():
    x = np.random.default_rng(0).standard_normal((16, 33)).astype(f32)
    opt = optimized(softmax, x, policy=FusionPolicy(row_fusion=False))
    assert all(f.attr["kind"] != "row" for f in fusions(opt))
    assert kernels(opt) <= 4
    check_values(softmax, [x], opt)


def test_layer_norm_mean_and_variance_share_one_fusion():
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((8, 32)).astype(f32), rng.standard_normal(32).astype(f32),
            rng.standard_normal(32).astype(f32)]
    opt = optimized(layer_norm, *args)
    holding = [f for f in fusions(opt) if inner_ops(f).count(Op.REDUCE) == 2]
    assert len(holding) == 1 and holding[0].attr["kind"] == "row"
    assert kernels(opt) == 1
    check_values(layer_norm, args, opt, rtol=1e-5)


def test_layer_norm_moments_share_a_multi_output_fusion_without_row_kernels():
    x = np.random.default_rng(1).standard_normal((8, 32)).astype(f32)
    opt = optimized(layer_norm_moments, x, policy=FusionPolicy(row_fusion=False))
    multi = [f for f in fusions(opt) if isinstance(f.type, TupleType) and inner_ops(f).count(Op.REDUCE) == 2]
    assert len(multi) == 1 and multi[0].attr["kind"] == "input"
    assert all(n.op is Op.GET_TUPLE_ELEMENT for n in opt.entry.nodes
               if any(o is multi[0] for o in n.operands))
    check_values(layer_norm_moments, [x], opt, rtol=1e-5)


def test_dense_relu_keeps_bias_add_and_relu_in_one_fusion():
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((4, 8)).astype(f32), rng.standard_normal((8, 3)).astype(f32),
            rng.standard_normal(3).astype(f32)]
    opt = optimized(dense_relu, *args)
    assert [n.op for n in opt.entry.nodes].count(Op.DOT_GENERAL) == 1  # the dot stays its own node
    (f,) = fusions(opt)
    assert f.attr["kind"] == "loop" and {Op.ADD, Op.MAX} <= set(inner_ops(f))
    check_values(dense_relu, args, opt)
    (rec,) = opt.fusion_records  # the default policy has dot_epilogue off: the record says so
    (why,) = rec.reasons("producer")
    assert (why.neighbour, why.code) == ("dot", "contraction") and "dot_epilogue off" in why.text


def test_dense_relu_with_dot_epilogue_is_one_output_fusion():
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((4, 8)).astype(f32), rng.standard_normal((8, 3)).astype(f32),
            rng.standard_normal(3).astype(f32)]
    epi = optimized(dense_relu, *args, policy=FusionPolicy(dot_epilogue=True))
    (f,) = fusions(epi)
    assert kernels(epi) == 1 and f.attr["kind"] == "output"
    assert {Op.DOT_GENERAL, Op.ADD, Op.MAX, Op.BROADCAST_IN_DIM} <= set(inner_ops(f))
    assert classify_computation(f.attr["computation"], FusionPolicy(dot_epilogue=True)) == "output"
    assert classify_computation(f.attr["computation"]) is None  # dot_epilogue off: no kind holds a dot
    (rec,) = epi.fusion_records
    assert rec.kind == "output" and "dot" in rec.members
    check_values(dense_relu, args, epi)


def test_epilogue_takes_only_elementwise_consumers_and_records_why():
    b = Builder("t")
    x, w, bias = b.parameter("f32[4,8]"), b.parameter("f32[3,8]"), b.parameter("f32[3]")
    wt = b.transpose(w, permutation=(1, 0))  # a producer of the dot's operand: stays out
    d = b.dot_general(x, wt, lhs_contracting=(1,), rhs_contracting=(0,))
    y = b.tanh(b.add(d, b.broadcast_in_dim(bias, shape=(4, 3), broadcast_dimensions=(1,))))
    m = b.build(b.reduce(y, kind="sum", axes=(1,)))  # a reduction reads the epilogue's value
    out, _ = Fusion(FusionPolicy(dot_epilogue=True)).run(m)
    verify(out)
    kinds = sorted(f.attr["kind"] for f in fusions(out))
    # tanh(bias + dot) is elementwise but the reduction is not: the dot stays out of the
    # reduction's group, which takes the epilogue ops instead (as with dot_epilogue off)
    assert all_ops(out).count(Op.DOT_GENERAL) == 1
    codes = {(nf.neighbour, nf.code) for r in out.fusion_records for nf in r.not_fused}
    assert ("dot", "epilogue") in codes, codes
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(s).astype(f32) for s in ((4, 8), (3, 8), (3,))]
    for a, e in zip(evaluate(out, *args), evaluate(m, *args)):
        np.testing.assert_allclose(a, e, rtol=1e-5)
    # a transpose of the dot's output is no epilogue either; the operand's transpose stays out
    b = Builder("t")
    x, w, bias = b.parameter("f32[4,8]"), b.parameter("f32[3,8]"), b.parameter("f32[4]")
    d = b.dot_general(x, b.transpose(w, permutation=(1, 0)), lhs_contracting=(1,), rhs_contracting=(0,))
    dt = b.transpose(d, permutation=(1, 0))
    m = b.build(b.add(dt, b.broadcast_in_dim(bias, shape=(3, 4), broadcast_dimensions=(1,))))
    out, _ = Fusion(FusionPolicy(dot_epilogue=True)).run(m)
    verify(out)
    assert "output" not in kinds and not any(f.attr["kind"] == "output" for f in fusions(out))
    codes = {(nf.neighbour, nf.code) for r in out.fusion_records for nf in r.not_fused}
    assert ("dot", "epilogue") in codes, codes
    for a, e in zip(evaluate(out, *args[:2], rng.standard_normal(4).astype(f32)),
                    evaluate(m, *args[:2], rng.standard_normal(4).astype(f32))):
        assert a.shape == e.shape


# --------------------------------------------------------------- must not


def test_fusion_never_duplicates_a_dot():
    b = Builder("t")
    x, w = b.parameter("f32[4,8]"), b.parameter("f32[8,3]")
    d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    m = b.build(b.exp(d), b.reduce(d, kind="sum", axes=(0,)), b.transpose(d, permutation=(1, 0)))
    for policy in (FusionPolicy(), FusionPolicy(dot_epilogue=True)):
        out, _ = Fusion(policy).run(m)
        verify(out)
        assert all_ops(out).count(Op.DOT_GENERAL) == 1


def test_fusion_never_duplicates_expensive_producers_but_recomputes_cheap_ones():
    b = Builder("t")
    x, bias = b.parameter("f32[6,5]"), b.parameter("f32[5]")
    e = b.exp(x)  # expensive, read by a row reduction and a column reduction
    bb = b.broadcast_in_dim(bias, shape=(6, 5), broadcast_dimensions=(1,))  # cheap, read by both
    r0 = b.reduce(b.add(e, bb), kind="sum", axes=(0,))
    r1 = b.reduce(b.mul(e, bb), kind="max", axes=(1,))
    m = b.build(r0, r1)
    out, _ = Fusion(FusionPolicy(multi_output=False)).run(m)
    verify(out)
    assert all_ops(out).count(Op.EXP) == 1
    assert all_ops(out).count(Op.BROADCAST_IN_DIM) == 2  # recomputed in each consumer
    out2, _ = Fusion(FusionPolicy(multi_output=False, duplicate_cheap=False)).run(m)
    assert all_ops(out2).count(Op.BROADCAST_IN_DIM) == 1
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((6, 5)).astype(f32), rng.standard_normal(5).astype(f32)]
    for o in (out, out2):
        for a, e_ in zip(evaluate(o, *args), evaluate(m, *args)):
            np.testing.assert_array_equal(a, e_)


def test_fusion_creates_no_cycles_around_an_unfusible_node():
    # a -> dot -> c and a -> c: putting a and c in one fusion would need the dot inside
    b = Builder("t")
    x, w = b.parameter("f32[4,4]"), b.parameter("f32[4,4]")
    a = b.exp(x)
    d = b.dot_general(a, w, lhs_contracting=(1,), rhs_contracting=(0,))
    c = b.add(a, d)
    m = b.build(c)
    out, _ = Fusion().run(m)
    verify(out)
    post_order([out.entry.root])  # well-founded
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((4, 4)).astype(f32) for _ in range(2)]
    np.testing.assert_array_equal(evaluate(out, *args)[0], evaluate(m, *args)[0])
    assert all_ops(out).count(Op.EXP) == 1


def test_sibling_merge_refuses_connected_groups():
    # r1 = sum(x) feeds y = x * bcast(r1), then r2 = sum(y): r1 and r2 both read x but are
    # connected through y, so they cannot share one multi-output kernel
    b = Builder("t")
    x = b.parameter("f32[8,4]")
    r1 = b.reduce(x, kind="sum", axes=(0,))
    y = b.mul(x, b.broadcast_in_dim(r1, shape=(8, 4), broadcast_dimensions=(1,)))
    r2 = b.reduce(y, kind="sum", axes=(0,))
    m = b.build(r1, r2)
    out, _ = Fusion(FusionPolicy(row_fusion=False)).run(m)
    verify(out)
    assert len(fusions(out)) == 2
    arg = np.random.default_rng(5).standard_normal((8, 4)).astype(f32)
    for a, e in zip(evaluate(out, arg), evaluate(m, arg)):
        np.testing.assert_array_equal(a, e)


def test_sibling_merge_does_not_retry_refused_pairs(monkeypatch):
    # a chain of connected column sums of x (never merged) and 20 independent column sums
    # of z (merged into one kernel): each merge used to start over and retry every refused
    # pair of x's readers (1119 tries here; a ResNet-18 training step took over 10 minutes
    # in this pass), a refusal is now remembered
    from axle.passes import fusion as fusion_mod

    tries = [0]
    real = fusion_mod._Fuser._try_merge

    def counting(self, a, b):
        tries[0] += 1
        return real(self, a, b)

    monkeypatch.setattr(fusion_mod._Fuser, "_try_merge", counting)
    b = Builder("t")
    x, z = b.parameter("f32[8,4]"), b.parameter("f32[8,4]")
    r = b.reduce(x, kind="sum", axes=(0,))
    outs = [r]
    for _ in range(10):
        r = b.reduce(b.mul(x, b.broadcast_in_dim(r, shape=(8, 4), broadcast_dimensions=(1,))), kind="sum", axes=(0,))
        outs.append(r)
    for _ in range(20):
        outs.append(b.reduce(b.mul(z, b.parameter("f32[8,4]")), kind="sum", axes=(0,)))
    m = b.build(*outs)
    out, _ = Fusion(FusionPolicy(row_fusion=False)).run(m)
    verify(out)
    assert len(fusions(out)) == 12  # the chain's 11 kernels and one for z's 20 sums
    assert tries[0] <= 100
    rng = np.random.default_rng(6)
    args = [rng.standard_normal((8, 4)).astype(f32) * 0.1 for _ in range(22)]
    for a, e in zip(evaluate(out, *args), evaluate(m, *args)):
        np.testing.assert_allclose(a, e, rtol=1e-6)


def test_policy_limits_fusion_size_and_multi_output():
    b = Builder("t")
    x = b.parameter("f32[16]")
    v = x
    for i in range(20):
        v = b.add(b.mul(v, v), x) if i % 2 else b.sin(v)
    m = b.build(v, b.reduce(x, kind="sum", axes=(0,)), b.reduce(x, kind="max", axes=(0,)))
    out, _ = Fusion(FusionPolicy(max_fusion_nodes=5, multi_output=False)).run(m)
    verify(out)
    for f in fusions(out):
        assert len(inner_ops(f)) <= 5
        assert not isinstance(f.type, TupleType)
    multi, _ = Fusion(FusionPolicy()).run(m)
    assert any(isinstance(f.type, TupleType) for f in fusions(multi))
    arg = np.linspace(-1, 1, 16, dtype=f32)
    for o in (out, multi):
        for a, e in zip(evaluate(o, arg), evaluate(m, arg)):
            np.testing.assert_array_equal(a, e)


def test_fused_computations_hold_only_fusible_ops_and_kinds_match_contents():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 16)).astype(f32)
    g = rng.standard_normal(16).astype(f32)
    for fn, args in [(seed, [x[0], x[1], x[2]]), (softmax, [x]), (layer_norm, [x, g, g]), (dense_relu, [x, x.T, g[:8]])]:
        for f in fusions(optimized(fn, *args)):
            comp = f.attr["computation"]
            assert classify_computation(comp, FusionPolicy()) == f.attr["kind"]
            assert all(n.traits.fusible for n in comp.nodes if n.op not in (Op.PARAMETER, Op.TUPLE))


def test_fusion_is_skipped_on_already_fused_modules():
    x = np.ones(64, f32)
    opt = optimized(seed, x, x, x)
    out, changed = Fusion().run(opt)
    assert not changed and out is opt


@pytest.mark.parametrize("n", [0, 1, 7])
def test_optimized_jit_matches_numpy_on_edge_sizes(n):
    rng = np.random.default_rng(n)
    x, y, z = (rng.standard_normal(n).astype(f32) for _ in range(3))
    np.testing.assert_allclose(np.asarray(axle.jit(seed, device=INTERP)(x, y, z)), np.sum(x + y * z), rtol=1e-5, atol=1e-6)
    m = rng.standard_normal((n, 3)).astype(f32)
    e = np.exp(m - m.max(-1, keepdims=True)) if n else m
    want = e / e.sum(-1, keepdims=True) if n else m
    np.testing.assert_allclose(np.asarray(axle.jit(softmax, device=INTERP)(m)), want, rtol=1e-6)


def test_fusion_reports_no_change_when_nothing_fuses():
    b = Builder("t")
    x, w = b.parameter("f32[4,8]"), b.parameter("f32[8,3]")
    m = b.build(b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,)))
    out, changed = Fusion().run(m)
    assert not changed and out is m


def test_only_small_constants_are_inlined_into_fusions():
    b = Builder("t")
    x = b.parameter("f32[64]")
    big = b.constant(np.arange(64, dtype=f32))
    m = b.build(b.mul(b.add(x, big), b.broadcast_in_dim(b.constant(f32(2)), shape=(64,), broadcast_dimensions=())))
    out, _ = Fusion().run(m)
    (f,) = fusions(out)
    inner = f.attr["computation"].nodes
    assert [n.type.size for n in inner if n.op is Op.CONSTANT] == [1]
    assert any(o.op is Op.CONSTANT and o.type.size == 64 for o in f.operands)
    out2, _ = Fusion(FusionPolicy(max_fused_constant_elements=64)).run(m)
    (f2,) = fusions(out2)
    assert sorted(n.type.size for n in f2.attr["computation"].nodes if n.op is Op.CONSTANT) == [1, 64]
    arg = np.linspace(0, 1, 64, dtype=f32)
    for o in (out, out2):
        np.testing.assert_array_equal(evaluate(o, arg)[0], evaluate(m, arg)[0])


def test_gathers_fuse_as_producers_and_scatters_stay_alone():
    """``wte[ids] + wpe[pos]``: both gathers (and the computed ids) fuse into the add's loop
    fusion; a scatter over the result is a kernel of its own, recorded as in-place-update."""
    b = Builder("t")
    wte, wpe, ids = b.parameter("f32[50,16]"), b.parameter("f32[12,16]"), b.parameter("s32[8]")
    dn = dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=1,
              slice_sizes=(1, 16))
    pos = b.iota(shape=(8,), dtype="s32", dimension=0)
    emb = b.add(b.gather(wte, b.add(ids, b.broadcast_in_dim(b.constant(np.int32(1)), shape=(8,),
                                                                broadcast_dimensions=())), **dn),
                b.gather(wpe, pos, **dn))
    out = b.scatter(emb, ids, b.parameter("f32[8,16]"), update_window_dims=(1,), inserted_window_dims=(0,),
                    scatter_dims_to_operand_dims=(0,), index_vector_dim=1, kind="add")
    m = b.build(b.exp(out))
    opt, _ = Fusion().run(m)
    verify(opt)
    (emb_fusion,) = [f for f in fusions(opt) if Op.GATHER in inner_ops(f)]
    assert emb_fusion.attr["kind"] == "loop" and inner_ops(emb_fusion).count(Op.GATHER) == 2
    assert Op.SCATTER not in [o for f in fusions(opt) for o in inner_ops(f)]
    codes = {nf.code for r in opt.fusion_records for nf in r.not_fused if nf.neighbour == "scatter"}
    assert codes == {"in-place-update"}
    rng = np.random.default_rng(6)
    args = [rng.standard_normal((50, 16)).astype(f32), rng.standard_normal((12, 16)).astype(f32),
            np.array([3, 49, 0, -4, 7, 7, 60, 1], np.int32), rng.standard_normal((8, 16)).astype(f32)]
    np.testing.assert_array_equal(evaluate(opt, *args)[0], evaluate(m, *args)[0])


# ------------------------------------------------- strided transposes (issue 18)


def bn_relu_and_transposed(x, g):
    """A batch-norm-like relu read by a kernel in order and by a transposed copy (NCHW ->
    CHWN, as a weight-gradient convolution reads its activations)."""
    r = anp.maximum(x * g + 1.0, 0.0)
    return r + 1.0, anp.transpose(r, (1, 2, 3, 0))


def test_big_strided_transpose_is_a_kernel_of_its_own_and_recomputes_nothing():
    x = np.random.default_rng(0).standard_normal((8, 16, 16, 16)).astype(f32)  # 128 KiB
    g = np.float32(0.5)
    fused = optimized(bn_relu_and_transposed, x, g, policy=FusionPolicy())
    assert any({Op.TRANSPOSE, Op.MAX} <= set(inner_ops(f)) for f in fusions(fused))  # the old way
    policy = FusionPolicy(max_fused_strided_transpose_bytes=64 << 10)
    opt = optimized(bn_relu_and_transposed, x, g, policy=policy)
    alone = [f for f in fusions(opt) if inner_ops(f) == [Op.TRANSPOSE]]
    assert len(alone) == 1 and Op.TRANSPOSE not in [n.op for n in opt.entry.nodes]
    assert all_ops(opt).count(Op.MAX) == 1  # the relu is computed once, not per reader
    codes = {nf.code for rec in opt.fusion_records for nf in rec.not_fused}
    assert "strided-transpose" in codes
    check_values(bn_relu_and_transposed, (x, g), opt)
    # under the threshold, or keeping the contiguous axis, the transpose still fuses
    small = optimized(bn_relu_and_transposed, x[:2], g, policy=policy)
    assert any({Op.TRANSPOSE, Op.MAX} <= set(inner_ops(f)) for f in fusions(small))
    keep = optimized(lambda a: anp.transpose(anp.exp(a), (1, 0, 2, 3)), x, policy=policy)
    assert [inner_ops(f) for f in fusions(keep)] == [[Op.EXP, Op.TRANSPOSE]]


def weight_and_flipped(w):
    """A convolution weight read as HWIO (the forward) and flipped (its input gradient)."""
    t = anp.transpose(w, (2, 3, 1, 0))
    return t, anp.flip(t, (0, 1))


def test_big_strided_transpose_is_not_one_of_several_outputs():
    """Movement ops alone, but two outputs: a multi-output kernel is a plain loop (no
    backend's tiled transpose takes it), so a big strided transpose is exported by no
    multi-output fusion; each copy is a single-output chain of movement ops."""
    w = np.random.default_rng(0).standard_normal((32, 32, 3, 3)).astype(f32)  # 36 KiB
    together = optimized(weight_and_flipped, w, policy=FusionPolicy())
    assert [isinstance(f.type, TupleType) for f in fusions(together)] == [True]  # the old way: one, two outputs
    policy = FusionPolicy(max_fused_strided_transpose_bytes=16 << 10)
    opt = optimized(weight_and_flipped, w, policy=policy)
    assert sorted(sorted(o.value for o in inner_ops(f)) for f in fusions(opt)) == [["reverse", "transpose"],
                                                                                  ["transpose"]]
    assert not any(isinstance(f.type, TupleType) for f in fusions(opt))
    check_values(weight_and_flipped, (w,), opt)


# --------------------------------------- slow ops repeated by a broadcast (issue 17)


def nhwc_batch_norm(x, v, b):
    """An inference batch norm over NHWC: the per-feature rsqrt(var + eps) is broadcast
    along the innermost dim, which no loop can hoist it out of."""
    return anp.maximum(x * axle.lax.rsqrt(v + 1e-5) + b, 0.0)


def nchw_batch_norm(x, v, b):
    """The same over NCHW: the per-feature terms are constant along the innermost dims."""
    return anp.maximum(x * axle.lax.rsqrt(v + 1e-5)[:, None, None] + b[:, None, None], 0.0)


def test_slow_op_repeated_along_the_innermost_dim_is_a_kernel_of_its_own():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 16, 16, 32)).astype(f32)  # 65536 elements
    v, b = rng.random(32).astype(f32) + 0.5, rng.standard_normal(32).astype(f32)
    fused = optimized(nhwc_batch_norm, x, v, b, policy=FusionPolicy())
    assert len(fusions(fused)) == 1 and Op.RSQRT in inner_ops(fusions(fused)[0])  # the old way
    policy = FusionPolicy(max_broadcast_recompute_elements=1 << 14)
    opt = optimized(nhwc_batch_norm, x, v, b, policy=policy)
    small, big = sorted(fusions(opt), key=lambda f: f.type.size)
    assert small.type.shape == (32,) and Op.RSQRT in inner_ops(small)
    assert Op.RSQRT not in inner_ops(big) and big.operands.count(small) == 1
    codes = {nf.code for rec in opt.fusion_records for nf in rec.not_fused}
    assert "broadcast-recompute" in codes
    check_values(nhwc_batch_norm, (x, v, b), opt)
    # at most the limit's elements, or constant along the innermost dim: fused as before
    for fn, xs in ((nhwc_batch_norm, x[:2]), (nchw_batch_norm, np.ascontiguousarray(x.transpose(0, 3, 1, 2)))):
        kept = optimized(fn, xs, v, b, policy=policy)
        assert len(fusions(kept)) == 1 and Op.RSQRT in inner_ops(fusions(kept)[0]), fn.__name__
        check_values(fn, (xs, v, b), kept)
