"""What the importer refuses in a model, found before anything runs: every node whose op,
opset, attribute value or dtype it does not support, each with the node's name, op type,
the opset and the reason (``axle run --check MODEL`` prints them all)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import onnx

from .graph import describe, schema_since
from .table import DTYPES, MAX_OPSET, MIN_OPSET, OPS, NodeCtx

_DEFAULT_DOMAINS = ("", "ai.onnx")


def default_opset(model: onnx.ModelProto) -> int:
    """The model's opset of the default ONNX domain."""
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            return int(imp.version)
    return MIN_OPSET


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def walk(graph: onnx.GraphProto) -> Iterator[tuple[int, onnx.NodeProto, onnx.GraphProto]]:
    """(index, node, its graph) of every node, sub-graphs' nodes after their parent."""
    for i, node in enumerate(graph.node):
        yield i, node, graph
        for g in subgraphs(node):
            yield from walk(g)


def _value_types(graph: onnx.GraphProto, out: dict[str, onnx.TypeProto]) -> None:
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        out.setdefault(vi.name, vi.type)
    for node in graph.node:
        for g in subgraphs(node):
            _value_types(g, out)


def _type_problem(t: onnx.TypeProto) -> str | None:
    kind = t.WhichOneof("value")
    if kind is None:
        return None
    if kind != "tensor_type":
        return f"{kind.replace('_type', '')} values are not supported (tensors only)"
    et = t.tensor_type.elem_type
    if et and et not in DTYPES:
        return f"dtype {onnx.TensorProto.DataType.Name(et)} is outside axle's dtypes"
    return None


def node_problem(node: onnx.NodeProto, opset: int, types: dict[str, onnx.TypeProto]) -> str | None:
    """Why the importer cannot take ``node``, or None."""
    if node.domain not in _DEFAULT_DOMAINS:
        return f"unsupported domain {node.domain!r}"
    entry = OPS.get(node.op_type)
    if entry is None:
        return "unsupported op"
    if opset < MIN_OPSET:
        old, new = schema_since(node.op_type, opset), schema_since(node.op_type, MIN_OPSET)
        if old != new:
            return f"version {old} of the op predates opset {MIN_OPSET} (its semantics differ from version {new})"
    elif not entry.since <= opset <= entry.until:
        return f"supported for opsets {entry.since}..{entry.until} only"
    for name in [*node.input, *node.output]:
        if name and name in types:
            why = _type_problem(types[name])
            if why:
                return f"{name!r}: {why}"
    if entry.check is not None:
        why = entry.check(NodeCtx(node, opset, schema_since(node.op_type, opset)))
        if why:
            return why
    return None


def problems(model: onnx.ModelProto) -> list[str]:
    """Every reason the importer cannot run ``model``, one line each (empty: it can try)."""
    opset = default_opset(model)
    out: list[str] = []
    if opset > MAX_OPSET:
        # older opsets are taken node by node: an op whose schema is the one opset 13 has
        out.append(f"model: opset {opset} is outside the supported opsets {MIN_OPSET}..{MAX_OPSET}")
    for imp in model.opset_import:
        if imp.domain not in _DEFAULT_DOMAINS and imp.domain != "ai.onnx.ml":
            out.append(f"model: opset domain {imp.domain!r} is not supported")
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is a help for the dtype check, not a requirement
        inferred = model
    types: dict[str, Any] = {}
    _value_types(inferred.graph, types)
    for init in model.graph.initializer:
        if init.data_type not in DTYPES:
            out.append(f"initializer {init.name!r}: dtype {onnx.TensorProto.DataType.Name(init.data_type)} is "
                       f"outside axle's dtypes")
    for i, node, _g in walk(model.graph):
        why = node_problem(node, opset, types)
        if why:
            out.append(describe(node, opset, why, i))
    return out
