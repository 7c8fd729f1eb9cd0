"""Inlined, vectorizable approximations of the transcendental functions.

Each is straight-line code (selects, no branches, no libm calls), so the loop vectorizer
turns a fused loop that uses them into SIMD code. Special values (NaN, +-inf, +-0,
subnormals) are handled with selects. Accuracy (measured against NumPy over wide random
ranges, see tests/backends/cpu/test_math.py and docs/backend-cpu.md):

* exp: range reduction x = n*ln2 + r (Cody-Waite, two-part ln2), Taylor polynomial on
  |r| <= ln2/2 (degree 7 for f32, 13 for f64), scaling by 2^n in two halves so results
  reaching the subnormal range and overflow come out right. ~2 ulp.
* log: exponent split (subnormals rescaled by 2^(mant+2) first), mantissa m in [sqrt(1/2), sqrt(2)),
  log(m) = 2 atanh((m-1)/(m+1)) by its odd series (5 terms f32, 11 terms f64). ~2 ulp.
* tanh: float32, x P(x^2)/Q(x^2) on |x| <= 9 (degree 4/4, axle.ir.numerics.TANH_F32),
  relative error <= 3.2e-7; float64, t = expm1(2|x|) / (expm1(2|x|) + 2) with copysign,
  where expm1 uses its Taylor series near 0 (no cancellation) and exp(y)-1 elsewhere. ~3 ulp.
* logistic: 1 / (1 + exp(-x)) with the exp above.
* sin/cos: in trig.py: Cody-Waite reduction for moderate arguments, Payne-Hanek (a window
  of the bits of 2/pi) for huge ones; Taylor kernel on |r| <= pi/4; a module function with a
  vector variant the loop vectorizer calls. < 0.8 ulp over the whole finite range.
* tan: sin/cos above (~2 ulp); log1p: log(u) * x / (u - 1), u = 1 + x (~3 ulp); cbrt:
  Newton's iteration in double from an exponent-bits estimate (f32 correctly rounded in the
  sweep, f64 ~1 ulp); next-after: one step of the bit pattern in the storage format.
* erf: float32 by its Taylor series in double on |x| < 4 (vectorized); float64 calls the C
  library's erf (the loop stays scalar). atan2: octant reduction to atan on [0, 1], its
  series on |z| <= tan(pi/8) (10 / 23 terms), C's special values; vectorized.
"""
from __future__ import annotations

import math

from llvmlite import ir

from axle.ir.dtypes import DType
from axle.ir.numerics import EXP_LOG, TANH_F32

from . import trig
from .lltypes import F32, F64, I32, I64, suffix


def intrinsic(b: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
    """Calls llvm.<name>.<types>, declaring it on first use."""
    mod = b.module
    full = name
    if full not in mod.globals:
        ir.Function(mod, ir.FunctionType(ret, [a.type for a in args]), name=full)
    return b.call(mod.globals[full], args)


def unary_intr(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    return intrinsic(b, f"llvm.{name}.{suffix(x.type)}", x.type, [x])


def fptosi_sat(b: ir.IRBuilder, x: ir.Value, to: ir.IntType) -> ir.Value:
    """float -> signed int, saturating, NaN -> 0 (the semantics of llvm.fptosi.sat, whose
    vector form LLVM 22 scalarizes on x86): a plain fptosi of an in-range value, then
    selects. The bounds -2^(w-1) and 2^(w-1) are exact in every float type."""
    t = x.type
    lo, hi = _c(t, -(2.0 ** (to.width - 1))), _c(t, 2.0 ** (to.width - 1))
    ok = b.and_(b.fcmp_ordered(">=", x, lo), b.fcmp_ordered("<", x, hi))
    v = b.fptosi(b.select(ok, x, _c(t, 0.0)), to)
    v = b.select(b.fcmp_ordered(">=", x, hi), ir.Constant(to, 2 ** (to.width - 1) - 1), v)
    return b.select(b.fcmp_ordered("<", x, lo), ir.Constant(to, -(2 ** (to.width - 1))), v)


def fptoui_sat(b: ir.IRBuilder, x: ir.Value, to: ir.IntType) -> ir.Value:
    """float -> unsigned int, saturating, NaN -> 0 (llvm.fptoui.sat's semantics): negative
    values give 0, values >= 2^w all ones. 2^w is exact in every float type but a half's."""
    t = x.type
    hi = _c(t, 2.0 ** to.width)
    ok = b.and_(b.fcmp_ordered(">=", x, _c(t, 0.0)), b.fcmp_ordered("<", x, hi))
    v = b.fptoui(b.select(ok, x, _c(t, 0.0)), to)
    return b.select(b.fcmp_ordered(">=", x, hi), ir.Constant(to, -1), v)


def _c(t: ir.Type, v: float) -> ir.Constant:
    return ir.Constant(t, v)


def horner(b: ir.IRBuilder, x: ir.Value, coeffs: list[float]) -> ir.Value:
    """coeffs[0] + x*(coeffs[1] + x*(...)) with fused multiply-adds."""
    t = x.type
    acc: ir.Value = _c(t, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = intrinsic(b, f"llvm.fma.{suffix(t)}", t, [acc, x, _c(t, c)])
    return acc


def _sel_lt(b: ir.IRBuilder, x: ir.Value, lim: float) -> ir.Value:
    return b.select(b.fcmp_ordered("<", x, _c(x.type, lim)), _c(x.type, lim), x)


def _sel_gt(b: ir.IRBuilder, x: ir.Value, lim: float) -> ir.Value:
    return b.select(b.fcmp_ordered(">", x, _c(x.type, lim)), _c(x.type, lim), x)


_F = {  # per float type: the bits of the format (the approximations' constants: ir/numerics.py)
    "float": dict(it=I32, mant=23, bias=127),
    "double": dict(it=I64, mant=52, bias=1023),
}
_K = {"float": EXP_LOG[DType.FLOAT32], "double": EXP_LOG[DType.FLOAT64]}


def _nan_to_zero(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """x, or 0 where x is NaN: what an fptosi may safely read (fptosi(NaN) is poison)."""
    return b.select(b.fcmp_ordered("ord", x, x), x, _c(x.type, 0.0))


def _pow2(b: ir.IRBuilder, n: ir.Value, t: ir.Type) -> ir.Value:
    """2^n for n in the normal exponent range, built from the exponent bits."""
    p = _F[str(t)]
    biased = b.add(n, ir.Constant(p["it"], p["bias"]))
    return b.bitcast(b.shl(biased, ir.Constant(p["it"], p["mant"])), t)


def exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    t = x.type
    p, k = _F[str(t)], _K[str(t)]
    xc = _sel_gt(b, _sel_lt(b, x, k.exp_lo), k.exp_hi)
    n = unary_intr(b, "floor", b.fadd(b.fmul(xc, _c(t, 1 / math.log(2))), _c(t, 0.5)))
    r = b.fsub(b.fsub(xc, b.fmul(n, _c(t, k.ln2_hi))), b.fmul(n, _c(t, k.ln2_lo)))
    poly = horner(b, r, [1.0 / math.factorial(i) for i in range(k.exp_degree + 1)])
    # n is an integer in [lo/ln2, hi/ln2] except for a NaN x (the clamps pass NaN through):
    # fptosi of NaN is poison, which LLVM folds to anything once it can prove the NaN
    # (e.g. from constants), so the scale comes from 0 there; poly(r) is NaN anyway.
    ni = b.fptosi(_nan_to_zero(b, n), p["it"])
    n1 = b.ashr(ni, ir.Constant(p["it"], 1))
    n2 = b.sub(ni, n1)
    return b.fmul(b.fmul(poly, _pow2(b, n1, t)), _pow2(b, n2, t))


def expm1(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    t = x.type
    series = b.fmul(x, horner(b, x, [1.0 / math.factorial(i + 1) for i in range(_K[str(t)].expm1_degree)]))
    big = b.fsub(exp(b, x), _c(t, 1.0))
    small = b.fcmp_ordered("<", unary_intr(b, "fabs", x), _c(t, math.log(2) / 2))
    return b.select(small, series, big)


def log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    t = x.type
    p, k = _F[str(t)], _K[str(t)]
    it, mant, bias = p["it"], p["mant"], p["bias"]
    min_normal = 2.0 ** (1 - bias)
    # Subnormals are scaled into the normal range first: by 2^(mant+2), since the smallest
    # subnormal is 2^(1-bias-mant) (2^30 left f64 subnormals below 2^-1052 subnormal).
    scale = mant + 2
    sub = b.fcmp_ordered("<", x, _c(t, min_normal))
    xs = b.select(sub, b.fmul(x, _c(t, 2.0 ** scale)), x)
    eadj = b.select(sub, ir.Constant(it, -scale), ir.Constant(it, 0))
    bits = b.bitcast(xs, it)
    e = b.sub(b.and_(b.lshr(bits, ir.Constant(it, mant)), ir.Constant(it, (1 << (it.width - 1 - mant)) - 1)),
              ir.Constant(it, bias))
    e = b.add(e, eadj)
    mbits = b.or_(b.and_(bits, ir.Constant(it, (1 << mant) - 1)), ir.Constant(it, bias << mant))
    m = b.bitcast(mbits, t)
    big = b.fcmp_ordered(">", m, _c(t, math.sqrt(2.0)))
    m = b.select(big, b.fmul(m, _c(t, 0.5)), m)
    e = b.select(big, b.add(e, ir.Constant(it, 1)), e)
    f = b.fdiv(b.fsub(m, _c(t, 1.0)), b.fadd(m, _c(t, 1.0)))
    s = b.fmul(f, f)
    series = horner(b, s, [1.0 / (2 * i + 1) for i in range(k.log_terms)])
    logm = b.fmul(b.fmul(f, _c(t, 2.0)), series)
    ef = b.sitofp(e, t)
    r = b.fadd(b.fmul(ef, _c(t, k.ln2_hi)), b.fadd(b.fmul(ef, _c(t, k.ln2_lo)), logm))
    r = b.select(b.fcmp_ordered("==", x, _c(t, math.inf)), _c(t, math.inf), r)
    r = b.select(b.fcmp_ordered("==", x, _c(t, 0.0)), _c(t, -math.inf), r)
    return b.select(b.fcmp_unordered("<", x, _c(t, 0.0)), _c(t, math.nan), r)


def tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    t = x.type
    if t == F32:
        # A rational function: ~12 vector ops where the expm1 form below takes ~45. Beyond
        # the clamp tanh is within an ulp of +-1 in float32; a NaN passes through the clamp.
        xc = _sel_lt(b, _sel_gt(b, x, TANH_F32.clamp), -TANH_F32.clamp)
        s = b.fmul(xc, xc)
        return b.fdiv(b.fmul(xc, horner(b, s, list(TANH_F32.p))), horner(b, s, list(TANH_F32.q)))
    a = _sel_gt(b, unary_intr(b, "fabs", x), _K[str(t)].tanh_clamp)
    u = expm1(b, b.fmul(a, _c(t, 2.0)))
    r = b.fdiv(u, b.fadd(u, _c(t, 2.0)))
    return intrinsic(b, f"llvm.copysign.{suffix(t)}", t, [r, x])


def logistic(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    t = x.type
    return b.fdiv(_c(t, 1.0), b.fadd(_c(t, 1.0), exp(b, b.fneg(x))))


def sin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return trig.sin(b, x)


def cos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return trig.cos(b, x)


__all__ = ["exp", "expm1", "log", "tanh", "logistic", "sin", "cos", "intrinsic", "unary_intr", "fptosi_sat", "F32",
           "F64"]


# ----------------------------------------------------------- elementwise completeness


def tan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """sin/cos of the shared reduction (each < 0.8 ulp): within ~2 ulp, vectorized."""
    return b.fdiv(trig.sin(b, x), trig.cos(b, x))


def log1p(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """log(u) * x / (u - 1) with u = 1 + x (Goldberg): the division cancels the rounding
    of 1 + x, so small |x| keeps full relative accuracy; u == 1 gives x itself (so -0.0
    stays -0.0) and +inf gives +inf (the quotient would be inf/inf)."""
    t = x.type
    u = b.fadd(x, _c(t, 1.0))
    r = b.fmul(log(b, u), b.fdiv(x, b.fsub(u, _c(t, 1.0))))
    r = b.select(b.fcmp_ordered("==", u, _c(t, 1.0)), x, r)
    return b.select(b.fcmp_ordered("==", x, _c(t, math.inf)), x, r)


def cbrt(b: ir.IRBuilder, x: ir.Value, half: bool = False) -> ir.Value:
    """Newton's iteration y <- y - (y - a/y^2)/3 on a = |x| in double, from an estimate
    built from the exponent bits (bits/3 plus the bias's 2/3, within ~6%; the division
    by 3 in double, since a 64-bit integer division does not vectorize), 4 steps for
    float32 (rounded once), 5 for float64. Subnormal doubles are scaled by 2^54 first
    (cbrt: 2^18). Zeros, infinities and NaN pass through; the sign is copied back."""
    t = x.type
    xd = b.fpext(x, F64) if t == F32 else x
    a = unary_intr(b, "fabs", xd)
    sub = b.fcmp_ordered("<", a, _c(F64, 2.0 ** -1022))
    a_s = b.select(sub, b.fmul(a, _c(F64, 2.0 ** 54)), a)
    third = b.fmul(b.sitofp(b.bitcast(a_s, I64), F64), _c(F64, 1.0 / 3.0))
    guess = b.add(fptosi_sat(b, third, I64), ir.Constant(I64, 0x2A9F7893782DA1CE))
    y = b.bitcast(guess, F64)
    for _ in range(4 if t == F32 else 5):
        y = b.fsub(y, b.fmul(b.fsub(y, b.fdiv(a_s, b.fmul(y, y))), _c(F64, 1.0 / 3.0)))
    y = b.select(sub, b.fmul(y, _c(F64, 2.0 ** -18)), y)
    special = b.or_(b.fcmp_unordered("==", a, _c(F64, 0.0)), b.fcmp_ordered("==", a, _c(F64, math.inf)))
    r = intrinsic(b, "llvm.copysign.f64", F64, [b.select(special, a, y), xd])
    return _narrow(b, r, half) if t == F32 else r


def _narrow(b: ir.IRBuilder, r: ir.Value, half: bool) -> ir.Value:
    """double -> float; for a float16 op (``half``: the emitter rounds this float to half
    next) behind an arithmetic fence, or LLVM merges the two truncations into a
    double->half libcall (__truncdfhf2) that the JIT process does not provide (a call to
    address 0). Only there: the fence stops the loop vectorizer."""
    f = b.fptrunc(r, F32)
    return intrinsic(b, "llvm.arithmetic.fence.f32", F32, [f]) if half else f


def _libm_double(b: ir.IRBuilder, name: str, args: list[ir.Value], half: bool) -> ir.Value:
    """The C library's double ``name`` (a call: the loop around it stays scalar); float32
    operands are widened and the result rounded once, so float32 is within half an ulp
    of correctly rounded wherever libm's double is within an ulp."""
    t = args[0].type
    wide = [b.fpext(a, F64) if t == F32 else a for a in args]
    mod = b.module
    if name not in mod.globals:
        fn = ir.Function(mod, ir.FunctionType(F64, [F64] * len(args)), name=name)
        fn.attributes.add("nounwind")
    r = b.call(mod.globals[name], wide)
    return _narrow(b, r, half) if t == F32 else r


#: erf(x) = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)): enough terms that the last is
#: below 2^-60 of the sum at |x| = 4, where float32's erf is 1 (erfc(3.92) < 2^-25)
_ERF_TERMS = 64
_ERF_SERIES = [(-1) ** n * 2 / math.sqrt(math.pi) / (math.factorial(n) * (2 * n + 1)) for n in range(_ERF_TERMS)]
_ERF_F32_ONE = 4.0


def erf(b: ir.IRBuilder, x: ir.Value, half: bool = False) -> ir.Value:
    """float32: the Taylor series in double on |x| < 4 (the terms cancel to ~1e-11 at
    worst, far below float32's ulp), +-1 beyond; vectorized. float64: the C library's
    erf (a call: the loop stays scalar)."""
    if x.type != F32:
        return _libm_double(b, "erf", [x], half)
    xd = b.fpext(x, F64)
    z = b.fmul(xd, xd)
    series = b.fmul(xd, horner(b, z, _ERF_SERIES))
    big = b.fcmp_ordered(">=", unary_intr(b, "fabs", x), _c(F32, _ERF_F32_ONE))
    one = intrinsic(b, "llvm.copysign.f32", F32, [_c(F32, 1.0), x])
    return b.select(big, one, _narrow(b, series, half))


#: atan(z) = sum (-1)^n z^(2n+1) / (2n+1) on |z| <= tan(pi/8): terms to below half an ulp
_ATAN_TERMS = {"float": 10, "double": 23}
_TAN_PI_8 = math.tan(math.pi / 8)


def _atan_unit(b: ir.IRBuilder, t: ir.Value) -> ir.Value:
    """atan(t) for t in [0, 1]: t itself below tan(pi/8), else pi/4 + atan((t-1)/(t+1))."""
    ty = t.type
    hi = b.fcmp_ordered(">", t, _c(ty, _TAN_PI_8))
    z = b.select(hi, b.fdiv(b.fsub(t, _c(ty, 1.0)), b.fadd(t, _c(ty, 1.0))), t)
    coeffs = [(-1) ** n / (2 * n + 1) for n in range(_ATAN_TERMS[str(ty)])]
    r = b.fmul(z, horner(b, b.fmul(z, z), coeffs))
    return b.select(hi, b.fadd(_c(ty, math.pi / 4), r), r)


def atan2(b: ir.IRBuilder, y: ir.Value, x: ir.Value) -> ir.Value:
    """atan of the smaller of |y|, |x| over the larger (in [0, 1]), moved to its octant
    (pi/2 - r, pi - r) and given y's sign; vectorized. Special values as C's atan2: two
    zeros give +-0 or +-pi by the sign of x, two infinities +-pi/4 or +-3pi/4, a NaN NaN."""
    t = x.type
    ax, ay = unary_intr(b, "fabs", x), unary_intr(b, "fabs", y)
    swap = b.fcmp_ordered(">", ay, ax)
    num, den = b.select(swap, ax, ay), b.select(swap, ay, ax)
    both_zero = b.and_(b.fcmp_ordered("==", ax, _c(t, 0.0)), b.fcmp_ordered("==", ay, _c(t, 0.0)))
    both_inf = b.and_(b.fcmp_ordered("==", ax, _c(t, math.inf)), b.fcmp_ordered("==", ay, _c(t, math.inf)))
    ratio = b.select(both_zero, _c(t, 0.0), b.select(both_inf, _c(t, 1.0), b.fdiv(num, den)))
    r = _atan_unit(b, ratio)
    r = b.select(swap, b.fsub(_c(t, math.pi / 2), r), r)
    x_neg = b.icmp_signed("<", b.bitcast(x, _INT_OF[str(t)]), ir.Constant(_INT_OF[str(t)], 0))  # -0.0 too
    r = b.select(x_neg, b.fsub(_c(t, math.pi), r), r)
    r = intrinsic(b, f"llvm.copysign.{suffix(t)}", t, [r, y])
    return b.select(b.fcmp_unordered("uno", x, y), b.fadd(x, y), r)


_INT_OF = {"half": ir.IntType(16), "float": I32, "double": I64}
_TINIEST = {"half": 2.0 ** -24, "float": 2.0 ** -149, "double": 5e-324}


def next_after(b: ir.IRBuilder, x: ir.Value, y: ir.Value, storage: ir.Type, bf16: bool = False) -> ir.Value:
    """nextafter in the ``storage`` format (float16 values sit in float registers): one
    step of the bit pattern, up in magnitude when moving away from zero. NaN in, NaN out;
    x == y gives y; from a zero, the smallest subnormal with y's sign. ``bf16``: bfloat16
    values in float registers, the top half of the float's bits, so a step is 1 << 16."""
    t = x.type
    xs, ys = (b.fptrunc(v, storage) if storage != t else v for v in (x, y))
    it = _INT_OF[str(storage)]
    bits = b.bitcast(xs, it)
    step = 1 << 16 if bf16 else 1
    away = b.icmp_unsigned("==", b.fcmp_ordered("<", xs, ys), b.fcmp_ordered(">", xs, ir.Constant(storage, 0.0)))
    stepped = b.bitcast(b.add(bits, b.select(away, ir.Constant(it, step), ir.Constant(it, -step))), storage)
    tiniest = 2.0 ** -133 if bf16 else _TINIEST[str(storage)]
    tiny = intrinsic(b, f"llvm.copysign.{suffix(storage)}", storage, [ir.Constant(storage, tiniest), ys])
    r = b.select(b.fcmp_ordered("==", xs, ir.Constant(storage, 0.0)), tiny, stepped)
    # x == y gives y: as copysign(x, y), since LLVM may replace y by the equal x in a
    # select on x == y, which loses the sign of next_after(+0.0, -0.0) = -0.0
    r = b.select(b.fcmp_ordered("==", xs, ys), intrinsic(b, f"llvm.copysign.{suffix(storage)}", storage, [xs, ys]), r)
    r = b.select(b.fcmp_unordered("uno", xs, ys), b.fadd(xs, ys), r)
    return b.fpext(r, t) if storage != t else r
