"""The pass manager and the rewrite passes: what each must and must not rewrite."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import axle
from axle import profiler
from axle.config import config
from axle.errors import VerifierError
from axle.interpreter import evaluate
from axle.ir import Builder, Module, Node, Op
from axle.ir.ops import register_custom_call
from axle.ir.types import TensorType
from axle.passes import (CSE, DCE, AlgebraicSimplifier, ConstantFolding, FixedPoint, FunctionPass,
                         Pipeline, TransposeFolding, default_pipeline, optimize, pipeline_for)
from axle.passes.fusion import fusion_size
from axle.passes.policy import FusionPolicy
from axle.ir.dtypes import is_float_numpy

F32 = "f32[4]"


@pytest.fixture
def restore_config():
    saved = {k: getattr(config, k) for k in ("disable_passes", "dump_to", "dump_pass_re", "check_passes")}
    yield config
    config.update(**saved)


def ops_of(m: Module) -> list[Op]:
    return [n.op for n in m.entry.nodes if n.op is not Op.PARAMETER]


def simplify(m: Module) -> Module:
    out, _ = FixedPoint("s", [(AlgebraicSimplifier(), "x"), (CSE(), "merges splats"), (DCE(), "y")]).run(m)
    return out


def same_values(a: Module, b: Module, *inputs: np.ndarray) -> None:
    """Bit-exact up to NaN payloads: -0.0 and +0.0 differ."""
    for x, y in zip(evaluate(a, *inputs), evaluate(b, *inputs)):
        np.testing.assert_array_equal(x, y)
        if is_float_numpy(x.dtype):
            np.testing.assert_array_equal(np.signbit(x[~np.isnan(x)]), np.signbit(y[~np.isnan(y)]))


# ------------------------------------------------------------------- pass manager


class Counting(FunctionPass):
    """Changes the module ``times`` times (rebuilds the root), then stops."""

    def __init__(self, name: str, times: int, log: list[str]) -> None:
        self.left = times

        def fn(m: Module) -> Module:
            log.append(name)
            if self.left == 0:
                return m
            self.left -= 1
            return m.with_entry(m.entry.with_root(m.entry.root.replace()))

        super().__init__(name, fn)


def seed_module() -> Module:
    b = Builder("seed")
    x, y, z = (b.parameter("f32[1024]") for _ in range(3))
    return b.build(b.reduce(b.add(x, b.mul(y, z)), kind="sum", axes=(0,)))


def test_pipeline_runs_entries_in_order_and_fixed_point_repeats():
    log: list[str] = []
    fp = FixedPoint("fp", [(Counting("a", 2, log), "first"), (Counting("b", 0, log), "second")])
    pipe = Pipeline("p", [(fp, "repeat"), (Counting("c", 1, log), "last")])
    _, changed = pipe.run(seed_module())
    assert changed
    assert log == ["a", "b", "a", "b", "a", "b", "c"]
    assert fp.iterations == 3
    assert "fp (fixed point):" in pipe.describe() and "# last" in pipe.describe()


def test_every_entry_needs_a_reason():
    with pytest.raises(AssertionError, match="why"):
        Pipeline("p", [(CSE(), "  ")])


def test_default_pipeline_is_one_readable_list():
    text = default_pipeline().describe()
    for name in ("simplify", "constant-fold", "cse", "dce", "transpose-fold", "fusion"):
        assert name in text
    assert all("#" in line for line in text.splitlines()[1:] if line.strip() and not line.strip().endswith(":"))


def test_disabled_passes_are_skipped(restore_config):
    config.update(disable_passes="fusion")
    assert Op.FUSION not in ops_of(optimize(seed_module()))
    config.update(disable_passes="")
    assert Op.FUSION in ops_of(optimize(seed_module()))


def test_verifier_runs_between_passes_and_names_the_pass():
    def corrupt(m: Module) -> Module:
        root = m.entry.root
        bad = Node(root.op, root.operands, root.attrs, TensorType(root.dtype, (7,)))  # wrong recorded type
        return m.with_entry(m.entry.with_root(bad))

    with pytest.raises(VerifierError, match="after pass corrupt"):
        Pipeline("p", [(FunctionPass("corrupt", corrupt), "breaks the module on purpose")]).run(seed_module())


def test_dumps_before_and_after_matching_passes(tmp_path, restore_config):
    config.update(dump_to=str(tmp_path), dump_pass_re="^fusion$")
    optimize(seed_module())
    names = sorted(os.listdir(tmp_path))
    assert any(n.endswith(".fusion.before.txt") for n in names)
    assert any(n.endswith(".fusion.after.txt") for n in names)
    assert any(n.endswith(".fusion.after.dot") for n in names)
    assert not any("simplify" in n for n in names)
    after = next(n for n in names if n.endswith(".fusion.after.txt"))
    assert "fusion(" in (tmp_path / after).read_text()
    assert (tmp_path / after.replace(".txt", ".dot")).read_text().startswith("digraph")


def test_dump_flags_parse_from_axle_flags(tmp_path):
    c = type(config)()
    c.load_flags(f"--dump_to={tmp_path} --dump_pass_re=fusion|cse")
    assert c.dump_to == str(tmp_path) and c.dump_pass_re == "fusion|cse"


def test_passes_are_traced_as_spans(tmp_path):
    path = tmp_path / "t.json"
    with profiler.trace(str(path)):
        optimize(seed_module())
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["name"] for e in events if e.get("cat") == "pass"}
    assert {"simplify", "fusion", "cse", "dce"} <= names


class FakeBackend:
    name = "fake"

    def __init__(self, policy: FusionPolicy | None, extra: list) -> None:
        self.policy = policy
        self.extra = extra

    def passes(self) -> list:
        return self.extra

    def fusion_policy(self) -> FusionPolicy | None:
        return self.policy


def relu_dense() -> Module:
    b = Builder("dense")
    x, w, bias = b.parameter("f32[4,8]"), b.parameter("f32[8,3]"), b.parameter("f32[3]")
    d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    z = b.add(d, b.broadcast_in_dim(bias, shape=(4, 3), broadcast_dimensions=(1,)))
    zero = b.broadcast_in_dim(b.constant(np.float32(0)), shape=(4, 3), broadcast_dimensions=())
    return b.build(b.max(z, zero))


def test_backend_appends_passes_and_sets_policy():
    seen: list[str] = []

    def mark(m: Module) -> Module:
        seen.append(m.as_text())
        return m

    backend = FakeBackend(FusionPolicy(max_fusion_nodes=1), [FunctionPass("fake-lowering", mark)])
    assert "fake-lowering" in pipeline_for(backend).describe()
    out = optimize(relu_dense(), backend=backend)
    assert seen and "fusion(" in seen[0]  # runs after core fusion
    fusions = [n for n in out.entry.nodes if n.op is Op.FUSION]
    assert len(fusions) > 1 and all(fusion_size(f.attr["computation"]) == 1 for f in fusions)
    # without the policy the bias add and the relu share one loop fusion
    plain = optimize(relu_dense(), backend=FakeBackend(None, []))
    (f,) = [n for n in plain.entry.nodes if n.op is Op.FUSION]
    assert f.attr["kind"] == "loop" and fusion_size(f.attr["computation"]) > 1


# --------------------------------------------------------------------- simplify


def one_param(t: str = F32):
    b = Builder("t")
    return b, b.parameter(t)


def splat(b: Builder, v, t: str = F32) -> Node:
    tt = axle.ir.parse_type(t)
    return b.broadcast_in_dim(b.constant(np.asarray(v, tt.dtype.np)), shape=tt.shape, broadcast_dimensions=())


@pytest.mark.parametrize("make", [
    lambda b, x: b.mul(x, splat(b, 1)),
    lambda b, x: b.mul(splat(b, 1), x),
    lambda b, x: b.add(x, splat(b, -0.0)),
    lambda b, x: b.sub(x, splat(b, 0.0)),
    lambda b, x: b.div(x, splat(b, 1)),
    lambda b, x: b.neg(b.neg(x)),
    lambda b, x: b.max(x, x),
    lambda b, x: b.max(x, splat(b, -np.inf)),
    lambda b, x: b.convert(x, dtype="f32"),
    lambda b, x: b.reshape(b.reshape(x, shape=(2, 2)), shape=(4,)),
    lambda b, x: b.slice(x, start=(0,), limit=(4,), stride=(1,)),
    lambda b, x: b.pad(x, b.constant(np.float32(0)), low=(0,), high=(0,), interior=(0,)),
    lambda b, x: b.reverse(b.reverse(x, dimensions=(0,)), dimensions=(0,)),
    lambda b, x: b.select(b.compare(x, x, direction="lt"), x, x),
    lambda b, x: b.convert(b.convert(x, dtype="f64"), dtype="f32"),
    lambda b, x: b.reduce(x, kind="max", axes=()),
    lambda b, x: b.concatenate(x, b.constant(np.zeros(0, np.float32)), dimension=0),
], ids=["x*1", "1*x", "x+-0", "x-0", "x/1", "--x", "max(x,x)", "max(x,-inf)", "convert-same", "reshape-chain",
        "full-slice", "zero-pad", "reverse-twice", "select-same", "exact-convert-chain", "reduce-no-axes",
        "concat-empty"])
def test_simplify_removes(make):
    b, x = one_param()
    m = b.build(make(b, x))
    out = simplify(m)
    assert out.entry.root is out.entry.parameters[0], out.as_text()
    v = np.array([-0.0, np.nan, -np.inf, 3.5], np.float32)
    same_values(m, out, v)


@pytest.mark.parametrize("make", [
    lambda b, x: b.add(x, splat(b, 0.0)),  # -0.0 + 0.0 = +0.0
    lambda b, x: b.mul(x, splat(b, 0.0)),  # NaN * 0 = NaN
    lambda b, x: b.sub(x, x),  # inf - inf = NaN
    lambda b, x: b.convert(b.convert(x, dtype="f16"), dtype="f32"),  # rounds
    lambda b, x: b.convert(b.convert(x, dtype="s32"), dtype="f32"),  # truncates
    lambda b, x: b.select(b.compare(x, splat(b, 1.0), direction="gt"), x, splat(b, 1.0)),  # NaN: not max
    lambda b, x: b.reduce(x, kind="sum", axes=()),  # adds +0.0: -0.0 becomes +0.0
], ids=["x+0.0", "x*0.0", "x-x", "f32-f16-f32", "f32-s32-f32", "select-gt-float", "float-sum-no-axes"])
def test_simplify_keeps_inexact_float_rewrites(make):
    b, x = one_param()
    m = b.build(make(b, x))
    out = simplify(m)
    assert out.entry.root is not out.entry.parameters[0]
    v = np.array([-0.0, np.nan, np.inf, 3.7], np.float32)
    same_values(m, out, v)


@pytest.mark.parametrize("make,expect", [
    (lambda b, x: b.add(x, splat(b, 0, "s32[4]")), "x"),
    (lambda b, x: b.sub(x, x), "zeros"),
    (lambda b, x: b.mul(x, splat(b, 0, "s32[4]")), "zeros"),
    (lambda b, x: b.compare(x, x, direction="ge"), "true"),
    (lambda b, x: b.select(b.compare(x, splat(b, 3, "s32[4]"), direction="gt"), x, splat(b, 3, "s32[4]")), Op.MAX),
    (lambda b, x: b.select(b.compare(x, splat(b, 3, "s32[4]"), direction="lt"), x, splat(b, 3, "s32[4]")), Op.MIN),
], ids=["x+0", "x-x", "x*0", "x>=x", "select-gt-max", "select-lt-min"])
def test_simplify_integer_rewrites(make, expect):
    b, x = one_param("s32[4]")
    m = b.build(make(b, x))
    out = simplify(m)
    root = out.entry.root
    if expect == "x":
        assert root is out.entry.parameters[0]
    elif expect in ("zeros", "true"):
        assert Op.PARAMETER not in [o.op for o in root.operands] and root.op in (Op.BROADCAST_IN_DIM, Op.CONSTANT)
    else:
        assert root.op is expect
    same_values(m, out, np.array([0, -1, 2**31 - 1, -2**31], np.int32))


def test_simplify_composes_movement_chains():
    b, x = one_param("f32[2,3,4]")
    t = b.transpose(b.transpose(x, permutation=(1, 2, 0)), permutation=(2, 0, 1))  # identity overall
    t2 = b.transpose(b.transpose(x, permutation=(1, 0, 2)), permutation=(0, 2, 1))
    bc = b.broadcast_in_dim(b.broadcast_in_dim(b.reshape(x, shape=(24,)), shape=(5, 24), broadcast_dimensions=(1,)),
                            shape=(5, 6, 24), broadcast_dimensions=(0, 2))
    m = b.build(t, t2, bc)
    out = simplify(m)
    r = out.entry.root.operands
    assert r[0] is out.entry.parameters[0]
    assert r[1].op is Op.TRANSPOSE and r[1].operands[0].op is Op.PARAMETER
    assert r[2].op is Op.BROADCAST_IN_DIM and r[2].operands[0].op is Op.RESHAPE
    same_values(m, out, np.arange(24, dtype=np.float32).reshape(2, 3, 4))


def test_simplify_folds_keepdims_reshape_into_broadcast_keeps_pow():
    b, x = one_param("f32[3,5]")
    r = b.reshape(b.reduce(x, kind="max", axes=(1,)), shape=(3, 1))
    y = b.pow(b.sub(x, b.broadcast_in_dim(r, shape=(3, 5), broadcast_dimensions=(0, 1))), splat(b, 2.0, "f32[3,5]"))
    m = b.build(y)
    out = simplify(m)
    assert Op.RESHAPE not in ops_of(out)
    assert Op.POW in ops_of(out)  # pow(x, 2) is not bit-equal to x * x in the reference
    same_values(m, out, np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_transpose_folding_absorbs_transposes_into_dot(dt):
    b = Builder("t")
    x, g = b.parameter(f"{'f32' if dt == np.float32 else 'f64'}[6,4]"), b.parameter(f"{'f32' if dt == np.float32 else 'f64'}[3,6]")
    d = b.dot_general(b.transpose(x, permutation=(1, 0)), b.transpose(g, permutation=(1, 0)),
                      lhs_contracting=(1,), rhs_contracting=(0,))
    m = b.build(d)
    out, changed = TransposeFolding().run(m)
    assert changed and ops_of(out) == [Op.DOT_GENERAL]
    assert out.entry.root.attr["lhs_contracting"] == (0,) and out.entry.root.attr["rhs_contracting"] == (1,)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((6, 4)).astype(dt), rng.standard_normal((3, 6)).astype(dt)]
    np.testing.assert_allclose(evaluate(out, *args)[0], evaluate(m, *args)[0], rtol=1e-5)


def test_transpose_folding_keeps_transposes_that_reorder_free_dims():
    b = Builder("t")
    x, w = b.parameter("f32[2,3,4]"), b.parameter("f32[4,5]")
    # swaps the two free dims of x: folding would change the result layout
    m = b.build(b.dot_general(b.transpose(x, permutation=(1, 0, 2)), w, lhs_contracting=(2,), rhs_contracting=(0,)))
    out, changed = TransposeFolding().run(m)
    assert not changed and Op.TRANSPOSE in ops_of(out)


def _batched_weight_dot(b: Builder, x: Node, w: Node, shape: tuple[int, ...]) -> Node:
    """matmul(x[B, M, K], w) as NumPy's broadcasting traces it: w broadcast to [B, K, N]."""
    bw = b.broadcast_in_dim(w, shape=shape, broadcast_dimensions=(1, 2))
    return b.dot_general(x, bw, lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))


def test_transpose_folding_reads_a_batch_broadcast_weight_once():
    # matmul([B, M, K], [K, N]) and the tied logits x @ E.T: a plain matrix product of x's
    # B * M rows with w (with E read transposed), no broadcast copy of the weight
    b = Builder("t")
    x, w, e = b.parameter("f32[2,3,4]"), b.parameter("f32[4,5]"), b.parameter("f32[7,4]")
    h = _batched_weight_dot(b, x, w, (2, 4, 5))
    logits = _batched_weight_dot(b, x, b.transpose(e, permutation=(1, 0)), (2, 4, 7))
    m = b.build(b.tuple(h, logits))
    out, changed = TransposeFolding().run(m)
    assert changed and sorted(o.value for o in ops_of(out)) == ["dot", "dot", "tuple"]
    dots = [n for n in out.entry.nodes if n.op is Op.DOT_GENERAL]
    assert all(d.attr["lhs_batch"] == () == d.attr["rhs_batch"] for d in dots)
    assert [d.attr["rhs_contracting"] for d in dots] == [(0,), (1,)]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (4, 5), (7, 4))]
    for got, want in zip(evaluate(out, *args), evaluate(m, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["stretched", "batch-not-leading", "lhs-broadcast"])
def test_transpose_folding_keeps_broadcasts_that_change_the_product(case):
    b = Builder("t")
    if case == "stretched":  # w's size-1 dim is stretched too: not just a batch copy
        x, w = b.parameter("f32[2,3,4]"), b.parameter("f32[4,1]")
        m = b.build(_batched_weight_dot(b, x, w, (2, 4, 5)))
    elif case == "batch-not-leading":  # x[M, B, K]: the batch dim would move behind M
        x, w = b.parameter("f32[3,2,4]"), b.parameter("f32[4,5]")
        bw = b.broadcast_in_dim(w, shape=(2, 4, 5), broadcast_dimensions=(1, 2))
        m = b.build(b.dot_general(x, bw, lhs_batch=(1,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,)))
    else:  # a broadcast lhs: its rows would follow the rhs batch in the result
        x, w = b.parameter("f32[3,4]"), b.parameter("f32[2,4,5]")
        bx = b.broadcast_in_dim(x, shape=(2, 3, 4), broadcast_dimensions=(1, 2))
        m = b.build(b.dot_general(bx, w, lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,)))
    out, changed = TransposeFolding().run(m)
    assert not changed and Op.BROADCAST_IN_DIM in ops_of(out)


def test_simplify_leaves_side_effects_alone():
    b = Builder("t")
    key = b.parameter("s64[]")
    r = b.rng_bit_generator(key, shape=(4,), dtype="s32")
    m = b.build(b.max(r, r))
    out = simplify(m)
    assert out.entry.root.op is Op.RNG_BIT_GENERATOR


# ----------------------------------------------------------------- constant folding


def test_constant_folding_evaluates_small_constant_subexpressions():
    b, x = one_param()
    c = b.exp(b.add(b.constant(np.ones(4, np.float32)), b.constant(np.full(4, 2, np.float32))))
    m = b.build(b.mul(x, c))
    out, changed = ConstantFolding().run(m)
    assert changed
    folded = out.entry.root.operands[1]
    assert folded.op is Op.CONSTANT
    np.testing.assert_array_equal(folded.attr["value"].array, np.exp(np.float32(3)) * np.ones(4, np.float32))


def test_constant_folding_does_not_materialize_big_or_growing_constants():
    b, x = one_param("f32[100,100]")
    big = b.add(b.constant(np.ones((100, 100), np.float32)), b.constant(np.ones((100, 100), np.float32)))
    grow = b.broadcast_in_dim(b.constant(np.float32(3)), shape=(100, 100), broadcast_dimensions=())
    io = b.iota(shape=(100, 100), dtype="f32", dimension=0)
    m = b.build(b.add(b.add(x, big), b.add(grow, io)))
    out, changed = ConstantFolding().run(m)
    assert not changed and out is m
    out2, changed2 = ConstantFolding(max_elements=100_000).run(m)
    assert changed2 and Op.BROADCAST_IN_DIM in ops_of(out2)  # growth is never folded


def test_constant_folding_skips_side_effects():
    register_custom_call("test.passes.twice", lambda x, config: x * 2)
    b = Builder("t")
    key = b.constant(np.int64(7))
    r = b.rng_bit_generator(key, shape=(3,), dtype="s32")
    cc = b.custom_call(b.constant(np.ones(3, np.float32)), target="test.passes.twice", shape=(3,), dtype="f32")
    m = b.build(r, cc)
    out, changed = ConstantFolding().run(m)
    assert not changed
    assert {Op.RNG_BIT_GENERATOR, Op.CUSTOM_CALL} <= set(ops_of(out))


# ------------------------------------------------------------------------------ CSE


def test_cse_merges_duplicates_and_commuted_operands():
    b = Builder("t")
    x, y = b.parameter(F32), b.parameter(F32)
    m = b.build(b.mul(b.exp(x), b.exp(x)), b.add(x, y), b.add(y, x), b.sub(x, y), b.sub(y, x))
    out, changed = CSE().run(m)
    assert changed
    assert ops_of(out).count(Op.EXP) == 1
    assert ops_of(out).count(Op.ADD) == 1
    assert ops_of(out).count(Op.SUB) == 2  # not commutative
    rng = np.random.default_rng(1)
    same_values(m, out, *(rng.standard_normal(4).astype(np.float32) for _ in range(2)))


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_cse_merges_commuted_float_max_min(dt):
    """max/min follow IEEE 754-2019 (-0.0 < +0.0), so they are bit-commutative on signed
    zeros and CSE may merge max(x, y) with max(y, x) without changing a zero's sign."""
    b = Builder("t")
    name = {np.float16: "f16", np.float32: "f32", np.float64: "f64"}[dt]
    x, y = b.parameter(f"{name}[2]"), b.parameter(f"{name}[2]")
    m = b.build(b.max(x, y), b.max(y, x), b.min(x, y), b.min(y, x))
    out, _ = CSE().run(m)
    assert ops_of(out).count(Op.MAX) == 1 and ops_of(out).count(Op.MIN) == 1
    same_values(m, out, np.array([-0.0, 0.0], dt), np.array([0.0, -0.0], dt))


def test_cse_never_merges_rng_or_custom_calls():
    register_custom_call("test.passes.twice", lambda x, config: x * 2)
    b = Builder("t")
    key = b.parameter("s64[]")
    x = b.parameter(F32)
    r1 = b.rng_bit_generator(key, shape=(4,), dtype="s32")
    r2 = b.rng_bit_generator(key, shape=(4,), dtype="s32")
    c1 = b.custom_call(x, target="test.passes.twice", shape=(4,), dtype="f32")
    c2 = b.custom_call(x, target="test.passes.twice", shape=(4,), dtype="f32")
    m = b.build(b.add(r1, r2), b.add(c1, c2))
    out, _ = CSE().run(m)
    assert ops_of(out).count(Op.RNG_BIT_GENERATOR) == 2
    assert ops_of(out).count(Op.CUSTOM_CALL) == 2


def test_cse_keeps_different_attributes_apart():
    b, x = one_param("f32[2,3]")
    m = b.build(b.reduce(x, kind="sum", axes=(0,)), b.reduce(x, kind="sum", axes=(1,)),
                b.reduce(x, kind="max", axes=(0,)))
    out, changed = CSE().run(m)
    assert not changed and ops_of(out).count(Op.REDUCE) == 3


# ------------------------------------------------------------------------------ DCE


def test_dce_forwards_tuple_plumbing():
    b, x = one_param()
    t = b.tuple(b.exp(x), b.neg(x))
    m = b.build(b.get_tuple_element(t, index=1))
    out, changed = DCE().run(m)
    assert changed and ops_of(out) == [Op.NEG]


def test_dce_drops_dead_fusion_outputs_and_parameters():
    from axle.ir.builder import make_node

    fb = Builder("fused")
    p0, p1, p2 = fb.parameter(F32), fb.parameter(F32), fb.parameter(F32)
    comp = fb.computation(fb.exp(p0), fb.add(p0, p1), fb.neg(p2))
    b = Builder("t")
    x, y, z = b.parameter(F32), b.parameter(F32), b.parameter(F32)
    f = make_node(Op.FUSION, [x, y, z], {"kind": "loop", "computation": comp})
    m = b.build(b.get_tuple_element(f, index=1))
    out, changed = DCE().run(m)
    assert changed
    fusion = out.entry.root
    assert fusion.op is Op.FUSION and not isinstance(fusion.type, axle.ir.TupleType)
    assert len(fusion.operands) == 2 and len(fusion.attr["computation"].parameters) == 2
    rng = np.random.default_rng(2)
    same_values(m, out, *(rng.standard_normal(4).astype(np.float32) for _ in range(3)))


def test_a_bad_fusion_policy_is_a_clear_backend_error():
    from axle.errors import BackendError

    with pytest.raises(BackendError, match="fusion_policy"):
        pipeline_for(FakeBackend({"row_fusion": False}, []))  # type: ignore[arg-type]
