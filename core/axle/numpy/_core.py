"""The base of axle.numpy: conversion, promotion and broadcasting, elementwise
arithmetic, reductions, basic indexing plans. The other modules of the package build on
it (_index, then _shape, _math, _linalg); axle/numpy/__init__.py exports them all."""
from __future__ import annotations

import builtins
import contextlib as _contextlib
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any

import ml_dtypes as _ml_dtypes
import numpy as _np

from .. import lax
from ..errors import ArgumentError, DTypeError, ShapeError
from ..frontend.array import Array
from ..frontend.device_put import device_put as _device_put
from ..frontend.eager import colocate, launch_cached
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, aval_of, current_trace, is_weak
from ..frontend.validate import (
    as_sequence,
    axis_arg,
    check_python_int,
    check_shape,
    check_weak_scalar,
    dtype_arg,
    finite_number,
    host_array,
    nonzero_step,
    scalar_arg,
    shape_arg,
    size_arg,
)
from ..ir.dtypes import DType  # noqa: F401 - axle.numpy.DType, through the package's star import
from ..ir.dtypes import is_float_numpy as _is_float
from ..ir.dtypes import result_type as _result_type
from ..ir.ops import Op as _Op
from ..placement import pop_default, push_default
from ..placement import resolve as _resolve_device

if _TYPE_CHECKING:  # not at run time: the package star-imports this module's names
    from collections.abc import Callable, Iterator

bool_ = _np.bool_
int8 = _np.int8
int16 = _np.int16
int32 = _np.int32
int64 = _np.int64
uint8 = _np.uint8
uint16 = _np.uint16
uint32 = _np.uint32
uint64 = _np.uint64
float16 = _np.float16
bfloat16 = _ml_dtypes.bfloat16
float32 = _np.float32
float64 = _np.float64
pi = math.pi
e = math.e
inf = math.inf
nan = math.nan
newaxis = None

ArrayLike = Any


def _is_array(x: Any) -> bool:
    return isinstance(x, (Array, Tracer))


def asarray(x: ArrayLike, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Any:
    """An axle value: tracers and arrays pass through; NumPy data goes to the default
    device, or ``device`` (or becomes a constant while tracing).

    ``copy`` as in the array API standard: None copies only when needed, False refuses to
    (an axle error, a ValueError) when the value is not already an axle array of that dtype
    on that device, True always gives a new array. axle's device buffers are immutable
    (``x[i] = v`` rebinds x to a new buffer, never writes into one), so the new array of
    ``copy=True`` shares its operand's buffer: no value can ever tell them apart."""
    if _is_array(x):
        out = x if dtype is None else astype(x, dtype)
        if device is not None and isinstance(out, Array) and out.device != _resolve_device(device):
            _no_copy_allowed(copy, x, "it lives on another device")
            return _device_put(out, device)
        if copy is False and out is not x:
            _no_copy_allowed(copy, x, f"its dtype is {x.dtype}, not {out.dtype}")
        if copy and out is x and isinstance(x, Array):
            return Array(x.buffer, weak=x.weak, committed=x.committed)
        return out
    _no_copy_allowed(copy, x, "it is not an axle array (its data must move to a device)")
    if dtype is None:
        arr = host_array(x, "asarray")  # refuses what axle would have to convert (int8, uint64...)
    else:
        arr = _explicit_cast(x, dtype_arg(dtype, "asarray"), "asarray")
    if current_trace() is not None:
        return _const(arr)
    return _device_put(arr, device)


def _no_copy_allowed(copy: bool | None, x: Any, why: str) -> None:
    if copy is False:
        raise ArgumentError(f"asarray: copy=False but {type(x).__name__} {_short_aval(x)} needs a copy: {why}",
                            where=user_location())


def _short_aval(x: Any) -> str:
    return str(aval_of(x)) if _is_array(x) else ""


@_contextlib.contextmanager
def _on_device(device: Any) -> Iterator[None]:
    """Creation functions' ``device=``: the block makes its arrays there (inside jit the
    jit's device decides, as for every value of the traced function)."""
    if device is None or current_trace() is not None:
        yield
        return
    push_default(_resolve_device(device))
    try:
        yield
    finally:
        pop_default()


def _placed(out: Any, device: Any) -> Any:
    """out, committed to ``device`` when one is named (eagerly)."""
    if device is None or not isinstance(out, Array):
        return out
    dev = _resolve_device(device)
    if out.device != dev:
        return _device_put(out, dev)
    out.committed = True
    return out


array = asarray


def _explicit_cast(x: Any, dt: _np.dtype, fn: str) -> _np.ndarray:
    """x converted to dt because the user asked for dt; Python ints out of dt's range
    are refused (NumPy 2 raises OverflowError), array data casts as NumPy's astype does."""
    if isinstance(x, (list, tuple, int)) and not isinstance(x, bool):
        for v in _np.asarray(x, dtype=object).reshape(-1) if isinstance(x, (list, tuple)) else (x,):
            if isinstance(v, int) and not isinstance(v, bool):
                check_python_int(v, dt, fn)
    try:
        src = _np.asarray(x)
    except (OverflowError, ValueError, TypeError) as e:
        raise DTypeError(f"{fn}: cannot convert {type(x).__name__} to {dt}: {e}", where=user_location()) from None
    if src.dtype.kind not in "biuf" and not _is_float(src.dtype):
        raise DTypeError(f"{fn}: cannot convert {src.dtype} data to {dt}", where=user_location())
    check_shape(tuple(src.shape), fn, dt.itemsize)
    with _np.errstate(all="ignore"):
        return src.astype(dt, copy=False)


def _const(arr: _np.ndarray) -> Any:
    trace = current_trace()
    assert trace is not None
    return Tracer(trace, trace.to_node(arr))


def _dtype_of(x: Any) -> Any:
    """What NumPy promotion sees: a Python scalar for weak values, a dtype argument as
    itself (the array API's result_type takes dtypes and arrays alike), else the dtype."""
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, (_np.dtype, type)):
        return dtype_arg(x, "result_type")
    if is_weak(x):
        dt = aval_of(x).dtype
        return False if dt.is_bool else (0.0 if dt.is_float else 0)
    return aval_of(x).dtype


def result_type(*args: Any) -> _np.dtype:
    return _result_type(*[_dtype_of(a) for a in args]).np


def _fail(op: str, why: str, *args: Any) -> ShapeError:
    shapes = ", ".join(f"{aval_of(a)}" for a in args)
    return ShapeError(f"{op}: {why} (operands: {shapes})", where=user_location())


def _to_value(x: Any, dt: _np.dtype) -> Any:
    if _is_array(x):
        return x if x.dtype == dt else lax.convert(x, dt)
    arr = host_array(x, "axle")  # strings, objects, int8...: refused, never cast
    if arr.dtype != dt:
        with _np.errstate(all="ignore"):
            arr = arr.astype(dt)
    return arr


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return tuple(_np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ShapeError(f"broadcast_shapes: shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be "
                         f"broadcast together", where=user_location()) from None


def broadcast_to(x: ArrayLike, shape: Sequence[int]) -> Any:
    xs = aval_of(x).shape
    if type(shape) is tuple and xs == shape:  # the common case inside axle: nothing to check or do
        return x
    shape = shape_arg(shape, "broadcast_to")
    if xs == shape:
        return x
    if len(xs) > len(shape) or builtins.any(a not in (1, b) for a, b in zip(xs[::-1], shape[::-1])):
        raise _fail("broadcast_to", f"cannot broadcast shape {xs} to {shape}", x)
    offset = len(shape) - len(xs)
    if not _is_array(x):
        x = _np.asarray(x)
    return lax.broadcast_in_dim(x, shape, tuple(range(offset, len(shape))))


def _prepare(name: str, *args: ArrayLike, dtype: Any = None) -> list[Any]:
    """Promotes to a common dtype and broadcasts to a common shape (NumPy rules)."""
    dt = dtype_arg(dtype, name) if dtype is not None else result_type(*args)
    for a in args:  # NEP 50: a Python int takes the array's dtype and must fit it
        check_weak_scalar(a, dt, name)
    try:
        shape = broadcast_shapes(*[aval_of(a).shape for a in args])
    except ValueError:
        raise _fail(name, "shapes cannot be broadcast together", *args) from None
    return [broadcast_to(v, shape) for v in colocate([_to_value(a, dt) for a in args])]


def _finish(x: Any, *args: Any) -> Any:
    """Marks results of all-weak operands weak (so `2.0 * 3.0` stays a Python-like scalar)."""
    if args and builtins.all(is_weak(a) for a in args) and _is_array(x):
        x.weak = True
    return x


def _binary(op: Any, name: str, dtype_fn: Any = None) -> Callable[[ArrayLike, ArrayLike], Any]:
    # Without a dtype rule of its own, the function on two concrete non-weak arrays of one
    # type is exactly its primitive (promotion and broadcasting change nothing), and a
    # primitive's hot path only knows signatures its shape and dtype rules accepted.
    primitive = None if dtype_fn else getattr(op, "primitive", None)

    def f(x: ArrayLike, y: ArrayLike) -> Any:
        if primitive is not None and type(x) is Array and type(y) is Array:
            out = launch_cached(primitive, (x, y))
            if out is not None:
                return out
            if not (x.weak or y.weak) and x.aval == y.aval and x.device == y.device:
                return op(x, y)  # nothing to promote, broadcast or move (a pending value too: auto mode)
        dt = dtype_fn(x, y) if dtype_fn else None
        a, b = _prepare(name, x, y, dtype=dt)
        return _finish(op(a, b), x, y)

    f.__name__ = name
    return f


def _float_result(x: Any, *rest: Any) -> _np.dtype:
    dt = result_type(x, *rest)
    return dt if _is_float(dt) else _np.dtype(_np.float64)


add = _binary(lax.add, "add")
subtract = _binary(lax.sub, "subtract")
multiply = _binary(lax.mul, "multiply")
maximum = _binary(lax.max, "maximum")
minimum = _binary(lax.min, "minimum")
true_divide = _binary(lax.div, "true_divide", _float_result)
divide = true_divide


def _check_int_or_bool(name: str, *xs: Any) -> None:
    for x in xs:
        if isinstance(x, float) or (not isinstance(x, (bool, int)) and aval_of(x).dtype.is_float):
            got = f"the Python float {x!r}" if isinstance(x, float) else f"{aval_of(x)}"
            raise DTypeError(f"{name}: needs bool or integer operands, got {got}", where=user_location())


def bitwise_and(x: ArrayLike, y: ArrayLike) -> Any:
    _check_int_or_bool("bitwise_and", x, y)
    a, b = _prepare("bitwise_and", x, y)
    return lax.and_(a, b)


def bitwise_or(x: ArrayLike, y: ArrayLike) -> Any:
    _check_int_or_bool("bitwise_or", x, y)
    a, b = _prepare("bitwise_or", x, y)
    return lax.or_(a, b)




def logical_and(x: ArrayLike, y: ArrayLike) -> Any:
    return bitwise_and(astype(x, bool), astype(y, bool))


def logical_or(x: ArrayLike, y: ArrayLike) -> Any:
    return bitwise_or(astype(x, bool), astype(y, bool))


def invert(x: ArrayLike) -> Any:
    _check_int_or_bool("invert", x)
    return lax.not_(asarray(x))


def logical_not(x: ArrayLike) -> Any:
    return lax.not_(astype(x, bool))


def power(x: ArrayLike, y: ArrayLike) -> Any:
    a, b = _prepare("power", x, y)
    return _finish(lax.pow(a, b), x, y)


def _float_signbit(x: Any) -> Any:
    """The sign bit of a float array (set for -0.0 and negative NaNs), read through its
    bits; float16 through float32 (exact), for want of a 16-bit integer."""
    xf = lax.convert(x, _np.float32) if x.dtype.itemsize < 4 else x
    bits = lax.bitcast_convert(xf, _np.dtype(f"int{xf.dtype.itemsize * 8}"))
    return lax.compare(bits, _zeros_like(bits), "lt")


def _float_floor_divide(a: Any, b: Any) -> Any:
    """NumPy's npy_divmod: (a - fmod(a, b)) / b, corrected by one where the remainder's
    sign differs from b's, rounded to the nearest integer; a zero quotient takes the sign
    of a / b; b == 0 gives a / b (inf or NaN). floor(a / b) is off by one where a / b
    rounds up to an integer (1.0 // 0.1 is 9.0, not 10.0)."""
    zero, one = _zeros_like(a), _ones_like(a)
    mod = lax.rem(a, b)
    q = lax.div(a, b)
    div = lax.div(lax.sub(a, mod), b)
    adjust = lax.and_(lax.compare(mod, zero, "ne"),
                      lax.compare(lax.compare(b, zero, "lt"), lax.compare(mod, zero, "lt"), "ne"))
    div = lax.select(adjust, lax.sub(div, one), div)
    fl = lax.floor(div)
    fl = lax.select(lax.compare(lax.sub(div, fl), _full_like_value(a, 0.5), "gt"), lax.add(fl, one), fl)
    signed_zero = lax.select(_float_signbit(q), lax.neg(zero), zero)
    fl = lax.select(lax.compare(div, zero, "eq"), signed_zero, fl)
    return lax.select(lax.compare(b, zero, "eq"), q, fl)


def floor_divide(x: ArrayLike, y: ArrayLike) -> Any:
    a, b = _prepare("floor_divide", x, y)
    if _is_float(a.dtype):
        return _finish(_float_floor_divide(a, b), x, y)
    if a.dtype == _np.bool_:
        a, b = astype(a, _np.int64), astype(b, _np.int64)
    q = lax.div(a, b)
    r = lax.rem(a, b)
    zero = _zeros_like(r)
    adjust = lax.and_(lax.compare(r, zero, "ne"),
                      lax.compare(lax.compare(r, zero, "lt"), lax.compare(b, zero, "lt"), "ne"))
    q = lax.select(adjust, lax.sub(q, _ones_like(q)), q)
    return lax.select(lax.compare(b, zero, "eq"), zero, q)  # NumPy: x // 0 == 0 for integers


def remainder(x: ArrayLike, y: ArrayLike) -> Any:
    a, b = _prepare("remainder", x, y)
    r = lax.rem(a, b)
    zero = _zeros_like(r)
    fix = lax.and_(lax.compare(r, zero, "ne"),
                   lax.compare(lax.compare(r, zero, "lt"), lax.compare(b, zero, "lt"), "ne"))
    r = lax.select(fix, lax.add(r, b), r)
    if not _is_float(a.dtype):
        return lax.select(lax.compare(b, zero, "eq"), zero, r)  # NumPy: x % 0 == 0 for integers
    # NumPy: a zero remainder takes the sign of b (remainder(-0.0, 1.0) is +0.0); where r
    # is 0, b is neither 0 nor NaN (those give NaN)
    signed_zero = lax.select(lax.compare(b, zero, "lt"), lax.neg(zero), zero)
    return _finish(lax.select(lax.compare(r, zero, "eq"), signed_zero, r), x, y)


mod = remainder
fmod = _binary(lax.rem, "fmod")


def _full_like_value(x: Any, v: Any) -> Any:
    """v in x's shape and dtype, made on x's device."""
    return broadcast_to(colocate([_np.asarray(v, dtype=x.dtype), x])[0], x.shape)


def _zeros_like(x: Any) -> Any:
    return _full_like_value(x, 0)


def _ones_like(x: Any) -> Any:
    return _full_like_value(x, 1)


def _compare(direction: str, name: str) -> Callable[[ArrayLike, ArrayLike], Any]:
    def f(x: ArrayLike, y: ArrayLike) -> Any:
        a, b = _prepare(name, x, y)
        return lax.compare(a, b, direction)

    f.__name__ = name
    return f


equal = _compare("eq", "equal")
not_equal = _compare("ne", "not_equal")
less = _compare("lt", "less")
less_equal = _compare("le", "less_equal")
greater = _compare("gt", "greater")
greater_equal = _compare("ge", "greater_equal")


def _unary_float_dtype(dt: _np.dtype) -> _np.dtype:
    """The float dtype NumPy's unary float functions (sqrt, exp...) compute an integer
    operand in: the smallest float that holds it (int8/uint8 -> float16, int16/uint16 ->
    float32, wider -> float64); bool keeps axle's float64."""
    if _is_float(dt):
        return dt
    return _np.result_type(dt, _np.float16) if dt.kind in "iu" else _np.dtype(_np.float64)


def _unary_float(op: Any, name: str) -> Callable[[ArrayLike], Any]:
    # On a concrete non-weak float array the function is exactly its primitive; the
    # primitive refuses other dtypes, so its hot path never holds their signatures.
    primitive = getattr(op, "primitive", None)

    def f(x: ArrayLike) -> Any:
        if primitive is not None and type(x) is Array:
            out = launch_cached(primitive, (x,))
            if out is not None:
                return out
        x = asarray(x) if not _is_array(x) else x
        dt = _unary_float_dtype(x.dtype)
        return _finish(op(_to_value(x, dt)), x)

    f.__name__ = name
    return f


exp = _unary_float(lax.exp, "exp")
log = _unary_float(lax.log, "log")
sqrt = _unary_float(lax.sqrt, "sqrt")
tanh = _unary_float(lax.tanh, "tanh")
sin = _unary_float(lax.sin, "sin")
cos = _unary_float(lax.cos, "cos")


def _unary_same(op: Any, name: str, int_identity: bool = False) -> Callable[[ArrayLike], Any]:
    def f(x: ArrayLike) -> Any:
        x = asarray(x) if not _is_array(x) else x
        if int_identity and not _is_float(x.dtype):
            return x
        return _finish(op(x), x)

    f.__name__ = name
    return f


negative = _unary_same(lax.neg, "negative")
abs = _unary_same(lax.abs, "abs")
absolute = abs
sign = _unary_same(lax.sign, "sign")
floor = _unary_same(lax.floor, "floor", int_identity=True)
ceil = _unary_same(lax.ceil, "ceil", int_identity=True)


def astype(x: ArrayLike, dtype: Any, copy: bool = True, device: Any = None) -> Any:
    """x converted to ``dtype`` (NumPy's casting: floats truncate toward zero into
    integers). ``copy=False`` returns x itself when nothing changes; True gives a new
    array (sharing x's immutable buffer, see :func:`asarray`)."""
    x = asarray(x) if not _is_array(x) else x
    dt = dtype_arg(dtype, "astype")
    if x.dtype != dt:
        return _placed(lax.convert(x, dt), device)
    if copy and isinstance(x, Array):
        return _placed(Array(x.buffer, weak=x.weak, committed=x.committed), device)
    return _placed(x, device)


def where(cond: ArrayLike, x: ArrayLike, y: ArrayLike) -> Any:
    a, b = _prepare("where", x, y)
    try:
        shape = broadcast_shapes(aval_of(cond).shape, a.shape)
    except ShapeError:
        raise _fail("where", "condition and values cannot be broadcast together", cond, x, y) from None
    c = broadcast_to(colocate([_to_value(cond, _np.dtype(bool)), a, b])[0], shape)
    return lax.select(c, broadcast_to(a, shape), broadcast_to(b, shape))


# ---------------------------------------------------------------------------- shapes


def _norm_axis(axis: int, ndim: int, name: str, x: Any) -> int:
    return axis_arg(axis, ndim, name, f"{aval_of(x)}")


def _norm_axes(axis: Any, ndim: int, name: str, x: Any) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = tuple(_norm_axis(a, ndim, name, x) for a in axes)
    if ndim == 0:
        return ()  # NumPy accepts axis 0 / -1 of a 0-d array: there is nothing to reduce
    if len(set(out)) != len(out):
        raise _fail(name, f"repeated axis in {axis}", x)
    return out


def reshape(x: ArrayLike, shape: Any, copy: bool | None = None) -> Any:
    """x with a new shape (one entry may be -1). axle arrays are immutable, so the result
    never aliases writable memory: ``copy`` (the array API's) changes nothing."""
    x = asarray(x) if not _is_array(x) else x
    shape = _reshape_arg(shape)
    if shape.count(-1) > 1:
        raise _fail("reshape", f"can only infer one dimension, got {shape}", x)
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or x.size % known:
            raise _fail("reshape", f"cannot reshape {x.size} elements into {shape}", x)
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    if math.prod(shape) != x.size:
        raise _fail("reshape", f"cannot reshape {x.size} elements into {shape}", x)
    return x if shape == x.shape else lax.reshape(x, shape)


def _reshape_arg(shape: Any) -> tuple[int, ...]:
    """reshape's shape: integers, at most one of them -1 (checked by the caller)."""
    if hasattr(shape, "__index__"):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, _np.ndarray)):
        raise ArgumentError(f"reshape: shape must be an int or a sequence of ints, got {shape!r}",
                            where=user_location())
    dims = tuple(size_arg(s, "reshape", lambda: f"shape {tuple(shape)!r}: each entry", -1) for s in shape)
    check_shape(tuple(builtins.max(d, 0) for d in dims), "reshape")
    return dims


def transpose(x: ArrayLike, axes: Any = None) -> Any:
    x = asarray(x) if not _is_array(x) else x
    perm = tuple(reversed(range(x.ndim))) if axes is None else tuple(_norm_axis(a, x.ndim, "transpose", x)
                                                                     for a in as_sequence(axes))
    if sorted(perm) != list(range(x.ndim)):
        raise _fail("transpose", f"axes {axes} are not a permutation of {x.ndim} dims", x)
    return x if perm == tuple(range(x.ndim)) else lax.transpose(x, perm)


def expand_dims(x: ArrayLike, axis: Any) -> Any:
    x = asarray(x) if not _is_array(x) else x
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    nd = x.ndim + len(axes)
    axes = tuple(sorted(axis_arg(a, nd, "expand_dims", f"{aval_of(x)}") for a in axes))
    if len(set(axes)) != len(axes):
        raise _fail("expand_dims", f"repeated axis in {axis}", x)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, shape)


def squeeze(x: ArrayLike, axis: Any = None) -> Any:
    x = asarray(x) if not _is_array(x) else x
    axes = tuple(i for i, d in enumerate(x.shape) if d == 1) if axis is None else _norm_axes(axis, x.ndim, "squeeze", x)
    for a in axes:
        if x.shape[a] != 1:
            raise _fail("squeeze", f"cannot squeeze axis {a} of size {x.shape[a]}", x)
    return reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])


# ------------------------------------------------------------------------ reductions


#: the hot-path attributes of a sum or product over every axis of an array of rank 1..8
_ALL_AXES = {(kind, n): (("kind", kind), ("axes", tuple(range(n)))) for kind in ("sum", "prod") for n in range(1, 9)}


def _reduce(kind: str, name: str, x: ArrayLike, axis: Any, keepdims: bool, dtype: Any = None) -> Any:
    if axis is None and dtype is None and not keepdims and type(x) is Array:
        # every axis of a concrete float array: exactly lax.reduce over them (an integer's
        # accumulator and the max or min of nothing need the checks below)
        buf = x._buffer
        attrs = _ALL_AXES.get((kind, len(buf.type.shape))) if buf is not None else None
        if attrs is not None and buf.type.dtype.is_float:  # type: ignore[union-attr]  # attrs: buf is set
            out = launch_cached(_Op.REDUCE, (x,), attrs)
            if out is not None:
                return out
    x = asarray(x) if not _is_array(x) else x
    axes = _norm_axes(axis, x.ndim, name, x)
    if dtype is not None:
        x = astype(x, dtype)
    elif kind in ("sum", "prod") and x.dtype.kind in "biu" and x.dtype.itemsize < 8:
        # NumPy accumulates small integers in the platform int (unsigned: uint64)
        x = astype(x, _np.uint64 if x.dtype.kind == "u" else _np.int64)
    if kind in ("max", "min") and builtins.any(x.shape[a] == 0 for a in axes):
        raise _fail(name, "zero-size array to reduction operation which has no identity", x)
    if x.dtype == _np.bool_ and kind in ("max", "min"):
        kind = "or" if kind == "max" else "and"
    # Sorted: the reduced set is the same, and opencl:0 reads garbage for unsorted axes
    # (reduce(f64[2,3], axes=(1, 0)) gave -7e78; reported with the bad-input suite).
    out = lax.reduce(x, kind, tuple(sorted(axes))) if axes else x
    if keepdims:
        out = reshape(out, [1 if i in axes else d for i, d in enumerate(x.shape)])
    return out


def sum(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    return _reduce("sum", "sum", x, axis, keepdims, dtype)


def prod(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    return _reduce("prod", "prod", x, axis, keepdims, dtype)


def max(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    return _reduce("max", "max", x, axis, keepdims)


def min(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    return _reduce("min", "min", x, axis, keepdims)


amax, amin = max, min


def mean(x: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    x = asarray(x) if not _is_array(x) else x
    axes = _norm_axes(axis, x.ndim, "mean", x)
    dt = _np.dtype(dtype) if dtype is not None else (x.dtype if _is_float(x.dtype) else _np.dtype(_np.float64))
    count = math.prod(x.shape[a] for a in axes)
    s = _reduce("sum", "mean", astype(x, dt), axis, keepdims)
    return true_divide(s, _np.asarray(count, dtype=dt))  # an empty mean is 0/0 = nan, as in NumPy


# ------------------------------------------------------------------------ linear algebra


#: dot_general's attributes for a matmul of two matrices, as lax.dot_general passes them
_MATMUL_2D = (("lhs_contracting", (1,)), ("rhs_contracting", (0,)), ("lhs_batch", ()), ("rhs_batch", ()))


def matmul(a: ArrayLike, b: ArrayLike) -> Any:
    # two concrete non-weak matrices of one dtype: exactly dot_general with _MATMUL_2D
    # (nothing to promote, reshape or broadcast), whose hot path knows the signatures
    # its rules accepted
    if type(a) is Array and type(b) is Array:
        ba, bb = a._buffer, b._buffer  # (None while pending: the checks below force nothing)
        if ba is not None and bb is not None and len(ba.type.shape) == 2 == len(bb.type.shape) \
                and ba.type.dtype is bb.type.dtype:
            out = launch_cached(_Op.DOT_GENERAL, (a, b), _MATMUL_2D)
            if out is not None:
                return out
    a, b = (asarray(v) if not _is_array(v) else v for v in (a, b))
    if a.ndim == 0 or b.ndim == 0:
        raise _fail("matmul", "operands must be at least 1-D; use multiply for scalars", a, b)
    orig = (a, b)  # errors name the user's operands, not their promoted copies
    dt = result_type(a, b)
    a, b = _to_value(a, dt), _to_value(b, dt)
    a2 = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise _fail("matmul", f"contracting dims differ: {a2.shape[-1]} vs {b2.shape[-2]}", *orig)
    if b2.ndim == 2:  # [..., M, K] @ [K, N]: one contraction, the matrix read in place (not
        # broadcast along the batch dims, which would copy it per batch and make its
        # gradient a batched product and a sum)
        out = lax.dot_general(a2, b2, (a2.ndim - 1,), (0,), (), ())
    else:
        out = _batched_matmul(a2, b2, orig)
    if a.ndim == 1:
        out = reshape(out, out.shape[:-2] + out.shape[-1:])
    if b.ndim == 1:
        out = reshape(out, out.shape[:-1])
    return out


def _batched_matmul(a2: Any, b2: Any, orig: tuple[Any, Any]) -> Any:
    """matmul of two operands of rank >= 2 whose right one has batch dims: both broadcast
    to the common batch shape, one batched dot_general."""
    try:
        batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ShapeError:
        raise _fail("matmul", "batch dims cannot be broadcast together", *orig) from None
    a3 = broadcast_to(a2, batch + a2.shape[-2:])
    b3 = broadcast_to(b2, batch + b2.shape[-2:])
    nb = len(batch)
    return lax.dot_general(a3, b3, (nb + 1,), (nb,), tuple(range(nb)), tuple(range(nb)))


def dot(a: ArrayLike, b: ArrayLike) -> Any:
    if aval_of(a).rank == 0 or aval_of(b).rank == 0:
        return multiply(a, b)
    return matmul(a, b)


# ------------------------------------------------------------------------ creation


def full(shape: Any, fill_value: Any, dtype: Any = None, device: Any = None) -> Any:
    with _on_device(device):
        return _placed(_full("full", shape, fill_value, dtype), device)


def _full(fn: str, shape: Any, fill_value: Any, dtype: Any) -> Any:
    """full() on behalf of ``fn`` (zeros, ones, empty...), which errors name."""
    if _is_array(fill_value):
        raise ArgumentError(f"{fn}: fill_value must be a scalar, got an array {aval_of(fill_value)}",
                            where=user_location())
    dt = dtype_arg(dtype, fn) if dtype is not None else host_array(fill_value, fn).dtype
    shape = shape_arg(shape, fn, dt.itemsize)
    scalar = scalar_arg(fill_value, dt, fn, "fill_value")
    if current_trace() is not None:
        return broadcast_to(_const(scalar), shape)
    return broadcast_to(asarray(scalar), shape)


def zeros(shape: Any, dtype: Any = None, device: Any = None) -> Any:
    with _on_device(device):  # dtype None: the default floating dtype, float64
        return _placed(_full("zeros", shape, 0, float if dtype is None else dtype), device)


def ones(shape: Any, dtype: Any = None, device: Any = None) -> Any:
    with _on_device(device):
        return _placed(_full("ones", shape, 1, float if dtype is None else dtype), device)


def _like_placed(x: Any, device: Any, make: Callable[[], Any]) -> Any:
    """``make()`` placed for a ``*_like(x)`` function: on ``device`` when one is named, else
    on x's device (the array API standard infers it from x; jax keeps x's placement),
    committed when x is. Not on the default device, which in a loop over arrays of another
    device made one more transfer and cut auto-mode clusters per iteration."""
    if device is None and isinstance(x, Array):
        with _on_device(x.device):
            out = make()
        return _placed(out, x.device) if x.committed else out
    with _on_device(device):
        return _placed(make(), device)


def zeros_like(x: ArrayLike, dtype: Any = None, device: Any = None) -> Any:
    return _like_placed(x, device, lambda: _full("zeros_like", aval_of(x).shape, 0, dtype or aval_of(x).dtype.np))


def ones_like(x: ArrayLike, dtype: Any = None, device: Any = None) -> Any:
    return _like_placed(x, device, lambda: _full("ones_like", aval_of(x).shape, 1, dtype or aval_of(x).dtype.np))


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: Any = None) -> Any:
    with _on_device(device):
        return _placed(_arange(start, stop, step, dtype), device)


def _arange(start: Any, stop: Any, step: Any, dtype: Any) -> Any:
    if stop is None:
        start, stop = 0, start
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        finite_number(v, "arange", what)
    nonzero_step(step, "arange")
    n = builtins.max(0, math.ceil((stop - start) / step))
    dt = dtype_arg(dtype, "arange") if dtype is not None else _np.result_type(start, stop, step)
    dt = dtype_arg(dt, "arange")
    check_shape((n,), "arange", dt.itemsize)
    idx = lax.iota(dt, (n,), 0) if n else asarray(_np.zeros((0,), dt))
    if start == 0 and step == 1:
        return idx
    return add(multiply(idx, _np.asarray(step, dt)), _np.asarray(start, dt))


# ------------------------------------------------------------------------ indexing


def _is_basic_index(i: Any) -> bool:
    return i is None or i is Ellipsis or isinstance(i, builtins.slice) or (
        isinstance(i, (int, _np.integer)) and not isinstance(i, (bool, _np.bool_)))


def _basic_plan(x: Any, idx: tuple) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """start/limit/stride of the slice, the dims to reverse, and the result shape of a
    basic index (ints, slices of any step, None, Ellipsis)."""
    if builtins.sum(1 for i in idx if i is Ellipsis) > 1:
        raise _fail("getitem", "an index can only have a single ellipsis", x)
    n_real = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis)
    if n_real > x.ndim:
        raise _fail("getitem", f"too many indices ({n_real}) for an array of rank {x.ndim}", x)
    pos = next((k for k, i in enumerate(idx) if i is Ellipsis), len(idx))
    idx = idx[:pos] + (builtins.slice(None),) * (x.ndim - n_real) + idx[pos + 1:]
    start: list[int] = []
    limit: list[int] = []
    stride: list[int] = []
    flips: list[int] = []
    out_shape: list[int] = []
    dim = 0
    for i in idx:
        if i is None:
            out_shape.append(1)
            continue
        n = x.shape[dim]
        if isinstance(i, (int, _np.integer)):
            k = int(i)
            if not -n <= k < n:
                raise _fail("getitem", f"index {k} is out of bounds for axis {dim} with size {n}", x)
            k %= n
            start.append(k)
            limit.append(k + 1)
            stride.append(1)
        else:
            s, l, st = i.indices(n)
            if st > 0:
                cnt = builtins.max(0, (l - s + st - 1) // st)
                start.append(s)
                limit.append(s + (cnt - 1) * st + 1 if cnt else s)
                stride.append(st)
            else:
                cnt = builtins.max(0, (s - l - st - 1) // (-st))
                # reversed view: slice the mirrored range, then flip
                lo = s + (cnt - 1) * st if cnt else 0
                start.append(lo)
                limit.append(s + 1 if cnt else 0)
                stride.append(-st)
                flips.append(dim)
            out_shape.append(cnt)
        dim += 1
    return start, limit, stride, flips, out_shape


def moveaxis(x: ArrayLike, source: Any, destination: Any, /) -> Any:
    """Moves axes ``source`` (an int or a tuple) to ``destination`` (of the same length);
    the other axes keep their order."""
    x = asarray(x) if not _is_array(x) else x
    src = tuple(_norm_axis(a, x.ndim, "moveaxis", x) for a in as_sequence(source))
    dst = tuple(_norm_axis(a, x.ndim, "moveaxis", x) for a in as_sequence(destination))
    if len(src) != len(dst):
        raise _fail("moveaxis", f"source {source!r} and destination {destination!r} name different numbers of "
                    f"axes", x)
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise _fail("moveaxis", f"repeated axis in source {source!r} or destination {destination!r}", x)
    rest = iter(a for a in range(x.ndim) if a not in src)
    placed = dict(zip(dst, src))
    return transpose(x, tuple(placed[i] if i in placed else next(rest) for i in range(x.ndim)))
