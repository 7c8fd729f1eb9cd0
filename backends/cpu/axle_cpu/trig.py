"""sin and cos, right over the whole float range, as straight-line vectorizable code.

The argument a = |x| is reduced to a = (4k + q) pi/2 + r with |r| <= pi/4 (r carried as a
head and a tail, r + rl), then sin or cos of r + rl comes from a polynomial, and the
quadrant q and the sign of x pick the function and the sign. Two reductions are computed
and one is selected, without branches, so the loop vectorizer keeps a fused loop in SIMD:

* **Cody-Waite** for a < ``cw_limit``: q = round(a 2/pi), r = a - q C1 - q C2 - q C3 where
  C1 + C2 + C3 is pi/2 to three times the float's precision. With fused multiply-adds the
  first step is exact (a - q C1 lies on the grid of both terms and is below 1), and the
  tail rl of the rest is kept by an exact product and sum, so r + rl is right to far below
  an ulp of r even next to a multiple of pi/2.
* **Payne-Hanek** for the rest (and computed for every lane): a = M 2^s with an integer
  mantissa M. Bits of 2/pi at weights 2^-j with j < s - 1 contribute whole multiples of
  4 quadrants, and bits far beyond the mantissa only below the needed precision, so a
  window of 96 (float32) or 192 (float64) bits of 2/pi, chosen by the exponent from a
  table in steps of 8 bits (M shifted by the remaining 0..7 bits), suffices. An exact
  integer product of M with the window in 32-bit limbs (what 32 x 32 -> 64 bit vector
  multiplies do) gives (a 2/pi) mod 4 as fixed point with 62 (float32) or 126 (float64)
  fraction bits; rounding it to the nearest integer gives q and r / (pi/2). The closest a
  float32 comes to a multiple of pi/2 leaves 33 of those bits, a float64 more than 60.
  The float32 scheme is that of ARM's optimized-routines sinf; the float64 one widens it.

The bits of 2/pi and pi/2 are computed here from Machin's formula in integer arithmetic,
so no long literal can be mistyped. The polynomials are Taylor series (degrees in ``_FORMATS``): on
|r| <= pi/4 the first omitted term is below 2^-29 (float32) / 2^-58 (float64) relative.
Special values: NaN and +-inf give NaN, sin(-0) = -0, subnormals give sin x = x.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

from llvmlite import ir

from . import mathfns  # partially initialized when mathfns imports this module: used at call time
from .lltypes import F32, F64, I32, I64, suffix

# ------------------------------------------------------------------ constants


@cache
def pi_scaled(bits: int) -> int:
    """floor(pi 2^bits), possibly 1 too small: Machin's pi = 16 atan(1/5) - 4 atan(1/239)
    in fixed point with 32 guard bits (each series term truncates by less than 1 unit)."""
    g = bits + 32
    one = 1 << g

    def atan_inv(k: int) -> int:
        total, term, n, sign = 0, one // k, 1, 1
        while term:
            total += sign * (term // n)
            term //= k * k
            n += 2
            sign = -sign
        return total

    return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 32


@cache
def two_over_pi_scaled(bits: int) -> int:
    """floor(2/pi 2^bits) (the bits of 2/pi after the binary point)."""
    guard = 64
    return (1 << (bits + 1 + bits + guard)) // pi_scaled(bits + guard)


def _round_bits(v: Fraction, p: int) -> Fraction:
    """v rounded to p significant bits (to nearest)."""
    e = math.floor(math.log2(abs(v)))
    scale = Fraction(2) ** (p - 1 - e)
    return Fraction(round(v * scale)) / scale


def _split(v: Fraction, p: int, parts: int) -> tuple[float, ...]:
    """v as a sum of ``parts`` p-bit floats, each the rounded remainder of the previous."""
    out = []
    for _ in range(parts):
        c = _round_bits(v, p)
        out.append(float(c))
        v -= c
    return tuple(out)


_PI = Fraction(pi_scaled(400), 1 << 400)


class _Format:
    """What the reduction needs for one float format."""

    def __init__(self, t: ir.Type, it: ir.IntType, mant: int, cw_limit: float, words: int,
                 sin_deg: int, cos_deg: int) -> None:
        p = mant + 1
        self.t, self.it, self.mant, self.cw_limit, self.words = t, it, mant, cw_limit, words
        self.two_over_pi = float(_round_bits(2 / _PI, p))
        self.pio2 = _split(_PI / 2, p, 3)  # Cody-Waite C1, C2, C3
        # Window index from the biased exponent E: x = M 2^(E - bias - mant); the first
        # needed bit of 2/pi is at j0 = 8 floor((E - bias - mant - 1) / 8) and the table's
        # entry i starts at bit 8 i - pad, so i = (E + off) >> 3 and M shifts by (E + off) & 7.
        bias = (1 << (it.width - mant - 2)) - 1
        first = -(bias + mant + 1)  # E - bias - mant - 1 at E = 0
        self.pad = -8 * math.floor(first / 8)
        self.off = self.pad + first
        emax = (1 << (it.width - mant - 1)) - 1
        n = ((emax + self.off) >> 3) + 4 * (words - 1) + 1
        g_bits = 8 * n + 32 + 64
        g = two_over_pi_scaled(g_bits)
        self.table = [self._word(g, g_bits, 8 * i - self.pad) for i in range(n)]
        # Taylor coefficients: sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2)
        self.sin_coef = [(-1) ** k / math.factorial(2 * k + 1) for k in range(1, sin_deg // 2 + 1)]
        self.cos_coef = [(-1) ** k / math.factorial(2 * k) for k in range(2, cos_deg // 2 + 1)]

    @staticmethod
    def _word(g: int, g_bits: int, pos: int) -> int:
        """The 32 bits of 2/pi at weights 2^-pos .. 2^-(pos+31) (zero before the point)."""
        if pos + 31 <= 0:
            return 0
        return (g >> (g_bits - pos - 31)) & 0xFFFFFFFF


#: per float format: Cody-Waite range (below it the three-part constant loses nothing that
#: matters), 32-bit words of the 2/pi window, Taylor degrees of sin and cos
_FORMATS = {
    "float": _Format(F32, I32, 23, 2.0 ** 14, 3, sin_deg=9, cos_deg=10),
    "double": _Format(F64, I64, 52, 2.0 ** 28, 6, sin_deg=17, cos_deg=16),
}
#: pi/2 as a double-double, for turning the Payne-Hanek fraction into radians
_PIO2_DD = _split(_PI / 2, 53, 2)


# ------------------------------------------------------------------ IR helpers


class _B:
    """Terse float/int arithmetic on one builder (the reduction is long)."""

    def __init__(self, b: ir.IRBuilder, t: ir.Type) -> None:
        self.b, self.t = b, t

    def c(self, v: float, t: ir.Type | None = None) -> ir.Constant:
        return ir.Constant(t or self.t, v)

    def i(self, v: int, t: ir.IntType = I64) -> ir.Constant:
        return ir.Constant(t, v)

    def fma(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        t = x.type
        return mathfns.intrinsic(self.b, f"llvm.fma.{suffix(t)}", t, [x, y, z])

    def floor(self, x: ir.Value) -> ir.Value:
        return mathfns.unary_intr(self.b, "floor", x)

    def two_sum(self, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
        """s + e = x + y exactly (Knuth)."""
        b = self.b
        s = b.fadd(x, y)
        yv = b.fsub(s, x)
        xv = b.fsub(s, yv)
        return s, b.fadd(b.fsub(x, xv), b.fsub(y, yv))

    def fast_two_sum(self, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
        """s + e = x + y exactly, for |x| >= |y| (Dekker)."""
        s = self.b.fadd(x, y)
        return s, self.b.fsub(y, self.b.fsub(s, x))

    def horner(self, x: ir.Value, coeffs: list[float]) -> ir.Value:
        acc: ir.Value = self.c(coeffs[-1], x.type)
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k, x.type))
        return acc


def _table(b: ir.IRBuilder, f: _Format) -> ir.GlobalVariable:
    """The format's window table of 2/pi as an internal constant of the module."""
    mod = b.module
    name = f"axle.two_over_pi.{suffix(f.t)}"
    if name not in mod.globals:
        at = ir.ArrayType(I32, len(f.table))
        g = ir.GlobalVariable(mod, at, name=name)
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(at, [ir.Constant(I32, w) for w in f.table])
        g.align = 64
    return mod.globals[name]


def _word(b: ir.IRBuilder, table: ir.GlobalVariable, idx: ir.Value) -> ir.Value:
    """table[idx] zero-extended to i64 (idx is in range for every input, NaN and inf too)."""
    p = b.gep(table, [ir.Constant(I32, 0), idx], inbounds=True)
    return b.zext(b.load(p, typ=I32), I64)


# ------------------------------------------------------------------ the reductions


def _cody_waite(m: _B, f: _Format, a: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(r, rl, q) for a < cw_limit: q = round(a 2/pi) as an integer, r + rl = a - q pi/2."""
    b = m.b
    q = m.floor(m.fma(a, m.c(f.two_over_pi), m.c(0.5)))
    q = b.select(b.fcmp_ordered("<", a, m.c(f.cw_limit)), q, m.c(0.0))  # keep fptosi in range
    nq = b.fneg(q)
    c1, c2, c3 = f.pio2
    r1 = m.fma(nq, m.c(c1), a)  # exact
    # r1 - q c2 - q c3 as a head and a tail: q c2 = ph + pl exactly, r1 - ph = s + e exactly
    ph = b.fmul(q, m.c(c2))
    pl = m.fma(q, m.c(c2), b.fneg(ph))
    s, e = m.two_sum(r1, b.fneg(ph))
    tail = b.fsub(e, m.fma(q, m.c(c3), pl))
    r, rl = m.fast_two_sum(s, tail)
    return r, rl, b.fptosi(q, I32)


def _payne_hanek(m: _B, f: _Format, a: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(r, rl, q) for any finite a (used above cw_limit): (a 2/pi) mod 4 from an exact
    product of the mantissa with a window of 2/pi, then scaled by pi/2."""
    b = m.b
    it = f.it
    bits = b.bitcast(a, it)
    e = b.lshr(bits, ir.Constant(it, f.mant))  # biased exponent (a >= 0)
    mant = b.or_(b.and_(bits, ir.Constant(it, (1 << f.mant) - 1)), ir.Constant(it, 1 << f.mant))
    eo = b.add(e, ir.Constant(it, f.off))
    idx = b.lshr(eo, ir.Constant(it, 3))
    mshift = b.shl(b.zext(mant, I64) if it != I64 else mant, b.zext(b.and_(eo, ir.Constant(it, 7)), I64)
                   if it != I64 else b.and_(eo, ir.Constant(it, 7)))
    idx32 = b.trunc(idx, I32) if it == I64 else idx
    table = _table(b, f)
    w = [_word(b, table, b.add(idx32, ir.Constant(I32, 4 * k))) for k in range(f.words)]
    mask = m.i(0xFFFFFFFF)
    if f.words == 3:  # M' < 2^31: top 64 bits of the 2.94 fixed-point product, mod 4
        hi = b.add(b.add(b.shl(b.mul(mshift, w[0]), m.i(32)), b.mul(mshift, w[1])),
                   b.lshr(b.mul(mshift, w[2]), m.i(32)))
        lo = None
    else:  # M' < 2^60 in two limbs times six words, by 32-bit columns (only those below 2^192)
        hi, lo = _columns(b, mshift, w, mask)
    n = b.lshr(b.add(hi, m.i(1 << 61)), m.i(62))  # the nearest quadrant, mod 4
    frac = b.sub(hi, b.shl(n, m.i(62)))  # signed, units of 2^-62 quadrants
    q = b.trunc(n, I32)
    if lo is None:  # float32: the fraction in a double, r as a float head and tail
        rd = b.fmul(b.sitofp(frac, F64), ir.Constant(F64, float(_round_bits(_PI / 2 ** 63, 53))))
        r = b.fptrunc(rd, f.t)
        return r, b.fptrunc(b.fsub(rd, b.fpext(r, F64)), f.t), q
    # float64: frac 2^64 + lo (lo unsigned) = top 2^64 + lo' with lo' signed, then a
    # double-double of top + lo' 2^-64 (a small fraction has top = 0 and lo' exact)
    top = b.add(frac, b.lshr(lo, m.i(63)))
    th = b.sitofp(top, F64)
    rest = b.fadd(b.sitofp(b.sub(top, b.fptosi(th, I64)), F64),
                  b.fmul(b.sitofp(lo, F64), ir.Constant(F64, 2.0 ** -64)))
    fh, fl = m.two_sum(th, rest)
    fh, fl = b.fmul(fh, m.c(2.0 ** -62)), b.fmul(fl, m.c(2.0 ** -62))
    p1, p2 = _PIO2_DD
    rh = b.fmul(fh, m.c(p1))
    rl = b.fadd(m.fma(fh, m.c(p1), b.fneg(rh)), m.fma(fh, m.c(p2), b.fmul(fl, m.c(p1))))
    r, rl = m.fast_two_sum(rh, rl)
    return r, rl, q


def _columns(b: ir.IRBuilder, mm: ir.Value, w: list[ir.Value], mask: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Bits 128..191 and 64..127 of M' x window (M' < 2^60, window = six 32-bit words, w[0]
    the most significant), as two u64. Column c sums the low halves of limb products of
    weight 2^(32c) and the high halves of those of weight 2^(32(c-1)), then carries."""
    m0 = b.and_(mm, mask)
    m1 = b.lshr(mm, ir.Constant(I64, 32))
    wk = w[::-1]  # wk[k] has weight 2^(32k)
    c32 = ir.Constant(I64, 32)
    cols: list[ir.Value] = [ir.Constant(I64, 0)] * 7
    for limb, m_ in ((0, m0), (1, m1)):
        for k in range(6):
            c = limb + k
            if c > 5:
                continue  # weight >= 2^192: whole multiples of 4 quadrants
            p = b.mul(m_, wk[k])
            cols[c] = b.add(cols[c], b.and_(p, mask))
            cols[c + 1] = b.add(cols[c + 1], b.lshr(p, c32))
    for c in range(5):
        cols[c + 1] = b.add(cols[c + 1], b.lshr(cols[c], c32))
    word = lambda h, l: b.or_(b.shl(h, c32), b.and_(l, mask))  # noqa: E731
    return word(cols[5], cols[4]), word(cols[3], cols[2])


# ------------------------------------------------------------------ sin and cos


def _kernel(m: _B, f: _Format, r: ir.Value, rl: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(sin, cos) of r + rl for |r| <= pi/4 (|rl| below an ulp of r), in fdlibm's form:
    sin = r + (r^3 S(r^2) + rl (1 - r^2/2)); cos = w + ((1 - w - r^2/2) + r^4 C(r^2) - r rl)
    with w = 1 - r^2/2 rounded (its rounding error recovered exactly)."""
    b = m.b
    s_coef, c_coef = f.sin_coef, f.cos_coef
    z = b.fmul(r, r)
    hz = b.fmul(z, m.c(0.5))
    v = b.fmul(z, r)
    sin = b.fadd(r, m.fma(v, m.horner(z, s_coef), m.fma(b.fneg(hz), rl, rl)))
    w = b.fsub(m.c(1.0), hz)
    tail = b.fadd(b.fsub(b.fsub(m.c(1.0), w), hz), m.fma(b.fmul(z, z), m.horner(z, c_coef), b.fneg(b.fmul(r, rl))))
    return sin, b.fadd(w, tail)


def _sincos(b: ir.IRBuilder, x: ir.Value, is_cos: bool) -> ir.Value:
    t = x.type
    f = _FORMATS[str(t)]
    m = _B(b, t)
    a = mathfns.unary_intr(b, "fabs", x)
    r1, l1, q1 = _cody_waite(m, f, a)
    r2, l2, q2 = _payne_hanek(m, f, a)
    cw = b.fcmp_ordered("<", a, m.c(f.cw_limit))
    r, rl, q = b.select(cw, r1, r2), b.select(cw, l1, l2), b.select(cw, q1, q2)
    s, c = _kernel(m, f, r, rl)
    k = b.add(q, ir.Constant(I32, 1)) if is_cos else q  # cos x = sin(x + pi/2)
    odd = b.trunc(k, ir.IntType(1))
    neg = b.trunc(b.lshr(k, ir.Constant(I32, 1)), ir.IntType(1))
    v = b.select(odd, c, s)
    v = b.select(neg, b.fneg(v), v)
    if not is_cos:  # sin(-x) = -sin(x), also for x = -0
        it = f.it
        sign = b.and_(b.bitcast(x, it), ir.Constant(it, 1 << (it.width - 1)))
        v = b.bitcast(b.xor(b.bitcast(v, it), sign), t)
    finite = b.fcmp_ordered("<", a, m.c(math.inf))
    return b.select(finite, v, b.fsub(x, x))  # NaN for NaN and +-inf


def sin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _sincos(b, x, False)


def cos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _sincos(b, x, True)


__all__ = ["sin", "cos", "pi_scaled", "two_over_pi_scaled"]
