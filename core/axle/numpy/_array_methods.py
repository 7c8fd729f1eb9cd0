"""The operators and methods of axle arrays (concrete ``Array`` and traced ``Tracer``
alike), attached to their common base ``ArrayOps`` when axle.numpy is imported, as JAX's
``_array_methods`` does: the frontend's array classes need nothing from axle.numpy, and
``x + y`` is exactly ``axle.numpy.add(x, y)``. ``import axle`` imports axle.numpy."""
from __future__ import annotations

import sys
from collections.abc import Callable
from types import FunctionType
from typing import Any

import numpy as _np

from ..errors import ArgumentError
from ..frontend.array import Array
from ..frontend.arrayops import ArrayOps
from ..frontend.device_put import device_put
from ..frontend.source import user_location
from ._api_shape import copy, matrix_transpose
from ._core import (
    abs,
    astype,
    bitwise_and,
    bitwise_or,
    dot,
    equal,
    floor_divide,
    greater,
    greater_equal,
    invert,
    less,
    less_equal,
    matmul,
    max,
    mean,
    min,
    multiply,
    negative,
    not_equal,
    power,
    prod,
    remainder,
    reshape,
    squeeze,
    subtract,
    sum,
    transpose,
    true_divide,
)
from ._core import add as _add
from ._elementwise import bitwise_left_shift, bitwise_right_shift, bitwise_xor, clip
from ._index import _AtIndexer, _AtRef, getitem, take
from ._math import all, any, argmax, argmin, std, var
from ._shape import swapaxes

#: ``__name__`` and ``__rname__`` for each binary operator
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": _add, "sub": subtract, "mul": multiply, "truediv": true_divide, "floordiv": floor_divide,
    "mod": remainder, "pow": power, "matmul": matmul, "and": bitwise_and, "or": bitwise_or,
    "xor": bitwise_xor, "lshift": bitwise_left_shift, "rshift": bitwise_right_shift,
}
#: comparisons (no reflected form: Python swaps ``<`` and ``>`` itself)
COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "lt": less, "le": less_equal, "gt": greater, "ge": greater_equal, "eq": equal, "ne": not_equal,
}
UNARY: dict[str, Callable[[Any], Any]] = {"neg": negative, "abs": abs, "invert": invert}


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    if isinstance(fn, FunctionType):  # binds as a method itself: no frame in between (x + y)
        return fn
    return lambda self, o: fn(self, o)


def _reflected(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda self, o: fn(o, self)


def _unary(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda self: fn(self)


def _shape_args(args: tuple[Any, ...]) -> Any:
    """``x.reshape(2, 3)`` and ``x.reshape((2, 3))`` alike."""
    return args[0] if len(args) == 1 and not isinstance(args[0], int) else args


def _reshape(self: Any, *shape: Any) -> Any:
    return reshape(self, _shape_args(shape))


def _transpose(self: Any, *axes: Any) -> Any:
    return transpose(self, _shape_args(axes) or None)


def _reduction(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda self, axis=None, keepdims=False: fn(self, axis, keepdims=keepdims)


def _positional_reduction(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda self, axis=None, keepdims=False: fn(self, axis, keepdims)


def _moment(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda self, axis=None, ddof=0, keepdims=False: fn(self, axis, ddof=ddof, keepdims=keepdims)


def _namespace(self: Any, api_version: str | None = None) -> Any:
    """The array API namespace of axle arrays: axle.numpy (2024.12; older revisions it
    also satisfies are accepted)."""
    if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12", "2024.12"):
        raise ArgumentError(f"__array_namespace__: api_version {api_version!r} is not supported; axle.numpy "
                            f"implements 2024.12", where=user_location())
    return sys.modules[__package__]


def _setitem(self: Any, idx: Any, value: Any) -> None:
    """``x[idx] = v``: x becomes ``x.at[idx].set(v)``. The array object is rebound to the
    new value; buffers are never written, so arrays that shared x's old value keep it."""
    self._rebind(_AtRef(self, idx).set(value))


def _to_device(self: Any, device: Any, /, *, stream: Any = None) -> Any:
    if stream is not None:
        raise ArgumentError("to_device: axle has no streams; pass stream=None", where=user_location())
    return device_put(self, device)


def _dlpack(self: Any, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
            copy: bool | None = None) -> Any:
    """DLPack export of the host copy of the values: zero-copy from host devices (cpu:0
    and interpreter:0 hold their buffers in host memory), one copy from the others. The
    export is read-only (axle buffers are immutable); a consumer that can not take a
    read-only tensor (DLPack < 1.0) gets a copy unless copy=False."""
    if not isinstance(self, Array):
        raise ArgumentError("__dlpack__: a traced array has no values to export; call it outside jit",
                            where=user_location())
    host = self.numpy()
    try:
        return host.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
    except BufferError:
        if copy is False:
            raise
        return _np.array(host).__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device)


def _dlpack_device(self: Any) -> tuple[int, int]:
    return (1, 0)  # kDLCPU: the export above is host memory


METHODS: dict[str, Callable[..., Any]] = {
    "__setitem__": _setitem,
    "__array_namespace__": _namespace,
    "to_device": _to_device,
    "__dlpack__": _dlpack,
    "__dlpack_device__": _dlpack_device,
    "__complex__": lambda self: complex(float(self)),
    "copy": lambda self: copy(self),

    "__getitem__": lambda self, idx: getitem(self, idx),
    "reshape": _reshape,
    "transpose": _transpose,
    "astype": lambda self, dtype, copy=True: astype(self, dtype, copy=copy),
    **{name: _reduction(fn) for name, fn in (("sum", sum), ("mean", mean), ("max", max), ("min", min),
                                             ("prod", prod))},
    **{name: _positional_reduction(fn) for name, fn in (("argmax", argmax), ("argmin", argmin), ("all", all),
                                                        ("any", any))},
    "var": _moment(var),
    "std": _moment(std),
    "clip": lambda self, min=None, max=None, **kw: clip(self, min, max, **kw),  # noqa: A006 - the standard's names
    "squeeze": lambda self, axis=None: squeeze(self, axis),
    "swapaxes": lambda self, a, b: swapaxes(self, a, b),
    "dot": lambda self, o: dot(self, o),
    "take": lambda self, indices, axis=None: take(self, indices, axis),
    "flatten": lambda self: reshape(self, (-1,)),
    "ravel": lambda self: reshape(self, (-1,)),
}
PROPERTIES: dict[str, Callable[[Any], Any]] = {
    "at": _AtIndexer,  # functional updates: x.at[idx].set(v), .add(v), .get()
    "T": transpose,
    "mT": matrix_transpose,
}


def attach(cls: type) -> None:
    """Gives ``cls`` the operators, methods and properties of the tables above."""
    for name, fn in BINARY.items():
        setattr(cls, f"__{name}__", _binary(fn))
        setattr(cls, f"__r{name}__", _reflected(fn))
    for name, fn in COMPARE.items():
        setattr(cls, f"__{name}__", _binary(fn))
    for name, fn in UNARY.items():
        setattr(cls, f"__{name}__", _unary(fn))
    for name, fn in METHODS.items():
        setattr(cls, name, fn)
    for name, fn in PROPERTIES.items():
        setattr(cls, name, property(fn))


attach(ArrayOps)
