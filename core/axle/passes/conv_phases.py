"""Phase split of lhs-dilated convolutions ("transposed convolution by phases").

The input gradient of a strided convolution is a convolution whose input is dilated
(``lhs_dilation`` s: s-1 zeros between elements), and computed as written, (s-1)/s of its
multiply-adds per dim are on those zeros. Split by output phase it is a few ordinary
convolutions of the undilated input (sub-pixel convolution):

Along one spatial dim (input size n, kernel k taps, window stride t, rhs dilation r, low
padding lo, output size O), output ``o`` reads the input at ``q = o*t + j*r - lo`` (in
dilated units) for each tap ``j``, a real element only where ``q`` is a multiple of s.
Which taps hit depends on ``o`` modulo ``P = s / gcd(t, s)`` only, so output phase
``phi`` (the outputs ``phi + P*m``) is an ordinary convolution of the undilated input

* with the taps ``j0, j0 + s', j0 + 2s', ...`` (``s' = s / gcd(r, s)``, ``j0`` the first
  tap with ``j0*r = lo - phi*t (mod s)``), i.e. the kernel sliced with stride s',
* rhs dilation ``r / gcd(r, s)``, window stride ``t / gcd(t, s)``,
* low padding ``-(phi*t + j0*r - lo) / s`` (negative: a crop), and the high padding that
  gives it ``ceil(O / P)`` outputs (reads past the input are zeros, as in the original).

A phase with no tap (``j0 >= k``) reads only holes and padding: it is left out. Each
other phase's result is spread to its output positions ``m*P + phi`` by a pad (``phi``
low zeros, P-1 interior ones per dim) and the spread phases are added; a final slice drops
the positions past O that rounding every phase up to ``ceil(O / P)`` adds. (A sum of
pads, not a stack-and-reshape: a consumer fused with it reads one select per phase and
does no index division; the fusion pass recomputes the interleave in every consumer, and
on cpu a reshape-transpose-reshape read costs several times a plain one.) Batch, feature
and group handling and the dimension numbers are untouched: the split is spatial only.

Every product the original sums is summed by exactly one phase and every other one is a
product with a hole or padding, 0 * w: zero, unless w is inf or NaN, which makes it NaN.
Each phase therefore adds, per output feature, the sum of 0 * w over the kernel elements it
skips (``_hole_products``; a phase without taps is that sum alone), so a non-finite kernel
gives the reference's NaN. The result is the original's up to summation order (it is not
bit-exact against the interpreter, which sums the zeros too, in another order; a sum of
-0 products is +0, as in the reference). The pass runs for devices that ask for it
(``Capabilities.conv_phase_split``), after the layout pass (the phases keep the device
layout the convolution was given), and keeps a convolution whose phases the device would
refuse (``claims``) as it was."""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import DType
from ..ir.literal import Literal
from ..ir.module import Module, Node
from ..ir.ops import Op
from .pipeline import Pass
from .rewrite import like, rebuild_module

#: most phases with taps a split convolution may have: every consumer of the result reads
#: one pad per phase (a 2-D stride-4 3x3 convolution's gradient has 9; beyond this the
#: convolution stays as written rather than making each consumer read dozens of arrays)
MAX_PHASES = 16


@dataclass(frozen=True)
class Phase1D:
    """One output phase along one spatial dim: the ordinary convolution computing it."""

    #: first kernel tap, tap stride and tap count (0: the phase is zeros)
    tap0: int
    tap_step: int
    taps: int
    stride: int
    rhs_dilation: int
    low: int
    high: int


def dim_phases(n: int, k: int, t: int, lo: int, s: int, r: int, out: int) -> list[Phase1D]:
    """The ``s / gcd(t, s)`` phases of one spatial dim (see the module docstring), each
    with ``ceil(out / P)`` outputs."""
    phases = s // math.gcd(t, s)
    step = s // math.gcd(r, s)
    m = -(-out // phases)
    res: list[Phase1D] = []
    for phi in range(phases):
        # the first tap j with j*r = lo - phi*t (mod s): taps repeat every s' = step
        j0 = next((j for j in range(step) if (phi * t + j * r - lo) % s == 0), k)
        taps = max(0, -(-(k - j0) // step)) if j0 < k else 0
        t2, r2 = t // math.gcd(t, s), r // math.gcd(r, s)
        low = -((phi * t + j0 * r - lo) // s) if taps else 0
        high = (m - 1) * t2 + (taps - 1) * r2 + 1 - n - low if taps else 0
        res.append(Phase1D(j0, step, taps, t2, r2, low, high))
    return res


def _phase_conv(conv: Node, combo: Sequence[Phase1D]) -> Node:
    """The convolution of one output phase (every spatial dim's phase in ``combo``)."""
    a = conv.attr
    rhs = conv.operands[1]
    ks = a["kernel_spatial_dimensions"]
    start, limit, stride = [0] * len(rhs.shape), list(rhs.shape), [1] * len(rhs.shape)
    for d, ph in zip(ks, combo):
        start[d], stride[d] = ph.tap0, ph.tap_step
        limit[d] = ph.tap0 + (ph.taps - 1) * ph.tap_step + 1
    kernel = rhs
    if start != [0] * len(start) or limit != list(rhs.shape) or stride != [1] * len(stride):
        kernel = like(conv, Op.SLICE, [rhs], start=tuple(start), limit=tuple(limit), stride=tuple(stride))
    attrs = dict(a)
    attrs.update(window_strides=tuple(p.stride for p in combo), padding_low=tuple(p.low for p in combo),
                 padding_high=tuple(p.high for p in combo), lhs_dilation=(1,) * len(combo),
                 rhs_dilation=tuple(p.rhs_dilation for p in combo))
    return like(conv, Op.CONVOLUTION, [conv.operands[0], kernel], **attrs)


def _zero_scalar(conv: Node) -> Node:
    return like(conv, Op.CONSTANT, [], value=Literal(np.zeros((), conv.dtype.np)))


def _spread(conv: Node, y: Node, per_dim: Sequence[Sequence[Phase1D]], idx: Sequence[int]) -> Node:
    """Phase ``idx``'s result placed at its output positions ``m * P + phi``: padded with
    P-1 interior zeros and ``phi`` low ones per spatial dim (``P * ceil(O / P)`` long)."""
    rank = len(conv.shape)
    low, high, interior = [0] * rank, [0] * rank, [0] * rank
    for o, phases, i in zip(conv.attr["output_spatial_dimensions"], per_dim, idx):
        low[o], high[o], interior[o] = i, len(phases) - 1 - i, len(phases) - 1
    return like(conv, Op.PAD, [y, _zero_scalar(conv)], low=tuple(low), high=tuple(high), interior=tuple(interior))


def _off_phase_taps(conv: Node, combo: Sequence[Phase1D]) -> np.ndarray:
    """The kernel elements that phase ``combo`` does not apply (True): those whose tap, in
    some spatial dim, is not one of the phase's (they multiply holes or padding)."""
    rhs = conv.operands[1]
    ks = conv.attr["kernel_spatial_dimensions"]
    on = np.ones(rhs.shape, bool)
    for d, ph in zip(ks, combo):
        hit = np.zeros(rhs.shape[d], bool)
        hit[ph.tap0:ph.tap0 + ph.taps * ph.tap_step:ph.tap_step] = ph.taps > 0
        on &= hit.reshape([-1 if i == d else 1 for i in range(len(rhs.shape))])
    return ~on


def _hole_products(conv: Node, combo: Sequence[Phase1D], shape: Sequence[int]) -> Node | None:
    """The original's products with holes and padding that phase ``combo`` leaves out, per
    output feature and broadcast to ``shape``: 0 * w summed over the kernel elements the
    phase skips (``_off_phase_taps``) and the input features, which is NaN where one of
    them is inf or NaN (0 * inf) and a zero otherwise. Without it a kernel holding inf
    gave inf where the reference gives NaN. None for integers (their products with zeros
    are zeros) and where the phase applies every kernel element."""
    if not conv.dtype.is_float:
        return None
    off = _off_phase_taps(conv, combo)
    if not off.any():
        return None
    a, rhs = conv.attr, conv.operands[1]
    zero = like(conv, Op.CONSTANT, [], value=Literal(np.zeros((), rhs.dtype.np)))
    zeros = like(conv, Op.BROADCAST_IN_DIM, [zero], shape=tuple(rhs.shape), broadcast_dimensions=())
    mask = like(conv, Op.CONSTANT, [], value=Literal(off))
    skipped = like(conv, Op.SELECT, [mask, rhs, zeros])
    products = like(conv, Op.MUL, [zeros, skipped])
    axes = tuple(sorted((*a["kernel_spatial_dimensions"], a["kernel_input_feature_dimension"])))
    per_feature = like(conv, Op.REDUCE, [products], kind="sum", axes=axes)
    if per_feature.dtype is not conv.dtype:
        per_feature = like(conv, Op.CONVERT, [per_feature], dtype=conv.dtype)
    return like(conv, Op.BROADCAST_IN_DIM, [per_feature], shape=tuple(shape),
                broadcast_dimensions=(a["output_feature_dimension"],))


def split_phases(conv: Node) -> Node | None:
    """``conv`` (lhs-dilated) without its holes, or None when it has no dilation to remove,
    an empty input, kernel or result, or more than ``MAX_PHASES`` phases with taps.

    The phases interleave as a sum of spread phases: each output position gets its phase's
    value plus zeros from the others (one select per phase where a consumer reads it, no
    index division: a stack-and-reshape interleave read inside a fused loop costs several
    times more on cpu, and consumers that recompute it multiply that). Adding zeros keeps
    every value (a -0 sum becomes +0, as the reference's does)."""
    a = conv.attr
    if all(d == 1 for d in a["lhs_dilation"]) or 0 in conv.shape or 0 in conv.operands[0].shape \
            or 0 in conv.operands[1].shape or conv.dtype is DType.BOOL:  # (bool: no add to interleave with)
        return None
    lhs, rhs = (o.shape for o in conv.operands)
    per_dim = [dim_phases(lhs[i], rhs[k], t, lo, s, r, conv.shape[o])
               for i, k, o, t, lo, s, r in zip(a["input_spatial_dimensions"], a["kernel_spatial_dimensions"],
                                               a["output_spatial_dimensions"], a["window_strides"],
                                               a["padding_low"], a["lhs_dilation"], a["rhs_dilation"])]
    if math.prod(sum(1 for p in phases if p.taps) for phases in per_dim) > MAX_PHASES:
        return None
    out = None
    for idx in itertools.product(*(range(len(p)) for p in per_dim)):
        combo = [per_dim[d][i] for d, i in enumerate(idx)]
        phase_shape = list(conv.shape)
        for o, phases in zip(a["output_spatial_dimensions"], per_dim):
            phase_shape[o] = -(-conv.shape[o] // len(phases))
        holes = _hole_products(conv, combo, phase_shape)
        if any(p.taps == 0 for p in combo):  # a phase without taps reads only holes and padding
            if holes is None:
                continue
            y = holes
        else:
            y = _phase_conv(conv, combo)
            y = y if holes is None else like(conv, Op.ADD, [y, holes])
        part = _spread(conv, y, per_dim, idx)
        out = part if out is None else like(conv, Op.ADD, [out, part])
    if out is None:  # no output reads an input element (integers: zeros)
        return like(conv, Op.BROADCAST_IN_DIM, [_zero_scalar(conv)], shape=conv.shape, broadcast_dimensions=())
    if tuple(out.shape) == tuple(conv.shape):
        return out
    rank = len(conv.shape)
    return like(conv, Op.SLICE, [out], start=(0,) * rank, limit=tuple(conv.shape), stride=(1,) * rank)


class ConvPhaseSplit(Pass):
    """Rewrites each lhs-dilated convolution into its output phases (module docstring).
    ``claims``, when given, is the device's verdict on each phase convolution: a
    convolution with a refused phase stays as it was. ``enabled=False``: a device that
    did not ask for the split (``Capabilities.conv_phase_split``), no change."""

    name = "conv-phases"

    def __init__(self, claims: Callable[[Node], bool] | None = None, enabled: bool = True) -> None:
        self.claims = claims
        self.enabled = enabled

    def run(self, module: Module) -> tuple[Module, bool]:
        if not self.enabled:
            return module, False

        def fn(n: Node) -> Node | None:
            if n.op is not Op.CONVOLUTION:
                return None
            out = split_phases(n)
            if out is None or (self.claims is not None and not all(self.claims(c) for c in _convs(out, n))):
                return None
            return out

        out = rebuild_module(module, fn)
        return out, out is not module


def _convs(root: Node, stop: Node) -> list[Node]:
    """The convolutions under ``root`` (down to the operands of the original ``stop``)."""
    seen: set[int] = set()
    found: list[Node] = []
    todo = [root]
    leaves = {o.uid for o in stop.operands}
    while todo:
        n = todo.pop()
        if n.uid in seen or n.uid in leaves:
            continue
        seen.add(n.uid)
        if n.op is Op.CONVOLUTION:
            found.append(n)
        todo.extend(n.operands)
    return found
