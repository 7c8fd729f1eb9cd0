"""A cache-blocked transpose kernel (spec kind ``transpose``) for a large ``transpose`` launch.

An unfused transpose that moves its input's contiguous dim away from the output's innermost
position is, as a plain loop, a strided read: each output row walks the input with a
stride, one cache line per element (and with a power-of-two stride every line falls in the
same L1 set). The kernel works on the collapsed transpose (:func:`collapsed`) and walks
``[rows, C]`` (C: the output's last dim; rows: its leading dims flattened, the one that is
the input's contiguous dim innermost) in ``TR x TC`` tiles: ``TR`` consecutive rows are
``TR`` consecutive input elements (one input cache line), ``TC`` columns are ``TC`` input
lines, few enough (8) that they stay in L1 whatever their addresses, while each row's
columns are written in order.

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


def collapsed(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same transpose over the fewest dims: unit dims dropped, input dims that stay
    adjacent and in order in the output merged (HWIO -> OIHW is ``[9, 512, 512]`` by
    ``(2, 1, 0)``). Returns (input shape, permutation)."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    renum = {a: i for i, a in enumerate(keep)}
    groups: list[list[int]] = []  # runs of consecutive input dims, in output order
    for a in (renum[a] for a in perm if shape[a] != 1):
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # the merged input dims
    sizes = [shape[keep[a]] for a in range(len(keep))]
    new_shape = tuple(math.prod(sizes[a] for a in groups[g]) for g in order)
    pos = {g: i for i, g in enumerate(order)}
    return new_shape, tuple(pos[g] for g in range(len(groups)))


def blocked(comp: Computation) -> bool:
    """Whether ``comp`` (a launch's computation) is one big transpose of its parameter that
    moves the input's contiguous dim (a strided read as a plain loop). The plain loop stays
    for the 2-D swap class (the contiguous dim to the output's second-to-last position) when
    its input rows do not alias in L1: LLVM vectorizes it and it was measured as fast."""
    root = comp.root
    if root.op is not Op.TRANSPOSE or root.operands[0].op is not Op.PARAMETER:
        return False
    size = root.dtype.np.itemsize
    if math.prod(root.shape) * size < MIN_BYTES:
        return False
    shape, perm = collapsed(root.operands[0].shape, root.attr["permutation"])
    r = len(shape)
    if r < 2 or perm[-1] == r - 1:
        return False  # the contiguous dim stays innermost: rows are copied in order
    if perm[-2] == r - 1:  # a (batched) 2-D swap
        return (shape[-1] * size) % ALIASING_BYTES == 0
    return True


class TransposeSpec(KernelSpec):
    """The blocked transpose: loop space (output rows, output columns)."""

    @functools.cached_property
    def _dims(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int]:
        """Over the collapsed transpose: the row dims walked (the output's leading dims,
        the one that is the input's contiguous dim moved innermost, so that a block of
        consecutive rows reads one input cache line per column), the input and output
        stride of each, the input stride of a column, and the columns."""
        root = self.comp.root
        src, perm = collapsed(root.operands[0].shape, root.attr["permutation"])
        if not perm:  # every dim 1: one element
            return (), (), (), 0, math.prod(root.shape)
        in_strides = [math.prod(src[d + 1:]) for d in range(len(src))]
        out_shape = [src[p] for p in perm]
        out_strides = [math.prod(out_shape[d + 1:]) for d in range(len(out_shape))]
        rows = list(range(len(perm) - 1))
        rows.sort(key=lambda d: in_strides[perm[d]] == 1)  # stable: the contiguous dim last
        return (tuple(out_shape[d] for d in rows), tuple(in_strides[perm[d]] for d in rows),
                tuple(out_strides[d] for d in rows), in_strides[perm[-1]], out_shape[-1])

    @property
    def loop_sizes(self) -> tuple[int, int]:
        row_dims, _, _, _, cols = self._dims
        return math.prod(row_dims), cols

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
    row_dims, in_strides, out_strides, col_stride, _ = spec._dims
    tr = max(64 // (et.width // 8), 1)  # consecutive rows (input-contiguous) = one input cache line
    i64 = ir.IntType(64)

    def row_offsets(row: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The input and output offsets of row ``row`` (its index over the row dims)."""
        off_in: ir.Value = _c(0)
        off_out: ir.Value = _c(0)
        rest = row
        for i, (size, si, so) in enumerate(reversed(list(zip(row_dims, in_strides, out_strides)))):
            last = i == len(row_dims) - 1  # the outermost dim: rest < size already
            idx = rest if last else b.srem(rest, _c(size))
            off_in = b.add(off_in, b.mul(idx, _c(si)))
            off_out = b.add(off_out, b.mul(idx, _c(so)))
            rest = rest if last else b.sdiv(rest, _c(size))
        return off_in, off_out

    # the offsets of a row block's rows, computed once per block (not per tile)
    with b.goto_entry_block():
        ioffs = b.alloca(i64, size=_c(tr))
        ooffs = b.alloca(i64, size=_c(tr))

    def row_block(rb: ir.Value) -> None:
        rend = g.min(b.add(rb, _c(tr)), o1)

        def offsets(r: ir.Value) -> None:
            oi, oo = row_offsets(r)
            b.store(oi, g.gep(ioffs, i64, b.sub(r, rb)))
            b.store(oo, g.gep(ooffs, i64, b.sub(r, rb)))

        g.loop(rb, rend, 1, offsets, "tro")

        def col_block(cb: ir.Value) -> None:
            cend = g.min(b.add(cb, _c(TILE_COLUMNS)), i1)

            def row(r: ir.Value) -> None:
                roff = b.load(g.gep(ioffs, i64, b.sub(r, rb)), typ=i64)
                obase = b.load(g.gep(ooffs, i64, b.sub(r, rb)), typ=i64)

                def col(c: ir.Value) -> None:
                    v = b.load(g.gep(src, et, b.add(roff, b.mul(c, _c(col_stride)))), typ=et)
                    b.store(v, g.gep(dst, et, b.add(obase, c)))

                g.loop(cb, cend, 1, col, "tc")

            g.loop(rb, rend, 1, row, "tr")

        g.loop(i0, i1, TILE_COLUMNS, col_block, "tcb")

    g.loop(o0, o1, tr, row_block, "trb")
    b.ret_void()
    return fn
