"""OnnxFunction: an ONNX model as a function over arrays, compiled by axle.jit."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .. import numpy as anp
from ..errors import ArgumentError, DTypeError
from ..frontend.device_put import device_put
from ..frontend.jit import JitFunction, jit
from ..frontend.tracing import Tracer, current_trace
from ..ir.builder import make_node
from ..ir.literal import Literal
from ..ir.ops import Op
from .check import default_opset, problems, subgraphs, walk
from .fold import fold_batch_norms
from .graph import run_graph
from .table import DTYPES, OPS, OnnxImportError

#: element types whose graph inputs may fix shapes (a Reshape's shape fed as an input):
#: such an input used at a static position is taken by value, one compile per value
_SHAPE_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL})
#: ops whose outputs do not depend on their inputs' values, only on their shapes
_SHAPE_ONLY = frozenset({"Shape", "Size"})


def _static_names(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    """(names used at a static input of a node (sub-graphs too), those and the names they
    are computed from, back through the nodes (except Shape / Size, which read shapes only))."""
    nodes = [n for _, n, _g in walk(graph)]
    direct: set[str] = set()
    for n in nodes:
        entry = OPS.get(n.op_type)
        for k in entry.static if entry else ():
            if k < len(n.input) and n.input[k]:
                direct.add(n.input[k])
    names = set(direct)
    size = -1
    while size != len(names):  # to a fixed point: a sub-graph's nodes follow the node that owns them
        size = len(names)
        for n in reversed(nodes):
            if n.op_type not in _SHAPE_ONLY and any(o in names for o in n.output):
                names.update(i for i in n.input if i)
                for g in subgraphs(n):  # an If's / Loop's outputs come from its sub-graphs' outputs
                    names.update(o.name for o in g.output)
    return direct, names


def _load_model(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_model_from_string(model)
    if isinstance(model, str | os.PathLike):
        if not os.path.exists(model):
            raise ArgumentError(f"axle.onnx.load: no such file {os.fspath(model)!r}")
        try:
            return onnx.load(os.fspath(model))
        except Exception as e:  # noqa: BLE001 - a corrupt file is the user's input: say so as an axle error
            raise ArgumentError(f"axle.onnx.load: {os.fspath(model)!r} is not an ONNX model ({e})") from None
    raise ArgumentError(f"axle.onnx.load: expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")


def _constant(lit: Literal) -> Any:
    """An initializer inside the trace: a constant node holding the function's Literal
    itself (not a copy of its array, as a captured NumPy array would be)."""
    trace = current_trace()
    if trace is None:  # (jit traces the model, so there is one; the array is read-only)
        return lit.array
    return Tracer(trace, make_node(Op.CONSTANT, (), {"value": lit}))


def _drop_data(t: onnx.TensorProto) -> None:
    """Empties a tensor's payload, keeping its name, type and dims."""
    for field in ("raw_data", "float_data", "double_data", "int32_data", "int64_data", "uint64_data"):
        t.ClearField(field)


class OnnxFunction:
    """An ONNX model as a function: ``f(x, y)``, ``f(x=..., y=...)`` -> tuple of outputs
    (``as_dict=True``: a dict by output name). Compiled by ``axle.jit`` on the first call
    per input shapes (and per value of the integer inputs that fix shapes); traceable inside
    jit, grad and vmap like any axle function.

    ``constants=True``: the initializers are compile-time constants, as ONNX Runtime takes
    them: the optimizer folds what they compute, a batch normalization after
    a convolution is folded into its weights (onnx/fold.py), the cpu backend packs GEMM
    weights once and convolution weights are put in the device's layout once, and the
    compile cache stores them beside its entries (axle.constant_store). Each is held once,
    as a Literal shared by every trace; a model read here from a file or bytes drops its
    own copy of them (``self.model``'s initializers are then empty). ``constants=False`` (the
    default): device arrays made once and passed to the compiled function as arguments
    (faster on two threads as measured so far, smaller compiles and cache entries:
    docs/onnx.md, "Initializers")."""

    def __init__(self, model: Any, device: Any = None, name: str | None = None, constants: bool = False) -> None:
        self.model = _load_model(model)
        owned = self.model is not model  # read from a file or bytes here: no one else holds it
        self.name = name or self.model.graph.name or "onnx_model"
        found = problems(self.model)
        if found:
            raise OnnxImportError(found, self.name)
        graph = self.model.graph
        self.opset = default_opset(self.model)
        self.device = device
        init = {i.name: i for i in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in init]
        self.output_names = [o.name for o in graph.output]
        self._input_types = {i.name: i.type.tensor_type for i in graph.input if i.name not in init}
        direct, static = _static_names(graph)
        # an input that fixes a shape is taken by value: directly (a Range bound, a depth), or
        # through other nodes when it is an integer (a shape computed from it)
        self.static_inputs = [n for n in self.input_names if n in direct or
                              n in static and self._input_types[n].elem_type in _SHAPE_TYPES]
        arrays = {n: numpy_helper.to_array(t) for n, t in init.items()}
        # initializers that fix shapes stay host constants
        self._host = {n: a for n, a in arrays.items() if n in static or a.size == 0}
        self.constants = bool(constants)
        #: the graph traced: the model's, or with its Conv -> BatchNormalization pairs folded
        self._graph = graph
        self._consts: dict[str, Literal] = {}
        self._param_names: list[str] = []
        self._params: list[Any] = []
        rest = {n: a for n, a in arrays.items() if n not in self._host}
        del arrays
        if self.constants:
            # compile-time constants, as ONNX Runtime takes them (docs/onnx.md, "Initializers"):
            # each one Literal, shared by every trace (its digest, the compile cache's name
            # for it, computed once); the folded weights replace the ones they were made from
            folded = fold_batch_norms(graph, rest)
            if folded is not None:
                self._graph, extra = folded
                rest.update(extra)
                read = {i for _, n, _g in walk(self._graph) for i in n.input} | {o.name for o in graph.output}
                rest = {n: a for n, a in rest.items() if n in read}
            while rest:
                n, a = rest.popitem()  # (the NumPy copy goes as its Literal is made)
                self._consts[n] = Literal(a, adopt=True)
            if owned:  # the Literals hold the weights from now on: the model's copy goes
                for t in graph.initializer:
                    if t.name not in self._host:
                        _drop_data(t)
        else:
            # device arrays made once, passed to the compiled function as arguments
            self._param_names = list(rest)
            self._params = [device_put(rest[n], device) for n in self._param_names]
        self._jits: dict[tuple, JitFunction] = {}

    # -- calling

    def _arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        if len(args) > len(self.input_names):
            raise ArgumentError(f"{self.name}: {len(args)} positional inputs given, the model takes "
                                f"{len(self.input_names)} ({', '.join(self.input_names)})")
        vals = dict(zip(self.input_names, args))
        for k, v in kwargs.items():
            if k not in self.input_names:
                raise ArgumentError(f"{self.name}: no input named {k!r} (inputs: {', '.join(self.input_names)})")
            if k in vals:
                raise ArgumentError(f"{self.name}: input {k!r} given twice")
            vals[k] = v
        missing = [n for n in self.input_names if n not in vals]
        if missing:
            raise ArgumentError(f"{self.name}: missing inputs {missing}")
        for n, v in vals.items():
            self._check_input(n, v)
        return vals

    def _check_input(self, name: str, v: Any) -> None:
        t = self._input_types[name]
        dt = np.dtype(v.dtype if hasattr(v, "dtype") else np.asarray(v).dtype)
        want = DTYPES.get(t.elem_type)
        if want is not None and dt != want:
            raise DTypeError(f"{self.name}: input {name!r} must be {want}, got {dt}")
        shape = tuple(v.shape if hasattr(v, "shape") else np.shape(v))
        if t.HasField("shape"):
            dims = t.shape.dim
            if len(dims) != len(shape) or any(d.HasField("dim_value") and d.dim_value != s
                                               for d, s in zip(dims, shape)):
                declared = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
                raise ArgumentError(f"{self.name}: input {name!r} has shape {shape}, the model declares {declared}")

    def _jit_for(self, static: dict[str, np.ndarray]) -> JitFunction:
        key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in static.items())
        fn = self._jits.get(key)
        if fn is None:
            dyn = [n for n in self.input_names if n not in static]
            graph, opset, host, params, consts = self._graph, self.opset, self._host, self._param_names, self._consts

            def run(*args: Any) -> tuple[Any, ...]:
                env = {**host, **static, **{n: _constant(v) for n, v in consts.items()},
                       **dict(zip(dyn + params, args))}
                return tuple(anp.asarray(o) for o in run_graph(graph, env, opset))

            run.__name__ = self.name.replace("-", "_").replace(".", "_")
            fn = jit(run, device=self.device)
            self._jits[key] = fn
        return fn

    def __call__(self, *args: Any, as_dict: Any = False, **kwargs: Any) -> Any:
        vals = self._arguments(args, kwargs)
        static = {n: np.asarray(vals[n]) for n in self.static_inputs}
        dyn = [vals[n] for n in self.input_names if n not in static]
        outs = self._jit_for(static)(*dyn, *self._params)
        return dict(zip(self.output_names, outs)) if as_dict else tuple(outs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """The jit ``Lowered`` of a call (``.explain()``, the module), without running it."""
        vals = self._arguments(args, kwargs)
        static = {n: np.asarray(vals[n]) for n in self.static_inputs}
        dyn = [vals[n] for n in self.input_names if n not in static]
        return self._jit_for(static).lower(*dyn, *self._params)

    def __repr__(self) -> str:
        return f"<axle.onnx function {self.name}: ({', '.join(self.input_names)}) -> " \
               f"({', '.join(self.output_names)}), opset {self.opset}>"


def load(model: Any, device: Any = None, constants: bool = False) -> OnnxFunction:
    """An ONNX model (a path, bytes or onnx.ModelProto) as an axle function; raises
    OnnxImportError listing every unsupported node before anything runs. ``constants``:
    initializers as compile-time constants, or as arguments (the default; OnnxFunction)."""
    return OnnxFunction(model, device=device, constants=constants)


def check(model: Any) -> list[str]:
    """Every reason the importer cannot run ``model`` (empty when it can try)."""
    return problems(_load_model(model))
