"""The one table of ONNX ops: op type -> (converter, supported opset range, inputs that
must be constants, attribute checks). A converter maps one ONNX node onto axle.lax /
axle.numpy / axle.nn on traced values; :mod:`axle.onnx.graph` calls it and
:mod:`axle.onnx.check` reads the table to refuse a model before anything runs."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from ..errors import AxleError

#: the oldest opset of the default domain the importer takes; the newest is the onnx
#: package's own (onnx.defs.onnx_opset_version())
MIN_OPSET = 13
MAX_OPSET = onnx.defs.onnx_opset_version()


class OnnxImportError(AxleError):
    """An ONNX model (or one of its nodes) that the importer cannot run: each problem names
    the node, its op type, the opset and the reason."""

    def __init__(self, problems: Sequence[str], model: str = "model") -> None:
        self.problems = list(problems)
        head = f"{model}: {len(self.problems)} unsupported node{'s' if len(self.problems) != 1 else ''}"
        super().__init__(head + "".join(f"\n  - {p}" for p in self.problems))


class Unsupported(Exception):
    """Raised by a converter or an attribute check: this node cannot be imported, for
    ``reason``. :mod:`axle.onnx.graph` adds the node's name, op type and opset."""


@dataclass
class NodeCtx:
    """A node as a converter sees it: its attributes (with defaults), the opset of its
    domain, the since-version of the op's schema at that opset, and a sub-graph runner
    for control flow (set by the graph evaluator)."""

    proto: onnx.NodeProto
    opset: int
    since: int
    run_subgraph: Callable[..., list[Any]] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.attrs = {a.name: helper.get_attribute_value(a) for a in self.proto.attribute}

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    def attr(self, name: str, default: Any = None) -> Any:
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v

    def ints(self, name: str, default: Sequence[int] | None = None) -> list[int] | None:
        v = self.attrs.get(name)
        return [int(i) for i in v] if v is not None else (list(default) if default is not None else None)


Converter = Callable[..., Any]
AttrCheck = Callable[[NodeCtx], "str | None"]


@dataclass(frozen=True)
class OpEntry:
    """One ONNX op: its converter (``fn(ctx, *inputs) -> value or tuple``), the opset range
    of the default domain it supports, the input positions that must be constants (shapes,
    axes, pads: a traced value there cannot fix the output's shape), and an optional check
    of attribute values that returns a reason to refuse."""

    op_type: str
    fn: Converter
    since: int = MIN_OPSET
    until: int = MAX_OPSET
    static: tuple[int, ...] = ()
    check: AttrCheck | None = None
    doc: str = ""


#: op type -> entry; filled by the ops_* modules through :func:`register`
OPS: dict[str, OpEntry] = {}


def register(names: str | Sequence[str], *, since: int = MIN_OPSET, until: int = MAX_OPSET,
             static: tuple[int, ...] = (), check: AttrCheck | None = None,
             doc: str = "") -> Callable[[Converter], Converter]:
    """Adds ``fn`` to :data:`OPS` under each name."""
    def add(fn: Converter) -> Converter:
        for n in [names] if isinstance(names, str) else names:
            assert n not in OPS, n
            OPS[n] = OpEntry(n, fn, since, until, static, check, doc or (fn.__doc__ or "").strip().split("\n")[0])
        return fn
    return add


def choice(attr: str, allowed: Sequence[Any], default: Any) -> AttrCheck:
    """An attribute check: ``attr`` must be one of ``allowed``."""
    def check(ctx: NodeCtx) -> str | None:
        v = ctx.attr(attr, default)
        return None if v in allowed else f"attribute {attr}={v!r} is not supported (supported: {list(allowed)})"
    return check


def all_checks(*checks: AttrCheck) -> AttrCheck:
    def check(ctx: NodeCtx) -> str | None:
        for c in checks:
            r = c(ctx)
            if r:
                return r
        return None
    return check


#: ONNX tensor element types the importer maps (every other one, string, complex, the
#: float8/float4/int4 families, is out of scope: axle has no such dtype)
DTYPES: dict[int, np.dtype] = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32), onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16), onnx.TensorProto.INT8: np.dtype(np.int8),
    onnx.TensorProto.INT16: np.dtype(np.int16), onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.INT64: np.dtype(np.int64), onnx.TensorProto.UINT8: np.dtype(np.uint8),
    onnx.TensorProto.UINT16: np.dtype(np.uint16), onnx.TensorProto.UINT32: np.dtype(np.uint32),
    onnx.TensorProto.UINT64: np.dtype(np.uint64), onnx.TensorProto.BOOL: np.dtype(np.bool_),
    onnx.TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
}


def dtype_of(elem_type: int, what: str) -> np.dtype:
    """The NumPy dtype of an ONNX element type; Unsupported for one axle lacks."""
    dt = DTYPES.get(elem_type)
    if dt is None:
        raise Unsupported(f"{what}: dtype {onnx.TensorProto.DataType.Name(elem_type)} is outside axle's dtypes")
    return dt
