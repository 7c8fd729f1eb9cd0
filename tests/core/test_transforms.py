"""Forward mode, vmap and tree utilities: the rule tables cover the op table; vmap of every
kit op case against a Python loop; jvp/linearize/jacfwd/jacrev/hessian against finite
differences (float64) and against reverse mode; nesting and composition with jit and
grad; errors naming the user's line; pytrees with registered nodes through jit and grad."""
from __future__ import annotations

import dataclasses
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
from test_autodiff import PRIMITIVE_CASES

import axle
import axle.numpy as anp
from axle import lax, tree_util
from axle.autodiff.batching import BATCH, NOT_BATCHED
from axle.autodiff.jvp import DIFFERENTIABLE, JVP, NO_JVP
from axle.errors import ArgumentError, ShapeError, TracingError
from axle.frontend.bind import bind
from axle.ir.module import Module, post_order
from axle.ir.ops import OPS, Op, register_custom_call
from axle.testing.cases import OP_CASES, assert_program_close, cases_for, random_input
from axle.testing.random_modules import random_module

DEV = "interpreter:0"
RNG = np.random.default_rng(11)


# ------------------------------------------------------------------ rule tables


@pytest.mark.parametrize("table, reasons, name", [(JVP, NO_JVP, "JVP"), (BATCH, NOT_BATCHED, "batching")])
def test_every_op_has_a_rule_or_a_reason(table: dict, reasons: dict, name: str) -> None:
    """Enumerates the op table: an op merged without a rule (or a stated reason) fails here."""
    missing = sorted(op.value for op in OPS if op not in table and op not in reasons)
    both = sorted(op.value for op in set(table) & set(reasons))
    assert not missing, f"ops without a {name} rule or a reason in the table of reasons: {missing}"
    assert not both, f"ops with a {name} rule and a reason for having none: {both}"


def test_every_differentiable_primitive_has_a_jvp_check() -> None:
    assert set(PRIMITIVE_CASES) >= DIFFERENTIABLE, sorted(o.value for o in DIFFERENTIABLE - set(PRIMITIVE_CASES))


# ------------------------------------------------------------------ vmap of every kit op case


def as_function(module: Module) -> Any:
    """The module's entry as a Python function of its parameters, applied with ``bind``."""
    comp = module.entry

    def f(*args: Any) -> Any:
        env = {p.uid: a for p, a in zip(comp.parameters, args)}
        for n in post_order([comp.root]):
            if n.op is Op.TUPLE:
                continue
            if n.op is not Op.PARAMETER:
                env[n.uid] = bind(n.op, *[env[o.uid] for o in n.operands], **n.attr)
        root = comp.root
        return tuple(env[o.uid] for o in root.operands) if root.op is Op.TUPLE else env[root.uid]

    return f


def _stack(x: np.ndarray, extra: list[np.ndarray], axis: int) -> np.ndarray:
    return np.stack([x] + extra, axis=axis)


KIT_OPS = sorted(OP_CASES, key=lambda o: o.value)


@pytest.mark.parametrize("op", KIT_OPS, ids=lambda o: o.value)
def test_vmap_of_every_op_case_matches_a_python_loop(op: Op) -> None:
    """Three examples per input, the batch axis at a different position per input and, for
    ops with several inputs, the first input unbatched: the batched computation must equal
    the op applied example by example (both on the interpreter)."""
    size = 3
    for case in [c for c in cases_for(op) if not c.replica_inputs]:  # SPMD cases: test_collectives.py
        fn = as_function(case.module)
        types = case.module.entry.parameter_types
        examples = [[x] + [random_input(RNG, t, small=True) for _ in range(size - 1)]
                    for x, t in zip(case.inputs, types)]
        layouts = [[i % (x.ndim + 1) for i, x in enumerate(case.inputs)]]
        if len(case.inputs) >= 2:
            layouts.append([None] + layouts[0][1:])
        for axes in layouts:
            args = [ex[0] if ax is None else np.stack(ex, axis=ax) for ex, ax in zip(examples, axes)]
            with axle.device(DEV):
                got = axle.vmap(fn, in_axes=tuple(axes), axis_size=size if not args else None)(*args)
                want = [fn(*[ex[0] if ax is None else ex[b] for ex, ax in zip(examples, axes)]) for b in range(size)]
            got_l = list(got) if isinstance(got, tuple) else [got]
            want_l = [np.stack([np.asarray(w[k] if isinstance(w, tuple) else w) for w in want])
                      for k in range(len(got_l))]
            assert_program_close(case.module, [np.asarray(g) for g in got_l], want_l, f"{case.id} in_axes={axes}")


@pytest.mark.parametrize("seed", range(12))
def test_vmap_of_random_programs_matches_a_python_loop(seed: int) -> None:
    """Random programs of the fuzzer (every primitive in combination): batched along a
    different axis per input, against the program run example by example."""
    module, inputs = random_module(seed, 14)
    fn = as_function(module)
    size = 2
    types = module.entry.parameter_types
    examples = [[x, random_input(np.random.default_rng(seed), t, small=True)] for x, t in zip(inputs, types)]
    axes = [(seed + i) % (x.ndim + 1) for i, x in enumerate(inputs)]
    args = [np.stack(ex, axis=ax) for ex, ax in zip(examples, axes)]
    with axle.device(DEV):
        got = axle.vmap(fn, in_axes=tuple(axes), axis_size=size if not args else None)(*args)
        want = [fn(*[ex[b] for ex in examples]) for b in range(size)]
    got_l = list(got) if isinstance(got, tuple) else [got]
    want_l = [np.stack([np.asarray(w[k] if isinstance(w, tuple) else w) for w in want]) for k in range(len(got_l))]
    assert_program_close(module, [np.asarray(g) for g in got_l], want_l, f"seed {seed}")


# ------------------------------------------------------------------ vmap: axes, nesting, composition


def test_vmap_in_axes_out_axes_and_pytrees() -> None:
    x = RNG.standard_normal((3, 4))
    y = RNG.standard_normal((4, 5))
    with axle.device(DEV):
        f = axle.vmap(lambda a, p: {"s": a * p["w"] + p["c"], "t": (anp.sum(a), p["w"])},
                      in_axes=(1, {"w": None, "c": 0}), out_axes={"s": 1, "t": (0, None)})
        out = f(x, {"w": np.float64(2.0), "c": np.zeros(4)})
        np.testing.assert_allclose(np.asarray(out["s"]), 2 * x)
        np.testing.assert_allclose(np.asarray(out["t"][0]), x.sum(axis=0))
        np.testing.assert_allclose(np.asarray(out["t"][1]), 2.0)
        with pytest.raises(ArgumentError, match="out_axes is None"):
            axle.vmap(lambda a: a, out_axes=None)(x)
        # negative axes, and an output that does not depend on the batch is repeated
        g = axle.vmap(lambda a, b: (a @ b, anp.ones(2)), in_axes=(-1, None), out_axes=-1)
        prod, ones = g(x, y[:3])
        np.testing.assert_allclose(np.asarray(prod), np.stack([x[:, i] @ y[:3] for i in range(4)], axis=-1))
        np.testing.assert_allclose(np.asarray(ones), np.ones((2, 4)))
        # keyword arguments are batched along their axis 0
        kw = axle.vmap(lambda a, scale=None: a * scale, in_axes=(None,))(np.arange(3.0), scale=np.arange(4.0))
        np.testing.assert_allclose(np.asarray(kw), np.outer(np.arange(4.0), np.arange(3.0)))


def test_nested_vmap_is_an_outer_product_of_batches() -> None:
    a, b = RNG.standard_normal((3, 5)), RNG.standard_normal((4, 5))
    dist = axle.vmap(axle.vmap(lambda u, v: anp.sum((u - v) ** 2), in_axes=(None, 0)), in_axes=(0, None))
    want = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    with axle.device(DEV):
        np.testing.assert_allclose(np.asarray(dist(a, b)), want, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(axle.jit(dist)(a, b)), want, rtol=1e-12)


def test_vmap_of_jit_and_jit_of_vmap_agree_with_a_loop() -> None:
    w = RNG.standard_normal((5, 3))
    xs = RNG.standard_normal((6, 5))

    @axle.jit
    def layer(x: Any) -> Any:
        return anp.tanh(x @ w) + anp.max(x)

    want = np.stack([np.tanh(x @ w) + x.max() for x in xs])
    with axle.device(DEV):
        np.testing.assert_allclose(np.asarray(axle.vmap(layer)(xs)), want, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(axle.jit(axle.vmap(layer))(xs)), want, rtol=1e-12)


def _loss(w: Any, x: Any, y: Any) -> Any:
    return anp.sum((anp.tanh(x @ w["a"]) @ w["b"] - y) ** 2)


def _params() -> dict:
    return {"a": RNG.standard_normal((4, 6)) * 0.5, "b": RNG.standard_normal((6, 2)) * 0.5}


def _clipped_mean_grad(w: Any, xs: Any, ys: Any) -> Any:
    """DP-SGD style: per-example gradients, each clipped to norm 1, averaged."""
    g = axle.vmap(axle.grad(_loss), in_axes=(None, 0, 0))(w, xs, ys)
    norms = anp.sqrt(sum(anp.sum(v.reshape(v.shape[0], -1) ** 2, axis=1) for v in tree_util.tree_leaves(g)))
    scale = anp.minimum(1.0, 1.0 / norms)
    return tree_util.tree_map(lambda v: anp.mean(v * scale.reshape((-1,) + (1,) * (v.ndim - 1)), axis=0), g)


def test_per_example_gradients_match_a_loop_and_kernels_do_not_grow_with_the_batch() -> None:
    w = _params()
    step = axle.jit(_clipped_mean_grad, device=DEV)
    kernels = {}
    for n in (4, 32):
        xs, ys = RNG.standard_normal((n, 3, 4)), RNG.standard_normal((n, 3, 2))
        got = step(w, xs, ys)
        per = [axle.grad(_loss)(w, x, y) for x, y in zip(xs, ys)]
        with axle.device(DEV):
            per = [tree_util.tree_map(np.asarray, g) for g in per]
        clipped = []
        for g in per:
            norm = np.sqrt(sum((v ** 2).sum() for v in g.values()))
            clipped.append({k: v * min(1.0, 1.0 / norm) for k, v in g.items()})
        for k in w:
            np.testing.assert_allclose(np.asarray(got[k]), np.mean([c[k] for c in clipped], axis=0), rtol=1e-10,
                                       atol=1e-12)
        kernels[n] = step.lower(w, xs, ys).compile().report()["kernels"]
    assert kernels[4] == kernels[32], kernels


def test_vmap_jvp_and_jacobians_in_every_execution_mode() -> None:
    from modes_util import check_all_modes

    w = RNG.standard_normal((3, 2))
    xs = RNG.standard_normal((4, 3))
    t = RNG.standard_normal(3)

    def transformed(w: Any, xs: Any, t: Any) -> Any:
        per = axle.vmap(axle.grad(lambda w, x: anp.sum(anp.tanh(x @ w))), in_axes=(None, 0))(w, xs)
        tan = axle.jvp(lambda x: anp.sin(x) * x, (xs[0],), (t,))[1]
        return per, tan, axle.jacfwd(lambda x: anp.exp(x) * x[::-1])(xs[1])

    def reference(w: Any, xs: Any, t: Any) -> Any:
        per = np.stack([np.outer(x, 1 - np.tanh(x @ w) ** 2) for x in xs])
        x0, x1 = xs[0], xs[1]
        jac = np.diag(np.exp(x1) * x1[::-1]) + np.exp(x1)[:, None] * np.eye(3)[::-1]
        return per, (np.cos(x0) * x0 + np.sin(x0)) * t, jac

    check_all_modes(transformed, reference, w, xs, t)


def test_vmap_errors_name_the_user_line() -> None:
    x, y = np.ones((3, 2)), np.ones((4, 2))
    with axle.device(DEV):
        sizes = r"different sizes: argument 0 \(f64\[3,2\]\) has 3, argument 1 \(f64\[4,2\]\) has 4"
        with pytest.raises(ShapeError, match=sizes) as e:
            axle.vmap(lambda a, b: a + b)(x, y)
        assert "test_transforms.py" in (e.value.where or "")
        with pytest.raises(ArgumentError, match="in_axes 2 is out of range for argument 0 of type") as e:
            axle.vmap(lambda a: a, in_axes=2)(x)
        assert "test_transforms.py" in (e.value.where or "")
        with pytest.raises(ArgumentError, match="in_axes has 1 entries for 2"):
            axle.vmap(lambda a, b: a, in_axes=(0,))(x, x)
        with pytest.raises(ArgumentError, match="not a prefix"):
            axle.vmap(lambda p: p["a"], in_axes=({"b": 0},))({"a": x})
        with pytest.raises(ArgumentError, match="not a prefix"):
            axle.vmap(lambda a: a, in_axes="0")(x)
        with pytest.raises(ShapeError, match=r"argument 0 \(leaf 1\) \(f64\[4,2\]\) has 4"):
            axle.vmap(lambda p: p)((x, y))
        with pytest.raises(ArgumentError, match="give axis_size"):
            axle.vmap(lambda a: a, in_axes=None)(x)
        with pytest.raises(ShapeError, match="axis_size=5"):
            axle.vmap(lambda a: a, axis_size=5)(x)


def test_vmap_of_rng_and_custom_call_runs_per_example() -> None:
    keys = np.array([1, 2, 3], np.int64)
    with axle.device(DEV):
        got = np.asarray(axle.vmap(lambda k: lax.rng_bit_generator(k, (4,)))(keys))
        for i, k in enumerate(keys):
            np.testing.assert_array_equal(got[i], np.asarray(lax.rng_bit_generator(k, (4,))))


# ------------------------------------------------------------------ forward mode


def _fd_jvp(f: Any, args: list, tangents: list, eps: float) -> np.ndarray:
    plus = f(*[a + eps * t for a, t in zip(args, tangents)])
    minus = f(*[a - eps * t for a, t in zip(args, tangents)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


@pytest.mark.parametrize("op", sorted(PRIMITIVE_CASES, key=lambda o: o.value), ids=lambda o: o.value)
def test_primitive_jvp_finite_differences_and_transpose_of_vjp(op: Op) -> None:
    fn, args, *opts = PRIMITIVE_CASES[op]
    o = opts[0] if opts else {}
    eps, rtol, atol = o.get("eps", 1e-6), o.get("rtol", 1e-5), o.get("atol", 1e-7)
    args = [np.asarray(a, np.float64) for a in args]
    tangents = [RNG.standard_normal(np.shape(a)) for a in args]
    with axle.device(DEV):
        out, t_out = axle.jvp(fn, tuple(args), tuple(tangents))
        np.testing.assert_allclose(np.asarray(out), np.asarray(fn(*args)))
        np.testing.assert_allclose(np.asarray(t_out), _fd_jvp(fn, args, tangents, eps), rtol=rtol, atol=atol)
        # <u, J t> == <J^T u, t>: forward and reverse mode agree
        u = RNG.standard_normal(np.shape(out))
        cts = axle.vjp(fn, *args)[1](u)
        lhs = float(np.sum(u * np.asarray(t_out)))
        rhs = sum(float(np.sum(np.asarray(c) * t)) for c, t in zip(cts, tangents))
        np.testing.assert_allclose(lhs, rhs, rtol=rtol if opts else 1e-9, atol=1e-12)


@pytest.mark.parametrize("fn", [lax.max, lax.min], ids=["max", "min"])
def test_max_min_tangent_is_the_transpose_of_the_vjp_at_ties_and_nans(fn: Any) -> None:
    x = np.array([1.0, np.nan, 2.0, 3.0, -0.0, 0.5])
    y = np.array([1.0, 0.0, np.nan, 1.0, 0.0, 4.0])
    tx, ty = RNG.standard_normal(6), RNG.standard_normal(6)
    with axle.device(DEV):
        t = np.asarray(axle.jvp(fn, (x, y), (tx, ty))[1])
        gx, gy = (np.asarray(g) for g in axle.vjp(fn, x, y)[1](np.ones(6)))
    np.testing.assert_allclose(t, gx * tx + gy * ty, rtol=1e-15, atol=0)


@pytest.mark.parametrize("op", [Op.FLOOR, Op.CEIL, Op.SIGN])
def test_piecewise_constant_primitives_have_zero_tangent(op: Op) -> None:
    fn = {Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.SIGN: np.sign}[op]
    x = np.array([1.5, -2.5])
    with axle.device(DEV):
        _, t = axle.jvp(lambda v: bind(op, v) * v, (x,), (np.ones(2),))
    # d(f(x)·x) = f'(x)·x + f(x) with f' = 0
    np.testing.assert_array_equal(np.asarray(t), fn(x))


def _f(x: Any, y: Any) -> Any:
    return anp.sin(x) * anp.sum(y ** 2) + anp.exp(x / 3)


def test_jacfwd_jacrev_hessian_against_finite_differences_and_each_other() -> None:
    x, y = RNG.standard_normal(3), RNG.standard_normal((2, 2))
    eps = 1e-6
    with axle.device(DEV):
        jf = axle.jacfwd(_f, argnums=(0, 1))(x, y)
        jr = axle.jacrev(_f, argnums=(0, 1))(x, y)
        assert np.asarray(jf[1]).shape == (3, 2, 2)
        for a, b in zip(jf, jr):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-14)
        num_x = np.stack([(np.asarray(_f(x + eps * e, y)) - np.asarray(_f(x - eps * e, y))) / (2 * eps)
                          for e in np.eye(3)], axis=-1)
        np.testing.assert_allclose(np.asarray(jf[0]), num_x, rtol=1e-6, atol=1e-8)

        def scalar(v: Any) -> Any:
            return anp.sum(anp.sin(v) * v[::-1]) + anp.prod(v)

        v = RNG.standard_normal(4)
        h = np.asarray(axle.hessian(scalar)(v))
        g = axle.grad(scalar)
        num_h = np.stack([(np.asarray(g(v + eps * e)) - np.asarray(g(v - eps * e))) / (2 * eps) for e in np.eye(4)],
                         axis=-1)
        np.testing.assert_allclose(h, num_h, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.asarray(axle.jit(axle.hessian(scalar))(v)), h, rtol=1e-12, atol=1e-14)


def test_jvp_pytrees_has_aux_linearize_and_composition() -> None:
    p = {"w": RNG.standard_normal((3, 2)), "b": RNG.standard_normal(2)}
    tp = {"w": RNG.standard_normal((3, 2)), "b": RNG.standard_normal(2)}
    x = RNG.standard_normal(3)

    def net(p: Any, x: Any) -> Any:
        h = anp.tanh(x @ p["w"] + p["b"])
        return (h, anp.sum(h)), {"mean": anp.mean(h)}

    with axle.device(DEV):
        (h, s), (th, ts) = axle.jvp(lambda p: net(p, x)[0], (p,), (tp,))
        hh = np.tanh(x @ p["w"] + p["b"])
        want = (1 - hh ** 2) * (x @ tp["w"] + tp["b"])
        np.testing.assert_allclose(np.asarray(th), want, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(ts), want.sum(), rtol=1e-12)
        o, t, a = axle.jvp(net, (p, x), (tp, np.zeros(3)), has_aux=True)
        np.testing.assert_allclose(np.asarray(t[0]), want, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(a["mean"]), hh.mean(), rtol=1e-12)
        out, f_jvp = axle.linearize(lambda p: net(p, x)[0][1], p)
        np.testing.assert_allclose(np.asarray(f_jvp(tp)), want.sum(), rtol=1e-12)
        # jvp under jit and jvp of grad (forward over reverse) agree with the eager result
        jt = axle.jit(lambda p, tp: axle.jvp(lambda q: net(q, x)[0][1], (p,), (tp,))[1])(p, tp)
        np.testing.assert_allclose(np.asarray(jt), want.sum(), rtol=1e-12)
        hvp = axle.jvp(axle.grad(lambda q: net(q, x)[0][1]), (p,), (tp,))[1]
        fd = {k: (np.asarray(axle.grad(lambda q: net(q, x)[0][1])(tree_util.tree_map(lambda a, b: a + 1e-6 * b,
                                                                                      p, tp))[k])
                  - np.asarray(axle.grad(lambda q: net(q, x)[0][1])(tree_util.tree_map(lambda a, b: a - 1e-6 * b,
                                                                                        p, tp))[k])) / 2e-6
              for k in p}
        for k in p:
            np.testing.assert_allclose(np.asarray(hvp[k]), fd[k], rtol=1e-5, atol=1e-8)
        # vmap of jvp: a batch of directions at once
        dirs = RNG.standard_normal((5, 3))
        tv = axle.vmap(lambda d: axle.jvp(lambda v: anp.sin(v) * v, (x,), (d,))[1])(dirs)
        np.testing.assert_allclose(np.asarray(tv), dirs * (np.cos(x) * x + np.sin(x)), rtol=1e-12)


def test_jvp_errors() -> None:
    x = np.ones(3)
    with axle.device(DEV):
        with pytest.raises(ShapeError, match="tangent 0 is f64\\[2\\].*primal is f64\\[3\\]") as e:
            axle.jvp(anp.sin, (x,), (np.ones(2),))
        assert "test_transforms.py" in (e.value.where or "")
        with pytest.raises(ShapeError, match="structure"):
            axle.jvp(lambda a, b: a, (x, x), (x,))
        with pytest.raises(ShapeError, match="tangent 0 is f64\\[3\\], its primal is f32\\[3\\]"):
            axle.jvp(anp.sin, (x.astype(np.float32),), (x,))  # never silently rounded
        np.testing.assert_allclose(np.asarray(axle.jvp(lambda a: 3 * a, (2.0,), (1.0,))[1]), 3.0)
        with pytest.raises(ArgumentError, match="primals must be a tuple"):
            axle.jvp(anp.sin, x, (x,))
        with pytest.raises(TracingError, match="has_aux"):
            axle.jvp(anp.sin, (x,), (x,), has_aux=True)
        # an opaque custom call has no derivative: an error, never a silent zero
        register_custom_call("test_transforms.double", lambda x, config: 2 * x)
        with pytest.raises(TracingError, match="custom-call target 'test_transforms.double' has no derivative"):
            axle.jvp(lambda a: lax.custom_call("test_transforms.double", [a], (3,), np.float64), (x,), (x,))
        # int inputs carry no tangent; int outputs get a zero tangent of their dtype
        _, t = axle.jvp(lambda a, i: a * lax.convert(i, np.float64), (x, np.arange(3)), (x, np.zeros(3, np.int64)))
        np.testing.assert_allclose(np.asarray(t), np.arange(3.0))


# ------------------------------------------------------------------ tree_util


Point = namedtuple("Point", "x y")


@tree_util.register_dataclass(meta_fields=("act",))
@dataclasses.dataclass(frozen=True)
class Layer:
    w: Any
    b: Any
    act: str = "tanh"


Layer2 = dataclasses.dataclass(type("Layer2", (), {"__annotations__": {"w": Any, "name": str}}))
tree_util.register_dataclass(Layer2, data_fields=["w"], meta_fields=["name"])


class Box:
    def __init__(self, items: list, tag: str) -> None:
        self.items, self.tag = items, tag


tree_util.register_pytree_node(Box, lambda b: (b.items, b.tag), lambda tag, items: Box(list(items), tag))


def test_tree_flatten_unflatten_map_structure() -> None:
    tree = {"p": Point(1.0, (2.0, None)), "l": [3.0, Box([4.0, 5.0], "t")]}
    leaves, td = tree_util.tree_flatten(tree)
    assert leaves == [3.0, 4.0, 5.0, 1.0, 2.0]
    back = tree_util.tree_unflatten(td, leaves)
    assert back["p"] == Point(1.0, (2.0, None)) and back["l"][1].tag == "t" and back["l"][1].items == [4.0, 5.0]
    assert tree_util.tree_structure(tree) == td and hash(tree_util.tree_structure(tree)) == hash(td)
    assert tree_util.tree_structure({"p": Point(0, (0, None)), "l": [0, Box([0, 0], "u")]}) != td
    doubled = tree_util.tree_map(lambda a, b: a + b, tree, tree)
    assert tree_util.tree_leaves(doubled) == [6.0, 8.0, 10.0, 2.0, 4.0]
    assert tree_util.tree_leaves([1, (2, 3)], is_leaf=lambda x: isinstance(x, tuple)) == [1, (2, 3)]
    assert tree_util.tree_map(lambda a, b: (a, b), [1, 2], [(3, 4), 5]) == [(1, (3, 4)), (2, 5)]
    with pytest.raises(ArgumentError, match="expected a node"):
        tree_util.tree_map(lambda a, b: a, [1, 2], [1])
    with pytest.raises(ArgumentError, match="takes 5 leaves, got 2"):
        tree_util.tree_unflatten(td, [1, 2])
    lt = tree_util.tree_structure(Layer2(1.0, "a"))
    assert lt != tree_util.tree_structure(Layer2(1.0, "b")) and tree_util.tree_leaves(Layer2(1.0, "a")) == [1.0]
    with pytest.raises(ArgumentError, match="not a dataclass"):
        tree_util.register_dataclass(Box)


def test_registered_nodes_flow_through_jit_grad_and_vmap() -> None:
    layer = Layer(RNG.standard_normal((3, 2)), RNG.standard_normal(2), "tanh")
    x = RNG.standard_normal(3)

    def loss(layer: Layer, x: Any) -> Any:
        return anp.sum(anp.tanh(x @ layer.w + layer.b))

    with axle.device(DEV):
        g = axle.jit(axle.grad(loss))(layer, x)
        assert isinstance(g, Layer)
        h = np.tanh(x @ layer.w + layer.b)
        np.testing.assert_allclose(np.asarray(g.b), 1 - h ** 2, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(g.w), np.outer(x, 1 - h ** 2), rtol=1e-12)
        out = axle.jit(lambda p: Point(p.x * 2, p.y))(Point(np.ones(2), np.zeros(1)))
        assert isinstance(out, Point)
        xs = RNG.standard_normal((4, 3))
        per = axle.vmap(axle.grad(loss), in_axes=(None, 0))(layer, xs)
        assert isinstance(per, Layer) and np.asarray(per.w).shape == (4, 3, 2)


@pytest.mark.parametrize("combine", [lax.scatter_add, lax.scatter_mul, lax.scatter_min, lax.scatter_max],
                         ids=lambda f: f.__name__)
def test_scatter_combiners_jvp_finite_differences_and_transpose_of_vjp(combine: Any) -> None:
    """scatter's mul/min/max JVP rules (add is linear), with duplicate and dropped indices."""
    from test_autodiff import _ROWS_IDS, _ROWS_SCATTER

    x = np.arange(12.0).reshape(4, 3) * 0.37 - 1.9
    u = np.arange(15.0).reshape(5, 3)[::-1] * 0.29 - 2.05

    def fn(a: Any, b: Any) -> Any:
        return combine(a, _ROWS_IDS, b, _ROWS_SCATTER)

    tangents = [RNG.standard_normal(x.shape), RNG.standard_normal(u.shape)]
    with axle.device(DEV):
        out, t_out = axle.jvp(fn, (x, u), tuple(tangents))
        np.testing.assert_allclose(np.asarray(t_out), _fd_jvp(fn, [x, u], tangents, 1e-6), rtol=1e-5, atol=1e-7)
        w = RNG.standard_normal(np.shape(out))
        cts = axle.vjp(fn, x, u)[1](w)
        rhs = sum(float(np.sum(np.asarray(c) * t)) for c, t in zip(cts, tangents))
        np.testing.assert_allclose(float(np.sum(w * np.asarray(t_out))), rhs, rtol=1e-9, atol=1e-12)


def test_vmap_of_indexing_ops_runs_per_example() -> None:
    x = RNG.standard_normal((3, 5, 2))
    i = np.array([4, -1, 2], np.int32)
    with axle.device(DEV):
        got = np.asarray(axle.vmap(lambda a, k: a[k] + lax.dynamic_slice_in_dim(a, k, 1, 0)[0])(x, i))
    want = np.stack([x[n][i[n]] + x[n][min(i[n] % 5 if i[n] < 0 else i[n], 4)] for n in range(3)])
    np.testing.assert_allclose(got, want)
