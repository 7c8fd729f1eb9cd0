"""The phase split of lhs-dilated convolutions (passes/conv_phases.py): ordinary
convolutions of the undilated input, interleaved, with the reference's values for every
configuration class (1-D to 3-D, dilation 2 and 3, odd sizes, padding low and high, negative
too, window strides, rhs dilation, feature and batch groups, both layouts)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.interpreter import evaluate
from axle.ir import Builder, Module, Op
from axle.ir.conv import conv_dimension_numbers, convolution, window_out_size
from axle.passes import default_pipeline
from axle.passes.conv_phases import ConvPhaseSplit, dim_phases, split_phases

RNG = np.random.default_rng(23)
LAYOUTS = {1: [("NCW", "OIW", "NCW"), ("NWC", "WIO", "NWC")],
           2: [("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC")],
           3: [("NCDHW", "OIDHW", "NCDHW"), ("NDHWC", "DHWIO", "NDHWC")]}


def _random_config(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict]:
    """A random valid lhs-dilated convolution (float64 operands in a random layout)."""
    while True:
        ns = int(rng.integers(1, 4))
        groups = int(rng.choice([1, 1, 2, 3]))
        fg, bg = (groups, 1) if rng.random() < 0.5 else (1, groups)
        ci = int(rng.integers(1, 3))
        n = bg * int(rng.integers(1, 3))
        c = ci * fg
        o = groups * int(rng.integers(1, 3))
        sp = [int(rng.integers(1, 6 if ns < 3 else 4)) for _ in range(ns)]
        ks = [int(rng.integers(1, 5)) for _ in range(ns)]
        ld = [int(rng.choice([1, 2, 2, 3])) for _ in range(ns)]
        if all(d == 1 for d in ld):
            ld[0] = int(rng.choice([2, 3]))
        st = [int(rng.choice([1, 1, 2, 3])) for _ in range(ns)]
        rd = [int(rng.choice([1, 1, 2, 3])) for _ in range(ns)]
        lo = [int(rng.integers(-2, 4)) for _ in range(ns)]
        hi = [int(rng.integers(-2, 4)) for _ in range(ns)]
        out = [window_out_size(*a) for a in zip(sp, ks, st, lo, hi, ld, rd)]
        if 0 in out:
            continue
        lhs_l, rhs_l, out_l = LAYOUTS[ns][int(rng.integers(0, 2))]
        dims = conv_dimension_numbers(lhs_l, rhs_l, out_l)
        x = rng.standard_normal([{"N": n, "C": c}.get(ch, 0) or sp["DHW"[3 - ns:].index(ch)] for ch in lhs_l])
        w = rng.standard_normal([{"O": o, "I": ci}.get(ch, 0) or ks["DHW"[3 - ns:].index(ch)] for ch in rhs_l])
        attrs = dict(**dims, window_strides=tuple(st), padding_low=tuple(lo), padding_high=tuple(hi),
                     lhs_dilation=tuple(ld), rhs_dilation=tuple(rd), feature_group_count=fg, batch_group_count=bg)
        return x, w, attrs


def _split_module(x: np.ndarray, w: np.ndarray, attrs: dict) -> tuple[Module, Module]:
    b = Builder("conv")
    px, pw = b.parameter((x.shape, x.dtype)), b.parameter((w.shape, w.dtype))
    m = b.build(b.op(Op.CONVOLUTION, px, pw, **attrs))
    out, changed = ConvPhaseSplit().run(m)
    assert changed
    return m, out


def test_phase_split_matches_the_reference_over_random_configurations() -> None:
    """Random lhs-dilated convolutions of every class against the reference, in float64;
    every convolution left has lhs_dilation 1."""
    rng = np.random.default_rng(7)
    for case in range(300):
        x, w, attrs = _random_config(rng)
        m, split = _split_module(x, w, attrs)
        convs = [n for n in split.entry.nodes if n.op is Op.CONVOLUTION]
        assert all(set(n.attr["lhs_dilation"]) == {1} for n in convs), attrs
        want = convolution(x, w, **attrs)
        got = evaluate(split, x, w)[0]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"case {case}: {attrs}")


def test_non_finite_kernels_and_inputs_give_the_references_nan_and_inf() -> None:
    """The original multiplies holes and padding too: a kernel element of inf or NaN makes
    0 * inf = NaN in every output its tap reads a hole for, which the phase split keeps (its
    hole products); inf and NaN inputs land where the reference puts them. Random classes,
    non-finite values sprinkled into both operands: NaN positions and infinities equal,
    the rest within the tolerance. (Found by the CI's differential slice: a transposed 1-D
    convolution whose kernel held -inf gave -inf where the reference gives NaN.)"""
    rng = np.random.default_rng(11)
    for case in range(200):
        x, w, attrs = _random_config(rng)
        for arr in (x, w):
            flat = arr.reshape(-1)
            hit = rng.random(flat.size) < 0.15
            flat[hit] = rng.choice([np.inf, -np.inf, np.nan], size=int(hit.sum()))
        _, split = _split_module(x, w, attrs)
        want = convolution(x, w, **attrs)
        got = evaluate(split, x, w)[0]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=f"case {case}: {attrs}")


@pytest.mark.parametrize("s", [2, 3])
def test_each_phase_reads_only_real_elements(s: int) -> None:
    """Per dim the phases together read each (output, tap) pair of the original that hits an
    input element once: the multiply-adds on holes are gone (a 1/s share is left)."""
    n, k, t, lo, r = 7, 3, 1, 1, 1
    out = window_out_size(n, k, t, lo, 2, s, r)
    phases = dim_phases(n, k, t, lo, s, r, out)
    assert len(phases) == s
    taps = sum(p.taps * window_out_size(n, p.taps, p.stride, p.low, p.high, 1, p.rhs_dilation) for p in phases)
    real = sum(1 for o in range(out) for j in range(k) if (o * t + j * r - lo) % s == 0)
    # phases are rounded up to ceil(out / s) outputs: at most one extra row of taps per phase
    assert real <= taps <= real + s * k


def test_phase_without_taps_is_zeros_and_the_1x1_strided_gradient_is_one_convolution() -> None:
    """The input gradient of a 1x1 stride-2 convolution: three of four phases have no tap."""
    x = RNG.standard_normal((2, 3, 4, 4))
    w = RNG.standard_normal((5, 3, 1, 1))
    attrs = dict(**conv_dimension_numbers("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding_low=(0, 0),
                 padding_high=(1, 1), lhs_dilation=(2, 2), rhs_dilation=(1, 1), feature_group_count=1,
                 batch_group_count=1)
    _, split = _split_module(x, w, attrs)
    convs = [n for n in split.entry.nodes if n.op is Op.CONVOLUTION]
    assert len(convs) == 1 and convs[0].shape == (2, 5, 4, 4)
    np.testing.assert_allclose(evaluate(split, x, w)[0], convolution(x, w, **attrs), rtol=1e-12, atol=1e-12)


def test_undilated_and_empty_convolutions_are_left_alone() -> None:
    b = Builder("conv")
    x, w = b.parameter(((1, 1, 4, 4), np.float32)), b.parameter(((1, 1, 3, 3), np.float32))
    dims = conv_dimension_numbers("NCHW", "OIHW", "NCHW")
    plain = b.op(Op.CONVOLUTION, x, w, **dims, window_strides=(1, 1), padding_low=(0, 0), padding_high=(0, 0),
                 lhs_dilation=(1, 1), rhs_dilation=(1, 1), feature_group_count=1, batch_group_count=1)
    assert split_phases(plain) is None
    b2 = Builder("conv")
    x, w = b2.parameter(((1, 0, 4, 4), np.float32)), b2.parameter(((1, 0, 3, 3), np.float32))
    empty = b2.op(Op.CONVOLUTION, x, w, **dims, window_strides=(1, 1), padding_low=(0, 0), padding_high=(0, 0),
                  lhs_dilation=(2, 2), rhs_dilation=(1, 1), feature_group_count=1, batch_group_count=1)
    assert split_phases(empty) is None
    b3 = Builder("conv")  # stride 5, 5x5: 25 phases with taps, more than a consumer should read
    x, w = b3.parameter(((1, 1, 4, 4), np.float32)), b3.parameter(((1, 1, 5, 5), np.float32))
    many = b3.op(Op.CONVOLUTION, x, w, **dims, window_strides=(1, 1), padding_low=(4, 4), padding_high=(4, 4),
                 lhs_dilation=(5, 5), rhs_dilation=(1, 1), feature_group_count=1, batch_group_count=1)
    assert split_phases(many) is None


def test_a_refused_phase_keeps_the_original_convolution() -> None:
    x = RNG.standard_normal((1, 2, 5, 5))
    w = RNG.standard_normal((3, 2, 3, 3))
    attrs = dict(**conv_dimension_numbers("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding_low=(1, 1),
                 padding_high=(1, 1), lhs_dilation=(2, 2), rhs_dilation=(1, 1), feature_group_count=1,
                 batch_group_count=1)
    b = Builder("conv")
    m = b.build(b.op(Op.CONVOLUTION, b.parameter((x.shape, x.dtype)), b.parameter((w.shape, w.dtype)), **attrs))
    out, changed = ConvPhaseSplit(claims=lambda n: n.operands[1].shape == w.shape).run(m)
    assert not changed and out is m


def test_strided_convolution_gradients_through_the_split_pipeline() -> None:
    """The VJP of stride-2 and stride-3 convolutions (lhs-dilated input gradients), run
    through the default pipeline with the split on, against the unsplit reference."""
    x = RNG.standard_normal((2, 3, 9, 8))
    w = RNG.standard_normal((4, 3, 3, 2))
    for st in itertools.product((2, 3), (1, 2)):
        def loss(a, b, st=st):  # noqa: ANN001, ANN202
            return anp.sum(lax.conv_general_dilated(a, b, st, ((1, 2), (0, 1))) ** 2)

        module = axle.jit(axle.grad(loss, argnums=(0, 1)), device="interpreter:0").lower(x, w).module
        assert any(set(n.attr["lhs_dilation"]) != {1} for n in _convs(module)), st
        split, _ = default_pipeline(conv_phase_split=ConvPhaseSplit()).run(module)
        assert _convs(split) and all(set(n.attr["lhs_dilation"]) == {1} for n in _convs(split)), st
        for got, want in zip(evaluate(split, x, w), evaluate(module, x, w)):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def _convs(m: Module) -> list:
    return [n for c in m.computations() for n in c.nodes if n.op is Op.CONVOLUTION]
