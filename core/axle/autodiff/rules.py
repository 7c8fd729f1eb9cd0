"""VJP rules: one entry per differentiable primitive of the op table.

A rule gets the primitive's node (for attributes and operand types), the operand values,
the output value and the output cotangent, and returns one cotangent per operand (None: a
zero cotangent, nothing flows). Rules are written in primitives (``axle.lax``), so the
backward pass is itself traced, jitted, clustered or run eagerly like any other code.

Primitives without a rule are not differentiable (compare, and/or/not, iota, rng) or
piecewise constant (floor, ceil, sign): their cotangent is zero. Custom calls have one rule
that dispatches on the target (linalg_rules.py); targets without a rule get zero.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax
from ..frontend.bind import bind
from ..ir.dotdims import DotDims
from ..ir.module import Node
from ..ir.ops import Op
from ..ir.reductions import REDUCE_KINDS
from . import custom
from .collective_rules import COLLECTIVE_VJP
from .linalg_rules import custom_call_vjp

Value = Any
Rule = Callable[[Node, Sequence[Value], Value, Value], list[Value | None]]


def full(v: float, node: Node) -> Value:
    """The scalar v broadcast to the type of ``node``."""
    t = node.tensor_type
    return lax.broadcast_in_dim(np.asarray(v, t.dtype.np), t.shape, ())


def _trunc(t: Value, node: Node) -> Value:
    return lax.select(lax.compare(t, full(0, node), "lt"), lax.ceil(t), lax.floor(t))


def _zeros_of(node: Node) -> Value:
    return full(0, node)


# ------------------------------------------------------------------ elementwise


def _abs(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    return [lax.mul(ct, lax.sign(xs[0]))]


def _sqrt(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    return [lax.div(ct, lax.mul(full(2, n), out))]


def _rsqrt(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    return [lax.mul(ct, lax.div(lax.mul(full(-0.5, n), out), xs[0]))]


def _tanh(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    return [lax.mul(ct, lax.sub(full(1, n), lax.mul(out, out)))]


def _logistic(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    return [lax.mul(ct, lax.mul(out, lax.sub(full(1, n), out)))]


def _div(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    x, y = xs
    return [lax.div(ct, y), lax.neg(lax.mul(ct, lax.div(out, y)))]


def _rem(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    x, y = xs  # fmod(x, y) = x - y * trunc(x / y)
    return [ct, lax.neg(lax.mul(ct, _trunc(lax.div(x, y), n)))]


def _pow(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    x, y = xs
    dx = lax.mul(y, lax.pow(x, lax.sub(y, full(1, n))))
    pos = lax.compare(x, full(0, n), "gt")
    # d/dy x^y = x^y log x, taken as 0 where x <= 0 (as JAX does at x == 0)
    dy = lax.select(pos, lax.mul(out, lax.log(lax.select(pos, x, full(1, n)))), full(0, n))
    return [lax.mul(ct, dx), lax.mul(ct, dy)]


def _minmax(direction: str) -> Rule:
    def rule(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
        x, y = xs
        # ties split the cotangent evenly between both operands
        half = lax.mul(ct, full(0.5, n))
        eq = lax.compare(x, y, "eq")
        gx = lax.select(lax.compare(x, y, direction), ct, lax.select(eq, half, full(0, n)))
        gy = lax.select(lax.compare(y, x, direction), ct, lax.select(eq, half, full(0, n)))
        return [gx, gy]

    return rule


def _select(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    p = xs[0]
    z = _zeros_of(n)
    return [None, lax.select(p, ct, z), lax.select(p, z, ct)]


def _convert(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    src = n.operands[0].dtype
    return [lax.convert(ct, src) if src.is_float else None]


# ------------------------------------------------------------------ reductions, dot


def _reduce(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    kind, axes = n.attr["kind"], n.attr["axes"]
    xt = n.operands[0].tensor_type
    kept = tuple(i for i in range(xt.rank) if i not in axes)

    def back(v: Value) -> Value:
        return lax.broadcast_in_dim(v, xt.shape, kept)

    x = xs[0]
    if kind == "sum":
        return [back(ct)]
    if kind in ("max", "min"):
        # every element equal to the extreme shares the cotangent evenly
        hit = lax.compare(x, back(out), "eq")
        cnt = lax.reduce(lax.convert(hit, xt.dtype), "sum", axes)
        share = back(lax.div(ct, cnt))
        return [lax.select(hit, share, full(0, n.operands[0]))]
    if kind == "prod":  # d/dx_i prod = prod / x_i (undefined where x_i == 0)
        return [lax.div(back(lax.mul(ct, out)), x)]
    return [None]


def _dot(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    lhs, rhs = xs
    pref = n.attr["preferred_element_type"]
    if pref is not None:
        # the cotangent is in the wider preferred type: the operands meet it there, and
        # each gradient returns to its operand's dtype (rounded once)
        lhs, rhs = lax.convert(lhs, pref), lax.convert(rhs, pref)
    d = DotDims.of(n)
    lb, rb, lc, rc = d.lhs_batch, d.rhs_batch, d.lhs_contracting, d.rhs_contracting
    lr, rr = n.operands[0].tensor_type.rank, n.operands[1].tensor_type.rank
    lfree, rfree = list(d.lhs_free), list(d.rhs_free)
    ct_batch, ct_lfree, ct_rfree = (list(g) for g in d.result_groups)

    # d lhs: ct (batch, lfree, rfree) . rhs over rfree -> (batch, lfree, rhs contracting dims in rhs order)
    g = lax.dot_general(ct, rhs, ct_rfree, rfree, ct_batch, list(rb))
    rc_sorted = sorted(range(len(rc)), key=lambda k: rc[k])
    dims = list(lb) + lfree + [lc[k] for k in rc_sorted]
    glhs = lax.transpose(g, [dims.index(i) for i in range(lr)])

    # d rhs: ct . lhs over lfree -> (batch, rfree, lhs contracting dims in lhs order)
    g = lax.dot_general(ct, lhs, ct_lfree, lfree, ct_batch, list(lb))
    lc_sorted = sorted(range(len(lc)), key=lambda k: lc[k])
    dims = list(rb) + rfree + [rc[k] for k in lc_sorted]
    grhs = lax.transpose(g, [dims.index(i) for i in range(rr)])
    if pref is not None:
        glhs, grhs = lax.convert(glhs, n.operands[0].dtype), lax.convert(grhs, n.operands[1].dtype)
    return [glhs, grhs]


# elementwise completeness


def _atan2(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    y, x = xs  # d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)
    r = lax.div(ct, lax.add(lax.mul(x, x), lax.mul(y, y)))
    return [lax.mul(r, x), lax.neg(lax.mul(r, y))]


def _cbrt(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    return [lax.div(ct, lax.mul(full(3, n), lax.mul(out, out)))]


def _erf(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    x = xs[0]
    return [lax.mul(ct, lax.mul(full(2 / np.sqrt(np.pi), n), lax.exp(lax.neg(lax.mul(x, x)))))]


# ------------------------------------------------------------------ data movement


def _broadcast(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    xt = n.operands[0].tensor_type
    shape, dims = n.attr["shape"], n.attr["broadcast_dimensions"]
    summed = [d for d in range(len(shape)) if d not in dims]
    summed += [d for i, d in enumerate(dims) if xt.shape[i] == 1 and shape[d] != 1]
    g = lax.reduce(ct, "sum", sorted(summed)) if summed else ct
    return [lax.reshape(g, xt.shape)]


def _transpose(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    perm = n.attr["permutation"]
    inv = [perm.index(i) for i in range(len(perm))]
    return [lax.transpose(ct, inv)]


def _slice(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    xt = n.operands[0].tensor_type
    start, stride = n.attr["start"], n.attr["stride"]
    cnt = n.tensor_type.shape
    if 0 in cnt:
        return [full(0, n.operands[0])]
    high = [dim - (s + (c - 1) * st + 1) for dim, s, c, st in zip(xt.shape, start, cnt, stride)]
    return [lax.pad(ct, np.asarray(0, xt.dtype.np), start, high, [st - 1 for st in stride])]


def _pad(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    xt = n.operands[0].tensor_type
    low, interior = n.attr["low"], n.attr["interior"]
    limit = [lo + (d - 1) * (it + 1) + 1 if d else lo for lo, d, it in zip(low, xt.shape, interior)]
    gx = lax.slice(ct, low, limit, [it + 1 for it in interior])
    all_axes = list(range(xt.rank))
    total = lax.reduce(ct, "sum", all_axes) if all_axes else ct
    inner = lax.reduce(gx, "sum", all_axes) if all_axes else gx
    return [gx, lax.sub(total, inner)]


def _concatenate(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    dim = n.attr["dimension"]
    shape = n.tensor_type.shape
    outs, at = [], 0
    for o in n.operands:
        size = o.tensor_type.shape[dim]
        start = [0] * len(shape)
        limit = list(shape)
        start[dim], limit[dim] = at, at + size
        outs.append(lax.slice(ct, start, limit))
        at += size
    return outs


# ------------------------------------------------------------------ windowed


def _dilate(n: int, d: int) -> int:
    return (n - 1) * d + 1 if n else 0


def _vjp_lhs_padding(in_sizes: Sequence[int], window: Sequence[int], strides: Sequence[int],
                     out_sizes: Sequence[int], low: Sequence[int], lhs_dilation: Sequence[int],
                     rhs_dilation: Sequence[int]) -> tuple[list[int], list[int]]:
    """The padding of the (stride-dilated) cotangent whose full convolution with the
    flipped window gives back the operand's positions."""
    lo_out, hi_out = [], []
    for n, k, s, o, lo, ld, rd in zip(in_sizes, window, strides, out_sizes, low, lhs_dilation, rhs_dilation):
        before = _dilate(k, rd) - lo - 1
        lo_out.append(before)
        hi_out.append(_dilate(n, ld) + _dilate(k, rd) - 1 - _dilate(o, s) - before)
    return lo_out, hi_out


def _axis_out_of(src: int, size: int, x: Value) -> Value:
    """Splits dim ``src`` into (size, rest)."""
    shape = list(x.shape)
    shape[src:src + 1] = [size, shape[src] // size]
    return lax.reshape(x, shape)


def _axis_into(src: int, dst: int, x: Value) -> Value:
    """Merges dim ``src`` into dim ``dst`` (numbered without src) as its major part."""
    perm = [i for i in range(len(x.shape)) if i != src]
    perm.insert(dst, src)
    shape = [d for i, d in enumerate(x.shape) if i != src]
    shape[dst] *= x.shape[src]
    return lax.reshape(lax.transpose(x, perm), shape)


def _conv(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    """The transposes of a convolution are convolutions (as in jax and XLA): the input's
    gradient convolves the cotangent with the flipped kernel, the kernel's gradient
    convolves the input with the cotangent; groups move between features and batch."""
    lhs, rhs = xs
    a = n.attr
    lt, rt = n.operands[0].tensor_type, n.operands[1].tensor_type
    lb, lf, ls = a["input_batch_dimension"], a["input_feature_dimension"], a["input_spatial_dimensions"]
    ko, ki = a["kernel_output_feature_dimension"], a["kernel_input_feature_dimension"]
    ks = a["kernel_spatial_dimensions"]
    ob, of, os_ = a["output_batch_dimension"], a["output_feature_dimension"], a["output_spatial_dimensions"]
    g, b = a["feature_group_count"], a["batch_group_count"]
    strides, low = a["window_strides"], a["padding_low"]
    ld, rd = a["lhs_dilation"], a["rhs_dilation"]
    in_sp = [lt.shape[d] for d in ls]
    k_sp = [rt.shape[d] for d in ks]
    out_sp = [n.tensor_type.shape[d] for d in os_]
    if 0 in n.tensor_type.shape:
        return [full(0, n.operands[0]), full(0, n.operands[1])]

    # d lhs
    kern, groups = rhs, g
    if g > 1 or b > 1:
        kern = _axis_into(ko, ki, _axis_out_of(ko, max(g, b), rhs))
        groups = max(g, b)
    plo, phi = _vjp_lhs_padding(in_sp, k_sp, strides, out_sp, low, ld, rd)
    glhs = lax.convolution(
        ct, lax.reverse(kern, ks), input_batch_dimension=ob, input_feature_dimension=of,
        input_spatial_dimensions=os_, kernel_output_feature_dimension=ki, kernel_input_feature_dimension=ko,
        kernel_spatial_dimensions=ks, output_batch_dimension=lb, output_feature_dimension=lf,
        output_spatial_dimensions=ls, window_strides=ld, padding_low=plo, padding_high=phi, lhs_dilation=strides,
        rhs_dilation=rd, feature_group_count=groups, batch_group_count=1)
    if b > 1:
        glhs = _axis_into(lf, lb, _axis_out_of(lf, b, glhs))

    # d rhs
    rlo = list(low)
    rhi = [_dilate(o, s) - _dilate(n_, d) + _dilate(k, r) - lo - 1
           for o, s, n_, d, k, r, lo in zip(out_sp, strides, in_sp, ld, k_sp, rd, low)]
    grhs = lax.convolution(
        lhs, ct, input_batch_dimension=lf, input_feature_dimension=lb, input_spatial_dimensions=ls,
        kernel_output_feature_dimension=of, kernel_input_feature_dimension=ob, kernel_spatial_dimensions=os_,
        output_batch_dimension=ki, output_feature_dimension=ko, output_spatial_dimensions=ks, window_strides=rd,
        padding_low=rlo, padding_high=rhi, lhs_dilation=ld, rhs_dilation=strides,
        feature_group_count=b if b > 1 else 1, batch_group_count=g if g > 1 else 1)
    return [glhs, grhs]


def _pad_any(x: Value, value: Value, low: Sequence[int], high: Sequence[int], interior: Sequence[int]) -> Value:
    """pad that also crops: negative low/high remove elements, as StableHLO's pad does."""
    padded = lax.pad(x, value, [max(v, 0) for v in low], [max(v, 0) for v in high], interior)
    shape = padded.shape
    return lax.slice(padded, [max(-v, 0) for v in low], [s - max(-v, 0) for s, v in zip(shape, high)])


def _reduce_window(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    """sum: the cotangent, stride-dilated and padded, summed over the window again (the
    transpose of a window sum). max/min: each output's cotangent goes to the first element
    of its window (in row-major window order) equal to the output, as XLA's
    select-and-scatter does. prod: ct * out / x (undefined where x == 0, as reduce's)."""
    x, a = xs[0], n.attr
    xt = n.operands[0].tensor_type
    kind, win, st = a["kind"], a["window_dimensions"], a["window_strides"]
    bd, wd, low, high = a["base_dilations"], a["window_dilations"], a["padding_low"], a["padding_high"]
    zero = full(0, n.operands[0])
    if not xt.dtype.is_float or kind in ("and", "or"):
        return [None]
    if 0 in n.tensor_type.shape:
        return [zero]
    zero_s = np.asarray(0, xt.dtype.np)
    if kind == "sum":
        plo, phi = _vjp_lhs_padding(xt.shape, win, st, n.tensor_type.shape, low, bd, wd)
        padded = _pad_any(ct, zero_s, plo, phi, [s - 1 for s in st])
        return [lax.reduce_window(padded, "sum", win, bd, [(0, 0)] * xt.rank, window_dilation=wd)]
    if kind == "prod":
        spread = _window_spread(n, lax.mul(ct, out))
        return [lax.div(spread, x)]
    # max / min: the padded, dilated operand as the reference sees it, then one pass per
    # window position that hands each output's cotangent to the first position matching it
    ident = np.asarray(REDUCE_KINDS[kind].identity(xt.dtype), xt.dtype.np)
    xp = _pad_any(x, ident, low, high, [d - 1 for d in bd])
    taken = None
    grad = None
    for pos in itertools.product(*(range(k) for k in win)):
        view = _window_view(xp, pos, wd, st, n.tensor_type.shape)
        hit = lax.compare(view, out, "eq")
        if taken is not None:
            hit = lax.and_(hit, lax.not_(taken))
        taken = hit if taken is None else lax.or_(taken, hit)
        part = _window_scatter(lax.select(hit, ct, full(0, n)), pos, wd, st, xp.shape)
        grad = part if grad is None else lax.add(grad, part)
    return [_unpad(grad, xt.shape, low, high, bd)]


def _window_view(xp: Value, pos: Sequence[int], wd: Sequence[int], st: Sequence[int], out_shape: Sequence[int]
                 ) -> Value:
    start = [p * r for p, r in zip(pos, wd)]
    return lax.slice(xp, start, [s0 + (o - 1) * s + 1 for s0, o, s in zip(start, out_shape, st)], st)


def _window_scatter(v: Value, pos: Sequence[int], wd: Sequence[int], st: Sequence[int], shape: Sequence[int]
                    ) -> Value:
    """The transpose of _window_view: v placed back at its window position in ``shape``."""
    start = [p * r for p, r in zip(pos, wd)]
    hi = [n - (s0 + (o - 1) * s + 1) for n, s0, o, s in zip(shape, start, v.shape, st)]
    return lax.pad(v, np.asarray(0, v.dtype), start, hi, [s - 1 for s in st])


def _window_spread(n: Node, v: Value) -> Value:
    """Each output's value added back onto every operand element of its window."""
    xt = n.operands[0].tensor_type
    a = n.attr
    shape = [((d - 1) * b + 1 if d else 0) + max(lo, 0) + max(hi, 0)
             for d, b, lo, hi in zip(xt.shape, a["base_dilations"], a["padding_low"], a["padding_high"])]
    cropped = [s - max(-lo, 0) - max(-hi, 0) for s, lo, hi in zip(shape, a["padding_low"], a["padding_high"])]
    total = None
    for pos in itertools.product(*(range(k) for k in a["window_dimensions"])):
        part = _window_scatter(v, pos, a["window_dilations"], a["window_strides"], cropped)
        total = part if total is None else lax.add(total, part)
    assert total is not None  # a window with no positions has an empty output, handled above
    return _unpad(total, xt.shape, a["padding_low"], a["padding_high"], a["base_dilations"])


def _unpad(g: Value, shape: Sequence[int], low: Sequence[int], high: Sequence[int], bd: Sequence[int]) -> Value:
    """The transpose of _pad_any(x, low, high, interior=bd-1): the operand's positions of g."""
    full_g = lax.pad(g, np.asarray(0, g.dtype), [max(-v, 0) for v in low], [max(-v, 0) for v in high],
                     [0] * len(shape))
    start = [max(v, 0) for v in low]
    return lax.slice(full_g, start, [s0 + (n - 1) * d + 1 if n else s0 for s0, n, d in zip(start, shape, bd)], bd)


def _sort(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    # The result is operand `index` permuted by perm (which only the keys decide, piecewise
    # constantly): its cotangent goes back to perm's positions, i.e. sorted by perm. No
    # gather or scatter needed: a second sort carries ct to where each element came from.
    a = n.attr
    shape, dim = n.tensor_type.shape, a["dimension"]
    pos = lax.iota(np.int64, shape, dim)
    perm = lax.sort_one([*xs[:a["num_keys"]], pos], dim, a["num_keys"], bool(a["descending"]), a["num_keys"])
    grads: list[Value | None] = [None] * len(xs)
    grads[a["index"]] = lax.sort_one([perm, ct], dim, 1, False, 1)
    return grads


# ------------------------------------------------------------------ indexing
# Gather and scatter as jax differentiates them: a gather's cotangent is a scatter-add of
# the output cotangent into zeros (at the clamped starts, as the gather read), a scatter's
# flows to the operand where no update replaced it and to each update through a gather.
# The index operands get no cotangent.


def _index_entries(idx: Value, node: Node, ivd: int) -> list[Value]:
    """The index vectors' entries, one value of the batch shape per entry."""
    shape = node.tensor_type.shape
    if ivd == len(shape):
        return [idx]
    batch = shape[:ivd] + shape[ivd + 1:]
    out = []
    for k in range(shape[ivd]):
        lo, hi = [0] * len(shape), list(shape)
        lo[ivd], hi[ivd] = k, k + 1
        out.append(lax.reshape(lax.slice(idx, lo, hi), batch))
    return out


def _clamped_indices(idx: Value, node: Node, ivd: int, his: Sequence[int]) -> Value:
    """The index vectors clamped entrywise to [0, his[k]] (where a gather's windows start)."""
    t = node.tensor_type
    dt = t.dtype.np
    if ivd == len(t.shape):
        lo, hi = np.asarray(0, dt), np.asarray(his[0], dt)
        return lax.min(lax.max(idx, lax.broadcast_in_dim(lo, t.shape, ())), lax.broadcast_in_dim(hi, t.shape, ()))
    lo_v = lax.broadcast_in_dim(np.zeros(len(his), dt), t.shape, (ivd,))
    hi_v = lax.broadcast_in_dim(np.asarray(his, dt), t.shape, (ivd,))
    return lax.min(lax.max(idx, lo_v), hi_v)


def _gather(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    operand, a = n.operands[0].tensor_type, n.attr
    sizes, index_map, ivd = a["slice_sizes"], a["start_index_map"], a["index_vector_dim"]
    idx = _clamped_indices(xs[1], n.operands[1], ivd, [operand.shape[d] - sizes[d] for d in index_map])
    zeros = full(0, n.operands[0])
    g = bind(Op.SCATTER, zeros, idx, ct, update_window_dims=a["offset_dims"],
             inserted_window_dims=a["collapsed_slice_dims"], scatter_dims_to_operand_dims=index_map,
             index_vector_dim=ivd, kind="add")
    return [g, None]


def _scatter_windows(n: Node) -> tuple[tuple[int, ...], list[int]]:
    """(the gather slice sizes that read each update window back, the scatter dims of the updates)."""
    operand, updates, a = n.operands[0].tensor_type, n.operands[2].tensor_type, n.attr
    sizes = [1] * operand.rank
    kept = [d for d in range(operand.rank) if d not in a["inserted_window_dims"]]
    for wd, od in zip(a["update_window_dims"], kept):
        sizes[od] = updates.shape[wd]
    scatter_dims = [d for d in range(updates.rank) if d not in a["update_window_dims"]]
    return tuple(sizes), scatter_dims


def _read_windows(n: Node, v: Value, idx: Value) -> Value:
    """``v`` (of the operand's shape) read back at each update's window: updates-shaped."""
    a = n.attr
    sizes, _ = _scatter_windows(n)
    return bind(Op.GATHER, v, idx, offset_dims=a["update_window_dims"], collapsed_slice_dims=a["inserted_window_dims"],
                start_index_map=a["scatter_dims_to_operand_dims"], index_vector_dim=a["index_vector_dim"],
                slice_sizes=sizes)


def _kept_windows(n: Node, idx: Value) -> Value:
    """bool, the updates' shape: the update's window was in bounds (scatter kept it)."""
    operand, updates, a = n.operands[0].tensor_type, n.operands[2].tensor_type, n.attr
    sizes, scatter_dims = _scatter_windows(n)
    it = n.operands[1]
    ok = None
    for k, d in enumerate(a["scatter_dims_to_operand_dims"]):
        s = _index_entries(idx, it, a["index_vector_dim"])[k]
        dt = it.dtype.np
        shape = tuple(s.shape)
        good = lax.and_(lax.compare(s, lax.broadcast_in_dim(np.asarray(0, dt), shape, ()), "ge"),
                        lax.compare(s, lax.broadcast_in_dim(np.asarray(operand.shape[d] - sizes[d], dt), shape, ()),
                                    "le"))
        ok = good if ok is None else lax.and_(ok, good)
    if ok is None:
        return lax.broadcast_in_dim(np.asarray(True), updates.shape, ())
    return lax.broadcast_in_dim(ok, updates.shape, tuple(scatter_dims))


def _scatter_to(n: Node, target: Value, idx: Value, values: Value, kind: str) -> Value:
    a = n.attr
    return bind(Op.SCATTER, target, idx, values, update_window_dims=a["update_window_dims"],
                inserted_window_dims=a["inserted_window_dims"],
                scatter_dims_to_operand_dims=a["scatter_dims_to_operand_dims"],
                index_vector_dim=a["index_vector_dim"], kind=kind)


def _winners(n: Node, idx: Value) -> Value:
    """bool, the updates' shape: this update element is the one a replace-scatter left at
    its position (the last in index order; False for a dropped window)."""
    ut = n.operands[2].tensor_type
    ids = lax.iota(np.int64, ut.shape, 0) if ut.rank else np.asarray(0, np.int64)
    for d in range(1, ut.rank):  # a row-major id per update element
        ids = lax.add(lax.mul(ids, lax.broadcast_in_dim(np.asarray(ut.shape[d], np.int64), ut.shape, ())),
                      lax.iota(np.int64, ut.shape, d))
    ot = n.operands[0].tensor_type
    blank = lax.broadcast_in_dim(np.asarray(-1, np.int64), ot.shape, ())
    last = _scatter_to(n, blank, idx, ids, "replace")
    return lax.and_(_kept_windows(n, idx), lax.compare(_read_windows(n, last, idx), ids, "eq"))


def _scatter(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    operand, idx, updates = xs
    kind = n.attr["kind"]
    kept = _kept_windows(n, idx)
    uz = full(0, n.operands[2])
    if kind == "add":
        return [ct, None, lax.select(kept, _read_windows(n, ct, idx), uz)]
    if kind == "replace":
        hit = _scatter_to(n, lax.broadcast_in_dim(np.asarray(False), n.tensor_type.shape, ()), idx,
                          lax.broadcast_in_dim(np.asarray(True), n.operands[2].tensor_type.shape, ()), "replace")
        return [lax.select(hit, full(0, n), ct), None, lax.select(_winners(n, idx), _read_windows(n, ct, idx), uz)]
    if kind == "mul":
        # d out / d operand: the product of the updates that reached each position; d out / d u:
        # operand x the other updates there, out / u where u != 0 (a zero update alone at its
        # position gets operand; jax requires unique indices for this gradient at all)
        prod = _scatter_to(n, full(1, n), idx, updates, "mul")
        nz = lax.compare(updates, uz, "ne")
        others = lax.select(nz, lax.div(_read_windows(n, prod, idx), lax.select(nz, updates, full(1, n.operands[2]))),
                            full(1, n.operands[2]))
        gu = lax.mul(_read_windows(n, lax.mul(ct, operand), idx), others)
        return [lax.mul(ct, prod), None, lax.select(kept, gu, uz)]
    # min / max: the cotangent goes to whichever of the operand and the updates gave the
    # result, split evenly between ties (as reduce's max/min rule does)
    took_x = lax.compare(operand, out, "eq")
    took_u = lax.and_(kept, lax.compare(updates, _read_windows(n, out, idx), "eq"))
    dt = n.tensor_type.dtype.np
    count = _scatter_to(n, lax.convert(took_x, dt), idx, lax.convert(took_u, dt), "add")
    share = lax.div(ct, lax.max(count, full(1, n)))
    return [lax.select(took_x, share, full(0, n)), None, lax.select(took_u, _read_windows(n, share, idx), uz)]


def _dynamic_slice(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    zeros = full(0, n.operands[0])
    return [bind(Op.DYNAMIC_UPDATE_SLICE, zeros, ct, *xs[1:]), *([None] * (len(xs) - 1))]


def _dynamic_update_slice(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list:
    ut = n.operands[1].tensor_type
    g_operand = bind(Op.DYNAMIC_UPDATE_SLICE, ct, full(0, n.operands[1]), *xs[2:])
    g_update = bind(Op.DYNAMIC_SLICE, ct, *xs[2:], slice_sizes=ut.shape)
    return [g_operand, g_update, *([None] * (len(xs) - 2))]


def _custom_call(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list[Value | None]:
    """A ``custom_jvp`` call (custom.py) or a linalg target (linalg_rules.py)."""
    if custom.is_custom(n):
        return custom.vjp_rule(n, xs, out, ct)
    return custom_call_vjp(n, xs, out, ct)


VJP: dict[Op, Rule] = {
    Op.NEG: lambda n, xs, out, ct: [lax.neg(ct)],
    Op.ABS: _abs,
    Op.EXP: lambda n, xs, out, ct: [lax.mul(ct, out)],
    Op.LOG: lambda n, xs, out, ct: [lax.div(ct, xs[0])],
    Op.SQRT: _sqrt,
    Op.RSQRT: _rsqrt,
    Op.TANH: _tanh,
    Op.LOGISTIC: _logistic,
    Op.SIN: lambda n, xs, out, ct: [lax.mul(ct, lax.cos(xs[0]))],
    Op.COS: lambda n, xs, out, ct: [lax.neg(lax.mul(ct, lax.sin(xs[0])))],
    Op.FLOOR: lambda n, xs, out, ct: [None],
    Op.CEIL: lambda n, xs, out, ct: [None],
    Op.SIGN: lambda n, xs, out, ct: [None],
    Op.ADD: lambda n, xs, out, ct: [ct, ct],
    Op.SUB: lambda n, xs, out, ct: [ct, lax.neg(ct)],
    Op.MUL: lambda n, xs, out, ct: [lax.mul(ct, xs[1]), lax.mul(ct, xs[0])],
    Op.DIV: _div,
    Op.REM: _rem,
    Op.POW: _pow,
    Op.MAX: _minmax("gt"),
    Op.MIN: _minmax("lt"),
    Op.SELECT: _select,
    Op.CONVERT: _convert,
    Op.REDUCE: _reduce,
    Op.DOT_GENERAL: _dot,
    Op.CONVOLUTION: _conv,
    Op.REDUCE_WINDOW: _reduce_window,
    Op.BROADCAST_IN_DIM: _broadcast,
    Op.RESHAPE: lambda n, xs, out, ct: [lax.reshape(ct, n.operands[0].tensor_type.shape)],
    Op.TRANSPOSE: _transpose,
    Op.SLICE: _slice,
    Op.PAD: _pad,
    Op.CONCATENATE: _concatenate,
    Op.REVERSE: lambda n, xs, out, ct: [lax.reverse(ct, n.attr["dimensions"])],
    # indexing
    Op.GATHER: _gather,
    Op.SCATTER: _scatter,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    # elementwise completeness
    Op.TAN: lambda n, xs, out, ct: [lax.mul(ct, lax.add(full(1, n), lax.mul(out, out)))],
    Op.EXPM1: lambda n, xs, out, ct: [lax.mul(ct, lax.add(out, full(1, n)))],
    Op.LOG1P: lambda n, xs, out, ct: [lax.div(ct, lax.add(xs[0], full(1, n)))],
    Op.CBRT: _cbrt,
    Op.ERF: _erf,
    Op.ATAN2: _atan2,
    Op.ROUND_NEAREST_EVEN: lambda n, xs, out, ct: [None],
    Op.NEXT_AFTER: lambda n, xs, out, ct: [ct, None],  # x moved by one ulp: derivative 1 in x
    # sorting
    Op.SORT: _sort,
    Op.CUSTOM_CALL: _custom_call,
    # collectives (collective_rules.py)
    **COLLECTIVE_VJP,
}

#: Primitives with a rule whose cotangent can be non-zero (checked by finite differences).
DIFFERENTIABLE: frozenset[Op] = frozenset(VJP) - {Op.FLOOR, Op.CEIL, Op.SIGN, Op.ROUND_NEAREST_EVEN}
# (the collectives are checked over several replicas by tests/core/test_collectives.py)
DIFFERENTIABLE -= frozenset(COLLECTIVE_VJP)
