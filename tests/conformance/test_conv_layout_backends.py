"""Convolution layout assignment on every backend: a conv chain (conv -> batch norm ->
relu -> strided conv + 1x1 shortcut -> relu -> max pool), written NCHW or NHWC, rewritten
into the other layout by the layout pass (passes/conv_layout.py), compiled for cpu, opencl
and the template (which decomposes convolution), agrees with the interpreter; and the
convolutions a device compiles are in the layout it declares (Capabilities.conv_layout)."""
from __future__ import annotations

import numpy as np
import pytest

import axle
from axle import nn
from axle.compiler import compile_module
from axle.config import config
from axle.device_compile import optimize_for
from axle.interpreter import evaluate
from axle.ir import Module, Op
from axle.passes import ConvLayout, LayoutAssignment
from axle.testing import require_backend

#: program layout -> (kernel layout, feature axis, the other layout as a preference)
PROGRAMS = {"NCHW": ("OIHW", 1, ConvLayout(lhs="NSC", rhs="SIO", out="NSC")),
            "NHWC": ("HWIO", 3, ConvLayout(lhs="NCS", rhs="OIS", out="NCS"))}


def _chain(layout: str):  # noqa: ANN202
    klayout, axis, _ = PROGRAMS[layout]

    def conv(h, w, **kw):  # noqa: ANN001, ANN003, ANN202
        return nn.conv(h, w, layout=layout, kernel_layout=klayout, **kw)

    def net(x, w1, w2, wd, g, b):  # noqa: ANN001, ANN202
        h, _, _ = nn.batch_norm(conv(x, w1, padding=1), g, b, training=True, axis=axis)
        h = nn.relu(conv(nn.relu(h), w2, stride=2, padding=1) + conv(x, wd, stride=2))
        return nn.max_pool(h, 2, 2, padding=1, layout=layout)

    return net


def _args(layout: str) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    ws = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((5, 3, 3, 3), (5, 5, 3, 3), (5, 3, 1, 1))]
    if layout == "NHWC":
        x, ws = x.transpose(0, 2, 3, 1), [w.transpose(2, 3, 1, 0) for w in ws]
    return [np.ascontiguousarray(a) for a in (x, *ws)] + [rng.standard_normal(5).astype(np.float32) + 2
                                                         for _ in "gb"]


@pytest.fixture(params=["cpu", "opencl", "template"])
def device(request):  # noqa: ANN001, ANN201
    yield require_backend(request.param)


@pytest.mark.parametrize("layout", list(PROGRAMS))
def test_a_conv_chain_in_the_other_layout_matches_the_interpreter(layout: str, device) -> None:  # noqa: ANN001
    args = _args(layout)
    m: Module = axle.jit(_chain(layout), device="interpreter:0").lower(*args).module
    relaid, changed = LayoutAssignment(PROGRAMS[layout][2]).run(m)
    assert changed
    exe = compile_module(relaid, device)
    backend = axle.REGISTRY.backend_for(device)
    (got,) = [backend.to_host(b) for b in exe.execute([backend.to_device(a, device) for a in args])]
    (want,) = evaluate(m, *args)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-4)


def _compiled_convs(fn, args: list[np.ndarray], dev) -> list:  # noqa: ANN001
    m = axle.jit(fn, device="interpreter:0").lower(*args).module
    saved = config.disable_passes
    config.disable_passes = "fusion"  # the convolutions as nodes, not inside output fusions
    try:
        return [n for n in optimize_for(m, dev).entry.nodes if n.op is Op.CONVOLUTION]
    finally:
        config.disable_passes = saved


@pytest.mark.parametrize("backend_name", ["cpu", "opencl"])
def test_the_convolutions_a_device_compiles_are_in_its_declared_layout(backend_name: str) -> None:
    dev = require_backend(backend_name)
    pref = axle.REGISTRY.backend_for(dev).capabilities(dev).conv_layout
    args = _args("NCHW")
    net = _chain("NCHW")
    # weights as constants: their transposes fold, so every convolution takes the layout
    convs = _compiled_convs(lambda x: net(x, *args[1:]), args[:1], dev)
    feature = 1 if pref is None or pref.lhs is None else pref.lhs.replace("S", "SS").index("C")
    assert len(convs) == 3 and all(c.attr["input_feature_dimension"] == feature for c in convs), pref
    # weights as parameters: a per-call copy of them only for convolutions with enough pixels
    # (these have 2 x 9 x 9 and 2 x 5 x 5)
    convs = _compiled_convs(net, args, dev)
    small = pref is not None and pref.rhs is not None and pref.kernel_copy_min_pixels > 2 * 9 * 9
    assert all(c.attr["input_feature_dimension"] == (1 if small else feature) for c in convs), pref
