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
* erf, atan2: the C library's double functions (calls: a loop using them stays scalar;
  no vectorizable approximation is written yet), float32 widened and rounded once.
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


def cbrt(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Newton's iteration y <- y - (y - a/y^2)/3 on a = |x| in double, from an estimate
    built from the exponent bits (within ~6%, so 5 steps reach double precision); float32
    rounds the double result once. Subnormal doubles are scaled by 2^54 first (cbrt:
    2^18). Zeros, infinities and NaN pass through; the sign is copied back."""
    t = x.type
    xd = b.fpext(x, F64) if t == F32 else x
    a = unary_intr(b, "fabs", xd)
    sub = b.fcmp_ordered("<", a, _c(F64, 2.0 ** -1022))
    a_s = b.select(sub, b.fmul(a, _c(F64, 2.0 ** 54)), a)
    bits = b.bitcast(a_s, I64)
    guess = b.bitcast(b.add(b.udiv(bits, ir.Constant(I64, 3)), ir.Constant(I64, 0x2A9F7893782DA1CE)), F64)
    y = guess
    for _ in range(5):
        y = b.fsub(y, b.fdiv(b.fsub(y, b.fdiv(a_s, b.fmul(y, y))), _c(F64, 3.0)))
    y = b.select(sub, b.fmul(y, _c(F64, 2.0 ** -18)), y)
    special = b.or_(b.fcmp_unordered("==", a, _c(F64, 0.0)), b.fcmp_ordered("==", a, _c(F64, math.inf)))
    r = intrinsic(b, "llvm.copysign.f64", F64, [b.select(special, a, y), xd])
    return _narrow(b, r) if t == F32 else r


def _narrow(b: ir.IRBuilder, r: ir.Value) -> ir.Value:
    """double -> float behind an arithmetic fence: a float16 op rounds this float to half
    next, and LLVM would merge the two truncations into a double->half libcall
    (__truncdfhf2) that the JIT process does not provide (a call to address 0)."""
    return intrinsic(b, "llvm.arithmetic.fence.f32", F32, [b.fptrunc(r, F32)])


def _libm_double(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
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
    return _narrow(b, r) if t == F32 else r


def erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _libm_double(b, "erf", [x])


def atan2(b: ir.IRBuilder, y: ir.Value, x: ir.Value) -> ir.Value:
    return _libm_double(b, "atan2", [y, x])


_INT_OF = {"half": ir.IntType(16), "float": I32, "double": I64}
_TINIEST = {"half": 2.0 ** -24, "float": 2.0 ** -149, "double": 5e-324}


def next_after(b: ir.IRBuilder, x: ir.Value, y: ir.Value, storage: ir.Type) -> ir.Value:
    """nextafter in the ``storage`` format (float16 values sit in float registers): one
    step of the bit pattern, up in magnitude when moving away from zero. NaN in, NaN out;
    x == y gives y; from a zero, the smallest subnormal with y's sign."""
    t = x.type
    xs, ys = (b.fptrunc(v, storage) if storage != t else v for v in (x, y))
    it = _INT_OF[str(storage)]
    bits = b.bitcast(xs, it)
    away = b.icmp_unsigned("==", b.fcmp_ordered("<", xs, ys), b.fcmp_ordered(">", xs, ir.Constant(storage, 0.0)))
    stepped = b.bitcast(b.add(bits, b.select(away, ir.Constant(it, 1), ir.Constant(it, -1))), storage)
    tiny = intrinsic(b, f"llvm.copysign.{suffix(storage)}", storage, [ir.Constant(storage, _TINIEST[str(storage)]), ys])
    r = b.select(b.fcmp_ordered("==", xs, ir.Constant(storage, 0.0)), tiny, stepped)
    # x == y gives y: as copysign(x, y), since LLVM may replace y by the equal x in a
    # select on x == y, which loses the sign of next_after(+0.0, -0.0) = -0.0
    r = b.select(b.fcmp_ordered("==", xs, ys), intrinsic(b, f"llvm.copysign.{suffix(storage)}", storage, [xs, ys]), r)
    r = b.select(b.fcmp_unordered("uno", xs, ys), b.fadd(xs, ys), r)
    return b.fpext(r, t) if storage != t else r
