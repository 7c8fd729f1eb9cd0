"""Layout assignment: a dot read only through a transpose computes the transposed layout."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import nn
from axle.interpreter import evaluate
from axle.ir import Builder, Module, Op
from axle.passes import LayoutAssignment, optimize
from axle.passes.layout import transposed_dot

# (lhs shape, rhs shape, dimension numbers, transpose permutation of the dot's result)
CASES = {
    "plain A@B swapped": ((5, 3), (3, 4), dict(lhs_contracting=(1,), rhs_contracting=(0,)), (1, 0)),
    "transposed A (x^T g)": ((6, 5), (6, 4), dict(lhs_contracting=(0,), rhs_contracting=(0,)), (1, 0)),
    "transposed B (g w^T)": ((5, 3), (4, 3), dict(lhs_contracting=(1,), rhs_contracting=(1,)), (1, 0)),
    "both transposed": ((3, 5), (4, 3), dict(lhs_contracting=(0,), rhs_contracting=(1,)), (1, 0)),
    "batched, free groups swapped": ((2, 5, 3), (2, 3, 4), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,),
                                                                rhs_contracting=(1,)), (0, 2, 1)),
    "batch dims reordered only": ((2, 3, 5, 4), (3, 2, 4, 6),
                                  dict(lhs_batch=(0, 1), rhs_batch=(1, 0), lhs_contracting=(3,), rhs_contracting=(2,)),
                                  (1, 0, 2, 3)),
    "batch reordered and swapped": ((2, 3, 5, 4), (3, 2, 4, 6),
                                    dict(lhs_batch=(0, 1), rhs_batch=(1, 0), lhs_contracting=(3,),
                                         rhs_contracting=(2,)), (1, 0, 3, 2)),
    "two free dims per side": ((2, 3, 4), (4, 5, 6), dict(lhs_contracting=(2,), rhs_contracting=(0,)),
                               (2, 3, 0, 1)),
    "batch in the middle of operands": ((5, 2, 3), (3, 2, 4), dict(lhs_batch=(1,), rhs_batch=(1,),
                                                                   lhs_contracting=(2,), rhs_contracting=(0,)),
                                        (0, 2, 1)),
    "two contracting dims": ((3, 4, 5), (4, 6, 3), dict(lhs_contracting=(0, 1), rhs_contracting=(2, 0)), (1, 0)),
    "outer product": ((5,), (4,), dict(lhs_contracting=(), rhs_contracting=()), (1, 0)),
    "matrix-vector, vector first": ((3,), (5, 3), dict(lhs_contracting=(0,), rhs_contracting=(1,)), (0,)),
}


def _dot_then(lhs: tuple, rhs: tuple, dims: dict, perm: tuple, dtype: str = "f32") -> Module:
    b = Builder("t")
    x = b.parameter(f"{dtype}[{','.join(map(str, lhs))}]")
    w = b.parameter(f"{dtype}[{','.join(map(str, rhs))}]")
    d = b.dot_general(x, w, **dims)
    return b.build(b.transpose(d, permutation=perm))


def _ops(m: Module) -> list[Op]:
    return [n.op for c in m.computations() for n in c.nodes if n.op is not Op.PARAMETER]


@pytest.mark.parametrize("dtype", ["f32", "f64", "s32"])
@pytest.mark.parametrize("case", list(CASES))
def test_layout_makes_the_dot_produce_the_transposed_layout(case, dtype):
    lhs, rhs, dims, perm = CASES[case]
    m = _dot_then(lhs, rhs, dims, perm, dtype)
    out, changed = LayoutAssignment().run(m)
    assert changed and _ops(out) == [Op.DOT_GENERAL], case
    rng = np.random.default_rng(0)
    np_dt = {"f32": np.float32, "f64": np.float64, "s32": np.int32}[dtype]
    args = [(rng.standard_normal(s) * 4).astype(np_dt) for s in (lhs, rhs)]
    want = evaluate(m, *args)[0]
    got = evaluate(out, *args)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_layout_keeps_a_dot_that_other_ops_read_directly():
    b = Builder("t")
    x, w = b.parameter("f32[5,3]"), b.parameter("f32[3,4]")
    d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    m = b.build(b.tuple(b.transpose(d, permutation=(1, 0)), b.exp(d)))
    out, changed = LayoutAssignment().run(m)
    assert not changed and Op.TRANSPOSE in _ops(out)  # computing both layouts would repeat the dot


def test_layout_keeps_a_transpose_that_reorders_dims_within_a_free_group():
    lhs, rhs, dims, _ = CASES["two free dims per side"]
    m = _dot_then(lhs, rhs, dims, (1, 0, 2, 3))  # swaps x's two free dims: no dot produces that
    assert transposed_dot(m.entry.root.operands[0], (1, 0, 2, 3)) is None
    out, changed = LayoutAssignment().run(m)
    assert not changed and Op.TRANSPOSE in _ops(out)


def test_layout_rewrites_inside_loop_bodies():
    def f(x, w):
        def body(i, acc):
            return acc + (x.T @ (x @ w)).T[:, :1].sum()
        return axle.lax.fori_loop(0, 3, body, anp.zeros((), np.float32))

    x, w = np.ones((6, 4), np.float32), np.ones((4, 5), np.float32)
    m = axle.jit(f).lower(x, w).module
    out = optimize(m)
    assert Op.TRANSPOSE not in _ops(out)
    np.testing.assert_allclose(evaluate(out, x, w)[0], evaluate(m, x, w)[0], rtol=1e-6)


def mnist_from_scratch_step(params, x, y):
    """jax's MNIST-from-scratch training step: tanh MLP, log-softmax cross-entropy, SGD."""
    def loss(params):
        a = x
        for w, b in params[:-1]:
            a = anp.tanh(a @ w + b)
        w, b = params[-1]
        logits = a @ w + b
        return -anp.mean(anp.sum((logits - nn.logsumexp(logits, axis=1, keepdims=True)) * y, axis=1))

    grads = axle.grad(loss)(params)
    return [(w - 0.001 * dw, b - 0.001 * db) for (w, b), (dw, db) in zip(params, grads)]


def test_mnist_step_has_no_transpose_after_optimization():
    """The weight gradients x^T dz come out in the weights' layout: no transpose (strided
    fusion read) remains in the optimized module, and each update fuses with its dot."""
    rng = np.random.default_rng(0)
    sizes = [784, 64, 32, 10]
    params = [((rng.standard_normal((m, n)) * 0.1).astype(np.float32), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((16, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)]
    with axle.device("interpreter:0"):
        lowered = axle.jit(mnist_from_scratch_step).lower(params, x, y)
    traced = lowered.module
    assert Op.TRANSPOSE in _ops(traced)  # autodiff's x^T dz, before the optimizer
    out = optimize(traced)
    assert Op.TRANSPOSE not in _ops(out)
    flat = [a for wb in params for a in wb] + [x, y]
    for got, want in zip(evaluate(out, *flat), evaluate(traced, *flat)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
