"""Evaluates an ONNX graph node by node through the converters of :data:`OPS`, on traced
axle values (inside jit) and host constants (NumPy arrays: initializers that fix shapes,
Constant nodes, shapes of traced values).

A node whose inputs are all host constants is folded on the host by the onnx package's
reference evaluator (the shape arithmetic of exported models: Shape -> Gather -> Concat ->
Reshape), so that the values that fix output shapes stay concrete, as jit needs them."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from ..errors import AxleError
from .table import OPS, NodeCtx, OnnxImportError, Unsupported

#: ops never folded on the host: random draws (each call differs) and control flow
#: (its sub-graphs may read traced values of the enclosing scope)
NO_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "If", "Loop", "Scan", "Dropout"})


def node_name(node: onnx.NodeProto, index: int | None = None) -> str:
    return node.name or (f"{node.op_type}#{index}" if index is not None else node.op_type)


def describe(node: onnx.NodeProto, opset: int, reason: str, index: int | None = None) -> str:
    """One problem line: node name, op type, opset, reason."""
    return f"node {node_name(node, index)!r} ({node.op_type}, opset {opset}): {reason}"


def is_host(v: Any) -> bool:
    return isinstance(v, np.ndarray | np.generic)


def schema_since(op_type: str, opset: int) -> int:
    """The since-version of ``op_type``'s schema at ``opset`` (the version whose semantics
    apply); ``opset`` when the onnx package has no schema for it."""
    try:
        return int(onnx.defs.get_schema(op_type, opset).since_version)
    except onnx.defs.SchemaError:
        return opset


def _fold(node: onnx.NodeProto, inputs: Sequence[Any], opset: int) -> list[Any] | None:
    """The node's outputs computed on the host by onnx's reference evaluator, or None when
    it cannot (then the converter runs)."""
    feeds = {n: np.asarray(v) for n, v in zip(node.input, inputs) if n}
    try:
        outs = ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)
    except Exception:  # noqa: BLE001 - any failure of the reference just means: convert it instead
        return None
    if not all(isinstance(o, np.ndarray) for o in outs):
        return None
    return list(outs)


def _outputs(node: onnx.NodeProto, result: Any) -> list[Any]:
    outs = list(result) if isinstance(result, tuple | list) else [result]
    n = len(node.output)
    if len(outs) < n:  # optional outputs the converter does not compute: none may be asked for
        missing = [o for o in node.output[len(outs):] if o]
        if missing:
            raise Unsupported(f"optional outputs {missing} are not supported")
    return outs[:n]


def run_node(node: onnx.NodeProto, env: dict[str, Any], opset: int, index: int | None = None) -> None:
    """Evaluates one node, writing its outputs into ``env``."""
    try:
        entry = OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if entry is None:
            default = node.domain in ("", "ai.onnx")
            raise Unsupported("unsupported op" if default else f"unsupported domain {node.domain!r}")
        inputs = [env[n] if n else None for n in node.input]
        folded = None
        if node.op_type not in NO_FOLD and node.input and all(v is None or is_host(v) for v in inputs):
            folded = _fold(node, inputs, opset)
        if folded is not None:
            outs = folded
        else:
            for k in entry.static:
                if k < len(inputs) and inputs[k] is not None and not is_host(inputs[k]):
                    raise Unsupported(f"input {k} ({node.input[k]!r}) must be a constant or an initializer: it "
                                      f"fixes the output's shape")
            ctx = NodeCtx(node, opset, schema_since(node.op_type, opset),
                          run_subgraph=lambda g, args: run_graph(g, {**env, **dict(zip([i.name for i in g.input],
                                                                                         args))}, opset))
            outs = _outputs(node, entry.fn(ctx, *inputs))
    except Unsupported as e:
        raise OnnxImportError([describe(node, opset, str(e), index)]) from None
    except OnnxImportError:
        raise
    except AxleError as e:
        raise OnnxImportError([describe(node, opset, f"{type(e).__name__}: {e.message}", index)]) from None
    except (TypeError, ValueError, IndexError, KeyError) as e:
        # a malformed node (a required attribute or input missing, a bad value): the model's fault
        raise OnnxImportError([describe(node, opset, f"invalid node ({type(e).__name__}: {e})", index)]) from None
    for name, v in zip(node.output, outs):
        if name:
            env[name] = v


def run_graph(graph: onnx.GraphProto, env: dict[str, Any], opset: int) -> list[Any]:
    """The graph's outputs, given ``env`` (its inputs and the enclosing scope's values)."""
    env = dict(env)
    for init in graph.initializer:
        if init.name not in env:  # the model's own are in env already (device arrays, host constants)
            env[init.name] = onnx.numpy_helper.to_array(init)
    for i, node in enumerate(graph.node):
        run_node(node, env, opset, i)
    return [env[o.name] for o in graph.output]
