"""A cache-blocked transpose kernel (spec kind ``transpose``) for a large ``transpose`` launch.

An unfused transpose whose permutation brings the input's last (contiguous) dim to the
output's second-to-last position (``x.T``, ``[b, m, n] -> [b, n, m]``) is, as a plain loop,
a strided read: each output row walks a column of the input, one cache line per element,
and with a power-of-two row length every line of a column falls in the same L1 set (the
case this kernel is chosen for, see ``blocked``). This
kernel walks the output ``[rows, C]`` (rows: the output's leading dims flattened) in
``TR x TC`` tiles: ``TR`` consecutive output rows are ``TR`` consecutive input elements (one
input cache line), ``TC`` columns are ``TC`` input lines, few enough (8) that they stay in
L1 whatever their addresses, while the tile's output rows are written in order.

Elements are copied as integers of their size (a transpose moves bits, whatever the
dtype). The kernel has the common signature: the thread pool splits its rows and columns
like a loop kernel's."""
from __future__ import annotations

import functools
import math

from llvmlite import ir

from axle.ir.module import Computation
from axle.ir.ops import Op

from .emitter import SIG, KernelSpec
from .gemm import _c, _Gen

#: input cache lines a tile reads at once (the tile's columns): within any L1's ways
TILE_COLUMNS = 8
#: from this many bytes a lone transpose takes the blocked kernel (smaller ones stay in L2,
#: where the plain loop is as fast)
MIN_BYTES = 1 << 20
#: input row lengths (bytes) that are a multiple of this put a column's lines in at most
#: 8 of a 4 KB-periodic L1's sets: the plain loop's strided reads then miss on every
#: element (1024 x 1024 float32: 6.7 ms plain, 0.6 ms blocked, one thread). Other
#: lengths keep the plain loop, which LLVM vectorizes and which was measured faster
#: there (1000 x 777: 0.27 ms plain, 0.34 ms blocked)
ALIASING_BYTES = 512


def blocked(comp: Computation) -> bool:
    """Whether ``comp`` (a launch's computation) is one big transpose of its parameter
    that brings the input's last dim to the output's second-to-last position."""
    root = comp.root
    if root.op is not Op.TRANSPOSE or root.operands[0].op is not Op.PARAMETER:
        return False
    perm, r = root.attr["permutation"], len(root.shape)
    size = root.dtype.np.itemsize
    row_bytes = root.operands[0].shape[-1] * size if r else 0
    return (r >= 2 and perm[r - 2] == r - 1 and perm[r - 1] != r - 1 and row_bytes % ALIASING_BYTES == 0
            and math.prod(root.shape) * size >= MIN_BYTES)


class TransposeSpec(KernelSpec):
    """The blocked transpose: loop space (output rows, output columns)."""

    @functools.cached_property
    def _dims(self) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """Output row dims, the input stride of each, and the input stride of a column."""
        root = self.comp.root
        src = root.operands[0].shape
        strides = [math.prod(src[d + 1:]) for d in range(len(src))]
        perm = root.attr["permutation"]
        return tuple(root.shape[:-1]), tuple(strides[p] for p in perm[:-1]), strides[perm[-1]]

    @property
    def loop_sizes(self) -> tuple[int, int]:
        shape = self.comp.root.shape
        return math.prod(shape[:-1]), shape[-1]

    @property
    def fixed_columns(self) -> bool:
        return False

    @property
    def column_reduce(self) -> bool:
        return False

    @property
    def split_reduce_size(self) -> int:
        return 0


def emit(mod: ir.Module, spec: TransposeSpec) -> ir.Function:
    """``void name(bufs, o0, o1, i0, i1, _, _)``: output rows [o0, o1), columns [i0, i1)."""
    fn = ir.Function(mod, SIG, name=spec.name)
    fn.attributes.add("nounwind")
    g = _Gen(fn)
    b = g.b
    bufs, o0, o1, i0, i1 = fn.args[:5]
    et = ir.IntType(spec.comp.root.dtype.np.itemsize * 8)
    src = b.load(b.gep(bufs, [_c(0)], source_etype=ir.PointerType(), inbounds=True), typ=ir.PointerType())
    dst = b.load(b.gep(bufs, [_c(1)], source_etype=ir.PointerType(), inbounds=True), typ=ir.PointerType())
    row_dims, row_strides, col_stride = spec._dims
    cols = spec.loop_sizes[1]
    tr = max(64 // (et.width // 8), 1)  # consecutive output rows = one input cache line

    def row_offset(row: ir.Value) -> ir.Value:
        """The input offset of output row ``row`` (its index over the row dims)."""
        off: ir.Value = _c(0)
        rest = row
        for i, (size, stride) in enumerate(reversed(list(zip(row_dims, row_strides)))):
            last = i == len(row_dims) - 1  # the leading dim: rest < size already
            off = b.add(off, b.mul(rest if last else b.srem(rest, _c(size)), _c(stride)))
            rest = rest if last else b.sdiv(rest, _c(size))
        return off

    # the input offsets of a row block's rows, computed once per block (not per tile)
    with b.goto_entry_block():
        offs = b.alloca(ir.IntType(64), size=_c(tr))

    def row_block(rb: ir.Value) -> None:
        rend = g.min(b.add(rb, _c(tr)), o1)
        g.loop(rb, rend, 1, lambda r: b.store(row_offset(r), g.gep(offs, ir.IntType(64), b.sub(r, rb))), "tro")

        def col_block(cb: ir.Value) -> None:
            cend = g.min(b.add(cb, _c(TILE_COLUMNS)), i1)

            def row(r: ir.Value) -> None:
                roff = b.load(g.gep(offs, ir.IntType(64), b.sub(r, rb)), typ=ir.IntType(64))
                obase = b.mul(r, _c(cols))

                def col(c: ir.Value) -> None:
                    v = b.load(g.gep(src, et, b.add(roff, b.mul(c, _c(col_stride)))), typ=et)
                    b.store(v, g.gep(dst, et, b.add(obase, c)))

                g.loop(cb, cend, 1, col, "tc")

            g.loop(rb, rend, 1, row, "tr")

        g.loop(i0, i1, TILE_COLUMNS, col_block, "tcb")

    g.loop(o0, o1, tr, row_block, "trb")
    b.ret_void()
    return fn
