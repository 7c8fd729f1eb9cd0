"""JVP rules: forward-mode derivatives, one entry per differentiable primitive of the op table.

A rule gets the primitive's node (attributes, operand and result types), the operand
values, their tangents (None: a zero tangent) and the output value, and returns the
output's tangent. At least one operand tangent is non-None when a rule runs, and only
float-valued nodes carry tangents. Rules are written in primitives (``axle.lax``), like
the VJP rules of ``rules.py``, so the tangent computation is traced, jitted, batched by
``vmap`` or differentiated again like any other code.

Every op of the op table is in :data:`JVP` or in :data:`NO_JVP` with the reason
(``tests/core/test_transforms.py`` enumerates the op table, so an op added without
either fails there).
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax
from ..errors import TracingError
from ..frontend.bind import bind
from ..frontend.source import user_location
from ..ir.module import Node
from ..ir.ops import Op
from ..ir.reductions import REDUCE_KINDS
from . import custom
from .collective_rules import COLLECTIVE_JVP
from .control_jvp import CONTROL_JVP
from .linalg_rules import custom_call_jvp
from .rules import _kept_windows, _pad_any, _read_windows, _scatter_to, _trunc, _window_view, full

Value = Any
Tangent = Value | None
JvpRule = Callable[[Node, Sequence[Value], Sequence[Tangent], Value], Value]


def zeros_if_none(ts: Sequence[Tangent], n: Node) -> list[Value]:
    """The tangents with each None (zero) made an explicit zero of its operand's type."""
    return [t if t is not None else full(0, o) for t, o in zip(ts, n.operands)]


def _plus(a: Tangent, b: Tangent) -> Tangent:
    if a is None:
        return b
    return a if b is None else lax.add(a, b)


def _scaled(t: Tangent, factor: Callable[[], Value]) -> Tangent:
    """t * factor(), or None for a zero t (the factor is then never built)."""
    return None if t is None else lax.mul(t, factor())


def _linear(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    """A primitive linear in all its operands together (add, movement, concatenate, pad,
    reduce sum): the same primitive applied to the tangents."""
    return bind(n.op, *zeros_if_none(ts, n), **n.attr)


def _unary(derivative: Callable[[Node, Value, Value], Value]) -> JvpRule:
    """f(x) with f'(x) = derivative(node, x, out): tangent t * f'(x)."""
    def rule(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
        return lax.mul(ts[0], derivative(n, xs[0], out))

    return rule


def _sub(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    ta, tb = ts
    return _plus(ta, None if tb is None else lax.neg(tb))


def _mul(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    x, y = xs
    return _plus(_scaled(ts[0], lambda: y), _scaled(ts[1], lambda: x))


def _div(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    x, y = xs  # d(x/y) = dx/y - dy * out/y
    ta, tb = ts
    return _plus(None if ta is None else lax.div(ta, y), _scaled(tb, lambda: lax.neg(lax.div(out, y))))


def _rem(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    x, y = xs  # fmod(x, y) = x - y * trunc(x / y), trunc piecewise constant
    return _plus(ts[0], _scaled(ts[1], lambda: lax.neg(_trunc(lax.div(x, y), n))))


def _pow(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    x, y = xs

    def dy() -> Value:  # d/dy x^y = x^y log x, taken as 0 where x <= 0 (as the VJP rule)
        pos = lax.compare(x, full(0, n), "gt")
        return lax.select(pos, lax.mul(out, lax.log(lax.select(pos, x, full(1, n)))), full(0, n))

    return _plus(_scaled(ts[0], lambda: lax.mul(y, lax.pow(x, lax.sub(y, full(1, n))))), _scaled(ts[1], dy))


def _minmax(direction: str) -> JvpRule:
    def rule(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
        x, y = xs
        tx, ty = zeros_if_none(ts, n)
        # the transpose of the VJP rule: the chosen operand's tangent, the mean of both on a
        # tie, and zero where neither is chosen (a NaN operand), as the VJP gives no cotangent
        tie = lax.mul(lax.add(tx, ty), full(0.5, n))
        zero = full(0, n)
        return lax.select(lax.compare(x, y, direction), tx,
                          lax.select(lax.compare(y, x, direction), ty, lax.select(lax.compare(x, y, "eq"), tie, zero)))

    return rule


def _select(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    _, ta, tb = zeros_if_none(ts, n)
    return lax.select(xs[0], ta, tb)


def _convert(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    return lax.convert(ts[0], n.tensor_type.dtype)  # float -> float (int operands carry no tangent)


def _reduce(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    kind, axes = n.attr["kind"], n.attr["axes"]
    x, t = xs[0], ts[0]
    xt = n.operands[0].tensor_type
    kept = tuple(i for i in range(xt.rank) if i not in axes)
    if kind == "sum":
        return lax.reduce(t, "sum", axes)
    if kind == "prod":  # d prod = prod * sum(dx_i / x_i) (undefined where x_i == 0, as the VJP rule)
        return lax.mul(out, lax.reduce(lax.div(t, x), "sum", axes))
    # max/min: the mean of the tangents of the elements equal to the extreme (as the VJP rule)
    hit = lax.compare(x, lax.broadcast_in_dim(out, xt.shape, kept), "eq")
    cnt = lax.reduce(lax.convert(hit, xt.dtype), "sum", axes)
    picked = lax.select(hit, t, full(0, n.operands[0]))
    return lax.div(lax.reduce(picked, "sum", axes), cnt)


def _dot(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    """A bilinear primitive (dot_general, convolution): d(x*y) = dx*y + x*dy."""
    x, y = xs
    ta, tb = ts
    return _plus(None if ta is None else bind(n.op, ta, y, **n.attr),
                 None if tb is None else bind(n.op, x, tb, **n.attr))


def _reduce_window(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    """sum: linear; prod: out * window-sum(dx / x) (undefined where x == 0, as the VJP);
    max/min: the tangent of the first extreme of each window (the VJP's choice)."""
    kind, a = n.attr["kind"], n.attr
    x, t = xs[0], ts[0]
    if kind == "sum":
        return bind(n.op, t, **a)
    if kind == "prod":
        return lax.mul(out, bind(n.op, lax.div(t, x), **{**a, "kind": "sum"}))
    xt = n.operands[0].tensor_type
    ident = np.asarray(REDUCE_KINDS[kind].identity(xt.dtype), xt.dtype.np)
    holes = [d - 1 for d in a["base_dilations"]]
    xp = _pad_any(x, ident, a["padding_low"], a["padding_high"], holes)
    tp = _pad_any(t, np.asarray(0, xt.dtype.np), a["padding_low"], a["padding_high"], holes)
    taken, acc = None, None
    for pos in itertools.product(*(range(k) for k in a["window_dimensions"])):
        hit = lax.compare(_window_view(xp, pos, a["window_dilations"], a["window_strides"], n.tensor_type.shape),
                          out, "eq")
        if taken is not None:
            hit = lax.and_(hit, lax.not_(taken))
        taken = hit if taken is None else lax.or_(taken, hit)
        part = lax.select(hit, _window_view(tp, pos, a["window_dilations"], a["window_strides"],
                                            n.tensor_type.shape), full(0, n))
        acc = part if acc is None else lax.add(acc, part)
    return acc


def _sort(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    """The tangent of the sorted operand, reordered by the same stable sort (carried as one
    more operand of the same keys)."""
    t = ts[n.attr["index"]]
    if t is None:  # the output is a permutation of an operand without a tangent
        return full(0, n)
    return bind(n.op, *xs, t, **{**n.attr, "index": len(xs)})


def _custom_call(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    if custom.is_custom(n):  # an axle.custom_jvp function's call: the user's rule
        return custom.jvp_rule(n, xs, ts, out)
    t = custom_call_jvp(n, xs, ts, out)  # axle.numpy.linalg's targets have rules
    if t is not None:
        return t
    # An opaque function: a silent zero would be a wrong derivative.
    raise TracingError(f"jvp: custom-call target {n.attr['target']!r} has no derivative rule; its float "
                       f"output depends on a differentiated input (operands: "
                       f"{', '.join(str(o.type) for o in n.operands)})", where=n.loc or user_location())



# indexing: linear in the data operands (the index operands pass through as values);
# scatter's mul/min/max combine as their VJP rules do (rules.py)


def _indexed_linear(data: tuple[int, ...]) -> JvpRule:
    def rule(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
        args = [(ts[i] if ts[i] is not None else full(0, n.operands[i])) if i in data else x
                for i, x in enumerate(xs)]
        return bind(n.op, *args, **n.attr)

    return rule


def _scatter(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    kind = n.attr["kind"]
    if kind in ("add", "replace"):
        return _indexed_linear((0, 2))(n, xs, ts, out)
    operand, idx, updates = xs
    t_op, _, t_u = zeros_if_none(ts, n)
    kept = _kept_windows(n, idx)
    zero_u = full(0, n.operands[2])
    if kind == "mul":
        prod = _scatter_to(n, full(1, n), idx, updates, "mul")
        nz = lax.compare(updates, zero_u, "ne")
        one_u = full(1, n.operands[2])
        others = lax.select(nz, lax.div(_read_windows(n, prod, idx), lax.select(nz, updates, one_u)), one_u)
        d_prod = _scatter_to(n, full(0, n), idx, lax.select(kept, lax.mul(t_u, others), zero_u), "add")
        return lax.add(lax.mul(t_op, prod), lax.mul(operand, d_prod))
    took_x = lax.compare(operand, out, "eq")
    took_u = lax.and_(kept, lax.compare(updates, _read_windows(n, out, idx), "eq"))
    dt = n.tensor_type.dtype.np
    count = _scatter_to(n, lax.convert(took_x, dt), idx, lax.convert(took_u, dt), "add")
    total = lax.add(lax.select(took_x, t_op, full(0, n)), _scatter_to(n, full(0, n), idx,
                                                                     lax.select(took_u, t_u, zero_u), "add"))
    return lax.div(total, lax.max(count, full(1, n)))


def _atan2(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    y, x = xs  # d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)
    r2 = lax.add(lax.mul(x, x), lax.mul(y, y))
    return _plus(_scaled(ts[0], lambda: lax.div(x, r2)), _scaled(ts[1], lambda: lax.neg(lax.div(y, r2))))


def _next_after(n: Node, xs: Sequence[Value], ts: Sequence[Tangent], out: Value) -> Value:
    return ts[0]  # x moved by one ulp: derivative 1 in x, 0 in y (as the VJP rule)


JVP: dict[Op, JvpRule] = {
    Op.NEG: lambda n, xs, ts, out: lax.neg(ts[0]),
    Op.ABS: _unary(lambda n, x, out: lax.sign(x)),
    Op.EXP: _unary(lambda n, x, out: out),
    Op.LOG: lambda n, xs, ts, out: lax.div(ts[0], xs[0]),
    Op.SQRT: lambda n, xs, ts, out: lax.div(ts[0], lax.mul(full(2, n), out)),
    Op.RSQRT: _unary(lambda n, x, out: lax.div(lax.mul(full(-0.5, n), out), x)),
    Op.TANH: _unary(lambda n, x, out: lax.sub(full(1, n), lax.mul(out, out))),
    Op.LOGISTIC: _unary(lambda n, x, out: lax.mul(out, lax.sub(full(1, n), out))),
    Op.SIN: _unary(lambda n, x, out: lax.cos(x)),
    Op.COS: _unary(lambda n, x, out: lax.neg(lax.sin(x))),
    Op.ADD: lambda n, xs, ts, out: _plus(ts[0], ts[1]),
    Op.SUB: _sub,
    Op.MUL: _mul,
    Op.DIV: _div,
    Op.REM: _rem,
    Op.POW: _pow,
    Op.MAX: _minmax("gt"),
    Op.MIN: _minmax("lt"),
    Op.SELECT: _select,
    Op.CONVERT: _convert,
    Op.REDUCE: _reduce,
    Op.DOT_GENERAL: _dot,
    Op.CONVOLUTION: _dot,  # bilinear, like dot
    Op.REDUCE_WINDOW: _reduce_window,
    Op.SORT: _sort,


    Op.BROADCAST_IN_DIM: _linear,
    Op.RESHAPE: _linear,
    Op.TRANSPOSE: _linear,
    Op.SLICE: _linear,
    Op.PAD: _linear,
    Op.CONCATENATE: _linear,
    Op.REVERSE: _linear,
    Op.CUSTOM_CALL: _custom_call,
    # indexing
    Op.GATHER: _indexed_linear((0,)),
    Op.SCATTER: _scatter,
    Op.DYNAMIC_SLICE: _indexed_linear((0,)),
    Op.DYNAMIC_UPDATE_SLICE: _indexed_linear((0, 1)),
    # elementwise completeness
    Op.TAN: _unary(lambda n, x, out: lax.add(full(1, n), lax.mul(out, out))),
    Op.EXPM1: _unary(lambda n, x, out: lax.add(out, full(1, n))),
    Op.LOG1P: lambda n, xs, ts, out: lax.div(ts[0], lax.add(xs[0], full(1, n))),
    Op.CBRT: lambda n, xs, ts, out: lax.div(ts[0], lax.mul(full(3, n), lax.mul(out, out))),
    Op.ERF: _unary(lambda n, x, out: lax.mul(full(2 / np.sqrt(np.pi), n), lax.exp(lax.neg(lax.mul(x, x))))),
    Op.ATAN2: _atan2,
    Op.NEXT_AFTER: _next_after,
    # control flow: rules over their sub-computations (control_jvp.py); each returns one
    # tangent per result of the loop or conditional
    **CONTROL_JVP,
    # collectives (collective_rules.py)
    **COLLECTIVE_JVP,
}

#: The op table's ops without a JVP rule, and why their output tangent is zero (or never asked).
NO_JVP: dict[Op, str] = {
    Op.PARAMETER: "an input: its tangent is given by the caller",
    Op.CONSTANT: "no operands: a constant's tangent is zero",
    Op.IOTA: "no operands: its value is fixed by its attributes",
    Op.FLOOR: "piecewise constant: the derivative is zero wherever it exists",
    Op.CEIL: "piecewise constant: the derivative is zero wherever it exists",
    Op.SIGN: "piecewise constant: the derivative is zero wherever it exists",
    Op.NOT: "integer/bool output: not differentiable",
    Op.AND: "integer/bool output: not differentiable",
    Op.OR: "integer/bool output: not differentiable",
    Op.COMPARE: "bool output: not differentiable",
    Op.RNG_BIT_GENERATOR: "integer output (random bits): not differentiable",
    Op.TUPLE: "plumbing made by the core after tracing; never in a traced graph",
    Op.GET_TUPLE_ELEMENT: "plumbing made by the core after tracing; never in a traced graph",
    Op.FUSION: "made by the optimizer's fusion pass; never in a traced graph",
    # elementwise completeness and bit operations
    Op.ROUND_NEAREST_EVEN: "piecewise constant: the derivative is zero wherever it exists",
    Op.IS_FINITE: "bool output: not differentiable",
    Op.XOR: "integer/bool output: not differentiable",
    Op.SHIFT_LEFT: "integer output: not differentiable",
    Op.SHIFT_RIGHT_LOGICAL: "integer output: not differentiable",
    Op.SHIFT_RIGHT_ARITHMETIC: "integer output: not differentiable",
    Op.POPCNT: "integer output: not differentiable",
    Op.CLZ: "integer output: not differentiable",
    Op.BITCAST_CONVERT: "reinterprets bits (an integer operand or result): not differentiable",
    # collectives
    Op.REPLICA_ID: "no operands: an integer fixed by the replica running it",
}

#: Ops whose tangent may be non-zero (checked against finite differences; the control ops
#: in tests/core/test_control_transforms.py, through the constructs that stage them).
DIFFERENTIABLE: frozenset[Op] = frozenset(JVP) - set(CONTROL_JVP)  # custom-call: the linalg targets (linalg_rules.py)
# (the collectives are checked over several replicas by tests/core/test_collectives.py)
DIFFERENTIABLE -= frozenset(COLLECTIVE_JVP)

