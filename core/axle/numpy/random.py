"""``axle.numpy.random``: the ``np.random`` conveniences NumPy programs reach for
(``default_rng`` and its Generator methods, ``rand``, ``randn``, ``normal``, ``uniform``,
``integers`` / ``randint``, ``choice``, ``permutation``, ``seed``), on top of axle.random.

axle.random has no hidden state: every draw is a function of an explicit key. This layer
keeps its state in Python, outside any array: a Generator holds a 64-bit seed and a draw
counter, and draw number ``i`` uses the key ``fold_in(key(seed), i)``. So a seeded program
is reproducible, two Generators with different seeds are independent, and no traced value
is ever stored. Inside ``jit`` a draw happens while tracing: its key (so its numbers) is
fixed into the compiled function, the same on every call. Programs that jit their
sampling should pass keys explicitly with axle.random (as JAX programs do).

The module-level functions share one global Generator, seeded from the OS's entropy
unless ``seed(n)`` is called, as NumPy's legacy functions are."""
from __future__ import annotations

from typing import Any

import numpy as _np

from .. import random as _random
from ..errors import ArgumentError
from ..frontend.source import user_location
from ..frontend.validate import size_arg
from ._core import _is_array, add, asarray, astype, broadcast_shapes, multiply, reshape, subtract, sum
from ._index import take

_MASK64 = (1 << 64) - 1


def _shape(size: Any) -> tuple[int, ...]:
    if size is None:
        return ()
    return (size,) if isinstance(size, int) else tuple(size)


class Generator:
    """NumPy's Generator API on axle.random (see the module docstring for its state)."""

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:  # the OS's entropy, as NumPy's default_rng()
            self._seed = int(_np.random.SeedSequence().generate_state(1, _np.uint64)[0])
        else:
            self._seed = size_arg(seed, "default_rng", "seed", -2**63, 2**64 - 1) & _MASK64
        self._count = 0

    def _key(self) -> Any:
        k = _random.fold_in(_random.key(self._seed), self._count)
        self._count += 1
        return k

    def random(self, size: Any = None, dtype: Any = _np.float64) -> Any:
        """Uniform floats in [0, 1)."""
        return _random.uniform(self._key(), _shape(size), dtype)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        shape = _shape(size) if size is not None else _broadcast(low, high)
        u = _random.uniform(self._key(), shape, _np.float64)
        return add(multiply(u, subtract(high, low)), low)

    def standard_normal(self, size: Any = None, dtype: Any = _np.float64) -> Any:
        return _random.normal(self._key(), _shape(size), dtype)

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        shape = _shape(size) if size is not None else _broadcast(loc, scale)
        return add(multiply(_random.normal(self._key(), shape, _np.float64), scale), loc)

    def integers(self, low: int, high: int | None = None, size: Any = None, dtype: Any = _np.int64,
                 endpoint: bool = False) -> Any:
        """Integers in [low, high) ([low, high] with endpoint=True); high None: [0, low)."""
        lo, hi = (0, low) if high is None else (low, high)
        return _random.randint(self._key(), _shape(size), lo, hi + 1 if endpoint else hi, dtype)

    def permutation(self, x: Any) -> Any:
        """A shuffled range(x) (an int), or x's rows shuffled (an array)."""
        if isinstance(x, (int, _np.integer)):
            return _random.permutation(self._key(), size_arg(x, "permutation", "n"))
        xv = asarray(x) if not _is_array(x) else x
        if xv.ndim == 0:
            raise ArgumentError("permutation: x must be an int or an array of rank >= 1", where=user_location())
        return take(xv, _random.permutation(self._key(), xv.shape[0]), axis=0)

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
        """Samples of a (an array, or range(a) for an int): with replacement, uniformly or
        with probabilities p (inverse CDF); without, the first entries of a permutation."""
        pool = asarray(_np.arange(size_arg(a, "choice", "a"))) if isinstance(a, (int, _np.integer)) else (
            asarray(a) if not _is_array(a) else a)
        if pool.ndim != 1:
            raise ArgumentError(f"choice: a must be an int or a 1-D array, got shape {pool.shape}",
                                where=user_location())
        n, shape = pool.shape[0], _shape(size)
        count = int(_np.prod(shape))
        if not replace:
            if p is not None:
                raise ArgumentError("choice: replace=False with probabilities p is not supported",
                                    where=user_location())
            if count > n:
                raise ArgumentError(f"choice: cannot take {count} samples without replacement from {n}",
                                    where=user_location())
            idx = reshape(_random.permutation(self._key(), n)[:count], shape)
        elif p is None:
            idx = _random.randint(self._key(), shape, 0, n, _np.int64)
        else:
            idx = _inverse_cdf(self._key(), p, n, shape)
        return reshape(take(pool, reshape(idx, (-1,)), axis=0), shape)


def _broadcast(*params: Any) -> tuple[int, ...]:
    return broadcast_shapes(*[_np.shape(v) if not _is_array(v) else v.shape for v in params])


def _inverse_cdf(key: Any, p: Any, n: int, shape: tuple[int, ...]) -> Any:
    """Indices drawn with probabilities p: the number of CDF entries <= a uniform draw."""
    pv = _np.asarray(p, dtype=_np.float64)
    if pv.shape != (n,) or (pv < 0).any() or not _np.isclose(pv.sum(), 1.0):
        raise ArgumentError(f"choice: p must be {n} non-negative probabilities summing to 1", where=user_location())
    cdf = _np.cumsum(pv)[:-1]
    u = _random.uniform(key, (int(_np.prod(shape)), 1), _np.float64)
    if n == 1:
        return asarray(_np.zeros(shape, _np.int64))
    return reshape(sum(astype(u >= asarray(cdf.reshape(1, -1)), _np.int64), axis=1), shape)


def default_rng(seed: int | None = None) -> Generator:
    """A new Generator: seeded (reproducible) or from the OS's entropy."""
    return Generator(seed)


_GLOBAL = Generator()


def seed(s: int) -> None:
    """Re-seeds the global Generator of the module-level functions."""
    global _GLOBAL
    _GLOBAL = Generator(s)


def rand(*shape: int) -> Any:
    return _GLOBAL.random(shape)


def randn(*shape: int) -> Any:
    return _GLOBAL.standard_normal(shape)


def random(size: Any = None) -> Any:
    return _GLOBAL.random(size)


def standard_normal(size: Any = None) -> Any:
    return _GLOBAL.standard_normal(size)


def normal(loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
    return _GLOBAL.normal(loc, scale, size)


def uniform(low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
    return _GLOBAL.uniform(low, high, size)


def integers(low: int, high: int | None = None, size: Any = None, dtype: Any = _np.int64) -> Any:
    return _GLOBAL.integers(low, high, size, dtype)


def randint(low: int, high: int | None = None, size: Any = None, dtype: Any = _np.int64) -> Any:
    """NumPy's legacy name of integers (high exclusive)."""
    return _GLOBAL.integers(low, high, size, dtype)


def choice(a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
    return _GLOBAL.choice(a, size, replace, p)


def permutation(x: Any) -> Any:
    return _GLOBAL.permutation(x)


__all__ = ["Generator", "choice", "default_rng", "integers", "normal", "permutation", "rand", "randint", "randn",
           "random", "seed", "standard_normal", "uniform"]
