"""convolution and reduce-window: the references against direct loops written from the
StableHLO spec, the decompositions against the references, the VJP rules against finite
differences, and the lax / nn functions built on them against NumPy."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax, nn
from axle import random as ar
from axle.errors import ArgumentError, ShapeError
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Op
from axle.ir.conv import (
    conv_dimension_numbers,
    convolution,
    decompose_convolution,
    decompose_reduce_window,
    reduce_window,
)
from axle.testing.cases import cases_for

from modes_util import check_all_modes

RNG = np.random.default_rng(11)


# ------------------------------------------------------------------ direct loops


def loop_conv(x, w, strides, low, high, lhs_dil, rhs_dil, groups=1, batch_groups=1):
    """x [N, C, spatial...], w [O, I, spatial...]: every output element summed term by term
    over the dilated, padded input (holes and padding read 0)."""
    n, c = x.shape[:2]
    o, i = w.shape[:2]
    ksp = w.shape[2:]
    dil_shape = [(s - 1) * d + 1 if s else 0 for s, d in zip(x.shape[2:], lhs_dil)]
    padded = [d + lo + hi for d, lo, hi in zip(dil_shape, low, high)]
    win = [(k - 1) * r + 1 if k else 0 for k, r in zip(ksp, rhs_dil)]
    out_sp = [0 if p <= 0 or k > p else (p - k) // s + 1 for p, k, s in zip(padded, win, strides)]
    out = np.zeros((n // batch_groups, o, *out_sp))
    per_g, per_b = o // groups, o // batch_groups

    def read(b, ch, pos):
        src = []
        for p, lo, d, size in zip(pos, low, lhs_dil, x.shape[2:]):
            q = p - lo
            if q < 0 or q % d or q // d >= size:
                return 0.0
            src.append(q // d)
        return x[(b, ch, *src)]

    for b, oc in itertools.product(range(n // batch_groups), range(o)):
        g, bg = oc // per_g, oc // per_b
        for opos in itertools.product(*(range(s) for s in out_sp)):
            acc = 0.0
            for ic in range(i):
                for kpos in itertools.product(*(range(k) for k in ksp)):
                    pos = [op * s + kp * r for op, s, kp, r in zip(opos, strides, kpos, rhs_dil)]
                    acc += read(bg * (n // batch_groups) + b, g * i + ic, pos) * w[(oc, ic, *kpos)]
            out[(b, oc, *opos)] = acc
    return out


CONV_CONFIGS = [
    # lhs, rhs, strides, low, high, lhs dilation, rhs dilation, feature groups, batch groups
    ((2, 3, 6, 5), (4, 3, 3, 2), (1, 1), (0, 0), (0, 0), (1, 1), (1, 1), 1, 1),
    ((2, 3, 7, 6), (4, 3, 3, 2), (2, 3), (1, 0), (2, 1), (1, 1), (1, 1), 1, 1),
    ((1, 2, 6, 5), (4, 2, 2, 2), (1, 2), (1, 2), (1, 0), (2, 1), (1, 2), 1, 1),
    ((2, 4, 5, 5), (6, 2, 2, 2), (1, 1), (1, 0), (0, 1), (1, 1), (1, 1), 2, 1),
    ((2, 4, 5, 5), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), (1, 1), 4, 1),
    ((4, 3, 5, 5), (6, 3, 2, 2), (1, 1), (0, 0), (0, 0), (1, 1), (1, 1), 1, 2),
    ((1, 1, 6, 6), (1, 1, 2, 2), (1, 1), (-1, 0), (0, -2), (1, 1), (1, 1), 1, 1),
    ((2, 2, 7), (3, 2, 3), (3,), (0,), (2,), (2,), (2,), 1, 1),
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), (1, 2, 1), (1, 0, 0), (0, 1, 1), (1, 1, 2), (1, 1, 1), 1, 1),
]


def _attrs(cfg, layouts=None):
    _, _, st, lo, hi, ld, rd, g, b = cfg
    ns = len(st)
    sp = "DHW"[3 - ns:]
    layouts = layouts or ("NC" + sp, "OI" + sp, "NC" + sp)
    return dict(**conv_dimension_numbers(*layouts), window_strides=st, padding_low=lo, padding_high=hi,
                lhs_dilation=ld, rhs_dilation=rd, feature_group_count=g, batch_group_count=b)


@pytest.mark.parametrize("cfg", CONV_CONFIGS, ids=lambda c: f"{c[0]}x{c[1]}-g{c[7]}-b{c[8]}")
def test_convolution_reference_matches_direct_loops(cfg):
    x, w = RNG.standard_normal(cfg[0]), RNG.standard_normal(cfg[1])
    want = loop_conv(x, w, *cfg[2:])
    np.testing.assert_allclose(convolution(x, w, **_attrs(cfg)), want, rtol=1e-12, atol=1e-12)


def test_convolution_layouts_are_layouts_not_different_results():
    cfg = CONV_CONFIGS[1]
    x, w = RNG.standard_normal(cfg[0]), RNG.standard_normal(cfg[1])
    want = convolution(x, w, **_attrs(cfg))
    got = convolution(x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0),
                      **_attrs(cfg, ("NHWC", "HWIO", "NHWC")))
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), want, rtol=1e-12, atol=1e-12)
    # spatial dims pair up (and take strides, padding...) in the kernel's order, as in jax: H then W
    got = convolution(x.transpose(1, 0, 3, 2), w.transpose(2, 3, 0, 1), **_attrs(cfg, ("CNWH", "HWOI", "WCNH")))
    np.testing.assert_allclose(got.transpose(2, 1, 3, 0), want, rtol=1e-12, atol=1e-12)


def loop_reduce_window(x, kind, win, st, lo, hi, bd, wd):
    ident = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}[kind]
    comb = {"sum": np.add, "prod": np.multiply, "max": max, "min": min}[kind]
    dil = [(s - 1) * d + 1 if s else 0 for s, d in zip(x.shape, bd)]
    padded = [d + a + b for d, a, b in zip(dil, lo, hi)]
    span = [(k - 1) * r + 1 if k else 0 for k, r in zip(win, wd)]
    out_sp = [0 if p <= 0 or k > p else (p - k) // s + 1 for p, k, s in zip(padded, span, st)]
    out = np.full(out_sp, ident)
    for opos in itertools.product(*(range(s) for s in out_sp)):
        acc = ident
        for wpos in itertools.product(*(range(k) for k in win)):
            src, ok = [], True
            for o, s, w_, r, a, d, size in zip(opos, st, wpos, wd, lo, bd, x.shape):
                q = o * s + w_ * r - a
                if q < 0 or q % d or q // d >= size:
                    ok = False
                    break
                src.append(q // d)
            acc = comb(acc, x[tuple(src)] if ok else ident)
        out[opos] = acc
    return out


@pytest.mark.parametrize("kind", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("spec", [((6, 5), (2, 2), (2, 1), (0, 1), (1, 0), (1, 1), (1, 1)),
                                  ((7,), (3,), (2,), (1,), (1,), (2,), (1,)),
                                  ((5, 6), (2, 3), (1, 2), (-1, 0), (1, 2), (1, 1), (2, 1)),
                                  ((2, 4, 4), (1, 2, 2), (1, 2, 2), (0, 1, 1), (0, 1, 1), (1, 1, 1), (1, 1, 1))],
                         ids=str)
def test_reduce_window_reference_matches_direct_loops(kind, spec):
    shape, win, st, lo, hi, bd, wd = spec
    x = RNG.standard_normal(shape)
    got = reduce_window(x, kind=kind, window_dimensions=win, window_strides=st, padding_low=lo, padding_high=hi,
                        base_dilations=bd, window_dilations=wd)
    np.testing.assert_allclose(got, loop_reduce_window(x, kind, win, st, lo, hi, bd, wd), rtol=1e-12)


# ---------------------------------------------------------------- decompositions


@pytest.mark.parametrize("op", [Op.CONVOLUTION, Op.REDUCE_WINDOW], ids=lambda o: o.value)
def test_decompositions_match_the_reference_on_every_kit_case(op):
    """What a device that does not claim the op runs instead (reduce-window bit for bit,
    signed zeros included; convolution up to summation order)."""
    fn = decompose_convolution if op is Op.CONVOLUTION else decompose_reduce_window
    for case in cases_for(op):
        node = case.module.entry.root
        b = Builder("decomposed")
        params = [b.parameter(p.type) for p in case.module.entry.parameters]
        module = b.build(fn(b, b.op(node.op, *params, **node.attr)))
        assert not any(n.op is op for n in module.entry.nodes), case.id
        want = evaluate(case.module, *case.inputs)[0]
        got = evaluate(module, *case.inputs)[0]
        assert got.shape == want.shape and got.dtype == want.dtype, case.id
        if want.dtype == DType.BFLOAT16.np:  # as float32 (exact): NumPy compares bfloat16 NaNs unequal
            got, want = got.astype(np.float32), want.astype(np.float32)
        if op is Op.REDUCE_WINDOW or want.dtype.kind != "f":
            np.testing.assert_array_equal(got, want, err_msg=case.id)
            if want.dtype.kind == "f":
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=case.id)
        else:
            rtol = 2e-3 if want.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=rtol,
                                       err_msg=case.id)


# ---------------------------------------------------------------------- gradients


def numeric_grad(f, args, i, eps=1e-6):
    x = args[i]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        hi, lo = [a.copy() for a in args], [a.copy() for a in args]
        hi[i][idx] += eps
        lo[i][idx] -= eps
        g[idx] = (f(*hi) - f(*lo)) / (2 * eps)
    return g


@pytest.mark.parametrize("cfg", CONV_CONFIGS, ids=lambda c: f"{c[0]}x{c[1]}-g{c[7]}-b{c[8]}")
def test_convolution_vjp_finite_differences(cfg):
    """The transposes of convolution (convolutions themselves) for strides, padding
    (negative too), both dilations, feature and batch groups and 1- to 3-D."""
    x, w = RNG.standard_normal(cfg[0]), RNG.standard_normal(cfg[1])
    attrs = _attrs(cfg)
    cw = RNG.standard_normal(convolution(x, w, **attrs).shape)

    def f_np(a, b):
        return float(np.sum(convolution(a, b, **attrs) * cw))

    with axle.device("interpreter:0"):
        gx, gw = axle.grad(lambda a, b: anp.sum(lax.convolution(a, b, **attrs) * cw), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(np.asarray(gx), numeric_grad(f_np, [x, w], 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(gw), numeric_grad(f_np, [x, w], 1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("spec", [((6, 5), (2, 2), (2, 1), [(0, 1), (1, 0)], (1, 1), (1, 1)),
                                  ((7,), (3,), (2,), [(1, 1)], (2,), (1,)),
                                  ((5, 6), (2, 3), (1, 2), [(-1, 0), (1, 2)], (1, 1), (2, 1))], ids=str)
def test_reduce_window_vjp_finite_differences(kind, spec):
    shape, win, st, pad, bd, wd = spec
    x = RNG.permutation(np.prod(shape)).reshape(shape) * 0.31 + 0.5  # distinct: max/min have no ties
    attrs = dict(kind=kind, window_dimensions=win, window_strides=st, base_dilations=bd, window_dilations=wd,
                 padding_low=tuple(p[0] for p in pad), padding_high=tuple(p[1] for p in pad))
    cw = RNG.standard_normal(reduce_window(x, **attrs).shape)

    def f_np(a):
        return float(np.sum(reduce_window(a, **attrs) * cw))

    with axle.device("interpreter:0"):
        g = axle.grad(lambda a: anp.sum(lax.reduce_window(a, kind, win, st, pad, bd, wd) * cw))(x)
    np.testing.assert_allclose(np.asarray(g), numeric_grad(f_np, [x], 0), rtol=1e-5, atol=1e-7)


def test_max_pool_gradient_goes_to_the_first_maximum_of_a_window():
    x = np.array([[1.0, 3.0, 3.0, 0.0]])
    with axle.device("interpreter:0"):
        g = axle.grad(lambda a: anp.sum(lax.reduce_window(a, "max", (1, 2), (1, 1))))(x)
    np.testing.assert_array_equal(np.asarray(g), [[0.0, 2.0, 1.0, 0.0]])


def test_conv_transpose_with_flipped_kernel_is_the_input_gradient():
    """lax.conv_transpose(transpose_kernel=True) is the VJP of a strided convolution."""
    x = RNG.standard_normal((2, 3, 8, 8))
    w = RNG.standard_normal((4, 3, 3, 3))
    with axle.device("interpreter:0"):
        y, pullback = axle.vjp(lambda a: lax.conv_general_dilated(a, w, (2, 2), "SAME"), x)
        ct = RNG.standard_normal(y.shape)
        (want,) = pullback(ct)
        got = lax.conv_transpose(ct, w, (2, 2), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                 transpose_kernel=True)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------- lax, nn


@pytest.mark.parametrize("padding,strides,want", [("VALID", (1, 1), (6, 4)), ("SAME", (1, 1), (8, 6)),
                                                  ("SAME", (2, 3), (4, 2)), ("SAME_LOWER", (3, 2), (3, 3)),
                                                  ([(1, 2), (0, 0)], (1, 1), (9, 4))], ids=str)
def test_conv_general_dilated_padding_modes(padding, strides, want):
    x, w = np.ones((1, 1, 8, 6)), np.ones((1, 1, 3, 3))
    with axle.device("interpreter:0"):
        assert lax.conv_general_dilated(x, w, strides, padding).shape[2:] == want


@pytest.mark.parametrize("padding,stride,want", [("SAME", 2, 16), ("VALID", 2, 17), ("SAME", 1, 8)], ids=str)
def test_conv_transpose_output_sizes(padding, stride, want):
    x, w = np.ones((1, 8, 8, 2)), np.ones((3, 3, 2, 4))
    with axle.device("interpreter:0"):
        y = nn.conv_transpose(x, w, stride=stride, padding=padding, layout="NHWC")
    assert y.shape == (1, want, want, 4)


@pytest.mark.parametrize("layout", ["NCW", "NCHW", "NCDHW", "NWC", "NHWC", "NDHWC"])
def test_nn_conv_in_every_layout_matches_loops(layout):
    ns = len(layout) - 2
    first = layout.index("C") == 1
    x = RNG.standard_normal((2, 4) + (5,) * ns).astype(np.float32)  # NC...
    w = RNG.standard_normal((6, 2) + (2,) * ns).astype(np.float32)  # OI...
    b = RNG.standard_normal(6).astype(np.float32)
    want = loop_conv(x.astype(np.float64), w.astype(np.float64), (2,) * ns, (1,) * ns, (0,) * ns, (1,) * ns,
                     (1,) * ns, groups=2)
    want = (want + b.reshape((1, 6) + (1,) * ns)).astype(np.float32)
    to_last = (0, *range(2, ns + 2), 1)
    if not first:
        x, want = x.transpose(to_last), want.transpose(to_last)
        w = w.transpose(*range(2, ns + 2), 1, 0)
    check_all_modes(lambda a, k, c: nn.conv(a, k, c, stride=2, padding=[(1, 0)] * ns, groups=2, layout=layout),
                    lambda a, k, c: want, x, w, b, tolerance={"rtol": 1e-4, "atol": 1e-5})


def test_nn_pooling_matches_numpy():
    x = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    check_all_modes(
        lambda a: (nn.max_pool(a, 2), nn.avg_pool(a, 2), nn.max_pool(a, (3, 2), 1, padding=1),
                   nn.avg_pool(a, 3, 1, padding="SAME", count_include_pad=False),
                   nn.max_pool(anp.transpose(a, (0, 2, 3, 1)), 2, layout="NHWC")),
        lambda a: (a.reshape(2, 3, 3, 2, 2, 2).max((3, 5)), a.reshape(2, 3, 3, 2, 2, 2).mean((3, 5)),
                   loop_pool(a, np.max, (3, 2), 1, 1, -np.inf),
                   loop_pool(a, np.mean, (3, 3), 1, 1, np.nan),
                   a.reshape(2, 3, 3, 2, 2, 2).max((3, 5)).transpose(0, 2, 3, 1)), x)


def loop_pool(x, fn, win, stride, pad, fill):
    """Pooling by loops; ``fill`` pads (NaN: left out of the window, as count_include_pad=False)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    oh, ow = (xp.shape[2] - win[0]) // stride + 1, (xp.shape[3] - win[1]) // stride + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        patch = xp[:, :, i * stride:i * stride + win[0], j * stride:j * stride + win[1]]
        out[:, :, i, j] = np.nanmean(patch, axis=(2, 3)) if np.isnan(fill) else fn(patch, axis=(2, 3))
    return out.astype(x.dtype)


def test_adaptive_avg_pool_matches_pytorch_windows():
    x = RNG.standard_normal((2, 3, 7, 5)).astype(np.float32)

    def ref(a, out=(3, 2)):
        res = np.zeros(a.shape[:2] + out, np.float32)
        for i, j in itertools.product(range(out[0]), range(out[1])):
            h0, h1 = (i * 7) // out[0], -(-((i + 1) * 7) // out[0])
            w0, w1 = (j * 5) // out[1], -(-((j + 1) * 5) // out[1])
            res[:, :, i, j] = a[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
        return res

    check_all_modes(lambda a: nn.adaptive_avg_pool(a, (3, 2)), ref, x, tolerance={"rtol": 1e-5, "atol": 1e-6})


def test_batch_norm_training_and_inference():
    x = RNG.standard_normal((8, 3, 4, 4)).astype(np.float32)
    gamma, beta = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    bshape = (1, 3, 1, 1)
    want_y = (x - mean.reshape(bshape)) / np.sqrt(var.reshape(bshape) + 1e-5) * gamma.reshape(bshape) + \
        beta.reshape(bshape)
    n = 8 * 16
    check_all_modes(lambda a, g, b_, m, v: nn.batch_norm(a, g, b_, m, v, training=True),
                    lambda a, g, b_, m, v: (want_y, 0.9 * m + 0.1 * mean, 0.9 * v + 0.1 * var * n / (n - 1)),
                    x, gamma, beta, rm, rv, tolerance={"rtol": 1e-4, "atol": 1e-5})
    want_inf = (x - rm.reshape(bshape)) / np.sqrt(rv.reshape(bshape) + 1e-5)
    check_all_modes(lambda a, m, v: nn.batch_norm(a, None, None, m, v, training=False)[0],
                    lambda a, m, v: want_inf, x, rm, rv, tolerance={"rtol": 1e-5, "atol": 1e-6})
    with axle.device("interpreter:0"), pytest.raises(ArgumentError, match="batch_norm"):
        nn.batch_norm(x, training=False)


def test_group_norm_matches_numpy():
    x = RNG.standard_normal((2, 6, 3, 3)).astype(np.float32)

    def ref(a):
        g = a.reshape(2, 3, -1)
        y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
        return y.reshape(a.shape)

    check_all_modes(lambda a: nn.group_norm(a, 3), ref, x, tolerance={"rtol": 1e-4, "atol": 1e-5})
    with axle.device("interpreter:0"), pytest.raises(ShapeError, match="group_norm"):
        nn.group_norm(x, 4)


def test_dropout_keeps_the_expected_fraction_and_scales():
    x = np.ones((200, 50), np.float32)
    with axle.device("interpreter:0"):
        y = np.asarray(nn.dropout(ar.key(3), x, 0.25))
        again = np.asarray(nn.dropout(ar.key(3), x, 0.25))
        assert np.array_equal(nn.dropout(ar.key(3), x, 0.25, training=False), x)
        with pytest.raises(ArgumentError, match="dropout"):
            nn.dropout(ar.key(3), x, 1.0)
    np.testing.assert_array_equal(y, again)
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.75)


def test_conv_errors_name_the_function_and_shapes():
    with axle.device("interpreter:0"):
        with pytest.raises(ShapeError, match="conv: the input has 3 channels"):
            nn.conv(np.ones((1, 3, 5, 5)), np.ones((2, 2, 3, 3)))
        with pytest.raises(ArgumentError, match="conv: layout 'NCHX'"):
            nn.conv(np.ones((1, 3, 5, 5)), np.ones((2, 3, 3, 3)), layout="NCHX")
        with pytest.raises(ShapeError, match="convolution: .*feature_group_count"):
            lax.conv_general_dilated(np.ones((1, 3, 5, 5)), np.ones((2, 3, 3, 3)), feature_group_count=3)
        with pytest.raises(ArgumentError, match="padding 'FULL'"):
            lax.conv_general_dilated(np.ones((1, 3, 5, 5)), np.ones((2, 3, 3, 3)), padding="FULL")
