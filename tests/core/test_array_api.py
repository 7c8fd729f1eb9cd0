"""axle.numpy as an array API standard (2024.12) namespace: one test per function and
semantic rule that the external suite (data-apis/array-api-tests, docs/array-api.md)
exercises, so CI checks them without it. linalg: test_array_api_linalg.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

import axle
import axle.numpy as xp
from axle.errors import ArgumentError, DTypeError, ShapeError


def test_namespace_constants_and_dtypes():
    assert xp.__array_api_version__ == "2024.12"
    assert xp.bool is np.bool_ and xp.asarray([True]).dtype == xp.bool
    x = xp.asarray([1.0])
    assert x.__array_namespace__() is xp
    with pytest.raises(ArgumentError, match="api_version"):
        x.__array_namespace__(api_version="2099.12")


@pytest.mark.parametrize("arg", [xp.float32, np.dtype(np.float32), "array"])
def test_finfo_takes_dtypes_and_arrays_and_gives_python_numbers(arg):
    f = xp.finfo(xp.asarray(1.0, dtype=xp.float32) if arg == "array" else arg)
    assert (f.bits, f.dtype) == (32, np.float32)
    assert all(type(v) is float for v in (f.eps, f.max, f.min, f.smallest_normal))
    assert f.eps == float(np.finfo(np.float32).eps)
    with pytest.raises(DTypeError, match="finfo: needs a floating dtype"):
        xp.finfo(xp.int32)


def test_iinfo():
    i = xp.iinfo(xp.asarray([1], dtype=xp.int32))
    assert (i.bits, i.min, i.max, i.dtype) == (32, -2**31, 2**31 - 1, np.int32)
    assert type(i.max) is int
    with pytest.raises(DTypeError, match="iinfo"):
        xp.iinfo(xp.float64)


def test_isdtype_kinds_dtypes_and_tuples():
    assert xp.isdtype(xp.int64, "integral") and xp.isdtype(xp.int32, "signed integer")
    assert xp.isdtype(xp.float32, ("bool", "real floating")) and xp.isdtype(xp.bool, xp.bool)
    assert not xp.isdtype(xp.float64, "integral") and not xp.isdtype(xp.int64, "unsigned integer")
    assert xp.isdtype(xp.float64, "numeric") and not xp.isdtype(xp.bool, "numeric")
    with pytest.raises(ArgumentError, match="unknown kind"):
        xp.isdtype(xp.int64, "integer")


def test_can_cast_follows_the_promotion_table_within_a_kind():
    assert xp.can_cast(xp.int32, xp.int64) and xp.can_cast(xp.float32, xp.float64)
    assert not xp.can_cast(xp.int64, xp.int32) and not xp.can_cast(xp.float64, xp.float32)
    assert not xp.can_cast(xp.int32, xp.float64)  # cross-kind: not in the standard's table
    assert not xp.can_cast(xp.bool, xp.int32) and xp.can_cast(xp.asarray([True]), xp.bool)


def test_result_type_takes_dtypes_arrays_and_scalars():
    assert xp.result_type(xp.int32, xp.int64) == np.int64
    assert xp.result_type(xp.float32, xp.asarray([1], dtype=xp.int32)) == np.float64
    assert xp.result_type(xp.asarray([1.0], dtype=xp.float32), 2.0) == np.float32


def test_namespace_info():
    info = xp.__array_namespace_info__()
    caps = info.capabilities()
    assert caps["boolean indexing"] is True and caps["max dimensions"] > 0
    assert info.default_device() in info.devices() and all(isinstance(d, axle.Device) for d in info.devices())
    assert info.default_dtypes() == {"real floating": np.float64, "integral": np.int64, "indexing": np.int64}
    assert set(info.dtypes(kind="real floating")) == {"float32", "float64"}
    assert "float16" not in info.dtypes()  # not one of the standard's dtypes
    assert set(info.dtypes(kind=("bool", "signed integer"))) >= {"bool", "int32", "int64"}


def test_asarray_copy_semantics():
    x = xp.asarray([1.0, 2.0])
    assert xp.asarray(x) is x and xp.asarray(x, copy=False) is x
    y = xp.asarray(x, copy=True)
    assert y is not x and np.array_equal(np.asarray(y), [1.0, 2.0])
    with pytest.raises(ArgumentError, match="copy=False"):
        xp.asarray(np.ones(2), copy=False)  # host data must be copied to a device
    with pytest.raises(ArgumentError, match="copy=False"):
        xp.asarray(x, dtype=xp.float32, copy=False)


def test_astype_copy():
    x = xp.asarray([1.5, -2.5])
    assert xp.astype(x, xp.float64, copy=False) is x
    assert xp.astype(x, xp.float64) is not x
    assert np.array_equal(np.asarray(x.astype(xp.int64, copy=False)), [1, -2])


def test_setitem_rebinds_and_never_changes_other_arrays():
    x = xp.arange(6.0).reshape(2, 3)
    alias, snapshot = x, xp.asarray(x, copy=True)
    x[0, 1] = 7.0
    x[1] = xp.asarray([9.0, 9.0, 9.0])
    assert alias is x
    np.testing.assert_array_equal(np.asarray(x), [[0, 7, 2], [9, 9, 9]])
    np.testing.assert_array_equal(np.asarray(snapshot), [[0, 1, 2], [3, 4, 5]])

    @axle.jit
    def f(a):
        a[1] = 0.0
        return a * 2

    np.testing.assert_array_equal(np.asarray(f(np.ones(3))), [2, 0, 2])


def test_creation_device_and_default_dtypes():
    assert xp.ones(()).dtype == np.float64 and xp.ones((), dtype=None).dtype == np.float64
    assert xp.zeros(2).dtype == xp.empty(2).dtype == xp.eye(2).dtype == np.float64
    assert xp.full((), 3).dtype == np.int64 and xp.full((), True).dtype == np.bool_
    for make in (lambda d: xp.zeros(3, device=d), lambda d: xp.ones(3, device=d), lambda d: xp.arange(3, device=d),
                 lambda d: xp.full(2, 1.0, device=d), lambda d: xp.eye(2, device=d),
                 lambda d: xp.linspace(0, 1, 3, device=d), lambda d: xp.asarray([1], device=d),
                 lambda d: xp.zeros_like(xp.ones(2), device=d), lambda d: xp.empty_like(xp.ones(2), device=d),
                 lambda d: xp.tri(2, device=d)):
        a = make("interpreter:0")
        assert a.device == axle.device("interpreter:0") and a.committed
    moved = xp.ones(2).to_device("interpreter:0")
    assert moved.device.name == "interpreter:0"


def test_arange_infers_float_from_any_float_argument():
    a = xp.arange(3.14, None, step=337)
    assert a.dtype == np.float64 and np.asarray(a).tolist() == [0.0]
    assert xp.arange(0, 1, 0.5).dtype == np.float64 and xp.arange(3).dtype == np.int64


def test_std_var_correction():
    x = np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]])
    np.testing.assert_allclose(np.asarray(xp.var(x, axis=1, correction=1)), np.var(x, axis=1, ddof=1))
    np.testing.assert_allclose(np.asarray(xp.std(x, correction=1.5)), np.std(x, ddof=1.5))
    with pytest.raises(ArgumentError, match="not both"):
        xp.var(x, ddof=1, correction=1)


def test_meshgrid_xy_and_ij():
    a, b, c = np.arange(2.0), np.arange(3.0), np.arange(4.0)
    for indexing in ("xy", "ij"):
        for got, want in zip(xp.meshgrid(a, b, c, indexing=indexing), np.meshgrid(a, b, c, indexing=indexing)):
            np.testing.assert_array_equal(np.asarray(got), want)
    with pytest.raises(ArgumentError, match="indexing"):
        xp.meshgrid(a, indexing="xx")


@pytest.mark.parametrize("k", [-2, 0, 1, 5])
def test_tril_triu_tri(k):
    x = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(np.asarray(xp.tril(x, k=k)), np.tril(x, k))
    np.testing.assert_array_equal(np.asarray(xp.triu(x, k=k)), np.triu(x, k))
    np.testing.assert_array_equal(np.asarray(xp.tri(3, 4, k)), np.tri(3, 4, k))
    with pytest.raises(ShapeError, match="tril"):
        xp.tril(np.arange(3))


def test_roll():
    x = np.arange(12).reshape(3, 4)
    for shift, axis in ((1, None), (-5, None), (2, 1), ((1, -1), (0, 1)), (7, 0)):
        np.testing.assert_array_equal(np.asarray(xp.roll(x, shift, axis=axis)), np.roll(x, shift, axis))


def test_diff():
    x = np.array([[1, 4, 9, 16], [2, 3, 5, 7]])
    np.testing.assert_array_equal(np.asarray(xp.diff(x)), np.diff(x))
    np.testing.assert_array_equal(np.asarray(xp.diff(x, axis=0, n=1)), np.diff(x, axis=0))
    np.testing.assert_array_equal(np.asarray(xp.diff(x, n=2, prepend=x[:, :1], append=x[:, -1:])),
                                  np.diff(x, n=2, prepend=x[:, :1], append=x[:, -1:]))
    b = np.array([True, False, False, True])
    np.testing.assert_array_equal(np.asarray(xp.diff(b)), np.diff(b))


def test_cumulative_sum_and_prod():
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
    out = xp.cumulative_sum(x, axis=1)
    assert out.dtype == np.int64  # the default integer, as sum accumulates
    np.testing.assert_array_equal(np.asarray(out), np.cumsum(x, axis=1))
    np.testing.assert_array_equal(np.asarray(xp.cumulative_prod(x, axis=0, include_initial=True)),
                                  np.concatenate([np.ones((1, 3)), np.cumprod(x, axis=0)]))
    # a scan, not a triangular matmul: an infinity does not turn earlier sums into nan
    np.testing.assert_array_equal(np.asarray(xp.cumulative_sum(np.array([1.0, np.inf, 2.0]))), [1.0, np.inf, np.inf])
    np.testing.assert_array_equal(np.asarray(xp.cumulative_sum(np.arange(11.0), include_initial=True)),
                                  np.concatenate([[0.0], np.cumsum(np.arange(11.0))]))
    with pytest.raises(ShapeError, match="axis is required"):
        xp.cumulative_sum(x)
    # small unsigned integers accumulate in the default unsigned integer (the standard, NumPy)
    u = np.array([200, 100, 7], dtype=np.uint8)
    for fn, ref in ((xp.cumulative_sum, np.cumsum), (xp.cumulative_prod, np.cumprod)):
        got = fn(u)
        assert got.dtype == np.uint64, fn.__name__
        np.testing.assert_array_equal(np.asarray(got), ref(u.astype(np.uint64)))


def test_cumsum_keeps_infinities_in_place():
    # regression: cumsum was a triangular matmul, so inf * 0 made the sums before it nan
    np.testing.assert_array_equal(np.asarray(xp.cumsum(np.array([1.0, np.inf, 2.0]))), [1.0, np.inf, np.inf])
    np.testing.assert_array_equal(np.asarray(xp.cumsum(np.array([[1.0, -np.inf], [np.nan, 1.0]]), axis=0)),
                                  [[1.0, -np.inf], [np.nan, -np.inf]])


def test_broadcast_arrays_concat_permute_dims_unstack():
    a, b = xp.broadcast_arrays(np.ones((2, 1)), np.arange(3))
    assert a.shape == b.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(xp.concat((np.ones(2), np.zeros(1)))), [1, 1, 0])
    np.testing.assert_array_equal(np.asarray(xp.concat([np.ones((1, 2)), np.ones((1, 2))], axis=None)), np.ones(4))
    x = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(np.asarray(xp.permute_dims(x, (2, 0, 1))), x.transpose(2, 0, 1))
    parts = xp.unstack(x, axis=1)
    assert isinstance(parts, tuple) and len(parts) == 3
    np.testing.assert_array_equal(np.asarray(parts[2]), x[:, 2])


def test_moveaxis_with_tuples_and_expand_dims_with_tuples():
    x = np.zeros((1, 2, 3, 4))
    assert xp.moveaxis(x, (0, 1), (3, 0)).shape == np.moveaxis(x, (0, 1), (3, 0)).shape
    assert xp.moveaxis(x, -1, 0).shape == (4, 1, 2, 3)
    with pytest.raises(ShapeError, match="moveaxis"):
        xp.moveaxis(x, (0, 1), (2,))
    assert xp.expand_dims(np.zeros((2, 3)), axis=(0, -1)).shape == (1, 2, 3, 1)


def test_repeat_with_an_array_of_repeats():
    x = np.array([[1, 2], [3, 4]])
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, xp.asarray([1, 0]), axis=0)), np.repeat(x, [1, 0], axis=0))
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, np.array([2, 1, 0, 3]))), np.repeat(x, [2, 1, 0, 3]))
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, 2, axis=1)), np.repeat(x, 2, axis=1))
    # exact: the sign of a zero and NaN survive (a one-hot sum turned -0.0 into 0.0)
    z = xp.repeat(np.array([-0.0, np.nan, -np.inf]), np.array([2, 1, 1]))
    assert np.array_equal(np.signbit(np.asarray(z)), [True, True, False, True])
    np.testing.assert_array_equal(np.asarray(z), [-0.0, -0.0, np.nan, -np.inf])
    assert np.array_equal(np.asarray(xp.repeat(np.array([True, False]), np.array([1, 2]))), [True, False, False])
    with pytest.raises(ShapeError, match="repeats must have known values"):
        axle.jit(lambda a, r: xp.repeat(a, r))(x, np.array([1, 1, 1, 1]))


def test_squeeze_flip_tile_take_along_axis_default_axis():
    x = np.arange(6).reshape(1, 2, 3)
    assert xp.squeeze(x, axis=0).shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(xp.flip(x, axis=(1, 2))), np.flip(x, (1, 2)))
    np.testing.assert_array_equal(np.asarray(xp.tile(x, (2, 1, 1))), np.tile(x, (2, 1, 1)))
    idx = np.array([[[2, 0, 1], [0, 0, 0]]])
    np.testing.assert_array_equal(np.asarray(xp.take_along_axis(x, idx)), np.take_along_axis(x, idx, -1))


def test_vecdot_and_matrix_transpose():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    np.testing.assert_array_equal(np.asarray(xp.vecdot(a, b)), a @ b)
    np.testing.assert_array_equal(np.asarray(xp.vecdot(a.T, a.T, axis=0)), np.sum(a * a, axis=1))
    assert xp.vecdot(np.ones(3, np.int32), np.ones(3, np.int32)).dtype == np.int32
    with pytest.raises(ShapeError, match="vecdot"):
        xp.vecdot(np.ones((2, 3)), np.ones((2, 1)))  # the vectors themselves never broadcast
    x = xp.asarray(np.arange(24).reshape(2, 3, 4))
    assert xp.matrix_transpose(x).shape == x.mT.shape == (2, 4, 3)


def test_count_nonzero_nonzero_argwhere():
    x = np.array([[0, 1, 2], [3, 0, 0]])
    np.testing.assert_array_equal(np.asarray(xp.count_nonzero(x, axis=1, keepdims=True)), [[2], [1]])
    for got, want in zip(xp.nonzero(x), np.nonzero(x)):
        np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(xp.argwhere(x)), np.argwhere(x))
    assert xp.argwhere(xp.asarray(3)).shape == (1, 0)


def test_nonzero_under_jit_needs_a_static_size():
    x = np.array([[0, 1, 2], [3, 0, 0]])
    rows, cols = axle.jit(lambda a: xp.nonzero(a, size=5, fill_value=-1))(x)
    np.testing.assert_array_equal(np.asarray(rows), [0, 0, 1, -1, -1])
    np.testing.assert_array_equal(np.asarray(cols), [1, 2, 0, -1, -1])
    short = axle.jit(lambda a: xp.nonzero(a, size=2)[1])(x)
    np.testing.assert_array_equal(np.asarray(short), [1, 2])
    with pytest.raises(ShapeError, match="pass a static size="):
        axle.jit(lambda a: xp.nonzero(a))(x)


def test_copy_conj_and_dlpack_round_trips():
    x = xp.asarray([1.0, 2.0, 3.0])
    assert xp.copy(x) is not x and np.array_equal(np.asarray(xp.copy(x)), [1, 2, 3])
    assert x.copy() is not x and np.array_equal(np.asarray(x.copy()), [1, 2, 3])
    assert xp.conj(x) is x
    host = np.from_dlpack(x)
    np.testing.assert_array_equal(host, [1, 2, 3])
    assert x.__dlpack_device__() == (1, 0)
    back = xp.from_dlpack(np.arange(4.0))
    assert isinstance(back, axle.Array) and np.array_equal(np.asarray(back), np.arange(4.0))
    with pytest.raises(ArgumentError, match="copy=False"):
        xp.from_dlpack(np.arange(4.0), copy=False)


def test_random_conveniences_are_reproducible_and_in_range():
    g1, g2 = xp.random.default_rng(42), xp.random.default_rng(42)
    a, b = g1.random((1000,)), g2.random((1000,))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(g1.random(3)), np.asarray(a[:3]))  # each draw advances the state
    assert 0.0 <= float(xp.min(a)) and float(xp.max(a)) < 1.0
    ints = np.asarray(g1.integers(2, 5, size=500, endpoint=True))
    assert set(ints.tolist()) == {2, 3, 4, 5}
    assert sorted(np.asarray(g1.permutation(6)).tolist()) == list(range(6))
    picks = np.asarray(g1.choice(4, 4000, p=[0.5, 0.0, 0.25, 0.25]))
    assert 1 not in picks and abs(np.mean(picks == 0) - 0.5) < 0.05
    assert len(set(np.asarray(g1.choice(10, 10, replace=False)).tolist())) == 10
    xp.random.seed(3)
    first = np.asarray(xp.random.randn(2, 2))
    xp.random.seed(3)
    np.testing.assert_array_equal(np.asarray(xp.random.randn(2, 2)), first)
    n = np.asarray(g1.normal(3.0, 0.5, size=20000))
    assert abs(n.mean() - 3.0) < 0.02 and abs(n.std() - 0.5) < 0.02
    assert math.isfinite(float(xp.random.uniform(-1.0, 1.0)))
