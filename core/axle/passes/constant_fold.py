"""Constant folding through the reference interpreter.

A node whose operands are all constants is evaluated by the NumPy reference (the same
code that defines the op), so folding can never disagree with execution. Big results
are not materialized: a fold must not produce more than ``max_elements`` elements nor
grow the constant data (a broadcast of a scalar stays a broadcast; fusion recomputes it
for free, while a folded array would have to be read from memory)."""
from __future__ import annotations

import math

import numpy as np

from ..interpreter import eval_node
from ..ir.builder import make_node
from ..ir.literal import Literal
from ..ir.module import Module, Node
from ..ir.ops import Op
from ..ir.types import TensorType
from .pipeline import Pass
from .rewrite import rebuild_module

DEFAULT_MAX_ELEMENTS = 1024


def _foldable(n: Node, max_elements: int) -> bool:
    t = n.traits
    if t.side_effect or t.structural or not isinstance(n.type, TensorType) or n.op is Op.CONSTANT:
        return False
    if not all(o.op is Op.CONSTANT for o in n.operands):
        return False
    size = n.type.size
    if size > max_elements:
        return False
    return size <= max(1, sum(math.prod(o.shape) for o in n.operands))


class ConstantFolding(Pass):
    """Replaces all-constant subexpressions by their value."""

    name = "constant-fold"

    def __init__(self, max_elements: int = DEFAULT_MAX_ELEMENTS) -> None:
        self.max_elements = max_elements

    def _fold(self, n: Node) -> Node | None:
        if not _foldable(n, self.max_elements):
            return None
        value = np.asarray(eval_node(n, [np.asarray(o.attr["value"].array) for o in n.operands]))
        return make_node(Op.CONSTANT, (), {"value": Literal(value)}, loc=n.loc, name=n.name)

    def run(self, module: Module) -> tuple[Module, bool]:
        out = rebuild_module(module, self._fold)
        return out, out is not module
