"""ResNet's basic block on every in-tree device: the block's output, relu(bn(conv(x)) + x),
is read by the next block's first convolution and by its residual add. Where the
backend's policy lets a convolution take an epilogue (cpu, opencl) the batch norm, the
residual add and the relu are computed once in the convolution's kernel and stored
(fusion code ``epilogue-store``): one kernel per convolution, none for the chain, and the
numbers of the traced program evaluated by the interpreter on every device."""
from __future__ import annotations

import numpy as np
import pytest

import axle
from axle import nn
from axle.interpreter import evaluate
from axle.ir import Module, Op

DEVICES = ["cpu:0", "opencl:0", "template:0", "interpreter:0"]
#: devices whose fusion policy has conv_epilogue on
EPILOGUE = {"cpu:0", "opencl:0"}
C = 4


def _bn(h, p):  # noqa: ANN001, ANN202
    return nn.batch_norm(h, *p, training=False)[0]


def two_blocks(x, w1, w2, w3, p1, p2, p3):  # noqa: ANN001, ANN201
    y = nn.relu(_bn(nn.conv(x, w1, padding=1), p1) + x)
    h = nn.relu(_bn(nn.conv(y, w2, padding=1), p2))
    return nn.relu(_bn(nn.conv(h, w3, padding=1), p3) + y)


def _args() -> tuple:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, C, 7, 6)).astype(np.float32)
    ws = [(0.3 * rng.standard_normal((C, C, 3, 3))).astype(np.float32) for _ in range(3)]

    def bn() -> tuple[np.ndarray, ...]:
        return tuple(a.astype(np.float32) for a in (rng.uniform(0.5, 1.5, C), rng.uniform(-0.3, 0.3, C),
                                                    rng.uniform(-0.2, 0.2, C), rng.uniform(0.5, 2.0, C)))
    return (x, *ws, bn(), bn(), bn())


def _launches(m: Module) -> list[tuple[Op, str | None]]:
    return [(n.op, n.attr.get("kind")) for n in m.entry.nodes
            if n.op not in (Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT)]


@pytest.mark.parametrize("device", DEVICES)
def test_block_output_read_twice(device: str) -> None:
    args = _args()
    f = axle.jit(two_blocks, device=device)
    lowered = f.lower(*args)
    flat = [np.asarray(a) for a in axle.tree_util.tree_leaves(args)]
    (want,) = evaluate(lowered.module, *flat)  # the traced program, unoptimized
    got = np.asarray(f(*args))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    if device in EPILOGUE:
        opt = lowered.optimize()
        assert _launches(opt) == [(Op.FUSION, "output")] * 3  # was a lone conv + a loop fusion + 2
        codes = [nf.code for r in opt.fusion_records for nf in r.not_fused]
        assert "epilogue-store" in codes
