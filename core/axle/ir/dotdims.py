"""How a ``dot_general`` splits its operands' dimensions, computed once.

The result's dimensions are the batch dimensions, then the lhs free dimensions, then the
rhs free dimensions (each group in operand order), as in StableHLO. Every consumer (the
shape rule, autodiff, each backend's GEMM and inline dot) reads the split from here."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class DotDims:
    """A dot_general as a batch of ``[m, k] x [k, n]`` products over flattened groups."""

    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_free: tuple[int, ...]
    rhs_free: tuple[int, ...]
    #: sizes of the flattened groups: batch, lhs free (m), rhs free (n), contracting (k)
    batch: int
    m: int
    n: int
    k: int

    @staticmethod
    def from_attrs(lhs: Sequence[int], rhs: Sequence[int], attrs: Any) -> DotDims:
        """The split of a dot of shapes ``lhs`` x ``rhs`` with dot_general's attributes."""
        lb, rb = tuple(attrs["lhs_batch"]), tuple(attrs["rhs_batch"])
        lc, rc = tuple(attrs["lhs_contracting"]), tuple(attrs["rhs_contracting"])
        lf = tuple(d for d in range(len(lhs)) if d not in lb + lc)
        rf = tuple(d for d in range(len(rhs)) if d not in rb + rc)
        size = lambda shape, dims: math.prod(shape[d] for d in dims)  # noqa: E731 - one use
        return DotDims(lb, rb, lc, rc, lf, rf, size(lhs, lb), size(lhs, lf), size(rhs, rf), size(lhs, lc))

    @staticmethod
    def of(node: Any) -> DotDims:
        """The split of a dot_general node."""
        lhs, rhs = node.operands
        return DotDims.from_attrs(lhs.shape, rhs.shape, node.attr)

    def result_shape(self, lhs: Sequence[int], rhs: Sequence[int]) -> tuple[int, ...]:
        return (tuple(lhs[d] for d in self.lhs_batch) + tuple(lhs[d] for d in self.lhs_free)
                + tuple(rhs[d] for d in self.rhs_free))

    @property
    def result_groups(self) -> tuple[range, range, range]:
        """Positions of the batch, lhs-free and rhs-free dimensions in the result."""
        nb, nl = len(self.lhs_batch), len(self.lhs_free)
        return range(nb), range(nb, nb + nl), range(nb + nl, nb + nl + len(self.rhs_free))

    def operand_indices(self, out: Sequence[T], contracting: Sequence[T], lhs_rank: int,
                        rhs_rank: int) -> tuple[list[T], list[T]]:
        """The lhs and rhs indices read for result index ``out`` at contracting index
        ``contracting`` (one entry per contracting pair): works on any index type."""
        li: list[Any] = [None] * lhs_rank
        ri: list[Any] = [None] * rhs_rank
        bpos, lpos, rpos = self.result_groups
        for p, l, r in zip(bpos, self.lhs_batch, self.rhs_batch):
            li[l] = ri[r] = out[p]
        for p, d in zip(lpos, self.lhs_free):
            li[d] = out[p]
        for p, d in zip(rpos, self.rhs_free):
            ri[d] = out[p]
        for c, l, r in zip(contracting, self.lhs_contracting, self.rhs_contracting):
            li[l] = ri[r] = c
        return li, ri
