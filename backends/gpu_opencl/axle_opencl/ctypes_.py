"""How IR element types live in OpenCL C: storage type in buffers, register type in
kernels, literals and reduction identities.

f16 is stored as ``half`` and computed in ``float`` (vload_half/vstore_half need no
extension), rounded back to half after every op so results match the interpreter,
which also computes f16 in f32 and rounds once per op. pred is stored as ``uchar`` 0/1
and held as ``int`` 0/1 in registers."""
from __future__ import annotations

import math

import numpy as np

from axle.ir.dtypes import DType
from axle.ir.reductions import REDUCE_KINDS

#: element type inside buffers
STORAGE: dict[DType, str] = {
    DType.BOOL: "uchar", DType.INT32: "int", DType.INT64: "long",
    DType.FLOAT16: "half", DType.FLOAT32: "float", DType.FLOAT64: "double",
}
#: type of values in registers
REG: dict[DType, str] = {
    DType.BOOL: "int", DType.INT32: "int", DType.INT64: "long",
    DType.FLOAT16: "float", DType.FLOAT32: "float", DType.FLOAT64: "double",
}
#: unsigned twin used for wrapping integer arithmetic (signed overflow is UB in C)
UNSIGNED = {DType.INT32: "uint", DType.INT64: "ulong"}


def literal(value: object, dt: DType) -> str:
    """An OpenCL C literal of register type for ``dt``; negative ones are parenthesized
    so that a builder writing ``-x`` never produces ``--1.0f``."""
    text = _literal(value, dt)
    return f"({text})" if text.startswith("-") else text


def _literal(value: object, dt: DType) -> str:
    v = np.asarray(value).astype(dt.np)[()]
    if dt is DType.BOOL:
        return "1" if bool(v) else "0"
    if dt is DType.INT32:
        iv = int(v)
        return "INT_MIN" if iv == -2**31 else f"{iv}"
    if dt is DType.INT64:
        iv = int(v)
        return "LONG_MIN" if iv == -2**63 else f"{iv}L"
    f = float(v)
    if math.isnan(f):
        return "NAN" if dt is not DType.FLOAT64 else "((double)NAN)"
    if math.isinf(f):
        s = "INFINITY" if dt is not DType.FLOAT64 else "((double)INFINITY)"
        return s if f > 0 else f"(-{s})"
    text = repr(f) if dt is DType.FLOAT64 else repr(float(np.float32(f)))
    if "e" not in text and "." not in text:
        text += ".0"
    return text if dt is DType.FLOAT64 else text + "f"


def identity(kind: str, dt: DType) -> str:
    """The register-typed identity of a reduction kind (its value over no elements)."""
    return literal(REDUCE_KINDS[kind].identity(dt), dt)
