"""Counter-based pseudo-random numbers on the ``rng_bit_generator`` primitive.

A key is an ``s64[]`` array. Like JAX, there is no hidden state: the same key always gives
the same numbers, and independent streams come from :func:`split`::

    key = axle.random.key(0)
    k1, k2 = axle.random.split(key)
    w = axle.random.normal(k1, (784, 10)) * 0.01

Every element is a function of (key, element index) only (splitmix64, see
``ir.ops.rng_bits``), so every backend produces exactly the same bits, in parallel.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import lax
from . import numpy as anp
from .errors import ArgumentError, DTypeError
from .frontend.source import user_location
from .frontend.validate import dtype_arg, shape_arg, size_arg
from .numpy._core import _is_array

Key = Any

_BITS_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_MANTISSA = {np.dtype(np.float16): 11, np.dtype(np.float32): 24, np.dtype(np.float64): 53}


def key(seed: Any) -> Key:
    """A PRNG key from an integer seed: a Python int (any 64-bit pattern), or an integer
    scalar array, traced ones included (e.g. a seed computed inside jit)."""
    if _is_array(seed):
        return _traced_key(seed, "random.key")
    s = size_arg(seed, "random.key", "seed", -2**63, 2**64 - 1)  # any 64-bit pattern
    return anp.asarray(np.int64(np.uint64(s & ((1 << 64) - 1)).astype(np.int64)))


def _traced_key(v: Any, what: str) -> Key:
    """An integer scalar array as an s64 value (the seed's bits, sign-extended)."""
    if v.shape != () or v.dtype.kind not in "iu":
        raise DTypeError(f"{what}: expected an integer scalar, got {v.dtype}{list(v.shape)}", where=user_location())
    return anp.astype(v, np.int64)


PRNGKey = key


def _check_key(k: Key) -> Any:
    k = anp.asarray(k) if not _is_array(k) else k
    if k.shape != () or k.dtype != np.int64:
        raise DTypeError(f"random: a key must be an int64 scalar from axle.random.key, got {k.dtype}{list(k.shape)}",
                         where=user_location())
    return k


def bits(k: Key, shape: Sequence[int] = (), dtype: Any = np.int64) -> Any:
    """Raw random bits: every value of the integer dtype (int32 or int64) is equally likely."""
    dt = dtype_arg(dtype, "random")
    if dt not in _BITS_DTYPES:  # rng_bit_generator makes 32 or 64 signed bits
        raise DTypeError(f"random: bits are int32 or int64, got {dt}", where=user_location())
    return lax.rng_bit_generator(_check_key(k), shape_arg(shape, "random"), dt)


def split(k: Key, num: int = 2) -> Any:
    """``num`` new independent keys (an s64[num] array; unpack or index it)."""
    return bits(k, (size_arg(num, "random.split", "num"),), np.int64)


def fold_in(k: Key, data: Any) -> Key:
    """A new key derived from ``k`` and an integer (e.g. a step number): a Python int or an
    integer scalar array, traced ones included (a step counter inside jit)."""
    d = _traced_key(data, "random.fold_in") if _is_array(data) else np.int64(
        size_arg(data, "random.fold_in", "data", -2**63, 2**63 - 1))
    return bits(anp.add(bits(k, (), np.int64), d), (), np.int64)


def uniform(k: Key, shape: Sequence[int] = (), dtype: Any = np.float32, minval: float = 0.0,
            maxval: float = 1.0) -> Any:
    """Uniform floats in [minval, maxval): the low mantissa-width bits, scaled."""
    dt = dtype_arg(dtype, "random.uniform")
    if dt not in _MANTISSA:
        raise DTypeError(f"random.uniform: dtype must be a float type, got {dt}", where=user_location())
    m = _MANTISSA[dt]
    span = np.int64(1 << m)
    r = anp.remainder(bits(k, shape, np.int64), span)  # floor-mod: in [0, 2^m)
    # scale in float64 when needed so 2^-53 steps are exact, then round once
    work = np.float64 if m > 24 else np.float32
    u = anp.multiply(anp.astype(r, work), np.asarray(1.0 / (1 << m), work))
    if (minval, maxval) != (0.0, 1.0):
        u = anp.add(anp.multiply(u, np.asarray(maxval - minval, work)), np.asarray(minval, work))
    return anp.astype(u, dt)


def normal(k: Key, shape: Sequence[int] = (), dtype: Any = np.float32) -> Any:
    """Standard normal samples (Box-Muller on two uniform streams)."""
    dt = np.dtype(dtype)
    k1, k2 = split(k)
    work = np.float64 if dt == np.float64 else np.float32
    u1 = anp.subtract(np.asarray(1.0, work), uniform(k1, shape, work))  # in (0, 1]: log is finite
    u2 = uniform(k2, shape, work)
    r = anp.sqrt(anp.multiply(np.asarray(-2.0, work), anp.log(u1)))
    return anp.astype(anp.multiply(r, anp.cos(anp.multiply(u2, np.asarray(2 * math.pi, work)))), dt)


def randint(k: Key, shape: Sequence[int], minval: int, maxval: int, dtype: Any = np.int32) -> Any:
    """Integers in [minval, maxval) (modulo reduction: bias below 2^-30 for spans < 2^33)."""
    lo = size_arg(minval, "random.randint", "minval", -2**63, 2**63 - 1)
    span = size_arg(maxval, "random.randint", "maxval", -2**63, 2**63 - 1) - lo
    if span <= 0:
        raise ArgumentError(f"random.randint: empty range [{minval}, {maxval})", where=user_location())
    r = anp.remainder(bits(k, shape, np.int64), np.int64(span))
    return anp.astype(anp.add(r, np.int64(minval)), dtype)


def bernoulli(k: Key, p: float = 0.5, shape: Sequence[int] = ()) -> Any:
    return anp.less(uniform(k, shape, np.float32), np.float32(p))


def permutation(k: Key, n: int) -> Any:
    """A random permutation of range(n) (argsort-free: rank of random keys via comparisons)."""
    r = bits(k, (n,), np.int64)
    less = anp.less(anp.reshape(r, (1, n)), anp.reshape(r, (n, 1)))  # less[i, j]: r[j] < r[i]
    rank = anp.sum(anp.astype(less, np.int64), axis=1)  # distinct with overwhelming probability
    # element i goes to position rank[i]: one scatter (the inverse of the ranking)
    return anp.zeros(n, np.int64).at[rank].set(anp.arange(n, dtype=np.int64))
