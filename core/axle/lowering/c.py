"""The C-family renderer: a fused computation as a C function of loop nests.

Two layers, as in tinygrad's renderers:

- a **dialect** (:class:`C99`, :class:`OpenCLC`) is a handful of class attributes: type
  names, qualifiers, the kernel prefix, the loop that spreads work over the device, how
  half floats are loaded, stored and rounded. CUDA, Metal or a vendor C are another small
  subclass;
- the **renderer** (:class:`CRenderer`) is the same for every dialect: the op -> expression
  tables with the IR's exact semantics, literals, and loop nests.

Semantics are the interpreter's (``axle.ir.ops``): XLA integer division and remainder
(x/0 = -1, x%0 = x, INT_MIN/-1 = INT_MIN, never a trap), wrapping integer arithmetic (done
in unsigned types: signed overflow is undefined in C), IEEE 754-2019 max/min (NaN wins,
-0.0 < +0.0), float -> int converts that saturate with NaN -> 0, float16 computed in float
and rounded once per op, float sums accumulating in double (:func:`accumulator`).

Kernel shape: a fusion's values are recomputed inline at each index (one expression tree
per output element, movement ops rewriting the index through :mod:`axle.lowering.index`),
except reductions and dots: each is computed once into a buffer (the output itself, or a
scratch buffer the launcher allocates) by a stage of its own, a function with one device
loop that the launcher calls before the stages reading the buffer (:class:`CKernel`).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from ..errors import BackendError
from ..ir.dotdims import DotDims
from ..ir.dtypes import DType, dtype
from ..ir.module import Computation, Node
from ..ir.opcodes import Op
from ..ir.reductions import REDUCE_KINDS
from ..ir.types import TensorType
from . import index as ix
from .index import Ix

# ------------------------------------------------------------------------------ dialects


class C99:
    """ISO C99 with the ``_Float16`` extension of GCC and Clang (storage only: float16
    arithmetic runs in float). Host memory, one thread: the device loop is a plain loop."""

    name: ClassVar[str] = "c99"
    #: element type inside buffers
    storage: ClassVar[dict[DType, str]] = {
        DType.BOOL: "uint8_t", DType.INT32: "int32_t", DType.INT64: "int64_t",
        DType.FLOAT16: "_Float16", DType.FLOAT32: "float", DType.FLOAT64: "double",
        DType.INT8: "int8_t", DType.INT16: "int16_t", DType.UINT8: "uint8_t", DType.UINT16: "uint16_t",
        DType.UINT32: "uint32_t", DType.UINT64: "uint64_t", DType.BFLOAT16: "uint16_t"}
    #: type of values in registers: bool as int 0/1, float16 and bfloat16 as float
    reg: ClassVar[dict[DType, str]] = {
        DType.BOOL: "int", DType.INT32: "int32_t", DType.INT64: "int64_t",
        DType.FLOAT16: "float", DType.FLOAT32: "float", DType.FLOAT64: "double",
        DType.INT8: "int8_t", DType.INT16: "int16_t", DType.UINT8: "uint8_t", DType.UINT16: "uint16_t",
        DType.UINT32: "uint32_t", DType.UINT64: "uint64_t", DType.BFLOAT16: "float"}
    #: unsigned twin for wrapping arithmetic (at least 32 bits: C promotes narrower
    #: operands to int, where 65535 * 65535 would overflow)
    unsigned: ClassVar[dict[DType, str]] = {
        DType.INT32: "uint32_t", DType.INT64: "uint64_t", DType.INT8: "uint32_t", DType.INT16: "uint32_t",
        DType.UINT8: "uint32_t", DType.UINT16: "uint32_t", DType.UINT32: "uint32_t", DType.UINT64: "uint64_t"}
    int_min: ClassVar[dict[DType, str]] = {DType.INT32: "INT32_MIN", DType.INT64: "INT64_MIN", DType.INT8: "INT8_MIN",
                                           DType.INT16: "INT16_MIN"}
    int_max: ClassVar[dict[DType, str]] = {DType.INT32: "INT32_MAX", DType.INT64: "INT64_MAX", DType.INT8: "INT8_MAX",
                                           DType.INT16: "INT16_MAX"}
    int64_suffix: ClassVar[str] = "LL"
    uint64_suffix: ClassVar[str] = "ULL"
    index_type: ClassVar[str] = "int64_t"
    #: math function suffix per register type (C99 expf vs exp; OpenCL overloads)
    math_suffix: ClassVar[dict[str, str]] = {"float": "f", "double": ""}
    header: ClassVar[str] = "#include <math.h>\n#include <stdint.h>\n"
    kernel_prefix: ClassVar[str] = ""
    buffer_qualifier: ClassVar[str] = ""
    restrict: ClassVar[str] = "restrict"
    helper_prefix: ClassVar[str] = "static inline"
    #: the loop spreading ``n`` output elements over the device (here: one thread)
    device_loop: ClassVar[str] = "for ({t} {v} = 0; {v} < {n}; {v}++)"
    #: float16: load, store (value already rounded), round float or double to the nearest half
    load_half: ClassVar[str] = "((float){ptr}[{off}])"
    store_half: ClassVar[str] = "{ptr}[{off}] = (_Float16)({value});"
    round_half: ClassVar[str] = "((float)(_Float16)({x}))"
    round_half_double: ClassVar[str] = "((float)(_Float16)({x}))"
    #: bfloat16 bits <-> float32 (exact one way, rounded to nearest even the other): the
    #: type-punning expressions the helpers use
    float_bits: ClassVar[str] = "(((union {{ float f; uint32_t u; }}){{ .f = {x} }}).u)"
    bits_float: ClassVar[str] = "(((union {{ uint32_t u; float f; }}){{ .u = {x} }}).f)"
    #: float -> int with saturation and NaN -> 0, of a register value ``{x}`` (C has no
    #: such cast: a helper)
    sat_convert: ClassVar[dict[DType, str]] = {dt: f"axle_sat_{dt.np.name}({{x}})" for dt in (
        DType.INT32, DType.INT64, DType.INT8, DType.INT16, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64)}
    float_cast: ClassVar[dict[DType, str]] = {DType.FLOAT32: "(float)", DType.FLOAT64: "(double)"}
    #: loops add float16/float32 terms in double (see :func:`accumulator`)
    wide_float_sums: ClassVar[bool] = True
    #: per-op replacements of the float unary table, for a compiler that gets a builtin
    #: wrong (each entry: ``(dialect, dtype, x) -> expression``; see axle_opencl.render)
    float_unary_override: ClassVar[dict[Op, Callable[[type[C99], DType, str], str]]] = {}
    #: bit counts of an unsigned register value: GCC/Clang builtins (clz of 0 is undefined
    #: there, so the renderer guards it)
    popcount: ClassVar[dict[int, str]] = {32: "__builtin_popcount({x})", 64: "__builtin_popcountll({x})"}
    clz: ClassVar[dict[int, str]] = {32: "__builtin_clz({x})", 64: "__builtin_clzll({x})"}
    #: bodies of the float16 bits helpers (a float register holding a half <-> its 16 bits)
    half_to_bits: ClassVar[str] = "union { _Float16 h; uint16_t u; } v; v.h = (_Float16)x; return v.u;"
    bits_to_half: ClassVar[str] = "union { uint16_t u; _Float16 h; } v; v.u = b; return (float)v.h;"


#: (OpenCL C) the float NaN of half NaN bits ``{b}``: sign, all-ones exponent, the half's
#: 10 payload bits on top of the mantissa
_HALF_NAN = "as_float(((uint)({b} & 0x8000) << 16) | 0x7F800000u | ((uint)({b} & 0x3FF) << 13))"


class OpenCLC(C99):
    """OpenCL C 1.2: address-space qualifiers, a ``__kernel`` prefix, a grid-stride device
    loop over the work-items, ``vload_half``/``vstore_half_rte`` for float16, and the
    built-in saturating converts. Doubles need the cl_khr_fp64 extension."""

    name = "opencl"
    storage = {DType.BOOL: "uchar", DType.INT32: "int", DType.INT64: "long",
               DType.FLOAT16: "half", DType.FLOAT32: "float", DType.FLOAT64: "double",
               DType.INT8: "char", DType.INT16: "short", DType.UINT8: "uchar", DType.UINT16: "ushort",
               DType.UINT32: "uint", DType.UINT64: "ulong", DType.BFLOAT16: "ushort"}
    reg = {DType.BOOL: "int", DType.INT32: "int", DType.INT64: "long",
           DType.FLOAT16: "float", DType.FLOAT32: "float", DType.FLOAT64: "double",
           DType.INT8: "char", DType.INT16: "short", DType.UINT8: "uchar", DType.UINT16: "ushort",
           DType.UINT32: "uint", DType.UINT64: "ulong", DType.BFLOAT16: "float"}
    unsigned = {DType.INT32: "uint", DType.INT64: "ulong", DType.INT8: "uint", DType.INT16: "uint",
                DType.UINT8: "uint", DType.UINT16: "uint", DType.UINT32: "uint", DType.UINT64: "ulong"}
    int_min = {DType.INT32: "INT_MIN", DType.INT64: "LONG_MIN", DType.INT8: "CHAR_MIN", DType.INT16: "SHRT_MIN"}
    int_max = {DType.INT32: "INT_MAX", DType.INT64: "LONG_MAX", DType.INT8: "CHAR_MAX", DType.INT16: "SHRT_MAX"}
    int64_suffix = "L"
    uint64_suffix = "UL"
    index_type = "long"
    math_suffix = {"float": "", "double": ""}
    header = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    kernel_prefix = "__kernel"
    buffer_qualifier = "__global"
    helper_prefix = "inline"
    device_loop = "for ({t} {v} = get_global_id(0); {v} < {n}; {v} += get_global_size(0))"
    load_half = "axle_ldh({off}, {ptr})"
    store_half = "vstore_half_rte({value}, {off}, {ptr});"
    round_half = "axle_rh({x})"
    round_half_double = "axle_rh_d({x})"
    #: the built-in saturating converts, NaN -> 0 by hand: the spec asks it of them, but
    #: NVIDIA's gives the type's minimum for a double NaN and for any NaN to a 64-bit type
    sat_convert = {dt: f"(isnan({{x}}) ? ({t})0 : convert_{t}_sat_rtz({{x}}))" for dt, t in (
        (DType.INT32, "int"), (DType.INT64, "long"), (DType.INT8, "char"), (DType.INT16, "short"),
        (DType.UINT8, "uchar"), (DType.UINT16, "ushort"), (DType.UINT32, "uint"), (DType.UINT64, "ulong"))}
    float_bits = "as_uint({x})"
    bits_float = "as_float({x})"
    float_cast = {DType.FLOAT32: "convert_float", DType.FLOAT64: "convert_double"}
    #: many GPUs have no doubles (cl_khr_fp64): the reduce table's accumulators
    wide_float_sums = False
    popcount = {32: "popcount({x})", 64: "popcount({x})"}
    clz = {32: "clz({x})", 64: "clz({x})"}
    # OpenCL C declares no half variables without cl_khr_fp16: through a private half
    # pointer; a NaN by hand (PoCL's vstore_half writes every NaN as 0x7FFF): the float's
    # sign and top mantissa bits, which hold the half's payload exactly
    half_to_bits = ("if (x != x) { uint u = as_uint(x); uint m = (u >> 13) & 0x3FF;\n"
                    "    return (ushort)(((u >> 16) & 0x8000) | 0x7C00 | (m ? m : 0x200)); }\n"
                    "  ushort b; vstore_half(x, 0, (half*)&b); return b;")
    # NVIDIA's vload_half returns one NaN for every NaN: the payload by hand (the float's
    # top mantissa bits hold the half's exactly, as vload_half gives them on PoCL)
    bits_to_half = "float f = vload_half(0, (const half*)&b);\n  return f != f ? " + _HALF_NAN.format(b="b") + " : f;"


Dialect = type[C99]


def helpers(d: Dialect) -> Mapping[str, str]:
    """Functions a kernel may call, by name; a program includes those its kernels use.
    Made once per dialect (every program's source asks for it: making it again was most
    of rendering a small program)."""
    table = _HELPERS.get(d)
    if table is None:
        table = _HELPERS[d] = MappingProxyType(_helpers(d))
    return table


_HELPERS: dict[Dialect, Mapping[str, str]] = {}


def _helpers(d: Dialect) -> dict[str, str]:
    u64, us = d.unsigned[DType.INT64], d.uint64_suffix
    out = {
        # splitmix64 of key + (i + 1) * golden ratio, as axle.ir.ops.rng_bits
        "axle_rng": f"{d.helper_prefix} {u64} axle_rng({u64} key, {u64} i) {{\n"
                    f"  {u64} z = key + (i + 1{us}) * 0x9E3779B97F4A7C15{us};\n"
                    f"  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9{us};\n"
                    f"  z = (z ^ (z >> 27)) * 0x94D049BB133111EB{us};\n"
                    "  return z ^ (z >> 31);\n}",
        # round through the half type and back (OpenCL: no half arithmetic needed)
        "axle_rh": f"{d.helper_prefix} float axle_rh(float x) {{ ushort t; vstore_half_rte(x, 0, (__private half*)&t); "
                   "return vload_half(0, (__private const half*)&t); }",
        "axle_rh_d": f"{d.helper_prefix} float axle_rh_d(double x) {{ ushort t; vstore_half_rte(x, 0, "
                     "(__private half*)&t); return vload_half(0, (__private const half*)&t); }",
    }
    u32 = d.unsigned[DType.UINT32]
    # bfloat16: bits to float (exact) and float to bits rounded to nearest even (NaN kept)
    out["axle_bf16_f32"] = (f"{d.helper_prefix} float axle_bf16_f32({u32} b) {{ "
                            f"return {d.bits_float.format(x='b << 16')}; }}")
    out["axle_f32_bf16"] = (f"{d.helper_prefix} {u32} axle_f32_bf16(float x) {{\n"
                            f"  {u32} u = {d.float_bits.format(x='x')};\n"
                            "  if (x != x) return (u >> 16) | 0x40;\n"
                            "  return (u + 0x7FFF + ((u >> 16) & 1)) >> 16;\n}")
    # (self-contained: a program defines only the helpers its source names)
    out["axle_rbf"] = (f"{d.helper_prefix} float axle_rbf(float x) {{\n"
                       f"  {u32} u = {d.float_bits.format(x='x')};\n"
                       "  if (x != x) return x;\n"
                       f"  return {d.bits_float.format(x='((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16')};\n}}")
    out.update(_bit_helpers(d))
    for dt in (DType.INT32, DType.INT64):
        t, u, lo, hi = d.reg[dt], d.unsigned[dt], d.int_min[dt], d.int_max[dt]
        s = t.replace("_t", "")
        out[f"axle_div_{s}"] = (f"{d.helper_prefix} {t} axle_div_{s}({t} a, {t} b) {{\n"
                                f"  if (b == 0) return -1;\n  if (a == {lo} && b == -1) return {lo};\n"
                                "  return a / b;\n}")
        out[f"axle_rem_{s}"] = (f"{d.helper_prefix} {t} axle_rem_{s}({t} a, {t} b) {{\n"
                                "  if (b == 0) return a;\n  if (b == -1) return 0;\n  return a % b;\n}")
        out[f"axle_pow_{s}"] = (f"{d.helper_prefix} {t} axle_pow_{s}({t} x, {t} y) {{\n"
                                "  if (y < 0) return x == 1 ? 1 : (x == -1 ? ((y & 1) ? -1 : 1) : 0);\n"
                                f"  {u} r = 1, b = ({u})x;\n"
                                "  while (y > 0) { if (y & 1) r *= b; b *= b; y >>= 1; }\n"
                                f"  return ({t})r;\n}}")
        out[f"axle_abs_{s}"] = f"{d.helper_prefix} {t} axle_abs_{s}({t} a) {{ return a < 0 ? ({t})(0 - ({u})a) : a; }}"
        # trunc toward zero, saturate (the bounds as doubles: 2^31 - 1 is exact, 2^63 - 1
        # rounds up to 2^63, where every larger value saturates too), NaN -> 0
        bits = 31 if dt is DType.INT32 else 63
        out[f"axle_sat_{s}"] = (f"{d.helper_prefix} {t} axle_sat_{s}(double x) {{\n"
                                f"  return x != x ? 0 : x <= -{float(2 ** bits)!r} ? {lo} : "
                                f"x >= {float(2 ** bits - 1)!r} ? {hi} : ({t})x;\n}}")
    for dt in (DType.INT8, DType.INT16, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64):
        out.update(_narrow_helpers(d, dt))
    return out


def _narrow_helpers(d: Dialect, dt: DType) -> dict[str, str]:
    """div, rem, pow, abs and the saturating convert of a narrow or unsigned integer type
    (in registers it is its own C type; arithmetic wraps through the unsigned twin)."""
    t, u, s, p = d.reg[dt], d.unsigned[dt], _s(d, dt), d.helper_prefix
    bits = dt.bits
    if dt.is_unsigned:
        hi = f"(({t})~({t})0)"
        div = f"  if (b == 0) return {hi};\n  return a / b;\n"  # x/0: all ones (XLA)
        rem = "  if (b == 0) return a;\n  return a % b;\n"
        neg_pow = ""
        sat = f"x != x || x <= 0.0 ? 0 : x >= {float(2 ** bits)!r} ? {hi} : ({t})x"
        absolute = "a"
    else:
        lo, hi = d.int_min[dt], d.int_max[dt]
        div = f"  if (b == 0) return -1;\n  if (a == {lo} && b == -1) return {lo};\n  return ({t})(a / b);\n"
        rem = f"  if (b == 0) return a;\n  if (b == -1) return 0;\n  return ({t})(a % b);\n"
        neg_pow = "  if (y < 0) return x == 1 ? 1 : (x == -1 ? ((y & 1) ? -1 : 1) : 0);\n"
        sat = (f"x != x ? 0 : x <= -{float(2 ** (bits - 1))!r} ? {lo} : "
               f"x >= {float(2 ** (bits - 1) - 1)!r} ? {hi} : ({t})x")
        absolute = f"a < 0 ? ({t})(0 - ({u})a) : a"
    return {
        f"axle_div_{s}": f"{p} {t} axle_div_{s}({t} a, {t} b) {{\n{div}}}",
        f"axle_rem_{s}": f"{p} {t} axle_rem_{s}({t} a, {t} b) {{\n{rem}}}",
        f"axle_pow_{s}": (f"{p} {t} axle_pow_{s}({t} x, {t} y) {{\n{neg_pow}"
                          f"  {u} r = 1, b = ({u})x;\n"
                          "  while (y > 0) { if (y & 1) r *= b; b *= b; y >>= 1; }\n"
                          f"  return ({t})r;\n}}"),
        f"axle_abs_{s}": f"{p} {t} axle_abs_{s}({t} a) {{ return {absolute}; }}",
        # (the OpenCL dialect calls its built-in convert_<t>_sat_rtz instead)
        f"axle_sat_{dt.np.name}": f"{p} {t} axle_sat_{dt.np.name}(double x) {{\n  return {sat};\n}}",
    }
def _bitcastable(d: Dialect) -> list[tuple[DType, DType]]:
    """(source, destination) pairs of equal width whose registers hold their storage type."""
    regs = [dt for dt in d.reg if not dt.is_bool and d.reg[dt] == d.storage[dt]]
    return [(a, b) for a in regs for b in regs if a is not b and a.itemsize == b.itemsize]


def _bit_helpers(d: Dialect) -> dict[str, str]:
    out = {}
    for a, b in _bitcastable(d):  # a union: C's and OpenCL C's defined way to reinterpret bits
        out[f"axle_bc_{a.value}_{b.value}"] = (
            f"{d.helper_prefix} {d.reg[b]} axle_bc_{a.value}_{b.value}({d.reg[a]} x) {{ "
            f"union {{ {d.reg[a]} a; {d.reg[b]} b; }} u; u.a = x; return u.b; }}")
    # nextafter in float16's own format on a float register holding a half: the step is
    # the half ulp of |x|'s binade (of the binade below when moving down from a power of
    # two), never below the smallest subnormal 2^-24; x + step is exact in float (a zero
    # result, from the smallest subnormal towards zero, keeps x's sign).
    frexp, ldexp = _fn(d, DType.FLOAT32, "frexp"), _fn(d, DType.FLOAT32, "ldexp")
    out["axle_nextafter_h"] = (
        f"{d.helper_prefix} float axle_nextafter_h(float x, float y) {{\n"
        "  if (x != x || y != y) return x + y;\n  if (x == y) return y;\n"
        "  if (isinf(x)) return copysign(65504.0f, x);  /* from an infinity: the largest half */\n"
        "  if (x == 0) return y > 0 ? 5.9604644775390625e-08f : -5.9604644775390625e-08f;\n"
        f"  int e; float m = {frexp}(fabs(x), &e);\n"
        "  int k = ((x < y) != (x > 0) && m == 0.5f) ? e - 12 : e - 11;\n"
        f"  float step = {ldexp}(1.0f, k < -24 ? -24 : k);\n"
        "  float r = x < y ? x + step : x - step;\n"
        "  return r == 0 ? copysign(0.0f, x) : r;  /* -2^-24 + 2^-24 is +0: keep x's sign */\n}")
    # nextafter in bfloat16's own format: a bfloat16 is the top half of a float, so one
    # step is 1 << 16 in the float's bits (the magnitude grows or shrinks by one; from an
    # infinity to the largest finite; from a zero to the smallest subnormal of y's sign)
    u32 = d.unsigned[DType.UINT32]
    out["axle_nextafter_bf"] = (
        f"{d.helper_prefix} float axle_nextafter_bf(float x, float y) {{\n"
        "  if (x != x || y != y) return x + y;\n  if (x == y) return y;\n"
        f"  if (x == 0) return {d.bits_float.format(x=f'y > 0 ? ({u32})0x10000 : ({u32})0x80010000')};\n"
        f"  {u32} u = {d.float_bits.format(x='x')};\n"
        f"  return {d.bits_float.format(x='(x < y) == (x > 0) ? u + 0x10000 : u - 0x10000')};\n}}")
    u16 = d.reg[DType.UINT16]
    # (OpenCL C) a half of a kernel argument as its float, NaN payload kept: its bits
    # read again where it is a NaN (NVIDIA's vload_half returns one NaN for every NaN)
    out["axle_ldh"] = (f"{d.helper_prefix} float axle_ldh(long i, __global const half* p) {{\n"
                       "  float f = vload_half(i, p);\n"
                       f"  return f != f ? {_HALF_NAN.format(b='((__global const ushort*)p)[i]')} : f;\n}}")
    out["axle_half_bits"] = f"{d.helper_prefix} {u16} axle_half_bits(float x) {{ {d.half_to_bits} }}"
    out["axle_bits_half"] = f"{d.helper_prefix} float axle_bits_half({u16} b) {{ {d.bits_to_half} }}"
    return out


def literal(d: Dialect, value: object, dt: DType) -> str:
    """A register-typed literal; negative ones are parenthesized (``-x`` never meets ``--1``)."""
    text = _literal(d, value, dt)
    return f"({text})" if text.startswith("-") else text


def _literal(d: Dialect, value: object, dt: DType) -> str:
    v = np.asarray(value).astype(dt.np)[()]
    if dt is DType.BOOL:
        return "1" if bool(v) else "0"
    if dt.is_int:
        iv = int(v)
        if dt.is_unsigned:
            return f"{iv}{d.uint64_suffix}" if dt is DType.UINT64 else f"{iv}u"
        if iv == np.iinfo(dt.np).min:
            return d.int_min[dt]
        return f"{iv}{d.int64_suffix}" if dt is DType.INT64 else str(iv)
    f = float(v)
    cast = "(double)" if dt is DType.FLOAT64 else ""
    if math.isnan(f):
        return f"({cast}NAN)" if cast else "NAN"
    if math.isinf(f):
        s = f"({cast}INFINITY)" if cast else "INFINITY"
        return s if f > 0 else f"(-{s})"
    text = repr(f) if dt is DType.FLOAT64 else repr(float(np.float32(f)))
    if "e" not in text and "." not in text:
        text += ".0"
    return text if dt is DType.FLOAT64 else text + "f"


def identity(d: Dialect, kind: str, dt: DType) -> str:
    """The identity of a reduction kind in its accumulator's register type."""
    return literal(d, REDUCE_KINDS[kind].identity(dt), REDUCE_KINDS[kind].accumulator(dt))


# ----------------------------------------------------------------- elementwise semantics

Expr = str


def _fn(d: Dialect, dt: DType, name: str) -> str:
    return name + d.math_suffix[d.reg[dt]]


def _one(d: Dialect, dt: DType) -> str:
    return literal(d, 1, dt)


FLOAT_UNARY: dict[Op, Callable[[Dialect, DType, Expr], Expr]] = {
    Op.NEG: lambda d, dt, x: f"(-{x})",
    Op.ABS: lambda d, dt, x: f"{_fn(d, dt, 'fabs')}({x})",
    Op.EXP: lambda d, dt, x: f"{_fn(d, dt, 'exp')}({x})",
    Op.LOG: lambda d, dt, x: f"{_fn(d, dt, 'log')}({x})",
    Op.SQRT: lambda d, dt, x: f"{_fn(d, dt, 'sqrt')}({x})",
    Op.RSQRT: lambda d, dt, x: f"({_one(d, dt)} / {_fn(d, dt, 'sqrt')}({x}))",
    Op.TANH: lambda d, dt, x: f"{_fn(d, dt, 'tanh')}({x})",
    Op.LOGISTIC: lambda d, dt, x: f"({_one(d, dt)} / ({_one(d, dt)} + {_fn(d, dt, 'exp')}(-{x})))",
    Op.SIN: lambda d, dt, x: f"{_fn(d, dt, 'sin')}({x})",
    Op.COS: lambda d, dt, x: f"{_fn(d, dt, 'cos')}({x})",
    Op.FLOOR: lambda d, dt, x: f"{_fn(d, dt, 'floor')}({x})",
    Op.CEIL: lambda d, dt, x: f"{_fn(d, dt, 'ceil')}({x})",
    # elementwise completeness: C99 / OpenCL C builtins (rint: ties to even)
    Op.TAN: lambda d, dt, x: f"{_fn(d, dt, 'tan')}({x})",
    Op.EXPM1: lambda d, dt, x: f"{_fn(d, dt, 'expm1')}({x})",
    Op.LOG1P: lambda d, dt, x: f"{_fn(d, dt, 'log1p')}({x})",
    Op.CBRT: lambda d, dt, x: f"{_fn(d, dt, 'cbrt')}({x})",
    Op.ERF: lambda d, dt, x: f"{_fn(d, dt, 'erf')}({x})",
    Op.ROUND_NEAREST_EVEN: lambda d, dt, x: f"{_fn(d, dt, 'rint')}({x})",
    # NumPy's sign: NaN stays NaN, both zeros give +0.0
    Op.SIGN: lambda d, dt, x: f"(isnan({x}) ? {x} : ({d.reg[dt]})(({x} > 0) - ({x} < 0)))",
}
FLOAT_BINARY: dict[Op, Callable[[Dialect, DType, Expr, Expr], Expr]] = {
    Op.ADD: lambda d, dt, a, b: f"({a} + {b})",
    Op.SUB: lambda d, dt, a, b: f"({a} - {b})",
    Op.MUL: lambda d, dt, a, b: f"({a} * {b})",
    Op.DIV: lambda d, dt, a, b: f"({a} / {b})",
    Op.REM: lambda d, dt, a, b: f"{_fn(d, dt, 'fmod')}({a}, {b})",
    Op.POW: lambda d, dt, a, b: f"{_fn(d, dt, 'pow')}({a}, {b})",
    # IEEE 754-2019 maximum/minimum: NaN-propagating (fmax/fmin drop NaNs) and -0.0 < +0.0
    Op.MAX: lambda d, dt, a, b: f"(({a} > {b} || isnan({a}) || ({a} == {b} && !signbit({a}))) ? {a} : {b})",
    Op.MIN: lambda d, dt, a, b: f"(({a} < {b} || isnan({a}) || ({a} == {b} && signbit({a}))) ? {a} : {b})",
    Op.ATAN2: lambda d, dt, a, b: f"{_fn(d, dt, 'atan2')}({a}, {b})",
    # float16 steps in its own format (a float nextafter would round back to x)
    Op.NEXT_AFTER: lambda d, dt, a, b: (f"axle_nextafter_h({a}, {b})" if dt is DType.FLOAT16
                                        else f"axle_nextafter_bf({a}, {b})" if dt is DType.BFLOAT16
                                        else f"{_fn(d, dt, 'nextafter')}({a}, {b})"),
}
#: float16 results of these are operands already: no rounding
EXACT_HALF = frozenset({Op.NEG, Op.ABS, Op.MAX, Op.MIN, Op.SIGN, Op.ROUND_NEAREST_EVEN})


def _width(dt: DType) -> int:
    return dt.itemsize * 8


def _s(d: Dialect, dt: DType) -> str:
    return d.reg[dt].replace("_t", "")


#: the unsigned and signed dtype of each bit width
_UNSIGNED_OF = {8: DType.UINT8, 16: DType.UINT16, 32: DType.UINT32, 64: DType.UINT64}
_SIGNED_OF = {8: DType.INT8, 16: DType.INT16, 32: DType.INT32, 64: DType.INT64}


def _ubits(d: Dialect, dt: DType, x: Expr) -> Expr:
    """The bits of integer ``x`` zero-extended into its (at least 32-bit) unsigned twin:
    through the unsigned type of its own width first, or a narrow signed value would
    sign-extend (int8 -1 would count 32 set bits and shift ones in from the left)."""
    return f"(({d.unsigned[dt]})({d.reg[_UNSIGNED_OF[_width(dt)]]})({x}))"


def _counted(table: dict[int, str], dt: DType, x: Expr) -> Expr:
    # the builtins count 32 or 64 bits: a narrow value is counted in 32
    return table[max(32, _width(dt))].format(x=x)


def _wrap(op: str) -> Callable[[Dialect, DType, Expr, Expr], Expr]:
    return lambda d, dt, a, b: f"(({d.reg[dt]})(({d.unsigned[dt]}){a} {op} ({d.unsigned[dt]}){b}))"


INT_UNARY: dict[Op, Callable[[Dialect, DType, Expr], Expr]] = {
    Op.NEG: lambda d, dt, x: f"(({d.reg[dt]})(0 - ({d.unsigned[dt]}){x}))",
    Op.ABS: lambda d, dt, x: f"axle_abs_{_s(d, dt)}({x})",
    Op.SIGN: lambda d, dt, x: f"(({d.reg[dt]})(({x} > 0) - ({x} < 0)))",
    Op.NOT: lambda d, dt, x: f"(~{x})",
    Op.POPCNT: lambda d, dt, x: f"(({d.reg[dt]}){_counted(d.popcount, dt, _ubits(d, dt, x))})",
    # clz counts the zero-extended value's leading zeros: less those above a narrow width
    Op.CLZ: lambda d, dt, x: (f"({x} == 0 ? {_width(dt)} : ({d.reg[dt]})"
                              f"({_counted(d.clz, dt, _ubits(d, dt, x))} - {max(32, _width(dt)) - _width(dt)}))"),
}
INT_BINARY: dict[Op, Callable[[Dialect, DType, Expr, Expr], Expr]] = {
    Op.ADD: _wrap("+"), Op.SUB: _wrap("-"), Op.MUL: _wrap("*"),
    Op.DIV: lambda d, dt, a, b: f"axle_div_{_s(d, dt)}({a}, {b})",
    Op.REM: lambda d, dt, a, b: f"axle_rem_{_s(d, dt)}({a}, {b})",
    Op.POW: lambda d, dt, a, b: f"axle_pow_{_s(d, dt)}({a}, {b})",
    Op.MAX: lambda d, dt, a, b: f"({a} > {b} ? {a} : {b})",
    Op.MIN: lambda d, dt, a, b: f"({a} < {b} ? {a} : {b})",
    Op.AND: lambda d, dt, a, b: f"({a} & {b})",
    Op.OR: lambda d, dt, a, b: f"({a} | {b})",
    Op.XOR: lambda d, dt, a, b: f"({a} ^ {b})",
    # StableHLO shifts: the amount read as unsigned, >= the width gives 0 (or the sign
    # fill); the ternary never evaluates an out-of-range shift (undefined in C)
    Op.SHIFT_LEFT: lambda d, dt, a, b: (f"((({d.unsigned[dt]}){b}) < {_width(dt)} ? "
                                        f"({d.reg[dt]})({_ubits(d, dt, a)} << ({d.unsigned[dt]}){b}) : 0)"),
    Op.SHIFT_RIGHT_LOGICAL: lambda d, dt, a, b: (f"((({d.unsigned[dt]}){b}) < {_width(dt)} ? "
                                                 f"({d.reg[dt]})({_ubits(d, dt, a)} >> ({d.unsigned[dt]}){b}) : 0)"),
    # through the signed type of the width (the fill is the top bit, for unsigned dtypes
    # too): >> of a negative value is arithmetic in GCC, Clang and OpenCL C
    Op.SHIFT_RIGHT_ARITHMETIC: lambda d, dt, a, b: (
        f"((({d.unsigned[dt]}){b}) < {_width(dt)} ? ({d.reg[dt]})(({d.reg[_SIGNED_OF[_width(dt)]]}){a} >> "
        f"({d.unsigned[dt]}){b}) : ({d.reg[dt]})(({d.reg[_SIGNED_OF[_width(dt)]]}){a} < 0 ? -1 : 0))"),
}
#: bools are int 0/1 in registers; add and multiply (the sum and prod reductions) are or, and
BOOL_UNARY: dict[Op, Callable[[Expr], Expr]] = {Op.NOT: lambda x: f"(!{x})"}
BOOL_BINARY: dict[Op, Callable[[Expr, Expr], Expr]] = {
    Op.AND: lambda a, b: f"({a} & {b})", Op.MIN: lambda a, b: f"({a} & {b})", Op.MUL: lambda a, b: f"({a} & {b})",
    Op.OR: lambda a, b: f"({a} | {b})", Op.MAX: lambda a, b: f"({a} | {b})", Op.ADD: lambda a, b: f"({a} | {b})",
    Op.XOR: lambda a, b: f"({a} ^ {b})",
}
COMPARE: dict[str, str] = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def unary(d: Dialect, op: Op, dt: DType, x: Expr) -> Expr:
    """A unary elementwise op on a register value of dtype ``dt``."""
    if dt.is_float:
        e = d.float_unary_override.get(op, FLOAT_UNARY[op])(d, dt, x)
        return round_16(d, dt, e) if op not in EXACT_HALF else e
    return BOOL_UNARY[op](x) if dt.is_bool else INT_UNARY[op](d, dt, x)


def round_16(d: Dialect, dt: DType, x: Expr) -> Expr:
    """A float32 register value rounded to ``dt`` once when it is a 16-bit float."""
    if dt is DType.FLOAT16:
        return d.round_half.format(x=x)
    return f"axle_rbf({x})" if dt is DType.BFLOAT16 else x


def binary(d: Dialect, op: Op, dt: DType, a: Expr, b: Expr) -> Expr:
    """A binary elementwise op on two register values of dtype ``dt``."""
    if dt.is_float:
        e = FLOAT_BINARY[op](d, dt, a, b)
        return round_16(d, dt, e) if op not in EXACT_HALF else e
    return BOOL_BINARY[op](a, b) if dt.is_bool else INT_BINARY[op](d, dt, a, b)


def compare(direction: str, a: Expr, b: Expr) -> Expr:
    """``a <direction> b`` (eq, ne, lt, le, gt, ge) as 0/1 (all-ones lanes on vectors)."""
    return f"({a} {COMPARE[direction]} {b})"


def used_helpers(d: Dialect, source: str) -> list[str]:
    """The :func:`helpers` that ``source`` calls, sorted: what a program must define."""
    table = helpers(d)
    return sorted(h for h in set(re.findall(r"\baxle_\w+", source)) if h in table)


def convert(d: Dialect, x: Expr, src: DType, dst: DType) -> Expr:
    """Element conversion: float -> int saturates (NaN -> 0), anything -> bool is != 0,
    ints wrap, a float16 result is rounded once from the source value."""
    if src is dst:
        return x
    if dst is DType.BOOL:
        return f"({x} != 0)"
    if dst.is_int:
        return d.sat_convert[dst].format(x=x) if src.is_float else f"(({d.reg[dst]}){x})"
    if dst is DType.FLOAT16:
        if src is DType.FLOAT64:
            return d.round_half_double.format(x=x)
        # ints go through float: exact for every int f16 does not overflow on
        return d.round_half.format(x=x if src.is_float and src is not DType.FLOAT64 else
                                   f"{d.float_cast[DType.FLOAT32]}({x})")
    if dst is DType.BFLOAT16:
        # through float32 (as the interpreter): one rounding from float32 registers
        return f"axle_rbf({x if src.is_half or src is DType.FLOAT32 else f'{d.float_cast[DType.FLOAT32]}({x})'})"
    if dst is DType.FLOAT32 and src.is_half:
        return x
    return f"{d.float_cast[dst]}({x})"


def is_finite(x: Expr) -> Expr:
    """is-finite as 0/1 (C's isfinite macro may return any nonzero value)."""
    return f"(isfinite({x}) != 0)"


def bitcast(d: Dialect, n: Node, x: Expr) -> Expr:
    """bitcast-convert node ``n`` of the register value ``x`` (a union helper)."""
    src, dst = n.operands[0].dtype, n.dtype
    if (src, dst) in _bitcastable(d):
        return f"axle_bc_{src.value}_{dst.value}({x})"
    if src in _BITS16 and dst in _BITS16:  # a 16-bit float is a float register: through its bits
        return _BITS16[dst][1](d, _BITS16[src][0](d, x))
    raise BackendError(f"{d.name} renderer: bitcast-convert {n.operands[0].type} to {dst.value} has no register "
                       "form", where=n.loc)


#: 16-bit dtypes: (register value -> its bits as an unsigned 16-bit register, and back);
#: a bfloat16 in a float register is exact, its bits the float's top half
_BITS16: dict[DType, tuple[Callable[[Dialect, Expr], Expr], Callable[[Dialect, Expr], Expr]]] = {
    DType.INT16: (lambda d, x: f"(({d.reg[DType.UINT16]})({x}))", lambda d, b: f"(({d.reg[DType.INT16]})({b}))"),
    DType.UINT16: (lambda d, x: f"(({d.reg[DType.UINT16]})({x}))", lambda d, b: f"(({d.reg[DType.UINT16]})({b}))"),
    DType.FLOAT16: (lambda d, x: f"axle_half_bits({x})", lambda d, b: f"axle_bits_half({b})"),
    DType.BFLOAT16: (lambda d, x: f"(({d.reg[DType.UINT16]})({d.float_bits.format(x=x)} >> 16))",
                     lambda d, b: f"axle_bf16_f32({b})"),
}


def accumulator(d: Dialect, kind: str, dt: DType) -> DType:
    """The dtype a loop keeps reduction ``kind`` (or a dot, as "sum") of ``dt`` values in:
    the reduce table's, except that a dialect with ``wide_float_sums`` adds float32 and
    float16 terms in double. A loop adds one term at a time, so its rounding error grows
    with the length (3M positive float32 terms drifted 2e-3 from the exact sum, where
    NumPy's pairwise sum stays near 1e-7); in double it stays below float32's rounding."""
    if d.wide_float_sums and kind == "sum" and dt in (DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32):
        return DType.FLOAT64
    return REDUCE_KINDS[kind].accumulator(dt)


# ------------------------------------------------------------------------------ kernels


@dataclass
class CKernel:
    """One rendered computation: ``stages`` functions to launch in order, each one device
    loop (a reduction or dot into its buffer, then each output), all with the same
    arguments: the computation's parameters, the constant arrays (``constants``), the
    outputs, the scratch buffers. Stages are separate launches because a later one reads
    what every thread of an earlier one wrote (no device has a global barrier inside a
    kernel); a single-threaded device may call them back to back."""

    name: str
    source: str
    params: list[TensorType]
    constants: list[np.ndarray]
    outputs: list[TensorType]
    scratch: list[TensorType]
    stages: list[str]
    helpers: set[str] = field(default_factory=set)


@dataclass
class Idx:
    """A position in an array of ``shape``: its flat offset and/or its coordinates;
    the missing one is derived when asked for (:meth:`CRenderer.coords`, ``.flat``)."""

    shape: tuple[int, ...]
    flat: Ix | None = None
    coords: list[Ix] | None = None

    @property
    def key(self) -> tuple:
        if self.coords is not None:
            return ("c", *map(ix.to_c, self.coords))
        assert self.flat is not None, "a Pos has a flat offset or coordinates"
        return ("f", ix.to_c(self.flat))


class CRenderer:
    """Renders computations as C functions of ``dialect``."""

    def __init__(self, dialect: Dialect = C99) -> None:
        self.d = dialect

    def program(self, kernels: list[CKernel]) -> str:
        """One translation unit: the header, the helpers the kernels call, the kernels."""
        table = helpers(self.d)
        used = sorted(set().union(*(k.helpers for k in kernels)) if kernels else set())
        return "\n".join([self.d.header, *(table[h] for h in used), *(k.source for k in kernels)]) + "\n"

    def kernel(self, name: str, comp: Computation, kind: str = "loop") -> CKernel:
        """``kind``: the launch's (an ``output`` fusion computes its dot inline, per output
        element, and finishes it with the epilogue before the one store)."""
        return _KernelBuilder(self.d, name, comp, kind).build()


class _KernelBuilder:
    """The state of one kernel being rendered: statements, scoped value memory, buffers."""

    def __init__(self, d: Dialect, name: str, comp: Computation, kind: str = "loop") -> None:
        self.d, self.name, self.comp, self.kind = d, name, comp, kind
        self.lines: list[str] = []
        self.scopes: list[dict[tuple, str]] = [{}]
        self.n = 0
        self.args: list[str] = []
        self.constants: list[np.ndarray] = []
        self.const_args: dict[int, str] = {}
        self.scratch: list[TensorType] = []
        #: materialized nodes (reductions, dots): uid -> buffer argument
        self.buffers: dict[int, str] = {}
        #: (function name, body lines) of each stage, in launch order
        self.stages: list[tuple[str, list[str]]] = []

    # -- statements ------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * len(self.scopes) + text)

    def tmp(self, ctype: str, expr: str, prefix: str = "t") -> str:
        self.n += 1
        name = f"{prefix}{self.n}"
        self.line(f"{ctype} {name} = {expr};")
        return name

    def open(self, header: str) -> None:
        self.line(header + " {")
        self.scopes.append({})

    def close(self) -> None:
        self.scopes.pop()
        self.line("}")

    def lookup(self, key: tuple) -> str | None:
        return next((s[key] for s in reversed(self.scopes) if key in s), None)

    def bind(self, e: Ix) -> Ix:
        """An index expression as a variable (a temporary shared within the scope)."""
        if ix.is_simple(e):
            return e
        text = ix.to_c(e)
        key = ("ix", text)
        name = self.lookup(key)
        if name is None:
            name = self.tmp(self.d.index_type, text, "i")
            self.scopes[-1][key] = name
        return ix.var(name)

    def coords(self, idx: Idx) -> list[Ix]:
        if idx.coords is None:
            assert idx.flat is not None
            idx.coords = [self.bind(c) for c in ix.delinearize(idx.flat, idx.shape)]
        return idx.coords

    def flat(self, idx: Idx) -> Ix:
        if idx.flat is None:
            assert idx.coords is not None
            idx.flat = self.bind(ix.linearize(idx.coords, idx.shape))
        return idx.flat

    # -- loads and stores ------------------------------------------------------------
    def load(self, ptr: str, dt: DType, off: Ix) -> str:
        o = ix.to_c(off)
        if dt is DType.FLOAT16:
            return self.d.load_half.format(ptr=ptr, off=o)
        if dt is DType.BFLOAT16:
            return f"axle_bf16_f32({ptr}[{o}])"
        return f"(({self.d.reg[dt]}){ptr}[{o}])" if dt is DType.BOOL else f"{ptr}[{o}]"

    def store(self, ptr: str, dt: DType, off: Ix, value: str) -> None:
        o = ix.to_c(off)
        if dt is DType.FLOAT16:
            self.line(self.d.store_half.format(ptr=ptr, off=o, value=value))
        elif dt is DType.BFLOAT16:
            self.line(f"{ptr}[{o}] = ({self.d.storage[dt]})axle_f32_bf16({value});")
        else:
            self.line(f"{ptr}[{o}] = ({self.d.storage[dt]})({value});")

    def argument(self, name: str, t: TensorType, const: bool) -> None:
        q = f"{self.d.buffer_qualifier} " if self.d.buffer_qualifier else ""
        self.args.append(f"{q}{'const ' if const else ''}{self.d.storage[t.dtype]}* {self.d.restrict} {name}")

    # -- the kernel ------------------------------------------------------------------
    def build(self) -> CKernel:
        comp = self.comp
        params = [p.tensor_type for p in comp.parameters]
        for i, t in enumerate(params):
            self.argument(f"p{i}", t, True)
        root = comp.root
        outs = list(root.operands) if root.op is Op.TUPLE else [root]
        out_args: dict[int, str] = {}
        for i, o in enumerate(outs):
            out_args.setdefault(o.uid, f"o{i}")
        if root.op in UPDATES:
            self.update(root)
        # reductions and dots: once each, into their output or a scratch buffer; an output
        # fusion's dot is read only at the element the epilogue computes: it stays in a
        # register (its sum over K, then the epilogue, then the store)
        for n in comp.nodes if root.op not in UPDATES else ():
            if n.op is Op.REDUCE or (n.op is Op.DOT_GENERAL and (self.kind != "output" or n.uid in out_args)):
                buf = out_args.get(n.uid)
                if buf is None:
                    buf = f"s{len(self.scratch)}"
                    self.scratch.append(n.tensor_type)
                self.loop(n, buf)
                self.buffers[n.uid] = buf
        for i, o in enumerate(outs if root.op not in UPDATES else ()):
            if o.uid not in self.buffers or self.buffers[o.uid] != f"o{i}":
                self.loop(o, f"o{i}")
        for i, o in enumerate(outs):
            self.argument(f"o{i}", o.tensor_type, False)
        consts_at = len(params)
        for k, (name, arr) in enumerate(zip(self.const_args.values(), self.constants)):
            q = f"{self.d.buffer_qualifier} " if self.d.buffer_qualifier else ""
            self.args.insert(consts_at + k, f"{q}const {self.d.storage[dtype(arr.dtype)]}* {self.d.restrict} {name}")
        for k, t in enumerate(self.scratch):
            self.argument(f"s{k}", t, False)
        prefix = f"{self.d.kernel_prefix} " if self.d.kernel_prefix else ""
        source = "".join(f"{prefix}void {name}({', '.join(self.args)}) {{\n" + "\n".join(body) + "\n}\n"
                         for name, body in self.stages)
        return CKernel(self.name, source, params, self.constants, [o.tensor_type for o in outs], self.scratch,
                       [name for name, _ in self.stages], set(used_helpers(self.d, source)))

    def loop(self, n: Node, buf: str) -> None:
        """A stage: a function whose device loop stores each of ``n``'s elements into ``buf``."""
        size = n.tensor_type.size
        if size == 0:
            return
        self.lines, self.scopes = [], [{}]
        self.stages.append((f"{self.name}_{len(self.stages)}", self.lines))
        v = f"e{self.n}"
        self.n += 1
        self.open(self.d.device_loop.format(t=self.d.index_type, v=v, n=size))
        idx = Idx(n.shape, ix.var(v))
        self.store(buf, n.dtype, idx.flat, self.compute(n, idx))  # type: ignore[arg-type]  # built with a flat index
        self.close()

    def stage(self) -> None:
        """Starts the next stage function (its own statements and value memory)."""
        self.lines, self.scopes = [], [{}]
        self.stages.append((f"{self.name}_{len(self.stages)}", self.lines))

    def device_loop(self, size: int) -> Ix:
        v = f"e{self.n}"
        self.n += 1
        self.open(self.d.device_loop.format(t=self.d.index_type, v=v, n=size))
        return ix.var(v)

    def update(self, n: Node) -> None:
        """Scatter or dynamic-update-slice (an ``update`` launch, axle.lowering.plan): a
        stage copying the operand into the output, then a stage writing the windows. The
        device loop takes window positions and each applies every update in index order,
        so duplicates combine as the reference does (no atomics); a scatter whose windows
        may meet at different window positions runs its device loop once
        (ix.scatter_window_parallel). The same kernel as axle_opencl's update_kernel."""
        x, dt = n.operands[0], n.dtype
        if x.tensor_type.size == 0:
            return
        self.stage()
        e = ix.to_c(self.device_loop(x.tensor_type.size))
        self.line(f"o0[{e}] = p0[{e}];")  # the same storage type: an exact copy
        self.close()
        u = ix.update_loops(n)
        nw, nb = math.prod(u.window), math.prod(u.batch)
        if nw == 0 or nb == 0:
            return
        self.stage()
        w = self.device_loop(nw if u.parallel else 1)
        bix = [self.bind(c) for c in ix.delinearize(self.counted_loop(nb), u.batch)] if u.batch else []
        if not u.parallel:
            w = self.counted_loop(nw)
        wix = [self.bind(c) for c in ix.delinearize(w, u.window)]
        starts = [self.start(n.operands[k], c) for k, c in ix.update_starts(n, bix)]
        pos, inside, src, coords = ix.update_target(n, bix, wix, starts)
        if inside.const != 1:
            self.open(f"if ({ix.to_c(inside)})")  # an out-of-bounds window is dropped
        new = self.at(n.operands[src], coords)
        off = self.bind(ix.linearize(pos, x.shape))
        op = u.combiner
        self.store("o0", dt, off, new if op is None else binary(self.d, op, dt, self.load("o0", dt, off), new))
        while len(self.scopes) > 1:
            self.close()

    def start(self, x: Node, coords: list[Ix]) -> Ix:
        """The integer ``x`` at ``coords`` as a named index (a start index, clamped by the
        index algebra where it is used)."""
        v = self.at(x, coords) if coords else self.scalar(x)
        return ix.var(self.tmp(self.d.index_type, f"(({self.d.index_type}){v})", "s"))

    # -- values ----------------------------------------------------------------------
    def value(self, n: Node, idx: Idx) -> str:
        """A C expression (a temporary or a literal) holding ``n``'s element at ``idx``."""
        if n.uid in self.buffers:
            return self.load(self.buffers[n.uid], n.dtype, self.flat(idx))
        return self.compute(n, idx)

    def compute(self, n: Node, idx: Idx) -> str:
        key = (n.uid, idx.key)
        hit = self.lookup(key)
        if hit is not None:
            return hit
        expr = _RULES.get(n.op, _KernelBuilder._unsupported)(self, n, idx)
        if not (expr.isidentifier() or _is_literal(expr)):
            expr = self.tmp(self.d.reg[n.dtype], expr)
        self.scopes[-1][key] = expr
        self.scopes[-1][(n.uid, idx.key)] = expr  # the key may have gained coordinates
        return expr

    def scalar(self, n: Node) -> str:
        return self.value(n, Idx(n.shape, ix.const(0), [ix.const(0)] * len(n.shape)))

    def at(self, n: Node, coords: list[Ix]) -> str:
        return self.value(n, Idx(n.shape, None, [self.bind(c) for c in coords]))

    def _parameter(self, n: Node, idx: Idx) -> str:
        off = ix.const(0) if n.tensor_type.size <= 1 else self.flat(idx)
        return self.load(f"p{n.attr['index']}", n.dtype, off)

    def _constant(self, n: Node, idx: Idx) -> str:
        arr = n.attr["value"].array
        if arr.size == 1:
            return literal(self.d, arr.reshape(-1)[0], n.dtype)
        name = self.const_args.get(n.uid)
        if name is None:
            name = self.const_args[n.uid] = f"c{len(self.constants)}"
            self.constants.append(np.ascontiguousarray(arr))
        return self.load(name, n.dtype, self.flat(idx))

    def _iota(self, n: Node, idx: Idx) -> str:
        c = ix.iota_value(self.coords(idx), n.attr["dimension"])
        return convert(self.d, f"(({self.d.reg[DType.INT64]}){ix.to_c(c)})", DType.INT64, n.dtype)

    def _convert(self, n: Node, idx: Idx) -> str:
        (x,) = n.operands
        return convert(self.d, self.value(x, idx), x.dtype, n.dtype)

    def _elementwise(self, n: Node, idx: Idx) -> str:
        args = [self.value(o, idx) for o in n.operands]
        if len(args) == 1:
            return unary(self.d, n.op, n.dtype, args[0])
        return binary(self.d, n.op, n.dtype, args[0], args[1])

    def _compare(self, n: Node, idx: Idx) -> str:
        a, b = (self.value(o, idx) for o in n.operands)
        return compare(n.attr["direction"], a, b)

    def _is_finite(self, n: Node, idx: Idx) -> str:
        return is_finite(self.value(n.operands[0], idx))

    def _bitcast(self, n: Node, idx: Idx) -> str:
        return bitcast(self.d, n, self.value(n.operands[0], idx))

    def _select(self, n: Node, idx: Idx) -> str:
        p, a, b = (self.value(o, idx) for o in n.operands)
        return f"({p} ? {a} : {b})"

    def _movement(self, n: Node, idx: Idx) -> str:
        (x,) = n.operands
        if x.tensor_type.size <= 1:
            return self.scalar(x)
        if n.op in (Op.RESHAPE, Op.BROADCAST_IN_DIM) and x.shape == n.shape:
            return self.value(x, idx)  # the identity map
        if n.op is Op.RESHAPE and idx.coords is None:
            return self.value(x, Idx(x.shape, idx.flat))  # same row-major offset
        return self.at(x, ix.MOVEMENT[n.op](n, self.coords(idx)))

    def _pad(self, n: Node, idx: Idx) -> str:
        x, pv = n.operands
        padv = self.scalar(pv)
        if x.tensor_type.size == 0:
            return padv
        coords, inside = ix.pad_index(self.coords(idx), x.shape, n.attr["low"], n.attr["high"], n.attr["interior"])
        v = self.at(x, coords)
        return v if inside.const == 1 else f"({ix.to_c(inside)} ? {v} : {padv})"

    def _concatenate(self, n: Node, idx: Idx) -> str:
        pieces = ix.concatenate_pieces(self.coords(idx), n.attr["dimension"], [o.shape for o in n.operands])
        vals = [(pred, self.at(n.operands[k], coords)) for k, coords, pred in pieces]
        expr = vals[-1][1]
        for pred, v in reversed(vals[:-1]):
            expr = f"({ix.to_c(pred)} ? {v} : {expr})"
        return expr

    def _gather(self, n: Node, idx: Idx) -> str:
        """An indexed load: the operand at the clamped start indices loaded for this
        element plus its window offset (axle.lowering.index)."""
        coords = self.coords(idx)
        starts = [self.start(n.operands[1], c) for c in ix.gather_start_coords(coords, n)]
        return self.at(n.operands[0], ix.gather_index(coords, n, starts))

    def _dynamic_slice(self, n: Node, idx: Idx) -> str:
        x, *start_nodes = n.operands
        starts = [self.start(s, []) for s in start_nodes]
        return self.at(x, ix.dynamic_slice_index(self.coords(idx), x.shape, n.attr["slice_sizes"], starts))

    def _rng(self, n: Node, idx: Idx) -> str:
        u = self.d.unsigned[DType.INT64]
        z = f"axle_rng(({u}){self.scalar(n.operands[0])}, ({u}){ix.to_c(self.flat(idx))})"
        if n.dtype is DType.INT32:
            return f"(({self.d.reg[DType.INT32]})({self.d.unsigned[DType.INT32]})({z} >> 32))"
        return f"(({self.d.reg[DType.INT64]}){z})"

    def _reduce(self, n: Node, idx: Idx) -> str:
        (x,) = n.operands
        axes, kind, dt = tuple(n.attr["axes"]), n.attr["kind"], n.dtype
        if not axes:
            return self.value(x, Idx(x.shape, None, self.coords(idx)))
        if any(x.shape[a] == 0 for a in axes):
            return identity(self.d, kind, dt)
        rk, acc_dt = REDUCE_KINDS[kind], accumulator(self.d, kind, dt)
        kept = iter(self.coords(idx))
        acc = self.tmp(self.d.reg[acc_dt], literal(self.d, rk.identity(dt), acc_dt), "acc")
        coords = []
        for a in range(x.tensor_type.rank):
            if a in axes:
                coords.append(self.counted_loop(x.shape[a]))
            else:
                coords.append(next(kept))
        v = convert(self.d, self.at(x, coords), dt, acc_dt)
        self.line(f"{acc} = {binary(self.d, rk.combiner, acc_dt, acc, v)};")
        for _ in axes:
            self.close()
        return convert(self.d, acc, acc_dt, dt)

    def _dot(self, n: Node, idx: Idx) -> str:
        lhs, rhs = n.operands
        dims = DotDims.of(n)
        acc_dt = accumulator(self.d, "sum", n.dtype)
        acc = self.tmp(self.d.reg[acc_dt], literal(self.d, 0, acc_dt), "acc")
        if dims.k == 0:
            return convert(self.d, acc, acc_dt, n.dtype)
        coords = self.coords(idx)  # bound outside the K loop: the epilogue reads them after it
        ks = [self.counted_loop(lhs.shape[c]) for c in dims.lhs_contracting]
        li, ri = dims.operand_indices(coords, ks, lhs.tensor_type.rank, rhs.tensor_type.rank)
        a = convert(self.d, self.at(lhs, li), lhs.dtype, acc_dt)
        b = convert(self.d, self.at(rhs, ri), rhs.dtype, acc_dt)
        self.line(f"{acc} = {binary(self.d, Op.ADD, acc_dt, acc, binary(self.d, Op.MUL, acc_dt, a, b))};")
        for _ in ks:
            self.close()
        return convert(self.d, acc, acc_dt, n.dtype)

    def counted_loop(self, n: int) -> Ix:
        self.n += 1
        v = f"r{self.n}"
        self.open(f"for ({self.d.index_type} {v} = 0; {v} < {n}; {v}++)")
        return ix.var(v)

    def _unsupported(self, n: Node, idx: Idx) -> str:
        raise BackendError(f"{self.d.name} renderer: {n.op.value} cannot appear inside a kernel ({n.type})",
                           where=n.loc)


def _is_literal(e: str) -> bool:
    if e.startswith("(") and e.endswith(")"):
        e = e[1:-1]
    return bool(re.fullmatch(r"-?[0-9][0-9.e+\-]*(f|LL|L)?|-?\(?(\(double\))?(NAN|INFINITY)\)?|[A-Z0-9_]+_MIN", e))


_Rule = Callable[[_KernelBuilder, Node, Idx], str]
_RULES: dict[Op, _Rule] = {
    Op.PARAMETER: _KernelBuilder._parameter, Op.CONSTANT: _KernelBuilder._constant, Op.IOTA: _KernelBuilder._iota,
    Op.CONVERT: _KernelBuilder._convert, Op.COMPARE: _KernelBuilder._compare, Op.SELECT: _KernelBuilder._select,
    Op.PAD: _KernelBuilder._pad, Op.CONCATENATE: _KernelBuilder._concatenate, Op.RNG_BIT_GENERATOR: _KernelBuilder._rng,
    Op.REDUCE: _KernelBuilder._reduce, Op.DOT_GENERAL: _KernelBuilder._dot,
    Op.GATHER: _KernelBuilder._gather, Op.DYNAMIC_SLICE: _KernelBuilder._dynamic_slice,
    **{op: _KernelBuilder._movement for op in ix.MOVEMENT},
    **{op: _KernelBuilder._elementwise for op in (*FLOAT_UNARY, *FLOAT_BINARY, Op.NOT, Op.AND, Op.OR)},
    # bit operations and elementwise completeness
    **{op: _KernelBuilder._elementwise for op in (*INT_UNARY, *INT_BINARY)},
    Op.IS_FINITE: _KernelBuilder._is_finite, Op.BITCAST_CONVERT: _KernelBuilder._bitcast,
}

#: ops that are a kernel of their own, written by :meth:`_KernelBuilder.update`
UPDATES: frozenset[Op] = frozenset({Op.SCATTER, Op.DYNAMIC_UPDATE_SLICE})

#: ops a fusion rendered by :class:`CRenderer` may contain
RENDERABLE: frozenset[Op] = frozenset(_RULES) - {Op.PARAMETER}
