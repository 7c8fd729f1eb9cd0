"""How IR element types live in OpenCL C: storage type in buffers, register type in
kernels, literals and reduction identities.

f16 is stored as ``half`` and computed in ``float`` (vload_half/vstore_half need no
extension), rounded back to half after every op so results match the interpreter,
which also computes f16 in f32 and rounds once per op. pred is stored as ``uchar`` 0/1
and held as ``int`` 0/1 in registers. The names and literals are the shared OpenCL C
dialect's (``axle.lowering.c.OpenCLC``)."""
from __future__ import annotations

from axle.ir.dtypes import DType
from axle.lowering import c
from axle.lowering.c import OpenCLC

#: element type inside buffers
STORAGE: dict[DType, str] = OpenCLC.storage
#: type of values in registers
REG: dict[DType, str] = OpenCLC.reg
#: unsigned twin used for wrapping integer arithmetic (signed overflow is UB in C)
UNSIGNED: dict[DType, str] = OpenCLC.unsigned


def literal(value: object, dt: DType) -> str:
    """An OpenCL C literal of register type for ``dt``; negative ones are parenthesized
    so that a builder writing ``-x`` never produces ``--1.0f``."""
    return c.literal(OpenCLC, value, dt)


def identity(kind: str, dt: DType) -> str:
    """The register-typed identity of a reduction kind (its value over no elements)."""
    return c.identity(OpenCLC, kind, dt)
