"""Invariant checker: every node's recorded type agrees with its op's rules.

Run between passes when checks are on, and on every module the parser or the Builder
makes: what passes it is safe to hand to a backend. Errors name the computation, the
node, its op, its operands' types and the broken rule."""
from __future__ import annotations

from ..errors import AxleError, VerifierError
from .computation import called_computations
from .module import Computation, Module, Node, post_order
from .ops import CUSTOM_CALL_TARGETS, OPS, Op, canonical_attrs, check_arity, infer_type
from .types import TensorType, TupleType


def _describe(n: Node) -> str:
    ops = ", ".join(str(o.type) for o in n.operands)
    where = f" (from {n.loc})" if n.loc else ""
    return f"%{n.name or n.op.value} = {n.type} {n.op.value}({ops}){where}"


def _where(comp: Computation, n: Node) -> str:
    """The start of an error message about ``n`` (made only when there is an error: it
    prints every operand's type)."""
    return f"in computation %{comp.name}: {_describe(n)}"


def _check_custom_call(n: Node) -> None:
    # Without a registered reference the call cannot run on the interpreter (the oracle)
    # nor fall back to the host: refuse it here, not at run time.
    target = n.attr["target"]
    if target not in CUSTOM_CALL_TARGETS:
        known = ", ".join(sorted(CUSTOM_CALL_TARGETS)) or "none"
        raise VerifierError(f"custom-call target {target!r} is not registered (registered targets: {known}); "
                            "register it with axle.ir.register_custom_call")


#: per-op checks beyond the op table's shape and dtype rules
_EXTRA_CHECKS = {Op.CUSTOM_CALL: _check_custom_call}


def check_node(n: Node) -> None:
    """One node's own rules: arity, canonical attributes, operand kinds and the recorded
    type. Raises VerifierError with the bare reason (callers add where the node is)."""
    if n.op not in OPS:
        raise VerifierError("unknown op")
    check_made_node(n)
    try:
        check_arity(n.op, len(n.operands))
        canon = canonical_attrs(n.op, n.attr)
    except AxleError as e:
        raise VerifierError(e.message) from None
    if canon != n.attrs:
        raise VerifierError(f"attributes {n.attrs} are not canonical (expected {canon})")
    if n.op is Op.PARAMETER:
        if not isinstance(n.type, TensorType):
            raise VerifierError("parameters must be arrays")
        return
    if n.op is Op.CONSTANT:
        expected = n.attr["value"].type
    else:
        try:
            expected = infer_type(n.op, [o.type for o in n.operands], n.attr)
        except AxleError as e:
            raise VerifierError(e.message) from None
    if expected != n.type:
        raise VerifierError(f"recorded type {n.type} but the op's rules give {expected}")


def check_made_node(n: Node) -> None:
    """The rules of ``check_node`` that ``make_node`` does not check itself (arity,
    canonical attributes and the type are its own): operand kinds and per-op checks."""
    for o in n.operands:
        if isinstance(o.type, TupleType) and n.op is not Op.GET_TUPLE_ELEMENT:
            raise VerifierError("a tuple value can only be read by get-tuple-element")
    extra = _EXTRA_CHECKS.get(n.op)
    if extra is not None:
        extra(n)


def verify_computation(comp: Computation, *, fused: bool = False, nodes_checked: bool = False) -> None:
    """Raises VerifierError on the first malformed node of ``comp`` and of the computations
    it calls. ``nodes_checked``: each node's own rules (``check_node``) were checked when it
    was made (the parser's), so only the structure is checked here."""
    own_params = {p.uid for p in comp.parameters}
    for n in post_order([comp.root]):
        # Computation.nodes lists only its own parameters: one of another computation
        # (a Builder's) would otherwise go unseen.
        if n.op is Op.PARAMETER and n.uid not in own_params:
            raise VerifierError(f"in computation %{comp.name}: {_describe(n)} is not one of its parameters "
                                "(a value from another Builder or computation?)")
    in_comp = {n.uid for n in comp.nodes}
    seen_params: set[int] = set()
    for n in comp.nodes:
        for o in n.operands:
            if o.uid not in in_comp:
                raise VerifierError(f"{_where(comp, n)}: operand {o!r} does not belong to the computation")
        if not nodes_checked:
            try:
                check_node(n)
            except VerifierError as e:
                raise VerifierError(f"{_where(comp, n)}: {e.message}") from None
        if n.op is Op.PARAMETER:
            idx = n.attr["index"]
            if idx in seen_params:
                raise VerifierError(f"{_where(comp, n)}: parameter index {idx} appears twice")
            seen_params.add(idx)
            continue
        # a convolution (a contraction, else never fused) heads an ``output`` fusion under
        # the policy's conv_epilogue
        if fused and not (OPS[n.op].traits.fusible or OPS[n.op].traits.contraction) and n.op is not Op.TUPLE:
            raise VerifierError(f"{_where(comp, n)}: {n.op.value} cannot sit inside a fusion")
        if n.op is Op.FUSION:
            verify_computation(n.attr["computation"], fused=True, nodes_checked=nodes_checked)
        elif n.traits.control:  # loop and branch bodies are ordinary computations
            for sub in called_computations(n):
                verify_computation(sub, nodes_checked=nodes_checked)
    if seen_params != set(range(len(comp.parameters))):
        raise VerifierError(f"in computation %{comp.name}: parameters {sorted(seen_params)} are not 0..n-1")


def verify(module: Module, *, nodes_checked: bool = False) -> None:
    """Raises VerifierError on the first malformed node (``nodes_checked``: see
    ``verify_computation``)."""
    verify_computation(module.entry, nodes_checked=nodes_checked)
