"""How each axle dtype lives in memory (storage) and in registers (compute).

pred is one byte in memory (NumPy's bool) and i1 in registers; f16 is half in memory and
float in registers, rounded back to half after every op so results match the interpreter,
which computes float16 ops in float32 and rounds once per op. bfloat16 is the same in
i16 (its bits: the top half of a float32's), rounded to nearest even by integer code (LLVM's
bfloat conversions need libcalls the JIT does not provide). Unsigned integers share the
signed types (LLVM integers have no sign): the emitter picks the unsigned instructions."""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from axle.ir.dtypes import DType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

_NARROW: dict[DType, ir.Type] = {
    DType.INT8: I8, DType.INT16: I16, DType.UINT8: I8, DType.UINT16: I16, DType.UINT32: I32, DType.UINT64: I64,
}
STORAGE: dict[DType, ir.Type] = {
    DType.BOOL: I8, DType.INT32: I32, DType.INT64: I64,
    DType.FLOAT16: F16, DType.FLOAT32: F32, DType.FLOAT64: F64,
    **_NARROW, DType.BFLOAT16: I16,
}
COMPUTE: dict[DType, ir.Type] = {
    DType.BOOL: I1, DType.INT32: I32, DType.INT64: I64,
    DType.FLOAT16: F32, DType.FLOAT32: F32, DType.FLOAT64: F64,
    **_NARROW, DType.BFLOAT16: F32,
}
#: the suffix LLVM intrinsics use for a type
SUFFIX = {id(F16): "f16", id(F32): "f32", id(F64): "f64", id(I32): "i32", id(I64): "i64", id(I1): "i1", id(I8): "i8",
          id(I16): "i16"}


def suffix(t: ir.Type) -> str:
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {"half": "f16", "float": "f32", "double": "f64"}[str(t)]


def const(dt: DType, value: Any) -> ir.Constant:
    """A compute-type constant of dtype dt."""
    t = COMPUTE[dt]
    if dt is DType.BOOL:
        return ir.Constant(I1, int(bool(value)))
    if dt.is_int:
        return int_const(t, int(value))
    return ir.Constant(t, float(value))


def storage_consts(arr: np.ndarray, dt: DType) -> list[ir.Constant]:
    """The elements of a constant array as storage-type constants (bfloat16 by its bits)."""
    st = STORAGE[dt]
    flat = np.ascontiguousarray(arr).reshape(-1)
    if dt is DType.BFLOAT16:
        return [ir.Constant(I16, int(v)) for v in flat.view(np.int16)]
    if dt is DType.BOOL or dt.is_int:
        return [int_const(st, int(v)) for v in flat]
    return [ir.Constant(st, float(v)) for v in flat]


def int_const(t: ir.IntType, value: int) -> ir.Constant:
    """An integer constant by its bits (an unsigned value above the signed range is written
    as the signed integer with the same bits, which is how LLVM IR spells it)."""
    value &= (1 << t.width) - 1
    return ir.Constant(t, value - (1 << t.width) if value >> (t.width - 1) else value)


C_TYPES = {DType.BOOL: "bool", DType.INT32: "int32_t", DType.INT64: "int64_t",
           DType.FLOAT16: "_Float16", DType.FLOAT32: "float", DType.FLOAT64: "double",
           DType.INT8: "int8_t", DType.INT16: "int16_t", DType.UINT8: "uint8_t", DType.UINT16: "uint16_t",
           DType.UINT32: "uint32_t", DType.UINT64: "uint64_t",
           DType.BFLOAT16: "uint16_t"}  # bfloat16: its bits (C has no bfloat16 type before C23)
