"""Soundness of the in-memory compile caches' keys: a key that misses an input changing the
compiled program answers a call with another program's result (a silent wrong answer).
Each test makes two calls that must compile differently and checks the second's result."""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import axle
from axle.config import config
from axle.errors import ArgumentError, OutOfBoundsError
from axle.frontend.jit import static_key
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.literal import Literal
from axle.ir.module import Computation, Module, make_node
from axle.ir.ops import Op

INTERP = "interpreter:0"


def test_jit_static_arguments_that_compare_equal_but_trace_apart_are_not_one_entry() -> None:
    # 0.0 == -0.0, and 1 == 1.0 == True, but x / -0.0 is -inf and x * 1.0 is a float
    div = axle.jit(lambda x, s: x / s, static_argnums=1, device=INTERP)
    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(np.asarray(div(x, 0.0)), np.full(3, np.inf, np.float32))
    np.testing.assert_array_equal(np.asarray(div(x, -0.0)), np.full(3, -np.inf, np.float32))
    mul = axle.jit(lambda x, s: x * s, static_argnums=1, device=INTERP)
    xi = np.arange(3, dtype=np.int32)
    assert np.asarray(mul(xi, 1)).dtype == np.int32
    assert np.asarray(mul(xi, 1.0)).dtype == (xi * 1.0).dtype  # a float, as NumPy promotes
    assert np.asarray(mul(xi, True)).dtype == np.int32
    assert mul.trace_count == 3


def test_jit_static_nan_hits_the_cache() -> None:
    f = axle.jit(lambda x, s: x + s, static_argnums=1, device=INTERP)
    for _ in range(3):
        assert np.isnan(np.asarray(f(np.ones(2, np.float32), float("nan")))).all()
    assert f.trace_count == 1  # nan != nan: keyed by value, it retraced on every call


def test_static_key_tells_types_and_signed_zeros_apart_inside_containers() -> None:
    Pair = namedtuple("Pair", "a b")
    distinct = [1, 1.0, True, np.float32(1.0), -0.0, 0.0, (1, 2), (1.0, 2), Pair(1, 2), frozenset({0.0}),
                frozenset({-0.0}), 1 + 0j, -0.0 + 0j]
    keys = [static_key(v) for v in distinct]
    assert len(set(keys)) == len(distinct)
    assert static_key(float("nan")) == static_key(float("nan"))
    assert static_key(("relu", 3)) == static_key(("relu", 3))


def test_pmap_static_signed_zero_is_its_own_program() -> None:
    f = axle.pmap(lambda x, s: x / s, static_broadcasted_argnums=1, devices=[INTERP] * 2)
    x = np.ones((2, 3), np.float32)
    assert (np.asarray(f(x, 0.0)) == np.inf).all()
    assert (np.asarray(f(x, -0.0)) == -np.inf).all()


def test_pmap_recompiles_when_the_settings_change(monkeypatch: pytest.MonkeyPatch) -> None:
    # a pmap compiled without --check_indices must not answer a call made with it (the
    # out-of-range index would be clamped silently)
    g = axle.pmap(lambda x, i: x[i], devices=[INTERP] * 2)
    x, i = np.ones((2, 3), np.float32), np.array([5, 5], np.int32)
    np.asarray(g(x, i))
    monkeypatch.setattr(config, "check_indices", True)
    with pytest.raises(OutOfBoundsError):
        np.asarray(g(x, i))


def test_a_big_endian_constant_is_the_native_literal_of_its_values() -> None:
    # Builder.constant kept a big-endian array as it was: cpu and opencl copied its bytes
    # (byte-swapped numbers), the interpreter failed an assertion, and the compile cache's
    # text round trip (which parses native arrays back) hid it from a second process
    b = Builder("m")
    p = b.parameter(((4,), "f32"))
    c = b.constant(np.arange(4, dtype=">f4"))
    assert c.attr["value"] == Literal(np.arange(4, dtype=np.float32))
    assert c.attr["value"].array.dtype.isnative
    m = Module("m", Computation("m", (p,), make_node(Op.ADD, [p, c], {})))
    (out,) = evaluate(m, np.zeros(4, np.float32))
    np.testing.assert_array_equal(out, np.arange(4, dtype=np.float32))


def test_pmap_unhashable_static_argument_is_an_argument_error() -> None:
    f = axle.pmap(lambda x, s: x * len(s), static_broadcasted_argnums=1, devices=[INTERP] * 2)
    with pytest.raises(ArgumentError, match=r"pmap: static arguments must be hashable, got \[\[1, 2\]\]"):
        f(np.ones((2, 3), np.float32), [1, 2])


def test_pmap_programs_are_bounded_by_the_jit_cache_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "jit_cache_size", 2)
    f = axle.pmap(lambda x: x + 1.0, devices=[INTERP] * 2)
    for n in range(1, 5):  # a new shape each call: a new program
        np.testing.assert_array_equal(np.asarray(f(np.zeros((2, n), np.float32))), np.ones((2, n), np.float32))
    assert len(f._cache) == 2
