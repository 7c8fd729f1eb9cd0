"""Control flow and recurrent ONNX ops: If -> lax.cond, Loop -> lax.while_loop / scan,
Scan -> lax.scan, LSTM / GRU / RNN -> lax.scan over the time steps."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from .. import lax, nn
from .. import numpy as anp
from .graph import is_host
from .ops_elementwise import const
from .table import NodeCtx, Unsupported, all_checks, choice, register


def _sub(ctx: NodeCtx, name: str) -> onnx.GraphProto:
    g = ctx.attrs.get(name)
    if g is None:
        raise Unsupported(f"missing sub-graph attribute {name!r}")
    return g


def _run(ctx: NodeCtx, g: onnx.GraphProto, args: Sequence[Any]) -> list[Any]:
    assert ctx.run_subgraph is not None
    return [anp.asarray(v) for v in ctx.run_subgraph(g, list(args))]


@register("If")
def _if(ctx: NodeCtx, pred: Any) -> tuple[Any, ...]:
    """lax.cond over the two branch graphs (a constant predicate picks one on the host)"""
    then_g, else_g = _sub(ctx, "then_branch"), _sub(ctx, "else_branch")
    if is_host(pred):
        assert ctx.run_subgraph is not None  # host constants stay host constants (shapes computed there)
        return tuple(ctx.run_subgraph(then_g if bool(np.asarray(pred).reshape(-1)[0]) else else_g, []))
    p = anp.reshape(pred, ())
    return tuple(lax.cond(p, lambda: tuple(_run(ctx, then_g, [])), lambda: tuple(_run(ctx, else_g, []))))


def _passes_cond_through(body: onnx.GraphProto) -> bool:
    """Whether the body's condition output is its condition input (or a constant true)."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_in == cond_out:
        return True
    return any(cond_out in n.output and n.op_type == "Identity" and n.input[0] == cond_in for n in body.node)


@register("Loop")
def _loop(ctx: NodeCtx, m: Any, cond: Any, *init: Any) -> tuple[Any, ...]:
    """lax.while_loop over (iteration, condition, carried values); with scan outputs (which
    need a static trip count): lax.scan over the constant trip count"""
    body = _sub(ctx, "body")
    n_carry = len(init)
    n_scan = len(body.output) - 1 - n_carry
    i64 = np.int64
    if n_scan:
        if m is None or not is_host(m) or not _passes_cond_through(body) or \
                (cond is not None and is_host(cond) and not bool(np.asarray(cond).reshape(-1)[0])):
            raise Unsupported("scan outputs need a constant trip count and a loop condition that stays true")
        if cond is not None and not is_host(cond):
            raise Unsupported("scan outputs need a constant initial condition")
        trips = int(np.asarray(m).reshape(-1)[0])
        c0 = np.asarray(True)

        def step(carry: tuple[Any, ...], i: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
            outs = _run(ctx, body, [anp.asarray(i), c0, *carry])
            return tuple(outs[1:1 + n_carry]), tuple(outs[1 + n_carry:])

        final, ys = lax.scan(step, tuple(anp.asarray(v) for v in init), anp.arange(trips, dtype=i64))
        return (*final, *ys)
    limit = anp.asarray(np.asarray(m).reshape(()) if is_host(m) else anp.reshape(m, ())) if m is not None else None
    c_init = anp.reshape(anp.asarray(cond), ()) if cond is not None else anp.asarray(np.asarray(True))

    def keep_going(state: tuple[Any, ...]) -> Any:
        i, c = state[0], state[1]
        return anp.logical_and(c, i < limit) if limit is not None else c

    def body_fn(state: tuple[Any, ...]) -> tuple[Any, ...]:
        i, c, *vs = state
        outs = _run(ctx, body, [anp.reshape(i, (1,)) if _iter_is_vector(body) else i, c, *vs])
        return (i + const(i, 1), anp.astype(anp.reshape(outs[0], ()), bool), *outs[1:1 + n_carry])

    state = lax.while_loop(keep_going, body_fn, (anp.asarray(np.int64(0)), c_init, *[anp.asarray(v) for v in init]))
    return tuple(state[2:])


def _iter_is_vector(body: onnx.GraphProto) -> bool:
    t = body.input[0].type.tensor_type
    return t.HasField("shape") and len(t.shape.dim) == 1


@register("Scan")
def _scan(ctx: NodeCtx, *inputs: Any) -> tuple[Any, ...]:
    """lax.scan over the scan inputs' axes (directions by reversing), states as the carry"""
    body = _sub(ctx, "body")
    m = ctx.attr("num_scan_inputs")
    n_state = len(inputs) - m
    states, xs = list(inputs[:n_state]), list(inputs[n_state:])
    in_axes = ctx.ints("scan_input_axes", [0] * m) or [0] * m
    in_dirs = ctx.ints("scan_input_directions", [0] * m) or [0] * m
    n_out = len(body.output) - n_state
    out_axes = ctx.ints("scan_output_axes", [0] * n_out) or [0] * n_out
    out_dirs = ctx.ints("scan_output_directions", [0] * n_out) or [0] * n_out
    seq = []
    for x, ax, d in zip(xs, in_axes, in_dirs):
        x = anp.moveaxis(anp.asarray(x), ax % len(x.shape), 0)
        seq.append(anp.flip(x, axis=0) if d else x)

    def step(carry: tuple[Any, ...], x: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        outs = _run(ctx, body, [*carry, *x])
        return tuple(outs[:n_state]), tuple(outs[n_state:])

    final, ys = lax.scan(step, tuple(anp.asarray(s) for s in states), tuple(seq))
    outs = []
    for y, ax, d in zip(ys, out_axes, out_dirs):
        y = anp.flip(y, axis=0) if d else y
        outs.append(anp.moveaxis(y, 0, ax % len(y.shape)))
    return (*final, *outs)


# -- recurrent layers

_ACT: dict[str, Callable[[Any], Any]] = {
    "Sigmoid": lambda x: lax.logistic(x), "Tanh": anp.tanh, "Relu": nn.relu,
}
_RNN_CHECK = all_checks(choice("direction", ("forward", "reverse", "bidirectional"), "forward"),
                        choice("layout", (0, 1), 0))


def _acts(ctx: NodeCtx, default: list[str], ndir: int) -> list[Callable[[Any], Any]]:
    names = ctx.attr("activations") or default * ndir
    names = [n.decode() if isinstance(n, bytes) else n for n in names]
    if ctx.attrs.get("activation_alpha") or ctx.attrs.get("activation_beta"):
        raise Unsupported("activation_alpha / activation_beta are not supported")
    for n in names:
        if n not in _ACT:
            raise Unsupported(f"activation {n!r} is not supported (supported: {sorted(_ACT)})")
    return [_ACT[n] for n in names]


def _rnn_common(ctx: NodeCtx, x: Any, seq_lens: Any) -> tuple[Any, int, list[bool]]:
    if seq_lens is not None:
        lens = np.asarray(seq_lens) if is_host(seq_lens) else None
        if lens is None or not (lens == (x.shape[1] if not ctx.attr("layout", 0) else x.shape[0])).all():
            raise Unsupported("sequence_lens shorter than the sequence are not supported")
    if ctx.attr("layout", 0):
        x = anp.transpose(x, (1, 0, 2))
    d = ctx.attr("direction", "forward")
    dirs = [False, True] if d == "bidirectional" else [d == "reverse"]
    return x, len(dirs), dirs


def _clip(ctx: NodeCtx, v: Any) -> Any:
    c = ctx.attr("clip")
    return v if c is None else anp.clip(v, -c, c)


def _rnn_outputs(ctx: NodeCtx, ys: list[Any], hs: list[Any], cs: list[Any] | None) -> tuple[Any, ...]:
    y = anp.stack(ys, axis=1)  # [seq, dirs, batch, hidden]
    h = anp.stack(hs, axis=0)
    if ctx.attr("layout", 0):
        y = anp.transpose(y, (2, 0, 1, 3))
        h = anp.transpose(h, (1, 0, 2))
    out = [y, h]
    if cs is not None:
        c = anp.stack(cs, axis=0)
        out.append(anp.transpose(c, (1, 0, 2)) if ctx.attr("layout", 0) else c)
    return tuple(out)


def _init_state(v: Any, d: int, batch: int, hidden: int, dt: np.dtype, layout: int) -> Any:
    if v is None:
        return anp.zeros((batch, hidden), dt)
    v = anp.transpose(v, (1, 0, 2)) if layout else v
    return v[d]


@register("LSTM", check=all_checks(_RNN_CHECK, choice("input_forget", (0,), 0)))
def _lstm(ctx: NodeCtx, x: Any, w: Any, r: Any, b: Any = None, seq_lens: Any = None, h0: Any = None,
          c0: Any = None, p: Any = None) -> tuple[Any, ...]:
    """lax.scan over time per direction: gates i, o, f, c (peepholes optional)"""
    x, ndir, dirs = _rnn_common(ctx, x, seq_lens)
    hid = ctx.attr("hidden_size") or r.shape[-1]
    acts = _acts(ctx, ["Sigmoid", "Tanh", "Tanh"], ndir)
    dt = np.dtype(x.dtype)
    lay = ctx.attr("layout", 0)
    ys, hs, cs = [], [], []
    for d, rev in enumerate(dirs):
        f_, g_, h_ = acts[3 * d:3 * d + 3]
        wd, rd = anp.transpose(w[d]), anp.transpose(r[d])
        bias = (b[d][:4 * hid] + b[d][4 * hid:]) if b is not None else anp.zeros((4 * hid,), dt)
        pi, po, pf = (p[d][:hid], p[d][hid:2 * hid], p[d][2 * hid:]) if p is not None else (None, None, None)
        xw = anp.matmul(x, wd) + bias  # [seq, batch, 4h]: the input projection of every step at once

        def step(carry: tuple[Any, Any], xt: Any, rd: Any = rd, pi: Any = pi, po: Any = po, pf: Any = pf,
                 f_: Any = f_, g_: Any = g_, h_: Any = h_) -> tuple[tuple[Any, Any], Any]:
            h, c = carry
            z = xt + anp.matmul(h, rd)
            i, o, f, cc = (z[:, k * hid:(k + 1) * hid] for k in range(4))
            i = f_(_clip(ctx, i + pi * c if pi is not None else i))
            f = f_(_clip(ctx, f + pf * c if pf is not None else f))
            c2 = f * c + i * g_(_clip(ctx, cc))
            o = f_(_clip(ctx, o + po * c2 if po is not None else o))
            h2 = o * h_(c2)
            return (h2, c2), h2

        init = (_init_state(h0, d, x.shape[1], hid, dt, lay), _init_state(c0, d, x.shape[1], hid, dt, lay))
        (hT, cT), y = lax.scan(step, init, xw, reverse=rev)
        ys.append(y)
        hs.append(hT)
        cs.append(cT)
    return _rnn_outputs(ctx, ys, hs, cs)


@register("GRU", check=_RNN_CHECK)
def _gru(ctx: NodeCtx, x: Any, w: Any, r: Any, b: Any = None, seq_lens: Any = None,
         h0: Any = None) -> tuple[Any, ...]:
    """lax.scan over time per direction: gates z, r, h (linear_before_reset)"""
    x, ndir, dirs = _rnn_common(ctx, x, seq_lens)
    hid = ctx.attr("hidden_size") or r.shape[-1]
    acts = _acts(ctx, ["Sigmoid", "Tanh"], ndir)
    dt = np.dtype(x.dtype)
    lbr = ctx.attr("linear_before_reset", 0)
    lay = ctx.attr("layout", 0)
    ys, hs = [], []
    for d, rev in enumerate(dirs):
        f_, g_ = acts[2 * d:2 * d + 2]
        wb = b[d][:3 * hid] if b is not None else anp.zeros((3 * hid,), dt)
        rb = b[d][3 * hid:] if b is not None else anp.zeros((3 * hid,), dt)
        xw = anp.matmul(x, anp.transpose(w[d])) + wb
        rd = r[d]

        def step(h: Any, xt: Any, rd: Any = rd, rb: Any = rb, f_: Any = f_, g_: Any = g_) -> tuple[Any, Any]:
            rz, rr, rh = rd[:hid], rd[hid:2 * hid], rd[2 * hid:]
            z = f_(_clip(ctx, xt[:, :hid] + anp.matmul(h, anp.transpose(rz)) + rb[:hid]))
            rg = f_(_clip(ctx, xt[:, hid:2 * hid] + anp.matmul(h, anp.transpose(rr)) + rb[hid:2 * hid]))
            if lbr:
                hh = g_(_clip(ctx, xt[:, 2 * hid:] + rg * (anp.matmul(h, anp.transpose(rh)) + rb[2 * hid:])))
            else:
                hh = g_(_clip(ctx, xt[:, 2 * hid:] + anp.matmul(rg * h, anp.transpose(rh)) + rb[2 * hid:]))
            h2 = (const(z, 1) - z) * hh + z * h
            return h2, h2

        hT, y = lax.scan(step, _init_state(h0, d, x.shape[1], hid, dt, lay), xw, reverse=rev)
        ys.append(y)
        hs.append(hT)
    return _rnn_outputs(ctx, ys, hs, None)


@register("RNN", check=_RNN_CHECK)
def _rnn(ctx: NodeCtx, x: Any, w: Any, r: Any, b: Any = None, seq_lens: Any = None,
         h0: Any = None) -> tuple[Any, ...]:
    """lax.scan over time per direction: h = f(x W' + h R' + Wb + Rb)"""
    x, ndir, dirs = _rnn_common(ctx, x, seq_lens)
    hid = ctx.attr("hidden_size") or r.shape[-1]
    acts = _acts(ctx, ["Tanh"], ndir)
    dt = np.dtype(x.dtype)
    lay = ctx.attr("layout", 0)
    ys, hs = [], []
    for d, rev in enumerate(dirs):
        bias = (b[d][:hid] + b[d][hid:]) if b is not None else anp.zeros((hid,), dt)
        xw = anp.matmul(x, anp.transpose(w[d])) + bias
        rd = anp.transpose(r[d])

        def step(h: Any, xt: Any, rd: Any = rd, f_: Any = acts[d]) -> tuple[Any, Any]:
            h2 = f_(_clip(ctx, xt + anp.matmul(h, rd)))
            return h2, h2

        hT, y = lax.scan(step, _init_state(h0, d, x.shape[1], hid, dt, lay), xw, reverse=rev)
        ys.append(y)
        hs.append(hT)
    return _rnn_outputs(ctx, ys, hs, None)


def _packed(x: Any, heads: int) -> Any:
    """(B, T, H * D) -> (T, B, H, D): time leading, for lax.scan."""
    b, t, hd = x.shape
    return anp.transpose(anp.reshape(x, (b, t, heads, hd // heads)), (1, 0, 2, 3))


@register("LinearAttention", since=27, check=choice("update_rule", ("linear", "gated", "delta", "gated_delta"),
                                                     "gated_delta"))
def _linear_attention(ctx: NodeCtx, q: Any, k: Any, v: Any, past: Any = None, decay: Any = None,
                      beta: Any = None) -> tuple[Any, Any]:
    """lax.scan over time of the recurrent state S (B, H_kv, d_k, d_v): the linear, gated,
    delta or gated-delta update, o_t = scale q_t' S_t (KV heads shared by groups of Q heads)"""
    hq, hkv = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    rule = ctx.attr("update_rule", "gated_delta")
    if rule in ("gated", "gated_delta") and decay is None or rule in ("delta", "gated_delta") and beta is None:
        raise Unsupported(f"update_rule {rule!r} needs its decay / beta inputs")
    b_, t_, _ = q.shape
    dt = np.dtype(q.dtype)
    if dt.itemsize < 4:  # half precision: the recurrence accumulates in float32, as the reference
        q, k, v = (anp.astype(a, np.float32) for a in (q, k, v))
        past, decay, beta = (None if a is None else anp.astype(a, np.float32) for a in (past, decay, beta))
    qs, ks, vs = _packed(q, hq), _packed(k, hkv), _packed(v, hkv)
    dk, dv = ks.shape[3], vs.shape[3]
    scale = ctx.attr("scale", 0.0) or 1 / np.sqrt(q.shape[2] // hq)
    # per step: the decay as (B, H_kv, d_k or 1, 1), beta as (B, H_kv or 1, 1, 1)
    gs = anp.reshape(anp.transpose(decay, (1, 0, 2)), (t_, b_, hkv, -1, 1)) if decay is not None else None
    bs = anp.reshape(anp.transpose(beta, (1, 0, 2)), (t_, b_, -1, 1, 1)) if beta is not None else None
    s0 = past if past is not None else anp.zeros((b_, hkv, dk, dv), np.dtype(q.dtype))
    xs = {"q": qs, "k": ks, "v": vs, **({"g": gs} if gs is not None else {}), **({"b": bs} if bs is not None else {})}

    def step(s: Any, x: dict[str, Any]) -> tuple[Any, Any]:
        kt, vt = x["k"], x["v"]
        if rule in ("gated", "gated_delta"):
            s = anp.exp(x["g"]) * s
        if rule in ("delta", "gated_delta"):
            read = anp.sum(s * anp.expand_dims(kt, -1), axis=2)  # S' k: (B, H_kv, d_v)
            vt = x["b"][..., 0] * (vt - read)
        s = s + anp.expand_dims(kt, -1) * anp.expand_dims(vt, -2)
        sq = anp.repeat(s, hq // hkv, axis=1) if hq != hkv else s
        o = anp.sum(anp.expand_dims(x["q"], -1) * sq, axis=2) * const(s, scale)  # (B, H_q, d_v)
        return s, o

    s_t, os_ = lax.scan(step, s0, xs)
    out = anp.reshape(anp.transpose(os_, (1, 0, 2, 3)), (b_, t_, hq * dv))
    return anp.astype(out, dt), anp.astype(s_t, dt)
