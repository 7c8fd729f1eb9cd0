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
