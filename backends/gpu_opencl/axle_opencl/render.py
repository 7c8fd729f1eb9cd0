"""The OpenCL C this backend writes: the shared C-family renderer's OpenCL C dialect
(:mod:`axle.lowering.c`, which holds the op -> expression tables with the IR's exact
semantics, literals and helper functions) with fixes for PoCL's compiler, plus the few
wrappers the kernel builders call.

Operands are always temporaries or literals (the code generator assigns every node to a
variable), so an expression may mention an operand more than once. The same strings serve
scalar code and, for the float ops in :data:`VECTOR_OK`, ``floatN`` code: comparisons and
``isnan`` give all-ones masks on vectors and ``?:`` selects per lane.

f16 is stored as ``half`` and computed in ``float`` (vload_half/vstore_half need no
extension), rounded back to half after every op as the interpreter does; bool is stored as
``uchar`` 0/1 and held as ``int`` 0/1 in registers."""
from __future__ import annotations

from collections.abc import Callable, Iterable

from axle.ir.dtypes import DType
from axle.ir.numerics import TANH_SATURATION_F32
from axle.ir.ops import Op
from axle.lowering import c
from axle.lowering.c import FLOAT_BINARY, FLOAT_UNARY, OpenCLC

Expr = str
_Rule = Callable[[c.Dialect, DType, Expr], Expr]


def _nan_guard(rule: _Rule) -> _Rule:
    """PoCL (LLVM 15) folds exp/tanh/floor/ceil of a NaN known at compile time (e.g. a
    NaN constant in a fused program) to garbage; passing NaN through explicitly is exact
    and costs one compare-select."""
    return lambda d, dt, x: f"(isnan({x}) ? {x} : {rule(d, dt, x)})"


def _tanh(d: c.Dialect, dt: DType, x: Expr) -> Expr:
    """PoCL's float tanh never returns +-1, not even for +-inf (0.99999994): +-1 where the
    correctly rounded tanh is +-1 (tanh(-inf) = -1 feeds pow, ceil... exactly)."""
    if dt is DType.FLOAT64:
        return f"tanh({x})"
    return f"(fabs({x}) > {TANH_SATURATION_F32!r}f ? copysign(1.0f, {x}) : tanh({x}))"


def _finite_guard(rule: _Rule) -> _Rule:
    """PoCL folds rint of a NaN or an infinity known at compile time to -0.0; rounding
    passes both through unchanged."""
    return lambda d, dt, x: f"(isfinite({x}) ? {rule(d, dt, x)} : {x})"


class CL(OpenCLC):
    """OpenCL C as PoCL compiles it right."""

    float_unary_override = {Op.TANH: _nan_guard(_tanh),
                            **{op: _nan_guard(FLOAT_UNARY[op]) for op in (Op.EXP, Op.LOGISTIC, Op.FLOOR, Op.CEIL)},
                            # elementwise completeness: expm1(NaN) folds to -0.0 as well
                            Op.EXPM1: _nan_guard(FLOAT_UNARY[Op.EXPM1]),
                            Op.ROUND_NEAREST_EVEN: _finite_guard(FLOAT_UNARY[Op.ROUND_NEAREST_EVEN])}


#: element type inside buffers, of values in registers, unsigned twin for wrapping arithmetic
STORAGE, REG, UNSIGNED = CL.storage, CL.reg, CL.unsigned

#: Ops rendered on floatN as well. Not sin/cos: PoCL's vector sin/cos lose the small
#: lanes of a vector that also holds a huge argument (sin(1e-30) came out 0.0099 beside
#: 1e30, on the CPU strategy's float16 vectors); the scalar builtins are right. Not sign
#: (its rule casts a scalar comparison).
VECTOR_OK: frozenset[Op] = (frozenset(FLOAT_UNARY) | frozenset(FLOAT_BINARY)) - {Op.SIGN, Op.SIN, Op.COS}


def literal(value: object, dt: DType) -> str:
    """A register-typed literal; negative ones are parenthesized (``-x`` never meets ``--1``)."""
    return c.literal(CL, value, dt)


def identity(kind: str, dt: DType) -> str:
    """The register-typed identity of a reduction kind (its value over no elements)."""
    return c.identity(CL, kind, dt)


def unary(op: Op, dt: DType, x: Expr) -> Expr:
    return c.unary(CL, op, dt, x)


def binary(op: Op, dt: DType, a: Expr, b: Expr) -> Expr:
    return c.binary(CL, op, dt, a, b)


def convert(x: Expr, src: DType, dst: DType) -> Expr:
    return c.convert(CL, x, src, dst)


def round_half(x: Expr) -> Expr:
    return CL.round_half.format(x=x)


def round_16(dt: DType, x: Expr) -> Expr:
    """A float register value rounded once to ``dt`` when it is float16 or bfloat16."""
    return c.round_16(CL, dt, x)


def program_source(body: str, fp64: bool, used: Iterable[str] | None = None) -> str:
    """A program: the fp64 pragma where needed, the helper functions ``body`` calls, ``body``.
    ``used``: those helpers' names when known (``Kernel.helpers``: finding them is a regex
    over the whole source, about 1 ms for a training step's program)."""
    table = c.helpers(CL)
    names = c.used_helpers(CL, body) if used is None else sorted(set(used))
    head = [CL.header.rstrip("\n")] if fp64 else []
    return "\n".join(head + [table[h] for h in names] + [body]) + "\n"


def helpers_of(bodies_helpers: Iterable[tuple[str, ...] | None]) -> set[str] | None:
    """The helpers a program of several kernels calls: the union of each kernel's (None
    when one kernel's are not known: the program's source is searched then)."""
    out: set[str] = set()
    for hs in bodies_helpers:
        if hs is None:
            return None
        out.update(hs)
    return out


def known_helpers(names: Iterable[str]) -> tuple[str, ...]:
    """``names``, each checked to be a helper of this dialect (a cached plan's: ValueError)."""
    table = c.helpers(CL)
    out = tuple(names)
    bad = [h for h in out if not isinstance(h, str) or h not in table]
    if bad:
        raise ValueError(f"unknown OpenCL helper {bad[0]!r}")
    return out
