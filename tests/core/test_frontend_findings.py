"""Regression tests for the frontend findings of issue 12: values never change silently
(refused dtypes), logaddexp and friends at +-inf, argument validation naming the user's
function and line, traced index semantics and --check_indices, retrace reasons."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import nn
from axle.recompile import RecompilationWarning
from axle.testing import require_backend

BACKENDS = ("interpreter", "cpu", "opencl", "template")


@pytest.fixture(params=BACKENDS)
def device(request):
    return require_backend(request.param)


# ---------------------------------------------------------------- finding 10: logaddexp at +-inf

SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0, 1.0, -3.5, 1e30], np.float64)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_logaddexp_matches_numpy_at_inf_and_nan(device, dt):
    x, y = (v.astype(dt) for v in np.meshgrid(SPECIAL, SPECIAL))
    with device, np.errstate(all="ignore"):
        got = np.asarray(anp.logaddexp(x, y))
        jitted = np.asarray(axle.jit(anp.logaddexp)(x, y))
        want = np.logaddexp(x, y)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(jitted, want, rtol=1e-6)
    assert got[0, 0] == np.inf and got[1, 1] == -np.inf  # the cases that gave nan


def test_logsumexp_softmax_softplus_with_infinities(device):
    rows = np.array([[np.inf, 1], [-np.inf, -np.inf], [np.nan, 1], [1, 2], [-np.inf, 3]])
    with device, np.errstate(all="ignore"):
        lse = np.log(np.sum(np.exp(rows), axis=1))
        np.testing.assert_allclose(np.asarray(nn.logsumexp(rows, axis=1)), lse)
        np.testing.assert_allclose(np.asarray(nn.log_softmax(rows)), rows - lse[:, None])
        np.testing.assert_allclose(np.asarray(nn.softmax(rows)),
                                   np.exp(rows) / np.exp(rows).sum(1, keepdims=True))
        np.testing.assert_allclose(np.asarray(nn.softplus(SPECIAL)), np.logaddexp(SPECIAL, 0))


# ---------------------------------------------------------------- finding 14: retrace reasons

@pytest.fixture
def threshold():
    old = axle.config.retrace_warning_threshold
    axle.config.update(retrace_warning_threshold=1)
    yield
    axle.config.update(retrace_warning_threshold=old)


def test_retrace_names_a_changed_pytree_structure(threshold):
    f = axle.jit(lambda p: anp.sum(p[0]), device="interpreter:0")
    f([np.ones(2)])
    with pytest.warns(RecompilationWarning, match=r"argument 'p \(structure\)' changed list\(leaf\) -> tuple\(leaf\)"):
        f((np.ones(2),))


def test_retrace_names_the_device_and_flags(threshold):
    f = axle.jit(lambda x: x + 1)
    with axle.device("interpreter:0"):
        f(np.ones(2))
    with axle.device(require_backend("cpu")), pytest.warns(RecompilationWarning,
                                                            match=r"the device changed interpreter:0 -> cpu:0"):
        f(np.ones(2))
    axle.config.update(optimize=False)
    try:
        with axle.device("interpreter:0"), pytest.warns(RecompilationWarning,
                                                         match=r"compile flags changed \(optimize=True.*optimize=False"):
            f(np.ones(2))
    finally:
        axle.config.update(optimize=True)


def test_retrace_after_clear_cache_says_so(threshold):
    f = axle.jit(lambda x: x + 1, device="interpreter:0")
    f(np.ones(2))
    f.clear_cache()
    with pytest.warns(RecompilationWarning, match="dropped from the cache") as rec:
        f(np.ones(2))
    assert "device or flags" not in str(rec[0].message)


def test_retrace_for_a_new_shape_names_the_argument_and_shape(threshold):
    f = axle.jit(lambda x: x + 1, device="interpreter:0")
    f(np.ones(2, np.float32))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        f(np.ones(3, np.float32))
    (w,) = [r for r in rec if r.category is RecompilationWarning]
    assert "argument 'x' changed f32[2] -> f32[3]" in str(w.message)


# ---------------------------------------------------------------- finding 9: no silent value changes

HERE = __file__


def _assert_located(err, *words):
    msg = str(err.value)
    for w in words:
        assert w in msg, (w, msg)
    assert err.value.where and err.value.where.startswith(HERE), err.value.where


# (int8 ... uint64 and bfloat16 are axle dtypes since issue 15: tests/core/test_dtypes.py)
REFUSED = [np.array([1.0], np.longdouble), np.array([1 + 2j], np.complex64),
           np.array([1.5], ml_dtypes.float8_e4m3fn)]


@pytest.mark.parametrize("arr", REFUSED, ids=[a.dtype.name for a in REFUSED])
def test_unsupported_dtypes_are_refused_at_every_entry(device, arr):
    from axle.errors import DTypeError

    name = arr.dtype.name
    with device:
        with pytest.raises(DTypeError) as e:
            anp.asarray(arr)
        _assert_located(e, "asarray", name, str(arr.shape))
        with pytest.raises(DTypeError) as e:
            axle.device_put(arr)
        _assert_located(e, "device_put", name)
        with pytest.raises(DTypeError) as e:
            axle.jit(lambda x: x + 1)(arr)
        _assert_located(e, "jit argument", name)
        with pytest.raises(DTypeError) as e:
            axle.jit(lambda x: x + arr)(np.ones(arr.shape, np.float32))  # a captured constant
        _assert_located(e, name)
        with pytest.raises(DTypeError) as e:
            anp.add(arr, 1)
        _assert_located(e, name)


def test_python_ints_beyond_the_dtype_are_refused(device):
    from axle.errors import DTypeError

    with device:
        for call in (lambda: anp.asarray(2**63), lambda: anp.asarray([1, 2**63]), lambda: anp.asarray([2**64]),
                     lambda: axle.jit(lambda x: x)(2**63), lambda: axle.device_put(-2**63 - 1),
                     lambda: anp.add(np.ones(2, np.int32), 2**40), lambda: anp.full(2, 2**31, np.int32),
                     lambda: anp.asarray([2**40], dtype=np.int32)):
            with pytest.raises(DTypeError) as e:
                call()
            _assert_located(e)
        # what fits keeps its exact value
        big = np.array([2**62 + 1, -2**63], np.int64)
        np.testing.assert_array_equal(np.asarray(anp.asarray(big)), big)
        np.testing.assert_array_equal(np.asarray(anp.add(np.ones(2, np.int32), 2**31 - 2)), [2**31 - 1] * 2)


def test_byte_order_and_layout_keep_values(device):
    big_endian = np.arange(6, dtype=">f4").reshape(2, 3)
    unaligned = np.zeros(6 * 8 + 1, np.uint8)[1:].view(np.float64)
    unaligned[:] = np.arange(6) - 2.5
    reversed_ro = np.arange(8.0)[::-3]
    reversed_ro.flags.writeable = False
    with device:
        for a in (big_endian, unaligned, reversed_ro):
            np.testing.assert_array_equal(np.asarray(anp.asarray(a) * 2), a * 2)
            np.testing.assert_array_equal(np.asarray(axle.jit(lambda x: x * 2)(a)), a * 2)


# ---------------------------------------------------------------- finding 12: arguments

BAD_ARGUMENTS = [
    ("zeros", lambda x: anp.zeros((2.5,)), "ArgumentError", "2.5"),
    ("zeros", lambda x: anp.zeros(("3",)), "ArgumentError", "'3'"),
    ("zeros", lambda x: anp.zeros((-1, 2)), "ShapeError", "negative"),
    ("eye", lambda x: anp.eye(-1), "ArgumentError", "-1"),
    ("reshape", lambda x: anp.reshape(x, (2.0, 3)), "ArgumentError", "2.0"),
    ("linspace", lambda x: anp.linspace(0, 1, -1), "ArgumentError", "num"),
    ("arange", lambda x: anp.arange(0, 5, 0), "ArgumentError", "step"),
    ("conv2d", lambda x: nn.conv2d(anp.ones((1, 1, 4, 4)), anp.ones((1, 1, 2, 2)), stride=0), "ArgumentError",
     "stride"),
    ("max_pool", lambda x: nn.max_pool(anp.ones((1, 1, 4, 4)), 0), "ArgumentError", "window"),
    ("sum", lambda x: anp.sum(x, axis=1.0), "ArgumentError", "axis"),
    ("zeros", lambda x: anp.zeros((2**40, 2**40)), "ShapeError", "too large"),
    ("jit argument", lambda x: axle.jit(lambda a: a + 1)(np.ones((1,) * 64)), "ShapeError", "rank 64"),
]


@pytest.mark.parametrize("fn,call,err,word", BAD_ARGUMENTS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_ARGUMENTS)])
def test_bad_arguments_raise_axle_errors_naming_function_and_line(fn, call, err, word):
    from axle import errors

    with axle.device("interpreter:0"):
        x = axle.device_put(np.ones((2, 3), np.float32))
        with pytest.raises(getattr(errors, err)) as e:
            call(x)
    assert e.value.message.startswith(fn + ":"), e.value.message
    _assert_located(e, word)


# ---------------------------------------------------------------- finding 13: traced indices

X = np.arange(12.0).reshape(3, 4)


def test_traced_out_of_range_indices_follow_jax(device):
    i = np.array([0, 2, -1, 5, -4])
    with device:
        # x[i] clamps (after Python-style wrapping of negatives)
        np.testing.assert_array_equal(np.asarray(axle.jit(lambda x, i: x[i])(X, i)), X[[0, 2, 2, 2, 0]])
        # take fills (nan for floats, the most negative int for ints), or clips on request
        got = np.asarray(axle.jit(lambda x, i: anp.take(x, i, axis=1))(X, i))
        want = X[:, [0, 2, 3, 0, 0]].copy()
        want[:, 3] = np.nan
        np.testing.assert_array_equal(got, want)
        got = np.asarray(axle.jit(lambda x, i: anp.take(x, i, axis=1))(X.astype(np.int32), i))
        assert (got[:, 3] == np.iinfo(np.int32).min).all()
        np.testing.assert_array_equal(np.asarray(axle.jit(lambda x, i: anp.take(x, i, axis=1, mode="clip"))(X, i)),
                                      X[:, [0, 2, 3, 3, 0]])
        got = np.asarray(axle.jit(lambda x, i: anp.take_along_axis(x, i, axis=1))(X, np.array([[0, 4], [-1, 1],
                                                                                                  [3, -5]])))
        np.testing.assert_array_equal(got, [[0, np.nan], [7, 5], [11, np.nan]])
        # scatters drop out-of-range updates
        got = np.asarray(axle.jit(lambda x, i: x.at[i].set(100.0))(X, np.array([0, 7, -1])))
        np.testing.assert_array_equal(got, np.where(np.arange(3)[:, None] != 1, 100.0, X))
        # one_hot: a zero row; cross_entropy: nan, never a silent 0 loss
        np.testing.assert_array_equal(np.asarray(axle.jit(lambda l: nn.one_hot(l, 3))(np.array([0, -1, 3]))),
                                      [[1, 0, 0], [0, 0, 0], [0, 0, 0]])
        loss = np.asarray(axle.jit(lambda x, l: nn.cross_entropy(x, l, reduction="none"))(X, np.array([0, 4, -1])))
        assert np.isfinite(loss[0]) and np.isnan(loss[1:]).all()


def test_concrete_out_of_range_indices_raise_at_once():
    from axle.errors import OutOfBoundsError, ShapeError

    with axle.device("interpreter:0"):
        with pytest.raises(OutOfBoundsError) as e:
            nn.cross_entropy(X, np.array([0, 4, 1]))
        _assert_located(e, "cross_entropy", "[0, 4)")
        with pytest.raises(ShapeError) as e:
            anp.take_along_axis(X, np.array([[5]] * 3), axis=1)
        _assert_located(e, "take_along_axis", "5")


@pytest.fixture
def check_indices():
    axle.config.update(check_indices=True)
    yield
    axle.config.update(check_indices=False)


CHECKED = [
    ("getitem", lambda x, i: x[i], np.array([0, 3])),
    ("take", lambda x, i: anp.take(x, i, axis=1), np.array([-5])),
    ("take_along_axis", lambda x, i: anp.take_along_axis(x, i[:, None] + np.zeros((3, 1), np.int64), 1),
     np.array([0, 1, 4])),
    ("at[].set", lambda x, i: x.at[i].set(0.0), np.array([9])),
    ("at[].add", lambda x, i: x.at[i].add(1.0), np.array([-4])),
    ("one_hot", lambda x, i: nn.one_hot(i, 3), np.array([-1])),
    ("cross_entropy", lambda x, i: nn.cross_entropy(x, i), np.array([0, 1, 4])),
]


@pytest.mark.parametrize("op,fn,idx", CHECKED, ids=[c[0] for c in CHECKED])
def test_check_indices_raises_naming_op_and_line(device, check_indices, op, fn, idx):
    from axle.errors import OutOfBoundsError

    with device:
        with pytest.raises(OutOfBoundsError) as e:
            axle.jit(fn)(X, idx)
        _assert_located(e, op, "out of range", "--check_indices")
        fine = np.zeros_like(idx) if op != "cross_entropy" else np.array([0, 1, 2])
        axle.jit(fn)(X, fine)  # in range: no error, and the flag outputs stay hidden
        assert isinstance(axle.jit(lambda x, i: x[i])(X, np.array([1])), axle.Array)


@pytest.mark.parametrize("under_jit", [False, True], ids=["eager", "jit"])
def test_check_indices_covers_indices_traced_by_grad(check_indices, under_jit):
    from axle.errors import OutOfBoundsError

    g = axle.grad(lambda w, i: anp.sum(w[i]))
    g = axle.jit(g) if under_jit else g
    with axle.device("interpreter:0"):
        with pytest.raises(OutOfBoundsError) as e:
            g(X, np.array([0, 4]))
        _assert_located(e, "getitem", "out of range")
        np.testing.assert_array_equal(np.asarray(g(X, np.array([0, 2]))), [[1] * 4, [0] * 4, [1] * 4])


def test_check_indices_is_a_flag_and_covers_lowered_compiles(check_indices):
    from axle.config import Config
    from axle.errors import OutOfBoundsError

    cfg = Config()
    cfg.load_flags("--check_indices")
    assert cfg.check_indices and not Config().check_indices
    f = axle.jit(lambda x, i: x[i], device="interpreter:0")
    compiled = f.lower(X, np.array([0])).compile()
    np.testing.assert_array_equal(np.asarray(compiled(X, np.array([2]))), X[[2]])
    with pytest.raises(OutOfBoundsError, match="getitem"):
        compiled(X, np.array([3]))
