"""NumPy parity of axle.numpy: every function on several shapes and dtypes (size 0 and 1,
scalars, odd sizes, NaN/inf), each in eager, jit, jit_scope and auto modes."""
from __future__ import annotations

import numpy as np
import pytest
from modes_util import check_all_modes

import axle.numpy as anp

SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 1, 4)]
FLOATS = [np.float32, np.float64]
RNG = np.random.default_rng(42)


def data(shape, dt, *, special=True, positive=False, low=-3.0, high=3.0):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return RNG.random(shape) < 0.5
    if dt.kind == "i":
        return RNG.integers(-5 if not positive else 1, 6, size=shape).astype(dt)
    x = RNG.uniform(0.1 if positive else low, high, size=shape).astype(dt)
    if special and x.size >= 4:
        flat = x.reshape(-1)
        flat[:3] = [np.nan, np.inf, -np.inf] if not positive else [np.nan, np.inf, 0.0]
    return x


def _id(v):
    return getattr(v, "__name__", None) or str(v)


# ------------------------------------------------------------------ elementwise

UNARY_FLOAT = [
    ("exp", anp.exp, np.exp, {}), ("log", anp.log, np.log, {"positive": True}),
    ("log1p", anp.log1p, np.log1p, {"positive": True}), ("expm1", anp.expm1, np.expm1, {}),
    ("sqrt", anp.sqrt, np.sqrt, {"positive": True}), ("tanh", anp.tanh, np.tanh, {}),
    ("sin", anp.sin, np.sin, {"special": False}), ("cos", anp.cos, np.cos, {"special": False}),
    ("abs", anp.abs, np.abs, {}), ("sign", anp.sign, np.sign, {}), ("floor", anp.floor, np.floor, {}),
    ("ceil", anp.ceil, np.ceil, {}), ("negative", anp.negative, np.negative, {}),
    ("square", anp.square, np.square, {}), ("isnan", anp.isnan, np.isnan, {}),
    ("isinf", anp.isinf, np.isinf, {}), ("isfinite", anp.isfinite, np.isfinite, {}),
]


@pytest.mark.parametrize("name,fn,ref,kw", UNARY_FLOAT, ids=[u[0] for u in UNARY_FLOAT])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dt", [np.float16] + FLOATS, ids=_id)
def test_unary_float(name, fn, ref, kw, shape, dt):
    x = data(shape, dt, **kw)
    with np.errstate(all="ignore"):
        check_all_modes(fn, ref, x)


@pytest.mark.parametrize("name,fn,ref", [("abs", anp.abs, np.abs), ("sign", anp.sign, np.sign),
                                         ("negative", anp.negative, np.negative), ("square", anp.square, np.square)])
@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_unary_int(name, fn, ref, dt):
    check_all_modes(fn, ref, data((3, 4), dt))


BINARY = [
    ("add", anp.add, np.add), ("subtract", anp.subtract, np.subtract), ("multiply", anp.multiply, np.multiply),
    ("true_divide", anp.true_divide, np.true_divide), ("maximum", anp.maximum, np.maximum),
    ("minimum", anp.minimum, np.minimum), ("power", anp.power, np.power),
    ("equal", anp.equal, np.equal), ("less", anp.less, np.less), ("greater_equal", anp.greater_equal, np.greater_equal),
]
BROADCAST_PAIRS = [((), ()), ((7,), ()), ((3, 5), (5,)), ((3, 1), (1, 4)), ((0, 3), (1, 3)), ((2, 1, 4), (3, 1))]


@pytest.mark.parametrize("name,fn,ref", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("dts", [(np.float32, np.float32), (np.float64, np.float64), (np.float32, np.float64),
                                 (np.int32, np.float32), (np.int64, np.int32), (np.float16, np.float16),
                                 (np.float16, np.int32), (np.bool_, np.float32)], ids=str)
def test_binary_broadcast_promote(name, fn, ref, shapes, dts):
    pos = name == "power"
    x = data(shapes[0], dts[0], special=not pos, positive=pos)
    y = data(shapes[1], dts[1], special=False, positive=pos)
    if name == "true_divide" or (name == "power" and np.dtype(dts[0]).kind == "i" == np.dtype(dts[1]).kind):
        y = np.where(y == 0, 1, y).astype(y.dtype)
    if name == "power" and np.dtype(dts[0]).kind == "i" and np.dtype(dts[1]).kind == "i":
        y = np.abs(y)
    with np.errstate(all="ignore"):
        check_all_modes(fn, ref, x, y)


@pytest.mark.parametrize("scalar", [2, 2.5, True])
@pytest.mark.parametrize("dt", [np.float32, np.int32, np.float64])
def test_python_scalars_are_weak(scalar, dt):
    """NEP 50: x_f32 * 2.0 stays float32; int32 + 2 stays int32; int32 * 2.5 -> float64."""
    x = data((4,), dt, special=False)
    check_all_modes(lambda a: a * scalar + scalar, lambda a: a * scalar + scalar, x)
    check_all_modes(lambda a: scalar - a, lambda a: scalar - a, x)


@pytest.mark.parametrize("dt", [np.int32, np.int64, np.float64])
def test_floor_divide_and_remainder(dt):
    x = data((4, 6), dt, special=False) * 3
    y = data((6,), dt, special=False)
    y = np.where(y == 0, 2, y).astype(dt)
    check_all_modes(lambda a, b: (a // b, a % b, anp.fmod(a, b)), lambda a, b: (a // b, a % b, np.fmod(a, b)), x, y)


def test_operators_reflected_comparisons_bitwise():
    x = data((3, 4), np.float32, special=False)
    b = data((3, 4), np.bool_)
    i = data((3, 4), np.int32)
    check_all_modes(lambda a: (2 - a, 2 / (a + 10), 2 ** a, -a, +a, abs(a), a < 1, a >= 0, a == a, a != 0.5),
                    lambda a: (2 - a, 2 / (a + 10), 2 ** a, -a, +a, abs(a), a < 1, a >= 0, a == a, a != 0.5), x)
    check_all_modes(lambda p, q: (p & (q > 0), p | (q < 0), ~p, q & 3, q | 8, ~q),
                    lambda p, q: (p & (q > 0), p | (q < 0), ~p, q & 3, q | 8, ~q), b, i)
    check_all_modes(lambda a, c: a @ c, lambda a, c: a @ c, x, data((4, 2), np.float32, special=False))


@pytest.mark.parametrize("dt", FLOATS + [np.int32])
def test_clip_where(dt):
    x = data((5, 4), dt, special=False)
    check_all_modes(lambda a: (anp.clip(a, -1, 2), anp.where(a > 0, a, 0 * a), anp.clip(a, a_min=0)),
                    lambda a: (np.clip(a, -1, 2), np.where(a > 0, a, 0 * a), np.clip(a, 0, None)), x)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_astype(dt):
    x = data((3, 4), np.float32, special=False) * 4
    check_all_modes(lambda a: a.astype(dt), lambda a: a.astype(dt), x)


# ------------------------------------------------------------------ reductions

RED_SHAPES = [((7,), None), ((3, 5), 0), ((3, 5), 1), ((3, 5), None), ((2, 3, 4), (0, 2)), ((1, 4), -1), ((0, 3), 0)]
REDUCTIONS = [("sum", anp.sum, np.sum), ("mean", anp.mean, np.mean), ("prod", anp.prod, np.prod),
              ("max", anp.max, np.max), ("min", anp.min, np.min), ("var", anp.var, np.var), ("std", anp.std, np.std)]


# NumPy raises on an empty max/min (so does axle: see test_numpy_errors)
RED_CASES = [(r, s) for r in REDUCTIONS for s in RED_SHAPES if not (r[0] in ("max", "min") and 0 in s[0])]


@pytest.mark.parametrize("red,shape_axis", RED_CASES, ids=[f"{r[0]}-{s}" for r, s in RED_CASES])
@pytest.mark.parametrize("dt", FLOATS + [np.int32])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_reductions(red, shape_axis, dt, keepdims):
    (_, fn, ref), (shape, axis) = red, shape_axis
    x = data(shape, dt, special=False)
    with np.errstate(all="ignore"):
        check_all_modes(lambda a: fn(a, axis=axis, keepdims=keepdims), lambda a: ref(a, axis=axis, keepdims=keepdims), x)


@pytest.mark.parametrize("fn,ref", [(anp.all, np.all), (anp.any, np.any)], ids=["all", "any"])
@pytest.mark.parametrize("shape,axis", RED_SHAPES, ids=str)
def test_all_any(fn, ref, shape, axis):
    x = data(shape, np.bool_)
    check_all_modes(lambda a: fn(a, axis=axis), lambda a: ref(a, axis=axis), x)
    check_all_modes(lambda a: fn(a > 0, axis=axis, keepdims=True), lambda a: ref(a > 0, axis=axis, keepdims=True),
                    data(shape, np.float32))


@pytest.mark.parametrize("fn,ref", [(anp.argmax, np.argmax), (anp.argmin, np.argmin)], ids=["argmax", "argmin"])
@pytest.mark.parametrize("shape,axis", [((7,), None), ((3, 5), 0), ((3, 5), 1), ((3, 5), None), ((2, 3, 4), -1),
                                        ((1,), 0)], ids=str)
@pytest.mark.parametrize("dt", FLOATS + [np.int32, np.bool_])
def test_arg_reductions(fn, ref, shape, axis, dt):
    x = data(shape, dt, special=False)
    if np.dtype(dt).kind == "f" and x.size > 3:
        x.reshape(-1)[2] = x.reshape(-1)[1]  # ties: the first index wins
    check_all_modes(lambda a: fn(a, axis=axis), lambda a: ref(a, axis=axis), x)


def test_argmax_nan_first():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, 0.0]], np.float32)
    check_all_modes(lambda a: (anp.argmax(a, 1), anp.argmin(a, 1)), lambda a: (np.argmax(a, 1), np.argmin(a, 1)), x)


# ------------------------------------------------------------------ shapes and creation


@pytest.mark.parametrize("dt", [np.float32, np.int64])
def test_shape_ops(dt):
    x = data((2, 3, 4), dt, special=False)
    cases = [
        (lambda a: a.reshape(6, 4), lambda a: a.reshape(6, 4)),
        (lambda a: anp.reshape(a, (-1, 2)), lambda a: np.reshape(a, (-1, 2))),
        (lambda a: anp.transpose(a), lambda a: np.transpose(a)),
        (lambda a: anp.transpose(a, (1, 0, 2)), lambda a: np.transpose(a, (1, 0, 2))),
        (lambda a: anp.swapaxes(a, 0, 2), lambda a: np.swapaxes(a, 0, 2)),
        (lambda a: anp.moveaxis(a, 0, -1), lambda a: np.moveaxis(a, 0, -1)),
        (lambda a: anp.expand_dims(a, (0, 2)), lambda a: np.expand_dims(a, (0, 2))),
        (lambda a: anp.squeeze(anp.expand_dims(a, 1)), lambda a: np.squeeze(np.expand_dims(a, 1))),
        (lambda a: anp.broadcast_to(a[:, :1], (5, 2, 1, 4)), lambda a: np.broadcast_to(a[:, :1], (5, 2, 1, 4))),
        (lambda a: anp.concatenate([a, a[:, :1]], axis=1), lambda a: np.concatenate([a, a[:, :1]], axis=1)),
        (lambda a: anp.concatenate([a, a], axis=None), lambda a: np.concatenate([a, a], axis=None)),
        (lambda a: anp.stack([a, a, a], axis=-1), lambda a: np.stack([a, a, a], axis=-1)),
        (lambda a: tuple(anp.split(a, 2, axis=2)), lambda a: tuple(np.split(a, 2, axis=2))),
        (lambda a: tuple(anp.split(a, [1, 2], axis=1)), lambda a: tuple(np.split(a, [1, 2], axis=1))),
        (lambda a: anp.flip(a), lambda a: np.flip(a)),
        (lambda a: anp.flip(a, 1), lambda a: np.flip(a, 1)),
        (lambda a: anp.pad(a, 1), lambda a: np.pad(a, 1)),
        (lambda a: anp.pad(a, ((0, 1), (2, 0), (1, 1)), constant_values=7),
         lambda a: np.pad(a, ((0, 1), (2, 0), (1, 1)), constant_values=7)),
        (lambda a: anp.tile(a[0], (2, 1)), lambda a: np.tile(a[0], (2, 1))),
        (lambda a: anp.repeat(a[0], 2, axis=0), lambda a: np.repeat(a[0], 2, axis=0)),
        (lambda a: a.flatten(), lambda a: a.flatten()),
        (lambda a: a.T, lambda a: a.T),
    ]
    for fn, ref in cases:
        check_all_modes(fn, ref, x)


def test_creation():
    x = data((2, 3), np.float32, special=False)
    check_all_modes(
        lambda a: (anp.zeros((2, 3)), anp.ones(4, np.int32), anp.full((2, 2), 7.5, np.float32), anp.zeros_like(a),
                   anp.ones_like(a, dtype=np.int64), anp.full_like(a, 3), anp.arange(5), anp.arange(1, 10, 3),
                   anp.arange(0.5, 3.0, 0.5), anp.linspace(0, 1, 7), anp.linspace(-1, 1, 4, endpoint=False),
                   anp.linspace(2, 3, 1), anp.eye(3), anp.eye(2, 4, k=1, dtype=np.int32), anp.arange(0)),
        lambda a: (np.zeros((2, 3)), np.ones(4, np.int32), np.full((2, 2), 7.5, np.float32), np.zeros_like(a),
                   np.ones_like(a, dtype=np.int64), np.full_like(a, 3), np.arange(5), np.arange(1, 10, 3),
                   np.arange(0.5, 3.0, 0.5), np.linspace(0, 1, 7), np.linspace(-1, 1, 4, endpoint=False),
                   np.linspace(2, 3, 1), np.eye(3), np.eye(2, 4, k=1, dtype=np.int32), np.arange(0)),
        x)


# ------------------------------------------------------------------ indexing

BASIC_INDICES = [0, -1, (1, 2), slice(None, None, -1), (slice(1, None), slice(None, 3)), (Ellipsis, 1),
                 (None, 0), (slice(None, None, 2), None, slice(4, 0, -2)), (0, 0, 0)]


@pytest.mark.parametrize("idx", BASIC_INDICES, ids=str)
def test_basic_indexing(idx):
    x = data((3, 4, 5), np.float32, special=False)
    check_all_modes(lambda a: a[idx], lambda a: a[idx], x)


ADV_INDICES = [
    np.array([2, 0, 2]), [1, -1], (slice(None), np.array([3, 0])), (np.array([[0, 1], [2, 2]]),),
    (np.array([0, 2]), np.array([1, 3])), (Ellipsis, np.array([4, 0, 1])), (0, np.array([1, 1, 0])),
]


@pytest.mark.parametrize("idx", ADV_INDICES, ids=str)
@pytest.mark.parametrize("dt", [np.float32, np.int32, np.bool_])
def test_integer_array_indexing(idx, dt):
    x = data((3, 4, 5), dt, special=False)
    check_all_modes(lambda a: a[idx], lambda a: a[idx], x)


def test_boolean_masks():
    x = data((4, 5), np.float64)
    mask = data((4, 5), np.bool_)
    row_mask = np.array([True, False, True, True])
    check_all_modes(lambda a: (a[mask], a[row_mask], a[:, mask[0]], a[np.zeros((4, 5), bool)]),
                    lambda a: (a[mask], a[row_mask], a[:, mask[0]], a[np.zeros((4, 5), bool)]), x)


def test_traced_integer_index():
    """Index arrays that are traced values (jit arguments) have static shapes."""
    x = data((5, 3), np.float32, special=False)
    idx = np.array([4, 0, -1, 2])
    check_all_modes(lambda a, i: (a[i], anp.take(a, i, axis=0), anp.take(a, i[1:3], axis=1)),
                    lambda a, i: (a[i], np.take(a, i, axis=0), np.take(a, i[1:3], axis=1)), x, idx)
    check_all_modes(lambda a, i: anp.take_along_axis(a, i, 1), lambda a, i: np.take_along_axis(a, i, 1),
                    x, np.array([[0, 2], [1, 1], [2, 0], [0, 0], [1, 2]]))


def _np_set(a, idx, v):
    b = a.copy()
    b[idx] = v
    return b


def _np_add(a, idx, v):
    b = a.copy()
    np.add.at(b, idx, v)
    return b


@pytest.mark.parametrize("idx", [1, (slice(None), 2), (slice(1, None, 2), slice(None, None, -2)), (Ellipsis, 0),
                                 np.array([0, 2, 2]), (np.array([0, 1]), np.array([3, 3]))], ids=str)
@pytest.mark.parametrize("dt", [np.float32, np.int64])
def test_at_updates(idx, dt):
    x = data((3, 4), dt, special=False)
    check_all_modes(lambda a: (a.at[idx].set(9), a.at[idx].add(2), a.at[idx].get(), a.at[idx].multiply(3)),
                    lambda a: (_np_set(a, idx, 9), _np_add(a, idx, 2), a[idx], _mul_ref(a, idx)), x)


def _mul_ref(a, idx):
    b = a.copy()
    np.multiply.at(b, idx, 3)  # duplicates multiply in every time, as jax's .at[].multiply (and .add)
    return b


def test_at_traced_index_accumulates_duplicates():
    x = data((5, 2), np.float32, special=False)
    i = np.array([1, 1, 4])
    v = data((3, 2), np.float32, special=False)
    check_all_modes(lambda a, k, w: a.at[k].add(w), lambda a, k, w: _np_add(a, k, w), x, i, v)


# ------------------------------------------------------------------ linear algebra

MATMUL_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                 ((5, 2, 3), (1, 3, 4)), ((1, 1), (1, 1)), ((0, 3), (3, 2)), ((2, 0), (0, 3)),
                 ((2, 1, 2, 3), (3,)), ((0, 2, 3), (3, 4)), ((2, 3), (5, 3, 4))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("dts", [(np.float32, np.float32), (np.float64, np.float64), (np.int32, np.float32),
                                 (np.int64, np.int64)], ids=str)
def test_matmul_dot(shapes, dts):
    a = data(shapes[0], dts[0], special=False)
    b = data(shapes[1], dts[1], special=False)
    check_all_modes(lambda x, y: (anp.matmul(x, y), anp.dot(x, y) if x.ndim <= 2 and y.ndim <= 2 else x @ y),
                    lambda x, y: (np.matmul(x, y), np.dot(x, y) if x.ndim <= 2 and y.ndim <= 2 else x @ y), a, b)


def test_matmul_against_a_matrix_reads_it_once():
    """[..., M, K] @ [K, N] is one dot_general without batch dims (as jax traces it): the
    matrix is not broadcast along the batch dims (a copy per batch), and its gradient is one
    contraction over every leading dim, not a batched product and a sum."""
    import axle

    x, w = data((4, 2, 3), np.float32, special=False), data((3, 5), np.float32, special=False)
    text = axle.jit(lambda a, b: a @ b).lower(x, w).as_text()
    assert "broadcast" not in text and "lhs_batch={}, lhs_contracting={2}, rhs_batch={}, rhs_contracting={0}" in text
    grad = axle.jit(axle.grad(lambda b, a: anp.sum(anp.tanh(a @ b)))).lower(w, x).as_text()
    assert grad.count(" dot(") == 2 and "lhs_contracting={0,1}" in grad and "reduce" not in grad  # forward, gradient


EINSUMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,kj->ik", [(2, 3), (4, 3)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,j->ij", [(3,), (4,)]), ("i,i->", [(5,), (5,)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]), ("ij,jk", [(2, 3), (3, 2)]),
]


@pytest.mark.parametrize("spec,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
@pytest.mark.parametrize("dt", FLOATS)
def test_einsum(spec, shapes, dt):
    ops = [data(s, dt, special=False) for s in shapes]
    check_all_modes(lambda *xs: anp.einsum(spec, *xs), lambda *xs: np.einsum(spec, *xs), *ops)


def test_tensordot_outer_inner():
    a = data((2, 3, 4), np.float64, special=False)
    b = data((4, 3, 5), np.float64, special=False)
    check_all_modes(lambda x, y: (anp.tensordot(x, y, ([1, 2], [1, 0])), anp.outer(x[0, 0], y[0, 0]),
                                  anp.inner(x[0], y[:, 0, 0]), anp.tensordot(x[0], y[:, :, 0], 1)),
                    lambda x, y: (np.tensordot(x, y, ([1, 2], [1, 0])), np.outer(x[0, 0], y[0, 0]),
                                  np.inner(x[0], y[:, 0, 0]), np.tensordot(x[0], y[:, :, 0], 1)), a, b)


def test_array_methods():
    x = data((3, 4), np.float64, special=False)
    check_all_modes(
        lambda a: (a.sum(0), a.mean(1, keepdims=True), a.max(), a.min(0), a.prod(1), a.var(0), a.std(ddof=1),
                   a.argmax(1), a.argmin(), (a > 0).all(1), (a > 0).any(), a.clip(-1, 1), a[:1].squeeze(0),
                   a.swapaxes(0, 1), a.dot(a.T), a.take(np.array([0, 2]), 1), a.ravel(), a.astype(np.int32),
                   a.reshape(2, 6), a.transpose(1, 0)),
        lambda a: (a.sum(0), a.mean(1, keepdims=True), a.max(), a.min(0), a.prod(1), a.var(0), a.std(ddof=1),
                   a.argmax(1), a.argmin(), (a > 0).all(1), (a > 0).any(), a.clip(-1, 1), a[:1].squeeze(0),
                   a.swapaxes(0, 1), a.dot(a.T), a.take(np.array([0, 2]), 1), a.ravel(), a.astype(np.int32),
                   a.reshape(2, 6), a.transpose(1, 0)), x)


def test_extras():
    x = data((3, 4), np.float32, special=False)
    check_all_modes(
        lambda a: (anp.hstack([a, a]), anp.vstack([a[0], a[1]]), anp.atleast_2d(a[0, 0]), anp.atleast_1d(a[0, 0]),
                   anp.reciprocal(a + 10), anp.logaddexp(a, a * 2), anp.cumsum(a, axis=1), anp.cumsum(a),
                   anp.identity(3), anp.empty((2,)), tuple(anp.array_split(a, 3, axis=1)), anp.fliplr(a),
                   anp.flipud(a), anp.vdot(a, a), anp.trace(a[:, :3]), anp.fmod(a, 0.7)),
        lambda a: (np.hstack([a, a]), np.vstack([a[0], a[1]]), np.atleast_2d(a[0, 0]), np.atleast_1d(a[0, 0]),
                   np.reciprocal(a + 10), np.logaddexp(a, a * 2), np.cumsum(a, axis=1), np.cumsum(a),
                   np.identity(3), np.zeros((2,)), tuple(np.array_split(a, 3, axis=1)), np.fliplr(a),
                   np.flipud(a), np.vdot(a, a), np.trace(a[:, :3]), np.fmod(a, np.float32(0.7))), x)
