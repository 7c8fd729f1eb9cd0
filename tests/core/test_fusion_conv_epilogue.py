"""The convolution epilogue in the fusion pass: a convolution takes its elementwise
consumers as an ``output`` fusion only where the backend's policy has ``conv_epilogue``
(independently of ``dot_epilogue``), and the records say why it stays alone otherwise."""
from __future__ import annotations

import numpy as np

from axle.interpreter import evaluate
from axle.ir import Builder, Module, Op
from axle.ir.conv import conv_dimension_numbers
from axle.ir.verifier import verify
from axle.lowering.schedule import schedule
from axle.passes import Fusion
from axle.passes.policy import FusionPolicy


def conv_bias_relu() -> Module:
    b = Builder("conv_layer")
    x, w, bias = b.parameter("f32[2,3,6,5]"), b.parameter("f32[4,3,3,3]"), b.parameter("f32[4]")
    y = b.convolution(x, w, **conv_dimension_numbers("NCHW", "OIHW", "NCHW"), window_strides=(1, 1),
                      padding_low=(1, 1), padding_high=(1, 1), lhs_dilation=(1, 1), rhs_dilation=(1, 1),
                      feature_group_count=1, batch_group_count=1)
    z = b.add(y, b.broadcast_in_dim(bias, shape=y.shape, broadcast_dimensions=(1,)))
    return b.build(b.max(z, b.broadcast_in_dim(b.constant(0.0, "f32"), shape=y.shape, broadcast_dimensions=())))


def _run(policy: FusionPolicy) -> Module:
    out, _ = Fusion(policy).run(conv_bias_relu())
    verify(out)
    return out


def test_conv_takes_its_epilogue_only_with_conv_epilogue() -> None:
    alone = _run(FusionPolicy(dot_epilogue=True))  # a dot's epilogue, not a convolution's
    assert [n.op for n in alone.entry.nodes].count(Op.CONVOLUTION) == 1
    # its readers' fusion records say why the convolution stayed out
    assert [nf for r in alone.fusion_records for nf in r.not_fused if nf.neighbour == "convolution"]

    fused = _run(FusionPolicy(conv_epilogue=True))
    (f,) = [n for n in fused.entry.nodes if n.op is Op.FUSION]
    assert f.attr["kind"] == "output" and Op.CONVOLUTION not in [n.op for n in fused.entry.nodes]
    s = schedule(f.attr["computation"], "output")  # the lowering's dot form, with the conv as its contraction
    assert s.form == "dot" and s.epilogue and s.dot is not None and s.dot.op is Op.CONVOLUTION
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(t.shape).astype(np.float32) for t in conv_bias_relu().entry.parameter_types]
    np.testing.assert_allclose(evaluate(fused, *args)[0], evaluate(conv_bias_relu(), *args)[0], rtol=1e-6)


# ------------------------------------------------- a block's output read by two kernels


def _conv(b: Builder, x, w):  # noqa: ANN001, ANN202
    return b.convolution(x, w, **conv_dimension_numbers("NCHW", "OIHW", "NCHW"), window_strides=(1, 1),
                         padding_low=(1, 1), padding_high=(1, 1), lhs_dilation=(1, 1), rhs_dilation=(1, 1),
                         feature_group_count=1, batch_group_count=1)


def _affine_relu(b: Builder, h, scale, shift, residual=None):  # noqa: ANN001, ANN202
    """relu(h * scale + shift (+ residual)): an inference batch norm's chain, per channel."""
    def per_channel(v):  # noqa: ANN001, ANN202
        return b.broadcast_in_dim(v, shape=h.shape, broadcast_dimensions=(1,))

    z = b.add(b.mul(h, per_channel(scale)), per_channel(shift))
    if residual is not None:
        z = b.add(z, residual)
    return b.max(z, b.broadcast_in_dim(b.constant(0.0, "f32"), shape=h.shape, broadcast_dimensions=()))


def two_blocks() -> Module:
    """ResNet's basic blocks, shrunk: y = relu(bn(conv(x)) + x) is read by the next block's
    first convolution and by its residual add, two different kernels (the add finishes
    the next block's second convolution)."""
    b = Builder("two_blocks")
    x = b.parameter("f32[2,4,6,5]")
    w1, w2 = b.parameter("f32[4,4,3,3]"), b.parameter("f32[4,4,3,3]")
    s1, t1, s2, t2 = (b.parameter("f32[4]") for _ in range(4))
    y = _affine_relu(b, _conv(b, x, w1), s1, t1, x)
    h = _affine_relu(b, _conv(b, y, w2), s2, t2)
    return b.build(_affine_relu(b, _conv(b, h, w1), s1, t1, y))


def _maximums(m: Module) -> int:
    """Relus computed, over every kernel (a duplicated one counts in each)."""
    return sum(1 for f in m.entry.nodes if f.op is Op.FUSION
               for n in f.attr["computation"].nodes if n.op is Op.MAX)


def _args(m: Module, seed: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(np.float32) for t in m.entry.parameter_types]


def test_a_block_output_read_by_two_kernels_is_stored_once_by_its_convolution() -> None:
    fused, _ = Fusion(FusionPolicy(conv_epilogue=True)).run(two_blocks())
    verify(fused)
    kernels = [n for n in fused.entry.nodes if n.op in (Op.FUSION, Op.CONVOLUTION)]
    # one kernel per convolution, each with its epilogue: y's chain is not recomputed in
    # a loop fusion of its own and again in the residual add, re-reading conv(x)
    assert [(n.op, n.attr.get("kind")) for n in kernels] == [(Op.FUSION, "output")] * 3
    assert all(sum(k.op is Op.CONVOLUTION for k in n.attr["computation"].nodes) == 1 for n in kernels)
    assert _maximums(fused) == 3
    # both readers of y read the first fusion's output
    first = kernels[0]
    assert all(first in n.operands for n in kernels[1:])
    (rec,) = [r for r in fused.fusion_records if r.fusion == first.attr["computation"].name]
    stored = [nf for r in fused.fusion_records for nf in r.not_fused if nf.code == "epilogue-store"]
    assert stored and all(nf.neighbour == "maximum" or nf.member == "maximum" for nf in stored)
    assert any(nf.direction == "consumer" for nf in rec.not_fused if nf.code == "epilogue-store")
    args = _args(fused)
    np.testing.assert_allclose(evaluate(fused, *args)[0], evaluate(two_blocks(), *args)[0], rtol=1e-5, atol=1e-6)


def test_without_conv_epilogue_the_block_output_is_still_recomputed_by_its_readers() -> None:
    """The rule keeps a chain in a contraction's epilogue only where the policy lets the
    contraction take one: without it the cheap chain is recomputed as before (the
    convolution is read by both kernels either way)."""
    fused, _ = Fusion(FusionPolicy()).run(two_blocks())
    assert [n.op for n in fused.entry.nodes].count(Op.CONVOLUTION) == 3
    assert _maximums(fused) == 4
    assert not [nf for r in fused.fusion_records for nf in r.not_fused if nf.code == "epilogue-store"]


def test_a_dot_epilogue_read_by_two_kernels_is_stored_once() -> None:
    """The same for a dot: relu(x @ w + b) read by the next dot and by a reduction."""
    b = Builder("dense")
    x, w, bias, w2 = b.parameter("f32[6,5]"), b.parameter("f32[5,4]"), b.parameter("f32[4]"), b.parameter("f32[4,3]")
    d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    y = b.max(b.add(d, b.broadcast_in_dim(bias, shape=d.shape, broadcast_dimensions=(1,))),
              b.broadcast_in_dim(b.constant(0.0, "f32"), shape=d.shape, broadcast_dimensions=()))
    m = b.build(b.dot_general(y, w2, lhs_contracting=(1,), rhs_contracting=(0,)), b.reduce(b.mul(y, y), kind="sum",
                                                                                          axes=(1,)))
    fused, _ = Fusion(FusionPolicy(dot_epilogue=True)).run(m)
    verify(fused)
    kinds = sorted(n.attr["kind"] for n in fused.entry.nodes if n.op is Op.FUSION)
    assert kinds == ["input", "output"] and _maximums(fused) == 1
    args = _args(m)
    for a, e in zip(evaluate(fused, *args), evaluate(m, *args)):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
