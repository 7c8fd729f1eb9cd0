"""Convolution layout assignment (passes/conv_layout.py): a device's preferred convolution
layout, reached with as few transposes as possible, and the same values as the program."""
from __future__ import annotations

import numpy as np
import pytest
from test_conv import CONV_CONFIGS, _attrs

import axle
import axle.numpy as anp
from axle import nn
from axle.backend import Capabilities
from axle.config import config
from axle.errors import BackendError
from axle.interpreter import evaluate
from axle.ir import Builder, Module, Op
from axle.passes import ConvLayout, LayoutAssignment, default_pipeline, layout_for, optimize

NHWC = ConvLayout(lhs="NSC", rhs="SIO", out="NSC")
NHWC_KEEP_KERNEL = ConvLayout(lhs="NSC", out="NSC")
NCHW = ConvLayout(lhs="NCS", rhs="OIS", out="NCS")
RNG = np.random.default_rng(5)


def _transposes(m: Module) -> list:
    return [n for c in m.computations() for n in c.nodes if n.op is Op.TRANSPOSE]


def _convs(m: Module) -> list:
    return [n for c in m.computations() for n in c.nodes if n.op is Op.CONVOLUTION]


def _block(x, w1, w2, wd, g, b):  # noqa: ANN001, ANN202 - a ResNet block: NCHW, OIHW
    """conv -> bn (inference) -> relu -> conv -> bn (training) -> + 1x1 conv shortcut -> relu."""
    h, _, _ = nn.batch_norm(nn.conv(x, w1, padding=1), g, b, g * g, g * g, training=False)
    h = nn.relu(h)
    h, _, _ = nn.batch_norm(nn.conv(h, w2, stride=2, padding=1), g, b, training=True)
    return nn.relu(h + nn.conv(x, wd, stride=2))


def _block_args(layout: str = "NCHW") -> list[np.ndarray]:
    x = RNG.standard_normal((2, 4, 8, 8)).astype(np.float32)
    ws = [RNG.standard_normal(s).astype(np.float32) * 0.3 for s in ((4, 4, 3, 3), (4, 4, 3, 3), (4, 4, 1, 1))]
    if layout == "NHWC":
        x, ws = x.transpose(0, 2, 3, 1), [w.transpose(2, 3, 1, 0) for w in ws]
    return [np.ascontiguousarray(a) for a in (x, *ws)] + [RNG.standard_normal(4).astype(np.float32) + 2 for _ in "gb"]


def _lowered(fn, *args) -> Module:  # noqa: ANN001, ANN002
    return axle.jit(fn, device="interpreter:0").lower(*args).module


def _optimized(m: Module, pref: ConvLayout | None, fusion: bool = True) -> Module:
    saved = config.disable_passes
    config.disable_passes = "" if fusion else "fusion"
    try:
        return default_pipeline(layout=LayoutAssignment(pref)).run(m)[0]
    finally:
        config.disable_passes = saved


def _close(m: Module, opt: Module, args: list[np.ndarray], rtol: float = 2e-5) -> None:
    want, got = evaluate(m, *args), evaluate(opt, *args)
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("pref", [NHWC_KEEP_KERNEL, NHWC], ids=["kernel-kept", "kernel-HWIO"])
def test_an_nchw_resnet_block_on_an_nhwc_device_transposes_only_its_input_and_output(pref: ConvLayout) -> None:
    args = _block_args()
    g, b = args[-2:]
    # weights as parameters where the kernel layout is kept, as constants where it changes
    # (a transpose of a constant folds at compile time, one of a parameter would run per call)
    fn = _block if pref.rhs is None else (lambda x: _block(x, *args[1:4], g, b))
    call_args = args if pref.rhs is None else args[:1]
    m = _lowered(fn, *call_args)
    unfused = _optimized(m, pref, fusion=False)
    ts = _transposes(unfused)
    assert len(ts) == 2, [str(t) for t in ts]
    # to NHWC at the input, back to NCHW at the output
    assert {t.attr["permutation"] for t in ts} == {(0, 2, 3, 1), (0, 3, 1, 2)}
    assert all(c.attr["input_feature_dimension"] == 3 and c.attr["output_feature_dimension"] == 3
               for c in _convs(unfused))
    _close(m, unfused, call_args)
    fused = _optimized(m, pref)
    # after fusion the input's transpose may be read inside a kernel that needs it; still
    # only the input is transposed on the way in, and the output on the way out
    assert {t.attr["permutation"] for t in _transposes(fused)} == {(0, 2, 3, 1), (0, 3, 1, 2)}
    _close(m, fused, call_args)


def test_pooling_and_global_average_pool_stay_in_the_device_layout() -> None:
    args = _block_args()

    def net(*a):  # noqa: ANN002, ANN202
        h = nn.max_pool(_block(*a), 2, 2, padding=1)
        return anp.mean(h, axis=(2, 3))

    m = _lowered(net, *args)
    opt = _optimized(m, NHWC_KEEP_KERNEL, fusion=False)
    # the pooled [N, C] result needs no transpose back: only the input is transposed
    assert [t.attr["permutation"] for t in _transposes(opt)] == [(0, 2, 3, 1)]
    windows = [n for n in opt.entry.nodes if n.op is Op.REDUCE_WINDOW]
    assert windows and windows[0].attr["window_dimensions"] == (1, 2, 2, 1)
    _close(m, opt, args)


def test_an_nhwc_program_on_an_nchw_device_round_trips_too() -> None:
    args = _block_args("NHWC")

    def net(x, w1, w2, wd, g, b):  # noqa: ANN001, ANN202
        def conv(h, w, **kw):  # noqa: ANN001, ANN003, ANN202
            return nn.conv(h, w, layout="NHWC", **kw)
        h, _, _ = nn.batch_norm(conv(x, w1, padding=1), g, b, training=True, axis=3)
        return nn.relu(conv(nn.relu(h), w2, stride=2, padding=1) + conv(x, wd, stride=2))

    m = _lowered(net, *args)
    opt = _optimized(m, NCHW, fusion=False)
    # input and the two 3x3 kernels (parameters: HWIO -> OIHW) once each, the output back;
    # the 1x1 kernel is read as IOHW (O and I traded), which is a reshape of its HWIO
    assert len(_transposes(opt)) == 4
    assert all(c.attr["input_feature_dimension"] == 1 for c in _convs(opt))
    _close(m, opt, args)


def test_transposes_the_user_wrote_around_a_convolution_fold_away() -> None:
    # an NHWC image transposed to NCHW for an NCHW convolution and back: on an NHWC
    # device the convolution reads the image as it is and its result is the output
    x = RNG.standard_normal((1, 6, 6, 3)).astype(np.float32)
    w = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
    m = _lowered(lambda a, k: anp.transpose(nn.conv(anp.transpose(a, (0, 3, 1, 2)), k, padding=1), (0, 2, 3, 1)),
                 x, w)
    opt = _optimized(m, NHWC_KEEP_KERNEL, fusion=False)
    assert _transposes(opt) == []
    _close(m, opt, [x, w])


@pytest.mark.parametrize("cfg", CONV_CONFIGS, ids=lambda c: f"{c[0]}x{c[1]}-g{c[7]}-b{c[8]}")
@pytest.mark.parametrize("pref", [NHWC, NCHW, ConvLayout(lhs="CSN", rhs="ISO", out="SNC")],
                         ids=["NHWC", "NCHW", "odd"])
def test_every_convolution_configuration_keeps_its_values_in_another_layout(cfg: tuple, pref: ConvLayout) -> None:
    """1-D, 2-D, 3-D; strides, padding (negative too), dilations, feature and batch groups;
    from NCHW-style dimension numbers and from mixed ones."""
    b = Builder("conv")
    ns = len(cfg[2])
    sp = "DHW"[3 - ns:]
    layouts = ("N" + sp + "C", "O" + sp + "I", "C" + sp + "N") if pref is NCHW else None
    attrs = _attrs(cfg, layouts)
    lhs_shape, rhs_shape = cfg[0], cfg[1]
    if layouts is not None:  # the same sizes, laid out as the dimension numbers say
        lhs_shape = (cfg[0][0], *cfg[0][2:], cfg[0][1])
        rhs_shape = (cfg[1][0], *cfg[1][2:], cfg[1][1])
    x, w = b.parameter(f"f64[{','.join(map(str, lhs_shape))}]"), b.parameter(f"f64[{','.join(map(str, rhs_shape))}]")
    m = b.build(b.tanh(b.convolution(x, w, **attrs)))  # an elementwise consumer in the new layout
    out, changed = LayoutAssignment(pref).run(m)
    assert changed
    args = [RNG.standard_normal(lhs_shape), RNG.standard_normal(rhs_shape)]
    _close(m, out, args, rtol=1e-12)


def test_no_preference_or_the_programs_own_layout_is_a_no_op() -> None:
    args = _block_args()
    m = _lowered(_block, *args)
    for pass_ in (LayoutAssignment(), LayoutAssignment(ConvLayout()), LayoutAssignment(NCHW)):
        out, changed = pass_.run(m)
        assert out is m and not changed
    # the default pipeline (no device) and a device without a preference: same module
    assert _transposes(optimize(m)) == []
    assert layout_for().conv_layout is None


def test_a_rewritten_convolution_the_device_refuses_keeps_the_programs_layout() -> None:
    args = _block_args()
    m = _lowered(_block, *args)
    out, changed = LayoutAssignment(NHWC, claims=lambda n: n.op is not Op.CONVOLUTION).run(m)
    assert out is m and not changed


def test_weights_are_copied_per_call_only_for_convolutions_with_enough_pixels() -> None:
    args = _block_args()  # outputs of 2 x 8 x 8 and 2 x 4 x 4 pixels
    m = _lowered(_block, *args)
    out, changed = LayoutAssignment(ConvLayout(lhs="NSC", rhs="SIO", out="NSC", kernel_copy_min_pixels=64)).run(m)
    # the first convolution (128 pixels) repays its kernel's copy; the strided one (32) would
    # not on its own, but the program's layout would transpose its input, already in the
    # device layout, back (512 elements against 144); the shortcut reads the input's copy
    # made for the first and its 1x1 kernel with O and I traded (a reshape): no copy at all
    assert changed and [c.attr["input_feature_dimension"] for c in _convs(out)] == [3, 3, 3]
    _close(m, out, args)
    assert LayoutAssignment(ConvLayout(lhs="NSC", rhs="SIO", out="NSC", kernel_copy_min_pixels=129)).run(m)[0] is m
    # constant weights transpose at compile time: no copy per call, every convolution moves
    const = _lowered(lambda x: _block(x, *args[1:]), args[0])
    out = LayoutAssignment(ConvLayout(lhs="NSC", rhs="SIO", out="NSC", kernel_copy_min_pixels=10**9)).run(const)[0]
    assert [c.attr["input_feature_dimension"] for c in _convs(out)] == [3, 3, 3]
    _close(const, out, args[:1])


def test_a_layout_conflict_goes_the_way_of_the_values_next_reader() -> None:
    # conv(x) + p with p a program-layout parameter costs one transpose either way: where
    # the sum goes on to a convolution it is taken in the device layout, where it leaves
    # the program (a weight update, a result) in the program's
    x, p = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32), RNG.standard_normal((2, 4, 6, 6)).astype(np.float32)
    k1, k2 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    m = _lowered(lambda a, q: q - 0.5 * nn.conv(a, k1, padding=1), x, p)
    out = _optimized(m, NHWC, fusion=False)
    # x on the way in, the scaled convolution back: p and the output are not copied
    assert [(t.operands[0].op, t.shape) for t in _transposes(out)] == [(Op.PARAMETER, (2, 6, 6, 3)),
                                                                       (Op.MUL, (2, 4, 6, 6))]
    _close(m, out, [x, p])
    m = _lowered(lambda a, q: nn.conv(nn.relu(nn.conv(a, k1, padding=1) + q), k2, padding=1), x, p)
    out = _optimized(m, NHWC, fusion=False)
    # x and p on the way in, the result back: the sum feeds the second convolution as it is
    assert sorted((t.operands[0].op.value, t.shape) for t in _transposes(out)) == [
        ("convolution", (2, 4, 6, 6)), ("parameter", (2, 6, 6, 3)), ("parameter", (2, 6, 6, 4))]
    _close(m, out, [x, p])


def test_a_malformed_preference_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="ConvLayout.lhs='NHWC'"):
        ConvLayout(lhs="NHWC")

    class Odd:
        name = "odd"

        def capabilities(self, device):  # noqa: ANN001, ANN202
            return Capabilities(conv_layout="NHWC")  # type: ignore[arg-type]

    with pytest.raises(BackendError, match="conv_layout is 'NHWC'"):
        layout_for(Odd(), object())


def test_gradient_of_a_conv_chain_is_unchanged_by_the_layout() -> None:
    args = _block_args()

    def loss(x, w1, w2, wd, g, b):  # noqa: ANN001, ANN202
        return anp.sum(anp.square(_block(x, w1, w2, wd, g, b)))

    m = _lowered(axle.grad(loss, argnums=(0, 1, 2, 3)), *args)
    opt = _optimized(m, NHWC)
    # the backward convolutions (input and weight gradients) run in the device layout too;
    # an input gradient reads the forward kernel's HWIO copy reversed, as HWOI
    convs = _convs(opt)
    assert len(convs) >= 6
    assert all(c.attr["input_feature_dimension"] == 3 and c.attr["output_feature_dimension"] == 3
               and c.attr["kernel_spatial_dimensions"] == (0, 1) for c in convs)
    # so each weight parameter is transposed once, for both directions
    unfused = _optimized(m, NHWC, fusion=False)
    kernels = {p.uid for p in unfused.entry.parameters[1:4]}
    copies = [t.operands[0].uid for t in _transposes(unfused) if t.operands[0].uid in kernels]
    assert sorted(copies) == sorted(set(copies)) and len(copies) == 2  # the 1x1 one: a reshape
    assert not [t for t in _transposes(unfused) if t.operands[0].op is Op.REVERSE]
    _close(m, opt, args, rtol=1e-4)


# -- movement ops between convolutions stay in the device layout -------------------------
#: op between two convolutions (of 4 channels) -> the channels it leaves
_BETWEEN = {
    "pad": (lambda h: anp.pad(h, ((0, 0), (0, 0), (1, 2), (2, 0))), 4),
    "interior-pad": (lambda h: axle.lax.pad(h, anp.asarray(0.5, h.dtype), (0, 0, 1, 0), (0, 0, 0, 1), (0, 0, 1, 1)),
                     4),
    "slice": (lambda h: h[:, 1:, 1:6:2, ::2], 3),
    "concatenate": (lambda h: anp.concatenate([h, nn.relu(h)[:, :2]], axis=1), 6),
    "merge-spatial": (lambda h: anp.reshape(anp.exp(anp.reshape(h, (2, 4, 36))), (2, 4, 6, 6)), 4),
    "split-channels": (lambda h: anp.reshape(anp.reshape(h, (2, 2, 2, 6, 6)) * 2.0, (2, 4, 6, 6)), 4),
    "reverse": (lambda h: axle.lax.reverse(h, (2,)), 4),
    # a broadcast of a value in the device layout (a per-row statistic) folds into the
    # broadcast's dims: no rule of its own, and none needed
    "broadcast": (lambda h: h * anp.sum(h, axis=3, keepdims=True), 4),
}


@pytest.mark.parametrize("op", list(_BETWEEN))
def test_movement_ops_between_convolutions_run_in_the_device_layout(op: str) -> None:
    between, channels = _BETWEEN[op]
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    k1 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w = RNG.standard_normal((5, channels, 2, 2)).astype(np.float32)
    m = _lowered(lambda a, k2: nn.conv(between(nn.conv(a, k1, padding=1)), k2), x, w)
    opt = _optimized(m, NHWC_KEEP_KERNEL, fusion=False)
    # the input on its way in, the result on its way out: nothing between the convolutions
    assert [t.attr["permutation"] for t in _transposes(opt)] == [(0, 2, 3, 1), (0, 3, 1, 2)], op
    assert all(c.attr["input_feature_dimension"] == 3 for c in _convs(opt))
    _close(m, opt, [x, w])


def test_a_reshape_that_mixes_moved_dims_reads_the_programs_layout() -> None:
    # [N, C, H, W] -> [N, C*H, W] merges C with H, which NHWC keeps apart: one transpose back
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    k1 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = _lowered(lambda a: anp.reshape(nn.conv(a, k1, padding=1), (2, 24, 6)), x)
    opt = _optimized(m, NHWC_KEEP_KERNEL, fusion=False)
    assert [t.attr["permutation"] for t in _transposes(opt)] == [(0, 2, 3, 1), (0, 3, 1, 2)]
    _close(m, opt, [x])


@pytest.mark.parametrize(("src", "dst", "groups"), [
    ((2, 3, 4), (6, 4), [([0, 1], [0]), ([2], [1])]),
    ((2, 12), (2, 3, 4), [([0], [0]), ([1], [1, 2])]),
    ((1, 6, 1), (6,), [([0, 1, 2], [0])]),
    ((6, 4), (4, 6), [([0, 1], [0, 1])]),
    ((2, 0), (0,), None),
])
def test_reshape_groups(src: tuple, dst: tuple, groups: list | None) -> None:
    from axle.passes.conv_layout import reshape_groups

    assert reshape_groups(src, dst) == groups
