"""Reference values beyond float64 precision, for measuring float64 results in ulps.

sin and cos: the argument is reduced with pi to 420 decimal digits (enough for 1.8e308,
whose multiples of pi/2 need 309 digits before the point), then Taylor series in 50
digits. pi comes from the series in the `decimal` module's documentation, independent of
the Machin formula the CPU backend builds its constants from. About 50 us a value."""
from __future__ import annotations

import decimal
import functools
import math
from decimal import Decimal

import numpy as np

_PREC = 420


@functools.cache
def _pi() -> Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = _PREC + 5
        lasts, t, s, n, na, d, da = Decimal(0), Decimal(3), Decimal(3), 1, 0, 0, 24
        while s != lasts:
            lasts = s
            n, na = n + na, na + 8
            d, da = d + da, da + 32
            t = (t * n) / d
            s += t
        return +s


def _series(r: Decimal, odd: bool) -> Decimal:
    """sin r (odd) or cos r by Taylor series, |r| <= pi/4, in the current context."""
    r2 = r * r
    term = r if odd else Decimal(1)
    total, n = term, 1 if odd else 0
    eps = Decimal(10) ** -60 * (abs(r) if odd else 1)
    while abs(term) > eps:
        term = -term * r2 / ((n + 1) * (n + 2))
        n += 2
        total += term
    return total


def sincos(x: float, op: str) -> tuple[float, float]:
    """(v, tail): v = op(x) correctly rounded to float64 and tail = op(x) - v (rounded);
    op is "sin" or "cos"; NaN for NaN and +-inf."""
    if not math.isfinite(x):
        return math.nan, 0.0
    if x == 0.0:
        return (x, 0.0) if op == "sin" else (1.0, 0.0)
    with decimal.localcontext() as ctx:
        ctx.prec = _PREC
        half_pi = _pi() / 2
        y = Decimal(x)  # exact
        k = (y / half_pi).to_integral_value(rounding=decimal.ROUND_HALF_EVEN)
        r = y - k * half_pi
        q = (int(k) + (1 if op == "cos" else 0)) % 4
        ctx.prec = 50
        v = _series(+r, q % 2 == 0)
        v = -v if q >= 2 else v
        hi = float(v)
        return hi, float(v - Decimal(hi))


def sincos_array(x: np.ndarray, op: str) -> tuple[np.ndarray, np.ndarray]:
    """``sincos`` elementwise: (values, tails) as float64 arrays."""
    pairs = [sincos(float(v), op) for v in np.asarray(x, dtype=np.float64).reshape(-1)]
    out = np.array(pairs, dtype=np.float64).reshape(-1, 2)
    return out[:, 0], out[:, 1]
