"""Test helper: put a whole (unoptimized) entry computation into one hand-built fusion,
the way the optimizer would hand it to a backend, with a kind chosen from its root."""
from __future__ import annotations

from axle.ir.builder import make_node
from axle.ir.module import Computation, Module
from axle.ir.ops import OPS, Op
from axle.ir.verifier import verify


def fusion_kind(comp: Computation) -> str:
    root = comp.root
    outs = list(root.operands) if root.op is Op.TUPLE else [root]
    if all(o.op is Op.REDUCE for o in outs):
        return "input"
    if any(n.op is Op.REDUCE for n in comp.nodes):
        return "row"
    return "loop"


def fuse_all(module: Module) -> Module | None:
    """The module with its entry computed by one fusion node; None when the entry holds
    something that may not sit in a loop/input/row fusion (custom-call, dot) or nothing
    to compute."""
    entry = module.entry
    body = [n for n in entry.nodes if n.op not in (Op.PARAMETER, Op.TUPLE)]
    if not body or any(not OPS[n.op].traits.fusible for n in body):
        return None
    if any(n.op is Op.DOT_GENERAL for n in body):
        return None  # a dot only fuses as an `output` fusion (docs/ir.md); tested in test_kernels
    if entry.root.op is Op.PARAMETER or (entry.root.op is Op.TUPLE and
                                         any(o.op is Op.PARAMETER for o in entry.root.operands)):
        return None
    params = [make_node(Op.PARAMETER, (), {"index": i}, type=p.type, name=p.name)
              for i, p in enumerate(entry.parameters)]
    fused = make_node(Op.FUSION, params, {"kind": fusion_kind(entry), "computation": entry})
    if entry.root.op is Op.TUPLE:
        outs = [make_node(Op.GET_TUPLE_ELEMENT, (fused,), {"index": i}) for i in range(len(entry.root.operands))]
        root = make_node(Op.TUPLE, outs)
    else:
        root = fused
    m = Module(module.name + "_fused", Computation(module.name + "_fused", tuple(params), root))
    verify(m)
    return m
