"""VJP and JVP rules of the linalg custom-call targets (axle.numpy.linalg), keyed by target.

Each rule gets the custom-call node, its operands, its packed output and the packed
cotangent (see linalg.unpack) and returns one cotangent per operand, written with
axle.numpy (itself primitives and the same host targets), so the backward pass runs
eagerly or inside jit like the forward one. The formulas are the standard real-matrix
ones (Giles 2008, "Collected matrix derivative results"; Murray 2016 for Cholesky).
cholesky and eigh read one triangle of a symmetric input: their cotangents are
symmetrized, as JAX's are, i.e. they are gradients along symmetric perturbations."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import numpy as anp
from ..errors import TracingError
from ..frontend.source import user_location
from ..ir.module import Node
from ..numpy import linalg as la

Value = Any
TargetRule = Callable[[Node, Sequence[Value], list[Value], list[Value]], list[Value | None]]


def _t(x: Value) -> Value:
    return anp.matrix_transpose(x)


def _sym(x: Value) -> Value:
    return anp.multiply(anp.add(x, _t(x)), 0.5)


def _inv(n: Node, xs: Sequence[Value], outs: list[Value], cts: list[Value]) -> list[Value | None]:
    xi = outs[0]  # d(A^-1) = -A^-1 dA A^-1
    return [anp.negative(anp.matmul(anp.matmul(_t(xi), cts[0]), _t(xi)))]


def _solve(n: Node, xs: Sequence[Value], outs: list[Value], cts: list[Value]) -> list[Value | None]:
    a, _ = xs
    gb = la.solve(_t(a), cts[0])  # X = A^-1 B: B_bar = A^-T X_bar, A_bar = -B_bar X^T
    return [anp.negative(anp.matmul(gb, _t(outs[0]))), gb]


def _det(n: Node, xs: Sequence[Value], outs: list[Value], cts: list[Value]) -> list[Value | None]:
    scale = anp.multiply(cts[0], outs[0])  # d det = det tr(A^-1 dA)
    return [anp.multiply(scale[..., None, None], _t(la.inv(xs[0])))]


def _slogdet(n: Node, xs: Sequence[Value], outs: list[Value], cts: list[Value]) -> list[Value | None]:
    return [anp.multiply(cts[1][..., None, None], _t(la.inv(xs[0])))]  # the sign is piecewise constant


def _phi(x: Value) -> Value:
    """The lower triangle with the diagonal halved."""
    k = x.shape[-1]
    return anp.multiply(anp.tril(x), anp.asarray(np.tril(np.ones((k, k))) - 0.5 * np.eye(k), dtype=x.dtype))


def _cholesky(n: Node, xs: Sequence[Value], outs: list[Value], cts: list[Value]) -> list[Value | None]:
    lo = outs[0]  # A_bar = sym(L^-T phi(L^T L_bar) L^-1)
    li = la.inv(lo)
    s = anp.matmul(anp.matmul(_t(li), _phi(anp.matmul(_t(lo), cts[0]))), li)
    return [_sym(s)]


def _eigh(n: Node, xs: Sequence[Value], outs: list[Value], cts: list[Value]) -> list[Value | None]:
    w, v = outs  # A_bar = V (diag(w_bar) + F o (V^T V_bar)) V^T, F_ij = 1 / (w_j - w_i), 0 on the diagonal
    gw, gv = cts
    k = w.shape[-1]
    diff = anp.subtract(w[..., None, :], w[..., :, None])
    off = anp.asarray(~np.eye(k, dtype=bool))
    f = anp.where(off, anp.true_divide(1.0, anp.where(off, diff, 1.0)), 0.0)
    inner = anp.add(anp.multiply(f, anp.matmul(_t(v), gv)), anp.multiply(gw[..., None, :], anp.eye(k, dtype=w.dtype)))
    return [_sym(anp.matmul(anp.matmul(v, inner), _t(v)))]


#: target -> rule; qr, svd and svdvals have none yet (grad through them raises)
TARGET_VJP: dict[str, TargetRule] = {
    la.PREFIX + "inv": _inv,
    la.PREFIX + "solve": _solve,
    la.PREFIX + "det": _det,
    la.PREFIX + "slogdet": _slogdet,
    la.PREFIX + "cholesky": _cholesky,
    la.PREFIX + "eigh": _eigh,
}


def custom_call_vjp(n: Node, xs: Sequence[Value], out: Value, ct: Value) -> list[Value | None]:
    """The rule of Op.CUSTOM_CALL: the target's rule on the unpacked results. A target
    without one raises (qr, svd, a user's host function): the call reads a differentiated
    input and its float output reaches the loss, so a zero cotangent would be a silently
    wrong gradient (the forward-mode rule raises alike)."""
    rule = TARGET_VJP.get(n.attr["target"])
    if rule is None:
        raise TracingError(f"grad: custom-call target {n.attr['target']!r} has no VJP rule; its float output "
                           f"depends on a differentiated input (operands: "
                           f"{', '.join(str(o.type) for o in n.operands)})", where=n.loc or user_location())
    shapes = la.result_shapes(n.attr["target"][len(la.PREFIX):], [x.shape for x in xs], n.attr["config"])
    return rule(n, xs, la.unpack(out, shapes), la.unpack(ct, shapes))


# ------------------------------------------------------------------ forward mode

TargetJvp = Callable[[Node, Sequence[Value], list[Value], list[Value]], list[Value]]


def _inv_jvp(n: Node, xs: Sequence[Value], outs: list[Value], ts: list[Value]) -> list[Value]:
    xi = outs[0]
    return [anp.negative(anp.matmul(anp.matmul(xi, ts[0]), xi))]


def _solve_jvp(n: Node, xs: Sequence[Value], outs: list[Value], ts: list[Value]) -> list[Value]:
    return [la.solve(xs[0], anp.subtract(ts[1], anp.matmul(ts[0], outs[0])))]


def _logdet_tangent(a: Value, t: Value) -> Value:
    """tr(A^-1 dA), the tangent of log|det A|."""
    return anp.sum(anp.multiply(_t(la.inv(a)), t), axis=(-2, -1))


def _det_jvp(n: Node, xs: Sequence[Value], outs: list[Value], ts: list[Value]) -> list[Value]:
    return [anp.multiply(outs[0], _logdet_tangent(xs[0], ts[0]))]


def _slogdet_jvp(n: Node, xs: Sequence[Value], outs: list[Value], ts: list[Value]) -> list[Value]:
    return [anp.zeros_like(outs[0]), _logdet_tangent(xs[0], ts[0])]


def _cholesky_jvp(n: Node, xs: Sequence[Value], outs: list[Value], ts: list[Value]) -> list[Value]:
    lo = outs[0]  # dL = L phi(L^-1 sym(dA) L^-T)
    li = la.inv(lo)
    return [anp.matmul(lo, _phi(anp.matmul(anp.matmul(li, _sym(ts[0])), _t(li))))]


def _eigh_jvp(n: Node, xs: Sequence[Value], outs: list[Value], ts: list[Value]) -> list[Value]:
    w, v = outs  # M = V^T sym(dA) V: dw = diag(M), dV = V (F o M)
    k = w.shape[-1]
    m = anp.matmul(anp.matmul(_t(v), _sym(ts[0])), v)
    off = anp.asarray(~np.eye(k, dtype=bool))
    f = anp.where(off, anp.true_divide(1.0, anp.where(off, anp.subtract(w[..., None, :], w[..., :, None]), 1.0)), 0.0)
    return [anp.linalg.diagonal(m), anp.matmul(v, anp.multiply(f, m))]


TARGET_JVP: dict[str, TargetJvp] = {
    la.PREFIX + "inv": _inv_jvp,
    la.PREFIX + "solve": _solve_jvp,
    la.PREFIX + "det": _det_jvp,
    la.PREFIX + "slogdet": _slogdet_jvp,
    la.PREFIX + "cholesky": _cholesky_jvp,
    la.PREFIX + "eigh": _eigh_jvp,
}


def custom_call_jvp(n: Node, xs: Sequence[Value], ts: Sequence[Value | None], out: Value) -> Value | None:
    """The output tangent of a linalg target (packed like its output), or None when the
    target has no forward rule (the caller reports it)."""
    rule = TARGET_JVP.get(n.attr["target"])
    if rule is None:
        return None
    shapes = la.result_shapes(n.attr["target"][len(la.PREFIX):], [x.shape for x in xs], n.attr["config"])
    full_ts = [t if t is not None else anp.zeros_like(x) for t, x in zip(ts, xs)]
    parts = rule(n, xs, la.unpack(out, shapes), full_ts)
    if len(parts) == 1:
        return parts[0]
    return anp.concatenate([anp.reshape(p, (-1,)) for p in parts])
