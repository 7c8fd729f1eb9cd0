"""The op table: every primitive defined once, with its rules beside it.

Each entry (an :class:`OpDef`) gives the arity, the attribute schema, the shape and dtype
rules, the traits that passes ask about, and the NumPy reference implementation, which is
the specification every backend is tested against. Passes ask traits; they never compare
op names.
"""
from __future__ import annotations

import enum
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import AxleError, CustomCallError, DTypeError, OpAttributeError, ShapeError
from . import bitwise, collectives, decompositions
from .computation import Computation
from .conv import (
    CONV_DIM_ATTRS,
    CONV_WINDOW_ATTRS,
    REDUCE_WINDOW_ATTRS,
    WINDOW_KINDS,
    conv_dtype,
    conv_shape,
    convolution,
    decompose_convolution,
    decompose_reduce_window,
    reduce_window,
    reduce_window_dtype,
    reduce_window_shape,
)
from .decompositions import Decomposition
from .dotdims import DotDims
from .dtypes import ALL_DTYPES, FLOATS, INTEGRAL, NUMERIC, DType, is_float_numpy
from .dtypes import dtype as to_dtype
from .indexing import (
    SCATTER_KINDS,
    dynamic_slice,
    dynamic_slice_shape,
    dynamic_update_slice,
    dynamic_update_slice_shape,
    gather,
    gather_shape,
    scatter,
    scatter_shape,
)
from .literal import Literal
from .opcodes import Op
from .reductions import REDUCE_KINDS, maximum, minimum
from .types import Shape, TensorType, TupleType, Type


class AttrKind(enum.Enum):
    INT = "int"
    INTS = "ints"  # tuple of ints, printed {1,2}
    DTYPE = "dtype"
    SHAPE = "shape"
    STR = "str"
    ENUM = "enum"
    LITERAL = "literal"
    COMPUTATION = "computation"
    COMPUTATIONS = "computations"  # a non-empty tuple of computations, printed {%a, %b}


_REQUIRED = object()


def as_int(v: object) -> int:
    """An integral attribute entry: a Python or NumPy integer, never a bool, float or
    string (``int(v)`` would turn axes=(1.7,) into axis 1 and "3" into 3 silently).
    Raises TypeError naming the entry."""
    if not isinstance(v, (bool, np.bool_)):
        try:
            return operator.index(v)  # type: ignore[arg-type]  # any value: a TypeError is reported below
        except TypeError:
            pass
    raise TypeError(f"{v!r} is a {type(v).__name__}, not an integer")


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: AttrKind
    default: Any = _REQUIRED
    choices: tuple[str, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def coerce(self, op: Op, value: object) -> object:
        """Canonical, hashable form of an attribute value (tuples, DType...)."""
        k = self.kind
        why = ""
        if value is None and self.default is None:  # an optional attribute left unset
            return None
        try:
            if k is AttrKind.INT:
                return as_int(value)
            if k in (AttrKind.INTS, AttrKind.SHAPE):
                if type(value) is tuple and all(type(v) is int for v in value):
                    vals = value  # already canonical (what as_int gives back for each): most traced attributes
                else:
                    vals = tuple(as_int(v) for v in value)  # type: ignore[attr-defined]  # not iterable: reported below
                if k is AttrKind.SHAPE and any(v < 0 for v in vals):
                    raise ValueError
                return vals
            if k is AttrKind.DTYPE:
                return to_dtype(value)
            if k is AttrKind.STR:
                if not isinstance(value, str):
                    raise TypeError
                return value
            if k is AttrKind.ENUM:
                v = str(value).lower()
                if v not in self.choices:
                    raise ValueError
                return v
            if k is AttrKind.LITERAL:
                return value if isinstance(value, Literal) else Literal(value)
            if k is AttrKind.COMPUTATION:
                if not isinstance(value, Computation):
                    raise TypeError
                return value
            if k is AttrKind.COMPUTATIONS:
                comps: tuple[object, ...] = tuple(value)  # type: ignore[arg-type]  # not iterable: reported below
                if not comps or not all(isinstance(c, Computation) for c in comps):
                    raise TypeError("expected a non-empty sequence of computations")
                return comps
        except (TypeError, ValueError, OverflowError) as e:
            why = f" ({e})" if str(e) else ""
        expect = f"one of {', '.join(self.choices)}" if self.choices else k.value
        raise OpAttributeError(f"{op.value}: attribute {self.name}={value!r} is not a valid {expect}{why}")


@dataclass(frozen=True)
class Traits:
    elementwise: bool = False
    commutative: bool = False
    reduction: bool = False
    movement: bool = False  # pure data movement: reshape, transpose, slice...
    cheap: bool = False  # cheap enough to recompute in several fusions
    side_effect: bool = False  # never merged by CSE, never constant-folded
    structural: bool = False  # parameter, tuple plumbing: not computation
    transcendental: bool = False
    fusible: bool = True  # may sit inside a fusion
    #: contracts operands over shared dimensions (dot_general): each output element reads
    #: whole rows/columns of its operands, so its producers are not inlined into it
    contraction: bool = False
    #: an indexed load (gather, dynamic-slice): each output element reads one operand
    #: element at a position computed from index values it loads, so it fuses into loop
    #: fusions as a producer like a movement op (axle.lowering.index has the maps)
    indexed: bool = False
    #: writes windows of its first operand (scatter, dynamic-update-slice): a kernel of its
    #: own, run in place over that operand when it dies there (passes/buffers.py)
    updates_operand: bool = False
    #: an extended primitive: a device runs it only when it lists it in its capabilities;
    #: one that does not gets the op's ``decomposition`` (or the host fallback without one)
    extended: bool = False
    #: runs sub-computations (while, conditional): passes recurse into them, the partitioner
    #: places the node whole, and its reference takes a ``call`` that evaluates one
    control: bool = False
    #: exchanges values between the replicas of an SPMD run (ir/collectives.py): never
    #: constant-folded, merged or hoisted (side_effect), and its reference reads the replica
    collective: bool = False


ShapeRule = Callable[["Op", Sequence[TensorType], dict[str, Any]], Shape]
DTypeRule = Callable[["Op", Sequence[TensorType], dict[str, Any]], DType]
Reference = Callable[..., Any]


@dataclass(frozen=True)
class OpDef:
    op: Op
    arity: int | None  # None: variadic (min_arity or more)
    attrs: tuple[AttrSpec, ...]
    shape_rule: ShapeRule | None
    dtype_rule: DTypeRule | None
    reference: Reference
    traits: Traits = field(default_factory=Traits)
    operand_dtypes: frozenset[DType] = frozenset(ALL_DTYPES)
    min_arity: int = 0
    doc: str = ""
    #: extended primitives: the same computation in core primitives (ir/decompositions.py)
    decomposition: Decomposition | None = None

    def attr_spec(self, name: str) -> AttrSpec:
        for a in self.attrs:
            if a.name == name:
                return a
        raise KeyError(name)


# ----------------------------------------------------------------------------- helpers


def _types_str(types: Sequence[Type]) -> str:
    return ", ".join(str(t) for t in types)


def _shape_error(op: Op, types: Sequence[Type], why: str) -> ShapeError:
    return ShapeError(f"{op.value}: {why} (operands: {_types_str(types)})")


def _same_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    shapes = {t.shape for t in ts}
    if len(shapes) != 1:
        raise _shape_error(op, ts, "operands must have the same shape; broadcast them first")
    return ts[0].shape


def _same_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    dts = {t.dtype for t in ts}
    if len(dts) != 1:
        raise DTypeError(f"{op.value}: operands must have the same dtype (operands: {_types_str(ts)})")
    return ts[0].dtype


def _first_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    return ts[0].shape


def _bool_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    _same_dtype(op, ts, attrs)
    return DType.BOOL


def _attr_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    return attrs["dtype"]


def _attr_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    return attrs["shape"]


def _check_axes(op: Op, ts: Sequence[TensorType], axes: Sequence[int], rank: int, what: str) -> None:
    if any(a < 0 or a >= rank for a in axes) or len(set(axes)) != len(axes):
        raise _shape_error(op, ts, f"{what} {tuple(axes)} must be distinct and in [0, {rank})")


def _quiet(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def run(*args: Any, **kw: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(*args, **kw)

    run.__name__ = getattr(fn, "__name__", "reference")
    run.__wrapped__ = fn  # type: ignore[attr-defined] # inspect.unwrap: explain-op shows fn's source
    return run


# ------------------------------------------------------------------ reference semantics


_BF16 = DType.BFLOAT16.np


def _float_unary(f: Callable[[np.ndarray], np.ndarray]) -> Reference:
    # float16 and bfloat16 are computed in float32 and rounded once, like the backends do.
    def ref(x: np.ndarray) -> np.ndarray:
        if x.dtype in (np.float16, _BF16):
            return f(x.astype(np.float32)).astype(x.dtype)
        return f(x).astype(x.dtype, copy=False)

    return _quiet(ref)


def _bf16_in_f32(f: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``f`` with bfloat16 operands computed in float32 and a float result rounded once to
    bfloat16 (to nearest even), as every backend computes it; other dtypes pass through.
    (ml_dtypes' own bfloat16 loops exist for some ufuncs only.)"""
    def run(*xs: np.ndarray, **kw: Any) -> np.ndarray:
        if not any(np.asarray(x).dtype == _BF16 for x in xs):
            return f(*xs, **kw)
        out = np.asarray(f(*(np.asarray(x).astype(np.float32) if np.asarray(x).dtype == _BF16 else x
                             for x in xs), **kw))
        return out.astype(_BF16) if out.dtype == np.float32 else out

    run.__name__ = getattr(f, "__name__", "reference")
    run.__wrapped__ = f  # type: ignore[attr-defined] # inspect.unwrap: explain-op shows f's source
    return run


def _float_binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Reference:
    # float16 and bfloat16 are computed in float32 and rounded once, as _float_unary.
    def ref(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if x.dtype in (np.float16, _BF16):
            return f(x.astype(np.float32), y.astype(np.float32)).astype(x.dtype)
        return f(x, y).astype(x.dtype, copy=False)

    return _quiet(ref)


def _int_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # XLA semantics: truncating; x/0 = -1 (all ones: the unsigned maximum); INT_MIN/-1 = INT_MIN.
    # Never traps.
    info = np.iinfo(x.dtype)
    if x.dtype.kind == "u":
        return np.where(y == 0, np.array(info.max, x.dtype), np.floor_divide(x, np.where(y == 0, 1, y)))
    zero = y == 0
    overflow = (x == info.min) & (y == -1)
    safe_y = np.where(zero | overflow, 1, y)
    # float64 holds every quotient of 32-bit and narrower integers exactly
    q = np.trunc(np.true_divide(x, safe_y)).astype(x.dtype) if x.itemsize <= 4 else _trunc_div64(x, safe_y)
    q = np.where(zero, np.array(-1, x.dtype), q)
    return np.where(overflow, np.array(info.min, x.dtype), q).astype(x.dtype)


def _trunc_div64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    q = np.floor_divide(x, y)
    fix = (np.remainder(x, y) != 0) & ((x < 0) != (y < 0))
    return (q + fix).astype(x.dtype)


def _int_rem(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # Sign of the dividend (C/XLA); x % 0 = x; INT_MIN % -1 = 0.
    zero = y == 0
    if x.dtype.kind == "u":
        return np.where(zero, x, np.fmod(x, np.where(zero, 1, y))).astype(x.dtype)
    safe_y = np.where(zero | (y == -1), 1, y)
    r = np.fmod(x, safe_y)
    r = np.where(y == -1, np.array(0, x.dtype), r)
    return np.where(zero, x, r).astype(x.dtype)


def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        return _int_div(x, y)
    return np.true_divide(x, y).astype(x.dtype, copy=False)


def _rem(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        return _int_rem(x, y)
    return np.fmod(x, y).astype(x.dtype, copy=False)


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "iu":
        return np.power(x, y).astype(x.dtype, copy=False)
    # Integer power by squaring; negative exponents give 0 except for bases 1 and -1.
    x, y = np.broadcast_arrays(x, y)
    result = np.ones_like(x)
    base = x.copy()
    e = np.where(y < 0, 0, y)
    while np.any(e > 0):
        odd = (e & 1) == 1
        result = np.where(odd, result * base, result)
        base = base * base
        e = e >> 1
    if x.dtype.kind == "u":
        return result.astype(x.dtype)
    neg = y < 0
    neg_val = np.where(x == 1, 1, np.where(x == -1, np.where((y & 1) == 1, -1, 1), 0)).astype(x.dtype)
    return np.where(neg, neg_val, result).astype(x.dtype)


def _sign(x: np.ndarray) -> np.ndarray:
    return np.sign(x).astype(x.dtype, copy=False)


def _logical_not(x: np.ndarray) -> np.ndarray:
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


_COMPARE = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _compare(x: np.ndarray, y: np.ndarray, *, direction: str) -> np.ndarray:
    return _COMPARE[direction](x, y)


def convert_array(x: np.ndarray, dt: DType) -> np.ndarray:
    """Element conversion: float to int saturates and maps NaN to 0 (like LLVM's
    fptosi.sat and OpenCL's convert_<int>_sat); anything to bool is ``!= 0``."""
    target = dt.np
    if dt is DType.BOOL:
        return x != 0
    if dt is DType.BFLOAT16 and x.dtype != np.float32:
        # through float32, as the backends compute it: each step rounds to nearest even
        # (so float64 and wide integers round twice; float16 and bfloat16 are exact in float32)
        return convert_array(x, DType.FLOAT32).astype(target)
    if is_float_numpy(x.dtype) and target.kind in "iu":
        info = np.iinfo(target)
        t = np.trunc(x.astype(np.float64))
        out = np.where(np.isnan(t), 0, np.clip(t, info.min, info.max))
        # float64 cannot hold INT64_MAX exactly: saturate explicitly.
        res = out.astype(target)
        res = np.where(t >= float(info.max), info.max, res)
        return np.where(t <= float(info.min), info.min, res).astype(target)
    return x.astype(target)


def _signed_zero_fixup(x: np.ndarray, out: np.ndarray, *, kind: str, axes: tuple[int, ...]) -> np.ndarray:
    """A max/min reduction whose result is a zero: +0.0 (max) if any reduced element is
    +0.0, else -0.0; -0.0 (min) if any is -0.0, else +0.0 (NumPy's ufunc.reduce keeps
    whichever zero it met first or last, depending on the dtype)."""
    zero = out == 0
    if not np.any(zero):
        return out
    want_neg = kind == "min"  # the zero that wins a tie
    found = np.logical_or.reduce((x == 0) & (np.signbit(x) == want_neg), axis=axes)
    winner, other = (-0.0, 0.0) if want_neg else (0.0, -0.0)
    return np.where(zero, np.where(found, winner, other).astype(out.dtype), out)


def _reduce(x: np.ndarray, *, kind: str, axes: tuple[int, ...]) -> np.ndarray:
    rk = REDUCE_KINDS[kind]
    ident = rk.identity(to_dtype(x.dtype))
    # bfloat16 max/min also run in float32 (exact: NumPy has no bfloat16 reduce loops of its own)
    widen = rk.accumulator(to_dtype(x.dtype)) is not to_dtype(x.dtype) or x.dtype == _BF16
    work = x.astype(np.float32) if widen else x
    out = np.asarray(rk.ufunc.reduce(work, axis=tuple(axes), initial=ident if work is x else float(ident)))
    if kind in ("max", "min") and is_float_numpy(x.dtype):
        out = _signed_zero_fixup(x, out, kind=kind, axes=tuple(axes))
    return out.astype(x.dtype)


def _dot_general(lhs: np.ndarray, rhs: np.ndarray, *, lhs_batch: tuple[int, ...], rhs_batch: tuple[int, ...],
                 lhs_contracting: tuple[int, ...], rhs_contracting: tuple[int, ...],
                 preferred_element_type: DType | None = None) -> np.ndarray:
    if preferred_element_type is not None:
        # widen the operands exactly, then multiply and accumulate in the preferred type
        # (int8 x int8 -> int32 sums products in int32, wrapping there; bf16 -> f32 in f32)
        lhs, rhs = (convert_array(x, preferred_element_type) for x in (lhs, rhs))
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    lsub = [""] * lhs.ndim
    rsub = [""] * rhs.ndim
    batch = []
    for lb, rb in zip(lhs_batch, rhs_batch):
        c = next(letters)
        lsub[lb] = rsub[rb] = c
        batch.append(c)
    for lc, rc in zip(lhs_contracting, rhs_contracting):
        c = next(letters)
        lsub[lc] = rsub[rc] = c
    lfree = []
    for i in range(lhs.ndim):
        if not lsub[i]:
            lsub[i] = next(letters)
            lfree.append(lsub[i])
    rfree = []
    for i in range(rhs.ndim):
        if not rsub[i]:
            rsub[i] = next(letters)
            rfree.append(rsub[i])
    spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join(batch + lfree + rfree)}"
    work_dt = np.float32 if lhs.dtype in (np.float16, _BF16) else lhs.dtype
    out = np.asarray(np.einsum(spec, lhs.astype(work_dt, copy=False), rhs.astype(work_dt, copy=False), optimize=True))
    if out.dtype.kind == "f":
        # A dot accumulates from +0 (like a sum reduction), so a sum of only -0 products is
        # +0; einsum's BLAS path can return -0 there, which then flips 1/x or rsqrt to -inf.
        out = out + out.dtype.type(0)
    return out.astype(lhs.dtype)


def _broadcast_in_dim(x: np.ndarray, *, shape: Shape, broadcast_dimensions: tuple[int, ...]) -> np.ndarray:
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape).copy()


def _pad(x: np.ndarray, pv: np.ndarray, *, low: tuple[int, ...], high: tuple[int, ...],
         interior: tuple[int, ...]) -> np.ndarray:
    out_shape = _pad_shape(x.shape, low, high, interior)
    out = np.full(out_shape, pv, dtype=x.dtype)
    if x.size:
        idx = tuple(slice(lo, lo + (n - 1) * (it + 1) + 1, it + 1) for lo, n, it in zip(low, x.shape, interior))
        out[idx] = x
    return out


def _pad_shape(shape: Shape, low: Sequence[int], high: Sequence[int], interior: Sequence[int]) -> Shape:
    return tuple(lo + hi + n + max(n - 1, 0) * it for n, lo, hi, it in zip(shape, low, high, interior))


def _iota(*, shape: Shape, dtype: DType, dimension: int) -> np.ndarray:
    ar = convert_array(np.arange(shape[dimension], dtype=np.int64), dtype)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.broadcast_to(ar.reshape(view), shape).copy()


_M64 = (1 << 64) - 1


def rng_bits(key: int, shape: Shape, dt: DType) -> np.ndarray:
    """Counter-based bits (splitmix64 of key + (i+1)*golden ratio): element i of the
    row-major output depends only on the key and i, so every backend can compute it
    in parallel and produce exactly these bits."""
    n = math.prod(shape)
    i = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key & _M64) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    if dt is DType.INT32:
        return (z >> np.uint64(32)).astype(np.uint32).view(np.int32).reshape(shape)
    return z.view(np.int64).reshape(shape)


def _rng(key: np.ndarray, *, shape: Shape, dtype: DType) -> np.ndarray:
    return rng_bits(int(np.asarray(key).astype(np.int64)) & _M64, shape, dtype)


# custom_call targets: name -> (reference implementation). Backends may claim them.
CUSTOM_CALL_TARGETS: dict[str, Callable[..., np.ndarray]] = {}


def register_custom_call(name: str, reference: Callable[..., np.ndarray]) -> None:
    """Registers the NumPy reference of a custom_call target ``name``."""
    CUSTOM_CALL_TARGETS[name] = reference


def _custom_call(*xs: np.ndarray, target: str, shape: Shape, dtype: DType, config: str) -> np.ndarray:
    if target not in CUSTOM_CALL_TARGETS:
        raise OpAttributeError(f"custom-call: no reference registered for target {target!r}")
    operands = ", ".join(f"{to_dtype(x.dtype).value}{list(x.shape)}" for x in xs)
    try:
        out = np.asarray(CUSTOM_CALL_TARGETS[target](*xs, config=config))
    except AxleError:
        raise
    except Exception as e:  # the target is user code: its failure names the call it came from
        raise CustomCallError(f"custom-call: target {target!r} failed on operands ({operands}): "
                              f"{type(e).__name__}: {e}") from e
    if out.shape != tuple(shape):
        # A target's result is only known when it runs: check it here, never reshape it.
        raise ShapeError(f"custom-call: target {target!r} returned shape {list(out.shape)} for operands "
                         f"({operands}); the node declares {TensorType(dtype, tuple(shape))}")
    return out.astype(dtype.np, copy=False)


# control flow: ``call(computation, args)`` evaluates a sub-computation (the interpreter's)

Call = Callable[[Computation, Sequence[Any]], Any]


def _as_values(out: Any) -> tuple[Any, ...]:
    return out if isinstance(out, tuple) else (out,)


def _while_ref(*carry: np.ndarray, condition: Computation, body: Computation, call: Call) -> tuple[Any, ...]:
    state = tuple(carry)
    while bool(call(condition, state)):
        state = _as_values(call(body, state))
    return state


def branch_index(index: np.ndarray, n: int) -> int:
    """The branch a conditional runs: a pred picks 0 (false) or 1 (true); an s32 out of
    [0, n) picks the last branch (StableHLO's case)."""
    i = int(np.asarray(index))
    return i if 0 <= i < n else n - 1


def _conditional_ref(index: np.ndarray, *operands: np.ndarray, branches: tuple[Computation, ...],
                     call: Call) -> Any:
    return call(branches[branch_index(index, len(branches))], operands)


# ------------------------------------------------------------------------------ sorting


def sort_permutation(keys: Sequence[np.ndarray], descending: bool) -> np.ndarray:
    """The stable permutation sorting the rows of ``keys`` (arrays of shape [rows, n])
    lexicographically, ``keys[0]`` first: ``perm[r, j]`` is the position in row r of the
    j-th smallest (largest when ``descending``) element. NumPy's order: NaN after +inf
    (before it when descending), -0.0 equal to +0.0, ties in their original order."""
    rows, n = keys[0].shape
    perm = np.broadcast_to(np.arange(n, dtype=np.int64), (rows, n)).copy()
    # LSD radix order over the keys: each pass a stable sort by one key of the current order.
    for k in reversed(keys):
        # bfloat16 as float32 (exact, same order): ml_dtypes' bfloat16 argsort misplaces NaN
        cur = np.take_along_axis(k.astype(np.float32) if k.dtype == _BF16 else k, perm, axis=1)
        if descending:
            # stable descending = reverse, stable ascending, reverse (ties keep their order)
            order = n - 1 - np.argsort(cur[:, ::-1], axis=1, kind="stable")[:, ::-1]
        else:
            order = np.argsort(cur, axis=1, kind="stable")
        perm = np.take_along_axis(perm, order, axis=1)
    return perm


def _sort(*xs: np.ndarray, dimension: int, num_keys: int, descending: int, index: int) -> np.ndarray:
    n = xs[0].shape[dimension]

    def rows(a: np.ndarray) -> np.ndarray:
        return np.moveaxis(a, dimension, -1).reshape(-1, n)

    out = xs[index]
    if out.size == 0:
        return out.copy()
    perm = sort_permutation([rows(k) for k in xs[:num_keys]], bool(descending))
    flat = np.take_along_axis(rows(out), perm, axis=1)
    moved = np.moveaxis(out, dimension, -1).shape
    return np.moveaxis(flat.reshape(moved), -1, dimension).copy()


# ------------------------------------------------------------------------ shape rules


def _reduce_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    (t,) = ts
    axes = attrs["axes"]
    _check_axes(op, ts, axes, t.rank, "axes")
    # axes name a set of dims (StableHLO gives them no order); one canonical spelling lets
    # backends, fusion and CSE compare and iterate them without sorting. Builder and lax sort.
    if list(axes) != sorted(axes):
        raise _shape_error(op, ts, f"axes {tuple(axes)} must be sorted ascending (they are a set of dims): "
                                   f"write {{{','.join(map(str, sorted(axes)))}}}")
    return tuple(d for i, d in enumerate(t.shape) if i not in axes)


def _reduce_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    dt = ts[0].dtype
    kind = attrs["kind"]
    if kind in ("sum", "prod") and dt is DType.BOOL:
        raise DTypeError(f"reduce: kind={kind} needs a numeric operand, got {ts[0]}; convert it first")
    if kind in ("and", "or") and dt.is_float:
        raise DTypeError(f"reduce: kind={kind} needs a bool or integer operand, got {ts[0]}")
    return dt


def _dot_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    lhs, rhs = ts
    lb, rb = attrs["lhs_batch"], attrs["rhs_batch"]
    lc, rc = attrs["lhs_contracting"], attrs["rhs_contracting"]
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise _shape_error(op, ts, "batch and contracting dimension lists must pair up")
    _check_axes(op, ts, lb + lc, lhs.rank, "lhs batch+contracting dims")
    _check_axes(op, ts, rb + rc, rhs.rank, "rhs batch+contracting dims")
    for a, b in list(zip(lb, rb)) + list(zip(lc, rc)):
        if lhs.shape[a] != rhs.shape[b]:
            raise _shape_error(op, ts,
                               f"lhs dim {a} (size {lhs.shape[a]}) does not match rhs dim {b} (size {rhs.shape[b]})")
    return DotDims.from_attrs(lhs.shape, rhs.shape, attrs).result_shape(lhs.shape, rhs.shape)


def _dot_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    """The operands' dtype, or ``preferred_element_type`` (StableHLO/jax): a wider type of
    the same kind the products are accumulated in (int8 -> int32, bfloat16 -> float32)."""
    dt = _same_dtype(op, ts, attrs)
    pref = attrs.get("preferred_element_type")
    if pref is None or pref is dt:
        return dt
    same_kind = (pref.is_int and dt.is_int) or (pref.is_float and dt.is_float)
    # the widening must be exact: a wider type, and never signed -> unsigned
    exact = pref.bits > dt.bits and not (dt.is_signed and pref.is_unsigned)
    if not same_kind or not exact:
        raise DTypeError(f"{op.value}: preferred_element_type {pref.value} is not an exact widening of the "
                         f"operands' {dt.value} (operands: {_types_str(ts)})")
    return pref


def _broadcast_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    (t,) = ts
    shape, dims = attrs["shape"], attrs["broadcast_dimensions"]
    if len(dims) != t.rank:
        raise _shape_error(op, ts, f"broadcast_dimensions {dims} must name one output dim per operand dim")
    _check_axes(op, ts, dims, len(shape), "broadcast_dimensions")
    if list(dims) != sorted(dims):
        raise _shape_error(op, ts, f"broadcast_dimensions {dims} must be increasing; transpose first")
    for i, d in enumerate(dims):
        if t.shape[i] not in (1, shape[d]):
            raise _shape_error(op, ts, f"operand dim {i} (size {t.shape[i]}) cannot broadcast to output dim {d} "
                                       f"(size {shape[d]})")
    return shape


def _reshape_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    (t,) = ts
    if math.prod(attrs["shape"]) != t.size:
        raise _shape_error(op, ts, f"cannot reshape {t.size} elements into shape {attrs['shape']}")
    return attrs["shape"]


def _transpose_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    (t,) = ts
    perm = attrs["permutation"]
    if sorted(perm) != list(range(t.rank)):
        raise _shape_error(op, ts, f"permutation {perm} is not a permutation of {t.rank} dims")
    return tuple(t.shape[p] for p in perm)


def _slice_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    (t,) = ts
    start, limit, stride = attrs["start"], attrs["limit"], attrs["stride"]
    if not (len(start) == len(limit) == len(stride) == t.rank):
        raise _shape_error(op, ts, f"start/limit/stride need {t.rank} entries each")
    out = []
    for s, l, st, n in zip(start, limit, stride, t.shape):
        if st < 1 or s < 0 or l > n or s > l:
            raise _shape_error(op, ts, f"slice start={start} limit={limit} stride={stride} is out of bounds")
        out.append((l - s + st - 1) // st)
    return tuple(out)


def _pad_rule(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    t, pv = ts
    low, high, interior = attrs["low"], attrs["high"], attrs["interior"]
    if pv.rank != 0:
        raise _shape_error(op, ts, "the padding value must be a scalar")
    if not (len(low) == len(high) == len(interior) == t.rank):
        raise _shape_error(op, ts, f"low/high/interior need {t.rank} entries each")
    if any(v < 0 for v in low + high + interior):
        raise _shape_error(op, ts, "negative padding is not supported; slice instead")
    return _pad_shape(t.shape, low, high, interior)


def _concat_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    dim = attrs["dimension"]
    rank = ts[0].rank
    if not 0 <= dim < rank:
        raise _shape_error(op, ts, f"dimension {dim} is out of range for rank {rank}")
    for t in ts:
        if t.rank != rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if i != dim):
            raise _shape_error(op, ts, f"operands must agree on every dim but {dim}")
    out = list(ts[0].shape)
    out[dim] = sum(t.shape[dim] for t in ts)
    return tuple(out)


def _reverse_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    _check_axes(op, ts, attrs["dimensions"], ts[0].rank, "dimensions")
    return ts[0].shape


def _iota_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    shape = attrs["shape"]
    if not 0 <= attrs["dimension"] < max(len(shape), 1) or not shape:
        raise ShapeError(f"iota: dimension {attrs['dimension']} is out of range for shape {shape}")
    return shape


def _select_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    return _same_shape(op, ts, attrs)


def _select_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    if ts[0].dtype is not DType.BOOL:
        raise DTypeError(f"select: the predicate must be pred, got {ts[0]}")
    return _same_dtype(op, ts[1:], attrs)


def _rng_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    if ts[0].rank != 0 or ts[0].dtype is not DType.INT64:
        raise ShapeError(f"rng-bit-generator: the key must be an s64[] scalar, got {ts[0]}")
    if attrs["dtype"] not in (DType.INT32, DType.INT64):
        raise DTypeError(f"rng-bit-generator: dtype must be s32 or s64, got {attrs['dtype']}")
    return attrs["shape"]


def _sort_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    shape = _same_shape(op, ts, attrs)
    dim, num_keys, idx = attrs["dimension"], attrs["num_keys"], attrs["index"]
    if not 0 <= dim < len(shape):
        raise _shape_error(op, ts, f"dimension {dim} is out of range for rank {len(shape)} (a scalar has "
                                   f"nothing to sort)")
    if not 1 <= num_keys <= len(ts):
        raise _shape_error(op, ts, f"num_keys={num_keys} must be in [1, {len(ts)}] (the operand count)")
    if not 0 <= idx < len(ts):
        raise _shape_error(op, ts, f"index={idx} must name an operand in [0, {len(ts)})")
    if attrs["descending"] not in (0, 1):
        raise _shape_error(op, ts, f"descending={attrs['descending']} must be 0 or 1")
    return shape


def _sort_dtype(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> DType:
    _sort_shape(op, ts, attrs)  # the dtype rule runs first: index must name an operand
    return ts[attrs["index"]].dtype


def _convert_ref(x: np.ndarray, *, dtype: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        return convert_array(x, dtype)


# -------------------------------------------------------------------------- the table

#: How a backend generates a fusion's kernel (see docs/ir.md, "Fusions").
FUSION_KINDS = ("loop", "input", "row", "output")

OPS: dict[Op, OpDef] = {}


def _def(op: Op, arity: int | None, shape_rule: ShapeRule | None, dtype_rule: DTypeRule | None,
         reference: Reference, *, attrs: tuple[AttrSpec, ...] = (), traits: Traits = Traits(),
         operand_dtypes: frozenset[DType] = frozenset(ALL_DTYPES), min_arity: int = 0, doc: str = "",
         decomposition: Decomposition | None = None) -> None:
    assert op not in OPS, f"{op} defined twice"
    assert decomposition is None or traits.extended, f"{op}: only an extended primitive carries a decomposition"
    OPS[op] = OpDef(op, arity, attrs, shape_rule, dtype_rule, reference, traits, operand_dtypes, min_arity, doc,
                    decomposition)


_EW = Traits(elementwise=True, cheap=True)
_EW_C = Traits(elementwise=True, commutative=True, cheap=True)
_EW_T = Traits(elementwise=True, transcendental=True)
_MOVE = Traits(movement=True, cheap=True)

# structure
_def(Op.PARAMETER, 0, None, None, lambda: None,
     attrs=(AttrSpec("index", AttrKind.INT),), traits=Traits(structural=True, fusible=False),
     doc="The index-th argument of the computation; its type is recorded on the node.")
_def(Op.CONSTANT, 0, None, None, lambda *, value: np.array(value.array),
     attrs=(AttrSpec("value", AttrKind.LITERAL),), traits=Traits(cheap=True), doc="A literal array.")
_def(Op.IOTA, 0, _iota_shape, _attr_dtype, _iota,
     attrs=(AttrSpec("shape", AttrKind.SHAPE), AttrSpec("dtype", AttrKind.DTYPE), AttrSpec("dimension", AttrKind.INT)),
     traits=Traits(cheap=True), doc="Indices 0..n-1 along `dimension`, broadcast along the others.")
_def(Op.CONVERT, 1, _first_shape, _attr_dtype, _convert_ref, attrs=(AttrSpec("dtype", AttrKind.DTYPE),),
     traits=_EW, doc="Element type conversion; float->int saturates, NaN->0.")
_def(Op.TUPLE, None, None, None, lambda *xs: tuple(xs), traits=Traits(structural=True, fusible=False),
     doc="Groups values (multiple results).")
_def(Op.GET_TUPLE_ELEMENT, 1, None, None, lambda t, *, index: t[index],
     attrs=(AttrSpec("index", AttrKind.INT),), traits=Traits(structural=True, fusible=False),
     doc="Element `index` of a tuple value.")
_def(Op.FUSION, None, None, None, lambda *xs, kind, computation: None,
     attrs=(AttrSpec("kind", AttrKind.ENUM, choices=FUSION_KINDS),
            AttrSpec("computation", AttrKind.COMPUTATION)),
     traits=Traits(structural=True, fusible=False),
     doc="A fused sub-computation compiled as one kernel; operands bind its parameters.")

# unary elementwise
for _op, _f, _dts, _tr in [
    (Op.NEG, np.negative, NUMERIC, _EW),
    (Op.ABS, np.abs, NUMERIC, _EW),
    (Op.SIGN, _sign, NUMERIC, _EW),
    (Op.NOT, _logical_not, INTEGRAL, _EW),
]:
    _def(_op, 1, _first_shape, _same_dtype, _quiet(_bf16_in_f32(_f)),  # type: ignore[arg-type]  # ufuncs and functions join to object
         traits=_tr, operand_dtypes=_dts)

for _op, _f, _tr in [
    (Op.EXP, np.exp, _EW_T),
    (Op.LOG, np.log, _EW_T),
    (Op.SQRT, np.sqrt, _EW),
    (Op.RSQRT, lambda x: 1 / np.sqrt(x), _EW),
    (Op.TANH, np.tanh, _EW_T),
    (Op.LOGISTIC, lambda x: 1 / (1 + np.exp(-x)), _EW_T),
    (Op.SIN, np.sin, _EW_T),
    (Op.COS, np.cos, _EW_T),
    (Op.FLOOR, np.floor, _EW),
    (Op.CEIL, np.ceil, _EW),
]:
    _def(_op, 1, _first_shape, _same_dtype, _float_unary(_f),  # type: ignore[arg-type]  # ufuncs and functions, as above
         traits=_tr, operand_dtypes=FLOATS)

# binary elementwise
for _op, _f, _dts, _tr in [
    (Op.ADD, np.add, NUMERIC, _EW_C),
    (Op.SUB, np.subtract, NUMERIC, _EW),
    (Op.MUL, np.multiply, NUMERIC, _EW_C),
    (Op.DIV, _div, NUMERIC, _EW),
    (Op.REM, _rem, NUMERIC, _EW),
    (Op.POW, _pow, NUMERIC, Traits(elementwise=True, transcendental=True)),
    (Op.MAX, maximum, frozenset(ALL_DTYPES), _EW_C),
    (Op.MIN, minimum, frozenset(ALL_DTYPES), _EW_C),
    (Op.AND, np.bitwise_and, INTEGRAL, _EW_C),
    (Op.OR, np.bitwise_or, INTEGRAL, _EW_C),
]:
    _def(_op, 2, _same_shape, _same_dtype,
         _quiet(_bf16_in_f32(lambda x, y, _f=_f: np.asarray(_f(x, y)).astype(x.dtype, copy=False))),
         traits=_tr, operand_dtypes=_dts)

_def(Op.COMPARE, 2, _same_shape, _bool_dtype, _quiet(_bf16_in_f32(_compare)),
     attrs=(AttrSpec("direction", AttrKind.ENUM, choices=tuple(_COMPARE)),), traits=_EW,
     doc="Elementwise comparison; NaN compares unequal to everything.")
_def(Op.SELECT, 3, _select_shape, _select_dtype, lambda p, a, b: np.where(p, a, b), traits=_EW,
     doc="Elementwise pred ? on_true : on_false.")

# reductions and contractions
_def(Op.REDUCE, 1, _reduce_shape, _reduce_dtype, _quiet(_reduce),
     attrs=(AttrSpec("kind", AttrKind.ENUM, choices=tuple(REDUCE_KINDS)), AttrSpec("axes", AttrKind.INTS)),
     traits=Traits(reduction=True), doc="Reduces `axes` with sum/prod/max/min/and/or; empty -> identity.")
_def(Op.DOT_GENERAL, 2, _dot_shape, _dot_dtype, _quiet(_dot_general),
     attrs=(AttrSpec("lhs_batch", AttrKind.INTS, ()), AttrSpec("rhs_batch", AttrKind.INTS, ()),
            AttrSpec("lhs_contracting", AttrKind.INTS), AttrSpec("rhs_contracting", AttrKind.INTS),
            AttrSpec("preferred_element_type", AttrKind.DTYPE, None)),
     traits=Traits(contraction=True), operand_dtypes=NUMERIC,
     doc="Output dims: batch, lhs free, rhs free (XLA order). `preferred_element_type` (optional): "
         "the result and accumulation dtype, an exact widening of the operands' (int8 -> int32).")

# windowed (semantics and references: ir/conv.py)
_def(Op.CONVOLUTION, 2, conv_shape, conv_dtype, _quiet(convolution),
     attrs=tuple(AttrSpec(n, AttrKind.INTS if n.endswith("dimensions") else AttrKind.INT) for n in CONV_DIM_ATTRS)
     + tuple(AttrSpec(n, AttrKind.INTS) for n in CONV_WINDOW_ATTRS)
     + (AttrSpec("feature_group_count", AttrKind.INT, 1), AttrSpec("batch_group_count", AttrKind.INT, 1)),
     traits=Traits(contraction=True, fusible=False, extended=True), operand_dtypes=NUMERIC,
     decomposition=decompose_convolution,
     doc="StableHLO's convolution: dimension numbers name the layouts; strides, padding, lhs/rhs "
         "dilation, feature and batch groups.")
_def(Op.REDUCE_WINDOW, 1, reduce_window_shape, reduce_window_dtype, _quiet(reduce_window),
     attrs=(AttrSpec("kind", AttrKind.ENUM, choices=WINDOW_KINDS),)
     + tuple(AttrSpec(n, AttrKind.INTS) for n in REDUCE_WINDOW_ATTRS),
     traits=Traits(fusible=False, extended=True), decomposition=decompose_reduce_window,
     doc="Reduces each window (sum/prod/max/min/and/or); padding and holes read as the kind's identity.")

# data movement
_def(Op.BROADCAST_IN_DIM, 1, _broadcast_shape, _same_dtype, _broadcast_in_dim,
     attrs=(AttrSpec("shape", AttrKind.SHAPE), AttrSpec("broadcast_dimensions", AttrKind.INTS)), traits=_MOVE)
_def(Op.RESHAPE, 1, _reshape_shape, _same_dtype, lambda x, *, shape: x.reshape(shape).copy(),
     attrs=(AttrSpec("shape", AttrKind.SHAPE),), traits=_MOVE, doc="Row-major reshape.")
_def(Op.TRANSPOSE, 1, _transpose_shape, _same_dtype,
     lambda x, *, permutation: np.transpose(x, permutation).copy(),
     attrs=(AttrSpec("permutation", AttrKind.INTS),), traits=_MOVE)
_def(Op.SLICE, 1, _slice_shape, _same_dtype,
     lambda x, *, start, limit, stride: x[tuple(slice(s, l, st) for s, l, st in zip(start, limit, stride))].copy(),
     attrs=(AttrSpec("start", AttrKind.INTS), AttrSpec("limit", AttrKind.INTS), AttrSpec("stride", AttrKind.INTS)),
     traits=_MOVE)
_def(Op.PAD, 2, _pad_rule, _same_dtype, _pad,
     attrs=(AttrSpec("low", AttrKind.INTS), AttrSpec("high", AttrKind.INTS), AttrSpec("interior", AttrKind.INTS)),
     traits=_MOVE, doc="Edge (low/high) and interior padding with a scalar value; all >= 0.")
_def(Op.CONCATENATE, None, _concat_shape, _same_dtype, lambda *xs, dimension: np.concatenate(xs, axis=dimension),
     attrs=(AttrSpec("dimension", AttrKind.INT),), traits=_MOVE, min_arity=1)
_def(Op.REVERSE, 1, _reverse_shape, _same_dtype, lambda x, *, dimensions: np.flip(x, dimensions).copy(),
     attrs=(AttrSpec("dimensions", AttrKind.INTS),), traits=_MOVE)

# indexing (semantics and references: ir/indexing.py)
_INDEXED = Traits(indexed=True, extended=True)
_UPDATE = Traits(updates_operand=True, extended=True)
_def(Op.GATHER, 2, gather_shape, lambda op, ts, attrs: ts[0].dtype, _quiet(gather),
     attrs=(AttrSpec("offset_dims", AttrKind.INTS), AttrSpec("collapsed_slice_dims", AttrKind.INTS),
            AttrSpec("start_index_map", AttrKind.INTS), AttrSpec("index_vector_dim", AttrKind.INT),
            AttrSpec("slice_sizes", AttrKind.INTS)),
     traits=_INDEXED, decomposition=decompositions.gather,
     doc="Slices of the operand at the start indices (clamped in bounds), StableHLO's gather.")
_def(Op.SCATTER, 3, scatter_shape, lambda op, ts, attrs: ts[0].dtype, _quiet(scatter),
     attrs=(AttrSpec("update_window_dims", AttrKind.INTS), AttrSpec("inserted_window_dims", AttrKind.INTS),
            AttrSpec("scatter_dims_to_operand_dims", AttrKind.INTS), AttrSpec("index_vector_dim", AttrKind.INT),
            AttrSpec("kind", AttrKind.ENUM, choices=SCATTER_KINDS)),
     traits=_UPDATE, decomposition=decompositions.scatter,
     doc="The operand with update windows combined in at the indices, in index order; "
         "out-of-bounds windows are dropped.")
_def(Op.DYNAMIC_SLICE, None, dynamic_slice_shape, lambda op, ts, attrs: ts[0].dtype, dynamic_slice,
     attrs=(AttrSpec("slice_sizes", AttrKind.INTS),), traits=_INDEXED, min_arity=1,
     decomposition=decompositions.dynamic_slice,
     doc="A slice of `slice_sizes` at traced scalar starts, clamped so it fits.")
_def(Op.DYNAMIC_UPDATE_SLICE, None, dynamic_update_slice_shape, lambda op, ts, attrs: ts[0].dtype,
     dynamic_update_slice, traits=_UPDATE, min_arity=2, decomposition=decompositions.dynamic_update_slice,
     doc="The operand with `update` written at traced scalar starts, clamped so it fits.")

# others
_def(Op.RNG_BIT_GENERATOR, 1, _rng_shape, _attr_dtype, _rng,
     attrs=(AttrSpec("shape", AttrKind.SHAPE), AttrSpec("dtype", AttrKind.DTYPE)),
     traits=Traits(side_effect=True),
     doc="Counter-based random bits from an s64 key (splitmix64); see ops.rng_bits.")
_def(Op.CUSTOM_CALL, None, _attr_shape, _attr_dtype, _custom_call,
     attrs=(AttrSpec("target", AttrKind.STR), AttrSpec("shape", AttrKind.SHAPE), AttrSpec("dtype", AttrKind.DTYPE),
            AttrSpec("config", AttrKind.STR, "")),
     traits=Traits(side_effect=True, fusible=False),
     doc="Calls a named external function; its reference is registered with register_custom_call.")

# elementwise completeness (float): StableHLO/CHLO names and semantics
_FLOAT_FNS: list[tuple[Op, Callable[[np.ndarray], np.ndarray]]] = [
    (Op.TAN, np.tan), (Op.EXPM1, np.expm1), (Op.LOG1P, np.log1p), (Op.CBRT, np.cbrt), (Op.ERF, bitwise.erf)]
for _op, _fn in _FLOAT_FNS:
    _def(_op, 1, _first_shape, _same_dtype, _float_unary(_fn), traits=_EW_T, operand_dtypes=FLOATS)
_def(Op.ATAN2, 2, _same_shape, _same_dtype, _float_binary(np.arctan2), traits=_EW_T, operand_dtypes=FLOATS,
     doc="atan2(y, x): the angle of (x, y) in [-pi, pi], signed zeros and infinities as C's atan2.")
_def(Op.ROUND_NEAREST_EVEN, 1, _first_shape, _same_dtype, _quiet(np.rint), traits=_EW, operand_dtypes=FLOATS,
     doc="Rounds to the nearest integer, ties to even (NumPy's rint/round).")
_def(Op.IS_FINITE, 1, _first_shape, _bool_dtype, _quiet(np.isfinite), traits=_EW, operand_dtypes=FLOATS,
     doc="-> pred: neither NaN nor an infinity.")
_def(Op.NEXT_AFTER, 2, _same_shape, _same_dtype, _quiet(bitwise.next_after), traits=_EW, operand_dtypes=FLOATS,
     doc="The next representable value after x towards y (float16 in its own format; y if x == y; NaN if either is).")

# bit operations: integer dtypes by property (every signed and unsigned width), xor also pred
_INTS: frozenset[DType] = frozenset(d for d in ALL_DTYPES if d.is_int)
_def(Op.XOR, 2, _same_shape, _same_dtype, _quiet(bitwise.xor), traits=_EW_C,
     operand_dtypes=_INTS | {DType.BOOL}, doc="Logical (pred) or bitwise exclusive or.")
for _op, _f in [(Op.SHIFT_LEFT, bitwise.shift_left), (Op.SHIFT_RIGHT_LOGICAL, bitwise.shift_right_logical),
                (Op.SHIFT_RIGHT_ARITHMETIC, bitwise.shift_right_arithmetic)]:
    _def(_op, 2, _same_shape, _same_dtype, _quiet(_f), traits=_EW, operand_dtypes=_INTS,
         doc="The amount is read as unsigned; amounts >= the bit width give 0 (arithmetic: the sign fill).")
_def(Op.POPCNT, 1, _first_shape, _same_dtype, bitwise.popcnt, traits=_EW, operand_dtypes=_INTS,
     doc="The number of set bits.")
_def(Op.CLZ, 1, _first_shape, _same_dtype, bitwise.count_leading_zeros, traits=_EW, operand_dtypes=_INTS,
     doc="The number of leading zero bits; the bit width for 0.")
_def(Op.BITCAST_CONVERT, 1, bitwise.first_shape, bitwise.bitcast_dtype, bitwise.bitcast_convert,
     attrs=(AttrSpec("dtype", AttrKind.DTYPE),), traits=_EW,
     doc="Reinterprets each element's bits as `dtype` of the same bit width (no width change).")

# sorting
_def(Op.SORT, None, _sort_shape, _sort_dtype, _sort,
     attrs=(AttrSpec("dimension", AttrKind.INT), AttrSpec("num_keys", AttrKind.INT, 1),
            AttrSpec("descending", AttrKind.INT, 0), AttrSpec("index", AttrKind.INT, 0)),
     traits=Traits(fusible=False), min_arity=1,
     doc="Operand `index` reordered by a stable sort of each row along `dimension`, keyed "
         "lexicographically by operands [0, num_keys); NaN last (first when descending), -0.0 == +0.0.")

# control flow
_def(Op.WHILE, None, None, None, _while_ref,
     attrs=(AttrSpec("condition", AttrKind.COMPUTATION), AttrSpec("body", AttrKind.COMPUTATION)),
     traits=Traits(control=True, fusible=False), min_arity=1,
     doc="Runs `body` over the carry (the operands) while `condition` (-> pred[]) holds; "
         "the result is the tuple of the final carry.")
_def(Op.CONDITIONAL, None, None, None, _conditional_ref,
     attrs=(AttrSpec("branches", AttrKind.COMPUTATIONS),),
     traits=Traits(control=True, fusible=False), min_arity=1,
     doc="Operand 0 (s32[] index, out of range -> the last branch; or pred[]: false -> branch 0, "
         "true -> branch 1) picks the branch run on the other operands.")

# collectives (semantics and references: ir/collectives.py)
_COLLECTIVE = Traits(collective=True, side_effect=True, fusible=False, extended=True)
_GROUPS = (AttrSpec("replica_groups", AttrKind.INTS), AttrSpec("group_size", AttrKind.INT))
_COLL_KIND = AttrSpec("kind", AttrKind.ENUM, choices=collectives.COLLECTIVE_KINDS)
_def(Op.ALL_REDUCE, 1, collectives.all_reduce_shape, _same_dtype, collectives.all_reduce,
     attrs=(_COLL_KIND, *_GROUPS), traits=_COLLECTIVE, operand_dtypes=NUMERIC,
     doc="Each replica gets the sum/prod/max/min over its replica group of the operand, combined in "
         "group order. `replica_groups`: the replica ids, `group_size` at a time.")
_def(Op.ALL_GATHER, 1, collectives.all_gather_shape, _same_dtype, collectives.all_gather,
     attrs=(AttrSpec("dimension", AttrKind.INT), *_GROUPS), traits=_COLLECTIVE,
     doc="The operands of the replica group concatenated along `dimension`, in group order.")
_def(Op.REDUCE_SCATTER, 1, collectives.reduce_scatter_shape, _same_dtype, collectives.reduce_scatter,
     attrs=(_COLL_KIND, AttrSpec("dimension", AttrKind.INT), *_GROUPS), traits=_COLLECTIVE,
     operand_dtypes=NUMERIC,
     doc="The group's all-reduce split into `group_size` blocks along `dimension`; the i-th member "
         "of the group gets block i.")
_def(Op.ALL_TO_ALL, 1, collectives.all_to_all_shape, _same_dtype, collectives.all_to_all,
     attrs=(AttrSpec("split_dimension", AttrKind.INT), AttrSpec("concat_dimension", AttrKind.INT), *_GROUPS),
     traits=_COLLECTIVE,
     doc="Each member splits its operand into `group_size` blocks along `split_dimension` and sends "
         "block j to member j; it concatenates what it receives along `concat_dimension`.")
_def(Op.COLLECTIVE_PERMUTE, 1, collectives.collective_permute_shape, _same_dtype, collectives.collective_permute,
     attrs=(AttrSpec("source_target_pairs", AttrKind.INTS),), traits=_COLLECTIVE,
     doc="Each target replica gets its source's operand (`source_target_pairs`: source, target, ...); "
         "a replica no pair targets gets zeros.")
_def(Op.REPLICA_ID, 0, lambda op, ts, attrs: (), lambda op, ts, attrs: DType.INT32, collectives.replica_id,
     traits=_COLLECTIVE, doc="-> s32[]: the id of the replica running the program (0 outside an SPMD run).")

#: ops that run sub-computations: placed whole on one device, never claimed by default
CONTROL_OPS: frozenset[Op] = frozenset(op for op, d in OPS.items() if d.traits.control)

# Every primitive a backend can claim (plumbing and control ops excluded).
CORE_PRIMITIVES: frozenset[Op] = frozenset(OPS) - {Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.FUSION} - CONTROL_OPS
#: The extended primitives (Traits.extended): claimed only by a device that lists them; the
#: others get their decomposition, expanded before partitioning (passes/expand.py).
EXTENDED_PRIMITIVES: frozenset[Op] = frozenset(op for op in CORE_PRIMITIVES if OPS[op].traits.extended)
#: What a device claims by default (Capabilities.ops): every primitive but the extended ones.
BASE_PRIMITIVES: frozenset[Op] = CORE_PRIMITIVES - EXTENDED_PRIMITIVES
BY_NAME: dict[str, Op] = {op.value: op for op in Op}


#: Result types already inferred, by (op, operand types, attributes): the rules are pure, and
#: a trace, every rewrite pass and auto-mode recording build nodes whose types repeat, so
#: a hit skips the rules and the result type's validation. Bounded: cleared when full.
_TYPE_MEMO: dict[tuple, Type] = {}
_TYPE_MEMO_MAX = 8192


def infer_type(op: Op, operand_types: Sequence[Type], attrs: dict[str, Any]) -> Type:
    """Checks operands and attributes against the op's rules and returns the result type."""
    if op in _UNMEMOIZED:
        return _infer_type(op, operand_types, attrs)
    try:
        key = (op, tuple(operand_types), tuple(attrs.items()))
        t = _TYPE_MEMO.get(key)
    except TypeError:  # an unhashable attribute value: no memo for it
        return _infer_type(op, operand_types, attrs)
    if t is None:
        t = _infer_type(op, operand_types, attrs)  # raises for bad input: never memoized
        if len(_TYPE_MEMO) >= _TYPE_MEMO_MAX:
            _TYPE_MEMO.clear()
        _TYPE_MEMO[key] = t
    return t


def _infer_type(op: Op, operand_types: Sequence[Type], attrs: dict[str, Any]) -> Type:
    d = OPS[op]
    if op is Op.TUPLE:
        if any(isinstance(t, TupleType) for t in operand_types):
            raise ShapeError("tuple: nested tuples are not supported")
        return TupleType(tuple(operand_types))  # type: ignore[arg-type]  # no tuple among them: checked above
    if op is Op.GET_TUPLE_ELEMENT:
        (t,) = operand_types
        if not isinstance(t, TupleType) or not 0 <= attrs["index"] < len(t.elements):
            raise ShapeError(f"get-tuple-element: index {attrs['index']} is out of range for {t}")
        return t.elements[attrs["index"]]
    if op is Op.FUSION:
        comp = attrs["computation"]
        params = [p.type for p in comp.parameters]
        if list(params) != list(operand_types):
            raise ShapeError(f"fusion: operands ({_types_str(operand_types)}) do not match the fused "
                             f"computation's parameters ({_types_str(params)})")
        return comp.root.type
    if op in _CONTROL_TYPE_RULES:
        return _CONTROL_TYPE_RULES[op](operand_types, attrs)
    for t in operand_types:
        if not isinstance(t, TensorType):
            raise ShapeError(f"{op.value}: operands must be arrays, got {t}")
    ts: Sequence[TensorType] = operand_types  # type: ignore[assignment]  # all arrays: checked above
    bad = [t for t in ts if t.dtype not in d.operand_dtypes]
    if bad and op is not Op.SELECT:
        allowed = ", ".join(sorted(x.value for x in d.operand_dtypes))
        raise DTypeError(f"{op.value}: operand dtype {bad[0].dtype.value} is not supported (operands: "
                         f"{_types_str(ts)}; allowed: {allowed})")
    assert d.shape_rule is not None and d.dtype_rule is not None, f"{op} has no rules"
    dt = d.dtype_rule(op, ts, attrs)
    shape = d.shape_rule(op, ts, attrs)
    return TensorType(dt, tuple(shape))


def _check_signature(what: str, comp: Computation, expected: Sequence[Type], role: str) -> None:
    got = comp.parameter_types
    if list(got) != list(expected):
        raise ShapeError(f"{what}: the {role} %{comp.name} takes ({_types_str(got)}), but the operands are "
                         f"({_types_str(expected)})")


def _while_type(operand_types: Sequence[Type], attrs: dict[str, Any]) -> Type:
    if any(not isinstance(t, TensorType) for t in operand_types):
        raise ShapeError(f"while: the carry must be arrays (operands: {_types_str(operand_types)})")
    cond, body = attrs["condition"], attrs["body"]
    _check_signature("while", cond, operand_types, "condition")
    _check_signature("while", body, operand_types, "body")
    if cond.root.type != TensorType(DType.BOOL, ()):
        raise ShapeError(f"while: the condition %{cond.name} must return pred[], it returns {cond.root.type}")
    carry = TupleType(tuple(operand_types))  # type: ignore[arg-type]  # arrays: checked above
    if body.root.type != carry:
        raise ShapeError(f"while: the body %{body.name} returns {body.root.type}, but the carry is {carry} "
                         "(the body must return the carry's types, as a tuple)")
    return carry


def _conditional_type(operand_types: Sequence[Type], attrs: dict[str, Any]) -> Type:
    index, *rest = operand_types
    branches = attrs["branches"]
    if index not in (TensorType(DType.INT32, ()), TensorType(DType.BOOL, ())):
        raise ShapeError(f"conditional: the branch index must be s32[] or pred[], got {index}")
    if index == TensorType(DType.BOOL, ()) and len(branches) != 2:
        raise ShapeError(f"conditional: a pred[] index picks one of 2 branches, got {len(branches)}")
    for b in branches:
        _check_signature("conditional", b, rest, "branch")
    results = {b.root.type for b in branches}
    if len(results) != 1:
        listed = ", ".join(f"%{b.name} -> {b.root.type}" for b in branches)
        raise ShapeError(f"conditional: the branches return different types ({listed})")
    return branches[0].root.type


_CONTROL_TYPE_RULES: dict[Op, Callable[[Sequence[Type], dict[str, Any]], Type]] = {
    Op.WHILE: _while_type,
    Op.CONDITIONAL: _conditional_type,
}
#: Ops whose types come from the computations they call or from tuple plumbing: cheap to
#: derive, and a computation is no key worth hashing.
_UNMEMOIZED: frozenset[Op] = frozenset({Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.FUSION, *_CONTROL_TYPE_RULES})


#: canonical_attrs results for attributes made only of plain values (exact types: a bool is
#: not taken for the int it equals, nor a float for an int), bounded as _TYPE_MEMO is.
_ATTRS_MEMO: dict[tuple, tuple[tuple[str, Any], ...]] = {}
_PLAIN_ATTR_TYPES: frozenset[type] = frozenset({int, str, type(None), DType})


def _plain(v: object) -> bool:
    if isinstance(v, tuple):  # a tuple exactly (no subclass), of ints exactly
        return type(v) is tuple and all(type(e) is int for e in v)
    return type(v) in _PLAIN_ATTR_TYPES


def plain_attrs(items: tuple[tuple[str, Any], ...]) -> bool:
    """True when every attribute value is a plain value (an int, str, None or DType, or a
    tuple of ints, of exactly those types): equal such values are the same attribute, so
    caches may key on them as given (eager dispatch's hot path does)."""
    return all(_plain(v) for _, v in items)


def canonical_attrs(op: Op, attrs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Validates attribute names/values against the schema and returns them sorted by name."""
    items = tuple(attrs.items())
    if not all(_plain(v) for _, v in items):
        return _canonical_attrs(op, attrs)
    key = (op, items)
    out = _ATTRS_MEMO.get(key)
    if out is None:
        out = _canonical_attrs(op, attrs)  # raises for bad attributes: never memoized
        if len(_ATTRS_MEMO) >= _TYPE_MEMO_MAX:
            _ATTRS_MEMO.clear()
        _ATTRS_MEMO[key] = out
    return out


def _canonical_attrs(op: Op, attrs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    d = OPS[op]
    names = {a.name for a in d.attrs}
    unknown = set(attrs) - names
    if unknown:
        raise OpAttributeError(f"{op.value}: unknown attribute(s) {sorted(unknown)}; expected {sorted(names)}")
    out = []
    for spec in d.attrs:
        if spec.name in attrs:
            out.append((spec.name, spec.coerce(op, attrs[spec.name])))
        elif spec.required:
            raise OpAttributeError(f"{op.value}: missing attribute {spec.name!r}")
        else:
            out.append((spec.name, spec.default))
    return tuple(sorted(out))


def check_arity(op: Op, n: int) -> None:
    d = OPS[op]
    if d.arity is None:
        if n < d.min_arity:
            raise ShapeError(f"{op.value}: needs at least {d.min_arity} operand(s), got {n}")
    elif n != d.arity:
        raise ShapeError(f"{op.value}: takes {d.arity} operand(s), got {n}")
