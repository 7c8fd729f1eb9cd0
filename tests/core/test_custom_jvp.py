"""``axle.custom_jvp``: a user-given JVP rule, honoured by grad, vjp, jvp, linearize, vmap,
the Jacobians and their nestings, inside and outside jit; clear errors for bad rules.

Each rule here differs from the function's true derivative (a factor, or a different
expression), so a transformation that differentiated the primitives instead of using the
rule gives a visibly different number.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.errors import ArgumentError, DTypeError, ShapeError, TracingError

X = np.array([-1.5, -0.25, 0.0, 0.5, 2.0])


@axle.custom_jvp
def scaled_sin(x: Any) -> Any:
    return anp.sin(x)


@scaled_sin.defjvp
def _scaled_sin_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
    (x,), (t,) = primals, tangents
    return scaled_sin(x), 3.0 * anp.cos(x) * t  # 3x the true derivative


def _loss(x: Any) -> Any:
    return anp.sum(scaled_sin(x) * 2.0)


def test_called_outside_transformations_it_is_the_function() -> None:
    np.testing.assert_allclose(np.asarray(scaled_sin(X)), np.sin(X))
    np.testing.assert_allclose(np.asarray(axle.jit(scaled_sin)(X)), np.sin(X))


@pytest.mark.parametrize("wrap", ["eager", "jit outside", "jit inside", "jit both"])
def test_grad_vjp_jvp_linearize_use_the_rule(wrap: str) -> None:
    inner = axle.jit(_loss) if wrap in ("jit inside", "jit both") else _loss
    g = axle.grad(inner)
    if wrap in ("jit outside", "jit both"):
        g = axle.jit(g)
    np.testing.assert_allclose(np.asarray(g(X)), 6.0 * np.cos(X), rtol=1e-12)
    out, pull = axle.vjp(scaled_sin, X)
    np.testing.assert_allclose(np.asarray(out), np.sin(X))
    (ct,) = pull(np.arange(5.0))
    np.testing.assert_allclose(np.asarray(ct), 3.0 * np.cos(X) * np.arange(5.0), rtol=1e-12)
    out, tan = axle.jvp(scaled_sin, (X,), (np.ones(5),))
    np.testing.assert_allclose(np.asarray(tan), 3.0 * np.cos(X), rtol=1e-12)
    _, f_jvp = axle.linearize(scaled_sin, X)
    np.testing.assert_allclose(np.asarray(f_jvp(2.0 * np.ones(5))), 6.0 * np.cos(X), rtol=1e-12)


def test_vmap_and_its_nestings_use_the_rule() -> None:
    want = 3.0 * np.cos(X)
    per_example = axle.vmap(axle.grad(lambda v: scaled_sin(v)))(X)
    np.testing.assert_allclose(np.asarray(per_example), want, rtol=1e-12)
    through_vmap = axle.grad(lambda v: anp.sum(axle.vmap(scaled_sin)(v)))(X)
    np.testing.assert_allclose(np.asarray(through_vmap), want, rtol=1e-12)
    jvp_of_vmap = axle.jvp(axle.vmap(scaled_sin), (X,), (np.ones(5),))[1]
    np.testing.assert_allclose(np.asarray(jvp_of_vmap), want, rtol=1e-12)
    vmap_of_jvp = axle.vmap(lambda v: axle.jvp(scaled_sin, (v,), (1.0,))[1])(X)
    np.testing.assert_allclose(np.asarray(vmap_of_jvp), want, rtol=1e-12)
    jitted = axle.jit(axle.vmap(axle.grad(lambda v: scaled_sin(v))))(X)
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(axle.jacrev(scaled_sin)(X)), np.diag(want), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(axle.jacfwd(scaled_sin)(X)), np.diag(want), rtol=1e-12)
    # a batched operand beside an unbatched one
    pairs = axle.vmap(axle.grad(lambda a, b: scaled_sin(a) * b), in_axes=(0, None))(X, 2.0)
    np.testing.assert_allclose(np.asarray(pairs), 2.0 * want, rtol=1e-12)


@pytest.mark.parametrize("construct", ["fori_loop", "scan", "cond", "switch", "nested"])
def test_the_rule_holds_inside_loops_and_branches(construct: str) -> None:
    from axle import lax

    def fn(v: Any) -> Any:
        if construct == "fori_loop":
            return anp.sum(lax.fori_loop(0, 1, lambda i, c: scaled_sin(c), v))
        if construct == "scan":
            _, ys = lax.scan(lambda c, xi: (c, scaled_sin(xi)), 0.0, v)
            return anp.sum(ys)
        if construct == "cond":
            return anp.sum(lax.cond(v[0] < 0, scaled_sin, lambda a: a * 0.0, v))
        if construct == "switch":
            return anp.sum(lax.switch(1, [lambda a: a * 0.0, scaled_sin], v))
        return anp.sum(lax.fori_loop(0, 1, lambda i, c: lax.cond(i < 5, scaled_sin, lambda a: a, c), v))

    want = 6.0 * np.cos(X) / 2.0  # fn sums scaled_sin once: its rule's 3 cos(x)
    for g in (axle.grad(fn), axle.jit(axle.grad(fn)), axle.jacfwd(fn)):
        np.testing.assert_allclose(np.asarray(g(X)), want, rtol=1e-12)
    per_example = axle.vmap(axle.grad(fn))(np.stack([X, X]))
    np.testing.assert_allclose(np.asarray(per_example), np.stack([want, want]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(axle.jit(fn)(X)), np.sum(np.sin(X)), rtol=1e-12)


def test_second_order_differentiates_the_rule() -> None:
    # d/dx of the rule's 3 cos(x): -3 sin(x)
    gg = axle.grad(lambda v: anp.sum(axle.grad(_loss)(v)))(X)
    np.testing.assert_allclose(np.asarray(gg), -6.0 * np.sin(X), rtol=1e-12)
    h = axle.hessian(_loss)(X)
    np.testing.assert_allclose(np.asarray(h), np.diag(-6.0 * np.sin(X)), rtol=1e-12, atol=1e-15)


def test_pytrees_several_outputs_python_numbers_and_static_leaves() -> None:
    @axle.custom_jvp
    def f(p: dict[str, Any], scale: float, mode: str) -> tuple[Any, Any]:
        assert mode == "sum"  # a non-array leaf reaches the function unchanged
        return p["a"] * p["b"] * scale, anp.sum(p["a"])

    @f.defjvp
    def f_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        (p, scale, mode), (tp, tscale, tmode) = primals, tangents
        assert tmode is None and mode == "sum"
        out = f(p, scale, mode)
        # deliberately not the product rule: 10 * ta * b for the first output, 7 * sum(ta) for the second
        return out, (10.0 * tp["a"] * p["b"] + 0.0 * tscale, 7.0 * anp.sum(tp["a"]) + 0.0 * anp.sum(tp["b"]))

    a, b = np.array([1.0, 2.0]), np.array([3.0, -4.0])

    def loss(p: dict[str, Any]) -> Any:
        y, s = f(p, 2.0, "sum")
        return anp.sum(y) + s

    g = axle.grad(loss)({"a": a, "b": b})
    np.testing.assert_allclose(np.asarray(g["a"]), 10.0 * b + 7.0)
    np.testing.assert_allclose(np.asarray(g["b"]), 0.0)
    gj = axle.jit(axle.grad(loss))({"a": a, "b": b})
    np.testing.assert_allclose(np.asarray(gj["a"]), 10.0 * b + 7.0)
    (y, s), (ty, ts) = axle.jvp(lambda p: f(p, 2.0, "sum"), ({"a": a, "b": b},),
                                ({"a": np.ones(2), "b": np.ones(2)},))
    np.testing.assert_allclose(np.asarray(y), a * b * 2.0)
    np.testing.assert_allclose(np.asarray(ty), 10.0 * b)
    np.testing.assert_allclose(np.asarray(ts), 14.0)
    # a Python number stays weakly typed: float32 in, float32 out
    a32 = a.astype(np.float32)
    out32 = axle.grad(lambda v: anp.sum(f({"a": v, "b": a32}, 2.0, "sum")[0]))(a32)
    assert np.asarray(out32).dtype == np.float32


def test_closure_over_values_and_outer_tracers() -> None:
    w_np = np.array([2.0, 3.0, 4.0, 5.0, 6.0])
    w_ax = anp.asarray(w_np)

    def make(w: Any) -> Any:
        @axle.custom_jvp
        def f(x: Any) -> Any:
            return x * w

        @f.defjvp
        def f_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
            return f(primals[0]), tangents[0] * w * 0.5
        return f

    for w in (w_np, w_ax):
        f = make(w)
        np.testing.assert_allclose(np.asarray(axle.grad(lambda v: anp.sum(f(v)))(X)), 0.5 * w_np)
        np.testing.assert_allclose(np.asarray(axle.jit(axle.grad(lambda v: anp.sum(f(v))))(X)), 0.5 * w_np)

    # closing over a tracer of an enclosing jit: the rule sees the traced value
    @axle.jit
    def outer(w: Any, x: Any) -> Any:
        f = make(w)
        return axle.grad(lambda v: anp.sum(f(v)))(x)
    np.testing.assert_allclose(np.asarray(outer(w_np, X)), 0.5 * w_np)


def test_closure_over_a_value_of_the_transformed_function_is_refused() -> None:
    def loss(x: Any) -> Any:
        y = x * 2.0

        @axle.custom_jvp
        def f(z: Any) -> Any:
            return z * y  # y is traced by grad itself: the replays cannot call f again

        f.defjvp(lambda p, t: (f(p[0]), t[0] * y))
        return anp.sum(f(x))

    with pytest.raises(TracingError, match=r"custom_jvp f: the function closes over a value computed inside") as e:
        axle.grad(loss)(X)
    assert "test_custom_jvp.py" in str(e.value)


def _bad(rule_out: Any) -> Any:
    @axle.custom_jvp
    def f(x: Any) -> Any:
        return x * 2.0

    f.defjvp(lambda p, t: rule_out(p[0], t[0]))
    return f


@pytest.mark.parametrize("transform", ["grad", "jvp", "vmap grad"])
def test_rules_with_the_wrong_shape_dtype_or_form_are_clear_errors(transform: str) -> None:
    def run(f: Any) -> Any:
        if transform == "grad":
            return axle.grad(lambda v: anp.sum(f(v)))(X)
        if transform == "jvp":
            return axle.jvp(f, (X,), (np.ones(5),))
        return axle.vmap(axle.grad(lambda v: anp.sum(f(v))))(np.stack([X, X + 1.0]))

    cases = [
        (lambda x, t: (x * 2.0, anp.sum(t)), ShapeError, r"custom_jvp f: the JVP rule's tangent output 0 is f64\[\]"),
        (lambda x, t: (x * 2.0, anp.astype(t, np.float32)), DTypeError,
         r"custom_jvp f: the JVP rule's tangent output 0 is f32"),
        (lambda x, t: (x[:2], t), ShapeError, r"the JVP rule's primal output 0"),
        (lambda x, t: x * 2.0, TracingError, r"must return a pair \(out, tangent_out\)"),
        (lambda x, t: (x * 2.0, (t, t)), ShapeError, r"tangent output has structure"),
    ]
    for rule, err, msg in cases:
        with pytest.raises(err, match=msg) as e:
            run(_bad(rule))
        assert "test_custom_jvp.py" in str(e.value)  # the user's line of the call


def test_a_function_without_a_rule_is_refused_when_called() -> None:
    @axle.custom_jvp
    def f(x: Any) -> Any:
        return x

    with pytest.raises(ArgumentError, match=r"custom_jvp f: no JVP rule defined"):
        f(X)


def test_defjvps_and_keyword_arguments() -> None:
    @axle.custom_jvp
    def f(x: Any, y: Any) -> Any:
        return x * y

    f.defjvps(lambda tx, out, x, y: 2.0 * tx * y, None)  # y: no derivative through the rule
    gx, gy = axle.grad(lambda a, b: anp.sum(f(a, y=b)), argnums=(0, 1))(X, X + 1.0)
    np.testing.assert_allclose(np.asarray(gx), 2.0 * (X + 1.0))
    np.testing.assert_allclose(np.asarray(gy), 0.0)
    # Python numbers as the arguments: the function runs on them, the result is an array
    g = axle.grad(f, argnums=(0, 1))(2.0, 3.0)
    assert [float(np.asarray(v)) for v in g] == [6.0, 0.0]


def test_rule_with_integer_operands() -> None:
    @axle.custom_jvp
    def f(x: Any, k: Any) -> Any:
        return x * anp.astype(k, x.dtype)

    @f.defjvp
    def f_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        (x, k), (tx, tk) = primals, tangents
        assert np.dtype(tk.dtype) == np.int32  # a zero tangent of the integer operand's dtype
        return f(x, k), tx * anp.astype(k, x.dtype) * 4.0

    k = np.arange(5, dtype=np.int32)
    np.testing.assert_allclose(np.asarray(axle.grad(lambda v: anp.sum(f(v, k)))(X)), 4.0 * k)
    np.testing.assert_allclose(np.asarray(axle.jvp(lambda v: f(v, k), (X,), (np.ones(5),))[1]), 4.0 * k)


# ------------------------------------------------------------------ custom_vjp


@axle.custom_vjp
def sin_twice_grad(x: Any, w: Any) -> Any:
    return anp.sin(x) * w


def _fwd(x: Any, w: Any) -> tuple[Any, Any]:
    return sin_twice_grad(x, w), (anp.cos(x), anp.sin(x), w)


def _bwd(res: Any, ct: Any) -> tuple[Any, Any]:
    cos, sin, w = res
    return 2.0 * cos * w * ct, sin * ct  # x: twice the true cotangent; w: the true one


sin_twice_grad.defvjp(_fwd, _bwd)


def test_custom_vjp_under_grad_vjp_jit_vmap_and_loops() -> None:
    from axle import lax
    w = np.linspace(1.0, 2.0, 5)

    def loss(x: Any, w: Any) -> Any:
        return anp.sum(sin_twice_grad(x, w))

    want_x, want_w = 2.0 * np.cos(X) * w, np.sin(X)
    for g in (axle.grad(loss, argnums=(0, 1)), axle.jit(axle.grad(loss, argnums=(0, 1))),
              axle.grad(axle.jit(loss), argnums=(0, 1))):
        gx, gw = g(X, w)
        np.testing.assert_allclose(np.asarray(gx), want_x, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(gw), want_w, rtol=1e-12)
    out, pull = axle.vjp(sin_twice_grad, X, w)
    np.testing.assert_allclose(np.asarray(out), np.sin(X) * w)
    np.testing.assert_allclose(np.asarray(pull(np.ones(5))[0]), want_x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(axle.jacrev(sin_twice_grad)(X, w)), np.diag(want_x), rtol=1e-12)
    # per example x, one shared w: w's cotangent is summed over the batch
    xs = np.stack([X, X + 1.0])
    gx, gw = axle.grad(lambda a, b: anp.sum(axle.vmap(sin_twice_grad, in_axes=(0, None))(a, b)),
                       argnums=(0, 1))(xs, w)
    np.testing.assert_allclose(np.asarray(gx), 2.0 * np.cos(xs) * w, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gw), np.sin(xs).sum(0), rtol=1e-12)
    per_example = axle.vmap(axle.grad(loss), in_axes=(0, None))(xs, w)
    np.testing.assert_allclose(np.asarray(per_example), 2.0 * np.cos(xs) * w, rtol=1e-12)
    in_scan = axle.grad(lambda a: anp.sum(lax.scan(lambda c, xi: (c, sin_twice_grad(xi, 1.0)), 0.0, a)[1]))(X)
    np.testing.assert_allclose(np.asarray(in_scan), 2.0 * np.cos(X), rtol=1e-12)


def test_custom_vjp_errors() -> None:
    with pytest.raises(TracingError, match=r"custom_vjp sin_twice_grad: forward-mode differentiation"):
        axle.jvp(lambda v: sin_twice_grad(v, 1.0), (X,), (np.ones(5),))

    def make(bwd: Any) -> Any:
        @axle.custom_vjp
        def f(x: Any) -> Any:
            return x * 2.0
        f.defvjp(lambda x: (f(x), None), bwd)
        return f

    cases = [
        (lambda r, ct: (anp.sum(ct),), ShapeError, r"custom_vjp f: bwd's cotangent for leaf 0 of the arguments is f64\[\]"),
        (lambda r, ct: (ct, ct), ShapeError, r"custom_vjp f: bwd must return a tuple with one cotangent per argument"),
        (lambda r, ct: (anp.astype(ct, np.float32),), DTypeError, r"bwd's cotangent for leaf 0 .* is f32"),
    ]
    for bwd, err, msg in cases:
        with pytest.raises(err, match=msg) as e:
            axle.grad(lambda v, f=make(bwd): anp.sum(f(v)))(X)
        assert "test_custom_jvp.py" in str(e.value)
    no_rule = axle.custom_vjp(lambda x: x)
    with pytest.raises(ArgumentError, match=r"custom_vjp <lambda>: no VJP rule defined"):
        no_rule(X)
    # bwd giving None: a zero cotangent
    np.testing.assert_allclose(np.asarray(axle.grad(lambda v: anp.sum(make(lambda r, ct: (None,))(v)))(X)), 0.0)


@axle.custom_vjp
def _clip_gradient(x: Any) -> Any:
    return x  # identity forward: its output is its argument, passed through


_clip_gradient.defvjp(lambda x: (x, None), lambda res, ct: (anp.clip(ct, -1.0, 1.0),))


@axle.custom_jvp
def _straight_through(x: Any) -> Any:
    return x


_straight_through.defjvp(lambda p, t: (_straight_through(p[0]), 10.0 * t[0]))


@pytest.mark.parametrize("construct", ["fori_loop", "scan", "cond"])
def test_identity_forward_rule_honoured_in_loops_and_branches(construct: str) -> None:
    """A custom function whose forward returns its argument unchanged (jax's clip_gradient)
    keeps its rule inside a loop body or branch: the rule, not the identity's derivative.
    (Its output had no node of its own to remember the call by: the rule was ignored.)"""
    from axle import lax

    def body(f: Any, c: Any) -> Any:
        return f(c) * 3.0

    def run(f: Any, x: Any) -> Any:
        if construct == "fori_loop":
            return lax.fori_loop(0, 2, lambda i, c: body(f, c), x)
        if construct == "scan":
            return lax.scan(lambda c, _: (body(f, c), None), x, None, length=2)[0]
        return lax.cond(x > 0, lambda c: body(f, body(f, c)), lambda c: c, x)

    # twice (3 * clip): the cotangent 3 is clipped to 1 at each call, as jax gives
    assert float(axle.grad(lambda x: run(_clip_gradient, x))(1.0)) == 1.0
    assert float(axle.jit(axle.grad(lambda x: run(_clip_gradient, x)))(1.0)) == 1.0
    # twice (3 * rule's 10)
    assert float(axle.grad(lambda x: run(_straight_through, x))(1.0)) == 900.0
    np.testing.assert_allclose(np.asarray(run(_clip_gradient, anp.asarray(2.0))), 18.0)


def test_python_number_argument_replayed_as_array() -> None:
    """grad at a Python number: the function is replayed with a (weakly typed) array, as
    it was traced, not a bare float (nn.relu reads x.dtype: a raw AttributeError before)."""
    assert float(axle.grad(axle.nn.relu)(0.0)) == 0.0
    assert float(axle.grad(axle.nn.relu)(2.0)) == 1.0
    got = axle.grad(lambda x: _straight_through(1.0) * x)(anp.float32(2.0))
    assert got.dtype == np.float32  # the number stays weakly typed


def test_loop_body_call_closing_over_an_enclosing_value_stays_primitives() -> None:
    """A call in a loop body that closes over a value of an enclosing trace (read for the
    first time by the call, so the body captures it then) stays its primitives, as
    docs/autodiff.md says; it raised a TracingError claiming a value escaped its jit."""
    from axle import lax

    def h(x: Any, y: Any) -> Any:
        @axle.custom_jvp
        def f(c: Any) -> Any:
            return c * y

        f.defjvp(lambda p, t: (f(p[0]), t[0] * 10.0))
        return lax.fori_loop(0, 1, lambda i, c: f(c), x)

    assert float(axle.grad(h)(1.0, 2.0)) == 2.0
    assert float(axle.jit(axle.grad(h, argnums=1))(1.0, 2.0)) == 1.0


def test_custom_vjp_bwd_gets_every_output_cotangent_at_once() -> None:
    """A custom_vjp with two outputs: bwd runs once with both cotangents, as jax calls it,
    also under jit, vmap and in a loop. bwd here is not linear in them (it clips their
    sum): one call per output summed clip(0.8) + clip(0.8) = 1.6 where jax gives 1.0."""
    from axle import lax

    calls = []

    @axle.custom_vjp
    def two(x: Any) -> Any:
        return x, x * 1.0

    def bwd(res: Any, ct: Any) -> Any:
        calls.append(1)
        return (anp.clip(ct[0] + ct[1], -1.0, 1.0),)

    two.defvjp(lambda x: ((x, x * 1.0), None), bwd)

    def g(x: Any) -> Any:
        a, b = two(x)
        return a * 0.8 + b * 0.8

    assert float(axle.grad(g)(1.0)) == 1.0
    assert len(calls) == 1
    assert float(axle.jit(axle.grad(g))(1.0)) == 1.0
    np.testing.assert_array_equal(np.asarray(axle.vmap(axle.grad(g))(anp.ones(2))), [1.0, 1.0])
    np.testing.assert_array_equal(np.asarray(axle.grad(lambda x: anp.sum(axle.vmap(g)(x)))(anp.ones(2))), [1.0, 1.0])
    assert float(axle.grad(lambda x: lax.fori_loop(0, 1, lambda i, c: g(c), x))(1.0)) == 1.0
    # two calls are two bwds (each sees its own output's cotangent only), as in jax
    assert float(axle.grad(lambda x: two(x)[0] * 0.8 + two(x)[1] * 0.8)(1.0)) == pytest.approx(1.6)
    # only the second output read: the first's cotangent is zero
    assert float(axle.grad(lambda x: two(x)[1] * 3.0)(1.0)) == 1.0


def test_constant_output_rule_honoured_in_loops() -> None:
    """A function whose output is a constant keeps its (nonzero) rule in a loop body: the
    body's replay reads a constant node as it is, so the call is remembered on a node of
    its own (the rule was skipped: 0 where the rule says 5)."""
    from axle import lax

    @axle.custom_jvp
    def one(x: Any) -> Any:
        return anp.asarray(1.0)

    one.defjvp(lambda p, t: (one(p[0]), 5.0 * t[0]))
    assert float(axle.grad(one)(2.0)) == 5.0
    assert float(axle.grad(lambda x: lax.fori_loop(0, 1, lambda i, v: one(v), x))(2.0)) == 5.0
    assert float(lax.fori_loop(0, 1, lambda i, v: one(v), 2.0)) == 1.0


def test_rules_of_the_wrong_arity_are_axle_errors() -> None:
    """A rule that cannot take its arguments is an ArgumentError naming the function and
    the rule's form (it was Python's TypeError from inside grad): at defjvp/defvjp for jvp
    and bwd, at the first differentiated call for fwd and defjvps' rules (their arity
    follows the call's arguments)."""
    f = axle.custom_jvp(lambda x: x * 2.0)
    with pytest.raises(ArgumentError, match=r"custom_jvp <lambda>: the JVP rule jvp\(primals, tangents\) must take 2"):
        f.defjvp(lambda primals: primals)

    g = axle.custom_vjp(lambda x, y: x * y)
    with pytest.raises(ArgumentError, match=r"bwd\(residuals, ct\) must take 2 positional arguments"):
        g.defvjp(lambda x, y: (x * y, (x, y)), lambda res: res)
    g.defvjp(lambda x: (x, x), lambda res, ct: (ct, ct))  # fwd takes one argument, the function two
    with pytest.raises(ArgumentError, match=r"custom_vjp <lambda>: fwd, called with the function's arguments, "
                                            r"must take 2 positional arguments"):
        axle.grad(lambda x: g(x, 3.0))(2.0)

    h = axle.custom_jvp(lambda x: x * 2.0)
    h.defjvps(lambda t, out: t * 2.0)  # rule(t, out, *args): three for one argument
    with pytest.raises(ArgumentError, match=r"defjvps rule 0, rule\(t, out, \*args\), must take 3"):
        axle.grad(h)(1.0)
    # *args and defaults bind: no error
    k = axle.custom_jvp(lambda x: x * 2.0)
    k.defjvps(lambda t, *rest: t * 2.0)
    assert float(axle.grad(k)(1.0)) == 2.0
