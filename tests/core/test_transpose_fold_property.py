"""Property test of transpose-fold's batch-broadcast rule: ``dot(x, broadcast(w))`` over
random dot dimension numbers and broadcasts computes what the unoptimized module computes
(the interpreter on both), for the pass alone and for the whole pipeline.

The cases go beyond the shape NumPy's matmul traces: batch dims permuted and not leading
on either side, batch dims of size 1 and 0, contracting dims in any order, a weight
stretched along a size-1 dim or carrying a batch dim itself, both operands broadcast, and
either operand stored in another dim order under a transpose (which the rule's rewrite
hands on to the transpose fold). broadcast_dimensions are increasing in the IR (a weight
in another order is a transpose under the broadcast, drawn here). The rule must fire on
the plain case it was made for, so the test checks a rewrite, not only refusals."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axle.config import config
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Op
from axle.ir.module import Module, Node
from axle.ir.verifier import verify
from axle.passes import TransposeFolding, optimize
from axle.testing.cases import assert_close, tolerance

IN_CI = os.environ.get("CI", "").lower() == "true"


@dataclass(frozen=True)
class DotCase:
    """One ``dot_general(lhs, broadcast(w))`` with everything that shapes it drawn."""

    batch: tuple[int, ...]  # sizes of the batch dims, in the dot's pairing order
    contract: tuple[int, ...]
    lhs_free: tuple[int, ...]
    rhs_free: tuple[int, ...]
    lhs_order: tuple[int, ...]  # lhs dim d holds logical dim lhs_order[d] (batch, contract, free)
    rhs_order: tuple[int, ...]  # the same for the broadcast rhs (batch, contract, free)
    w_batch: tuple[bool, ...]  # per batch dim: w carries it itself (as size 1 or whole)
    w_batch_one: tuple[bool, ...]
    stretch: tuple[bool, ...]  # per w dim: stored as size 1, stretched by the broadcast
    lhs_broadcast: bool  # the lhs is a broadcast too (along its batch dims)
    lhs_perm: tuple[int, ...]  # the lhs is stored in this dim order under a transpose
    w_perm: tuple[int, ...]  # w is stored in this dim order under a transpose
    dt: DType
    seed: int

    @property
    def plain(self) -> bool:
        """The case the rule was made for: no dim of w stretched, no batch dim in w, the
        lhs's batch dims leading, in pairing order, and the lhs not broadcast (a transpose
        of w is folded after the broadcast; one of the lhs, before it, might reorder)."""
        nb, nc = len(self.batch), len(self.contract)
        lhs_batch = [self.lhs_order.index(i) for i in range(nb)]
        lhs_free = [self.lhs_order.index(nb + nc + i) for i in range(len(self.lhs_free))]
        return (nb > 0 and not any(self.stretch) and not any(self.w_batch) and lhs_batch == sorted(lhs_batch)
                and (not lhs_free or max(lhs_batch) < min(lhs_free)) and not self.lhs_broadcast
                and self.lhs_perm == tuple(range(len(self.lhs_perm))))


@st.composite
def dot_cases(draw: st.DrawFn) -> DotCase:
    size = st.integers(0, 3)
    batch = tuple(draw(st.lists(size, min_size=0, max_size=3)))
    contract = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    lhs_free = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    rhs_free = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    nb, nc, nlf, nrf = len(batch), len(contract), len(lhs_free), len(rhs_free)
    lhs_order = tuple(draw(st.permutations(range(nb + nc + nlf))))
    rhs_order = tuple(draw(st.permutations(range(nb + nc + nrf))))
    flags = st.lists(st.booleans(), min_size=nb, max_size=nb)
    w_batch, w_batch_one = tuple(draw(flags)), tuple(draw(flags))
    stretch = tuple(draw(st.lists(st.booleans(), min_size=nc + nrf, max_size=nc + nrf)))
    lhs_broadcast = draw(st.booleans())
    def perm(n: int) -> tuple[int, ...]:  # often the identity: the plain case stays common
        return tuple(draw(st.one_of(st.just(list(range(n))), st.permutations(range(n)))))

    lhs_perm = tuple(range(nb + nc + nlf)) if lhs_broadcast else perm(nb + nc + nlf)
    w_perm = perm(sum(w_batch) + nc + nrf)
    return DotCase(batch, contract, lhs_free, rhs_free, lhs_order, rhs_order, w_batch, w_batch_one, stretch,
                   lhs_broadcast, lhs_perm, w_perm, draw(st.sampled_from([DType.FLOAT32, DType.FLOAT64, DType.INT32])),
                   draw(st.integers(0, 2**16)))


def _build(c: DotCase) -> tuple[Module, list[tuple[int, ...]]]:
    """The case's module and its parameters' shapes."""
    nb, nc = len(c.batch), len(c.contract)
    logical = c.batch + c.contract  # rhs logical sizes: batch, contract, rhs free
    rhs_sizes = logical + c.rhs_free
    lhs_sizes = logical + c.lhs_free
    b = Builder("dot")
    shapes = []

    def param(shape: tuple[int, ...]) -> Node:
        shapes.append(shape)
        return b.parameter((shape, c.dt))

    lhs_shape = tuple(lhs_sizes[i] for i in c.lhs_order)
    if c.lhs_broadcast:  # x without its batch dims, broadcast along them
        own = [d for d in range(len(lhs_shape)) if c.lhs_order[d] >= nb]
        lhs = b.broadcast_in_dim(param(tuple(lhs_shape[d] for d in own)), shape=lhs_shape,
                                 broadcast_dimensions=tuple(own))
    else:
        lhs = _stored(b, param, lhs_shape, c.lhs_perm)
    rhs_shape = tuple(rhs_sizes[i] for i in c.rhs_order)
    # w's dims: the rhs's non-batch dims and the batch dims w keeps, in the rhs's order
    bdims = tuple(d for d in range(len(rhs_shape)) if c.rhs_order[d] >= nb or c.w_batch[c.rhs_order[d]])
    w_shape = tuple(1 if (i < nb and c.w_batch_one[i]) or (i >= nb and c.stretch[i - nb]) else rhs_sizes[i]
                    for i in (c.rhs_order[d] for d in bdims))
    w = _stored(b, param, w_shape, c.w_perm)
    rhs = b.broadcast_in_dim(w, shape=rhs_shape, broadcast_dimensions=bdims)
    mod = b.build(b.dot_general(lhs, rhs, lhs_batch=tuple(c.lhs_order.index(i) for i in range(nb)),
                                rhs_batch=tuple(c.rhs_order.index(i) for i in range(nb)),
                                lhs_contracting=tuple(c.lhs_order.index(nb + i) for i in range(nc)),
                                rhs_contracting=tuple(c.rhs_order.index(nb + i) for i in range(nc))))
    return mod, shapes


def _stored(b: Builder, param: Callable[[tuple[int, ...]], Node], shape: tuple[int, ...],
            perm: tuple[int, ...]) -> Node:
    """A value of ``shape``: a parameter, or one stored with its dims in ``perm`` order
    under a transpose back to ``shape``."""
    if perm == tuple(range(len(shape))):
        return param(shape)
    back = tuple(perm.index(d) for d in range(len(shape)))
    return b.transpose(param(tuple(shape[p] for p in perm)), permutation=back)


def _check(out: Module, mod: Module, shapes: list[tuple[int, ...]], c: DotCase, what: str) -> None:
    verify(out)
    rng = np.random.default_rng(c.seed)
    args = [(rng.standard_normal(s) * 4).astype(c.dt.np) for s in shapes]
    k = int(np.prod(c.contract, dtype=np.int64))
    rtol, atol = tolerance(c.dt, Op.DOT_GENERAL, max(k, 1))
    assert_close(evaluate(out, *args)[0], evaluate(mod, *args)[0], rtol, atol, f"{what}: {c}")


@settings(max_examples=150, deadline=None, derandomize=IN_CI, suppress_health_check=[HealthCheck.too_slow])
@given(c=dot_cases())
def test_batch_broadcast_fold_preserves_values(c: DotCase) -> None:
    mod, shapes = _build(c)
    verify(mod)
    out, changed = TransposeFolding().run(mod)
    if c.plain:  # the rule's own case: the broadcast goes
        assert changed and Op.BROADCAST_IN_DIM not in {n.op for n in out.entry.nodes}, c
    _check(out, mod, shapes, c, "transpose-fold")
    saved = config.disable_passes
    config.update(disable_passes="")
    try:
        full = optimize(mod)
    finally:
        config.update(disable_passes=saved)
    _check(full, mod, shapes, c, "optimize")
