"""sin and cos, right over the whole float range, in code the loop vectorizer keeps in SIMD.

The argument a = |x| is reduced to a = (4k + q) pi/2 + r with |r| <= pi/4 (r carried as a
head and a tail, r + rl), then sin or cos of r + rl comes from a polynomial, and the
quadrant q and the sign of x pick the function and the sign. Two reductions:

* **Cody-Waite** for a < ``cw_limit`` (2^20 float32, 2^28 float64): q = round(a 2/pi),
  r = a - q C1 - q C2 - q C3 where C1 + C2 + C3 is pi/2 to three times the float's
  precision. With fused multiply-adds the first step is exact (a - q C1 lies on the grid of
  both terms and is below 1), and the tail rl of the rest is kept by an exact product and
  sum, so r + rl is right to far below an ulp of r even next to a multiple of pi/2.
* **Payne-Hanek** for the rest: a = M 2^s with an integer mantissa M. Bits of 2/pi at
  weights 2^-j with j < s - 1 contribute whole multiples of 4 quadrants, and bits far
  beyond the mantissa only below the needed precision, so a window of 96 (float32) or 192
  (float64) bits of 2/pi, chosen by the exponent from a table in steps of 8 bits (M
  shifted by the remaining 0..7 bits), suffices. An exact integer product of M with the
  window in 32-bit limbs (what 32 x 32 -> 64 bit vector multiplies do) gives (a 2/pi) mod 4
  as fixed point with 62 (float32) or 126 (float64) fraction bits; rounding it to the
  nearest integer gives q and r / (pi/2). The closest a float32 comes to a multiple of pi/2
  leaves 33 of those bits, a float64 more than 60. The float32 scheme is that of ARM's
  optimized-routines sinf; the float64 one widens it.

Each module gets one scalar function per (sin/cos, format) and a vector variant of the
host's SIMD width, linked by the vector-function ABI attribute: the loop vectorizer turns a
fused loop calling the scalar function into calls of the variant. Both take the Payne-Hanek
branch only when some lane needs it (a vector of moderate arguments pays Cody-Waite only),
and the variant gathers its 2/pi window.

The bits of 2/pi and pi/2 are computed here from Machin's formula in integer arithmetic,
so no long literal can be mistyped. The polynomials are Taylor series (degrees in
``_FORMATS``): on |r| <= pi/4 the first omitted term is below 2^-29 (float32) / 2^-58
(float64) relative. Special values: NaN and +-inf give NaN, sin(-0) = -0, subnormals give
sin x = x. Measured: at most 0.79 ulp (float32, every float from 2^-27 up), 0.75 ulp
(float64, random samples of every binade, against a 420-digit reference).
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

from llvmlite import ir

from . import mathfns  # partially initialized when mathfns imports this module: used at call time
from .lltypes import F32, F64, I1, I32, I64, PTR, suffix

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


#: per float format: Cody-Waite range (q stays small enough that the first step is exact
#: and the dropped part of pi/2 stays far below an ulp of r), 32-bit words of the 2/pi
#: window, Taylor degrees of sin and cos
_FORMATS = {
    "float": _Format(F32, I32, 23, 2.0 ** 20, 3, sin_deg=9, cos_deg=10),
    "double": _Format(F64, I64, 52, 2.0 ** 28, 6, sin_deg=17, cos_deg=16),
}
#: pi/2 as a double-double, for turning the Payne-Hanek fraction into radians
_PIO2_DD = _split(_PI / 2, 53, 2)


# ------------------------------------------------------------------ IR helpers


class _B:
    """Terse arithmetic on one builder over scalars or vectors of ``lanes`` elements (0 for
    scalars): constants are splatted, intrinsic names carry the vector type."""

    def __init__(self, b: ir.IRBuilder, elem: ir.Type, lanes: int) -> None:
        self.b, self.lanes = b, lanes
        self.t = self.ty(elem)

    def ty(self, elem: ir.Type) -> ir.Type:
        return ir.VectorType(elem, self.lanes) if self.lanes else elem

    def c(self, v: float, elem: ir.Type | None = None) -> ir.Constant:
        t = self.ty(elem) if elem is not None else self.t
        return ir.Constant(t, [v] * self.lanes) if self.lanes else ir.Constant(t, v)

    def i(self, v: int, elem: ir.IntType = I64) -> ir.Constant:
        return self.c(v, elem)

    def intr(self, name: str, x: ir.Value, *rest: ir.Value) -> ir.Value:
        elem = x.type.element if self.lanes else x.type
        sfx = f"v{self.lanes}{suffix(elem)}" if self.lanes else suffix(elem)
        return mathfns.intrinsic(self.b, f"llvm.{name}.{sfx}", x.type, [x, *rest])

    def fma(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        return self.intr("fma", x, y, z)

    def floor(self, x: ir.Value) -> ir.Value:
        return self.intr("floor", x)

    def any(self, c: ir.Value) -> ir.Value:
        """Whether any lane of the i1 (vector) c is set."""
        if not self.lanes:
            return c
        return mathfns.intrinsic(self.b, f"llvm.vector.reduce.or.v{self.lanes}i1", I1, [c])

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
        acc: ir.Value = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def load_words(self, table: ir.GlobalVariable, idx: ir.Value) -> ir.Value:
        """table[idx] zero-extended to i64 per lane (idx is in range for every input, NaN
        and inf included); vectors by a gather."""
        b = self.b
        zero = ir.Constant(I32, 0)
        p = b.gep(table, [zero, idx], inbounds=True, source_etype=table.value_type)
        if not self.lanes:
            return b.zext(b.load(p, typ=I32), I64)
        p.type = self.ty(PTR)  # a vector index makes a vector of pointers
        ones = ir.Constant(self.ty(I1), [1] * self.lanes)
        w = mathfns.intrinsic(b, f"llvm.masked.gather.v{self.lanes}i32.v{self.lanes}p0", self.ty(I32),
                              [p, ir.Constant(I32, 4), ones, ir.Constant(self.ty(I32), None)])
        return b.zext(w, self.ty(I64))


def _table(mod: ir.Module, f: _Format) -> ir.GlobalVariable:
    """The format's window table of 2/pi as an internal constant of the module."""
    name = f"axle.two_over_pi.{suffix(f.t)}"
    if name not in mod.globals:
        at = ir.ArrayType(I32, len(f.table))
        g = ir.GlobalVariable(mod, at, name=name)
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(at, [ir.Constant(I32, w) for w in f.table])
        g.align = 64
    return mod.globals[name]


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
    return r, rl, b.fptosi(q, m.ty(I32))


def _payne_hanek(m: _B, f: _Format, a: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(r, rl, q) for any finite a (used above cw_limit): (a 2/pi) mod 4 from an exact
    product of the mantissa with a window of 2/pi, then scaled by pi/2."""
    b = m.b
    it = m.ty(f.it)
    bits = b.bitcast(a, it)
    e = b.lshr(bits, m.i(f.mant, f.it))  # biased exponent (a >= 0)
    mant = b.or_(b.and_(bits, m.i((1 << f.mant) - 1, f.it)), m.i(1 << f.mant, f.it))
    eo = b.add(e, m.i(f.off, f.it))
    sh = b.and_(eo, m.i(7, f.it))
    idx = b.lshr(eo, m.i(3, f.it))
    if f.it is not I64:
        mant, sh = b.zext(mant, m.ty(I64)), b.zext(sh, m.ty(I64))
    else:
        idx = b.trunc(idx, m.ty(I32))
    mshift = b.shl(mant, sh)
    table = _table(b.module, f)
    w = [m.load_words(table, b.add(idx, m.i(4 * k, I32))) for k in range(f.words)]
    if f.words == 3:  # M' < 2^31: top 64 bits of the 2.94 fixed-point product, mod 4
        hi = b.add(b.add(b.shl(b.mul(mshift, w[0]), m.i(32)), b.mul(mshift, w[1])),
                   b.lshr(b.mul(mshift, w[2]), m.i(32)))
        lo = None
    else:  # M' < 2^60 in two limbs times six words, by 32-bit columns (only those below 2^192)
        hi, lo = _columns(m, mshift, w)
    n = b.lshr(b.add(hi, m.i(1 << 61)), m.i(62))  # the nearest quadrant, mod 4
    frac = b.sub(hi, b.shl(n, m.i(62)))  # signed, units of 2^-62 quadrants
    q = b.trunc(n, m.ty(I32))
    if lo is None:  # float32: the fraction in a double, r as a float head and tail
        rd = b.fmul(b.sitofp(frac, m.ty(F64)), m.c(float(_round_bits(_PI / 2 ** 63, 53)), F64))
        r = b.fptrunc(rd, m.t)
        return r, b.fptrunc(b.fsub(rd, b.fpext(r, m.ty(F64))), m.t), q
    # float64: frac 2^64 + lo (lo unsigned) = top 2^64 + lo' with lo' signed, then a
    # double-double of top + lo' 2^-64 (a small fraction has top = 0 and lo' exact)
    top = b.add(frac, b.lshr(lo, m.i(63)))
    th = b.sitofp(top, m.t)
    rest = b.fadd(b.sitofp(b.sub(top, b.fptosi(th, m.ty(I64))), m.t),
                  b.fmul(b.sitofp(lo, m.t), m.c(2.0 ** -64)))
    fh, fl = m.two_sum(th, rest)
    fh, fl = b.fmul(fh, m.c(2.0 ** -62)), b.fmul(fl, m.c(2.0 ** -62))
    p1, p2 = _PIO2_DD
    rh = b.fmul(fh, m.c(p1))
    rl = b.fadd(m.fma(fh, m.c(p1), b.fneg(rh)), m.fma(fh, m.c(p2), b.fmul(fl, m.c(p1))))
    r, rl = m.fast_two_sum(rh, rl)
    return r, rl, q


def _columns(m: _B, mm: ir.Value, w: list[ir.Value]) -> tuple[ir.Value, ir.Value]:
    """Bits 128..191 and 64..127 of M' x window (M' < 2^60, window = six 32-bit words, w[0]
    the most significant), as two u64. Column c sums the low halves of limb products of
    weight 2^(32c) and the high halves of those of weight 2^(32(c-1)), then carries."""
    b = m.b
    mask, c32 = m.i(0xFFFFFFFF), m.i(32)
    m0 = b.and_(mm, mask)
    m1 = b.lshr(mm, c32)
    wk = w[::-1]  # wk[k] has weight 2^(32k)
    cols: list[ir.Value] = [m.i(0)] * 7
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

    def word(h: ir.Value, lo: ir.Value) -> ir.Value:
        return b.or_(b.shl(h, c32), b.and_(lo, mask))

    return word(cols[5], cols[4]), word(cols[3], cols[2])


# ------------------------------------------------------------------ sin and cos


def _kernel(m: _B, f: _Format, r: ir.Value, rl: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(sin, cos) of r + rl for |r| <= pi/4 (|rl| below an ulp of r), in fdlibm's form:
    sin = r + (r^3 S(r^2) + rl (1 - r^2/2)); cos = w + ((1 - w - r^2/2) + r^4 C(r^2) - r rl)
    with w = 1 - r^2/2 rounded (its rounding error recovered exactly)."""
    b = m.b
    z = b.fmul(r, r)
    hz = b.fmul(z, m.c(0.5))
    v = b.fmul(z, r)
    sin = b.fadd(r, m.fma(v, m.horner(z, f.sin_coef), m.fma(b.fneg(hz), rl, rl)))
    w = b.fsub(m.c(1.0), hz)
    tail = b.fadd(b.fsub(b.fsub(m.c(1.0), w), hz), m.fma(b.fmul(z, z), m.horner(z, f.cos_coef), b.fneg(b.fmul(r, rl))))
    return sin, b.fadd(w, tail)


def _body(fn: ir.Function, f: _Format, lanes: int, is_cos: bool) -> None:
    """sin or cos of the function's one argument: Cody-Waite first; only when some lane is
    finite and at least cw_limit, Payne-Hanek too (a branch a whole vector takes)."""
    entry = fn.append_basic_block("entry")
    huge = fn.append_basic_block("huge")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    m = _B(b, f.t, lanes)
    x = fn.args[0]
    a = m.intr("fabs", x)
    r1, l1, q1 = _cody_waite(m, f, a)
    cw = b.fcmp_unordered("<", a, m.c(f.cw_limit))  # NaN too: Cody-Waite makes it NaN
    big = b.and_(b.not_(cw), b.fcmp_ordered("<", a, m.c(math.inf)))
    b.cbranch(m.any(big), huge, done)
    b.position_at_end(huge)
    r2, l2, q2 = _payne_hanek(m, f, a)
    r2, l2, q2 = b.select(cw, r1, r2), b.select(cw, l1, l2), b.select(cw, q1, q2)
    b.branch(done)
    b.position_at_end(done)
    r, rl, q = (b.phi(v.type) for v in (r1, l1, q1))
    for phi, fast, slow in ((r, r1, r2), (rl, l1, l2), (q, q1, q2)):
        phi.add_incoming(fast, entry)
        phi.add_incoming(slow, huge)
    s, c = _kernel(m, f, r, rl)
    k = b.add(q, m.i(1, I32)) if is_cos else q  # cos x = sin(x + pi/2)
    odd = b.trunc(k, m.ty(I1))
    neg = b.trunc(b.lshr(k, m.i(1, I32)), m.ty(I1))
    v = b.select(odd, c, s)
    v = b.select(neg, b.fneg(v), v)
    if not is_cos:  # sin(-x) = -sin(x), also for x = -0
        it = m.ty(f.it)
        sign = b.and_(b.bitcast(x, it), m.i(1 << (f.it.width - 1), f.it))
        v = b.bitcast(b.xor(b.bitcast(v, it), sign), m.t)
    finite = b.fcmp_ordered("<", a, m.c(math.inf))
    b.ret(b.select(finite, v, b.fsub(x, x)))  # NaN for NaN and +-inf


def _function(mod: ir.Module, f: _Format, is_cos: bool) -> ir.Function:
    """The module's scalar sin/cos function for the format, defined on first use with its
    vector variants for the host's SIMD width (and, on AVX-512, for 256 bits too: LLVM's
    tuning for Intel's cores prefers 256-bit loops, which found no variant and stayed
    scalar). The scalar one is never inlined and carries the vector-function ABI attribute
    naming the variants, so the loop vectorizer turns a loop calling it into calls of the
    variant of its width (and the scalar one serves the remainder): the rare Payne-Hanek
    path then costs only the vectors that need it."""
    from .target import host

    name = f"axle_{'cos' if is_cos else 'sin'}_{suffix(f.t)}"
    if name in mod.globals:
        return mod.globals[name]
    bits = 32 if f.t == F32 else 64
    widths = (512, 256) if host().vector_bits == 512 else (host().vector_bits,)
    variants = []
    for lanes in dict.fromkeys(max(w // bits, 2) for w in widths):
        vt = ir.VectorType(f.t, lanes)
        variants.append((lanes, ir.Function(mod, ir.FunctionType(vt, [vt]), name=f"{name}_v{lanes}")))
    scalar = ir.Function(mod, ir.FunctionType(f.t, [f.t]), name=name)
    for fn, n in (*((vec, lanes) for lanes, vec in variants), (scalar, 0)):
        fn.linkage = "internal"
        for attr in ("noinline", "nounwind", "readnone"):
            fn.attributes.add(attr)
        _body(fn, f, n, is_cos)
    # (llvmlite only knows LLVM's keyword attributes; this is a string attribute)
    abi = ",".join(f"_ZGV_LLVM_N{lanes}v_{name}({vec.name})" for lanes, vec in variants)
    set.add(scalar.attributes, f'"vector-function-abi-variant"="{abi}"')
    for _, vec in variants:
        _keep(mod, vec)
    return scalar


def _keep(mod: ir.Module, fn: ir.Function) -> None:
    """Adds fn to llvm.compiler.used: only the attribute refers to the vector variant, and
    without this the optimizer would drop it as unused before vectorizing."""
    name = "llvm.compiler.used"
    g = mod.globals.get(name)
    if g is None:
        g = ir.GlobalVariable(mod, ir.ArrayType(PTR, 0), name=name)
        g.linkage = "appending"
        g.section = "llvm.metadata"
        g.initializer = ir.Constant(g.value_type, [])
    items = list(g.initializer.constant) + [fn]
    g.value_type = ir.ArrayType(PTR, len(items))
    g.initializer = ir.Constant(g.value_type, items)


def _call(b: ir.IRBuilder, x: ir.Value, is_cos: bool) -> ir.Value:
    return b.call(_function(b.module, _FORMATS[str(x.type)], is_cos), [x])


def sin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _call(b, x, False)


def cos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _call(b, x, True)


__all__ = ["sin", "cos", "pi_scaled", "two_over_pi_scaled"]
