"""axle's primitive-op IR: dtypes, the op table, nodes/computations/modules, the builder,
the verifier, the text form and DOT export."""
from .builder import Builder, make_node
from .dtypes import DType, dtype, result_type
from .literal import Literal
from .module import Computation, Module, Node, post_order
from .ops import CORE_PRIMITIVES, OPS, AttrKind, Op, OpDef, Traits, register_custom_call
from .parser import parse_module, parse_type
from .printer import print_module
from .reductions import REDUCE_KINDS, ReduceKind
from .types import Shape, TensorType, TupleType, Type
from .verifier import verify

__all__ = [
    "Builder", "make_node", "DType", "dtype", "result_type", "Literal", "Computation", "Module",
    "Node", "post_order", "CORE_PRIMITIVES", "OPS", "AttrKind", "Op", "OpDef", "Traits",
    "register_custom_call", "REDUCE_KINDS", "ReduceKind", "parse_module", "parse_type", "print_module", "Shape",
    "TensorType",
    "TupleType", "Type", "verify",
]
