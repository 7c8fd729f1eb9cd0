"""A cache-blocked transpose kernel (spec kind ``transpose``) for a large ``transpose`` launch.

An unfused transpose that moves its input's contiguous dim away from the output's innermost
position is, as a plain loop, a strided read: each output row walks the input with a
stride, one cache line per element (and with a power-of-two stride every line falls in the
same L1 set). The kernel works on the collapsed transpose (:func:`collapsed`) and walks
``[rows, C]`` (C: the output's last dim; rows: its leading dims flattened, the one that is
the input's contiguous dim innermost) in ``TR x TC`` tiles: ``TR`` consecutive rows are
``TR`` consecutive input elements (one input cache line), ``TC`` columns are ``TC`` input
lines. A whole tile is transposed in registers (one vector load per column, shuffles, one
vector store per row); a partial one is copied element by element, 8 columns (input lines)
at a time, few enough that they stay in L1 whatever their addresses.

Elements are copied as integers of their size (a transpose moves bits, whatever the
dtype). The kernel has the common signature: the thread pool splits its rows and columns
like a loop kernel's."""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

from llvmlite import ir

from axle.ir.module import Computation, Node
from axle.ir.ops import Op

from .emitter import SIG, KernelSpec
from .gemm import _c, _Gen, _store, transposed

#: input cache lines a scalar tile reads at once (its columns): within any L1's ways
TILE_COLUMNS = 8
#: most rows and columns of a tile transposed in registers (16 float32: one 512-bit
#: vector per input column, each a whole cache line)
VECTOR_TILE = 16
#: a transpose whose output takes at most 1/PANEL_L2_SHARE of the L2 walks its row blocks
#: in panels of PANEL_COLUMNS columns (``paneled``)
PANEL_COLUMNS = 32
PANEL_L2_SHARE = 2
#: from this many bytes a lone transpose takes the blocked kernel (smaller ones stay in L2,
#: where the plain loop is as fast)
MIN_BYTES = 1 << 20
#: most elements of a narrow tile (``narrow_columns``): its columns' vectors, interleaved
#: in registers and stored as one run (an NCHW image's 3 features: 48 float32)
NARROW_TILE = 128
#: from this many bytes when the input's contiguous run is shorter than a vector tile (a
#: 3x3 kernel's 9 elements, OIHW -> HWIO: the plain loop reads a line per element even in
#: L2, where the tiles read rows merged across the run, input_run): [128, 128, 3, 3] float32
#: 83 -> 20 us, one core
SHORT_RUN_MIN_BYTES = 1 << 16


def collapsed(shape: tuple[int, ...], perm: tuple[int, ...], flipped: frozenset[int] = frozenset()
              ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[bool, ...]]:
    """The same transpose over the fewest dims: unit dims dropped, input dims that stay
    adjacent and in order in the output (and are both reversed or both not) merged (HWIO ->
    OIHW is ``[9, 512, 512]`` by ``(2, 1, 0)``). ``flipped``: the input dims read reversed.
    Returns (input shape, permutation, whether each input dim is reversed)."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    renum = {a: i for i, a in enumerate(keep)}
    flip = [keep[a] in flipped for a in range(len(keep))]
    groups: list[list[int]] = []  # runs of consecutive input dims, in output order
    for a in (renum[a] for a in perm if shape[a] != 1):
        if groups and groups[-1][-1] + 1 == a and flip[a] == flip[a - 1]:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # the merged input dims
    sizes = [shape[keep[a]] for a in range(len(keep))]
    new_shape = tuple(math.prod(sizes[a] for a in groups[g]) for g in order)
    pos = {g: i for i, g in enumerate(order)}
    return new_shape, tuple(pos[g] for g in range(len(groups))), tuple(flip[groups[g][0]] for g in order)


#: the movement ops a blocked transpose applies
_CHAIN = (Op.TRANSPOSE, Op.REVERSE)


def movement(comp: Computation) -> tuple[tuple[int, ...], tuple[int, ...], frozenset[int]] | None:
    """(parameter shape, permutation, reversed parameter dims) when ``comp`` is a chain of
    transposes and reverses of its parameter (a kernel copy of a convolution's input
    gradient: flipped and transposed), else None. Reshapes and broadcasts that only add or
    drop unit dims may sit in the chain (``broadcast(x.T)`` to a leading batch dim of 1, as
    a matmul traces it): they move no element, and the permutation then leaves out the
    result's unit dims that no parameter dim feeds."""
    n = comp.root
    if n.op not in _CHAIN and n.op not in _UNIT_DIM_MAPS:
        return None
    src: list[int | None] = list(range(len(n.shape)))  # the dim of ``n`` each output dim reads
    flip = [False] * len(src)
    while n.op in _CHAIN or n.op in _UNIT_DIM_MAPS:
        if n.op is Op.TRANSPOSE:
            perm = n.attr["permutation"]
            src = [None if d is None else perm[d] for d in src]
        elif n.op is Op.REVERSE:
            dims = set(n.attr["dimensions"])
            flip = [f != (d in dims) for d, f in zip(src, flip)]
        else:
            dim_of = _UNIT_DIM_MAPS[n.op](n)
            if dim_of is None:
                return None
            src = [None if d is None else dim_of[d] for d in src]
        n = n.operands[0]
    if n.op is not Op.PARAMETER:
        return None
    flipped = frozenset(d for d, f in zip(src, flip) if f and d is not None)
    return n.shape, tuple(d for d in src if d is not None), flipped


def _nonunit(shape: tuple[int, ...]) -> list[int]:
    return [d for d, size in enumerate(shape) if size != 1]


def _reshape_dims(n: Node) -> list[int | None] | None:
    """The operand dim each dim of reshape ``n`` is (None: a unit dim of its own), when the
    reshape only adds or drops unit dims; else None."""
    ins, outs = _nonunit(n.operands[0].shape), _nonunit(n.shape)
    if [n.operands[0].shape[d] for d in ins] != [n.shape[d] for d in outs]:
        return None
    dim_of: list[int | None] = [None] * len(n.shape)
    for o, i in zip(outs, ins):
        dim_of[o] = i
    return dim_of


def _broadcast_dims(n: Node) -> list[int | None] | None:
    """The operand dim each dim of broadcast ``n`` is (None: a new unit dim), when it only
    adds unit dims (nothing stretched); else None."""
    bdims, x = n.attr["broadcast_dimensions"], n.operands[0]
    dim_of: list[int | None] = [None] * len(n.shape)
    for i, d in enumerate(bdims):
        if x.shape[i] != n.shape[d]:
            return None
        dim_of[d] = i
    return dim_of if all(n.shape[d] == 1 for d, i in enumerate(dim_of) if i is None) else None


#: the movement ops that only add or drop unit dims, as maps from their dims to their operand's
_UNIT_DIM_MAPS: dict[Op, Callable[[Node], list[int | None] | None]] = {
    Op.RESHAPE: _reshape_dims, Op.BROADCAST_IN_DIM: _broadcast_dims}


def blocked(comp: Computation) -> bool:
    """Whether ``comp`` (a launch's computation) is one big transpose of its parameter
    (possibly reversing dims too) that moves the input's contiguous dim (a strided read as
    a plain loop), of any permutation class: with its register-transposed tiles it beat the
    plain loop on all of them, the 2-D swaps whose rows do not alias in L1 included
    ([1000, 777] float32: 0.27 -> 0.10 ms)."""
    root = comp.root
    chain = movement(comp)
    if chain is None:
        return False
    shape, perm, _ = collapsed(*chain)
    least = SHORT_RUN_MIN_BYTES if shape and shape[-1] < VECTOR_TILE else MIN_BYTES
    if math.prod(root.shape) * root.dtype.np.itemsize < least:
        return False
    return len(shape) >= 2 and perm[-1] != len(shape) - 1  # else rows are copied in order


class TransposeSpec(KernelSpec):
    """The blocked transpose: loop space (output rows, output columns)."""

    @functools.cached_property
    def _dims(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int, int, int]:
        """Over the collapsed transpose: the row dims walked (the output's leading dims,
        the one that is the input's contiguous dim moved innermost, so that a block of
        consecutive rows reads one input cache line per column), the input and output
        stride of each, the input stride of a column, the input offset of row 0, the
        columns, and the output offset of row 0. A reversed dim read in output order
        starts at its input's end with a negative input stride; a reversed row dim is
        walked in input order instead (each row has its own output offset, so rows may go
        in any order): its output stride is the negative one, and its rows stay one input
        run (a flipped 3x3 kernel's copy, OIHW -> flipped HWIO, takes the vector tiles)."""
        chain = movement(self.comp)
        assert chain is not None, "a transpose kernel over a computation that is not one"
        src, perm, flip = collapsed(*chain)
        if not perm:  # every dim 1: one element
            return (), (), (), 0, 0, math.prod(self.comp.root.shape), 0
        dense = [math.prod(src[d + 1:]) for d in range(len(src))]
        out_shape = [src[p] for p in perm]
        out_dense = [math.prod(out_shape[d + 1:]) for d in range(len(out_shape))]
        rows = list(range(len(perm) - 1))
        rows.sort(key=lambda d: dense[perm[d]] == 1)  # stable: the contiguous dim last
        # a reversed column dim reads from its input's end; a reversed row dim writes from
        # its output's end instead, so that rows still walk the input forward
        cflip = flip[perm[-1]]
        base = (src[perm[-1]] - 1) * dense[perm[-1]] if cflip else 0
        out_base = sum((out_shape[d] - 1) * out_dense[d] for d in rows if flip[perm[d]])
        return (tuple(out_shape[d] for d in rows), tuple(dense[perm[d]] for d in rows),
                tuple(-out_dense[d] if flip[perm[d]] else out_dense[d] for d in rows),
                -dense[perm[-1]] if cflip else dense[perm[-1]], base, out_shape[-1], out_base)

    @property
    def loop_sizes(self) -> tuple[int, int]:
        row_dims, _, _, _, _, cols, _ = self._dims
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


def input_run(row_dims: tuple[int, ...], in_strides: tuple[int, ...]) -> int:
    """How many consecutive rows are consecutive input elements: the innermost row dim
    when its input stride is 1, times each row dim outside it that continues it in the
    input (OIHW -> HWIO walks rows (I, HW), and a 3x3 kernel's 9 elements of one I are
    followed by the next I's: the whole I x 9; an output row's offset is its own, so only
    the input side must be one run for a tile's rows to be one vector load per column)."""
    if not row_dims or in_strides[-1] != 1:
        return 1
    run = row_dims[-1]
    for size, stride in zip(reversed(row_dims[:-1]), reversed(in_strides[:-1])):
        if stride != run:
            break
        run *= size
    return run


def paneled(spec: TransposeSpec) -> bool:
    """Whether the kernel walks its row blocks panel by panel of ``PANEL_COLUMNS`` columns
    (input lines), not across all the columns at once: when the output stays in the L2
    (half of it at most), whose lines each panel then revisits there, and there are more
    columns than a panel. A row block across all of them read as many input lines side by
    side, one from each column's run (a weight's 128 output features, OIHW -> HWIO), more
    streams than the hardware prefetchers follow, which a weight read from memory (a
    ResNet's parameters, once per call) paid in full: [128, 128, 3, 3] float32 with its
    input out of the caches 451 -> 315 us, one core; panel by panel, 32 streams. A big
    output is written once, a row block at a time, as before: revisited by panels, its
    lines came back from memory (NCHW -> NHWC [32, 64, 32, 32]: 2222 -> 2438 us)."""
    from .gemm import l2_bytes

    cols = spec._dims[5]
    return cols > PANEL_COLUMNS and spec.comp.root.type.nbytes * PANEL_L2_SHARE <= l2_bytes()


def narrow_columns(spec: TransposeSpec) -> int:
    """The columns of a narrow tile, or 0: when the output's rows are short (fewer columns
    than a vector tile's, at least 2: NCHW -> NHWC of an image's 3 features) and the rows
    that are one input run are consecutive in the output too (its innermost row dim is
    input-contiguous and its output stride is the row length), a block of ``tr`` rows is
    ``cols`` vector loads (one per column, ``tr`` consecutive input elements each),
    interleaved in registers into ``tr x cols`` output elements stored as one run. The
    general tiles copy such rows element by element (each tile has fewer than ``tr``
    columns): a [32, 3, 224, 224] float32 image to NHWC took 7 ms of one core."""
    row_dims, in_strides, out_strides, _, _, cols, _ = spec._dims
    tr = _rows_per_tile(spec)
    if not row_dims or in_strides[-1] != 1 or out_strides[-1] != cols or row_dims[-1] < tr:
        return 0
    return cols if 2 <= cols < tr and cols * tr <= NARROW_TILE else 0


def _rows_per_tile(spec: TransposeSpec) -> int:
    """Consecutive rows (input-contiguous) per tile: one input cache line, at most VECTOR_TILE."""
    return max(min(64 // spec.comp.root.dtype.np.itemsize, VECTOR_TILE), 1)


def _interleaved(b: ir.IRBuilder, vecs: list[ir.Value], tr: int) -> ir.Value:
    """One vector of ``len(vecs) * tr`` lanes whose lane ``r * len(vecs) + c`` is lane ``r``
    of ``vecs[c]``: the vectors concatenated pairwise (padded with the last to a power of
    two), then one shuffle."""
    cols = len(vecs)
    parts = list(vecs) + [vecs[-1]] * ((1 << (cols - 1).bit_length()) - cols)
    while len(parts) > 1:
        n = parts[0].type.count
        both = ir.Constant(ir.VectorType(ir.IntType(32), 2 * n), list(range(2 * n)))
        parts = [b.shuffle_vector(parts[i], parts[i + 1], both) for i in range(0, len(parts), 2)]
    whole = parts[0]
    mask = ir.Constant(ir.VectorType(ir.IntType(32), cols * tr), [c * tr + r for r in range(tr) for c in range(cols)])
    return b.shuffle_vector(whole, whole, mask)


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
    row_dims, in_strides, out_strides, col_stride, base, _, out_base = spec._dims
    tr = _rows_per_tile(spec)
    narrow = narrow_columns(spec)
    i64 = ir.IntType(64)

    def row_offsets(row: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The input and output offsets of row ``row`` (its index over the row dims)."""
        off_in: ir.Value = _c(base)
        off_out: ir.Value = _c(out_base)
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

    def row_block(rb: ir.Value, cp: ir.Value, pend: ir.Value) -> None:
        rend = g.min(b.add(rb, _c(tr)), o1)

        def offsets(r: ir.Value) -> None:
            oi, oo = row_offsets(r)
            b.store(oi, g.gep(ioffs, i64, b.sub(r, rb)))
            b.store(oo, g.gep(ooffs, i64, b.sub(r, rb)))

        g.loop(rb, rend, 1, offsets, "tro")

        def scalar_tile(cb: ir.Value, cend: ir.Value) -> None:
            def col_block(cb: ir.Value) -> None:
                cend2 = g.min(b.add(cb, _c(TILE_COLUMNS)), cend)

                def row(r: ir.Value) -> None:
                    roff = b.load(g.gep(ioffs, i64, b.sub(r, rb)), typ=i64)
                    obase = b.load(g.gep(ooffs, i64, b.sub(r, rb)), typ=i64)

                    def col(c: ir.Value) -> None:
                        v = b.load(g.gep(src, et, b.add(roff, b.mul(c, _c(col_stride)))), typ=et)
                        b.store(v, g.gep(dst, et, b.add(obase, c)))

                    g.loop(cb, cend2, 1, col, "tc")

                g.loop(rb, rend, 1, row, "tr")

            g.loop(cb, cend, TILE_COLUMNS, col_block, "tcb")

        def vector_tile(cb: ir.Value) -> None:
            """tr x tr elements: tr vector loads (a column's tr consecutive input elements
            each), transposed in registers (gemm's perfect shuffles), tr vector stores."""
            vt = ir.VectorType(et, tr)
            base = b.load(ioffs, typ=i64)
            vecs = []
            for c in range(tr):
                x = b.load(g.gep(src, et, b.add(base, b.mul(b.add(cb, _c(c)), _c(col_stride)))), typ=vt)
                x.align = et.width // 8
                vecs.append(x)
            for kk, x in enumerate(transposed(b, vecs)):
                obase = b.load(g.gep(ooffs, i64, _c(kk)), typ=i64)
                _store(b, x, g.gep(dst, et, b.add(obase, cb)), et.width // 8)

        def tile(cb: ir.Value) -> None:
            cend = g.min(b.add(cb, _c(tr)), pend)
            if not vectorizable:
                scalar_tile(cb, cend)
                return
            full = b.and_(b.icmp_signed("==", b.sub(cend, cb), _c(tr)), whole_rows)
            with b.if_else(full) as (then, otherwise):
                with then:
                    vector_tile(cb)
                with otherwise:
                    scalar_tile(cb, cend)

        # a vector tile needs tr rows of one input run (not crossed by the block: see
        # input_run) and tr columns
        run = input_run(row_dims, in_strides)
        vectorizable = tr > 1 and run > 1
        if vectorizable:
            whole_rows = b.and_(b.icmp_signed("==", b.sub(rend, rb), _c(tr)),
                                b.icmp_signed("<=", b.add(b.srem(rb, _c(run)), _c(tr)), _c(run)))
        if not narrow:
            g.loop(cp, pend, tr, tile, "tcb")
            return

        def narrow_tile() -> None:
            """tr rows of ``narrow`` columns: a vector load per column, interleaved, one run stored."""
            vt = ir.VectorType(et, tr)
            base = b.load(ioffs, typ=i64)
            vecs = []
            for c in range(narrow):
                x = b.load(g.gep(src, et, b.add(base, _c(c * col_stride))), typ=vt)
                x.align = et.width // 8
                vecs.append(x)
            _store(b, _interleaved(b, vecs, tr), g.gep(dst, et, b.load(ooffs, typ=i64)), et.width // 8)

        # whole rows (every column) of tr rows within the innermost row dim: consecutive in
        # the input (per column) and in the output (a narrow output is never paneled:
        # cp, pend are i0, i1)
        inner = row_dims[-1]
        whole = b.and_(b.and_(b.icmp_signed("==", i0, _c(0)), b.icmp_signed("==", i1, _c(narrow))),
                       b.and_(b.icmp_signed("==", b.sub(rend, rb), _c(tr)),
                              b.icmp_signed("<=", b.add(b.srem(rb, _c(inner)), _c(tr)), _c(inner))))
        with b.if_else(whole) as (then, otherwise):
            with then:
                narrow_tile()
            with otherwise:
                g.loop(cp, pend, tr, tile, "tcb")

    def panel(cp: ir.Value) -> None:
        pend = g.min(b.add(cp, _c(PANEL_COLUMNS)), i1)
        g.loop(o0, o1, tr, lambda rb: row_block(rb, cp, pend), "trb")

    if paneled(spec):
        g.loop(i0, i1, PANEL_COLUMNS, panel, "tcp")
    else:
        g.loop(o0, o1, tr, lambda rb: row_block(rb, i0, i1), "trb")
    b.ret_void()
    return fn

