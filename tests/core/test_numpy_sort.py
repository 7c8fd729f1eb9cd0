"""The sort primitive and what is built on it (issue 15): its reference against NumPy,
its shape rules, and axle.numpy's sort, argsort, searchsorted, the unique family,
median/quantile/percentile and axle.lax's sort/top_k against NumPy on every installed
device, eager and under jit."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.errors import ArgumentError, ShapeError
from axle.frontend.pytree import flatten
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.ops import CORE_PRIMITIVES, OPS, Op
from axle.ir.types import TensorType

DEVICES = [d.name for d in axle.devices()]
#: eager mode compiles every op on its own: run it on the default device only (jit on all)
EAGER = axle.devices()[0].name
RNG = np.random.default_rng(15)


def _ties(shape: tuple[int, ...], dtype: Any = np.float32, specials: bool = True) -> np.ndarray:
    x = RNG.integers(-3, 4, size=shape).astype(dtype)
    if specials and np.dtype(dtype).kind == "f" and x.size:
        flat = x.reshape(-1)
        at = RNG.integers(0, flat.size, size=max(1, flat.size // 5))
        flat[at] = RNG.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype), size=at.size)
    return x


X = _ties((5, 11))
X1 = _ties((23,))
XI = RNG.integers(-4, 5, size=(4, 9)).astype(np.int32)
A_SORTED = np.sort(np.concatenate([_ties((12,), np.float64), [np.nan, np.inf, -np.inf]]))
V = np.array([[np.nan, 2.0, 3.0, -0.0], [-1.0, 0.0, 10.0, -np.inf]])


def _desc_argsort(x: np.ndarray, axis: int = -1) -> np.ndarray:
    # NumPy has no descending sort: the stable descending order is the stable ascending
    # order of the reversed axis, reversed, with indices mapped back (NaN first)
    n = x.shape[axis]
    r = np.flip(x, axis)
    return np.flip(n - 1 - np.argsort(r, axis=axis, kind="stable"), axis)


# (name, axle function, NumPy function, inputs)
CASES: list[tuple[str, Callable[..., Any], Callable[..., Any], tuple[np.ndarray, ...]]] = [
    ("sort", lambda x: anp.sort(x), lambda x: np.sort(x), (X,)),
    ("sort-axis0", lambda x: anp.sort(x, axis=0), lambda x: np.sort(x, axis=0), (X,)),
    ("sort-none", lambda x: anp.sort(x, axis=None), lambda x: np.sort(x, axis=None), (X,)),
    ("sort-int", lambda x: anp.sort(x, axis=0), lambda x: np.sort(x, axis=0), (XI,)),
    ("sort-desc", lambda x: anp.sort(x, descending=True),
     lambda x: np.take_along_axis(x, _desc_argsort(x), -1), (X,)),
    ("argsort", lambda x: anp.argsort(x), lambda x: np.argsort(x, stable=True), (X,)),
    ("argsort-axis0", lambda x: anp.argsort(x, axis=0), lambda x: np.argsort(x, axis=0, stable=True), (X,)),
    ("argsort-desc", lambda x: anp.argsort(x, descending=True), _desc_argsort, (X,)),
    ("argsort-bool", lambda x: anp.argsort(x > 0), lambda x: np.argsort(x > 0, stable=True), (XI,)),
    ("searchsorted-left", lambda a, v: anp.searchsorted(a, v), lambda a, v: np.searchsorted(a, v), (A_SORTED, V)),
    ("searchsorted-right", lambda a, v: anp.searchsorted(a, v, side="right"),
     lambda a, v: np.searchsorted(a, v, side="right"), (A_SORTED, V)),
    ("searchsorted-sorter", lambda a, s, v: anp.searchsorted(a, v, sorter=s),
     lambda a, s, v: np.searchsorted(a, v, sorter=s), (X1, np.argsort(X1, kind="stable"), V)),
    ("unique-size", lambda x: anp.unique(x, size=30, fill_value=-7.0),
     lambda x: np.concatenate([np.unique(x), np.full(30 - len(np.unique(x)), -7.0, x.dtype)]), (X,)),
    ("unique-size-cut", lambda x: anp.unique(x, size=3), lambda x: np.unique(x)[:3], (X,)),
    ("unique-all-size", lambda x: tuple(anp.unique_all(x, size=len(np.unique(X, equal_nan=False)))),
     lambda x: np.unique(x, True, True, True, equal_nan=False), (X,)),
    ("unique-return-all-size", lambda x: anp.unique(x, True, True, True, size=len(np.unique(X))),
     lambda x: np.unique(x, True, True, True), (X,)),
    ("quantile", lambda x: anp.quantile(x, [0.0, 0.1, 0.5, 0.625, 1.0], axis=1),
     lambda x: np.quantile(x, [0.0, 0.1, 0.5, 0.625, 1.0], axis=1), (XI,)),
    ("quantile-nan", lambda x: anp.quantile(x, 0.3, axis=0, keepdims=True),
     lambda x: np.quantile(x, 0.3, axis=0, keepdims=True), (X,)),
    ("nanquantile", lambda x: anp.nanquantile(x, [0.2, 0.5, 0.9], axis=1),
     lambda x: np.nanquantile(x, [0.2, 0.5, 0.9], axis=1), (X,)),
    ("percentile-methods", lambda x: tuple(anp.percentile(x, [10, 50, 75], axis=(0, 1), method=m) for m in
                                           ("linear", "lower", "higher", "midpoint", "nearest")),
     lambda x: tuple(np.percentile(x, [10, 50, 75], axis=(0, 1), method=m) for m in
                     ("linear", "lower", "higher", "midpoint", "nearest")), (XI,)),
    ("nanpercentile", lambda x: anp.nanpercentile(x, 40.0), lambda x: np.nanpercentile(x, 40.0), (X,)),
    ("median", lambda x: (anp.median(x), anp.median(x, axis=0), anp.median(x, axis=1, keepdims=True)),
     lambda x: (np.median(x), np.median(x, axis=0), np.median(x, axis=1, keepdims=True)), (XI,)),
    ("median-nan", lambda x: anp.median(x, axis=1), lambda x: np.median(x, axis=1), (X,)),
    ("nanmedian", lambda x: anp.nanmedian(x, axis=1), lambda x: np.nanmedian(x, axis=1), (X,)),
    ("partition", lambda x: anp.partition(x, 4)[:, 4], lambda x: np.partition(x, 4)[:, 4], (XI,)),
    ("argpartition", lambda x: anp.argpartition(x, 2, axis=0), lambda x: np.argsort(x, axis=0, stable=True),
     (XI,)),
    ("lax-sort-multi", lambda k, v: lax.sort([k, v], dimension=0, num_keys=1),
     lambda k, v: (np.sort(k, axis=0, stable=True), np.take_along_axis(v, np.argsort(k, axis=0, stable=True), 0)),
     (XI, X[:4, :9])),
    ("lax-sort-two-keys", lambda k1, k2, v: lax.sort([k1, k2, v], num_keys=2)[2],
     lambda k1, k2, v: np.take_along_axis(v, np.lexsort((k2, k1), axis=-1), -1), (XI, XI[::-1].copy(), X[:4, :9])),
    ("top-k", lambda x: lax.top_k(x, 4),
     lambda x: (np.take_along_axis(x, _desc_argsort(x)[:, :4], -1), _desc_argsort(x)[:, :4].astype(np.int32)),
     (X,)),
]


def _claims_everything(name: str) -> bool:
    dev = axle.REGISTRY.device(name)
    return axle.REGISTRY.backend_for(dev).capabilities(dev).ops >= CORE_PRIMITIVES


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    """On a device claiming every op (cpu, opencl), a kernel that fails to build must fail
    the test, not fall back to another device (a partial template falls back by design)."""
    if _claims_everything(device):
        monkeypatch.setattr(axle.config, "strict_placement", True)


def _check(got: Any, want: Any, what: str) -> None:
    gs, ws = flatten(got)[0], flatten(want)[0]
    assert len(gs) == len(ws), what
    for i, (g, w) in enumerate(zip(gs, ws)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, f"{what} output {i}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        rtol = 1e-6 if g.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(g, w, rtol=rtol, atol=0, equal_nan=True, err_msg=f"{what} output {i}")


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # NumPy's lerp of inf - inf
@pytest.mark.parametrize("name,fn,ref,args", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("device", DEVICES)
def test_sort_functions_match_numpy(device: str, name: str, fn, ref, args, strict) -> None:  # noqa: ANN001
    want = ref(*args)
    dev = axle.device(device)
    with dev:
        placed = axle.device_put(args, dev)
        _check(axle.jit(fn, device=dev)(*placed), want, f"{name} jit on {device}")
        if device == EAGER:
            _check(fn(*placed), want, f"{name} eager on {device}")


def _np_unique(x: np.ndarray, *returns: bool) -> tuple[np.ndarray, ...]:
    # NumPy 2.3+ leaves unique_values/_counts/... unsorted (the array API allows any
    # order); axle's are sorted, as np.unique's, with NaNs distinct. return_index makes
    # NumPy's sort stable, which fixes which distinct NaN each NaN's inverse names.
    index, inverse, counts = (list(returns) + [False] * 3)[:3]
    out = np.unique(x, True, inverse, counts, equal_nan=False)
    values, first, rest = out[0], out[1], list(out[2:])
    picked = [first] if index else []
    if inverse:
        picked.append(rest.pop(0))
    return (values, *picked, *rest)


CONCRETE = [
    ("unique", lambda x: anp.unique(x), np.unique),
    ("unique-equal-nan-false", lambda x: anp.unique(x, equal_nan=False), lambda x: np.unique(x, equal_nan=False)),
    ("unique-returns", lambda x: anp.unique(x, True, True, True), lambda x: np.unique(x, True, True, True)),
    ("unique_values", anp.unique_values, lambda x: _np_unique(x)[0]),
    ("unique_counts", lambda x: tuple(anp.unique_counts(x)), lambda x: _np_unique(x, False, False, True)),
    ("unique_inverse", lambda x: tuple(anp.unique_inverse(x)), lambda x: _np_unique(x, False, True)),
    ("unique_all", lambda x: tuple(anp.unique_all(x)), lambda x: _np_unique(x, True, True, True)),
]


@pytest.mark.parametrize("x", [X, XI, np.zeros((0,), np.float32), np.array([2.5], np.float32), X > 0],
                         ids=["float-ties-nan", "int", "empty", "one", "bool"])
@pytest.mark.parametrize("name,fn,ref", CONCRETE, ids=[c[0] for c in CONCRETE])
def test_unique_of_concrete_inputs_matches_numpy(name: str, fn, ref, x) -> None:  # noqa: ANN001
    """Without size=, a concrete input gives NumPy's result (its size read eagerly)."""
    _check(fn(x), ref(x), name)


def test_unique_under_jit_needs_a_static_size() -> None:
    with pytest.raises(ArgumentError, match="size="):
        axle.jit(lambda x: anp.unique(x))(X)
    # (axle's pytrees keep a namedtuple whole: a jit function returns its fields)
    values, counts = axle.jit(lambda x: tuple(anp.unique_counts(x, size=4)))(np.array([3, 1, 3, 3], np.int32))
    np.testing.assert_array_equal(values, [1, 3, 1, 1])  # jax's default fill: the smallest value
    np.testing.assert_array_equal(counts, [1, 3, 0, 0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,axis", [((1_000_000,), 0), ((20_000, 7), 1), ((3, 4097), 1), ((257, 64), 0)],
                         ids=["long-row", "many-short-rows", "odd-rows", "columns"])
def test_long_and_many_rows(device: str, shape: tuple[int, ...], axis: int, strict: None) -> None:
    """Long rows and many short rows both sort right (argsort: order and stability)."""
    x = RNG.integers(-50, 50, size=shape).astype(np.float32)
    x.reshape(-1)[::97] = np.nan
    got = axle.jit(lambda v: (anp.sort(v, axis=axis), anp.argsort(v, axis=axis)), device=device)(x)
    np.testing.assert_array_equal(np.asarray(got[0]), np.sort(x, axis=axis))
    np.testing.assert_array_equal(np.asarray(got[1]), np.argsort(x, axis=axis, stable=True))


def test_grad_of_sort_and_median() -> None:
    """Sorting permutes: the gradient goes back through the permutation."""
    x = np.array([[3.0, 1.0, 2.0, 5.0], [0.5, -1.0, 4.0, 4.5]])
    w = np.arange(8.0).reshape(2, 4)
    g = axle.grad(lambda v: anp.sum(anp.sort(v, axis=1) * w))(x)
    want = np.zeros_like(x)
    np.put_along_axis(want, np.argsort(x, axis=1), w, axis=1)
    np.testing.assert_array_equal(np.asarray(g), want)
    gm = axle.grad(lambda v: anp.median(v))(np.array([4.0, 1.0, 3.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(gm), [0.0, 0.0, 0.5, 0.5])


# ---- the primitive itself ----------------------------------------------------------------


def _ref(*xs: np.ndarray, **attrs: Any) -> np.ndarray:
    full = {"num_keys": 1, "descending": 0, "index": 0, **attrs}
    return OPS[Op.SORT].reference(*xs, **full)


def test_reference_is_stable_lexicographic_and_numpy_ordered() -> None:
    k1, k2 = XI, XI[::-1].copy()
    pos = np.broadcast_to(np.arange(9), k1.shape).copy()
    np.testing.assert_array_equal(_ref(k1, k2, pos, dimension=1, num_keys=2, index=2), np.lexsort((k2, k1), axis=1))
    x = np.array([1.0, np.nan, -0.0, 0.0, -np.inf, np.inf, 1.0, np.nan, -0.0])
    pos = np.arange(9)
    # NaN last, -0.0 == +0.0 (ties keep order), as NumPy's stable argsort
    np.testing.assert_array_equal(_ref(x, pos, dimension=0, index=1), np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(_ref(x, pos, dimension=0, index=1, descending=1), [1, 7, 5, 0, 6, 2, 3, 8, 4])


@pytest.mark.parametrize("attrs,why", [
    ({"dimension": 2}, "dimension 2 is out of range"),
    ({"dimension": 0, "num_keys": 3}, "num_keys=3"),
    ({"dimension": 0, "index": 2}, "index=2"),
    ({"dimension": 0, "descending": 2}, "descending=2"),
])
def test_sort_shape_rule_refuses_bad_attributes(attrs: dict[str, int], why: str) -> None:
    b = Builder("bad")
    p = [b.parameter(TensorType(DType.FLOAT32, (3, 4))) for _ in range(2)]
    with pytest.raises(ShapeError, match=why):
        b.op(Op.SORT, *p, **attrs)


def test_sort_refuses_mismatched_shapes_and_scalars() -> None:
    with pytest.raises(ShapeError, match="same shape"):
        lax.sort([X, X[:, :3]], dimension=1)
    with pytest.raises(ShapeError, match="0-d"):
        anp.sort(np.float32(1.0))
    with pytest.raises(ShapeError, match="1-D"):
        anp.searchsorted(X, 1.0)
    with pytest.raises(ArgumentError, match="range"):
        anp.quantile(X, 1.5)
    with pytest.raises(ArgumentError, match="range"):
        anp.percentile(X, -1)
    with pytest.raises(ShapeError, match="k=9"):
        lax.top_k(X1[:5], 9)
