"""Graph rewrites made once, at load, when initializers are constants (as ONNX Runtime's
graph optimizer makes them when a session is created).

``fold_batch_norms``: an inference ``BatchNormalization`` whose input is a ``Conv`` read by
nothing else, the convolution's weight and bias and the normalization's scale, bias, mean
and variance all initializers, becomes that ``Conv`` with its weight scaled per output
channel and its bias shifted: ``W' = W * k``, ``b' = (b - mean) * k + B`` with ``k = scale
/ sqrt(var + epsilon)``, computed in float32 at least (ONNX Runtime folds the same way, so
the results match it more closely than the unfolded graph's). The compiled model then
runs no normalization at all: the convolution's epilogue adds the bias (and the ReLU after
it), nothing else."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
import onnx

from .check import walk


def _epsilon(node: onnx.NodeProto) -> float:
    for a in node.attribute:
        if a.name == "epsilon":
            return float(a.f)
    return 1e-5


def _training(node: onnx.NodeProto) -> bool:
    return any(a.name == "training_mode" and a.i != 0 for a in node.attribute)


def fold_batch_norms(graph: onnx.GraphProto, consts: Mapping[str, np.ndarray]
                     ) -> tuple[onnx.GraphProto, dict[str, np.ndarray]] | None:
    """(the graph with each foldable Conv -> BatchNormalization pair as one Conv, the new
    constants it reads) or None when there is no such pair. ``consts``: the initializers
    that are compile-time constants, by name."""
    uses = Counter(i for _, n, _g in walk(graph) for i in n.input if i)
    uses.update(o.name for o in graph.output)
    producer = {o: k for k, n in enumerate(graph.node) for o in n.output if o}
    taken: set[str] = set(consts) | {o for _, n, _g in walk(graph) for o in n.output} | {i.name for i in graph.input}
    new: dict[str, np.ndarray] = {}
    replaced: dict[int, onnx.NodeProto] = {}  # a Conv's index -> the folded Conv
    dropped: set[int] = set()  # the folded BatchNormalizations' indices

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}.{k}"
        taken.add(name)
        return name

    for at, bn in enumerate(graph.node):
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") or _training(bn):
            continue
        if len(bn.input) != 5 or sum(1 for o in bn.output if o) != 1 or not bn.output[0]:
            continue
        ci = producer.get(bn.input[0])
        if ci is None or ci in replaced:
            continue
        conv = graph.node[ci]
        if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
            continue
        if uses[bn.input[0]] != 1 or len(conv.input) < 2:
            continue
        names = [conv.input[1], *(conv.input[2:3] if len(conv.input) > 2 and conv.input[2] else []), *bn.input[1:]]
        if not all(n in consts for n in names):
            continue
        w = consts[conv.input[1]]
        b = consts[conv.input[2]] if len(conv.input) > 2 and conv.input[2] else None
        scale, shift, mean, var = (consts[n] for n in bn.input[1:])
        if w.dtype.kind != "f" or w.ndim < 3 or any(v.shape != (w.shape[0],) for v in (scale, shift, mean, var)) \
                or (b is not None and b.shape != (w.shape[0],)):
            continue
        wide = np.promote_types(w.dtype, np.float32)
        k = scale.astype(wide) / np.sqrt(var.astype(wide) + wide.type(_epsilon(bn)))
        w2 = (w.astype(wide) * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b0 = np.zeros(w.shape[0], wide) if b is None else b.astype(wide)
        b2 = ((b0 - mean.astype(wide)) * k + shift.astype(wide)).astype(w.dtype)
        wn, bname = fresh(conv.input[1] + ".bn_folded"), fresh(bn.output[0] + ".bias")
        new[wn], new[bname] = w2, b2
        folded = onnx.NodeProto()
        folded.CopyFrom(conv)
        del folded.input[:]
        folded.input.extend([conv.input[0], wn, bname])
        del folded.output[:]
        folded.output.append(bn.output[0])
        replaced[ci] = folded
        dropped.add(at)
    if not replaced:
        return None
    out = onnx.GraphProto()
    out.name = graph.name
    out.input.extend(graph.input)
    out.output.extend(graph.output)
    out.node.extend(replaced.get(k, n) for k, n in enumerate(graph.node) if k not in dropped)
    return out, new

