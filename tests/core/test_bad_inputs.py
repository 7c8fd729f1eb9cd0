"""The bad-input suite: a table of calls a careless or hostile user makes (bad shapes,
dtypes, axes, indices, sizes; strided, negative-stride, big-endian, read-only and
unaligned NumPy inputs; Python scalars and lists; empty and size-1 dims), each run eagerly
and under jit on every installed backend.

Each row declares its expectation: ``Ok(reference)``, the right answer (compared with
NumPy, dtype included), or ``Err(class, function, *words)``, an ``axle.errors`` exception
whose message names the function and the shapes / dtypes / values given in ``words`` and
whose ``where`` is this file (the line that made the call). Anything else fails: a
non-axle exception (an internal error), a wrong or silently converted value.

A row's function receives the row's array arguments (NumPy data, passed unchanged: under
jit they are the traced arguments); everything else is written into the row."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import errors, nn
from axle.errors import ArgumentError, AxleError, DTypeError, OutOfBoundsError, ShapeError
from axle.ir.dtypes import supported_numpy_dtype
from axle.testing import require_backend

HERE = __file__
BACKENDS = ("interpreter", "cpu", "opencl", "template")
MODES = ("eager", "jit")


@dataclass(frozen=True)
class Ok:
    """The call succeeds and equals ``ref`` (NumPy) on the same arguments."""

    ref: Callable[..., Any]


@dataclass(frozen=True)
class Err:
    """The call raises ``cls`` naming ``fn`` (or ``jit_fn`` under jit) and every word."""

    cls: type[AxleError]
    fn: str
    words: tuple[str, ...] = ()
    jit_fn: str | None = None


def err(cls: type[AxleError], fn: str, *words: str, jit_fn: str | None = None) -> Err:
    return Err(cls, fn, words, jit_fn)


@dataclass(frozen=True)
class Case:
    name: str
    call: Callable[..., Any]
    args: tuple[Any, ...]
    expect: Ok | Err
    #: under jit, when it differs (a traced mask has no value to select with)
    jit_expect: Ok | Err | None = None

    def expected(self, mode: str) -> Ok | Err:
        return self.jit_expect if mode == "jit" and self.jit_expect is not None else self.expect


# ------------------------------------------------------------------------------ inputs

R = np.random.default_rng(7)
F = R.standard_normal((3, 4)).astype(np.float32)  # f32[3,4]
D = R.standard_normal((2, 3))  # f64[2,3]
I32 = np.arange(12, dtype=np.int32).reshape(3, 4)
I64 = np.arange(6, dtype=np.int64)
B = np.array([True, False, True])
IMG = R.standard_normal((1, 2, 5, 5)).astype(np.float32)
KER = R.standard_normal((3, 2, 2, 2)).astype(np.float32)
LOGITS = R.standard_normal((4, 3)).astype(np.float32)
EMPTY = np.zeros((0, 3), np.float32)
ONE = np.ones((1, 1, 3), np.float32)


def strided() -> np.ndarray:
    return np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2]


def negative_stride() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)[::-1, ::-2]


def big_endian() -> np.ndarray:
    return np.arange(6, dtype=">f4").reshape(2, 3) - 2.5


def big_endian_int() -> np.ndarray:
    return np.arange(6, dtype=">i8") - 3


def read_only() -> np.ndarray:
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    return a


def unaligned() -> np.ndarray:
    raw = np.zeros(6 * 8 + 1, np.uint8)[1:].view(np.float64)
    raw[:] = np.arange(6) * 1.5
    return raw


def fortran() -> np.ndarray:
    return np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))


def transposed() -> np.ndarray:
    return np.arange(6, dtype=np.int64).reshape(2, 3).T


# ------------------------------------------------------------------------------ the table

CASES: list[Case] = []


def case(name: str, call: Callable[..., Any], args: tuple[Any, ...], expect: Ok | Err,
         jit_expect: Ok | Err | None = None) -> None:
    CASES.append(Case(name, call, args, expect, jit_expect))


# --- creation: shapes and sizes
case("zeros-float-dim", lambda: anp.zeros((2.5,)), (), err(ArgumentError, "zeros", "2.5"))
case("zeros-str-dim", lambda: anp.zeros(("3",)), (), err(ArgumentError, "zeros", "'3'"))
case("zeros-str-shape", lambda: anp.zeros("3"), (), err(ArgumentError, "zeros", "'3'"))
case("zeros-none-dim", lambda: anp.zeros((None, 2)), (), err(ArgumentError, "zeros", "None"))
case("zeros-negative", lambda: anp.zeros((2, -1)), (), err(ShapeError, "zeros", "(2, -1)", "negative"))
case("zeros-negative-int", lambda: anp.zeros(-3), (), err(ShapeError, "zeros", "negative"))
case("zeros-huge", lambda: anp.zeros((2**40, 2**40)), (), err(ShapeError, "zeros", "too large"))
case("zeros-huge-1d", lambda: anp.zeros(2**62), (), err(ShapeError, "zeros", "too large"))
case("zeros-rank-33", lambda: anp.zeros((1,) * 33), (), err(ShapeError, "zeros", "rank 33"))
case("zeros-nested", lambda: anp.zeros(((2,), 3)), (), err(ArgumentError, "zeros", "(2,)"))
case("zeros-float-shape", lambda: anp.zeros(2.0), (), err(ArgumentError, "zeros", "2.0"))
case("zeros-bad-dtype", lambda: anp.zeros(3, dtype="foo"), (), err(DTypeError, "zeros", "foo"))
case("zeros-uint8-ok", lambda: anp.zeros(3, dtype=np.uint8), (), Ok(lambda: np.zeros(3, np.uint8)))
case("zeros-complex", lambda: anp.zeros(3, dtype=complex), (), err(DTypeError, "zeros", "complex128"))
case("ones-float-dim", lambda: anp.ones((1, 2.5)), (), err(ArgumentError, "ones", "2.5"))
case("ones-negative", lambda: anp.ones((-1,)), (), err(ShapeError, "ones", "negative"))
case("ones-int16-ok", lambda: anp.ones(2, np.int16), (), Ok(lambda: np.ones(2, np.int16)))
case("ones-float8", lambda: anp.ones(2, ml_dtypes.float8_e4m3fn), (), err(DTypeError, "ones", "float8_e4m3fn"))
case("empty-negative", lambda: anp.empty((0, -2)), (), err(ShapeError, "empty", "negative"))
case("full-array-fill", lambda x: anp.full((2,), x), (I64,), err(ArgumentError, "full", "fill_value"))
case("full-list-fill", lambda: anp.full((2,), [1, 2]), (), err(ArgumentError, "full", "fill_value"))
case("full-int-overflow", lambda: anp.full(2, 2**31, np.int32), (), err(DTypeError, "full", "2147483648", "int32"))
case("full-pyint-2**63", lambda: anp.full(2, 2**63), (), err(DTypeError, "full", "9223372036854775808"))
case("full-str-fill", lambda: anp.full(2, "a"), (), err(DTypeError, "full", "<U1"))
case("full-negative", lambda: anp.full((-1, 2), 1.0), (), err(ShapeError, "full", "negative"))
case("full_like-uint16-ok", lambda x: anp.full_like(x, 1, np.uint16), (F,), Ok(lambda x: np.full_like(x, 1, np.uint16)))
case("full_like-bad-dtype", lambda x: anp.full_like(x, 1, np.clongdouble), (F,), err(DTypeError, "full_like", "complex"))
case("zeros_like-int8-ok", lambda x: anp.zeros_like(x, np.int8), (F,), Ok(lambda x: np.zeros_like(x, np.int8)))
case("eye-negative", lambda: anp.eye(-1), (), err(ArgumentError, "eye", "-1"))
case("eye-float", lambda: anp.eye(2.5), (), err(ArgumentError, "eye", "2.5"))
case("eye-negative-m", lambda: anp.eye(2, -1), (), err(ArgumentError, "eye", "-1"))
case("eye-str", lambda: anp.eye("a"), (), err(ArgumentError, "eye", "'a'"))
case("eye-float-k", lambda: anp.eye(3, k=0.5), (), err(ArgumentError, "eye", "0.5"))
case("eye-uint8-ok", lambda: anp.eye(2, dtype=np.uint8), (), Ok(lambda: np.eye(2, dtype=np.uint8)))
case("eye-complex", lambda: anp.eye(2, dtype=np.complex64), (), err(DTypeError, "eye", "complex64"))
case("identity-negative", lambda: anp.identity(-2), (), err(ArgumentError, "eye", "-2"))
case("linspace-negative-num", lambda: anp.linspace(0, 1, -1), (), err(ArgumentError, "linspace", "num", "-1"))
case("linspace-float-num", lambda: anp.linspace(0, 1, 2.5), (), err(ArgumentError, "linspace", "2.5"))
case("linspace-inf-stop", lambda: anp.linspace(0, np.inf, 3), (), err(ArgumentError, "linspace", "inf"))
case("linspace-str-start", lambda: anp.linspace("a", 1, 3), (), err(ArgumentError, "linspace", "'a'"))
case("linspace-huge", lambda: anp.linspace(0, 1, 2**61), (), err(ShapeError, "linspace", "too large"))
case("arange-zero-step", lambda: anp.arange(0, 5, 0), (), err(ArgumentError, "arange", "step"))
case("arange-nan", lambda: anp.arange(np.nan), (), err(ArgumentError, "arange", "nan"))
case("arange-inf", lambda: anp.arange(0, np.inf), (), err(ArgumentError, "arange", "inf"))
case("arange-str", lambda: anp.arange("5"), (), err(ArgumentError, "arange", "'5'"))
case("arange-huge", lambda: anp.arange(0, 1e30), (), err(ShapeError, "arange", "too large"))
case("arange-int16-ok", lambda: anp.arange(3, dtype=np.int16), (), Ok(lambda: np.arange(3, dtype=np.int16)))
case("arange-complex", lambda: anp.arange(3, dtype=np.complex64), (), err(DTypeError, "arange", "complex64"))
case("arange-none", lambda: anp.arange(None), (), err(ArgumentError, "arange", "None"))
# a petabyte: within the address range, so it reaches the device, whose allocation fails
case("zeros-out-of-memory", lambda: anp.zeros(2**47), (), err(errors.BackendError, "", "out of memory"))
case("ones-out-of-memory", lambda: anp.ones((2**24, 2**23), np.float32),
     (), err(errors.BackendError, "", "out of memory"))
case("broadcast-out-of-memory", lambda x: anp.broadcast_to(x, (2**45, 3, 4)), (F,),
     err(errors.BackendError, "", "out of memory"))
case("outer-out-of-memory", lambda x: x[:, None] * x[None, :], (np.ones(2**24, np.float32),),
     err(errors.BackendError, "", "out of memory"))

# --- creation that must work (empty and size-1 included)
case("zeros-empty", lambda: anp.zeros((0, 3)), (), Ok(lambda: np.zeros((0, 3))))
case("zeros-np-int-dims", lambda: anp.zeros((np.int64(2), np.int32(1)), np.float32), (),
     Ok(lambda: np.zeros((2, 1), np.float32)))
case("zeros-scalar-shape", lambda: anp.zeros(()), (), Ok(lambda: np.zeros(())))
case("ones-size-1", lambda: anp.ones((1, 1, 1), np.int32), (), Ok(lambda: np.ones((1, 1, 1), np.int32)))
case("full-bool", lambda: anp.full((2, 2), True), (), Ok(lambda: np.full((2, 2), True)))
case("full-int32-max", lambda: anp.full(2, 2**31 - 1, np.int32), (), Ok(lambda: np.full(2, 2**31 - 1, np.int32)))
case("eye-zero", lambda: anp.eye(0), (), Ok(lambda: np.eye(0)))
case("eye-rect-k", lambda: anp.eye(2, 3, k=-1, dtype=np.int64), (), Ok(lambda: np.eye(2, 3, k=-1, dtype=np.int64)))
case("linspace-zero", lambda: anp.linspace(0, 1, 0), (), Ok(lambda: np.linspace(0, 1, 0)))
case("linspace-one", lambda: anp.linspace(2, 3, 1), (), Ok(lambda: np.linspace(2, 3, 1)))
case("arange-empty", lambda: anp.arange(5, 0), (), Ok(lambda: np.arange(5, 0)))
case("arange-negative-step", lambda: anp.arange(5, 0, -2), (), Ok(lambda: np.arange(5, 0, -2)))
case("arange-float", lambda: anp.arange(0, 1, 0.25), (), Ok(lambda: np.arange(0, 1, 0.25)))

# --- reshape and friends
case("reshape-float-dim", lambda x: anp.reshape(x, (2.0, 6)), (F,), err(ArgumentError, "reshape", "2.0"))
case("reshape-str-dim", lambda x: anp.reshape(x, ("a",)), (F,), err(ArgumentError, "reshape", "'a'"))
case("reshape-two-minus-one", lambda x: anp.reshape(x, (-1, -1)), (F,), err(ShapeError, "reshape", "(-1, -1)"))
case("reshape-minus-two", lambda x: anp.reshape(x, (-2, -6)), (F,), err(ArgumentError, "reshape", "-2"))
case("reshape-size", lambda x: anp.reshape(x, (5, 5)), (F,), err(ShapeError, "reshape", "(5, 5)", "f32[3,4]"))
case("reshape-none", lambda x: anp.reshape(x, None), (F,), err(ArgumentError, "reshape", "None"))
case("reshape-empty-infer", lambda x: anp.reshape(x, (0, -1)), (EMPTY,), err(ShapeError, "reshape", "(0, -1)"))
case("reshape-method-float", lambda x: x.reshape(3, 4.0), (F,), err(ArgumentError, "reshape", "4.0"),)
case("reshape-ok", lambda x: anp.reshape(x, (2, -1)), (F,), Ok(lambda x: np.reshape(x, (2, -1))))
case("reshape-np-ints", lambda x: anp.reshape(x, (np.int64(4), np.int32(3))), (F,), Ok(lambda x: x.reshape(4, 3)))
case("reshape-empty", lambda x: anp.reshape(x, (3, 0)), (EMPTY,), Ok(lambda x: x.reshape(3, 0)))
case("broadcast_to-float", lambda x: anp.broadcast_to(x, (2.0, 3, 4)), (F,),
     err(ArgumentError, "broadcast_to", "2.0"))
case("broadcast_to-bad", lambda x: anp.broadcast_to(x, (3, 5)), (F,), err(ShapeError, "broadcast_to", "(3, 5)"))
case("broadcast_to-fewer", lambda x: anp.broadcast_to(x, (4,)), (F,), err(ShapeError, "broadcast_to", "(4,)"))
case("broadcast_to-negative", lambda x: anp.broadcast_to(x, (-3, 4)), (F,), err(ShapeError, "broadcast_to", "negative"))
case("broadcast_to-ok", lambda x: anp.broadcast_to(x, (2, 3, 4)), (F,), Ok(lambda x: np.broadcast_to(x, (2, 3, 4))))
case("expand_dims-bad", lambda x: anp.expand_dims(x, 5), (F,), err(ShapeError, "expand_dims", "axis 5"))
case("expand_dims-float", lambda x: anp.expand_dims(x, 1.0), (F,), err(ArgumentError, "expand_dims", "1.0"))
case("expand_dims-repeat", lambda x: anp.expand_dims(x, (0, 0)), (F,), err(ShapeError, "expand_dims", "repeated"))
case("squeeze-non-1", lambda x: anp.squeeze(x, 0), (F,), err(ShapeError, "squeeze", "size 3"))
case("squeeze-out", lambda x: anp.squeeze(x, 3), (ONE,), err(ShapeError, "squeeze", "axis 3"))
case("squeeze-ok", lambda x: anp.squeeze(x), (ONE,), Ok(lambda x: np.squeeze(x)))
case("transpose-bad-perm", lambda x: anp.transpose(x, (0, 0)), (F,), err(ShapeError, "transpose", "(0, 0)"))
case("transpose-out", lambda x: anp.transpose(x, (0, 2)), (F,), err(ShapeError, "transpose", "axis 2"))
case("transpose-float", lambda x: anp.transpose(x, (1.0, 0)), (F,), err(ArgumentError, "transpose", "1.0"))
case("swapaxes-out", lambda x: anp.swapaxes(x, 0, 2), (F,), err(ShapeError, "swapaxes", "axis 2"))
case("moveaxis-out", lambda x: anp.moveaxis(x, -3, 0), (F,), err(ShapeError, "moveaxis", "axis -3"))
case("moveaxis-str", lambda x: anp.moveaxis(x, "0", 1), (F,), err(ArgumentError, "moveaxis", "'0'"))
case("flip-out", lambda x: anp.flip(x, 2), (F,), err(ShapeError, "flip", "axis 2"))
case("flip-ok", lambda x: anp.flip(x, -1), (F,), Ok(lambda x: np.flip(x, -1)))
case("tile-negative", lambda x: anp.tile(x, -1), (F,), err(ArgumentError, "tile", "-1"))
case("tile-float", lambda x: anp.tile(x, (2.5, 1)), (F,), err(ArgumentError, "tile", "2.5"))
case("tile-ok", lambda x: anp.tile(x, (2, 1)), (I64,), Ok(lambda x: np.tile(x, (2, 1))))
case("repeat-negative", lambda x: anp.repeat(x, -1), (I64,), err(ArgumentError, "repeat", "-1"))
case("repeat-float", lambda x: anp.repeat(x, 1.5), (I64,), err(ArgumentError, "repeat", "1.5"))
case("repeat-axis", lambda x: anp.repeat(x, 2, axis=3), (F,), err(ShapeError, "repeat", "axis 3"))
case("repeat-zero", lambda x: anp.repeat(x, 0, axis=1), (F,), Ok(lambda x: np.repeat(x, 0, axis=1)))
case("pad-negative", lambda x: anp.pad(x, -1), (F,), err(ShapeError, "pad", "-1"))
case("pad-float", lambda x: anp.pad(x, 1.5), (F,), err(ArgumentError, "pad", "1.5"))
case("pad-mode", lambda x: anp.pad(x, 1, mode="edge"), (F,), err(ShapeError, "pad", "'edge'"))
case("pad-wrong-rank", lambda x: anp.pad(x, ((1, 1), (1, 1), (1, 1))), (F,), err(ShapeError, "pad", "rank 2"))
case("pad-array-value", lambda x: anp.pad(x, 1, constant_values=[1, 2]), (F,), err(ShapeError, "pad", "scalar"))
case("pad-ok", lambda x: anp.pad(x, (1, 2)), (I32,), Ok(lambda x: np.pad(x, (1, 2))))
case("pad-ok-pairs", lambda x: anp.pad(x, ((0, 1), (2, 0)), constant_values=-1.5), (D,),
     Ok(lambda x: np.pad(x, ((0, 1), (2, 0)), constant_values=-1.5)))

# --- axes
for _fn in ("sum", "prod", "max", "min", "mean", "var", "std", "argmax", "argmin", "all", "any"):
    case(f"{_fn}-axis-float", lambda x, f=_fn: getattr(anp, f)(x, axis=1.0), (F,), err(ArgumentError, _fn, "axis", "1.0"))
    case(f"{_fn}-axis-out", lambda x, f=_fn: getattr(anp, f)(x, axis=2), (F,),
         err(ShapeError, _fn, "axis 2", "f32[3,4]"))
for _fn in ("sum", "prod", "max", "min", "mean", "all", "any"):
    case(f"{_fn}-axis-negative-out", lambda x, f=_fn: getattr(anp, f)(x, axis=-3), (F,), err(ShapeError, _fn, "axis -3"))
    case(f"{_fn}-axis-repeated", lambda x, f=_fn: getattr(anp, f)(x, axis=(1, -1)), (F,),
         err(ShapeError, _fn, "repeated"))
    case(f"{_fn}-axis-str", lambda x, f=_fn: getattr(anp, f)(x, axis="0"), (F,), err(ArgumentError, _fn, "'0'"))
    case(f"{_fn}-axis-ok", lambda x, f=_fn: getattr(anp, f)(x, axis=(-1, 0)), (D,),
         Ok(lambda x, f=_fn: getattr(np, f)(x, axis=(-1, 0))))
case("sum-0d-axis", lambda x: anp.sum(x, axis=1), (np.float32(2.0),), err(ShapeError, "sum", "axis 1"))
case("sum-0d-axis-0", lambda x: anp.sum(x, axis=0), (np.float64(2.0),), Ok(lambda x: np.sum(x, axis=0)))
case("sum-empty", lambda x: anp.sum(x, axis=0), (EMPTY,), Ok(lambda x: np.sum(x, axis=0)))
case("prod-empty", lambda x: anp.prod(x), (EMPTY,), Ok(lambda x: np.prod(x)))
case("max-empty", lambda x: anp.max(x, axis=0), (EMPTY,), err(ShapeError, "max", "zero-size"))
case("min-empty", lambda x: anp.min(x), (EMPTY,), err(ShapeError, "min", "zero-size"))
case("max-empty-other-axis", lambda x: anp.max(x, axis=1), (EMPTY,), Ok(lambda x: np.max(x, axis=1)))
case("argmax-empty", lambda x: anp.argmax(x, axis=0), (EMPTY,), err(ShapeError, "argmax", "empty"))
case("argmin-empty-flat", lambda x: anp.argmin(x), (EMPTY,), err(ShapeError, "argmin", "empty"))
case("argmax-size-1", lambda x: anp.argmax(x, axis=1), (ONE,), Ok(lambda x: np.argmax(x, axis=1)))
case("cumsum-axis-out", lambda x: anp.cumsum(x, axis=2), (F,), err(ShapeError, "cumsum", "axis 2"))
case("cumsum-axis-float", lambda x: anp.cumsum(x, axis=0.0), (F,), err(ArgumentError, "cumsum", "0.0"))
case("concatenate-axis", lambda x: anp.concatenate([x, x], axis=2), (F,), err(ShapeError, "concatenate", "axis 2"))
case("concatenate-axis-float", lambda x: anp.concatenate([x, x], axis=1.0), (F,),
     err(ArgumentError, "concatenate", "1.0"))
case("concatenate-empty-list", lambda: anp.concatenate([]), (), err(ArgumentError, "concatenate", "at least one"))
case("concatenate-rank", lambda x, y: anp.concatenate([x, y]), (F, I64),
     err(ShapeError, "concatenate", "f32[3,4]", "s64[6]"))
case("concatenate-0d", lambda x: anp.concatenate([x, x]), (np.float32(1),), err(ShapeError, "concatenate", "rank"))
case("concatenate-shape", lambda x, y: anp.concatenate([x, y], axis=1), (F, D),
     err(ShapeError, "concatenate", "f32[3,4]", "f64[2,3]"))
case("concatenate-with-empty", lambda x, y: anp.concatenate([x, y]), (F[:, :3].copy(), EMPTY),
     Ok(lambda x, y: np.concatenate([x, y])))
case("concatenate-mixed-dtype", lambda x, y: anp.concatenate([x, y], axis=None), (F, I64),
     Ok(lambda x, y: np.concatenate([x, y], axis=None)))
case("stack-empty-list", lambda: anp.stack([]), (), err(ArgumentError, "stack", "at least one"))
case("stack-shapes", lambda x, y: anp.stack([x, y]), (F, D), err(ShapeError, "stack", "same shape"))
case("stack-axis", lambda x: anp.stack([x, x], axis=3), (F,), err(ShapeError, "stack", "axis 3"))
case("stack-ok", lambda x: anp.stack([x, x], axis=-1), (D,), Ok(lambda x: np.stack([x, x], axis=-1)))
case("split-zero", lambda x: anp.split(x, 0), (I64,), err(ArgumentError, "split", "sections", "0"))
case("split-uneven", lambda x: anp.split(x, 4), (I64,), err(ShapeError, "split", "equal division"))
case("split-float", lambda x: anp.split(x, 2.0), (I64,), err(ArgumentError, "split", "2.0"))
case("split-axis", lambda x: anp.split(x, 2, axis=1), (I64,), err(ShapeError, "split", "axis 1"))
case("split-points", lambda x: anp.split(x, [2, 9]), (I64,), Ok(lambda x: np.split(x, [2, 9])))
case("array_split-zero", lambda x: anp.array_split(x, 0), (I64,), err(ArgumentError, "array_split", "0"))
case("array_split-ok", lambda x: anp.array_split(x, 4), (I64,), Ok(lambda x: np.array_split(x, 4)))

# --- dtypes: the narrow/unsigned integers and bfloat16 keep their dtype and wrap like NumPy
_ACCEPTED = {
    "int8": np.array([-128, 127], np.int8), "int16": np.array([1, -2], np.int16),
    "uint8": np.array([255, 0], np.uint8), "uint16": np.array([65535], np.uint16),
    "uint32": np.array([2**32 - 1], np.uint32), "uint64": np.array([2**63, 1], np.uint64),
    "bfloat16": np.array([1.5, -np.inf], ml_dtypes.bfloat16),
}
for _name, _arr in _ACCEPTED.items():
    case(f"asarray-{_name}-ok", lambda x: anp.asarray(x), (_arr,), Ok(lambda x: x))
    case(f"add-{_name}-ok", lambda x: anp.add(x, 1), (_arr,), Ok(lambda x: np.add(x, 1)))
    case(f"captured-{_name}-ok", lambda x, a=_arr: anp.add(x, a[:1]), (_arr,), Ok(lambda x, a=_arr: np.add(x, a[:1])))

# --- dtypes: what axle does not support is refused at every entry, never converted
_REFUSED = {
    "float8_e4m3fn": np.array([1.5], ml_dtypes.float8_e4m3fn),
    "float128": np.array([1.5], np.longdouble), "complex64": np.array([1 + 2j], np.complex64),
    "<U1": np.array(["a"]), "object": np.array([1, "a"], dtype=object),
    "datetime64[D]": np.array(["2020-01-01"], dtype="datetime64[D]"),
}
for _name, _arr in _REFUSED.items():
    _jit = "jit argument"
    case(f"asarray-{_name}", lambda x: anp.asarray(x), (_arr,), err(DTypeError, "asarray", _name, jit_fn=_jit))
    case(f"add-{_name}", lambda x: anp.add(x, 1), (_arr,), err(DTypeError, "", _name, jit_fn=_jit))
    case(f"sum-{_name}", lambda x: anp.sum(x), (_arr,), err(DTypeError, "", _name, jit_fn=_jit))
    case(f"device_put-{_name}", lambda x: axle.device_put(x), (_arr,), err(DTypeError, "device_put", _name,
                                                                             jit_fn=_jit))
    case(f"captured-{_name}", lambda x, a=_arr: x + a[:1], (F,), err(DTypeError, "", _name))
case("astype-float8", lambda x: anp.astype(x, ml_dtypes.float8_e5m2), (F,), err(DTypeError, "astype", "float8_e5m2"))
case("astype-complex", lambda x: x.astype(np.complex64), (F,), err(DTypeError, "astype", "complex64"))
case("astype-str", lambda x: anp.astype(x, "foo"), (F,), err(DTypeError, "astype", "foo"))
case("asarray-dtype-complex", lambda x: anp.asarray(x, dtype=np.complex64), (F,), err(DTypeError, "astype",
                                                                                     "complex64", jit_fn="astype"))
case("asarray-bad-dtype-list", lambda: anp.asarray([1, 2], dtype=np.complex64), (), err(DTypeError, "asarray", "complex64"))
case("asarray-int8-list-ok", lambda: anp.asarray([1, -2], dtype=np.int8), (), Ok(lambda: np.asarray([1, -2], np.int8)))
case("astype-float16-ok", lambda x: anp.astype(x, np.float16), (D,), Ok(lambda x: x.astype(np.float16)))
case("astype-bool-ok", lambda x: anp.astype(x, bool), (I64,), Ok(lambda x: x.astype(bool)))
case("astype-int32-ok", lambda x: anp.astype(x, np.int32), (D,), Ok(lambda x: x.astype(np.int32)))

# --- Python scalars and lists
case("pyint-2**63", lambda: anp.asarray(2**63), (), err(DTypeError, "asarray", "9223372036854775808"))
case("pyint-below-int64", lambda: anp.asarray(-2**63 - 1), (), err(DTypeError, "asarray", "-9223372036854775809"))
case("pyint-2**64-list", lambda: anp.asarray([2**64]), (), err(DTypeError, "asarray", "18446744073709551616"))
case("pylist-mixed-big", lambda: anp.asarray([1, 2**63]), (), err(DTypeError, "asarray", "9223372036854775808"))
case("pylist-ragged", lambda: anp.asarray([[1], [1, 2]]), (), err(DTypeError, "asarray", "list"))
case("pylist-strings", lambda: anp.asarray(["a", "b"]), (), err(DTypeError, "asarray", "<U1"))
case("pynone", lambda: anp.asarray(None), (), err(DTypeError, "asarray", "object"))
case("pyint-into-int32", lambda x: x + 2**31, (I32,), err(DTypeError, "add", "2147483648", "int32"))
case("pyint-into-int32-sub", lambda x: anp.subtract(x, -2**40), (I32,), err(DTypeError, "subtract", "int32"))
case("pyint-into-int64", lambda x: x * 2**64, (I64,), err(DTypeError, "multiply", "18446744073709551616"))
case("pyint-where", lambda x: anp.where(x > 2, x, 2**40), (I32,), err(DTypeError, "where", "int32"))
case("pyint-maximum", lambda x: anp.maximum(x, 2**35), (I32,), err(DTypeError, "maximum", "int32"))
case("pyint-fits-int32", lambda x: x + (2**31 - 12), (I32,), Ok(lambda x: x + np.int32(2**31 - 12)))
case("pyfloat-huge-f32", lambda x: x * 1e300, (F,), Ok(lambda x: (x * np.float32(1e300))))
case("pyfloat-int-array", lambda x: x + 0.5, (I32,), Ok(lambda x: x + 0.5))
case("pybool-add", lambda x: x + True, (I64,), Ok(lambda x: x + True))
case("pylist-add", lambda: anp.add([1, 2], [3.5, 4]), (), Ok(lambda: np.add([1, 2], [3.5, 4])))
case("pylist-with-array", lambda x: anp.add([1.0, 2.0, 3.0, 4.0], x), (F,), Ok(lambda x: np.add([1.0, 2, 3, 4], x)))
case("pylist-empty", lambda: anp.asarray([]), (), Ok(lambda: np.asarray([])))
case("pyscalar-exp", lambda: anp.exp(1), (), Ok(lambda: np.exp(1)))
case("pyscalar-int64-max", lambda: anp.asarray(2**63 - 1), (), Ok(lambda: np.asarray(2**63 - 1)))
case("pybool", lambda: anp.asarray(True), (), Ok(lambda: np.asarray(True)))
case("pyint-bitwise-float", lambda x: anp.bitwise_and(x, 1), (F,), err(DTypeError, "bitwise_and", "f32[3,4]"))
case("pyfloat-bitwise", lambda x: anp.bitwise_or(x, 1.5), (I64,), err(DTypeError, "bitwise_or", "1.5"))
case("invert-float", lambda x: ~x, (D,), err(DTypeError, "invert", "f64[2,3]"))

# --- numpy layouts: values unchanged
_LAYOUTS = {"strided": strided, "negative-stride": negative_stride, "big-endian": big_endian,
            "big-endian-int": big_endian_int, "read-only": read_only, "unaligned": unaligned, "fortran": fortran,
            "transposed": transposed}
for _name, _make in _LAYOUTS.items():
    case(f"{_name}-double", lambda x: x * 2, (_make(),), Ok(lambda x: x * 2))
    case(f"{_name}-sum", lambda x: anp.sum(x, axis=-1), (_make(),), Ok(lambda x: np.sum(x, axis=-1)))
    case(f"{_name}-index", lambda x: x[::-1][-1], (_make(),), Ok(lambda x: x[::-1][-1]))
    case(f"{_name}-asarray", lambda x: anp.asarray(x) + 0, (_make(),), Ok(lambda x: x + 0))
case("float16-add", lambda x: x + 1, (np.array([1.5, -2], np.float16),), Ok(lambda x: x + 1))
case("zero-d-array", lambda x: x * x, (np.array(3.0),), Ok(lambda x: x * x))
case("size-1-broadcast", lambda x, y: x - y, (ONE, F[:1, :3].copy()), Ok(lambda x, y: x - y))
case("empty-add", lambda x: x + 1, (EMPTY,), Ok(lambda x: x + 1))
case("empty-matmul", lambda x, y: x @ y, (EMPTY, F[:, :2].copy()), Ok(lambda x, y: x @ y))
case("empty-mean", lambda x: anp.mean(x, axis=1), (EMPTY,), Ok(lambda x: np.mean(x, axis=1)))
case("bool-sum", lambda x: anp.sum(x), (B,), Ok(lambda x: np.sum(x)))

# --- shape mismatches
case("add-mismatch", lambda x, y: x + y, (F, D), err(ShapeError, "add", "f32[3,4]", "f64[2,3]"))
case("where-mismatch", lambda c, x: anp.where(c, x, 0.0), (B, F), err(ShapeError, "where", "f32[3,4]"))
case("matmul-mismatch", lambda x, y: x @ y, (F, D), err(ShapeError, "matmul", "f32[3,4]", "f64[2,3]"))
case("matmul-scalar", lambda x: anp.matmul(x, 2.0), (F,), err(ShapeError, "matmul", "1-D"))
case("matmul-batch", lambda x, y: x @ y, (np.ones((2, 3, 4)), np.ones((3, 4, 2))),
     err(ShapeError, "matmul", "f64[2,3,4]"))
case("dot-mismatch", lambda x, y: anp.dot(x, y), (I64, F), err(ShapeError, "matmul", "s64[6]"))
case("compare-mismatch", lambda x, y: x < y, (F, I64), err(ShapeError, "less", "f32[3,4]", "s64[6]"))
case("maximum-mismatch", lambda x, y: anp.maximum(x, y), (F, D), err(ShapeError, "maximum", "f32[3,4]"))
case("logaddexp-mismatch", lambda x, y: anp.logaddexp(x, y), (F, D), err(ShapeError, "logaddexp", "f32[3,4]"))
case("dense-mismatch", lambda x, w: nn.dense(x, w), (F, D), err(ShapeError, "matmul", "f32[3,4]"))
case("layer_norm-axis", lambda x: nn.layer_norm(x, axis=2), (F,), err(ShapeError, "layer_norm", "axis 2"))
case("softmax-axis", lambda x: nn.softmax(x, axis=3), (F,), err(ShapeError, "max", "axis 3"))
case("logsumexp-axis-float", lambda x: nn.logsumexp(x, axis=0.5), (F,), err(ArgumentError, "max", "0.5"))

# --- nn sizes
case("conv2d-stride-0", lambda x, w: nn.conv2d(x, w, stride=0), (IMG, KER[:, :2]), err(ArgumentError, "conv2d",
                                                                                          "stride"))
case("conv2d-stride-negative", lambda x, w: nn.conv2d(x, w, stride=(1, -1)), (IMG, KER),
     err(ArgumentError, "conv2d", "-1"))
case("conv2d-stride-float", lambda x, w: nn.conv2d(x, w, stride=1.5), (IMG, KER), err(ArgumentError, "conv2d", "1.5"))
case("conv2d-stride-triple", lambda x, w: nn.conv2d(x, w, stride=(1, 1, 1)), (IMG, KER),
     err(ArgumentError, "conv2d", "2 entries"))
case("conv2d-padding-str", lambda x, w: nn.conv2d(x, w, padding="FOO"), (IMG, KER),
     err(ArgumentError, "conv2d", "'FOO'"))
case("conv2d-padding-negative", lambda x, w: nn.conv2d(x, w, padding=-1), (IMG, KER),
     err(ArgumentError, "conv2d", "-1"))
case("conv2d-padding-float", lambda x, w: nn.conv2d(x, w, padding=0.5), (IMG, KER),
     err(ArgumentError, "conv2d", "0.5"))
case("conv2d-rank", lambda x, w: nn.conv2d(x, w), (F, KER), err(ShapeError, "conv2d", "f32[3,4]"))
case("conv2d-channels", lambda x, w: nn.conv2d(x, w), (IMG, np.ones((3, 3, 2, 2), np.float32)),
     err(ShapeError, "conv2d", "f32[1,2,5,5]", "f32[3,3,2,2]"))
case("conv2d-window-too-big", lambda x, w: nn.conv2d(x, w), (IMG, np.ones((1, 2, 6, 6), np.float32)),
     err(ShapeError, "conv2d", "window"))
case("conv2d-ok", lambda x, w: nn.conv2d(x, w, stride=2, padding="SAME"), (IMG, KER),
     Ok(lambda x, w: _conv_ref(x, w, 2, ((0, 1), (0, 1)))))
case("max_pool-0", lambda x: nn.max_pool(x, 0), (IMG,), err(ArgumentError, "max_pool", "window"))
case("max_pool-stride-0", lambda x: nn.max_pool(x, 2, stride=0), (IMG,), err(ArgumentError, "max_pool", "stride"))
case("max_pool-float", lambda x: nn.max_pool(x, 2.0), (IMG,), err(ArgumentError, "max_pool", "2.0"))
case("max_pool-rank", lambda x: nn.max_pool(x, 2), (F,), err(ShapeError, "max_pool", "f32[3,4]"))
case("max_pool-too-big", lambda x: nn.max_pool(x, 6), (IMG,), err(ShapeError, "max_pool", "window"))
case("max_pool-padding", lambda x: nn.max_pool(x, 2, padding=[1]), (IMG,), err(ArgumentError, "max_pool", "[1]"))
case("avg_pool-0", lambda x: nn.avg_pool(x, (2, 0)), (IMG,), err(ArgumentError, "avg_pool", "window"))
case("avg_pool-stride-negative", lambda x: nn.avg_pool(x, 2, -2), (IMG,), err(ArgumentError, "avg_pool", "-2"))
case("max_pool-ok", lambda x: nn.max_pool(x, (2, 3), stride=1), (IMG,), Ok(lambda x: _pool_ref(x, (2, 3), 1)))
case("one_hot-negative-n", lambda x: nn.one_hot(x, -1), (I64,), err(ArgumentError, "one_hot", "num_classes"))
case("one_hot-float-n", lambda x: nn.one_hot(x, 2.5), (I64,), err(ArgumentError, "one_hot", "2.5"))
case("one_hot-float-labels", lambda x: nn.one_hot(x, 3), (D,), err(DTypeError, "one_hot", "f64[2,3]"))
case("one_hot-ok", lambda x: nn.one_hot(x, 7, np.int32), (I64,), Ok(lambda x: np.eye(7, dtype=np.int32)[x]))
case("cross_entropy-reduction", lambda x, y: nn.cross_entropy(x, y, reduction="avg"), (LOGITS, I64[:4].copy()),
     err(ArgumentError, "cross_entropy", "'avg'"))
case("cross_entropy-label-shape", lambda x, y: nn.cross_entropy(x, y), (LOGITS, I64),
     err(ShapeError, "cross_entropy", "s64[6]", "f32[4,3]"))
case("cross_entropy-axis", lambda x, y: nn.cross_entropy(x, y, axis=2), (LOGITS, I64[:4].copy()),
     err(ShapeError, "cross_entropy", "axis 2"))
case("cross_entropy-onehot-shape", lambda x, y: nn.cross_entropy(x, y), (LOGITS, D),
     err(ShapeError, "cross_entropy", "f64[2,3]"))

# --- einsum, random, Python protocol on arrays
case("einsum-ellipsis", lambda x: anp.einsum("...i->i", x), (F,), err(ArgumentError, "einsum", "ellipsis"))
case("einsum-count", lambda x: anp.einsum("ij,jk->ik", x), (F,), err(ArgumentError, "einsum", "2 operand"))
case("einsum-output", lambda x: anp.einsum("ij->k", x), (F,), err(ArgumentError, "einsum", "'k'"))
case("einsum-rank", lambda x: anp.einsum("ijk->i", x), (F,), err(ShapeError, "einsum", "f32[3,4]"))
case("einsum-diagonal", lambda x: anp.einsum("ii->i", x), (F,), err(ShapeError, "einsum", "diagonals"))
case("einsum-ok", lambda x, y: anp.einsum("ij,kj->ik", x, y), (F, F), Ok(lambda x, y: np.einsum("ij,kj->ik", x, y)))
case("random-bad-key", lambda: axle.random.uniform(np.float32(1.0), (2,)), (), err(DTypeError, "random", "float32"))
case("random-negative-shape", lambda: axle.random.uniform(axle.random.key(0), (-2,)), (),
     err(ShapeError, "random", "negative"))
case("random-float-shape", lambda: axle.random.normal(axle.random.key(0), (2.5,)), (),
     err(ArgumentError, "random", "2.5"))
case("random-int-dtype", lambda: axle.random.uniform(axle.random.key(0), (2,), np.int32), (),
     err(DTypeError, "random.uniform", "int32"))
case("random-uint8-dtype", lambda: axle.random.bits(axle.random.key(0), (2,), np.uint8), (),
     err(DTypeError, "random", "uint8"))
case("randint-empty", lambda: axle.random.randint(axle.random.key(0), (2,), 3, 3), (),
     err(ArgumentError, "random.randint", "[3, 3)"))
case("randint-float", lambda: axle.random.randint(axle.random.key(0), (2,), 0, 2.5), (),
     err(ArgumentError, "random.randint", "2.5"))
case("random-split-negative", lambda: axle.random.split(axle.random.key(0), -1), (),
     err(ArgumentError, "random.split", "-1"))
case("len-0d", lambda x: len(x), (np.array(2.0),), err(ArgumentError, "len()", "0-d"))
case("iter-0d", lambda x: list(x), (np.array(2.0),), err(ArgumentError, "iteration", "0-d"))
case("static-unhashable", lambda x: axle.jit(lambda a, s: a, static_argnums=1)(x, [1]), (F,),
     err(ArgumentError, "jit(lambda)", "hashable"), jit_expect=Ok(lambda x: x))  # inlined into the outer trace

# --- found by fuzzing the arguments above with odd values (None, 2**63, nan, 'a', 1j...)
case("transpose-int-axes", lambda x: anp.transpose(x, 1), (F,), err(ShapeError, "transpose", "not a permutation"))
case("argmax-axis-tuple", lambda x: anp.argmax(x, axis=()), (F,), err(ArgumentError, "argmax", "()"))
case("cumsum-axis-list", lambda x: anp.cumsum(x, axis=[0]), (F,), err(ArgumentError, "cumsum", "[0]"))
case("stack-axis-str", lambda x: anp.stack([x, x], axis="a"), (F,), err(ArgumentError, "stack", "'a'"))
case("eye-k-huge", lambda: anp.eye(3, k=2**63), (), err(ArgumentError, "eye", "9223372036854775808"))
case("arange-step-huge", lambda: anp.arange(0, 4, 2**63), (), err(ArgumentError, "arange", "int64"))
case("tile-none", lambda x: anp.tile(x, None), (F,), err(ArgumentError, "tile", "None"))
case("split-none", lambda x: anp.split(x, None), (F,), err(ArgumentError, "split", "None"))
case("array_split-huge", lambda x: anp.array_split(x, 2**31), (F,), err(ArgumentError, "array_split", "2147483648"))
case("conv2d-stride-none", lambda x, w: nn.conv2d(x, w, stride=None), (IMG, KER), err(ArgumentError, "conv2d", "None"))
case("max_pool-complex", lambda x: nn.max_pool(x, 1j), (IMG,), err(ArgumentError, "max_pool", "1j"))
case("pad-huge", lambda x: anp.pad(x, 2**40), (F,), err(ShapeError, "pad", "too large"))
case("pad-beyond-int64", lambda x: anp.pad(x, 2**63), (F,), err(ShapeError, "pad", "does not fit"))
case("pad-str-value", lambda x: anp.pad(x, 1, constant_values="a"), (F,), err(DTypeError, "pad", "<U1"))
case("one_hot-huge", lambda x: nn.one_hot(x, 2**62), (I64,), err(ShapeError, "one_hot", "too large"))
case("einsum-int-subscripts", lambda x: anp.einsum(3, x), (F,), err(ArgumentError, "einsum", "3"))
case("tensordot-float-axes", lambda x: anp.tensordot(x, x, 1.5), (F,), err(ArgumentError, "tensordot", "1.5"))
case("tensordot-axes-out", lambda x: anp.tensordot(x, x, ([0], [5])), (F,), err(ShapeError, "tensordot", "axis 5"))
case("tensordot-ok", lambda x, y: anp.tensordot(x, y, ([1], [1])), (F, F), Ok(lambda x, y: np.tensordot(x, y, ([1], [1]))))
case("var-ddof-str", lambda x: anp.var(x, ddof="a"), (F,), err(ArgumentError, "var", "ddof"))
case("cross_entropy-reduction-list", lambda x: nn.cross_entropy(x, np.array([0, 1, 2, 0]), reduction=[1]), (LOGITS,),
     err(ArgumentError, "cross_entropy", "[1]"))
case("random-key-nan", lambda: axle.random.key(float("nan")), (), err(ArgumentError, "random.key", "nan"))
case("random-key-str", lambda: axle.random.key("a"), (), err(ArgumentError, "random.key", "'a'"))
case("randint-huge", lambda: axle.random.randint(axle.random.key(0), (2,), 0, 2**63), (),
     err(ArgumentError, "random.randint", "9223372036854775808"))
case("take-none", lambda x: anp.take(x, None), (F,), err(ShapeError, "take", "object"))
case("at-add-str", lambda x: x.at[0].add("a"), (F,), err(DTypeError, "", "<U1"))

# --- indices (concrete: checked at once, as NumPy does)
case("getitem-out", lambda x: x[5], (F,), err(ShapeError, "getitem", "index 5", "f32[3,4]"))
case("getitem-negative-out", lambda x: x[-4], (F,), err(ShapeError, "getitem", "-4"))
case("getitem-too-many", lambda x: x[0, 0, 0], (F,), err(ShapeError, "getitem", "too many"))
case("getitem-two-ellipsis", lambda x: x[..., ...], (F,), err(ShapeError, "getitem", "ellipsis"))
case("getitem-float", lambda x: x[1.5], (F,), err(ShapeError, "getitem", "1.5"))
case("getitem-str", lambda x: x["a"], (F,), err(ShapeError, "getitem", "a"))
case("getitem-array-out", lambda x: x[np.array([0, 7])], (F,), err(ShapeError, "getitem", "f32[3,4]"))
case("getitem-list-out", lambda x: x[[0, -5]], (F,), err(ShapeError, "getitem", "f32[3,4]"))
case("getitem-mask-length", lambda x: x[np.array([True, False])], (F,), err(ShapeError, "getitem", "f32[3,4]"))
case("getitem-float-array", lambda x: x[np.array([0.5])], (F,), err(ShapeError, "getitem", "f32[3,4]"))
case("getitem-0d", lambda x: x[0], (np.array(1.0),), err(ShapeError, "getitem", "too many"))
case("getitem-empty-axis", lambda x: x[0], (EMPTY,), err(ShapeError, "getitem", "size 0"))
case("take-out", lambda x: anp.take(x, np.array([12])), (F,), err(ShapeError, "take", "12"))
case("take-negative-out", lambda x: anp.take(x, [-5], axis=1), (F,), err(ShapeError, "take", "-5"))
case("take-float-idx", lambda x: anp.take(x, np.array([1.0])), (F,), err(ShapeError, "take", "float64"))
case("take-axis", lambda x: anp.take(x, [0], axis=2), (F,), err(ShapeError, "take", "axis 2"))
case("take-mode", lambda x: anp.take(x, [0], mode="wrap"), (F,), err(ArgumentError, "take", "'wrap'"))
case("take_along-out", lambda x: anp.take_along_axis(x, np.array([[4]] * 3), 1), (F,),
     err(ShapeError, "take_along_axis", "4"))
case("take_along-rank", lambda x: anp.take_along_axis(x, np.array([1]), 1), (F,),
     err(ShapeError, "take_along_axis", "rank"))
case("take_along-float", lambda x: anp.take_along_axis(x, np.ones((3, 1)), 1), (F,),
     err(ShapeError, "take_along_axis", "float64"))
case("take_along-axis", lambda x: anp.take_along_axis(x, np.zeros((3, 1), np.int64), 2), (F,),
     err(ShapeError, "take_along_axis", "axis 2"))
case("at-set-out", lambda x: x.at[5].set(0.0), (F,), err(ShapeError, "getitem", "index 5"))
case("at-add-array-out", lambda x: x.at[np.array([9])].add(1.0), (F,), err(ShapeError, "at[].add", "f32[3,4]"))
case("at-set-float", lambda x: x.at[np.array([0.5])].set(1.0), (F,), err(ShapeError, "at[].set", "f32[3,4]"))
case("cross_entropy-label-out", lambda x: nn.cross_entropy(x, np.array([0, 1, 3, 2])), (LOGITS,),
     err(OutOfBoundsError, "cross_entropy", "[0, 3)"))
case("cross_entropy-label-negative", lambda x: nn.cross_entropy(x, np.array([0, -1, 2, 2])), (LOGITS,),
     err(OutOfBoundsError, "cross_entropy", "[0, 3)"))
case("getitem-negative-ok", lambda x: x[-1, -4], (F,), Ok(lambda x: x[-1, -4]))
case("getitem-reverse-ok", lambda x: x[::-2, 1::3], (F,), Ok(lambda x: x[::-2, 1::3]))
case("getitem-slice-beyond-ok", lambda x: x[1:100, -100:2], (F,), Ok(lambda x: x[1:100, -100:2]))
case("getitem-empty-slice-ok", lambda x: x[2:1], (F,), Ok(lambda x: x[2:1]))
case("getitem-newaxis-ok", lambda x: x[None, ..., None, 0], (F,), Ok(lambda x: x[None, ..., None, 0]))
case("getitem-array-ok", lambda x: x[np.array([-1, 0, -1])], (F,), Ok(lambda x: x[np.array([-1, 0, -1])]))
case("getitem-mask-ok", lambda x: x[np.array([True, False, True])], (F,), Ok(lambda x: x[np.array([True, False, True])]))
case("getitem-computed-mask", lambda x: x[x > 0], (F,), Ok(lambda x: x[x > 0]),
     jit_expect=err(ShapeError, "getitem", "boolean mask", "pred[3,4]"))
case("take-negative-ok", lambda x: anp.take(x, [-1, 0], axis=1), (F,), Ok(lambda x: np.take(x, [-1, 0], axis=1)))
case("take_along-ok", lambda x: anp.take_along_axis(x, np.array([[3], [-1], [0]]), 1), (F,),
     Ok(lambda x: np.take_along_axis(x, np.array([[3], [3], [0]]), 1)))
case("at-set-negative-ok", lambda x: x.at[-1].set(7.0), (F,), Ok(lambda x: _set(x, -1, 7.0)))
case("at-add-dup-ok", lambda x: x.at[np.array([0, 0, -1])].add(1.0), (I64.astype(np.float64),),
     Ok(lambda x: _add_at(x, [0, 0, -1], 1.0)))


def _set(x: np.ndarray, idx: Any, v: Any) -> np.ndarray:
    y = x.copy()
    y[idx] = v
    return y


def _add_at(x: np.ndarray, idx: Any, v: Any) -> np.ndarray:
    y = x.copy()
    np.add.at(y, idx, v)
    return y


def _windows(x: np.ndarray, kh: int, kw: int, s: int) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = (h - kh) // s + 1, (w - kw) // s + 1
    out = np.empty((n, c, oh, ow, kh, kw), x.dtype)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = x[:, :, i * s:i * s + kh, j * s:j * s + kw]
    return out


def _conv_ref(x: np.ndarray, w: np.ndarray, s: int, pad: Any) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pad))
    win = _windows(xp, w.shape[2], w.shape[3], s)
    return np.einsum("ncijkl,ockl->noij", win, w).astype(np.float32)


def _pool_ref(x: np.ndarray, window: tuple[int, int], s: int) -> np.ndarray:
    return _windows(x, *window, s).max(axis=(-1, -2))


# ------------------------------------------------------------------------------ running

def _host(out: Any) -> Any:
    if isinstance(out, (list, tuple)):
        return [_host(o) for o in out]
    return np.asarray(out)


def _placed(a: Any) -> Any:
    """Eager rows get axle arrays (so operators are axle's, not NumPy's), except data axle
    refuses, which goes to the row's function as it is (the function must refuse it)."""
    if isinstance(a, np.ndarray) and supported_numpy_dtype(a.dtype) is not None:
        return axle.device_put(a)
    return a


def _run(c: Case, mode: str) -> Any:
    if mode == "eager":
        return _host(c.call(*[_placed(a) for a in c.args]))
    return _host(axle.jit(c.call)(*c.args))


def _check_error(c: Case, e: AxleError, mode: str) -> None:
    exp = c.expected(mode)
    assert isinstance(exp, Err)
    assert isinstance(e, exp.cls), f"{c.name}: expected {exp.cls.__name__}, got {type(e).__name__}: {e}"
    fn = exp.jit_fn if mode == "jit" and exp.jit_fn else exp.fn
    msg = e.message
    if fn:
        assert msg.startswith(fn + ":") or f" {fn}:" in msg or f"{fn}: " in msg, f"{c.name}: {fn!r} not named in {msg!r}"
    for w in exp.words:
        assert w in msg, f"{c.name}: {w!r} not in {msg!r}"
    assert e.where is not None and e.where.startswith(HERE), f"{c.name}: where={e.where!r} is not this file ({msg})"


def _check_value(c: Case, got: Any, mode: str) -> None:
    exp = c.expected(mode)
    assert isinstance(exp, Ok)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = exp.ref(*c.args)
    wants = want if isinstance(want, list) else [want]
    gots = got if isinstance(got, list) else [got]
    assert len(wants) == len(gots), c.name
    for g, w in zip(gots, wants):
        w = np.asarray(w)
        assert g.shape == w.shape, f"{c.name}: shape {g.shape} != NumPy's {w.shape}"
        assert g.dtype == w.dtype.newbyteorder("="), f"{c.name}: dtype {g.dtype} != NumPy's {w.dtype}"
        tol = {np.dtype(np.float16): 1e-3, np.dtype(np.float32): 2e-6}.get(g.dtype, 1e-12)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=c.name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=c.name)


@pytest.fixture(params=BACKENDS, scope="module")
def device(request):
    return require_backend(request.param)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_bad_input(c: Case, mode: str, device) -> None:
    with device, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's overflow warnings, the host fallback of the petabyte rows
        if isinstance(c.expected(mode), Err):
            with pytest.raises(AxleError) as e:
                _run(c, mode)
            _check_error(c, e.value, mode)
        else:
            try:
                got = _run(c, mode)
            except AxleError as e:
                pytest.fail(f"{c.name}: expected NumPy's answer, got {type(e).__name__}: {e}")
            _check_value(c, got, mode)


def test_table_is_large_and_names_unique() -> None:
    assert len(CASES) >= 250, len(CASES)
    assert len({c.name for c in CASES}) == len(CASES)
    assert {type(c.expect) for c in CASES} == {Ok, Err}
