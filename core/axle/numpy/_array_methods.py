"""The operators and methods of axle arrays (concrete ``Array`` and traced ``Tracer``
alike), attached to their common base ``ArrayOps`` when axle.numpy is imported, as JAX's
``_array_methods`` does: the frontend's array classes need nothing from axle.numpy, and
``x + y`` is exactly ``axle.numpy.add(x, y)``. ``import axle`` imports axle.numpy."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..frontend.arrayops import ArrayOps
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
from ._index import _AtIndexer, getitem, take
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


METHODS: dict[str, Callable[..., Any]] = {
    "__getitem__": lambda self, idx: getitem(self, idx),
    "reshape": _reshape,
    "transpose": _transpose,
    "astype": lambda self, dtype: astype(self, dtype),
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
