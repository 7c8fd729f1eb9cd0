"""Tracing: abstract values (Tracer) recorded into a Builder, and the abstract value of
any argument (``aval_of``, ``leaf_aval``). Applying a primitive, traced or eager, is
``bind`` (frontend/bind.py)."""
from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

from ..errors import DTypeError, TracingError
from ..forksafe import renew_in_child
from ..ir.builder import Builder, make_node
from ..ir.dtypes import DType, is_float_numpy
from ..ir.dtypes import dtype as to_dtype
from ..ir.literal import Literal
from ..ir.module import Node
from ..ir.ops import Op
from ..ir.types import TensorType
from .array import Array
from .arrayops import ArrayOps
from .source import user_location
from .validate import check_host_dtype, host_array


class Trace:
    """One tracing session: a builder and the tracers it made."""

    def __init__(self, name: str) -> None:
        self.builder = Builder(name)
        self.active = True
        #: (flag, message, where) of traced index checks (--check_indices), see checks.py
        self.index_checks: list[tuple[Any, str, str | None]] = []

    def new_arg(self, t: TensorType, name: str, weak: bool = False) -> Tracer:
        return Tracer(self, self.builder.parameter(t, name=name), weak=weak)

    def to_node(self, x: Any, fn: str = "jit") -> Node:
        if isinstance(x, Tracer):
            if x.trace is not self:
                raise TracingError(
                    "a traced value escaped its jit function (it was stored outside and used later); "
                    "return it from the function instead", where=user_location())
            return x.node
        arr = host_array(x, fn)  # a captured constant keeps its exact value or is refused
        return make_node(Op.CONSTANT, (), {"value": Literal(arr)}, loc=user_location())


_state = threading.local()
#: trace contexts and ``jit_scope`` blocks open in any thread, changed under ``_open_lock``
#: by :func:`scope_opened`: while it is 0, eager dispatch's hot path need not read this
#: thread's trace stack and scope depth (a one-element list: read without the lock)
OPEN_SCOPES = [0]
_open_lock = threading.Lock()
renew_in_child(sys.modules[__name__], "_open_lock")


def scope_opened(delta: int) -> None:
    """Counts a trace context or lazy scope opening (+1) or closing (-1) in any thread."""
    with _open_lock:
        OPEN_SCOPES[0] += delta


def current_trace() -> Trace | None:
    stack = getattr(_state, "traces", None)
    return stack[-1] if stack else None


class trace_context:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def __enter__(self) -> Trace:
        if not hasattr(_state, "traces"):
            _state.traces = []
        _state.traces.append(self.trace)
        scope_opened(1)
        return self.trace

    def __exit__(self, *exc: object) -> None:
        _state.traces.pop()
        scope_opened(-1)
        self.trace.active = False


class Tracer(ArrayOps):
    """An abstract array inside a jit function: shape and dtype known, values not."""

    __slots__ = ("trace", "node", "weak")
    __array_priority__ = 1000

    def __init__(self, trace: Trace, node: Node, weak: bool = False) -> None:
        self.trace = trace
        self.node = node
        self.weak = weak

    def _rebind(self, other: Tracer) -> None:
        """``x[i] = v`` inside jit: this tracer now stands for other's value."""
        self.node = other.node

    @property
    def aval(self) -> TensorType:
        return self.node.tensor_type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.tensor_type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.node.tensor_type.dtype.np

    def _concrete_error(self, what: str) -> TracingError:
        return TracingError(
            f"{what} needs the value of a traced array ({self.aval}, produced by "
            f"{self.node.op.value}), which is unknown while tracing; use axle.numpy.where or "
            f"mark the argument static (static_argnums)", where=user_location())

    def __bool__(self) -> bool:
        raise self._concrete_error("Python control flow (if/while/and/or/bool())")

    def __int__(self) -> int:
        raise self._concrete_error("int()")

    def __float__(self) -> float:
        raise self._concrete_error("float()")

    def __index__(self) -> int:
        raise self._concrete_error("using it as an index")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise self._concrete_error("conversion to a NumPy array")

    def __repr__(self) -> str:
        return f"Tracer<{self.aval}>"


def aval_of(x: Any) -> TensorType:
    if isinstance(x, (Tracer,)):
        return x.aval
    if isinstance(x, Array):
        return x.aval
    arr = host_array(x, "axle")
    return TensorType(to_dtype(arr.dtype), arr.shape)


def leaf_aval(x: Any) -> tuple[TensorType, bool]:
    """(type, weak) of one leaf of a jit argument: an array, a tracer, a Python scalar
    (weak) or NumPy data; anything else is refused with the argument named."""
    if isinstance(x, (Array, Tracer)):
        return x.aval, bool(x.weak)
    if isinstance(x, (bool, int, float)):
        arr = host_array(x, "jit argument")  # a Python int beyond int64 is refused
        return TensorType(to_dtype(arr.dtype), ()), True
    arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    if arr.dtype.kind not in "biuf" and not is_float_numpy(arr.dtype):
        raise DTypeError(f"jit argument: a {type(x).__name__} of dtype {arr.dtype} (shape {arr.shape}) is not "
                         f"an array axle supports; convert it, or mark the argument static (static_argnums)",
                         where=user_location())
    check_host_dtype(arr, "jit argument")  # complex, longdouble...: refused, never converted
    return TensorType(to_dtype(arr.dtype), arr.shape), False


def constant_value(x: Any) -> np.ndarray | None:
    """The value of a tracer that is a constant (NumPy data captured while tracing), so
    that what is known is checked at trace time; None for a value computed at run time."""
    if isinstance(x, Tracer) and x.node.op is Op.CONSTANT:
        return dict(x.node.attrs)["value"].array
    return None


def is_weak(x: Any) -> bool:
    return isinstance(x, (bool, int, float)) or bool(getattr(x, "weak", False))


def check_dtype(x: Any) -> DType:
    return aval_of(x).dtype


__all__ = ["Trace", "Tracer", "current_trace", "trace_context", "aval_of", "leaf_aval", "is_weak"]
