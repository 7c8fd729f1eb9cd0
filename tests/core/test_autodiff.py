"""Autodiff: finite-difference checks (float64) for every differentiable primitive and for
softmax cross-entropy, layer norm, conv2d and an MLP; pytrees, argnums, has_aux, vjp;
composition with jit, auto mode and grad of grad."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax, nn
from axle.autodiff.rules import DIFFERENTIABLE, VJP
from axle.errors import DTypeError, ShapeError
from axle.frontend.pytree import flatten, unflatten
from axle.ir.ops import Op

DEV = "interpreter:0"
RNG = np.random.default_rng(7)


def numeric_grad(f, args, argnum, eps=1e-6):
    """Central differences of the scalar f with respect to args[argnum] (a pytree)."""
    leaves, td = flatten(args[argnum])
    grads = []
    for li, leaf in enumerate(leaves):
        leaf = np.asarray(leaf, np.float64)
        g = np.zeros_like(leaf)
        for i in np.ndindex(leaf.shape):
            vals = []
            for sgn in (1, -1):
                bumped = leaf.copy()
                bumped[i] += sgn * eps
                new_leaves = list(leaves)
                new_leaves[li] = bumped
                a = list(args)
                a[argnum] = unflatten(td, new_leaves)
                vals.append(float(f(*a)))
            g[i] = (vals[0] - vals[1]) / (2 * eps)
        grads.append(g)
    return unflatten(td, grads)


def check_grad(f, *args, argnums=0, rtol=1e-5, atol=1e-7, modes=("eager", "jit"), eps=1e-6):
    nums = (argnums,) if isinstance(argnums, int) else argnums
    want = [numeric_grad(f, args, n, eps) for n in nums]
    for mode in modes:
        g = axle.grad(f, argnums=argnums)
        if mode == "jit":
            g = axle.jit(g, device=DEV)
        with axle.device(DEV):
            got = g(*args)
        got = [got] if isinstance(argnums, int) else list(got)
        for gg, ww in zip(got, want):
            for a, b in zip(flatten(gg)[0], flatten(ww)[0]):
                np.testing.assert_allclose(np.asarray(a), b, rtol=rtol, atol=atol, err_msg=mode)


def f64(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape)


_W234 = f64(2, 3, 4)
_W34 = f64(3, 4)
_ROWS_IDS = np.array([[1], [3], [1], [7], [-2]], np.int32)
_ROWS_GATHER = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
_ROWS_SCATTER = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                            scatter_dims_to_operand_dims=(0,))

# One scalar-valued function per differentiable primitive, applied through lax so each
# VJP rule is exercised directly. Inputs avoid kinks (ties, zero) where needed.
PRIMITIVE_CASES = {
    Op.NEG: (lambda x: lax.neg(x), [f64(3, 2)]),
    Op.ABS: (lambda x: lax.abs(x), [f64(3, 2, low=0.2) * np.array([1, -1])]),
    Op.EXP: (lambda x: lax.exp(x), [f64(4)]),
    Op.LOG: (lambda x: lax.log(x), [f64(4, low=0.5)]),
    Op.SQRT: (lambda x: lax.sqrt(x), [f64(4, low=0.5)]),
    Op.RSQRT: (lambda x: lax.rsqrt(x), [f64(4, low=0.5)]),
    Op.TANH: (lambda x: lax.tanh(x), [f64(4)]),
    Op.LOGISTIC: (lambda x: lax.logistic(x), [f64(4)]),
    Op.SIN: (lambda x: lax.sin(x), [f64(4)]),
    Op.COS: (lambda x: lax.cos(x), [f64(4)]),
    Op.ADD: (lambda x, y: lax.add(x, y), [f64(2, 3), f64(2, 3)]),
    Op.SUB: (lambda x, y: lax.sub(x, y), [f64(2, 3), f64(2, 3)]),
    Op.MUL: (lambda x, y: lax.mul(x, y), [f64(2, 3), f64(2, 3)]),
    Op.DIV: (lambda x, y: lax.div(x, y), [f64(2, 3), f64(2, 3, low=0.5)]),
    Op.REM: (lambda x, y: lax.rem(x, y), [f64(5, low=0.3, high=5.0), np.full(5, 1.7)]),
    Op.POW: (lambda x, y: lax.pow(x, y), [f64(4, low=0.5), f64(4)]),
    Op.MAX: (lambda x, y: lax.max(x, y), [np.array([1.0, -2.0, 3.0]), np.array([0.5, 1.0, 4.0])]),
    Op.MIN: (lambda x, y: lax.min(x, y), [np.array([1.0, -2.0, 3.0]), np.array([0.5, 1.0, 4.0])]),
    Op.SELECT: (lambda x, y: lax.select(lax.compare(x, y, "gt"), x, y), [f64(6), f64(6)]),
    # through float32: finite differences need a step far above float32 rounding
    Op.CONVERT: (lambda x: lax.convert(lax.convert(x, np.float32), np.float64), [f64(3)],
                 {"eps": 1e-2, "rtol": 1e-3, "atol": 1e-4}),
    Op.REDUCE: (lambda x: (lax.mul(lax.reduce(x, "sum", (0,)), lax.reduce(x, "max", (1,)))
                           + lax.reduce(x, "min", (0,)) * lax.reduce(x, "prod", (0,))), [f64(3, 3, low=0.5)]),
    Op.DOT_GENERAL: (lambda x, y: lax.dot_general(x, y, (2,), (1,), (0,), (0,)), [f64(2, 3, 4), f64(2, 4, 5)]),
    Op.BROADCAST_IN_DIM: (lambda x: lax.mul(lax.broadcast_in_dim(x, (2, 3, 4), (0, 2)), _W234), [f64(2, 1)]),
    Op.RESHAPE: (lambda x: lax.mul(lax.reshape(x, (3, 2)), np.arange(6.0).reshape(3, 2)), [f64(2, 3)]),
    Op.TRANSPOSE: (lambda x: lax.mul(lax.transpose(x, (2, 0, 1)), np.arange(24.0).reshape(4, 2, 3)), [f64(2, 3, 4)]),
    Op.SLICE: (lambda x: lax.mul(lax.slice(x, (1, 0), (5, 3), (2, 2)), np.array([[1.0, 2.0], [3.0, 4.0]])),
               [f64(6, 4)]),
    Op.PAD: (lambda x, v: lax.mul(lax.pad(x, v, (1, 0), (0, 2), (1, 0)), np.arange(30.0).reshape(6, 5)),
             [f64(3, 3), np.float64(0.7)]),
    Op.CONCATENATE: (lambda x, y: lax.mul(lax.concatenate([x, y, x], 1), np.arange(16.0).reshape(2, 8)),
                     [f64(2, 3), f64(2, 2)]),
    Op.REVERSE: (lambda x: lax.mul(lax.reverse(x, (0,)), np.arange(6.0).reshape(3, 2)), [f64(3, 2)]),
    # strided, padded, dilated and grouped: tests/core/test_conv.py checks more layouts
    Op.CONVOLUTION: (lambda x, w: lax.conv_general_dilated(x, w, (2, 1), [(1, 0), (0, 1)], (1, 2), (2, 1),
                                                           feature_group_count=2), [f64(2, 4, 5, 3), f64(4, 2, 2, 2)]),
    # distinct values (no ties) so max's choice is stable under the finite-difference step
    Op.REDUCE_WINDOW: (lambda x: lax.add(lax.reduce_window(x, "max", (2, 2), (1, 2), [(0, 1), (1, 0)])[:3],
                                         lax.reduce_window(x, "sum", (2, 3), (2, 1), [(1, 1), (0, 0)])),
                       [np.random.default_rng(3).permutation(20).reshape(4, 5) * 0.37]),
    # indexing: duplicate, clamped (gather) and dropped (scatter) indices
    Op.GATHER: (lambda x: lax.gather(x, _ROWS_IDS, _ROWS_GATHER, (1, 3), mode="clip"), [f64(4, 3)]),
    # every combiner over duplicate (1) and dropped (7) windows; distinct values: no max/min ties
    Op.SCATTER: (lambda x, u: lax.add(lax.add(lax.scatter(x, _ROWS_IDS, u, _ROWS_SCATTER),
                                              lax.scatter_add(x, _ROWS_IDS, u, _ROWS_SCATTER)),
                                      lax.add(lax.scatter_mul(x, _ROWS_IDS, u, _ROWS_SCATTER),
                                              lax.scatter_max(x, _ROWS_IDS, u, _ROWS_SCATTER))),
                 [np.random.default_rng(5).permutation(12).reshape(4, 3) * 0.3 + 0.2,
                  np.random.default_rng(6).permutation(15).reshape(5, 3) * 0.3 + 0.25]),
    Op.DYNAMIC_SLICE: (lambda x: lax.dynamic_slice(x, (np.int32(2), np.int32(-9)), (2, 2)), [f64(4, 3)]),
    Op.DYNAMIC_UPDATE_SLICE: (lambda x, u: lax.dynamic_update_slice(x, u, (np.int64(3), 1)), [f64(4, 3), f64(2, 2)]),
    # elementwise completeness
    Op.TAN: (lambda x: lax.tan(x), [f64(4, low=-1.2, high=1.2)]),
    Op.EXPM1: (lambda x: lax.expm1(x), [f64(4)]),
    Op.LOG1P: (lambda x: lax.log1p(x), [f64(4, low=-0.5)]),
    Op.CBRT: (lambda x: lax.cbrt(x), [f64(4, low=0.3) * np.array([1, -1, 1, -1])]),
    Op.ERF: (lambda x: lax.erf(x), [f64(4)]),
    Op.ATAN2: (lambda y, x: lax.atan2(y, x), [f64(5), f64(5, low=0.3) * np.array([1, -1, 1, -1, 1])]),
    Op.NEXT_AFTER: (lambda x, y: lax.next_after(x, y), [f64(4), f64(4) + 3.0]),
    # sorting: values along dim 0 descending and a carried operand keyed by the first (no ties)
    Op.SORT: (lambda x, y: lax.mul(lax.sort(x, 0, descending=True), _W34)
              + lax.mul(lax.sort([x, y], 1)[1], _W34 * 2), [f64(3, 4), f64(3, 4)]),
    # the custom-call rule dispatches on the target: linalg.inv's (the others: test_array_api_linalg.py)
    Op.CUSTOM_CALL: (lambda x: anp.linalg.inv(x), [f64(3, 3) + 4 * np.eye(3)]),
}


def test_every_differentiable_primitive_has_a_check():
    assert set(PRIMITIVE_CASES) >= DIFFERENTIABLE, sorted(o.value for o in DIFFERENTIABLE - set(PRIMITIVE_CASES))


@pytest.mark.parametrize("op", sorted(PRIMITIVE_CASES, key=lambda o: o.value), ids=lambda o: o.value)
def test_primitive_vjp_finite_differences(op):
    fn, args, *opts = PRIMITIVE_CASES[op]

    def scalar(*xs):
        out = fn(*xs)  # a non-linear readout so every output element gets a distinct cotangent
        return anp.sum(out * anp.sin(out + 0.3)) + anp.sum(out) * 0.7

    for argnum in range(len(args)):
        check_grad(scalar, *args, argnums=argnum, **(opts[0] if opts else {}))


@pytest.mark.parametrize("combine", [lax.scatter_add, lax.scatter_mul, lax.scatter_min, lax.scatter_max],
                         ids=lambda f: f.__name__)
def test_scatter_combiners_vjp_finite_differences(combine):
    """Each combiner's rule, with duplicate and dropped indices (min/max: no ties)."""
    x = np.arange(12.0).reshape(4, 3) * 0.37 - 1.9
    u = np.arange(15.0).reshape(5, 3)[::-1] * 0.29 - 2.05

    def scalar(x, u):
        out = combine(x, _ROWS_IDS, u, _ROWS_SCATTER)
        return anp.sum(out * anp.sin(out + 0.3)) + anp.sum(out) * 0.7

    check_grad(scalar, x, u, argnums=0)
    check_grad(scalar, x, u, argnums=1)


@pytest.mark.parametrize("op", [Op.FLOOR, Op.CEIL, Op.SIGN, Op.ROUND_NEAREST_EVEN])
def test_piecewise_constant_primitives_have_zero_gradient(op):
    fn = {Op.FLOOR: lax.floor, Op.CEIL: lax.ceil, Op.SIGN: lax.sign, Op.ROUND_NEAREST_EVEN: lax.round_nearest_even}[op]
    x = np.array([0.3, -1.7, 2.2])
    with axle.device(DEV):
        g = axle.grad(lambda v: anp.sum(fn(v) * v))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(fn(x)) if op is not Op.SIGN else np.sign(x))
    assert op in VJP


# ------------------------------------------------------------------ composites


def test_softmax_cross_entropy_int_and_onehot_labels():
    logits = f64(5, 4)
    labels = np.array([0, 3, 1, 1, 2])
    check_grad(lambda z: nn.cross_entropy(z, labels), logits)
    check_grad(lambda z: nn.cross_entropy(z, np.eye(4)[labels]), logits)
    check_grad(lambda z: anp.sum(nn.softmax(z) * np.arange(4.0)), logits)


def test_layer_norm_gradient():
    x, g, b = f64(3, 6), f64(6), f64(6)
    check_grad(lambda x_, g_, b_: anp.sum(nn.layer_norm(x_, g_, b_) ** 3), x, g, b, argnums=(0, 1, 2))


def test_conv2d_gradient():
    x, w, b = f64(2, 2, 5, 5), f64(3, 2, 3, 3), f64(3)
    check_grad(lambda x_, w_, b_: anp.sum(anp.tanh(nn.conv2d(x_, w_, b_, stride=2, padding="SAME"))),
               x, w, b, argnums=(0, 1, 2), modes=("jit",))


def test_max_pool_gradient():
    x = np.arange(32.0).reshape(1, 2, 4, 4) * np.array([1, -1, 1, -1]) + f64(1, 2, 4, 4) * 0.1
    check_grad(lambda v: anp.sum(nn.max_pool(v) ** 2), x)


def mlp_loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
        h = nn.dense(h, w, b)
        if i < len(params) - 1:
            h = anp.tanh(h)
    return nn.cross_entropy(h, y)


def test_mlp_gradient_over_pytree():
    params = [(f64(4, 8), f64(8)), (f64(8, 3), f64(3))]
    x, y = f64(6, 4), np.array([0, 1, 2, 2, 1, 0])
    check_grad(mlp_loss, params, x, y)


# ------------------------------------------------------------------ API


def test_value_and_grad_argnums_has_aux():
    def f(a, b):
        loss = anp.sum(a * b * b)
        return loss, {"double": 2 * loss}

    a, b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    with axle.device(DEV):
        (value, aux), (ga, gb) = axle.value_and_grad(f, argnums=(0, 1), has_aux=True)(a, b)
        g, aux2 = axle.grad(f, argnums=1, has_aux=True)(a, b)
    assert float(value) == 11.0 and float(aux["double"]) == 22.0 and float(aux2["double"]) == 22.0
    np.testing.assert_allclose(np.asarray(ga), b * b)
    np.testing.assert_allclose(np.asarray(gb), 2 * a * b)
    np.testing.assert_allclose(np.asarray(g), 2 * a * b)


def test_vjp_pytree_outputs():
    x = np.array([0.5, 1.5])
    with axle.device(DEV):
        out, pull = axle.vjp(lambda v: {"s": anp.sin(v), "p": v * v}, x)
        (ct,) = pull({"s": np.ones(2), "p": np.array([1.0, 2.0])})
    np.testing.assert_allclose(np.asarray(out["s"]), np.sin(x))
    np.testing.assert_allclose(np.asarray(ct), np.cos(x) + 2 * x * np.array([1.0, 2.0]))


def test_grad_of_grad_and_closures_inside_jit():
    x = np.array([0.3, 1.1])
    with axle.device(DEV):
        hess_diag = axle.grad(lambda v: anp.sum(axle.grad(lambda u: anp.sum(u ** 3))(v)))(x)
        np.testing.assert_allclose(np.asarray(hess_diag), 6 * x)
        data = np.array([2.0, -1.0])

        @axle.jit
        def step(w, d):
            return axle.grad(lambda w_: anp.sum((w_ * d) ** 2))(w)  # d is an outer tracer

        np.testing.assert_allclose(np.asarray(step(x, data)), 2 * x * data * data)


def test_grad_in_all_modes_matches():
    params = [(f64(4, 5), f64(5)), (f64(5, 3), f64(3))]
    x, y = f64(7, 4), np.array([0, 1, 2, 2, 1, 0, 1])
    from modes_util import MODES, run_mode

    outs = {m: run_mode(m, lambda p, a, b: axle.grad(mlp_loss)(p, a, b), params, x, y) for m in MODES}
    for m in MODES[1:]:
        for a, b in zip(flatten(outs[m])[0], flatten(outs["eager"])[0]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=m)


def test_grad_errors():
    with axle.device(DEV):
        with pytest.raises(ShapeError, match="float scalar") as e:
            axle.grad(lambda v: v * 2)(np.ones(3))
        assert "test_autodiff.py" in str(e.value)
        with pytest.raises(DTypeError, match="non-float"):
            axle.grad(lambda v: anp.sum(v))(np.ones(3, np.int32))


def test_gradient_flows_only_through_floats():
    x = np.array([1.5, -2.5])
    with axle.device(DEV):
        g = axle.grad(lambda v: anp.sum(v * anp.astype(anp.astype(v, np.int32), np.float64)))(x)
    np.testing.assert_allclose(np.asarray(g), np.trunc(x))


def test_control_flow_on_values_inside_grad_is_a_tracing_error():
    def f(v):
        if anp.sum(v) > 0:
            return anp.sum(v * v)
        return anp.sum(v)

    with axle.device(DEV):
        with pytest.raises(axle.errors.TracingError, match="control flow") as e:
            axle.grad(f)(np.ones(2))
        assert "test_autodiff.py" in str(e.value)
        _, pull = axle.vjp(lambda v: v * 2, np.ones(3))
        with pytest.raises(ShapeError, match="cotangent"):
            pull(np.ones(4))


@pytest.mark.parametrize("a, b", [(0.0, -0.0), (-0.0, 0.0)])
def test_maximum_minimum_gradient_splits_a_signed_zero_tie(a: float, b: float) -> None:
    """-0.0 == +0.0 is a tie for the gradient even though max/min now pick +0.0/-0.0
    (IEEE 754-2019): the cotangent is split evenly, whichever zero won."""
    x, y = np.float32(a), np.float32(b)
    for fn in (anp.maximum, anp.minimum):
        gx, gy = axle.grad(lambda u, v: fn(u, v), argnums=(0, 1))(x, y)
        assert (float(gx), float(gy)) == (0.5, 0.5), fn.__name__
    # a reduction over both zeros: each zero is a hit and takes half
    for fn, other in ((anp.max, -1.0), (anp.min, 1.0)):
        v = np.array([a, b, other], np.float32)
        g = np.asarray(axle.grad(lambda u: fn(u) * 1.0)(v))
        np.testing.assert_array_equal(g, np.array([0.5, 0.5, 0.0], np.float32), err_msg=fn.__name__)


def test_grad_through_a_custom_call_without_a_rule_raises_instead_of_a_zero_gradient():
    """An opaque host function has no derivative: reverse mode used to give it a zero
    cotangent, so grad(sum(f(x))) came back 0 for f(x) = 2x."""
    from axle.errors import TracingError
    from axle.ir import register_custom_call

    register_custom_call("test.autodiff.twice", lambda x, config: (2 * x).astype(x.dtype))

    def loss(x):
        return anp.sum(lax.custom_call("test.autodiff.twice", [x], x.shape, x.dtype) * x)

    with pytest.raises(TracingError, match=r"test\.autodiff\.twice.*no VJP rule.*f64\[3\]"):
        axle.grad(loss)(np.ones(3))
    # what does not depend on the differentiated input is no derivative's business
    assert np.allclose(axle.grad(lambda x, c: anp.sum(x * lax.custom_call("test.autodiff.twice", [c], (3,),
                                                                             np.float64)), argnums=0)(
        np.ones(3), np.arange(3.0)), [0.0, 2.0, 4.0])
