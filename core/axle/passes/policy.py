"""What a backend lets the fusion pass build (returned by ``Backend.fusion_policy()``)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ir.module import Node


@dataclass(frozen=True)
class FusionPolicy:
    #: most nodes in one fused computation
    max_fusion_nodes: int = 128
    #: allow kind=row fusions (reductions over trailing axes broadcast back and consumed
    #: in the same kernel, e.g. a whole softmax or layer norm per row)
    row_fusion: bool = True
    #: allow tuple roots (sibling outputs computed in one pass)
    multi_output: bool = True
    #: dot epilogue fusion: a dot takes the elementwise consumers of the one group that reads
    #: it into its kernel (an ``output`` fusion); off by default, on where the backend's dot
    #: kernels finish each result with the epilogue before storing it
    dot_epilogue: bool = False
    #: the same for a convolution (an extended contraction, claimed by the device): it takes
    #: its elementwise consumers into its kernel; on where the device's convolution kernel
    #: finishes each result with the epilogue
    conv_epilogue: bool = False
    #: recompute cheap producers (broadcast, iota, constant, convert...) in every consumer
    duplicate_cheap: bool = True
    #: constants with at most this many elements are inlined into fused computations;
    #: bigger ones stay outside and are passed in like any other operand
    max_fused_constant_elements: int = 1
    #: most weighted evaluations per output element of a fused kernel that inlines its
    #: producers at each consumer's index (axle.passes.inline_cost: a value read through
    #: index-changing ops at k index patterns counts k times, a transcendental 30): bigger
    #: groups are not formed, so chains like add(x, reverse(x)) cannot grow a kernel
    #: exponentially. The kernel plan splits hand-written fusions over it the same way.
    max_inline_cost: int = 3000
    #: a transpose that moves its operand's innermost (contiguous) axis, over more than this
    #: many bytes, is a kernel of its own and no fusion that computes anything else takes it:
    #: fused, its loop reads (or recomputes its producers at) one strided element per output
    #: element, a cache miss each once the tensor outgrows the caches, and a producer read
    #: by it and by another kernel is recomputed in both. Nor is it one of several outputs
    #: (a multi-output kernel is a plain loop). Alone, or in a single-output chain of
    #: movement ops, the backend runs it as a cache-blocked tiled transpose. None:
    #: transposes fuse like other movement ops.
    max_fused_strided_transpose_bytes: int | None = None
    #: a value computed with slow ops (a transcendental, a division, a square root: a
    #: batch norm's rsqrt of its variance), read through a broadcast of more than this many
    #: elements that repeats it along the broadcast's innermost dim (NHWC's per-feature
    #: terms), is computed by a kernel of its own: fused, the kernel re-evaluates it for
    #: every element (its inner loop cannot hoist a value that varies along that loop).
    #: None: such values fuse.
    max_broadcast_recompute_elements: int | None = None
    #: the device's veto on a candidate fusion node (its ``kind`` and ``computation``): a
    #: reason refuses it. The core sets it from ``Capabilities.predicates[Op.FUSION]``.
    veto: Callable[[Node], str | None] | None = field(default=None, compare=False)


DEFAULT_POLICY = FusionPolicy()
