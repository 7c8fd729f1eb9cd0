"""Test helper: put a whole (unoptimized) entry computation into one hand-built fusion,
the way the optimizer would hand it to a backend, with the kind the fusion pass gives it."""
from __future__ import annotations

from axle.ir.builder import make_node
from axle.ir.module import Computation, Module
from axle.ir.ops import OPS, Op
from axle.ir.verifier import verify
from axle.passes.fusion import classify_computation
from axle.passes.policy import FusionPolicy


#: the fusion pass's rules without its size limits, for whole-program test fusions
UNLIMITED = FusionPolicy(max_fusion_nodes=10**9, max_inline_cost=10**12, max_fused_constant_elements=10**12)


def fusion_kind(comp: Computation) -> str | None:
    """The fusion pass's kind for the whole computation (None: the pass would refuse it)."""
    return classify_computation(comp, UNLIMITED)


def fuse_all(module: Module) -> Module | None:
    """The module with its entry computed by one fusion node; None when the entry holds
    something that may not sit in a loop/input/row fusion (custom-call, dot), nothing to
    compute, or a group the fusion pass would refuse."""
    entry = module.entry
    body = [n for n in entry.nodes if n.op not in (Op.PARAMETER, Op.TUPLE)]
    if not body or any(not OPS[n.op].traits.fusible for n in body):
        return None
    if any(n.traits.contraction for n in body):
        return None  # a dot is a kernel of its own (docs/optimizer.md); tested in test_kernels
    if entry.root.op is Op.PARAMETER or (entry.root.op is Op.TUPLE and
                                         any(o.op is Op.PARAMETER for o in entry.root.operands)):
        return None
    params = [make_node(Op.PARAMETER, (), {"index": i}, type=p.type, name=p.name)
              for i, p in enumerate(entry.parameters)]
    kind = fusion_kind(entry)
    if kind is None:
        return None
    fused = make_node(Op.FUSION, params, {"kind": kind, "computation": entry})
    if entry.root.op is Op.TUPLE:
        outs = [make_node(Op.GET_TUPLE_ELEMENT, (fused,), {"index": i}) for i in range(len(entry.root.operands))]
        root = make_node(Op.TUPLE, outs)
    else:
        root = fused
    m = Module(module.name + "_fused", Computation(module.name + "_fused", tuple(params), root))
    verify(m)
    return m
