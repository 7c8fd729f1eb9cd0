"""A blocked, packed, register-tiled GEMM kernel for one ``dot_general`` (BLIS/GotoBLAS).

Every dot_general is viewed as a batch of matrix products ``C[b] = A[b] @ B[b]`` with
``A[b]`` of shape M x K, ``B[b]`` of shape K x N and ``C`` the dense row-major output
``[batch..., lhs free..., rhs free...]``, i.e. ``[Bt*M, N]``. The operands are never
copied into that form: each group of dims (batch, M, K, N) of each operand is an offset
map, one stride when its dims merge (the usual case, transposed operands included), a
constant table of offsets otherwise; packing reads through those maps.

The loop nest, per batch, over a range of rows and of columns of C given by the common
kernel signature (``[o0, o1)`` is the rows, or the columns for a wide C: ``GemmSpec.
columns_outer``, counted in NR-wide panels; whole batches for ``GemmSpec.batch_outer``),
so the thread pool splits it like any other kernel::

    for jc in N step NC:                      B panel  KC x NC
      for pc in K step KC:
        pack B[pc:pc+kc, jc:jc+nc] -> Bp      (NR-wide column panels, zero padded)
        for ic in M step MC:                  A block  MC x KC   (L2)
          [pack A[ic:ic+mc, pc:pc+kc] -> Ap]  (MR-high row panels, zero padded)
          for ir in mc step MR:               A row tile MR x KC (L1)
            for jr in nc step NR:             B micro-panel KC x NR (from L2)
              micro-kernel: an MR x NR tile of C in MR*NR/V vector registers;
              per k: NR/V vector loads of Bp, MR broadcasts of A, MR*NR/V fmuladd
              (the K loop unrolled by K_UNROLL over a packed B)

(``ir`` outside ``jr`` when the packed B block fits half the L2, for a plain dot:
``_Emitter.rows_outer``; else ``jr`` outside ``ir``, each B micro-panel against every
row tile of the A block.)

A is only read through broadcasts, so when its M and K dims are plain strides (row-major
or transposed) the micro-kernel reads it in place (an edge tile is moved to end at the
last row and writes only its new rows); B is read in place too when no B micro-panel is
reused (M <= MR; on 512-bit vectors, up to two row tiles, its rows prefetched) and its
rows are contiguous (masked loads at the right edge); float16
and table-mapped operands are always packed. The tile is added to C at the end of each
K block (the first block stores it); C rows are prefetched at the start. Columns beyond
N (the right edge) use masked loads/stores.

float16 is packed as float32 and accumulated in float32 across all of K in a float32
scratch block (loop order jc, ic, pc), then rounded once, like the interpreter (einsum in
float32, one rounding). Integers wrap (any summation order gives the same bits).

A matrix-vector product with K contiguous in both operands is one vectorized dot product
per row (``_rowdot``); any other one is computed as the vector-matrix product C^T = B^T A^T
(and a vector-matrix product whose B has K contiguous as such row dots). A vector-matrix
product (one row of C) with B's rows contiguous streams B row by row, a few rows at a
time, through a block of C in L1 (``_vecmat``): memory-bound, it is never packed. Both
prefetch the matrix's lines ahead of their loads, and threads split a streamed product in
whole C blocks (``GemmSpec.vecmat_share``).

An ``output`` fusion (a dot and its epilogue: bias add, activation, residual add, scaling,
convert; docs/ir.md "Fusions") runs the same kernel: the epilogue is a scalar function
``epi(bufs, lin, value)`` (the fused computation with the dot's value given, emitted by
the shared loop emitter and inlined) that finishes one output element at flat index
``lin`` and stores it. The micro-kernel calls it on the last K block for its tile, from
the registers through a tile-sized stack block in L1 (never the output buffer, which
meanwhile holds the partial sums of earlier K blocks), or, where a tile row is one run of
an epilogue row (an NCHW convolution's feature: its H x W pixels, ``_epilogue_tail``),
through ``epi_row``, which computes the row's own terms once before its column loop, or,
for a full tile whose columns are the output's last dim and an epilogue with per-column
terms (an NHWC convolution's batch norm), through ``epi_tile``, which computes those once
per column for all the tile's rows; the float16 path (and an epilogue
whose output dtype differs from the dot's, which cannot keep partial sums in the output)
calls it when it rounds its float32 block, the matrix-vector path per row sum, and an
empty contraction on zeros.

A convolution (conv.py) is the same kernel: its Layout maps C onto the output in place
(row stride ``ldc``, batch offsets ``c_b``) and its patch operand is a ``Window``, read
through an indirection table of row pointers by the micro-kernel (``ind_seg``) or packed
with masks (``_pack_win``). An NCHW convolution's last panel of at most
``TAIL_DOT_COLUMNS`` pixel columns runs as dot products along K (``_tail_rows``).

Scratch: the packed buffers (and the f16 accumulator) are allocas of a fixed size in the
kernel's frame, at most ``STACK_BUDGET`` bytes, clamped to the problem size: two threads
running the kernel at once each have their own, and AOT code needs no allocator.
"""
from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir
from llvmlite.ir import instructions

from axle.ir.dotdims import DotDims
from axle.ir.dtypes import DType
from axle.ir.module import Computation, Node
from axle.ir.ops import Op
from axle.lowering.schedule import Schedule, schedule

from .emitter import SIG, Index, KernelEmitter, KernelSpec, _loop_hints, no_unroll
from .lltypes import COMPUTE, F16, F32, I1, I32, I64, PTR, STORAGE, VOID
from .mathfns import intrinsic

#: upper bound of the packed buffers' bytes in a GEMM kernel's stack frame
STACK_BUDGET = 1152 * 1024
#: from this many output columns, threads split a dot by columns (GemmSpec.columns_outer)
COLUMNS_OUTER_MIN = 256
#: the same for a convolution whose columns are pixels (NCHW): split by rows, every thread
#: chunk packs all the patches (a 14x14 map's, for 196 columns), split by columns only its own
CONV_COLUMNS_OUTER_MIN = 128
#: below that, a thread's share of such a convolution has at least this many rows (output
#: features): each share packs all the patches (B), which costs as much as the products of
#: about 50 rows (a 7x7 map's 49 pixels, 4608-long K: ~77 us per pack against 2.5 us per
#: row, one core of the AVX-512 host), so shares of 64 rows ran a 512-feature layer split
#: in 8 at 1.4x one thread's speed on two
CONV_SHARE_ROWS = 256
#: an NHWC convolution (rows: pixels, A: its patches read in place) whose kernel (B) the
#: GEMM packs on every call is split in shares of whole pixel rows too: each share packs
#: all of B, about as much work as the products of 15 pixel rows whatever K and N (a
#: 3x3 128 -> 128-feature layer at 28x28: ~24 us per pack of 1152 x 128 against 1.66 us
#: per row, one core). So 2 to CONV_PIXEL_SHARES shares (a power of two: 2 and 4 threads
#: share them evenly), of at least CONV_SHARE_PIXELS rows where there are that many: the
#: 784 rows of that layer in 4 shares, not the pool's 8 chunks of 98 (15% more work than
#: one call on one thread, 4 shares about 6%)
CONV_SHARE_PIXELS = 192
CONV_PIXEL_SHARES = 8
#: the most rows of an A read in place by rows in one micro-tile (tiles)
DIRECT_A_ROWS = 8
#: an NCHW convolution's last panel of at most this many pixel columns is computed as dot
#: products along K (``_Emitter.tail_dots``), not as a one-vector tile of them
TAIL_DOT_COLUMNS = 4
#: split K across threads from this long a K, this many times the output's longer side
#: (GemmSpec.split_reduce_size)
SPLIT_K_MIN = 4096
SPLIT_K_RATIO = 16
#: bytes of C's row block a vector-matrix product keeps in L1 while B's rows stream by
VECMAT_BLOCK = 8 * 1024
#: B rows added into that block per pass over it (one load and store of C per this many FMAs)
VECMAT_ROWS = 4
#: B rows ahead of the pass whose lines a vector-matrix product prefetches (two passes)
VECMAT_PREFETCH = 8
#: threads split a vector-matrix product in whole C blocks, at least this many shares
#: (GemmSpec.vecmat_share)
VECMAT_SHARES_MIN = 2
#: bytes ahead in each A row that a row dot (matrix-vector product) prefetches
ROWDOT_PREFETCH = 1024
#: K rows per chunk when packing a K-contiguous B column by column (its NR-wide slice of
#: the packed panel, PACK_KB * NR elements, stays in L1 while the columns are read)
PACK_KB = 64
#: K rows per chunk when packing a B whose rows are contiguous (_pack_b_by_rows)
PACK_ROWS = 16
#: a plain dot whose C has fewer rows than this many default tiles picks the tile shape
#: that computes the fewest rows (tiles: [16, K] @ [K, N] in 8 x 48 tiles, not 6 x 64)
SMALL_M_TILES = 4
#: a B read in place (GemmSpec: few rows) serves this many row tiles on 512-bit vectors
#: (one elsewhere: measured slower than packing on AVX2), and its rows this many K rows
#: ahead are prefetched there
DIRECT_B_TILES_512 = 2
DIRECT_B_PREFETCH = 8
#: the micro-kernel's K loop over a packed B is unrolled this many times (then a loop
#: over the rest)
K_UNROLL = 2
#: a plain dot's macro-kernel takes A's row tiles outer (``_Emitter.rows_outer``) when its
#: packed B block fills at most this share of the host's per-core L2 (``l2_bytes``)
ROWS_OUTER_L2_SHARE = 0.5
#: the per-core L2 assumed where the host's cannot be read (the smallest of the hosts
#: seen: Zen 3's)
DEFAULT_L2 = 512 * 1024


# ============================================================== layout of one dot


@dataclass(frozen=True)
class Offsets:
    """Element offsets of a group of dims indexed by its flattened (row-major) index:
    ``i * stride`` when the dims merge, else ``table[i]``."""

    size: int
    stride: int = 0
    table: tuple[int, ...] | None = None

    @staticmethod
    def of(shape: Sequence[int], dims: Sequence[int]) -> Offsets:
        strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
        sizes = [shape[d] for d in dims]
        size = math.prod(sizes)
        real = [d for d in dims if shape[d] > 1]
        if all(strides[a] == strides[b] * shape[b] for a, b in zip(real, real[1:])):
            return Offsets(size, strides[real[-1]] if real else 0)
        idx = np.indices(sizes).reshape(len(dims), -1)
        table = sum(idx[j] * strides[d] for j, d in enumerate(dims))
        return Offsets(size, 0, tuple(int(v) for v in np.asarray(table).reshape(-1)))

    @staticmethod
    def strided(sizes: Sequence[int], strides: Sequence[int]) -> Offsets:
        """The offsets of dims of ``sizes`` (flattened row-major) at element ``strides``:
        one stride when they merge (size-1 dims aside), else a table."""
        size = math.prod(sizes)
        real = [(n, s) for n, s in zip(sizes, strides) if n > 1]
        if all(sa == sb * nb for (_, sa), (nb, sb) in zip(real, real[1:])):
            return Offsets(size, real[-1][1] if real else 0)
        idx = np.indices(tuple(sizes)).reshape(len(sizes), -1)
        table = sum(idx[j] * s for j, s in enumerate(strides))
        return Offsets(size, 0, tuple(int(v) for v in np.asarray(table).reshape(-1)))


@dataclass(frozen=True)
class Window:
    """A convolution's input seen as its patch matrix (im2col, never materialized): rows
    are output pixels (the flattened dims ``pix_sizes``), columns window positions ``k``
    (input feature and kernel position, K's order). Along spatial dim ``d`` the element
    (p, k) sits at ``q = o_d * stride_d - low_d + k_pos[d][k]`` of the lhs-dilated input
    (``extent_d`` long, an element every ``ldil_d``); it reads the input at offset
    ``base(p) + k_off[k] + sum_d q // ldil_d * in_stride_d``, or 0 when ``q`` is outside
    [0, extent_d) (padding) or falls in a hole: packing masks it, nothing is padded."""

    pix_sizes: tuple[int, ...]
    #: per pixel dim: its spatial dim, or -1 for the batch dim (offset ``i * pix_strides``)
    pix_spatial: tuple[int, ...]
    pix_strides: tuple[int, ...]
    #: per spatial dim: window stride, low padding, lhs dilation, dilated extent, input stride
    stride: tuple[int, ...]
    low: tuple[int, ...]
    ldil: tuple[int, ...]
    extent: tuple[int, ...]
    in_stride: tuple[int, ...]
    #: per window position: the input feature's offset, and per spatial dim its position
    k_off: Offsets
    k_pos: tuple[Offsets, ...]
    #: with no lhs dilation: k_off plus every k_pos times its input stride (one table)
    k_lin: Offsets
    #: when K's innermost dim is the input feature (NHWC with HWIO): runs of ``run``
    #: window positions share their validity and lie ``run_stride`` apart in the input
    run: int = 1
    run_stride: int = 0
    #: K's innermost ``line`` window positions are consecutive in the input whenever all
    #: of them are inside it (the feature run and the spatial dim outside it: conv.py
    #: _feature_line); only that dim's position moves along a line, so its valid part is
    #: one interval and a line is wholly valid when its two ends are
    line: int = 1

    @property
    def dilated(self) -> bool:
        return any(d > 1 for d in self.ldil)


@dataclass(frozen=True)
class Layout:
    """dot_general as batched matrices: C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]."""

    batch: int
    m: int
    n: int
    k: int
    a_b: Offsets
    a_m: Offsets
    a_k: Offsets
    b_b: Offsets
    b_k: Offsets
    b_n: Offsets
    #: a convolution's C, when not the dense [Bt, M, N]: its batch offsets and row stride
    c_b: Offsets | None = None
    ldc: int = 0
    #: a convolution's patch operand (Window): A's rows or B's columns are output pixels
    a_win: Window | None = None
    b_win: Window | None = None
    #: which operand of the node is A (a convolution may put its kernel there)
    a_operand: int = 0

    @property
    def c_ld(self) -> int:
        """C's row stride."""
        return self.ldc or self.n

    @property
    def dense(self) -> bool:
        """C is the dense [Bt, M, N] and both operands are read through offset maps."""
        return self.c_b is None and self.ldc in (0, self.n) and self.a_win is None and self.b_win is None

    def rows_of(self, width: int) -> bool:
        """Whether every row of C starts a row of ``width`` elements of the output (a
        convolution's C rows may be spaced apart or offset by group)."""
        starts = (0, self.m * self.n) if self.c_b is None else (self.c_b.stride,) + (self.c_b.table or ())
        return self.c_ld % width == 0 and all(s % width == 0 for s in starts)

    @staticmethod
    def of(node: Node) -> Layout:
        lhs, rhs = (o.shape for o in node.operands)
        d = DotDims.of(node)
        lb, rb, lc, rc, lfree, rfree = (list(g) for g in (d.lhs_batch, d.rhs_batch, d.lhs_contracting,
                                                         d.rhs_contracting, d.lhs_free, d.rhs_free))
        ab, am, ak = Offsets.of(lhs, lb), Offsets.of(lhs, lfree), Offsets.of(lhs, lc)
        bb, bk, bn = Offsets.of(rhs, rb), Offsets.of(rhs, rc), Offsets.of(rhs, rfree)
        return Layout(ab.size, am.size, bn.size, ak.size, ab, am, ak, bb, bk, bn)

    def swapped(self) -> Layout:
        """The transposed product C^T = B^T A^T (the same memory when M or N is 1)."""
        return Layout(self.batch, self.n, self.m, self.k, self.b_b, self.b_n, self.b_k, self.a_b, self.a_k, self.a_m)

    @property
    def rowdot(self) -> bool:
        """A matrix-vector product whose K is contiguous in both operands: computed as
        one vectorized dot product per output row."""
        return (self.dense and self.n == 1 and self.k > 1 and self.a_k.table is None and self.a_k.stride == 1
                and self.b_k.table is None and self.b_k.stride == 1)

    @property
    def vecmat(self) -> bool:
        """One row of C whose B rows are contiguous: B streamed row by row (``_vecmat``)."""
        return (self.dense and self.m == 1 and not self.rowdot and self.b_n.table is None and self.b_n.stride == 1
                and self.b_k.table is None and self.a_k.table is None)

    @property
    def swap(self) -> bool:
        """Computed as C^T = B^T A^T (the same memory): a matrix-vector product with a
        strided K (a vector-matrix product then), or a vector-matrix product whose B has K
        contiguous (row dots then)."""
        return self.dense and ((self.n == 1 and self.m > 1 and not self.rowdot)
                               or (self.m == 1 and self.n > 1 and self.swapped().rowdot))


# ================================================================ tile sizes


@dataclass(frozen=True)
class Tiles:
    v: int   # vector lanes
    mr: int  # micro-tile rows (broadcast A elements)
    nr: int  # micro-tile columns, NR/V vectors
    kc: int  # K block
    mc: int  # M block (a multiple of MR)
    nc: int  # N block (a multiple of NR)


#: the dtypes the tiled GEMM kernels compute (others take the loop nest's dot)
GEMM_DTYPES = frozenset({DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64})


def compute_bits(dt: DType) -> int:
    return {DType.FLOAT16: 32, DType.FLOAT32: 32, DType.FLOAT64: 64, DType.INT32: 32, DType.INT64: 64}[dt]


def tiles(dt: DType, vector_bits: int, layout: Layout) -> Tiles:
    """The register tile from the vector width: MR x NV vectors of accumulators, 24 of
    them with AVX-512's 32 registers (6 x 4 vectors; narrower and taller when N is
    small), 12 with 16 registers (6 x 2); for a C of few rows the one computing the
    fewest rows (``_small_m_tile``). Cache blocks from the element size (a B
    micro-panel of at most 128 KB, an A block of ~96 KB, the rest of ``STACK_BUDGET`` for
    the B panel and float16's accumulator), clamped to the problem so small dots use
    small frames."""
    bits = compute_bits(dt)
    v = max(vector_bits // bits, 1)
    accs, max_nv = (24, 4) if vector_bits >= 512 else (12, 2)
    nv = max(1, min(max_nv, -(-layout.n // v)))
    # A read in place by rows: each row of the tile is a line of its own, and rows a
    # power of two apart share an L1 set (12 ways on Zen): at most DIRECT_A_ROWS of them
    a_rows = (layout.a_m.table is None and layout.a_m.stride > 1 and layout.a_k.table is None
              and layout.a_k.stride == 1)
    if layout.b_win is not None and layout.n >= CONV_COLUMNS_OUTER_MIN:
        nv = _balanced_nv(layout.n, v, nv)
    if (layout.b_win is not None and a_rows and dt is not DType.FLOAT16 and nv == max_nv == 4
            and layout.n % (4 * v) > TAIL_DOT_COLUMNS
            and 0 < layout.n % (3 * v) <= TAIL_DOT_COLUMNS):
        nv = 3  # a 7x7 map's 49 pixels: 48 in full vectors and one by dot products, not 64 lanes
    mr = min(accs // nv, DIRECT_A_ROWS) if a_rows else accs // nv
    if layout.dense and 0 < layout.m < SMALL_M_TILES * mr:
        nv, mr = _small_m_tile(layout, v, accs, nv, mr, a_rows)
    mr = -(-layout.m // -(-layout.m // mr)) if layout.m else mr  # balanced row tiles
    nr = nv * v
    size = bits // 8
    kc = max(8, min(512, 128 * 1024 // (nr * size) // 8 * 8))  # B micro-panel <= 128 KB
    mc = max(mr, (96 * 1024 // (kc * size)) // mr * mr)
    per_col = kc * size + (mc * 4 if dt is DType.FLOAT16 else 0)  # B panel (+ f16's f32 accumulator)
    nc = max(nr, (STACK_BUDGET - mc * kc * size) // per_col // nr * nr)
    kc = min(kc, max(layout.k, 1))
    mc = min(mc, _round_up(max(layout.m, 1), mr))
    nc = min(nc, _round_up(max(layout.n, 1), nr))
    return Tiles(v, mr, nr, kc, mc, nc)


#: thread counts whose share of an NCHW convolution's pixel panels _balanced_nv evens out
BALANCE_THREADS = (2, 4)
#: ... when the narrower tile shortens the longest shares by this factor at least
BALANCE_GAIN = 0.95


def _balanced_nv(n: int, v: int, nv: int) -> int:
    """Vectors per tile (``nv``, or one fewer from 4) for an NCHW convolution whose threads split
    its ``n`` pixel columns in whole panels (GemmSpec.columns_outer): the one whose panels
    the threads share most evenly (the longest share, summed over ``BALANCE_THREADS``,
    each panel to the thread with the least so far, as they are claimed), ``nv`` unless
    one fewer shortens it by ``BALANCE_GAIN``. A 14x14 map's 196 columns are 3 panels
    of 64 and one of 4, shared 128 / 68 by two threads; as 4 panels of 48 and one of 4,
    100 / 96 (8 x 48 tiles, as fast as 6 x 64)."""
    def longest(width: int) -> int:
        panels = [width] * (n // width)
        if n % width and n % width <= TAIL_DOT_COLUMNS:
            panels[-1] += n % width  # computed with the panel before it (GemmSpec.column_units)
        elif n % width:
            panels.append(n % width)
        total = 0
        for threads in BALANCE_THREADS:
            load = [0] * threads
            for p in panels:
                load[load.index(min(load))] += p
            total += max(load)
        return total

    # (3 vectors at least: a narrower tile broadcasts as many A elements for fewer FMAs)
    return nv - 1 if nv > 3 and longest((nv - 1) * v) < BALANCE_GAIN * longest(nv * v) else nv


def _small_m_tile(layout: Layout, v: int, accs: int, nv: int, mr: int, a_rows: bool) -> tuple[int, int]:
    """(NV, MR) for a C of few rows: of the tiles the registers hold (NV up to 4 vectors
    with 24 accumulators, up to 3 with 12: 4 x 3 accumulators, 3 B vectors and a
    broadcast fill AVX2's 16 registers), the one that computes the fewest rows, the widest
    of those. M = 16 took 3 tiles of 6 rows (18 rows computed, 6 x 16 on AVX2: 0.67x
    NumPy's, its B packed for 3 tiles); as 2 x 8 rows (4 x 4 on AVX2), exactly 16."""
    best = (-(-layout.m // mr) * mr, -nv, nv, mr)
    for nv_c in range(1, min(4 if accs > 12 else 3, -(-layout.n // v)) + 1):
        mr_c = min(accs // nv_c, DIRECT_A_ROWS) if a_rows else accs // nv_c
        best = min(best, (-(-layout.m // mr_c) * mr_c, -nv_c, nv_c, mr_c))
    return best[2], best[3]


@functools.cache
def l2_bytes() -> int:
    """The host's per-core L2 cache in bytes, from sysfs (``DEFAULT_L2`` where there is none)."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(root)):
            def field(name: str, entry: str = entry) -> str:
                with open(os.path.join(root, entry, name)) as f:
                    return f.read().strip()

            if entry.startswith("index") and field("level") == "2" and field("type") in ("Unified", "Data"):
                size = field("size")
                scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
                return int(size.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return DEFAULT_L2


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


# ================================================================ prepacked B


@dataclass(frozen=True)
class PackedB:
    """B packed once into NR-wide column panels over all of K: ``[batches, panels, K, NR]``
    of the compute type, zero past N; panel ``p`` of a batch holds columns
    ``[p*NR, p*NR + NR)``, row ``k`` of it at ``k*NR``. A K block ``[pc, pc+kc)`` of a panel
    is then exactly what ``_pack_b`` writes for it (``Bp[k*NR + j]``), at ``pc*NR`` in the
    panel, so the kernel reads it in place with the same blocks and the same sums."""

    nr: int
    panels: int
    k: int
    batches: int  # 1: every batch reads the same B (its batch stride is 0)
    dtype: np.dtype

    @property
    def batch_stride(self) -> int:
        """Elements between two batches' panels (0: one B shared by all)."""
        return 0 if self.batches == 1 else self.panels * self.k * self.nr


def _offsets(o: Offsets) -> np.ndarray:
    return np.asarray(o.table, np.int64) if o.table is not None else np.arange(o.size, dtype=np.int64) * o.stride


def aligned_zeros(shape: tuple[int, ...], dtype: np.dtype, align: int = 64) -> np.ndarray:
    """Zeros whose first element is ``align``-byte aligned (the kernel's aligned loads)."""
    n = math.prod(shape) * dtype.itemsize
    raw = np.zeros(n + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + n].view(dtype).reshape(shape)


def pack_b(spec: GemmSpec, value: np.ndarray) -> np.ndarray:
    """The constant B operand ``value`` of ``spec``'s kernel in its ``b_packing`` layout
    (float16 widened to float32 exactly, as the kernel's packing does)."""
    p, lay = spec.b_packing, spec.layout
    assert p is not None, f"{spec.name}: B is not packed"
    flat = np.ascontiguousarray(value).reshape(-1)
    out = aligned_zeros((p.batches, p.panels, p.k, p.nr), p.dtype)
    full, rest = divmod(lay.n, p.nr)
    ks, ns, bs = _offsets(lay.b_k), _offsets(lay.b_n), _offsets(lay.b_b)
    for bi in range(p.batches):
        if lay.b_k.table is None and lay.b_n.table is None:  # a strided view, no index array
            sub = flat[bs[bi]:]
            mat = np.lib.stride_tricks.as_strided(sub, (lay.k, lay.n), (lay.b_k.stride * flat.itemsize,
                                                                      lay.b_n.stride * flat.itemsize))
        else:
            mat = flat[bs[bi] + ks[:, None] + ns[None, :]]
        out[bi, :full] = mat[:, :full * p.nr].reshape(lay.k, full, p.nr).transpose(1, 0, 2)
        if rest:
            out[bi, full, :, :rest] = mat[:, full * p.nr:]
    return out


def _direct_b(lay: Layout, t: Tiles, vector_bits: int, plain: bool) -> int | None:
    """B's row stride when the micro-kernel reads it in place: its rows are contiguous and
    no B micro-panel is reused (a single row tile), where packing would only add a pass
    over B. On 512-bit vectors a plain dot's B serves two row tiles in place too (the
    second reads it from L2), with its rows prefetched: [16,1024] @ [1024,1024] in 8-row
    tiles, one thread, 228 -> 182 us warm and 330 -> 272 us cold."""
    tiles_b = DIRECT_B_TILES_512 if vector_bits >= 512 and lay.dense else 1
    return (lay.b_k.stride if plain and lay.m <= tiles_b * t.mr and lay.b_k.table is None
            and lay.b_n.table is None and lay.b_n.stride == 1 and lay.b_win is None else None)


# ================================================================ the spec


@dataclass
class GemmSpec(KernelSpec):
    """A kernel computing one dot_general node (the root of ``comp``, over its
    parameters) with the GEMM. Its loop space is (batch * M rows, N columns) of the output
    viewed as ``[Bt*M, N]``. ``vector_bits`` 0 means the host's."""

    vector_bits: int = 0
    #: B (the operand packed into NR-wide panels) is a constant packed once, at compile
    #: time, into those panels (``b_packing``, ``pack_b``); the kernel reads it in place
    prepacked_b: bool = False

    @functools.cached_property
    def schedule(self) -> Schedule:
        """The shared schedule of the launch (form ``dot``): a lone dot, or an ``output``
        fusion (the plan's launch kind; this spec's ``kind`` is the emitter's, "gemm")."""
        return schedule(self.comp, "dot" if self.comp.root.traits.contraction else "output")

    @property
    def dot(self) -> Node:
        """The dot_general (or convolution: ConvSpec): the root, or the producer of an
        ``output`` fusion's epilogue."""
        d = self.schedule.dot
        assert d is not None, f"gemm kernel {self.name} has no dot"
        return d

    @property
    def epilogue(self) -> bool:
        return self.schedule.epilogue

    @functools.cached_property
    def layout(self) -> Layout:
        return Layout.of(self.dot)

    @property
    def columns_outer(self) -> bool:
        """Whether the kernel's outer range (the one the thread pool splits first) is the
        output's columns rather than its rows: for a wide C whose A is read in place,
        threads then share no packing work (split by rows, each would pack all of B)."""
        lay = self.layout
        wide = CONV_COLUMNS_OUTER_MIN if lay.b_win is not None else COLUMNS_OUTER_MIN
        return (lay.n >= wide and not _accumulates(self.dot, self.comp.root)
                and lay.a_m.table is None and lay.a_k.table is None and lay.a_win is None)

    @functools.cached_property
    def batch_outer(self) -> bool:
        """Whether A is packed once per K block for all the batches (``_shares_a``); the
        kernel's rows are then whole batches, so a thread's range never splits one."""
        return _shares_a(self.dot, self.comp.root, self.layout, self.vector_bits or _host_bits())

    @functools.cached_property
    def column_unit(self) -> int:
        """Output columns per unit of the kernel's column range: NR (a micro-tile's width)
        when threads split the columns (``columns_outer``), so that a thread's share is
        whole NR-wide panels; cut anywhere, a 196-column C in 8 shares of 24 columns ran
        its 64-wide tiles with 24 of them used. A prepacked B's panels start at multiples
        of NR, so its columns are counted in panels too, whichever range they are. A
        streamed vector-matrix product's columns are counted in ``vecmat_share``s."""
        if self.columns_outer and not self.layout.swap and self.vecmat_share > 1:
            return self.vecmat_share
        if not self.columns_outer and not self.prepacked_b:
            return 1
        return tiles(self.dot.dtype, self.vector_bits or _host_bits(), self.layout).nr

    @functools.cached_property
    def column_units(self) -> int:
        """Units (``column_unit``) of the column range when threads split the columns
        (``columns_outer``). An NCHW convolution's last panel of at most
        ``TAIL_DOT_COLUMNS`` pixel columns (computed by dot products: ``_Emitter.tail_dots``)
        belongs to the unit before it, whose A blocks it then reads from the L2 right after
        that panel: as a unit of its own it read all of A (the weights, in place) again, which
        cost more than its products (a 14x14 map's last 4 columns, 256 features: 116 us as
        a unit, against 300 us for a panel of 48)."""
        n, unit, lay = self.layout.n, self.column_unit, self.layout
        tail = n % unit
        if self.columns_outer and lay.b_win is not None and n > unit and 0 < tail <= TAIL_DOT_COLUMNS:
            return n // unit
        return -(-n // unit)

    @functools.cached_property
    def vecmat_share(self) -> int:
        """Output columns per unit of the range threads split a streamed vector-matrix
        product (``_vecmat``, swapped or not) by: a whole C block (``VECMAT_BLOCK``
        bytes), or less where that leaves fewer than ``VECMAT_SHARES_MIN`` shares; 1 for
        any other kernel. Each thread then reads B's rows in runs as long as one thread
        does: cut in 8 chunks, a [4096] @ [4096,4096] float32 product read 2 KB runs of
        every row (512 columns), which the hardware prefetchers barely start on."""
        lay = self.layout
        streamed = lay.swapped().vecmat if lay.swap else lay.vecmat
        if not streamed or _accumulates(self.dot, self.comp.root):
            return 1
        v = max((self.vector_bits or _host_bits()) // compute_bits(self.dot.dtype), 1)
        block = max(VECMAT_BLOCK // (compute_bits(self.dot.dtype) // 8) // v, 1) * v  # _vecmat_block's
        width = lay.m if lay.swap else lay.n
        return max(1, min(block, _round_up(-(-width // VECMAT_SHARES_MIN), v)))

    @functools.cached_property
    def b_packing(self) -> PackedB | None:
        """How the kernel packs B into NR-wide panels, when it does (None: B is a window's
        patches, read in place, or not packed by this product: a row dot, a vector-matrix
        product, a swapped one). What a constant B is packed into once (``pack_b``)."""
        lay = self.layout
        if lay.swap or lay.rowdot or lay.b_win is not None or 0 in (lay.m, lay.n, lay.k):
            return None
        plain = not _accumulates(self.dot, self.comp.root)
        if plain and lay.vecmat:
            return None
        bits = self.vector_bits or _host_bits()
        t = tiles(self.dot.dtype, bits, lay)
        if _direct_b(lay, t, bits, plain) is not None:
            return None
        shared = lay.b_b.table is None and lay.b_b.stride == 0  # one B for every batch
        panels = -(-lay.n // t.nr)
        return PackedB(t.nr, panels, lay.k, 1 if shared else lay.batch,
                       np.dtype(np.float32) if self.dot.dtype is DType.FLOAT16 else np.dtype(self.dot.dtype.np))

    @functools.cached_property
    def row_unit(self) -> int:
        """Output rows per unit of the kernel's row range: ``CONV_SHARE_ROWS`` for a
        convolution whose patches are B (NCHW) split by rows (fewer pixel columns than
        ``CONV_COLUMNS_OUTER_MIN``), since each thread's share packs all of them; a share
        of the pixel rows (``_pixel_share``) for a convolution whose patches are A (NHWC)
        and whose kernel B is packed on every call, since each share packs all of it; a
        swapped matrix-vector product streamed as a vector-matrix one (its rows are that
        product's columns) by ``vecmat_share``; else 1."""
        lay = self.layout
        if self.columns_outer or self.batch_outer:
            return 1
        if lay.b_win is not None:
            return CONV_SHARE_ROWS
        if lay.a_win is not None and not self.prepacked_b and self.b_packing is not None:
            return _pixel_share(lay.batch * lay.m, tiles(self.dot.dtype, self.vector_bits or _host_bits(), lay).mr)
        return self.vecmat_share if lay.swap else 1

    @property
    def fixed_columns(self) -> bool:
        """Split by rows only (executable._Launch), into as many shares as there are when
        fewer than the threads: a convolution split in shares of rows (``row_unit``),
        whose columns cut anywhere would run tiles of a few of their 64 columns."""
        return self.row_unit > 1

    @property
    def loop_sizes(self) -> tuple[int, int]:
        lay = self.layout
        if self.batch_outer:
            return lay.batch, lay.n
        rows, cols = lay.batch * lay.m, lay.n
        if self.columns_outer:
            return self.column_units, rows
        return -(-rows // self.row_unit), -(-cols // self.column_unit)

    @property
    def split_reduce_size(self) -> int:
        """K in units of ``k_unit``, where threads should split the contraction (each chunk
        a slice of K into partial outputs the host sums, executable._ReductionSplit): a
        long K into an output too small to share (a weight gradient over a long batch,
        [64, 65536] x [65536, 64], or as a convolution: ResNet's 3x3 weight gradients
        contract batch and pixels, 32768 long at 32x32, into 576 x 64), which split by rows
        would have every chunk pack all of B (a convolution's: all its patches); or a
        vector-matrix product with few columns (each chunk then a block of B's rows, its
        partial row summed by the host). Only plain dots and convolutions: an epilogue needs
        the whole sum, float16 rounds it once, and the row dots read all of K."""
        lay = self.layout
        shape = min(lay.m, lay.n) > 1 or (lay.vecmat and not lay.swap)
        plain = lay.dense or (lay.a_win or lay.b_win) is not None
        wanted = (shape and not self.epilogue and not _accumulates(self.dot, self.comp.root) and plain
                  and lay.k >= SPLIT_K_MIN and lay.k >= SPLIT_K_RATIO * max(lay.batch * lay.m, lay.n))
        return lay.k // self.k_unit if wanted else 0

    @property
    def k_unit(self) -> int:
        """Window positions per unit of the kernel's K range [r0, r1): a convolution's K
        blocks and the segments its patches are read or packed by (the run of input
        features, or a line of them: Window.run, Window.line, which K is a multiple of)
        start at multiples of it, so a thread's slice of K is whole segments; 1 for a dot."""
        w = self.layout.a_win or self.layout.b_win
        if w is None:
            return 1
        return w.line if w.line > 1 else w.run

    @property
    def reduce_split_first(self) -> bool:
        return self.split_reduce_size > 0


def _pixel_share(rows: int, mr: int) -> int:
    """Rows per share of an NHWC convolution whose every share packs all of its kernel
    (``CONV_SHARE_PIXELS``): ``rows`` in 2 to ``CONV_PIXEL_SHARES`` shares, a power of
    two, at least ``CONV_SHARE_PIXELS`` rows each where there are that many, rounded up to
    whole ``mr``-row micro-tiles (784 rows, 6-row tiles: 198, 198, 198, 190)."""
    shares = 2
    while shares < CONV_PIXEL_SHARES and rows >= 2 * shares * CONV_SHARE_PIXELS:
        shares *= 2
    return max(1, _round_up(-(-rows // shares), mr))


def _host_bits() -> int:
    from .target import host

    return host().vector_bits


def _shares_a(dot: Node, out: Node, lay: Layout, vector_bits: int) -> bool:
    """A is one matrix for every batch (batch offsets 0: a convolution's kernel under an
    NCHW output's batch, or a weight gradient's output-gradient operand under its channel
    batch) that has to be packed (its offsets are tables), so packing it per batch, as
    the per-batch loop nest does, repeats the same work ``batch`` times: a weight gradient
    ``dw[c, o, kh, kw]`` of a 64-channel layer packed its 2M-element output gradient 64
    times for 9 columns each. Then the K blocks go outside the batches and each A block,
    all M rows of it, is packed once (its bytes and a B panel within ``STACK_BUDGET``)."""
    if lay.batch < 2 or 0 in (lay.m, lay.n, lay.k) or lay.a_win is not None:
        return False
    if lay.a_b.table is not None or lay.a_b.stride != 0:
        return False  # a matrix per batch
    if lay.rowdot or (lay.dense and lay.n == 1) or _accumulates(dot, out):
        return False  # the matrix-vector paths; the float16 path's own loop order
    if lay.a_m.table is None and lay.a_k.table is None:
        return False  # read in place: nothing is packed
    t = tiles(dot.dtype, vector_bits, lay)
    size = compute_bits(dot.dtype) // 8
    return (_round_up(lay.m, t.mr) + t.nc) * t.kc * size <= STACK_BUDGET


def _epilogue_tail(shape: Sequence[int], lay: Layout, swap: bool) -> int:
    """How many trailing output dims an epilogue's column spans: the most whose elements,
    merged, are exactly a row of C, each C row one such run (an NCHW convolution's H x W
    pixels, whose rows are output features), so that a tile row is one run of columns of
    one epilogue row (vectorized, what depends on the row alone, a batch norm's
    per-feature terms, computed once); else 1, the output's last dim. Never for rows of one
    column (an NHWC convolution's single output feature over a W of 1): every index of
    such a row is a constant, so ``epi_row`` would hoist the dot's value, which is read at
    its column, out of the column loop (LLVM rejected the kernel)."""
    if not swap and lay.n > 1:
        for t in range(len(shape), 1, -1):
            width = math.prod(shape[-t:])
            if width == lay.n and lay.rows_of(width):
                return t
    return 1


def _accumulates(dot: Node, out: Node) -> bool:
    """Whether the GEMM accumulates all of K in a compute-type block before finishing the
    output (float16, or an output dtype that cannot hold the dot's partial sums)."""
    return dot.dtype is DType.FLOAT16 or STORAGE[out.dtype] != STORAGE[dot.dtype]


class _EpilogueEmitter(KernelEmitter):
    """``void epi(bufs, row, row_end, col, <SIG's other i64s>, value)``: the element of an
    output fusion at (``row``, ``col``) of its output viewed as ``[rows, last dim]``, given
    its dot's ``value`` there (the dot's compute type; float16 is rounded here, as the
    interpreter rounds the dot). The loop emitter's value rules compute the epilogue (its
    other operands at the same index, or broadcast); stored to the kernel's output buffer.
    Inlined in a loop over columns, what depends on the row alone is hoisted and the rest
    vectorizes (a bias load, an add, a max)."""

    def __init__(self, module: ir.Module, spec: KernelSpec, dot: Node, tail: int = 1) -> None:
        self.dot_node = dot
        #: the output's trailing dims that ``col`` spans (_epilogue_tail), 1: the last dim
        self.tail = tail
        super().__init__(module, spec)

    def signature(self) -> ir.FunctionType:
        return ir.FunctionType(VOID, [*SIG.args, COMPUTE[self.dot_node.dtype]])

    def _emit(self, n: Node, idx: Sequence[Index]) -> ir.Value:
        if n.uid == self.dot_node.uid:
            v = self.fn.args[7]
            return self.round16(v) if n.dtype is DType.FLOAT16 else v
        return super()._emit(n, idx)

    def _end_columns(self, fn: ir.Function, col: ir.Value, pre: ir.Block, cond: ir.Block, done: ir.Block
                     ) -> ir.Function:
        """Closes a row or tile emitter's column loop (``col`` from ``i0``, its latch asking
        LLVM to vectorize it) after its body, and the function after the loop."""
        b = self.b
        col.add_incoming(b.add(col, _c(1)), b.block)
        latch = b.branch(cond)
        mod = fn.module
        md = mod.add_metadata([mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.enable"),
                                                 ir.Constant(I1, 1)])])
        md.operands = (md, *md.operands)  # a loop ID refers to itself
        latch.set_metadata("llvm.loop", md)
        b.position_at_end(self.tails[0])
        b.branch(pre)
        b.position_at_end(self.tails[1])
        b.branch(cond)
        col.add_incoming(self.i0, self.tails[1])
        b.position_at_end(done)
        b.ret_void()
        return fn

    def _begin(self) -> ir.Function:
        """The function, internal and always inlined, with its entry block (``self.entry``)."""
        fn = self.fn
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("alwaysinline")
        self.entry = fn.append_basic_block("entry")
        self._bufptr = {}
        return fn

    def build(self) -> ir.Function:
        fn = self._begin()
        self.b = ir.IRBuilder(self.entry)
        self.tails = {0: self.entry, 1: self.entry}
        self.cur_level = 0  # straight-line code: nothing to hoist
        (out,) = self.spec.outputs
        shape = out.shape
        row, col = self.o0, self.i0
        t = self.tail
        if t > 1:  # col spans the last t dims (an NCHW convolution's H x W pixels)
            idx = self.unravel(row, shape[:-t]) + self.unravel(col, shape[-t:])
        else:
            idx = self.unravel(row, shape[:-1]) + [col] if shape else []
        val = self.value(out, idx)
        lin = (self.b.add(self.b.mul(row, ir.Constant(I64, math.prod(shape[-t:]))), col) if shape
               else ir.Constant(I64, 0))
        self.store(self.buffer(len(self.spec.comp.parameters)), out.dtype, lin, val)
        self.b.ret_void()
        return fn


class _EpilogueRowEmitter(_EpilogueEmitter):
    """``void epi_row(bufs, row, _, c0, c1, _, _, ptr vals)``: the epilogue over columns
    [c0, c1) of one of its rows (``tail`` > 1: an NCHW convolution's output feature, its H x
    W pixels the columns), given the dot's values at ``vals[c - c0]``. What depends on the
    row alone (a batch norm's per-feature scale and shift, a bias) is computed once, before
    the column loop, which vectorizes: per element, the scalar ``epi`` inlined in a column
    loop left those loads in the loop (the output's stores may alias them), which LLVM
    then kept scalar."""

    def signature(self) -> ir.FunctionType:
        return ir.FunctionType(VOID, [*SIG.args, PTR])

    def _emit(self, n: Node, idx: Sequence[Index]) -> ir.Value:
        if n.uid == self.dot_node.uid:
            ct = COMPUTE[n.dtype]
            at = self.b.gep(self.fn.args[7], [self.b.sub(self._col, self.i0)], source_etype=ct, inbounds=True)
            v = self.b.load(at, typ=ct)
            return self.round16(v) if n.dtype is DType.FLOAT16 else v
        return KernelEmitter._emit(self, n, idx)

    def build(self) -> ir.Function:
        fn = self._begin()
        pre = fn.append_basic_block("row")
        cond = fn.append_basic_block("col.cond")
        body = fn.append_basic_block("col.body")
        done = fn.append_basic_block("done")
        b = self.b = ir.IRBuilder(self.entry)
        (out,) = self.spec.outputs
        shape, t = out.shape, self.tail
        width = math.prod(shape[-t:])
        row = self.o0
        # levels as the loop kernels': 0 the call, 1 the row (its preamble: ``pre``), 2 a column
        self.level[id(row)] = 1
        self.tails = {0: self.entry, 1: pre}
        b.position_at_end(cond)
        col = b.phi(I64)
        b.cbranch(b.icmp_signed("<", col, self.i1), body, done)
        self.level[id(col)] = 2
        self._col = col
        b.position_at_end(body)
        self.cur_level = 2
        idx = self.unravel(row, shape[:-t]) + self.unravel(col, shape[-t:])
        val = self.value(out, idx)
        lin = self.add(self.mul(row, width), col)
        self.store(self.buffer(len(self.spec.comp.parameters)), out.dtype, lin, val)
        return self._end_columns(fn, col, pre, cond, done)


class _EpilogueTileEmitter(_EpilogueEmitter):
    """``void epi_tile(bufs, row0, _, c0, c1, _, _, ptr vals)``: the epilogue over columns
    [c0, c1) of ``mr`` consecutive rows of its output viewed as ``[rows, last dim]`` (rows
    ``row0 + r * step``), the dot's values of row r at ``vals[r * nr + c - c0]``: a whole
    tile whose columns are the output's last dim (an NHWC convolution's output features,
    a dense dot's columns). One loop over the columns, vectorized, the rows unrolled in it,
    so that a value depending on the column alone (a batch norm's per-feature scale and
    shift, its ``rsqrt`` of the variance) is computed once per column for the ``mr`` rows:
    finished row by row (``epi`` inlined in a column loop per row), each row computed them
    again (the batch-1 ResNet-18 stem's batch norm and relu: 360 us of epilogue on a
    1.64 ms convolution, one core)."""

    def __init__(self, module: ir.Module, spec: KernelSpec, dot: Node, mr: int, nr: int, step: int) -> None:
        self.mr, self.nr, self.step = mr, nr, step
        self._r = 0
        super().__init__(module, spec, dot)

    def signature(self) -> ir.FunctionType:
        return ir.FunctionType(VOID, [*SIG.args, PTR])

    def _emit(self, n: Node, idx: Sequence[Index]) -> ir.Value:
        if n.uid == self.dot_node.uid:
            ct = COMPUTE[n.dtype]
            at = self.b.gep(self.fn.args[7], [self.b.add(self.b.sub(self._col, self.i0), _c(self._r * self.nr))],
                            source_etype=ct, inbounds=True)
            v = self.b.load(at, typ=ct)
            return self.round16(v) if n.dtype is DType.FLOAT16 else v
        return KernelEmitter._emit(self, n, idx)

    def build(self) -> ir.Function:
        fn = self._begin()
        pre = fn.append_basic_block("rows")
        cond = fn.append_basic_block("col.cond")
        body = fn.append_basic_block("col.body")
        done = fn.append_basic_block("done")
        b = self.b = ir.IRBuilder(self.entry)
        (out,) = self.spec.outputs
        shape = out.shape
        width = shape[-1]
        # levels as the row emitter's: 0 the call, 1 the tile's rows (``pre``), 2 a column
        self.tails = {0: self.entry, 1: pre}
        b.position_at_end(pre)
        rows = []
        for r in range(self.mr):
            row = b.add(self.o0, _c(r * self.step)) if r else self.o0
            self.level[id(row)] = 1
            rows.append(row)
        self.tails[1] = b.block
        b.position_at_end(cond)
        col = b.phi(I64)
        b.cbranch(b.icmp_signed("<", col, self.i1), body, done)
        self.level[id(col)] = 2
        self._col = col
        b.position_at_end(body)
        self.cur_level = 2
        out_buf = self.buffer(len(self.spec.comp.parameters))
        for r, row in enumerate(rows):  # one memo for the column: its column terms shared
            self._r = r
            idx = self.unravel(row, shape[:-1]) + [col]
            val = self.value(out, idx)
            self.store(out_buf, out.dtype, self.add(self.mul(row, width), col), val)
        return self._end_columns(fn, col, pre, cond, done)


def _column_terms(comp: Computation, dot: Node) -> bool:
    """Whether an epilogue computes something its dot's value does not flow into (a batch
    norm's scale from its variance): arithmetic that a row-by-row finish repeats per row."""
    after = {dot.uid}
    for n in comp.nodes:  # in topological order
        if any(o.uid in after for o in n.operands):
            after.add(n.uid)
    return any(n.uid not in after and not (n.traits.structural or n.traits.movement)
               and n.op not in (Op.CONSTANT, Op.IOTA) for n in comp.nodes)


# ================================================================ emission helpers


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _bytes(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return max(t.width // 8, 1)
    return {"half": 2, "float": 4, "double": 8}[str(t)]


def _sfx(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_sfx(t.element)}"
    return f"i{t.width}" if isinstance(t, ir.IntType) else {"half": "f16", "float": "f32", "double": "f64"}[str(t)]


def _prefetch(b: ir.IRBuilder, ptr: ir.Value) -> None:
    """A read prefetch of ``ptr``'s line into every cache level."""
    intrinsic(b, "llvm.prefetch.p0", VOID, [ptr, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])


def transposed(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The transpose of ``len(rows)`` (a power of two) vectors of as many lanes: log2 rounds
    of interleaving rows i and i + n/2 (each a perfect shuffle; after log2(n) of them row k
    holds lane k of every input)."""
    n = len(rows)
    half = n // 2
    lo = ir.Constant(ir.VectorType(I32, n), [x for i in range(half) for x in (i, n + i)])
    hi = ir.Constant(ir.VectorType(I32, n), [x for i in range(half, n) for x in (i, n + i)])
    for _ in range(n.bit_length() - 1):
        rows = [z for i in range(half) for z in (b.shuffle_vector(rows[i], rows[i + half], lo),
                                                 b.shuffle_vector(rows[i], rows[i + half], hi))]
    return rows


def _store(b: ir.IRBuilder, val: ir.Value, ptr: ir.Value, align: int) -> None:
    """A store through an untyped pointer (llvmlite's typed-pointer check refuses a vector
    stored through an element pointer, which opaque-pointer LLVM accepts)."""
    st = instructions.StoreInstr(b.block, val, ptr)
    st.align = align
    b._insert(st)


class _Gen:
    """Builder helpers: counted loops with phis, if/else, min/max, element pointers."""

    def __init__(self, fn: ir.Function) -> None:
        self.fn = fn
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._tables: dict[tuple[int, ...], ir.GlobalVariable] = {}

    def loop(self, lo: ir.Value, hi: ir.Value, step: int, body: Callable[[ir.Value], None], name: str,
             vectorize: bool = False, scalar: bool = False) -> None:
        b = self.b
        pre = b.block
        cond = self.fn.append_basic_block(f"{name}.cond")
        bodyb = self.fn.append_basic_block(f"{name}.body")
        exit_ = self.fn.append_basic_block(f"{name}.exit")
        b.branch(cond)
        b.position_at_end(cond)
        i = b.phi(I64, name=name)
        i.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", i, hi), bodyb, exit_)
        b.position_at_end(bodyb)
        body(i)
        nxt = b.add(i, _c(step))
        i.add_incoming(nxt, b.block)
        latch = b.branch(cond)
        if vectorize:  # asked for: the cost model alone leaves the epilogue's loop scalar
            mod = self.fn.module
            md = mod.add_metadata([mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.enable"),
                                                     ir.Constant(I1, 1)])])
            md.operands = (md, *md.operands)  # a loop ID refers to itself
            latch.set_metadata("llvm.loop", md)
        elif scalar:  # not unrolled nor vectorized: a short loop, not worth their compile time
            mod = self.fn.module
            _loop_hints(latch, "_axle_scalar_loop", [mod.add_metadata([
                ir.MetaDataString(mod, "llvm.loop.vectorize.enable"), ir.Constant(I1, 0)])])
        else:
            no_unroll(latch)
        b.position_at_end(exit_)

    def if_(self, cond: ir.Value, then: Callable[[], None], else_: Callable[[], None] | None = None) -> None:
        b = self.b
        t = self.fn.append_basic_block("then")
        e = self.fn.append_basic_block("else") if else_ else None
        j = self.fn.append_basic_block("endif")
        b.cbranch(cond, t, e or j)
        b.position_at_end(t)
        then()
        b.branch(j)
        if e is not None and else_ is not None:
            b.position_at_end(e)
            else_()
            b.branch(j)
        b.position_at_end(j)

    def min(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def max(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed(">", x, y), x, y)

    def gep(self, ptr: ir.Value, t: ir.Type, off: ir.Value) -> ir.Value:
        return self.b.gep(ptr, [off], source_etype=t, inbounds=True)

    def offset(self, o: Offsets, i: ir.Value, name: str) -> ir.Value:
        """The element offset of flattened group index ``i``."""
        if o.table is None:
            return self.b.mul(i, _c(o.stride)) if o.stride != 1 else i
        g = self._tables.get(o.table)
        if g is None:
            mod = self.fn.module
            at = ir.ArrayType(I64, max(len(o.table), 1))
            g = ir.GlobalVariable(mod, at, name=mod.get_unique_name(f"{self.fn.name}.{name}"))
            g.global_constant = True
            g.linkage = "internal"
            # formatted once: a convolution's tables run to tens of thousands of entries
            # (K = N x H x W of a weight gradient), and a Constant per entry, formatted one
            # by one, was most of such a kernel's code generation time
            g.initializer = ir.FormattedConstant(at, "[" + ", ".join(f"i64 {v}" for v in o.table or (0,)) + "]")
            self._tables[o.table] = g
        return self.b.load(self.gep(g, I64, i), typ=I64)


# ================================================================ the kernel


class _Emitter:
    def __init__(self, mod: ir.Module, spec: GemmSpec, vector_bits: int) -> None:
        root = spec.dot
        assert root.op in (Op.DOT_GENERAL, Op.CONVOLUTION), f"gemm kernel for {root.op}"
        assert all(o.op is Op.PARAMETER for o in root.operands), "gemm operands must be parameters"
        self.mod = mod
        self.spec = spec
        self.dt = root.dtype
        lay = spec.layout
        a_op = root.operands[lay.a_operand]
        self.in_idx = [a_op.attr["index"], root.operands[1 - lay.a_operand].attr["index"]]
        # A matrix-vector product with a strided K runs as a vector-matrix product
        # (C^T = B^T A^T, the same memory), whose N is the long dim; a vector-matrix
        # product whose B has K contiguous (``x @ w.T``) as a matrix-vector row dot.
        self.swap = lay.swap
        if self.swap:
            lay = lay.swapped()
            self.in_idx.reverse()
        self.lay = lay
        #: trailing output dims the epilogue's column spans (_epilogue_tail)
        self.epi_tail = _epilogue_tail(spec.comp.root.shape, lay, self.swap)
        self.epi: ir.Function | None = None
        self.epi_row: ir.Function | None = None
        self.epi_tile: ir.Function | None = None
        if spec.epilogue:
            espec = KernelSpec(f"{spec.name}.epi", spec.comp, "loop")
            self.epi = _EpilogueEmitter(mod, espec, root, self.epi_tail).build()
            if self.epi_tail > 1:  # a tile row is one run of an epilogue row: finished whole
                rspec = KernelSpec(f"{spec.name}.epi_row", spec.comp, "loop")
                self.epi_row = _EpilogueRowEmitter(mod, rspec, root, self.epi_tail).build()
        self.t = tiles(self.dt, vector_bits, lay)
        if (spec.epilogue and self.epi_tail == 1 and not self.swap and lay.n == self.last_dim
                and lay.rows_of(lay.n) and self.t.mr > 1 and _column_terms(spec.comp, root)):
            # a full tile finished whole, what depends on its columns alone once (epi_tile)
            tspec = KernelSpec(f"{spec.name}.epi_tile", spec.comp, "loop")
            self.epi_tile = _EpilogueTileEmitter(mod, tspec, root, self.t.mr, self.t.nr, lay.c_ld // lay.n).build()
        self.st = STORAGE[self.dt]  # storage type of A, B and C
        self.f16 = self.dt is DType.FLOAT16
        # all of K summed in a compute-type block, then finished once (float16 rounds it)
        self.accumulate = _accumulates(root, spec.comp.root)
        # One row of C whose B rows are contiguous: B streamed row by row (no packing)
        # through a block of C's row held in L1 (``_vecmat``).
        self.vecmat = not self.accumulate and lay.vecmat
        self.ct = F32 if self.f16 else self.st  # packed / compute type
        self.vt = ir.VectorType(self.ct, self.t.v)
        self.fn = ir.Function(mod, SIG, name=spec.name)
        self.fn.attributes.add("nounwind")
        self.g = _Gen(self.fn)
        self.bufs, o0, o1, i0, i1, r0, r1 = self.fn.args
        # the slice of K this call sums (a split K: GemmSpec.split_reduce_size, in k_unit
        # window positions), else all
        unit = spec.k_unit
        self.k_lo = r0 if unit == 1 else self.g.b.mul(r0, _c(unit))
        self.k_hi = (self.g.min(r1, _c(lay.k)) if unit == 1
                     else self.g.min(self.g.b.mul(self.g.min(r1, _c(-(-lay.k // unit))), _c(unit)), _c(lay.k)))
        # rows [r0, r1) and columns [c0, c1) of the output as [Bt*M, N]
        self.r0, self.r1, self.c0, self.c1 = (i0, i1, o0, o1) if spec.columns_outer else (o0, o1, i0, i1)
        if spec.columns_outer:  # the range counts NR-wide panels of the spec's columns
            unit = spec.column_unit  # (its N: swapped, this product's M)
            self.c0 = self.g.b.mul(o0, _c(unit))
            self.c1 = self.g.min(self.g.b.mul(o1, _c(unit)), _c(spec.layout.n))
            if spec.column_units < -(-spec.layout.n // unit):  # the last unit takes the short panel
                self.c1 = self.g.b.select(self.g.b.icmp_signed(">=", o1, _c(spec.column_units)),
                                          _c(spec.layout.n), self.c1)
        else:
            if spec.row_unit > 1:  # the range counts shares of row_unit rows
                self.r0 = self.g.b.mul(o0, _c(spec.row_unit))
                self.r1 = self.g.min(self.g.b.mul(o1, _c(spec.row_unit)), _c(spec.layout.batch * spec.layout.m))
            if spec.column_unit > 1:  # NR-wide panels of a prepacked B
                self.c0 = self.g.b.mul(i0, _c(spec.column_unit))
                self.c1 = self.g.min(self.g.b.mul(i1, _c(spec.column_unit)), _c(spec.layout.n))
        self.batch_outer = spec.batch_outer
        plain = not self.accumulate
        # A read in place by the micro-kernel (only broadcasts): (row stride, k stride)
        self.direct_a = ((lay.a_m.stride, lay.a_k.stride)
                         if plain and lay.a_m.table is None and lay.a_k.table is None and lay.a_win is None
                         else None)
        # B read in place (row stride) when no B micro-panel is reused (_direct_b), its
        # rows prefetched on 512-bit vectors (``b_prefetch``)
        self.b_prefetch = vector_bits >= 512 and lay.dense
        self.direct_b = _direct_b(lay, self.t, vector_bits, plain)
        # The macro-kernel's tile order (``_macro``): each row tile of A against every B
        # micro-panel of the block, the tile's A (MR x KC, L1) reused while B's block
        # streams from L2, for a plain dot whose B block fits its share of the L2; else
        # (a convolution's tiles: patches read through row pointers or packed; a B read
        # in place: few row tiles, the second finds B's rows in L1 or L2 right after the
        # first; a B block that would stream from L3) each B micro-panel against every
        # row tile of A's block
        self.rows_outer = (self.direct_b is None and lay.a_win is None and lay.b_win is None
                           and self.t.kc * self.t.nc * _bytes(self.ct) <= ROWS_OUTER_L2_SHARE * l2_bytes())
        # B packed at compile time (GemmSpec.prepacked_b): its panels read where they are
        self.packed = spec.b_packing if spec.prepacked_b else None
        # An NCHW convolution's last panel of few pixel columns (C's columns: N % NR of
        # them) as dot products along K of A's rows (in place, K contiguous) and those
        # columns of the packed panel, copied out K-contiguous (``_tail_copy``): as a tile
        # of one vector, each multiply-add needed a broadcast of its own (a 14x14 map's last
        # 4 columns: 176 us for 256 features, against 300 us for a panel of 48)
        rem = lay.n % self.t.nr
        self.tail_dots = (rem if lay.b_win is not None and 0 < rem <= TAIL_DOT_COLUMNS and not self.accumulate
                          and self.direct_a is not None and self.direct_a[1] == 1 and self.direct_b is None
                          and not self.rows_outer and not spec.batch_outer and lay.n > self.t.nr else 0)
        assert not spec.prepacked_b or (self.packed is not None and self.packed.nr == self.t.nr
                                        and not self.swap), f"{spec.name}: B cannot be prepacked"
        # Patches read in place through row pointers (an indirection table, XNNPACK's
        # indirect convolution): K segments of ``ind_seg`` contiguous input features.
        # A segment may also be a Window.line (``ind_lines``): a few features (a stem's 3)
        # with the kernel row's positions, whose partly padded lines are copied with zeros.
        self.ind_lines = False
        self.ind_seg = self._indirect_segment(lay.a_win, plain)
        if self.ind_seg:
            self.t = replace(self.t, kc=max(self.t.kc // self.ind_seg, 1) * self.ind_seg)
        # K segments per indirection table row, unrolled (_pack_ind), or 0: where one K
        # block is all of K in at most IND_UNROLL segments (a 7x7 stem's 7 lines, a 3x3
        # layer of 16 features' 9 runs), each row's segments are straight-line code whose
        # window positions (table lookups by k) fold to constants. The loop over them
        # decoded each segment's position and validity from the tables: a quarter of the
        # batch-32 stem's time went to building its tables
        k = lay.k
        self.ind_unroll = (k // self.ind_seg if self.ind_seg and k <= self.t.kc and k % self.ind_seg == 0
                           and k // self.ind_seg <= self.IND_UNROLL else 0)

    #: shortest run of input features read through row pointers (shorter runs are packed)
    IND_MIN_RUN = 16
    #: most K segments of an indirection table row unrolled, their window positions
    #: constants, where the block is all of K (``_pack_ind``)
    IND_UNROLL = 16
    #: shortest Window.line read through row pointers when the feature run is shorter: a
    #: 3x3 layer at batch 32 on 32x32 maps with 1, 2 and 3 input features (lines of 3, 6
    #: and 9) ran in 0.40, 0.59 and 0.76 ms of CPU by lines, 0.55, 1.47 and 1.70 packed
    IND_MIN_LINE = 3

    def _indirect_segment(self, w: Window | None, plain: bool) -> int | None:
        """The K segment of the indirect path: the run of input features (Window.run) or a
        divisor of it that fits a K block; None where patches are packed instead."""
        if w is None or not plain:
            return None
        if w.run < self.IND_MIN_RUN and self.IND_MIN_LINE <= w.line <= self.t.kc and not w.dilated:
            self.ind_lines = True
            return w.line
        if w.run < self.IND_MIN_RUN or w.run_stride != 1:
            return None
        if w.run <= self.t.kc:
            return w.run
        seg = max(d for d in range(1, self.t.kc + 1) if w.run % d == 0)
        return seg if seg >= 64 else None

    # -- arithmetic of the compute type
    @property
    def last_dim(self) -> int:
        """The epilogue's row length: the output's last dim, or its last ``epi_tail``
        dims merged (1 for a scalar)."""
        shape = self.spec.comp.root.shape
        return math.prod(shape[-self.epi_tail:]) if shape else 1

    def finish(self, b: ir.IRBuilder, lin: ir.Value, v: ir.Value, bufs: ir.Value | None = None) -> None:
        """The epilogue of output element ``lin`` (flat) from its dot value ``v`` (compute type)."""
        L = _c(self.last_dim)
        self.finish_at(b, b.udiv(lin, L), b.urem(lin, L), v, bufs)

    def finish_at(self, b: ir.IRBuilder, row: ir.Value, col: ir.Value, v: ir.Value,
                  bufs: ir.Value | None = None) -> None:
        """The epilogue of the output element at (``row``, ``col``) of [rows, last dim]."""
        assert self.epi is not None
        z = _c(0)
        b.call(self.epi, [bufs if bufs is not None else self.bufs, row, z, col, z, z, z, v])

    def fma(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
        if self.dt.is_int:
            return b.add(acc, b.mul(x, y))
        return intrinsic(b, f"llvm.fmuladd.{_sfx(x.type)}", x.type, [x, y, acc])

    def add(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        return b.add(x, y) if self.dt.is_int else b.fadd(x, y)

    def load_elem(self, base: ir.Value, off: ir.Value) -> ir.Value:
        """An element of A or B as the compute type."""
        b = self.g.b
        v = b.load(self.g.gep(base, self.st, off), typ=self.st)
        return b.fpext(v, F32) if self.f16 else v

    def lane_mask(self, b: ir.IRBuilder, n: ir.Value) -> ir.Value:
        """<V x i1>: lane l is on when l < n."""
        v = self.t.v
        vt = ir.VectorType(I64, v)
        splat = b.shuffle_vector(b.insert_element(ir.Constant(vt, None), n, ir.Constant(I32, 0)),
                                 ir.Constant(vt, None), ir.Constant(ir.VectorType(I32, v), None))
        return b.icmp_signed("<", ir.Constant(vt, list(range(v))), splat)

    def masked_load(self, b: ir.IRBuilder, p: ir.Value, et: ir.Type, mask: ir.Value) -> ir.Value:
        vt = ir.VectorType(et, self.t.v)
        return intrinsic(b, f"llvm.masked.load.{_sfx(vt)}.p0", vt,
                          [p, ir.Constant(I32, _bytes(et)), mask, ir.Constant(vt, None)])

    # -- driver
    def build(self) -> ir.Function:
        g, b, lay, t = self.g, self.g.b, self.lay, self.t
        n_in = len(self.spec.comp.parameters)
        ptrs = [b.load(g.gep(self.bufs, PTR, _c(k)), typ=PTR) for k in range(n_in + 1)]
        a_ptr, b_ptr, c_ptr = ptrs[self.in_idx[0]], ptrs[self.in_idx[1]], ptrs[n_in]
        self.c_ptr = c_ptr
        if lay.k == 0 or lay.m == 0 or lay.n == 0:
            self._zero_fill(c_ptr)
            b.ret_void()
            return self.fn
        if self.vecmat:
            self.vm = b.alloca(self.ct, size=_c(self._vecmat_block()))
            self.vm.align = 64
        elif not lay.rowdot:
            if self.ind_seg:  # row pointers per tile and K segment, and the zeros of padding
                self.ind = b.alloca(PTR, size=_c(_round_up(t.mc, t.mr) * (t.kc // self.ind_seg)))
                self.zeros = b.alloca(self.st, size=_c(self.ind_seg))
                g.loop(_c(0), _c(self.ind_seg), 1,
                       lambda j: b.store(ir.Constant(self.st, None), g.gep(self.zeros, self.st, j)), "zb")
                if self.ind_lines:  # a copy of each partly padded line, in its slot's place
                    self.ap = b.alloca(self.ct, size=_c(_round_up(t.mc, t.mr) * t.kc))
            elif self.batch_outer:  # all M rows of a K block
                self.ap = b.alloca(self.ct, size=_c(_round_up(lay.m, t.mr) * t.kc))
                self.ap.align = 64
            elif not self.direct_a:
                self.ap = b.alloca(self.ct, size=_c(t.mc * t.kc))
                self.ap.align = 64
            if self.direct_b is None and self.packed is None:
                self.bp = b.alloca(self.ct, size=_c(t.kc * t.nc))
                self.bp.align = 64
            if self.tail_dots:
                self.tail_k = _round_up(t.kc, t.v)  # a column's run in ``tail``
                self.tail = b.alloca(self.ct, size=_c(self.tail_dots * self.tail_k))
                self.tail.align = 64
                self.tail_sums = b.alloca(self.ct, size=_c(4 * self.tail_dots))  # a row group's sums
            if self.accumulate:
                self.acc = b.alloca(self.ct, size=_c(t.mc * t.nc))
                self.acc.align = 64
        if self.batch_outer:
            self._batches_shared_a(a_ptr, b_ptr, c_ptr)
            b.ret_void()
            return self.fn
        # the batches that rows [o0, o1) of the output (as [Bt*M, N], in the spec's
        # orientation: swapped, those rows are this product's columns) touch
        rows = lay.n if self.swap else lay.m
        b_lo = b.udiv(self.r0, _c(rows))
        b_hi = b.udiv(b.add(self.r1, _c(rows - 1)), _c(rows))

        def per_batch(bi: ir.Value) -> None:
            row0 = b.mul(bi, _c(rows))
            lo = g.max(b.sub(self.r0, row0), _c(0))
            hi = g.min(b.sub(self.r1, row0), _c(rows))
            a_base = g.gep(a_ptr, self.st, g.offset(lay.a_b, bi, "ab"))
            b_base = self._b_base(b_ptr, bi)
            # flat index of the batch's C
            self.c_off = b.mul(bi, _c(lay.m * lay.n)) if lay.c_b is None else g.offset(lay.c_b, bi, "cb")
            c_base = g.gep(c_ptr, self.st, self.c_off)
            # this product's rows and columns: swapped, the spec's columns are its rows
            m_lo, m_hi, n_lo, n_hi = (self.c0, self.c1, lo, hi) if self.swap else (lo, hi, self.c0, self.c1)
            if lay.rowdot:
                self._rowdot(a_base, b_base, c_base, m_lo, m_hi)
            elif self.vecmat:  # its one row is in [m_lo, m_hi): the batches touched
                self._vecmat(a_base, b_base, c_base, n_lo, n_hi)
            else:
                self._gemm2d(a_base, b_base, c_base, m_lo, m_hi, n_lo, n_hi)

        g.loop(b_lo, b_hi, 1, per_batch, "batch")
        b.ret_void()
        return self.fn

    def _batches_shared_a(self, a_ptr: ir.Value, b_ptr: ir.Value, c_ptr: ir.Value) -> None:
        """Batches [r0, r1) (whole batches: ``GemmSpec.batch_outer``), columns [c0, c1):
        per K block, A (the same in every batch) is packed once, all M rows, then each
        batch packs its B panels and adds its tiles, as ``_gemm2d`` does per batch."""
        g, b, t, lay = self.g, self.g.b, self.t, self.lay
        ldc = _c(lay.c_ld)

        def pc_body(pc: ir.Value) -> None:
            kc = g.min(_c(t.kc), b.sub(self.k_hi, pc))
            a_blk = self._pack_a(a_ptr, _c(0), _c(lay.m), pc, kc)
            first = b.icmp_signed("==", pc, self.k_lo)
            last = b.icmp_signed("==", b.add(pc, kc), self.k_hi)

            def per_batch(bi: ir.Value) -> None:
                b_base = self._b_base(b_ptr, bi)
                self.c_off = b.mul(bi, _c(lay.m * lay.n)) if lay.c_b is None else g.offset(lay.c_b, bi, "cb")
                c_base = g.gep(c_ptr, self.st, self.c_off)

                def jc_body(jc: ir.Value) -> None:
                    nc = g.min(_c(t.nc), b.sub(self.c1, jc))
                    b_blk = self._pack_b(b_base, pc, kc, jc, nc)
                    self._macro(a_blk, b_blk, _c(0), kc, _c(lay.m), nc, g.gep(c_base, self.st, jc), ldc, first,
                                self.st, last)

                g.loop(self.c0, self.c1, t.nc, jc_body, "jc")

            g.loop(self.r0, self.r1, 1, per_batch, "batch")

        g.loop(self.k_lo, self.k_hi, t.kc, pc_body, "pc")

    def _b_base(self, b_ptr: ir.Value, bi: ir.Value) -> ir.Value:
        """Batch ``bi``'s B: through its offset map, or its prepacked panels."""
        g = self.g
        if self.packed is not None:
            return g.gep(b_ptr, self.ct, g.b.mul(bi, _c(self.packed.batch_stride)))
        return g.gep(b_ptr, self.st, g.offset(self.lay.b_b, bi, "bb"))

    def _zero_fill(self, c_ptr: ir.Value) -> None:
        """K = 0: the output is zeros (M or N = 0: nothing to write)."""
        g, b, n = self.g, self.g.b, self.spec.layout.n
        if self.lay.batch * self.lay.m * n == 0:
            return

        def row(r: ir.Value) -> None:
            base = b.mul(r, _c(n))
            if self.epi is not None:
                g.loop(self.c0, self.c1, 1, lambda j: self.finish(b, b.add(base, j), ir.Constant(self.ct, None)), "zj")
                return
            g.loop(self.c0, self.c1, 1,
                   lambda j: b.store(ir.Constant(self.st, None), g.gep(c_ptr, self.st, b.add(base, j))), "zj")

        g.loop(self.r0, self.r1, 1, row, "zi")

    # -- matrix-vector: one dot product per row, K contiguous in both operands
    def _rowdot(self, a_base: ir.Value, b_base: ir.Value, c_base: ir.Value, lo: ir.Value, hi: ir.Value) -> None:
        g, b = self.g, self.g.b
        group = 4
        split = b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), _c(group)), _c(group)))
        g.loop(lo, split, group, lambda i: self._dot_rows(a_base, b_base, c_base, i, group), "rd4")
        g.loop(split, hi, 1, lambda i: self._dot_rows(a_base, b_base, c_base, i, 1), "rd1")

    def _dot_rows(self, a_base: ir.Value, b_base: ir.Value, c_base: ir.Value, i: ir.Value, rows: int) -> None:
        """C[i:i+rows] = A[i:i+rows, :] @ x, with U vector accumulators per row."""
        g, b, lay, v = self.g, self.g.b, self.lay, self.t.v
        u = 2
        step = u * v
        kfull = lay.k // step * step
        st_v = ir.VectorType(self.st, v)
        a_rows = [g.gep(a_base, self.st, g.offset(lay.a_m, b.add(i, _c(r)), "am")) for r in range(rows)]

        def vec(p: ir.Value, k: ir.Value, mask: ir.Value | None) -> ir.Value:
            q = g.gep(p, self.st, k)
            if mask is None:
                x = b.load(q, typ=st_v)
                x.align = _bytes(self.st)
            else:
                x = self.masked_load(b, q, self.st, mask)
            return b.fpext(x, self.vt) if self.f16 else x

        pre = b.block
        fn = self.fn
        cond, body, done = (fn.append_basic_block(f"rd.{x}") for x in ("cond", "body", "done"))
        b.branch(cond)
        b.position_at_end(cond)
        k = b.phi(I64)
        k.add_incoming(_c(0), pre)
        accs = [[b.phi(self.vt) for _ in range(u)] for _ in range(rows)]
        for row in accs:
            for a in row:
                a.add_incoming(ir.Constant(self.vt, None), pre)
        b.cbranch(b.icmp_signed("<", k, _c(kfull)), body, done)
        b.position_at_end(body)
        xs = [vec(b_base, b.add(k, _c(q * v)), None) for q in range(u)]
        # each A row's lines ROWDOT_PREFETCH bytes ahead (past a row's end: the next row,
        # or past A, where a prefetch is only a hint: the address is not inbounds)
        size = _bytes(self.st)
        for r in range(rows if ROWDOT_PREFETCH else 0):
            for q in range(0, step * size, 64):
                _prefetch(b, b.gep(a_rows[r], [b.add(k, _c((ROWDOT_PREFETCH + q) // size))], source_etype=self.st))
        for r in range(rows):
            for q in range(u):
                accs[r][q].add_incoming(self.fma(b, vec(a_rows[r], b.add(k, _c(q * v)), None), xs[q], accs[r][q]),
                                        body)
        k.add_incoming(b.add(k, _c(step)), body)
        no_unroll(b.branch(cond))
        b.position_at_end(done)
        sums = [list(row) for row in accs]
        for q in range(-(-(lay.k - kfull) // v)):  # the tail, masked
            k0 = kfull + q * v
            mask = ir.Constant(ir.VectorType(I1, v), [int(k0 + l < lay.k) for l in range(v)])
            x = vec(b_base, _c(k0), mask)
            for r in range(rows):
                sums[r][q] = self.fma(b, vec(a_rows[r], _c(k0), mask), x, sums[r][q])
        for r in range(rows):
            tot = sums[r][0]
            for q in range(1, u):
                tot = self.add(b, tot, sums[r][q])
            if self.dt.is_int:
                res = intrinsic(b, f"llvm.vector.reduce.add.{_sfx(self.vt)}", self.ct, [tot])
            else:
                name = f"llvm.vector.reduce.fadd.{_sfx(self.vt)}"
                fnr = self.mod.globals.get(name) or ir.Function(self.mod, ir.FunctionType(self.ct, [self.ct, self.vt]),
                                                                 name=name)
                res = b.call(fnr, [ir.Constant(self.ct, 0.0), tot], fastmath=("reassoc",))
            if self.epi is not None:
                self.finish(b, b.add(self.c_off, b.add(i, _c(r))), res)
                continue
            if self.f16:
                res = b.fptrunc(res, F16)
            b.store(res, g.gep(c_base, self.st, b.add(i, _c(r))))

    # -- vector-matrix: B's rows streamed through a block of C in L1
    def _vecmat_block(self) -> int:
        """Elements of C's block: ``VECMAT_BLOCK`` bytes (a multiple of the vector)."""
        v = self.t.v
        return min(_round_up(self.lay.n, v), max(VECMAT_BLOCK // _bytes(self.ct) // v, 1) * v)

    def _vecmat(self, a_base: ir.Value, b_base: ir.Value, c_base: ir.Value, n_lo: ir.Value, n_hi: ir.Value) -> None:
        """C[0, n_lo:n_hi] = A[0, :] @ B[:, n_lo:n_hi] for B rows with unit column stride:
        per block of columns, ``VECMAT_ROWS`` rows of B at a time are added into the block
        (in L1), each B element read once and in order (a memory-bound product gains
        nothing from packing, and reading a B panel down its column would stride pages)."""
        g, b, lay, v = self.g, self.g.b, self.lay, self.t.v
        cb = self._vecmat_block()
        st_v = ir.VectorType(self.st, v)

        def vectors(w: ir.Value, body: Callable[[ir.Value, ir.Value | None], None], name: str) -> None:
            """``body(j, mask)`` per vector of [0, w): whole vectors, then the masked tail."""
            full = b.mul(b.udiv(w, _c(v)), _c(v))
            g.loop(_c(0), full, v, lambda j: body(j, None), name)
            g.if_(b.icmp_signed("<", full, w), lambda: body(full, self.lane_mask(b, b.sub(w, full))))

        def load(p: ir.Value, mask: ir.Value | None) -> ir.Value:
            if mask is not None:
                return self.masked_load(b, p, self.st, mask)
            x = b.load(p, typ=st_v)
            x.align = _bytes(self.st)
            return x

        def block(j0: ir.Value) -> None:
            w = g.min(_c(cb), b.sub(n_hi, j0))
            zero = ir.Constant(self.vt, None)
            g.loop(_c(0), b.mul(b.udiv(b.add(w, _c(v - 1)), _c(v)), _c(v)), v,
                   lambda j: _store(b, zero, g.gep(self.vm, self.ct, j), 64), "vmz")

            def rows(k: ir.Value, count: int) -> None:
                xs, ptrs, pfs = [], [], []
                if VECMAT_PREFETCH and count == VECMAT_ROWS:  # the rows VECMAT_PREFETCH ahead (at most K's last)
                    last = b.sub(self.k_hi, _c(1))
                    for u in range(count):
                        kp = g.min(b.add(k, _c(u + VECMAT_PREFETCH)), last)
                        pfs.append(g.gep(b_base, self.st, b.add(g.offset(lay.b_k, kp, "bk"), j0)))
                for u in range(count):
                    ku = b.add(k, _c(u))
                    x = b.load(g.gep(a_base, self.st, g.offset(lay.a_k, ku, "ak")), typ=self.st)
                    undef = ir.Constant(self.vt, None)
                    xs.append(b.shuffle_vector(b.insert_element(undef, x, ir.Constant(I32, 0)), undef,
                                               ir.Constant(ir.VectorType(I32, v), None)))
                    ptrs.append(g.gep(b_base, self.st, b.add(g.offset(lay.b_k, ku, "bk"), j0)))

                def vec(j: ir.Value, mask: ir.Value | None) -> None:
                    p = g.gep(self.vm, self.ct, j)
                    acc = b.load(p, typ=self.vt)
                    acc.align = 64
                    for x, row in zip(xs, ptrs):
                        acc = self.fma(b, x, load(g.gep(row, self.st, j), mask), acc)
                    for pf in pfs:
                        _prefetch(b, g.gep(pf, self.st, j))
                    _store(b, acc, p, 64)

                vectors(w, vec, "vmj")

            # this call's slice of K (all of it unless threads split K), by VECMAT_ROWS
            kfull = b.add(self.k_lo, b.mul(b.udiv(b.sub(self.k_hi, self.k_lo), _c(VECMAT_ROWS)), _c(VECMAT_ROWS)))
            g.loop(self.k_lo, kfull, VECMAT_ROWS, lambda k: rows(k, VECMAT_ROWS), "vmk")
            g.loop(kfull, self.k_hi, 1, lambda k: rows(k, 1), "vmk1")

            def out(j: ir.Value, mask: ir.Value | None) -> None:
                acc = b.load(g.gep(self.vm, self.ct, j), typ=self.vt)
                acc.align = 64
                dst = g.gep(c_base, self.st, b.add(j0, j))
                if mask is None:
                    _store(b, acc, dst, _bytes(self.st))
                else:
                    intrinsic(b, f"llvm.masked.store.{_sfx(self.vt)}.p0", VOID,
                              [acc, dst, ir.Constant(I32, _bytes(self.st)), mask])

            if self.epi is None:
                vectors(w, out, "vmo")
                return
            g.loop(_c(0), w, 1, lambda j: self.finish(b, b.add(self.c_off, b.add(j0, j)), b.load(
                g.gep(self.vm, self.ct, j), typ=self.ct)), "vme")

        g.loop(n_lo, n_hi, cb, block, "vmb")

    # -- matrix-matrix
    def _gemm2d(self, a_base: ir.Value, b_base: ir.Value, c_base: ir.Value, m_lo: ir.Value, m_hi: ir.Value,
                n_lo: ir.Value, n_hi: ir.Value) -> None:
        """Rows [m_lo, m_hi) and columns [n_lo, n_hi) of one batch's C."""
        g, b, t, lay = self.g, self.g.b, self.t, self.lay
        ldc = _c(lay.c_ld)

        def jc_body(jc: ir.Value) -> None:
            nc = g.min(_c(t.nc), b.sub(n_hi, jc))
            if not self.accumulate:
                def pc_body(pc: ir.Value) -> None:
                    kc = g.min(_c(t.kc), b.sub(self.k_hi, pc))
                    b_blk = self._pack_b(b_base, pc, kc, jc, nc)
                    if self.tail_dots:
                        self._tail_copy(b_blk, kc, nc)
                    first = b.icmp_signed("==", pc, self.k_lo)
                    last = b.icmp_signed("==", b.add(pc, kc), self.k_hi)

                    def ic_body(ic: ir.Value) -> None:
                        mc = g.min(_c(t.mc), b.sub(m_hi, ic))
                        a_blk = self._pack_a(a_base, ic, mc, pc, kc)
                        cblk = g.gep(c_base, self.st, b.add(b.mul(ic, ldc), jc))
                        self._macro(a_blk, b_blk, ic, kc, mc, nc, cblk, ldc, first, self.st, last)

                    g.loop(m_lo, m_hi, t.mc, ic_body, "ic")

                g.loop(self.k_lo, self.k_hi, t.kc, pc_body, "pc")
                return

            # float16 (or an epilogue whose output cannot hold partial sums): accumulate all
            # of K in a compute-type block, then round (finish) once.
            def ic_body16(ic: ir.Value) -> None:
                mc = g.min(_c(t.mc), b.sub(m_hi, ic))

                def pc_body16(pc: ir.Value) -> None:
                    kc = g.min(_c(t.kc), b.sub(_c(lay.k), pc))
                    b_blk = self._pack_b(b_base, pc, kc, jc, nc)
                    a_blk = self._pack_a(a_base, ic, mc, pc, kc)
                    self._macro(a_blk, b_blk, ic, kc, mc, nc, self.acc, _c(t.nc), b.icmp_signed("==", pc, _c(0)),
                                self.ct)

                g.loop(_c(0), _c(lay.k), t.kc, pc_body16, "pc")

                def row(r: ir.Value) -> None:
                    src = b.mul(r, _c(t.nc))
                    dst = b.add(b.mul(b.add(ic, r), ldc), jc)

                    def col(j: ir.Value) -> None:
                        v = b.load(g.gep(self.acc, self.ct, b.add(src, j)), typ=self.ct)
                        if self.epi is not None:
                            self.finish(b, b.add(self.c_off, b.add(dst, j)), v)
                        else:
                            b.store(b.fptrunc(v, F16), g.gep(c_base, F16, b.add(dst, j)))

                    g.loop(_c(0), nc, 1, col, "cj")

                g.loop(_c(0), mc, 1, row, "ci")

            g.loop(m_lo, m_hi, t.mc, ic_body16, "ic")

        g.loop(n_lo, n_hi, t.nc, jc_body, "jc")

    # -- packing
    def _pack_b(self, b_base: ir.Value, pc: ir.Value, kc: ir.Value, jc: ir.Value, nc: ir.Value) -> ir.Value:
        """Bp[jp*kc + k*NR + j] = B[pc+k, jc+jp+j], zero beyond nc: NR-wide panels. Rows
        with unit column stride are copied by vector loads (``_pack_b_by_rows``), columns
        with unit K stride through an in-register transpose (``_pack_b_by_columns``). A
        direct B is not packed. Returns B's block base."""
        g, b, t, lay = self.g, self.g.b, self.t, self.lay
        if self.direct_b is not None:
            return g.gep(b_base, self.st, b.add(b.mul(pc, _c(self.direct_b)), jc))
        if self.packed is not None:  # panel jc / NR (jc is a multiple of NR), row pc
            return g.gep(b_base, self.ct, b.add(b.mul(jc, _c(self.packed.k)), b.mul(pc, _c(t.nr))))
        if lay.b_win is not None:
            return self._pack_win(lay.b_win, b_base, self.bp, jc, nc, self.t.nr, pc, kc)
        nr = t.nr
        if lay.b_n.table is None and lay.b_n.stride == 1:
            return self._pack_b_by_rows(b_base, pc, kc, jc, nc)
        if lay.b_k.table is None and lay.b_k.stride == 1:
            return self._pack_b_by_columns(b_base, pc, kc, jc, nc)

        # other offsets (tables, strided columns): element by element
        def panel(jp: ir.Value) -> None:
            dst = g.gep(self.bp, self.ct, b.mul(jp, kc))
            w = g.min(_c(nr), b.sub(nc, jp))
            col0 = b.add(jc, jp)

            def krow(k: ir.Value) -> None:
                koff = g.offset(lay.b_k, b.add(pc, k), "bk")
                drow = b.mul(k, _c(nr))

                def col(j: ir.Value) -> None:
                    d = g.gep(dst, self.ct, b.add(drow, j))
                    g.if_(b.icmp_signed("<", j, w),
                          lambda: b.store(self.load_elem(b_base, b.add(koff, g.offset(lay.b_n, b.add(col0, j), "bn"))),
                                          d),
                          lambda: b.store(ir.Constant(self.ct, None), d))

                g.loop(_c(0), _c(nr), 1, col, "pbj")

            g.loop(_c(0), kc, 1, krow, "pbk")

        g.loop(_c(0), nc, nr, panel, "pbp")
        return self.bp

    def _pack_b_by_rows(self, b_base: ir.Value, pc: ir.Value, kc: ir.Value, jc: ir.Value, nc: ir.Value) -> ir.Value:
        """``_pack_b`` for B rows with unit column stride, by chunks of ``PACK_ROWS`` K
        rows: per chunk, panel after panel, the chunk's NR-wide pieces of that panel
        (vector loads; masked, zeros past nc, in the last panel). Each row of the chunk is
        then read in order, a stream the hardware prefetchers follow, and each panel gets
        PACK_ROWS consecutive rows at a time. Panel by panel over all of KC instead, every
        row's piece (one line for AVX2's 16-wide panels) lay in a page of its own:
        [16,1024] @ [1024,1024] with AVX2 tiles spent 230 of its 510 us packing B."""
        g, b, t, lay = self.g, self.g.b, self.t, self.lay
        nr, v = t.nr, t.v
        valign = min(64, v * _bytes(self.ct))
        full = b.mul(b.udiv(nc, _c(nr)), _c(nr))
        tail = [self.lane_mask(b, b.sub(b.sub(nc, full), _c(q * v))) for q in range(nr // v)]

        def chunk(k0: ir.Value) -> None:
            rows = g.min(_c(PACK_ROWS), b.sub(kc, k0))

            def piece(jp: ir.Value, masks: list[ir.Value] | None) -> None:
                def row(r: ir.Value) -> None:
                    k = b.add(k0, r)
                    src = g.gep(b_base, self.st, b.add(g.offset(lay.b_k, b.add(pc, k), "bk"), b.add(jc, jp)))
                    dst = g.gep(self.bp, self.ct, b.add(b.mul(jp, kc), b.mul(k, _c(nr))))
                    for q in range(nr // v):
                        p = g.gep(src, self.st, _c(q * v))
                        if masks is None:
                            x = b.load(p, typ=ir.VectorType(self.st, v))
                            x.align = _bytes(self.st)
                        else:
                            x = self.masked_load(b, p, self.st, masks[q])
                        if self.f16:
                            x = b.fpext(x, self.vt)
                        _store(b, x, g.gep(dst, self.ct, _c(q * v)), valign)

                g.loop(_c(0), rows, 1, row, "pbrr")

            g.loop(_c(0), full, nr, lambda jp: piece(jp, None), "pbr")
            g.if_(b.icmp_signed("<", full, nc), lambda: piece(full, tail))

        g.loop(_c(0), kc, PACK_ROWS, chunk, "pbk")
        return self.bp

    def _pack_b_by_columns(self, b_base: ir.Value, pc: ir.Value, kc: ir.Value, jc: ir.Value,
                           nc: ir.Value) -> ir.Value:
        """``_pack_b`` for a B whose K is contiguous (a transposed B, ``dz @ w.T``): each
        column's K run is read in order, in chunks of ``PACK_KB`` rows. Reading a K row
        across NR columns instead touches NR lines ``ldb`` apart, which for a power-of-two
        ``ldb`` all fall in one L1 set and evict each other on every row."""
        g, b, t, lay = self.g, self.g.b, self.t, self.lay
        nr = t.nr

        def panel(jp: ir.Value) -> None:
            dst = g.gep(self.bp, self.ct, b.mul(jp, kc))
            w = g.min(_c(nr), b.sub(nc, jp))
            col0 = b.add(jc, jp)

            def kblock(kb: ir.Value) -> None:
                kend = g.min(_c(PACK_KB), b.sub(kc, kb))

                def col(j: ir.Value, k0: ir.Value) -> None:
                    src = b.add(g.offset(lay.b_n, b.add(col0, j), "bn"), b.add(pc, kb))
                    g.loop(k0, kend, 1, lambda k: b.store(self.load_elem(b_base, b.add(src, k)), g.gep(
                        dst, self.ct, b.add(b.mul(b.add(kb, k), _c(nr)), j))), "pbck")

                if self.f16 or lay.b_n.table is not None:
                    g.loop(_c(0), w, 1, lambda j: col(j, _c(0)), "pbcj")
                    return
                # V x V blocks (V columns, V rows of K) moved by vector loads along K, an
                # in-register transpose and vector stores along the panel's rows; the
                # ragged columns and K rows element by element
                v = t.v
                wv, kv = (b.mul(b.udiv(x, _c(v)), _c(v)) for x in (w, kend))

                def group(cg: ir.Value) -> None:
                    g.loop(_c(0), kv, v, lambda kk: self._transpose_block(b_base, b.add(col0, cg), b.add(
                        pc, b.add(kb, kk)), g.gep(dst, self.ct, b.add(b.mul(b.add(kb, kk), _c(nr)), cg))), "pbtk")
                    g.loop(cg, b.add(cg, _c(v)), 1, lambda j: col(j, kv), "pbcr")

                g.loop(_c(0), wv, v, group, "pbtj")
                g.loop(wv, w, 1, lambda j: col(j, _c(0)), "pbcj")

            g.loop(_c(0), kc, PACK_KB, kblock, "pbkb")

            def zero_col(j: ir.Value) -> None:  # columns beyond nc: the micro-kernel reads NR
                g.loop(_c(0), kc, 1, lambda k: b.store(ir.Constant(self.ct, None), g.gep(
                    dst, self.ct, b.add(b.mul(k, _c(nr)), j))), "pbcz")

            g.loop(w, _c(nr), 1, zero_col, "pbcz")

        g.loop(_c(0), nc, nr, panel, "pbp")
        return self.bp

    def _transpose_block(self, b_base: ir.Value, col: ir.Value, k: ir.Value, dst: ir.Value) -> None:
        """dst[kk*NR + c] = B[k+kk, col+c] for c, kk < V: V vectors along the K runs of
        V columns, transposed by log2(V) rounds of interleaving rows i and i + V/2 (each
        round a perfect shuffle; after log2(V) of them row kk holds lane kk of every
        input), stored as V vectors NR apart."""
        g, b, lay, v, nr = self.g, self.g.b, self.lay, self.t.v, self.t.nr
        rows = []
        for c in range(v):
            x = b.load(g.gep(b_base, self.st, b.add(g.offset(lay.b_n, b.add(col, _c(c)), "bn"), k)), typ=self.vt)
            x.align = _bytes(self.st)
            rows.append(x)
        for kk, x in enumerate(transposed(b, rows)):
            _store(b, x, g.gep(dst, self.ct, _c(kk * nr)), _bytes(self.ct))

    def _pack_a(self, a_base: ir.Value, ic: ir.Value, mc: ir.Value, pc: ir.Value, kc: ir.Value) -> ir.Value:
        """Ap[ip*kc + k*MR + r] = A[ic+ip+r, pc+k], zero beyond mc: MR-high panels. A
        direct A is not packed. Returns A's block base (row ic, column pc)."""
        g, b, t, lay = self.g, self.g.b, self.t, self.lay
        if self.direct_a:
            sm, sk = self.direct_a
            return g.gep(a_base, self.st, b.add(b.mul(ic, _c(sm)), b.mul(pc, _c(sk))))
        if self.ind_seg and lay.a_win is not None:
            return self._pack_ind(lay.a_win, a_base, ic, mc, pc, kc)
        if lay.a_win is not None:
            return self._pack_win(lay.a_win, a_base, self.ap, ic, mc, self.t.mr, pc, kc)
        mr = t.mr

        def panel(ip: ir.Value) -> None:
            dst = g.gep(self.ap, self.ct, b.mul(ip, kc))
            h = g.min(_c(mr), b.sub(mc, ip))
            row0 = b.add(ic, ip)

            def row(r: ir.Value) -> None:
                def val() -> None:
                    roff = g.offset(lay.a_m, b.add(row0, r), "am")

                    def kcol(k: ir.Value) -> None:
                        x = self.load_elem(a_base, b.add(roff, g.offset(lay.a_k, b.add(pc, k), "ak")))
                        b.store(x, g.gep(dst, self.ct, b.add(b.mul(k, _c(mr)), r)))

                    g.loop(_c(0), kc, 1, kcol, "pak")

                def zero() -> None:
                    g.loop(_c(0), kc, 1, lambda k: b.store(ir.Constant(self.ct, None), g.gep(
                        dst, self.ct, b.add(b.mul(k, _c(mr)), r))), "paz")

                g.if_(b.icmp_signed("<", r, h), val, zero)

            g.loop(_c(0), _c(mr), 1, row, "par")

        g.loop(_c(0), mc, mr, panel, "pap")
        return self.ap

    # -- packing a convolution's patches (Window): masked reads, nothing materialized
    def _win_pixel(self, w: Window, p: ir.Value) -> tuple[ir.Value, list[ir.Value]]:
        """Pixel ``p``'s input offset (its batch dims; with no lhs dilation its spatial
        origins too) and, per spatial dim, its window origin ``o * stride - low``."""
        b = self.g.b
        base: ir.Value = _c(0)
        origin: list[ir.Value] = [_c(0)] * len(w.stride)
        rest = p
        for size, d, st in reversed(list(zip(w.pix_sizes, w.pix_spatial, w.pix_strides))):
            i = b.urem(rest, _c(size))
            rest = b.udiv(rest, _c(size))
            if d < 0:
                base = b.add(base, b.mul(i, _c(st)))
            else:
                origin[d] = b.sub(b.mul(i, _c(w.stride[d])), _c(w.low[d]))
        if not w.dilated:
            for d, o in enumerate(origin):
                base = b.add(base, b.mul(o, _c(w.in_stride[d])))
        return base, origin

    def _win_load(self, w: Window, ptr: ir.Value, pix: tuple[ir.Value, list[ir.Value]], k: ir.Value) -> ir.Value:
        """Patch element (pixel, ``k``) as the compute type: 0 in padding and holes (the
        read itself is then of offset 0, always inside the input)."""
        valid, off = self._win_addr(w, pix, k)
        b = self.g.b
        x = self.load_elem(ptr, b.select(valid, off, _c(0)))
        return b.select(valid, x, ir.Constant(self.ct, None))

    def _win_addr(self, w: Window, pix: tuple[ir.Value, list[ir.Value]], k: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Whether patch element (pixel, ``k``) is inside the input, and its offset."""
        g, b = self.g, self.g.b
        base, origin = pix
        valid: ir.Value = ir.Constant(I1, 1)
        off = b.add(base, g.offset(w.k_lin if not w.dilated else w.k_off, k, "wk"))
        for d, o in enumerate(origin):
            q = b.add(o, g.offset(w.k_pos[d], k, "wp"))
            inside = b.and_(b.icmp_signed(">=", q, _c(0)), b.icmp_signed("<", q, _c(w.extent[d])))
            if w.ldil[d] > 1:
                inside = b.and_(inside, b.icmp_signed("==", b.srem(q, _c(w.ldil[d])), _c(0)))
                q = b.sdiv(q, _c(w.ldil[d]))
            if w.dilated:  # the spatial offsets are not in base and k_lin then
                off = b.add(off, b.mul(q, _c(w.in_stride[d])))
            valid = b.and_(valid, inside)
        return valid, off

    def _pack_win(self, w: Window, base: ir.Value, dst0: ir.Value, p0: ir.Value, count: ir.Value, height: int,
                  pc: ir.Value, kc: ir.Value) -> ir.Value:
        """Packs patches (Window) for pixels [p0, p0+count) and K [pc, pc+kc) into
        ``height``-wide panels ``dst[ip*kc + k*height + r]`` (pixel p0+ip+r), zero beyond
        ``count``: A's MR-high row panels (_pack_a) or B's NR-wide column panels (_pack_b)."""
        if w.run == 1:
            return self._pack_win_lines(w, base, dst0, p0, count, height, pc, kc)
        g, b = self.g, self.g.b

        def panel(ip: ir.Value) -> None:
            dst = g.gep(dst0, self.ct, b.mul(ip, kc))
            h = g.min(_c(height), b.sub(count, ip))

            def line(r: ir.Value) -> None:
                def at(k: ir.Value) -> ir.Value:
                    return g.gep(dst, self.ct, b.add(b.mul(k, _c(height)), r))

                def val() -> None:
                    self._pack_runs(w, base, self._win_pixel(w, b.add(b.add(p0, ip), r)), pc, kc, at)

                g.if_(b.icmp_signed("<", r, h), val,
                      lambda: g.loop(_c(0), kc, 1, lambda k: b.store(ir.Constant(self.ct, None), at(k)), "pwz"))

            g.loop(_c(0), _c(height), 1, line, "pwr")

        g.loop(_c(0), count, height, panel, "pwp")
        return dst0

    def _pack_ind(self, w: Window, base: ir.Value, ic: ir.Value, mc: ir.Value, pc: ir.Value,
                  kc: ir.Value) -> ir.Value:
        """The indirection table of the A block (rows [ic, ic+mc), K [pc, pc+kc)): per
        MR-row tile and K segment, MR pointers to the segment's input features of each
        row's pixel, or to zeros (padding, holes, rows beyond mc)."""
        g, b, t, seg = self.g, self.g.b, self.t, self.ind_seg
        assert seg is not None
        per_tile = t.mr * (t.kc // seg)
        # the whole of K in this block (pc 0, kc K: one K block, K not split by threads):
        # its few segments unrolled, their window positions constants
        unroll = self.ind_unroll
        whole_k = (b.and_(b.icmp_signed("==", pc, _c(0)), b.icmp_signed("==", kc, _c(self.lay.k))) if unroll
                   else None)

        def tile(ip: ir.Value) -> None:
            h = g.min(_c(t.mr), b.sub(mc, ip))
            slots = g.gep(self.ind, PTR, b.mul(b.udiv(ip, _c(t.mr)), _c(per_tile)))

            def row(r: ir.Value) -> None:
                inside = b.icmp_signed("<", r, h)
                pix = self._win_pixel(w, b.select(inside, b.add(b.add(ic, ip), r), ic))

                def segment(sx: ir.Value, k0: ir.Value | None = None) -> None:
                    k0 = b.add(pc, b.mul(sx, _c(seg))) if k0 is None else k0
                    valid, off = self._win_addr(w, pix, k0)
                    valid = b.and_(valid, inside)
                    slot = b.add(b.mul(sx, _c(t.mr)), r)
                    at = g.gep(slots, PTR, slot)
                    if not self.ind_lines:
                        b.store(b.select(valid, g.gep(base, self.st, b.select(valid, off, _c(0))), self.zeros), at)
                        return
                    whole = b.and_(valid, self._win_addr(w, pix, b.add(k0, _c(seg - 1)))[0])

                    def patch() -> None:  # the line with zeros where it leaves the input
                        copy = g.gep(self.ap, self.ct, b.mul(b.add(b.mul(b.udiv(ip, _c(t.mr)), _c(per_tile)), slot),
                                                             _c(seg)))
                        g.loop(_c(0), _c(seg), 1, lambda j: b.store(self._win_load(w, base, pix, b.add(k0, j)),
                                                                    g.gep(copy, self.ct, j)), "ixc")
                        b.store(copy, at)

                    g.if_(whole, lambda: b.store(g.gep(base, self.st, off), at),
                          lambda: g.if_(inside, patch, lambda: b.store(self.zeros, at)))

                def looped() -> None:
                    g.loop(_c(0), b.udiv(kc, _c(seg)), 1, segment, "ixs")

                def unrolled() -> None:
                    for sx in range(unroll):
                        segment(_c(sx), _c(sx * seg))

                if whole_k is None:
                    looped()
                else:
                    g.if_(whole_k, unrolled, looped)

            g.loop(_c(0), _c(t.mr), 1, row, "ixr")

        g.loop(_c(0), mc, t.mr, tile, "ixt")
        return self.ind

    def _pack_win_lines(self, w: Window, base: ir.Value, dst0: ir.Value, p0: ir.Value, count: ir.Value,
                        height: int, pc: ir.Value, kc: ir.Value) -> ir.Value:
        """_pack_win by panel lines: the panel's ``height`` pixels (base offset, window
        origins, whether inside ``count``) go to small stack arrays once, then each k's
        line of the panel is written contiguously by a vectorized loop over the pixels
        (masked gathers of the input)."""
        g, b = self.g, self.g.b
        ns = len(w.stride)
        with b.goto_entry_block():
            arrs = [b.alloca(I64, size=_c(height)) for _ in range(ns + 2)]  # base, inside, origins
        zero = ir.Constant(self.ct, None)

        def panel(ip: ir.Value) -> None:
            dst = g.gep(dst0, self.ct, b.mul(ip, kc))
            h = g.min(_c(height), b.sub(count, ip))

            def pixel(r: ir.Value) -> None:
                inside = b.icmp_signed("<", r, h)
                pbase, origin = self._win_pixel(w, b.select(inside, b.add(b.add(p0, ip), r), p0))
                for arr, v in zip(arrs, [pbase, b.zext(inside, I64), *origin]):
                    b.store(v, g.gep(arr, I64, r))

            g.loop(_c(0), _c(height), 1, pixel, "pwr")

            def kline(k: ir.Value) -> None:
                line = g.gep(dst, self.ct, b.mul(k, _c(height)))
                if not w.dilated and height % self.t.v == 0:
                    v = self.t.v
                    for q in range(height // v):
                        self._win_chunk(w, base, arrs, b.add(pc, k), q * v, g.gep(line, self.ct, _c(q * v)))
                    return

                def elem(r: ir.Value) -> None:
                    pbase, inside, *origin = (b.load(g.gep(arr, I64, r), typ=I64) for arr in arrs)
                    valid, off = self._win_addr(w, (pbase, origin), b.add(pc, k))
                    valid = b.and_(valid, b.icmp_signed("!=", inside, _c(0)))
                    x = self.load_elem(base, b.select(valid, off, _c(0)))
                    b.store(b.select(valid, x, zero), g.gep(line, self.ct, r))

                g.loop(_c(0), _c(height), 1, elem, "pwe", vectorize=True)

            g.loop(_c(0), kc, 1, kline, "pwk")

        g.loop(_c(0), count, height, panel, "pwp")
        return dst0

    def _win_chunk(self, w: Window, base: ir.Value, arrs: list[ir.Value], k: ir.Value, r0: int,
                   dst: ir.Value) -> None:
        """V pixels (r0...) of a panel line at window position ``k``, as one vector: when
        their offsets are consecutive (one image row, stride 1: the usual case) a masked
        vector load (the mask is the padding), else lane by lane."""
        g, b, v = self.g, self.g.b, self.t.v
        vt64 = ir.VectorType(I64, v)

        def vec(x: ir.Value) -> ir.Value:
            return b.shuffle_vector(b.insert_element(ir.Constant(vt64, None), x, ir.Constant(I32, 0)),
                                    ir.Constant(vt64, None), ir.Constant(ir.VectorType(I32, v), None))

        def load(arr: ir.Value) -> ir.Value:
            ld = b.load(g.gep(arr, I64, _c(r0)), typ=vt64)
            ld.align = 8
            return ld

        pbase, inside, *origin = (load(arr) for arr in arrs)
        off = b.add(pbase, vec(g.offset(w.k_lin, k, "wk")))
        valid = b.icmp_signed("!=", inside, ir.Constant(vt64, None))
        for d, o in enumerate(origin):
            q = b.add(o, vec(g.offset(w.k_pos[d], k, "wp")))
            valid = b.and_(valid, b.and_(b.icmp_signed(">=", q, ir.Constant(vt64, None)),
                                         b.icmp_signed("<", q, vec(_c(w.extent[d])))))
        off0 = b.extract_element(off, ir.Constant(I32, 0))
        iota = ir.Constant(vt64, list(range(v)))
        same = b.icmp_signed("==", off, b.add(vec(off0), iota))
        consecutive = intrinsic(b, f"llvm.vector.reduce.and.v{v}i1", I1, [same])
        vt = ir.VectorType(self.ct, v)

        def fast() -> None:
            # not inbounds: masked-off lanes may lie before the input (left padding)
            x = self.masked_load(b, b.gep(base, [off0], source_etype=self.st), self.st, valid)
            _store(b, b.fpext(x, vt) if self.f16 else x, dst, _bytes(self.ct))

        def slow() -> None:
            x = ir.Constant(vt, None)
            for lane in range(v):
                ok = b.extract_element(valid, ir.Constant(I32, lane))
                e = self.load_elem(base, b.select(ok, b.extract_element(off, ir.Constant(I32, lane)), _c(0)))
                x = b.insert_element(x, b.select(ok, e, ir.Constant(self.ct, None)), ir.Constant(I32, lane))
            _store(b, x, dst, _bytes(self.ct))

        g.if_(consecutive, fast, slow)

    def _pack_runs(self, w: Window, base: ir.Value, pix: tuple[ir.Value, list[ir.Value]], pc: ir.Value,
                   kc: ir.Value, at: Callable[[ir.Value], ir.Value]) -> None:
        """One pixel's K [pc, pc+kc) by runs of input features (Window.run): the window
        position's validity and offset once per run, then a plain copy (or zeros)."""
        g, b, run = self.g, self.g.b, w.run

        def segment(t: ir.Value) -> None:
            s0 = g.max(b.mul(t, _c(run)), pc)
            s1 = g.min(b.mul(b.add(t, _c(1)), _c(run)), b.add(pc, kc))
            valid, off = self._win_addr(w, pix, s0)

            def copy() -> None:
                g.loop(s0, s1, 1, lambda k: b.store(self.load_elem(base, b.add(off, b.mul(b.sub(k, s0), _c(
                    w.run_stride)))), at(b.sub(k, pc))), "pwc")

            g.if_(valid, copy, lambda: g.loop(s0, s1, 1, lambda k: b.store(ir.Constant(self.ct, None),
                                                                           at(b.sub(k, pc))), "pwz"))

        g.loop(b.udiv(pc, _c(run)), b.udiv(b.add(b.add(pc, kc), _c(run - 1)), _c(run)), 1, segment, "pws")

    # -- macro kernel and micro-kernel
    def _macro(self, a_blk: ir.Value, b_blk: ir.Value, ic: ir.Value, kc: ir.Value, mc: ir.Value, nc: ir.Value,
               cblk: ir.Value, ldc: ir.Value, first: ir.Value, c_t: ir.Type, last: ir.Value | None = None) -> None:
        """The tiles of one (ic, pc, jc) block. A bottom-edge tile of a direct A (fewer
        than MR rows left) is moved up to end at the block's last row, or down to start
        at row 0 when it would begin above it (MR <= M, rows read are always in A); the
        rows it has to write are then [skip, skip+mr) of the tile."""
        g, b, t, lay = self.g, self.g.b, self.t, self.lay
        epi = last is not None and self.epi is not None
        uk = self._micro_fn(c_t, epi)
        edge = 0 if self.tail_dots else self._edge_vectors()
        uk_edge = self._micro_fn(c_t, epi, edge) if edge else None

        def tile(jr: ir.Value, i: ir.Value) -> None:
            nr = g.min(_c(t.nr), b.sub(nc, jr))
            # a micro-panel of the packed block: kc rows apart, or all of K (prepacked)
            pstride = kc if self.packed is None else _c(self.packed.k)
            bp = g.gep(b_blk, self.st, jr) if self.direct_b is not None else g.gep(b_blk, self.ct, b.mul(jr, pstride))
            mr = g.min(_c(t.mr), b.sub(mc, i))
            if self.direct_a:
                row = b.add(ic, i)
                start = g.min(g.max(b.sub(b.add(row, mr), _c(t.mr)), _c(0)), _c(lay.m - t.mr))
                shift = b.sub(start, ic)  # tile start relative to the block
                skip = b.sub(row, start)
                ap = g.gep(a_blk, self.st, b.mul(shift, _c(self.direct_a[0])))
            elif self.ind_seg:
                shift, skip = i, _c(0)
                ap = g.gep(a_blk, PTR, b.mul(b.udiv(i, _c(t.mr)), _c(t.mr * (t.kc // self.ind_seg))))
            else:
                shift, skip = i, _c(0)
                ap = g.gep(a_blk, self.ct, b.mul(i, kc))
            cp = g.gep(cblk, c_t, b.add(b.mul(shift, ldc), jr))
            args = [ap, bp, kc, cp, ldc, skip, mr, nr, first]
            if last is not None and self.epi is not None:
                args += [last, self.bufs]
            if uk_edge is None:
                b.call(uk, args)
                return
            g.if_(b.icmp_signed("<=", nr, _c(edge * t.v)), lambda: b.call(uk_edge, args), lambda: b.call(uk, args))

        if self.rows_outer:  # an A row tile (L1) against every B micro-panel of the block (L2)
            g.loop(_c(0), mc, t.mr, lambda i: g.loop(_c(0), nc, t.nr, lambda jr: tile(jr, i), "jr"), "ir")
        elif self.tail_dots:  # the last panel, of few columns, by dot products (_tail_rows)
            # (exactly ``tail_dots`` columns: a column range cut elsewhere than the thread
            # splits cut it, [0, N) or whole units, ends with tiles of other widths)
            def panel(jr: ir.Value) -> None:
                g.if_(b.icmp_signed("==", b.sub(nc, jr), _c(self.tail_dots)),
                      lambda: self._tail_rows(a_blk, kc, mc, g.gep(cblk, c_t, jr), ldc, first, last),
                      lambda: g.loop(_c(0), mc, t.mr, lambda i: tile(jr, i), "ir"))

            g.loop(_c(0), nc, t.nr, panel, "jr")
        else:  # a B micro-panel against every A row tile of the block
            g.loop(_c(0), nc, t.nr, lambda jr: g.loop(_c(0), mc, t.mr, lambda i: tile(jr, i), "ir"), "jr")

    def _tail_copy(self, b_blk: ir.Value, kc: ir.Value, nc: ir.Value) -> None:
        """When the packed block ``b_blk`` (``nc`` columns) ends with the short last panel,
        its ``tail_dots`` columns copied K-contiguous into ``tail`` (column p at
        ``p * tail_k``), once per K block for all the row blocks."""
        g, b, t = self.g, self.g.b, self.t
        start = b.mul(b.udiv(nc, _c(t.nr)), _c(t.nr))  # the short panel's first column
        short = b.icmp_signed("==", b.sub(nc, start), _c(self.tail_dots))  # (see _macro)

        def copy() -> None:
            panel = g.gep(b_blk, self.ct, b.mul(start, kc))

            def row(k: ir.Value) -> None:
                for p in range(self.tail_dots):
                    x = b.load(g.gep(panel, self.ct, b.add(b.mul(k, _c(t.nr)), _c(p))), typ=self.ct)
                    b.store(x, g.gep(self.tail, self.ct, b.add(_c(p * self.tail_k), k)))

            g.loop(_c(0), kc, 1, row, "tcp", scalar=True)

        g.if_(short, copy)

    def _tail_rows(self, a_blk: ir.Value, kc: ir.Value, mc: ir.Value, cp: ir.Value, ldc: ir.Value,
                   first: ir.Value, last: ir.Value | None) -> None:
        """C[i, p] (+)= A[i, :kc] . tail[p, :kc] for the block's rows i < ``mc`` and the last
        panel's ``tail_dots`` columns p (C at ``cp``): V-lane multiply-adds along K, 4 rows
        at a time sharing the tail's loads, a masked last vector, each sum reduced once;
        stored (the first K block), added to C, or finished by the epilogue (the last), the
        epilogue inlined once (a loop over the group's sums). A function of its own
        (``noinline``), called once per K and row block."""
        epi = last is not None and self.epi is not None
        name = f"{self.spec.name}.tail{'_epi' if epi else ''}"
        fn = self.mod.globals.get(name)
        if fn is None:
            fn = ir.Function(self.mod, ir.FunctionType(VOID, [PTR, I64, I64, PTR, I64, I1, I1, PTR, PTR, PTR, PTR]),
                             name=name)
            fn.linkage = "internal"
            fn.attributes.add("nounwind")
            fn.attributes.add("noinline")
            self._tail_body(fn, epi)
        b = self.g.b
        b.call(fn, [a_blk, kc, mc, cp, ldc, first, last if last is not None else ir.Constant(I1, 0), self.bufs,
                    self.tail, self.tail_sums, self.c_ptr])

    def _tail_body(self, fn: ir.Function, epi: bool) -> None:
        a_blk, kc, mc, cp, ldc, first, last, bufs, tail, sums, c_ptr = fn.args
        g = _Gen(fn)
        b, t = g.b, self.t
        rs = self.direct_a[0] if self.direct_a else 0
        cols = self.tail_dots
        kfull = b.mul(b.udiv(kc, _c(t.v)), _c(t.v))
        vt = ir.VectorType(self.st, t.v)

        def rows(i: ir.Value, n: int) -> None:
            a_rows = [g.gep(a_blk, self.st, b.mul(b.add(i, _c(r)), _c(rs))) for r in range(n)]

            def load(ptr: ir.Value, k: ir.Value, mask: ir.Value | None) -> ir.Value:
                q = g.gep(ptr, self.st, k)
                if mask is None:
                    x = b.load(q, typ=vt)
                    x.align = _bytes(self.st)
                    return x
                return self.masked_load(b, q, self.st, mask)

            pre = b.block
            cond, body, done = (fn.append_basic_block(f"td.{x}") for x in ("cond", "body", "done"))
            b.branch(cond)
            b.position_at_end(cond)
            k = b.phi(I64)
            k.add_incoming(_c(0), pre)
            accs = [[b.phi(vt) for _ in range(cols)] for _ in range(n)]
            for row in accs:
                for a in row:
                    a.add_incoming(ir.Constant(vt, None), pre)
            b.cbranch(b.icmp_signed("<", k, kfull), body, done)
            b.position_at_end(body)
            xs = [load(g.gep(tail, self.ct, _c(p * self.tail_k)), k, None) for p in range(cols)]
            for r in range(n):
                a_v = load(a_rows[r], k, None)
                for p in range(cols):
                    accs[r][p].add_incoming(self.fma(b, a_v, xs[p], accs[r][p]), body)
            k.add_incoming(b.add(k, _c(t.v)), body)
            no_unroll(b.branch(cond))
            b.position_at_end(done)
            mask = self.lane_mask(b, b.sub(kc, kfull))  # the last, partial vector (none: all off)
            xs = [load(g.gep(tail, self.ct, _c(p * self.tail_k)), k, mask) for p in range(cols)]
            for r in range(n):
                a_v = load(a_rows[r], k, mask)
                for p in range(cols):
                    tot = self.fma(b, a_v, xs[p], accs[r][p])
                    if self.dt.is_int:
                        val = intrinsic(b, f"llvm.vector.reduce.add.{_sfx(vt)}", self.ct, [tot])
                    else:
                        name = f"llvm.vector.reduce.fadd.{_sfx(vt)}"
                        fnr = self.mod.globals.get(name) or ir.Function(
                            self.mod, ir.FunctionType(self.ct, [self.ct, vt]), name=name)
                        val = b.call(fnr, [ir.Constant(self.ct, 0.0), tot], fastmath=("reassoc",))
                    at = g.gep(cp, self.st, b.add(b.mul(b.add(i, _c(r)), ldc), _c(p)))
                    total = b.select(first, val, self.add(b, b.load(at, typ=self.st), val))
                    if epi:  # finished below, in one loop
                        b.store(total, g.gep(sums, self.st, _c(r * cols + p)))
                    else:
                        b.store(total, at)
            if epi:
                def store(j: ir.Value) -> None:
                    at = g.gep(cp, self.st, b.add(b.mul(b.add(i, b.udiv(j, _c(cols))), ldc), b.urem(j, _c(cols))))
                    b.store(b.load(g.gep(sums, self.st, j), typ=self.st), at)

                def finish(j: ir.Value) -> None:
                    at = g.gep(cp, self.st, b.add(b.mul(b.add(i, b.udiv(j, _c(cols))), ldc), b.urem(j, _c(cols))))
                    lin = b.sdiv(b.sub(b.ptrtoint(at, I64), b.ptrtoint(c_ptr, I64)), _c(_bytes(self.st)))
                    self.finish(b, lin, b.load(g.gep(sums, self.st, j), typ=self.st), bufs)

                # one copy of the epilogue, however many sums
                g.if_(last, lambda: g.loop(_c(0), _c(n * cols), 1, finish, "tdf", scalar=True),
                      lambda: g.loop(_c(0), _c(n * cols), 1, store, "tds", scalar=True))

        group = 4
        split = b.mul(b.udiv(mc, _c(group)), _c(group))
        g.loop(_c(0), split, group, lambda i: rows(i, group), "td4")
        g.loop(split, mc, 1, lambda i: rows(i, 1), "td1")
        b.ret_void()

    def _edge_vectors(self) -> int:
        """Vectors of the narrower micro-kernel for a convolution's right edge panel (0:
        none). An NCHW convolution's columns are pixels: a 14x14 map's 196 filled four
        64-wide tiles, the last with 4 columns, which cost as much as a full one (77% of
        the multiply-adds useful); its last panel then runs a one-vector tile (94%). Only
        the last panel of N is narrow (threads split whole NR-wide panels)."""
        lay, t = self.lay, self.t
        rem = lay.n % t.nr
        nv = -(-rem // t.v)
        return nv if (lay.a_win is not None or lay.b_win is not None) and rem and nv < t.nr // t.v else 0

    def _micro_fn(self, c_t: ir.Type, epilogue: bool = False, nv: int = 0) -> ir.Function:
        """``void uk(ptr a, ptr b, i64 kc, ptr c, i64 ldc, i64 skip, i64 mr, i64 nr, i1
        first)``: C[skip:skip+mr, 0:nr] (+)= (A[0:MR, 0:kc] @ B[0:kc, 0:NR])[skip:skip+mr].
        A element (r, k) is at ``a + r*rs + k*ks``: packed (1, MR) or in place; B row k
        at ``b + k*NR`` packed (zero padded) or ``b + k*ldb`` in place (masked loads
        beyond nr). ``epilogue``: two more arguments, ``i1 last, ptr bufs``: on the last K
        block the tile is finished by the epilogue (``finish``) instead of stored. ``nv``:
        a narrower tile of that many vectors (the right edge panel: ``_edge_vectors``)."""
        nv = nv or self.t.nr // self.t.v
        name = (f"{self.spec.name}.uk{'_acc32' if c_t != self.st else ''}{'_epi' if epilogue else ''}"
                f"{f'_n{nv}' if nv != self.t.nr // self.t.v else ''}")
        # indirect (``ind_seg``): ``a`` is the tile's indirection table, MR row pointers per
        # K segment; element (r, k) of segment s is at ``a[s*MR + r][k - s*seg]``
        fn = self.mod.globals.get(name)
        if fn is not None:
            return fn
        t = self.t
        a_direct = self.direct_a is not None
        rs, ks = self.direct_a if self.direct_a else (1, t.mr)
        b_direct = self.direct_b is not None
        a_t = self.st if a_direct or self.ind_seg else self.ct
        extra = [I1, PTR] if epilogue else []
        fn = ir.Function(self.mod, ir.FunctionType(VOID, [PTR, PTR, I64, PTR, I64, I64, I64, I64, I1, *extra]),
                         name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")  # optimized once, apart: halves the compile time
        a, bpan, kc, cp, ldc, skip, mr, nr, first = fn.args[:9]
        g = _Gen(fn)
        b = g.b
        end = b.add(skip, mr)
        tile = None
        if epilogue:  # the finished sums of the last K block, for the epilogue (L1)
            tile = b.alloca(self.ct, size=_c(t.mr * t.nr))
            tile.align = 64
        # Fetch the C tile while the K loop runs: its rows are far apart in memory.
        line = 64 // _bytes(c_t)
        for r in range(t.mr):
            rowp = g.gep(cp, c_t, b.mul(g.max(g.min(_c(r), b.sub(end, _c(1))), skip), ldc))
            for j in range(0, nv * t.v, line):
                intrinsic(b, "llvm.prefetch.p0", VOID, [g.gep(rowp, c_t, _c(j)), ir.Constant(I32, 1),
                                                         ir.Constant(I32, 3), ir.Constant(I32, 1)])
        masks = [self.lane_mask(b, b.sub(nr, _c(q * t.v))) for q in range(nv)]
        pre = b.block
        seg = self.ind_seg
        k_lo: ir.Value = _c(0)
        k_hi: ir.Value = kc
        init: list[list[ir.Value]] = [[ir.Constant(self.vt, None)] * nv for _ in range(t.mr)]
        if seg:  # the outer loop over K segments: the tile's row pointers for each
            scond, sbody, sdone = (fn.append_basic_block(f"s.{x}") for x in ("cond", "body", "done"))
            b.branch(scond)
            b.position_at_end(scond)
            sx = b.phi(I64, name="s")
            sx.add_incoming(_c(0), pre)
            outer = [[b.phi(self.vt) for _ in range(nv)] for _ in range(t.mr)]
            for row in outer:
                for acc in row:
                    acc.add_incoming(ir.Constant(self.vt, None), pre)
            b.cbranch(b.icmp_signed("<", b.mul(sx, _c(seg)), kc), sbody, sdone)
            b.position_at_end(sbody)
            rowptr = [b.load(g.gep(a, PTR, b.add(b.mul(sx, _c(t.mr)), _c(r))), typ=PTR) for r in range(t.mr)]
            k_lo = b.mul(sx, _c(seg))
            k_hi = b.add(k_lo, _c(seg))
            init = [list(row) for row in outer]
            pre = b.block
        zeros = ir.Constant(ir.VectorType(I32, t.v), None)
        undef = ir.Constant(self.vt, None)

        def step(k: ir.Value, cur: list[list[ir.Value]]) -> list[list[ir.Value]]:
            """One k of the tile: NV vector loads of B's row, MR broadcasts of A, MR*NV FMAs."""
            brow = g.gep(bpan, self.ct, b.mul(k, _c(self.direct_b if self.direct_b is not None else t.nr)))
            if self.direct_b is not None and self.b_prefetch:  # B's lines DIRECT_B_PREFETCH rows
                # ahead: each row is a page of its own, which the hardware prefetchers do not
                # fetch ahead (past the block's end they are still addresses, never loads)
                ahead = b.gep(brow, [_c(DIRECT_B_PREFETCH * self.direct_b)], source_etype=self.ct)
                for j in range(0, t.nr, 64 // _bytes(self.ct)):
                    _prefetch(b, b.gep(ahead, [_c(j)], source_etype=self.ct))
            bvec = []
            for q in range(nv):
                p = g.gep(brow, self.ct, _c(q * t.v))
                if b_direct:
                    bvec.append(self.masked_load(b, p, self.ct, masks[q]))
                else:
                    ld = b.load(p, typ=self.vt)
                    ld.align = min(64, t.v * _bytes(self.ct))
                    bvec.append(ld)
            acol = g.gep(a, a_t, b.mul(k, _c(ks)) if ks != 1 else k)
            out = []
            for r in range(t.mr):
                if seg:
                    x = b.load(g.gep(rowptr[r], a_t, b.sub(k, k_lo)), typ=a_t)
                else:
                    x = b.load(g.gep(acol, a_t, _c(r * rs)), typ=a_t)
                splat = b.shuffle_vector(b.insert_element(undef, x, ir.Constant(I32, 0)), undef, zeros)
                out.append([self.fma(b, splat, bvec[q], cur[r][q]) for q in range(nv)])
            return out

        def kloop(lo: ir.Value, hi: ir.Value, start: list[list[ir.Value]], unroll: int,
                  name: str) -> list[list[ir.Value]]:
            """The tile's sums after ks [lo, hi) (hi - lo a multiple of ``unroll``), from ``start``."""
            pre = b.block
            cond = fn.append_basic_block(f"{name}.cond")
            body = fn.append_basic_block(f"{name}.body")
            done = fn.append_basic_block(f"{name}.done")
            b.branch(cond)
            b.position_at_end(cond)
            k = b.phi(I64, name=name)
            k.add_incoming(lo, pre)
            accs = [[b.phi(self.vt) for _ in range(nv)] for _ in range(t.mr)]
            for row, row0 in zip(accs, start):
                for acc, v0 in zip(row, row0):
                    acc.add_incoming(v0, pre)
            b.cbranch(b.icmp_signed("<", k, hi), body, done)
            b.position_at_end(body)
            new = accs
            for u in range(unroll):
                new = step(b.add(k, _c(u)) if u else k, new)
            k.add_incoming(b.add(k, _c(unroll)), b.block)
            for r in range(t.mr):
                for q in range(nv):
                    accs[r][q].add_incoming(new[r][q], b.block)
            no_unroll(b.branch(cond))
            b.position_at_end(done)
            return accs

        # K unrolled by K_UNROLL (packed B rows, streamed from L2: more loads in flight),
        # then the remaining ks one at a time; a B read in place (masked loads, its rows
        # prefetched) and row pointers' segments keep one k per iteration
        unroll = K_UNROLL if not seg and not b_direct else 1
        if unroll > 1:
            mid = b.add(k_lo, b.mul(b.sdiv(b.sub(k_hi, k_lo), _c(unroll)), _c(unroll)))
            accs = kloop(k_lo, mid, init, unroll, "ku")
            accs = kloop(mid, k_hi, accs, 1, "k")
        else:
            accs = kloop(k_lo, k_hi, init, 1, "k")
        done = b.block
        if seg:  # the segment's sums carry into the next segment
            for row, row_out in zip(accs, outer):
                for acc, acc_out in zip(row, row_out):
                    acc_out.add_incoming(acc, done)
            sx.add_incoming(b.add(sx, _c(1)), done)
            no_unroll(b.branch(scond))
            b.position_at_end(sdone)
            accs = outer
        cvt = ir.VectorType(c_t, t.v)

        def full() -> None:
            def store(overwrite: bool) -> None:
                for r in range(t.mr):
                    rowp = g.gep(cp, c_t, b.mul(_c(r), ldc))
                    for q in range(nv):
                        p = g.gep(rowp, c_t, _c(q * t.v))
                        val = accs[r][q]
                        if not overwrite:
                            old = b.load(p, typ=cvt)
                            old.align = _bytes(c_t)
                            val = self.add(b, old, val)
                        _store(b, val, p, _bytes(c_t))

            g.if_(first, lambda: store(True), lambda: store(False))

        def edge() -> None:
            for r in range(t.mr):
                def row(r: int = r) -> None:
                    rowp = g.gep(cp, c_t, b.mul(_c(r), ldc))
                    for q in range(nv):
                        p = g.gep(rowp, c_t, _c(q * t.v))
                        old = self.masked_load(b, p, c_t, masks[q])
                        val = b.select(first, accs[r][q], self.add(b, old, accs[r][q]))
                        intrinsic(b, f"llvm.masked.store.{_sfx(cvt)}.p0", VOID,
                                   [val, p, ir.Constant(I32, _bytes(c_t)), masks[q]])

                g.if_(b.and_(b.icmp_signed("<=", skip, _c(r)), b.icmp_signed("<", _c(r), end)), row)

        full_tile = b.and_(b.icmp_signed("==", mr, _c(t.mr)), b.icmp_signed("==", nr, _c(t.nr)))
        if epilogue:
            last, bufs = fn.args[9:]
            # The buffer table, copied to the stack: the epilogue's stores cannot alias a
            # copy that never escapes, so its pointer loads leave the loop and it vectorizes.
            n_bufs = len(self.spec.comp.parameters) + 1
            with b.goto_entry_block():
                local = b.alloca(PTR, size=_c(n_bufs))
                for q in range(n_bufs):
                    b.store(b.load(g.gep(bufs, PTR, _c(q)), typ=PTR), g.gep(local, PTR, _c(q)))
            bufs = local
            g.if_(last, lambda: self._finish_tile(g, tile, accs, masks, cp, ldc, skip, end, nr, first, bufs),
                  lambda: g.if_(full_tile, full, edge))
        else:
            g.if_(full_tile, full, edge)
        b.ret_void()
        return fn

    def _finish_tile(self, g: _Gen, tile: ir.Value, accs: list[list[ir.Value]], masks: list[ir.Value],
                     cp: ir.Value, ldc: ir.Value, skip: ir.Value, end: ir.Value, nr: ir.Value, first: ir.Value,
                     bufs: ir.Value) -> None:
        """The last K block of an output fusion's tile: the final sums (this block's
        registers plus the partial sums of earlier blocks in C) go to a tile block on the
        stack, then each element of rows [skip, end) and columns [0, nr) is finished by the
        epilogue, which stores it."""
        b, t = g.b, self.t
        nv = len(masks)
        valign = min(64, t.v * _bytes(self.ct))
        for r in range(t.mr):
            def row(r: int = r) -> None:
                rowp = g.gep(cp, self.ct, b.mul(_c(r), ldc))
                for q in range(nv):
                    old = self.masked_load(b, g.gep(rowp, self.ct, _c(q * t.v)), self.ct, masks[q])
                    val = b.select(first, accs[r][q], self.add(b, old, accs[r][q]))
                    _store(b, val, g.gep(tile, self.ct, _c(r * t.nr + q * t.v)), valign)

            g.if_(b.and_(b.icmp_signed("<=", skip, _c(r)), b.icmp_signed("<", _c(r), end)), row)
        c_ptr = b.load(g.gep(bufs, PTR, _c(len(self.spec.comp.parameters))), typ=PTR)
        lin0 = b.sdiv(b.sub(b.ptrtoint(cp, I64), b.ptrtoint(c_ptr, I64)), _c(_bytes(self.ct)))
        L = self.last_dim
        # a tile row is a run of one output row when C's rows are the output's rows
        by_rows = not self.swap and self.lay.n == L and self.lay.rows_of(L)

        def erow(r: ir.Value) -> None:
            rlin = b.add(lin0, b.mul(r, ldc))
            row, col0 = b.udiv(rlin, _c(L)), b.urem(rlin, _c(L))
            if by_rows and self.epi_row is not None:
                z = _c(0)
                b.call(self.epi_row, [bufs, row, z, col0, b.add(col0, nr), z, z,
                                      g.gep(tile, self.ct, b.mul(r, _c(t.nr)))])
                return

            def elem(j: ir.Value) -> None:
                v = b.load(g.gep(tile, self.ct, b.add(b.mul(r, _c(t.nr)), j)), typ=self.ct)
                if by_rows:
                    self.finish_at(b, row, b.add(col0, j), v, bufs)
                else:
                    self.finish(b, b.add(rlin, j), v, bufs)

            if by_rows or self.lay.dense:
                g.loop(_c(0), nr, 1, elem, "ej", vectorize=True)
                return

            # A tile row is a run of output elements [rlin, rlin + nr) that crosses the
            # output's rows (an NCHW convolution's pixels: 7 of a 7x7 map per row): by
            # segments of one output row each, so that no element divides its flat index
            # and what depends on the row alone (a batch norm's per-feature terms) is
            # computed once per segment (14x14x256 at batch 1: 115 -> 40 us of epilogue)
            def orow(o: ir.Value) -> None:
                start = b.mul(o, _c(L))
                lo = b.sub(g.max(rlin, start), start)
                hi = b.sub(g.min(b.add(rlin, nr), b.add(start, _c(L))), start)
                at = b.sub(b.add(b.mul(r, _c(t.nr)), start), rlin)  # tile index of column 0

                def col(c: ir.Value) -> None:
                    v = b.load(g.gep(tile, self.ct, b.add(at, c)), typ=self.ct)
                    self.finish_at(b, o, c, v, bufs)

                g.loop(lo, hi, 1, col, "ec", vectorize=True)

            g.loop(row, b.add(b.sdiv(b.sub(b.add(rlin, nr), _c(1)), _c(L)), _c(1)), 1, orow, "eo")

        epi_tile = self.epi_tile
        if epi_tile is None:
            g.loop(skip, end, 1, erow, "ei")
            return

        def whole() -> None:  # every row of the tile: the column terms once (_EpilogueTileEmitter)
            z = _c(0)
            b.call(epi_tile, [bufs, b.udiv(lin0, _c(L)), z, b.urem(lin0, _c(L)), b.add(b.urem(lin0, _c(L)), nr),
                              z, z, tile])

        g.if_(b.and_(b.icmp_signed("==", skip, _c(0)), b.icmp_signed("==", end, _c(t.mr))), whole,
              lambda: g.loop(skip, end, 1, erow, "ei"))


def emit(mod: ir.Module, spec: GemmSpec) -> ir.Function:
    """Emits the GEMM kernel for ``spec`` into ``mod`` (signature ``emitter.SIG``)."""
    from .target import host

    return _Emitter(mod, spec, spec.vector_bits or host().vector_bits).build()


def vector_bits_for(features: str | None) -> int:
    """The widest vector a target (LLVM ``features`` as given to AOT) offers. No
    ``features`` means the host's (``target.target_machine`` uses them then)."""
    from .target import host

    if features is None:
        return host().vector_bits
    if "+avx512f" in features:
        return 512
    if "+avx2" in features or "+avx" in features:
        return 256
    return 128


__all__ = ["GemmSpec", "Layout", "Offsets", "Tiles", "tiles", "emit", "vector_bits_for", "STACK_BUDGET"]
