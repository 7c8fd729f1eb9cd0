"""Forward mode (jvp, jacfwd, hessian) and vmap through loops and conditionals: against
central finite differences in float64 and against a Python loop over the batch, on the
interpreter and on cpu:0, eagerly and under jit."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.frontend.control_flow import call_computation
from axle.ir.module import Module
from axle.ir.ops import Op
from axle.testing.cases import control_cases

DEVICES = ["interpreter:0", "cpu:0"]
RNG = np.random.default_rng(16)
XS = RNG.standard_normal((5, 3))


def finite_difference(f: Callable[[np.ndarray], float], x: np.ndarray, v: np.ndarray, eps: float = 1e-6) -> Any:
    """The directional derivative of f at x along v, by central differences (float64)."""
    return (np.asarray(f(x + eps * v)) - np.asarray(f(x - eps * v))) / (2 * eps)


def value(x: Any) -> np.ndarray:
    return np.asarray(x)


# --------------------------------------------------------------------- the functions


def fori(x: Any) -> Any:
    return lax.fori_loop(0, 4, lambda i, c: c * anp.sin(c) + 0.1 * i, x)


def scan_rnn(x: Any) -> Any:
    def step(c: Any, r: Any) -> tuple[Any, Any]:
        h = anp.tanh(c * r + 0.5 * c)
        return h, (h * h).sum()
    c, ys = lax.scan(step, x, XS)
    return c.sum() + ys.sum()


def scan_reversed_unrolled(x: Any) -> Any:
    c, ys = lax.scan(lambda c, r: (c * anp.cos(r) + r, c * 2.0), x, XS, reverse=True, unroll=2)
    return c + ys.sum(0)


def data_dependent_while(x: Any) -> Any:
    """The trip count depends on x: forward mode only (reverse refuses, as jax)."""
    def body(s: Any) -> Any:
        a, b = s
        return a * 1.5 + b * b, b * 0.9
    a, b = lax.while_loop(lambda s: s[0].sum() < 20.0, body, (x, x * 0.5))
    return a * b


def cond_and_switch(x: Any) -> Any:
    y = lax.cond(x.sum() > 0, lambda a: a * a, lambda a: anp.exp(-a), x)
    return lax.switch((x[0] > 0).astype(np.int32) + 1, [lambda a: a, lambda a: a * 3.0, lambda a: anp.sin(a)], y)


def cond_in_scan(x: Any) -> Any:
    def step(c: Any, r: Any) -> tuple[Any, Any]:
        return lax.cond(r.sum() > 0, lambda a: a * r, lambda a: a + anp.tanh(r), c), c.sum()
    c, ys = lax.scan(step, x, XS)
    return c * ys.sum()


def nested_loops(x: Any) -> Any:
    return lax.fori_loop(0, 2, lambda i, c: lax.fori_loop(0, 3, lambda j, d: d * anp.cos(d) + c, c), x)


FUNCTIONS = [fori, scan_rnn, scan_reversed_unrolled, data_dependent_while, cond_and_switch, cond_in_scan,
             nested_loops]


def numpy_reference(fn: Callable[[Any], Any]) -> Callable[[np.ndarray], np.ndarray]:
    """The function run op by op on the interpreter (the finite differences' evaluator)."""
    def f(x: np.ndarray) -> np.ndarray:
        with axle.device("interpreter:0"):
            return value(fn(x))
    return f


# ---------------------------------------------------------------------- forward mode


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_jvp_through_control_flow_matches_finite_differences(fn: Callable[[Any], Any], device: str) -> None:
    x = np.array([0.7, -0.4, 1.1])
    v = RNG.standard_normal(3)
    want = finite_difference(numpy_reference(fn), x, v)
    with axle.device(device):
        out, t = axle.jvp(fn, (x,), (v,))
        out_jit, t_jit = axle.jit(lambda x, v: axle.jvp(fn, (x,), (v,)))(x, v)
    np.testing.assert_allclose(value(out), numpy_reference(fn)(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(value(t), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(value(t_jit), value(t), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(value(out_jit), value(out), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_jacfwd_through_control_flow_matches_finite_differences(fn: Callable[[Any], Any], device: str) -> None:
    x = np.array([0.3, 0.9, -0.6])
    ref = numpy_reference(fn)
    want = np.stack([finite_difference(ref, x, e) for e in np.eye(3)], axis=-1)
    with axle.device(device):
        got = value(axle.jit(axle.jacfwd(fn))(x))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def sum_of(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda x: fn(x).sum()


@pytest.mark.parametrize("fn", [fori, scan_rnn, cond_in_scan, nested_loops], ids=lambda f: f.__name__)
def test_hessian_through_loops_matches_finite_differences_of_the_gradient(fn: Callable[[Any], Any]) -> None:
    """hessian = jacfwd(jacrev): forward mode through the backward loops of reverse mode."""
    x = np.array([0.3, 0.9, -0.6])
    grad = axle.jit(axle.grad(sum_of(fn)))
    want = np.stack([finite_difference(lambda y: value(grad(y)), x, e, eps=1e-5) for e in np.eye(3)], axis=-1)
    got = value(axle.jit(axle.hessian(sum_of(fn)))(x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, got.T, rtol=1e-10, atol=1e-12)


def test_jvp_of_a_loop_whose_carry_gets_a_tangent_only_inside():
    """b starts without a tangent; the body makes it read a, which has one: the tangent
    carry of b must ride along from the first trip (a fixed point over the body)."""
    def f(a: Any) -> Any:
        return lax.fori_loop(0, 3, lambda i, s: (s[0] * 2.0, s[1] + s[0] * s[0]), (a, np.float64(1.0)))[1]

    _, t = axle.jvp(f, (np.float64(1.5),), (np.float64(1.0),))
    # b = 1 + a^2 + 4a^2 + 16a^2: db/da = 42 a
    assert float(value(t)) == pytest.approx(42 * 1.5)


def test_jvp_through_a_conditional_result_that_reads_no_tangent_is_zero():
    out, t = axle.jvp(lambda x: lax.cond(x > 0, lambda a: np.float64(2.0), lambda a: np.float64(3.0), x),
                      (np.float64(1.0),), (np.float64(1.0),))
    assert (float(value(out)), float(value(t))) == (2.0, 0.0)


# ----------------------------------------------------------------------------- vmap


def per_example(fn: Callable[..., Any], *args: np.ndarray, axes: tuple[int | None, ...]) -> list[np.ndarray]:
    size = next(a.shape[ax] for a, ax in zip(args, axes) if ax is not None)
    outs = []
    for b in range(size):
        out = fn(*[a if ax is None else np.take(a, b, axis=ax) for a, ax in zip(args, axes)])
        outs.append([value(o) for o in (out if isinstance(out, tuple) else (out,))])
    return [np.stack([o[k] for o in outs]) for k in range(len(outs[0]))]


def check_vmap(fn: Callable[..., Any], *args: np.ndarray, axes: tuple[int | None, ...], device: str) -> None:
    with axle.device(device):
        want = per_example(fn, *args, axes=axes)
        for run in (axle.vmap(fn, in_axes=axes), axle.jit(axle.vmap(fn, in_axes=axes))):
            got = run(*args)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want, strict=True):
                np.testing.assert_allclose(value(g), w, rtol=1e-12, atol=1e-12)


BATCH = RNG.standard_normal((4, 3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_vmap_through_control_flow_matches_a_python_loop(fn: Callable[[Any], Any], device: str) -> None:
    """Batched predicates included: data_dependent_while runs a different number of trips per
    example, cond_and_switch and cond_in_scan pick a branch per example."""
    check_vmap(fn, BATCH, axes=(0,), device=device)
    check_vmap(fn, BATCH.T.copy(), axes=(1,), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_with_the_loop_bounds_and_the_branch_index_batched(device: str) -> None:
    def f(n: Any, k: Any, x: Any) -> Any:
        y = lax.fori_loop(0, n, lambda i, c: c * 0.5 + i, x)
        return lax.switch(k, [lambda a: a, lambda a: -a, lambda a: a * a], y)

    n = np.array([0, 1, 4, 7], np.int32)
    k = np.array([2, 0, 5, -1], np.int32)  # switch clamps out-of-range indices
    check_vmap(f, n, k, BATCH, axes=(0, 0, 0), device=device)
    check_vmap(f, n, k, BATCH[0], axes=(0, 0, None), device=device)
    check_vmap(f, np.int32(3), k, BATCH, axes=(None, 0, 0), device=device)
    check_vmap(f, n, np.int32(1), BATCH, axes=(0, None, 0), device=device)


@pytest.mark.parametrize("case", control_cases(), ids=lambda c: c.id)
def test_vmap_of_every_control_kit_case_matches_a_python_loop(case: Any) -> None:
    """The kit's loops and conditionals (0, 1, many and negative trip counts, nested loops,
    a conditional in a loop, out-of-range indices, size-0 carries), every input batched:
    trip counts and branch indices differ per example."""
    module: Module = case.module

    def fn(*args: Any) -> Any:
        return tuple(call_computation(module.entry, list(args)))

    batched = []
    for x, t in zip(case.inputs, module.entry.parameter_types):
        if t.dtype.is_int or t.dtype.np == np.bool_:
            batched.append(np.stack([x, np.asarray(np.logical_not(x) if t.dtype.np == np.bool_ else x + 1, x.dtype),
                                     np.asarray(x if t.dtype.np == np.bool_ else x * 2 - 1, x.dtype)]))
        else:
            batched.append(np.stack([x, x * 2, -x]).astype(x.dtype))
    check_vmap(fn, *batched, axes=(0,) * len(batched), device="interpreter:0")


def test_vmap_of_grad_through_a_scan_gives_per_example_gradients():
    """DP-SGD's per-example gradients: vmap(grad(loss)) with a scan in the loss, in one
    batched computation whose size does not grow with the batch."""
    def loss(w: Any, x: Any) -> Any:
        c, ys = lax.scan(lambda c, r: (anp.tanh(c * w + r), c.sum()), x, XS)
        return (c * c).sum() + ys.sum()

    w = np.array([0.5, -0.3, 0.8])
    xs = RNG.standard_normal((6, 3))
    per_ex = axle.jit(axle.vmap(axle.grad(loss), in_axes=(None, 0)))
    want = np.stack([value(axle.jit(axle.grad(loss))(w, x)) for x in xs])
    np.testing.assert_allclose(value(per_ex(w, xs)), want, rtol=1e-12, atol=1e-12)
    sizes = [len(axle.jit(axle.vmap(axle.grad(loss), in_axes=(None, 0))).lower(w, xs[:b]).optimize().entry.nodes)
             for b in (2, 6)]
    assert sizes[0] == sizes[1]


def test_vmap_of_a_loop_that_reads_no_batched_value_stays_one_loop():
    """An unbatched loop inside vmap runs once, not per example."""
    f = axle.vmap(lambda x: x + lax.fori_loop(0, 3, lambda i, c: c * 2.0, np.float64(1.0)))
    m = axle.jit(f).lower(BATCH).optimize()
    (loop,) = [n for n in m.entry.nodes if n.op is Op.WHILE]
    assert all(t.shape == () for t in loop.type.elements)
    np.testing.assert_allclose(value(f(BATCH)), BATCH + 8.0)


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_of_a_scan_over_batched_rows_with_an_unbatched_initial_carry(device: str) -> None:
    """The carry starts unbatched and becomes batched in the body (the fixed point)."""
    def f(rows: Any) -> Any:
        c, ys = lax.scan(lambda c, r: (c * 0.5 + r.sum(), c * r), np.float64(1.0), rows)
        return c, ys

    check_vmap(f, RNG.standard_normal((4, 5, 3)), axes=(0,), device=device)
    check_vmap(f, RNG.standard_normal((5, 4, 3)), axes=(1,), device=device)


@pytest.mark.parametrize("seed", range(0, 60, 6))
def test_vmap_of_random_control_programs_matches_a_python_loop(seed: int) -> None:
    """The fuzzer's programs with loops and conditionals (every primitive inside them), the
    float inputs scaled per example."""
    from axle.testing.random_modules import random_module

    found = 0
    for s in range(seed, seed + 6):
        module, inputs = random_module(s, 10, control=True)
        if not inputs or not any(n.traits.control for n in module.entry.nodes):
            continue  # (a program of constants alone has nothing to batch)
        found += 1

        def fn(*args: Any, module: Module = module) -> Any:
            return tuple(call_computation(module.entry, list(args)))

        batched = [np.stack([x] + [np.asarray(x if x.dtype.kind in "biu" else x * k, x.dtype) for k in (2, -1)])
                   for x in inputs]
        with axle.device("interpreter:0"):
            got = axle.vmap(fn)(*batched)
            want = per_example(fn, *batched, axes=(0,) * len(batched))
        for g, w in zip(got, want, strict=True):
            # (NumPy's assert_array_equal sees no NaN in ml_dtypes' bfloat16: compare as float32)
            wide = np.float32 if w.dtype.name == "bfloat16" else w.dtype
            np.testing.assert_array_equal(value(g).astype(wide), w.astype(wide))
    assert found
