"""How each axle dtype lives in memory (storage) and in registers (compute).

pred is one byte in memory (NumPy's bool) and i1 in registers; f16 is half in memory and
float in registers, rounded back to half after every op so results match the interpreter,
which computes float16 ops in float32 and rounds once per op."""
from __future__ import annotations

from typing import Any

from llvmlite import ir

from axle.ir.dtypes import DType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

STORAGE: dict[DType, ir.Type] = {
    DType.BOOL: I8, DType.INT32: I32, DType.INT64: I64,
    DType.FLOAT16: F16, DType.FLOAT32: F32, DType.FLOAT64: F64,
}
COMPUTE: dict[DType, ir.Type] = {
    DType.BOOL: I1, DType.INT32: I32, DType.INT64: I64,
    DType.FLOAT16: F32, DType.FLOAT32: F32, DType.FLOAT64: F64,
}
#: the suffix LLVM intrinsics use for a type
SUFFIX = {id(F16): "f16", id(F32): "f32", id(F64): "f64", id(I32): "i32", id(I64): "i64", id(I1): "i1", id(I8): "i8"}


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
        return ir.Constant(t, int(value))
    return ir.Constant(t, float(value))


C_TYPES = {DType.BOOL: "bool", DType.INT32: "int32_t", DType.INT64: "int64_t",
           DType.FLOAT16: "_Float16", DType.FLOAT32: "float", DType.FLOAT64: "double"}
