"""Invariant checker: every node's recorded type agrees with its op's rules.

Run between passes when checks are on. Errors name the computation, the node, its op,
its operands' types and the broken rule."""
from __future__ import annotations

from ..errors import AxleError, VerifierError
from .module import Computation, Module, Node
from .ops import OPS, Op, canonical_attrs, check_arity, infer_type
from .types import TensorType, TupleType


def _describe(n: Node) -> str:
    ops = ", ".join(str(o.type) for o in n.operands)
    where = f" (from {n.loc})" if n.loc else ""
    return f"%{n.name or n.op.value} = {n.type} {n.op.value}({ops}){where}"


def verify_computation(comp: Computation, *, fused: bool = False) -> None:
    in_comp = {n.uid for n in comp.nodes}
    seen_params: set[int] = set()
    for n in comp.nodes:
        ctx = f"in computation %{comp.name}: {_describe(n)}"
        if n.op not in OPS:
            raise VerifierError(f"{ctx}: unknown op")
        for o in n.operands:
            if o.uid not in in_comp:
                raise VerifierError(f"{ctx}: operand {o!r} does not belong to the computation")
            if isinstance(o.type, TupleType) and n.op not in (Op.GET_TUPLE_ELEMENT,):
                raise VerifierError(f"{ctx}: a tuple value can only be read by get-tuple-element")
        try:
            check_arity(n.op, len(n.operands))
            canon = canonical_attrs(n.op, n.attr)
        except AxleError as e:
            raise VerifierError(f"{ctx}: {e.message}") from None
        if canon != n.attrs:
            raise VerifierError(f"{ctx}: attributes {n.attrs} are not canonical (expected {canon})")
        if n.op is Op.PARAMETER:
            idx = n.attr["index"]
            if idx in seen_params:
                raise VerifierError(f"{ctx}: parameter index {idx} appears twice")
            seen_params.add(idx)
            if not isinstance(n.type, TensorType):
                raise VerifierError(f"{ctx}: parameters must be arrays")
            continue
        if n.op is Op.CONSTANT:
            expected = n.attr["value"].type
        else:
            try:
                expected = infer_type(n.op, [o.type for o in n.operands], n.attr)
            except AxleError as e:
                raise VerifierError(f"{ctx}: {e.message}") from None
        if expected != n.type:
            raise VerifierError(f"{ctx}: recorded type {n.type} but the op's rules give {expected}")
        if fused and not OPS[n.op].traits.fusible and n.op is not Op.TUPLE:
            raise VerifierError(f"{ctx}: {n.op.value} cannot sit inside a fusion")
        if n.op is Op.FUSION:
            verify_computation(n.attr["computation"], fused=True)
    if seen_params != set(range(len(comp.parameters))):
        raise VerifierError(f"in computation %{comp.name}: parameters {sorted(seen_params)} are not 0..n-1")


def verify(module: Module) -> None:
    """Raises VerifierError on the first malformed node."""
    verify_computation(module.entry)
