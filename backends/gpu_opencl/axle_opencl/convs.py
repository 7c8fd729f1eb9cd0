"""Convolution kernels: a direct, implicit-GEMM convolution (no im2col buffer).

A convolution (StableHLO semantics, docs/ir.md) is, per group ``g``, a matrix product
with rows = output pixels (output batch x output spatial positions, ``M``), columns =
the group's output features (``Og``) and a contraction over the group's input features x
kernel window positions (``K = Ci x KK``). Its lhs "matrix" is never built: each row's
element for window position ``k`` reads the input at ``out * stride + k * rhs_dilation -
padding_low`` of the lhs-dilated input (a hole or padding reads zero, which is still
multiplied, so an inf/NaN weight poisons the result exactly as the reference's does).
Every layout (dimension numbers) is read through strides, so NCHW and NHWC need no
transposes; feature groups offset the input features, batch groups the input batch,
both offset the kernel's output features by ``g x Og``.

* ``conv_kernel_cpu`` (CPU devices such as PoCL), three micro-kernels picked from the layout:
  *pixel vectors* for channels-first layouts (NCHW-style input and output, stride 1 or 2
  along the last spatial dim, rows at least one vector wide, or half a vector and 8 lanes):
  each work-item computes MR output features x one output row in vectors along the last
  spatial dim, the edge vectors (into
  the padding) shifted from the row's edge vector with zero lanes, the kernel's scalars
  splatted; *image vectors* for channels-first maps with narrower rows (7x7): vectors over
  the flat image, every window position unrolled, each vector one load or lanes picked
  from a few. Otherwise *feature vectors*: each work-item computes MR rows x NR output
  features in vector accumulators (vectors along the output features, loaded whole where
  the kernel's output-feature dim is contiguous, HWIO, else gathered), for each window
  position a branch-free inner loop over the input features when all its rows read
  inside the input, a masked one otherwise.
* ``conv_kernel`` (GPUs): the local-memory tiles of ``dots.dot_kernel``: work-groups of
  TS x TS work-items stage TS-deep slabs of the virtual lhs (gathered with the masks
  above) and of the kernel in ``__local`` memory, each work-item keeping RM x RN
  outputs in registers.

Both finish each accumulator with an ``output`` fusion's epilogue when there is one
(:class:`~.dots.Epilogue`: bias, activation, residual, scale, convert), so the
convolution's own value is never stored. Accumulation and dtypes as the dot kernels."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from axle.ir.dtypes import DType
from axle.ir.module import Node
from axle.lowering.index import row_major_strides

from .dots import _ACC, _LANES, Epilogue, _cpu_kernel, _kernel_parts, _lanes, _Ops, _put, column_panels
from .emitter import Emitter
from .kernels import DeviceInfo, Kernel, _finish
from .render import STORAGE, identity
from .values import Renderer, acc_dtype, combine, load, reg_type

#: the dtypes the convolution kernels compute (those of the tiled dots); the others get
#: the core's decomposition (backend.py's Capabilities.op_dtypes)
CONV_DTYPES = frozenset(_ACC)


#: CPU kernel: rows per work-item when the kernel's output features are not contiguous
MR_GATHERED = 16  # (measured on PoCL, AVX-512: 6 rows 12 GFLOP/s, 16 rows 19, 24 rows 14)


@dataclass(frozen=True)
class ConvDims:
    """A convolution as the kernels see it: sizes per role and strides of each operand."""

    groups: int
    feature_groups: bool  # groups split the input features (else the input batch)
    nb: int  # output batch
    og: int  # output features per group
    ci: int  # input features per group
    in_sp: tuple[int, ...]
    k_sp: tuple[int, ...]
    out_sp: tuple[int, ...]
    strides: tuple[int, ...]
    low: tuple[int, ...]
    lhs_dil: tuple[int, ...]
    rhs_dil: tuple[int, ...]
    xb: int  # input strides: batch, feature, spatial
    xc: int
    xsp: tuple[int, ...]
    wo: int  # kernel strides: output feature, input feature, spatial
    wi: int
    wsp: tuple[int, ...]
    ob: int  # output strides: batch, feature, spatial
    of: int
    osp: tuple[int, ...]

    @classmethod
    def of_node(cls, n: Node) -> ConvDims:
        a = n.attr
        lhs, rhs = n.operands
        xs, ws, os_ = (row_major_strides(t.shape) for t in (lhs, rhs, n))
        g, bg = a["feature_group_count"], a["batch_group_count"]
        groups = max(g, bg)
        isp, ksp, osp = a["input_spatial_dimensions"], a["kernel_spatial_dimensions"], a["output_spatial_dimensions"]
        return cls(groups=groups, feature_groups=g > 1, nb=n.shape[a["output_batch_dimension"]],
                   og=n.shape[a["output_feature_dimension"]] // groups,
                   ci=rhs.shape[a["kernel_input_feature_dimension"]],
                   in_sp=tuple(lhs.shape[d] for d in isp), k_sp=tuple(rhs.shape[d] for d in ksp),
                   out_sp=tuple(n.shape[d] for d in osp), strides=tuple(a["window_strides"]),
                   low=tuple(a["padding_low"]), lhs_dil=tuple(a["lhs_dilation"]), rhs_dil=tuple(a["rhs_dilation"]),
                   xb=xs[a["input_batch_dimension"]], xc=xs[a["input_feature_dimension"]],
                   xsp=tuple(xs[d] for d in isp),
                   wo=ws[a["kernel_output_feature_dimension"]], wi=ws[a["kernel_input_feature_dimension"]],
                   wsp=tuple(ws[d] for d in ksp),
                   ob=os_[a["output_batch_dimension"]], of=os_[a["output_feature_dimension"]],
                   osp=tuple(os_[d] for d in osp))

    @property
    def pixels(self) -> int:
        return math.prod(self.out_sp)

    @property
    def rows(self) -> int:
        """M: output batch x output pixels (of one group)."""
        return self.nb * self.pixels

    @property
    def window(self) -> int:
        return math.prod(self.k_sp)


def _what(n: Node) -> str:
    lhs, rhs = n.operands
    return f"convolution {lhs.type} x {rhs.type} -> {n.type}" + (f" (at {n.loc})" if n.loc else "")


def _digits(v: str, sizes: tuple[int, ...]) -> list[str]:
    """Row-major coordinates of flat index ``v`` over ``sizes`` (C expressions)."""
    out = []
    for j, s in enumerate(sizes):
        inner = math.prod(sizes[j + 1:])
        c = f"({v} / {inner})" if inner > 1 else v
        out.append(f"({c} % {s})" if j > 0 else c)
    return out


class _Row:
    """Declarations of one output row ``m`` (batch, pixel) of group ``g``: the input offset
    of its batch (``xb``), the first input position of its window per spatial dim (``d``)
    and its output offset without the feature (``po``)."""

    def __init__(self, c: ConvDims, L: list[str], tag: str, m: str, indent: str) -> None:
        p = c.pixels
        nb = f"({m} / {p})" if p > 1 else m
        q = _digits(f"({m} % {p})" if c.nb > 1 else m, c.out_sp) if c.out_sp else []
        xn = f"(g * {c.nb} + {nb})" if not c.feature_groups and c.groups > 1 else nb
        self.d = [f"d{tag}_{j}" for j in range(len(c.out_sp))]
        L.append(f"{indent}const int xb{tag} = {xn} * {c.xb};")
        for j, dj in enumerate(self.d):
            L.append(f"{indent}const int {dj} = {q[j]} * {c.strides[j]} - {c.low[j]};")
        po = " + ".join([f"{nb} * {c.ob}"] + [f"{q[j]} * {c.osp[j]}" for j in range(len(q))])
        L.append(f"{indent}const int po{tag} = {po};")
        self.tag = tag

    def at(self, c: ConvDims, kpos: list[str]) -> tuple[str, str]:
        """(validity, input offset of the window position, without the feature) for
        kernel coordinates ``kpos``: a hole of the lhs dilation or padding is invalid."""
        conds, offs = _window_at(c, self.d, kpos)
        return (" && ".join(conds) or "1"), " + ".join([f"xb{self.tag}", *offs])


def _window_at(c: ConvDims, d: list[str], kpos: list[str]) -> tuple[list[str], list[str]]:
    """(conditions, offset terms) of the input position first-window-position ``d`` +
    kernel coordinates ``kpos`` times the rhs dilation, along the leading len(d) spatial
    dims: inside the input and not a hole of the lhs dilation."""
    conds, offs = [], []
    for j, dj in enumerate(d):
        t = f"({dj} + {kpos[j]} * {c.rhs_dil[j]})" if c.rhs_dil[j] != 1 else f"({dj} + {kpos[j]})"
        ld, n = c.lhs_dil[j], c.in_sp[j]
        if ld == 1:
            conds.append(f"(uint){t} < {n}u")
            offs.append(f"{t} * {c.xsp[j]}")
        else:
            conds += [f"{t} >= 0", f"{t} % {ld} == 0", f"{t} < {(n - 1) * ld + 1}"]
            offs.append(f"({t} / {ld}) * {c.xsp[j]}")
    return conds, offs


def _rows(c: ConvDims, L: list[str], count: int, first: Callable[[int], str]) -> list[_Row]:
    """``count`` rows, row i at ``first(i)`` clamped to the last (their stores are guarded)."""
    rows = []
    for i in range(count):
        L.append(f"  const int row{i} = min({first(i)}, {c.rows - 1});")
        rows.append(_Row(c, L, str(i), f"row{i}", "  "))
    return rows


def _kpos_loops(c: ConvDims, L: list[str], indent: str) -> tuple[list[str], str, int]:
    """Opens one loop per kernel spatial dim; returns the coordinates, the inner indent
    and how many loops to close."""
    kpos = []
    for j, k in enumerate(c.k_sp):
        L.append(f"{indent}for (int k{j} = 0; k{j} < {k}; k{j}++) {{")
        kpos.append(f"k{j}")
        indent += "  "
    return kpos, indent, len(c.k_sp)


def _close(L: list[str], indent: str, n: int) -> None:
    for i in range(n):
        L.append(indent[:len(indent) - 2 * (i + 1)] + "}")


# ------------------------------------------------------------------------ CPU devices


def conv_kernel_cpu(n: Node, dev: DeviceInfo, epi: Epilogue | None = None) -> Kernel:
    """Register-blocked work-items without local memory (see the module docstring)."""
    c = ConvDims.of_node(n)
    w = _lanes(n.dtype, dev)
    ops = _Ops(n.dtype, w)
    wide = w * (4 if n.dtype is DType.FLOAT16 else n.dtype.itemsize) >= 64  # AVX-512: 32 vector registers
    # pixel vectors as wide as the rows allow, down to 8 lanes (4-lane vectors measured slower
    # than the gathered feature vectors on 7-wide rows)
    lanes = next((v for v in (w, w // 2) if v >= 8 and _pixel_vectors_fit(c, v)), 0)
    if lanes:
        return _pixel_vectors(n, c, _Ops(n.dtype, lanes), wide, epi)
    if _image_vectors_fit(c, w):
        return _image_vectors(n, c, ops, wide, epi)
    M, V = c.rows, c.og
    if c.wo == 1:  # per input feature: NV vector loads of the kernel, MR scalars of the input
        mr, nv = max(1, min(6 if wide else 4, M)), max(0, min(4 if wide else 2, V // w))
    else:  # the kernel's vectors are gathered (w loads each): one vector, shared by more rows
        mr, nv = max(1, min(MR_GATHERED if wide else MR_GATHERED // 2, M)), min(1, V // w)
    nr = nv * w if nv else V
    L = [
        "  const int g = (int)get_global_id(2);",
        f"  const int m0 = (int)get_global_id(0) * {mr}, c0 = (int)get_global_id(1) * {nr};",
        f"  __global const {STORAGE[n.dtype]}* restrict X = in0 + " +
        (f"g * {c.ci * c.xc};" if c.feature_groups else "0;"),
        f"  __global const {STORAGE[n.dtype]}* restrict W = in1 + g * {c.og * c.wo};",
        f"  const int ob = g * {c.og * c.of};",
    ]
    rows = _rows(c, L, mr, lambda i: f"m0 + {i}")

    def wload(col: str, vec: bool) -> str:
        if not vec:
            return ops.sload("Wk", f"ci * {c.wi} + ({col}) * {c.wo}")
        if c.wo == 1:
            return ops.vload(f"Wk + ci * {c.wi} + {col}")
        lanes = ", ".join(ops.sload("Wk", f"ci * {c.wi} + ({col} + {k}) * {c.wo}") for k in range(w))
        return f"({ops.vt()})({lanes})"

    def store(v: str, row: int, col: str, vec: bool) -> str:
        off = f"po{row} + ob + ({col}) * {c.of}"
        if not vec:
            return _put(epi, n.dtype, off, v) if epi is not None else ops.sstore(v, "out0", off)
        if epi is None and c.of == 1:
            return ops.vstore(v, f"out0 + {off}")
        # lanes through a private array: one store (or epilogue call) site, not w
        put = _put(epi, n.dtype, f"{off} + l_ * {c.of}", "e_[l_]") if epi is not None else \
            ops.sstore("e_[l_]", "out0", f"{off} + l_ * {c.of}")
        return f"{{ {ops.acc} e_[{w}]; vstore{w}({v}, 0, e_); for (int l_ = 0; l_ < {w}; l_++) {put} }}"

    def block(cols: list[str], vec: bool, indent: str) -> None:
        t = ops.vt() if vec else ops.acc
        for i in range(mr):
            for j in range(len(cols)):
                L.append(f"{indent}{t} c{i}_{j} = ({t})(0);")
        kpos, ind, depth = _kpos_loops(c, L, indent)
        koff = " + ".join(f"{k} * {s}" for k, s in zip(kpos, c.wsp)) or "0"
        L.append(f"{ind}__global const {STORAGE[n.dtype]}* restrict Wk = W + {koff};")
        valid = []
        for i, r in enumerate(rows):
            cond, off = r.at(c, kpos)
            L.append(f"{ind}const int v{i} = {cond};")
            L.append(f"{ind}__global const {STORAGE[n.dtype]}* restrict x{i} = X + (v{i} ? {off} : 0);")
            valid.append(f"v{i}")

        def inner(masked: bool, ind2: str) -> None:
            L.append(f"{ind2}for (int ci = 0; ci < {c.ci}; ci++) {{")
            for j, col in enumerate(cols):
                L.append(f"{ind2}  const {t} y{j} = {wload(col, vec)};")
            for i in range(mr):
                x = ops.sload(f"x{i}", f"ci * {c.xc}")
                x = f"(v{i} ? {x} : ({ops.acc})0)" if masked else x
                L.append(f"{ind2}  const {t} s{i} = ({t})({x});")
                for j in range(len(cols)):
                    L.append(f"{ind2}  {ops.mac(f'c{i}_{j}', f's{i}', f'y{j}')}")
            L.append(f"{ind2}}}")

        # all rows inside the input: no masks in the inner loop (the usual case)
        L.append(f"{ind}if ({' && '.join(valid)}) {{")
        inner(False, ind + "  ")
        L.append(f"{ind}}} else {{")
        inner(True, ind + "  ")
        L.append(f"{ind}}}")
        _close(L, ind, depth)
        for i in range(mr):
            cond = f"if (m0 + {i} < {M}) " if M % mr else ""
            stores = " ".join(store(f"c{i}_{j}", i, col, vec) for j, col in enumerate(cols))
            L.append(f"{indent}{cond}{{ {stores} }}")

    column_panels(L, V, w, nv, block)
    gs = (-(-M // mr), -(-V // nr), c.groups)
    return _cpu_kernel(n, "\n".join(L), gs, epi, _what(n))


def _pick_lanes(offsets: list[int | None], size: int | None, ops: _Ops, loads: set[int]) -> str:
    """A vector whose lane l holds the input at ``offsets[l]`` (None: zero, the padding or
    a hole) within a run of ``size`` contiguous elements at ``xc`` (None: unbounded, every
    offset valid): one load where the offsets are consecutive, else lanes picked (a
    shuffle known when the kernel is generated) from the W-wide loads at ``b``, ``b+W``...
    that cover them, ``b`` kept inside the run. Those load offsets are added to ``loads``
    (the caller declares them, named by :func:`_load_name`)."""
    w, t = ops.w, ops.vt()
    valid = [o for o in offsets if o is not None]
    if not valid:
        return f"({t})(0)"
    if len(valid) == w and valid == list(range(valid[0], valid[0] + w)):
        loads.add(valid[0])
        return _load_name(valid[0])
    lo, hi = min(valid), max(valid)
    b = lo if size is None else min(lo, size - w * -(-(hi - lo + 1) // w))
    lanes = []
    for o in offsets:
        if o is None:
            lanes.append(f"({ops.acc})0")
            continue
        loads.add(b + (o - b) // w * w)
        lanes.append(f"{_load_name(b + (o - b) // w * w)}.s{_LANES[(o - b) % w]}")
    return f"({t})({', '.join(lanes)})"


def _load_name(offset: int) -> str:
    return f"e{offset}" if offset >= 0 else f"em{-offset}"


#: the largest window stride along the last spatial dim the pixel vectors take (each vector
#: picks its lanes from that many loads)
MAX_PIXEL_STRIDE = 2


def _pixel_vectors_fit(c: ConvDims, w: int) -> bool:
    """Channels-first layouts (NCHW input and output, the kernel's output features not
    contiguous): vectors along the last spatial dim, contiguous in the input (stride 1 or
    2, no lhs dilation there) and in the output, and at least one vector wide."""
    s = c.strides[-1] if c.out_sp else 0
    return (c.wo != 1 and 1 <= s <= MAX_PIXEL_STRIDE and c.xsp[-1] == 1 and c.osp[-1] == 1
            and c.lhs_dil[-1] == 1 and c.out_sp[-1] >= w and c.in_sp[-1] >= s * w)


def _pixel_vectors(n: Node, c: ConvDims, ops: _Ops, wide: bool, epi: Epilogue | None) -> Kernel:
    """Each work-item: MR output features x one output row (one image, one position of
    the outer spatial dims) in vectors of W consecutive pixels along the last spatial dim,
    NV vectors at a time. The vectors start at fixed columns (0, W, 2W..., and Wo - W for a
    ragged end: its overlap is computed and stored twice, the same values), so for each
    window column the input position each vector reads is known when the kernel is
    generated: a vector inside the row is one load, one that reaches into the padding
    loads the W positions at the row's edge and shifts its lanes into place with zeros.
    Per input feature and window column: NV such vectors, MR kernel scalars splatted,
    MR x NV multiply-adds."""
    w, t = ops.w, ops.vt()
    wo_, wi_, kl = c.out_sp[-1], c.in_sp[-1], c.k_sp[-1]
    starts = list(range(0, wo_ - w + 1, w)) + ([wo_ - w] if wo_ % w else [])
    nv = 4 if wide else 2
    mr = max(1, min(6 if wide else 4, c.og))
    outer = c.out_sp[:-1]
    po = math.prod(outer)
    store_t = STORAGE[n.dtype]
    L = [
        "  const int g = (int)get_global_id(2), r = (int)get_global_id(0);",
        f"  const int o0 = (int)get_global_id(1) * {mr};",
        f"  const int nb = r / {po};" if po > 1 else "  const int nb = r;",
    ]
    q = _digits(f"(r % {po})", outer) if outer else []
    xn = f"(g * {c.nb} + nb)" if not c.feature_groups and c.groups > 1 else "nb"
    xg = f" + g * {c.ci * c.xc}" if c.feature_groups else ""
    L.append(f"  __global const {store_t}* restrict X = in0 + {xn} * {c.xb}{xg};")
    for i in range(mr):
        L.append(f"  __global const {store_t}* restrict W{i} = in1 + (g * {c.og} + min(o0 + {i}, {c.og - 1})) "
                 f"* {c.wo};")
    po_expr = " + ".join([f"nb * {c.ob}"] + [f"{q[j]} * {c.osp[j]}" for j in range(len(q))])
    L.append(f"  const int pbase = {po_expr};")
    for j, qj in enumerate(q):
        L.append(f"  const int d_{j} = {qj} * {c.strides[j]} - {c.low[j]};")

    st_ = c.strides[-1]

    def positions(start: int, kw: int) -> list[int]:
        """The input positions the lanes of the vector at output column ``start`` read at
        window column ``kw``."""
        i = start * st_ + kw * c.rhs_dil[-1] - c.low[-1]
        return [i + st_ * k for k in range(w)]

    def interior(chunk: list[int]) -> bool:
        """A full chunk of evenly spaced vectors that never reads padding."""
        return (len(chunk) == nv and chunk == list(range(chunk[0], chunk[0] + nv * w, w))
                and all(0 <= p < wi_ for st in chunk for k in range(kl) for p in positions(st, k)))

    def emit(chunk: list[int], col: str) -> None:
        """The chunk's accumulators, loops and stores; ``col``: a column added to every
        start at run time (the interior chunks' loop variable; their code is the same)."""
        L.append("  {")
        for i in range(mr):
            for j in range(len(chunk)):
                L.append(f"    {t} c{i}_{j} = ({t})(0);")
        kpos, ind, depth = _kpos_loops(replace(c, k_sp=c.k_sp[:-1]), L, "    ")
        # the outer spatial dims: one position for the whole row
        conds, offs = _window_at(c, [f"d_{j}" for j in range(len(outer))], kpos)
        L.append(f"{ind}const int vo = {' && '.join(conds) or '1'};")
        L.append(f"{ind}__global const {store_t}* restrict xr = X + (vo ? {' + '.join(offs) or '0'} : 0)"
                 + (f" + {col} * {st_};" if col != "0" else ";"))
        L.append(f"{ind}const int kw = {' + '.join(f'{k} * {s_}' for k, s_ in zip(kpos, c.wsp)) or '0'};")
        L.append(f"{ind}for (int ci = 0; ci < {c.ci}; ci++) {{")
        L.append(f"{ind}  __global const {store_t}* restrict xc = xr + ci * {c.xc};")
        for k in range(kl):  # the window's last dim unrolled: each vector's input position is known
            L.append(f"{ind}  {{")
            loads: set[int] = set()
            if col == "0":
                xs = [_pick_lanes([p if 0 <= p < wi_ else None for p in positions(st, k)], wi_, ops, loads)
                      for st in chunk]
            else:  # relative to the run-time column: every position inside the row
                xs = [_pick_lanes(list(positions(st, k)), None, ops, loads) for st in chunk]
            L.extend(f"{ind}    const {t} {_load_name(b)} = {ops.vload(f'xc + {b}')};" for b in sorted(loads))
            for j, x in enumerate(xs):
                L.append(f"{ind}    const {t} x{j} = vo ? {x} : ({t})(0);")
            for i in range(mr):
                wk = ops.sload(f"W{i}", f"kw + {k * c.wsp[-1]} + ci * {c.wi}")
                L.append(f"{ind}    const {t} s{i} = ({t})({wk});")
                for j in range(len(chunk)):
                    L.append(f"{ind}    {ops.mac(f'c{i}_{j}', f's{i}', f'x{j}')}")
            L.append(f"{ind}  }}")
        L.append(f"{ind}}}")
        _close(L, ind, depth)
        _store_features(L, n, c, ops, mr, chunk, "pbase" if col == "0" else f"pbase + {col}", epi)
        L.append("  }")

    chunks = [starts[k:k + nv] for k in range(0, len(starts), nv)]
    inner = [k for k, ch in enumerate(chunks) if interior(ch)]
    # interior chunks (a contiguous run) share one code path in a run-time loop: the
    # kernel's size, and its build time, stay bounded on wide rows
    run = inner if len(inner) >= 2 and inner == list(range(inner[0], inner[-1] + 1)) else []
    for k, ch in enumerate(chunks):
        if run and k == run[0]:
            L.append(f"  for (int cb = {chunks[run[0]][0]}; cb <= {chunks[run[-1]][0]}; cb += {nv * w})")
            emit(list(range(0, nv * w, w)), "cb")
        elif k not in run:
            emit(ch, "0")
    gs = (c.nb * po, -(-c.og // mr), c.groups)
    return _cpu_kernel(n, "\n".join(L), gs, epi, _what(n))


def _store_features(L: list[str], n: Node, c: ConvDims, ops: _Ops, mr: int, chunk: list[int], base: str,
                    epi: Epilogue | None) -> None:
    """Stores accumulators c<i>_<j> (output feature o0 + i, the W pixels from ``base`` +
    ``chunk[j]``), or finishes each lane with the epilogue."""
    w = ops.w
    for i in range(mr):
        guard = f"if (o0 + {i} < {c.og}) " if c.og % mr else ""
        stores = []
        for j, st in enumerate(chunk):
            off = f"{base} + {st} + (g * {c.og} + o0 + {i}) * {c.of}"
            if epi is None:
                stores.append(ops.vstore(f"c{i}_{j}", f"out0 + {off}"))
            else:  # lanes through a private array: one epilogue call site, not w
                stores.append(f"{{ {ops.acc} e_[{w}]; vstore{w}(c{i}_{j}, 0, e_); for (int l_ = 0; l_ < {w}; "
                              f"l_++) {_put(epi, n.dtype, f'{off} + l_', 'e_[l_]')} }}")
        L.append(f"    {guard}{{ {' '.join(stores)} }}")


#: image vectors: the most loads one vector picks its lanes from, and the most window
#: positions (all unrolled into the kernel)
MAX_IMAGE_LOADS, MAX_IMAGE_WINDOW = 4, 27


def _image_offsets(c: ConvDims, start: int, kpos: tuple[int, ...], w: int) -> list[int | None]:
    """Input offsets (within one image and feature) that output pixels ``start``..
    ``start + w - 1`` (flat over the output's spatial dims) read at window position
    ``kpos``; None where it is padding or a hole of the lhs dilation."""
    out: list[int | None] = []
    in_strides = row_major_strides(c.in_sp)
    for p in range(start, start + w):
        ts = [q * c.strides[j] + kpos[j] * c.rhs_dil[j] - c.low[j] for j, q in enumerate(_coords(p, c.out_sp))]
        inside = all(t >= 0 and t % ld == 0 and t // ld < n for t, ld, n in zip(ts, c.lhs_dil, c.in_sp))
        out.append(sum(t // ld * s_ for t, ld, s_ in zip(ts, c.lhs_dil, in_strides)) if inside else None)
    return out


def _coords(p: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for size in reversed(shape):
        out.append(p % size)
        p //= size
    return out[::-1]


def _image_starts(c: ConvDims, w: int) -> list[int]:
    """Fixed vector starts over the flat output image (the last one overlapping)."""
    P = c.pixels
    return list(range(0, P - w + 1, w)) + ([P - w] if P % w else [])


def _image_vectors_fit(c: ConvDims, w: int) -> bool:
    """Channels-first layouts whose rows are too narrow for pixel vectors (7x7 maps): the
    whole output image of one feature is contiguous, and so is the input's; vectors run
    over the flat image, each picking its lanes from at most MAX_IMAGE_LOADS loads."""
    size = math.prod(c.in_sp)
    if not (c.wo != 1 and c.out_sp and c.pixels >= w and size >= w and c.window <= MAX_IMAGE_WINDOW
            and c.xsp == tuple(row_major_strides(c.in_sp)) and c.osp == tuple(row_major_strides(c.out_sp))):
        return False
    for kpos in _window_positions(c.k_sp):
        for st in _image_starts(c, w):
            valid = [o for o in _image_offsets(c, st, kpos, w) if o is not None]
            if valid and -(-(max(valid) - min(valid) + 1) // w) * w > min(size, MAX_IMAGE_LOADS * w):
                return False
    return True


def _window_positions(k_sp: tuple[int, ...]) -> list[tuple[int, ...]]:
    return [tuple(_coords(k, k_sp)) for k in range(math.prod(k_sp))]


def _image_vectors(n: Node, c: ConvDims, ops: _Ops, wide: bool, epi: Epilogue | None) -> Kernel:
    """Each work-item: MR output features x one output image (one batch element), in
    vectors of W pixels over the flat image (fixed starts, the last overlapping), NV at a
    time. Every window position is unrolled, so each lane's input offset (or padding) is
    known when the kernel is generated: per input feature and window position, each
    vector is one load or lanes picked from a few loads, then MR kernel scalars splatted
    and MR x NV multiply-adds."""
    w, t = ops.w, ops.vt()
    size = math.prod(c.in_sp)
    nv = 4 if wide else 2
    mr = max(1, min(6 if wide else 4, c.og))
    store_t = STORAGE[n.dtype]
    xn = f"(g * {c.nb} + nb)" if not c.feature_groups and c.groups > 1 else "nb"
    xg = f" + g * {c.ci * c.xc}" if c.feature_groups else ""
    L = [
        "  const int g = (int)get_global_id(2), nb = (int)get_global_id(0);",
        f"  const int o0 = (int)get_global_id(1) * {mr};",
        f"  __global const {store_t}* restrict X = in0 + {xn} * {c.xb}{xg};",
    ]
    for i in range(mr):
        L.append(f"  __global const {store_t}* restrict W{i} = in1 + (g * {c.og} + min(o0 + {i}, {c.og - 1})) "
                 f"* {c.wo};")
    starts = _image_starts(c, w)
    positions = _window_positions(c.k_sp)
    for c0 in range(0, len(starts), nv):
        chunk = starts[c0:c0 + nv]
        L.append("  {")
        L += [f"    {t} c{i}_{j} = ({t})(0);" for i in range(mr) for j in range(len(chunk))]
        L.append(f"    for (int ci = 0; ci < {c.ci}; ci++) {{")
        L.append(f"      __global const {store_t}* restrict xc = X + ci * {c.xc};")
        for kpos in positions:
            loads: set[int] = set()
            xs = [_pick_lanes(_image_offsets(c, st, kpos, w), size, ops, loads) for st in chunk]
            kw = sum(k * s_ for k, s_ in zip(kpos, c.wsp))
            L.append("      {")
            L += [f"        const {t} {_load_name(b)} = {ops.vload(f'xc + {b}')};" for b in sorted(loads)]
            L += [f"        const {t} x{j} = {x};" for j, x in enumerate(xs)]
            for i in range(mr):
                L.append(f"        const {t} s{i} = ({t})({ops.sload(f'W{i}', f'{kw} + ci * {c.wi}')});")
                L += [f"        {ops.mac(f'c{i}_{j}', f's{i}', f'x{j}')}" for j in range(len(chunk))]
            L.append("      }")
        L.append("    }")
        _store_features(L, n, c, ops, mr, chunk, f"nb * {c.ob}", epi)
        L.append("  }")
    gs = (c.nb, -(-c.og // mr), c.groups)
    return _cpu_kernel(n, "\n".join(L), gs, epi, _what(n))


# ------------------------------------------------------------------ local-memory tiles


def conv_kernel(n: Node, dev: DeviceInfo, epi: Epilogue | None = None) -> Kernel:
    """Register-tiled implicit GEMM through local memory (GPUs; any layout, every dtype
    of CONV_DTYPES): rows = output pixels, columns = the group's output features,
    k = window position x input feature (the feature fastest, contiguous in NHWC)."""
    c = ConvDims.of_node(n)
    ts = 16 if dev.max_work_group >= 256 else (8 if dev.max_work_group >= 64 else 4)
    rm = rn = 4
    tm, tn, tk = ts * rm, ts * rn, ts
    M, N, K = c.rows, c.og, c.ci * c.window
    adt = acc_dtype(n.dtype)
    act = reg_type(adt)
    zero = identity("sum", adt)
    r = Renderer(Emitter(1), {0: "in0", 1: "in1"})
    r.uses_fp64 = n.dtype is DType.FLOAT64 or (epi is not None and epi.renderer.uses_fp64)
    L = [
        "  const int ln = (int)get_local_id(0), lm = (int)get_local_id(1), g = (int)get_global_id(2);",
        f"  const int n0 = (int)get_group_id(0) * {tn}, m0 = (int)get_group_id(1) * {tm};",
        f"  __local {act} As[{tk}][{tm + 1}];",
        f"  __local {act} Bs[{tk}][{tn + 1}];",
        f"  const int xg = {f'g * {c.ci * c.xc}' if c.feature_groups else '0'}, wg = g * {c.og * c.wo};",
    ]
    # each work-item stages the same rm rows every k slab: their offsets are computed once
    rows = _rows(c, L, rm, lambda i: f"m0 + lm + {i * ts}")
    L += [f"  {act} c{i}_{j} = {zero};" for i in range(rm) for j in range(rn)]

    def split_k(v: str) -> tuple[str, list[str]]:
        """(input feature, kernel coordinates) of contraction index ``v``."""
        return (f"({v} % {c.ci})", _digits(f"({v} / {c.ci})", c.k_sp)) if c.ci > 1 else ("0", _digits(v, c.k_sp))

    L.append(f"  for (int k0 = 0; k0 < {K}; k0 += {tk}) {{")
    L.append("    const int ka = k0 + ln, kb = k0 + lm;")
    ca, kpa = split_k("ka")
    cb, kpb = split_k("kb")
    L.append(f"    const int ca = {ca}, cb = {cb};")
    L += [f"    const int ka{j} = {e}, kb{j} = {f};" for j, (e, f) in enumerate(zip(kpa, kpb))]
    kpos_a = [f"ka{j}" for j in range(len(c.k_sp))]
    wk = " + ".join([f"cb * {c.wi}"] + [f"kb{j} * {s}" for j, s in enumerate(c.wsp)])
    for i, row in enumerate(rows):
        cond, off = row.at(c, kpos_a)
        L.append(f"    if (m0 + lm + {i * ts} < {M} && ka < {K} && {cond}) "
                 f"As[ln][lm + {i * ts}] = {load('in0', n.dtype, f'(xg + {off} + ca * {c.xc})')};")
        L.append(f"    else As[ln][lm + {i * ts}] = {zero};")
    for j in range(rn):
        L.append(f"    {{ const int nn = n0 + ln + {j * ts};")
        L.append(f"      if (nn < {N} && kb < {K}) Bs[lm][ln + {j * ts}] = "
                 f"{load('in1', n.dtype, f'(wg + nn * {c.wo} + {wk})')};")
        L.append(f"      else Bs[lm][ln + {j * ts}] = {zero}; }}")
    L.append("    barrier(CLK_LOCAL_MEM_FENCE);")
    L.append(f"    for (int kk = 0; kk < {tk}; kk++) {{")
    L += [f"      const {act} a{i} = As[kk][lm + {i * ts}];" for i in range(rm)]
    L += [f"      const {act} b{j} = Bs[kk][ln + {j * ts}];" for j in range(rn)]
    for i in range(rm):
        for j in range(rn):
            prod = combine("prod", n.dtype, f"a{i}", f"b{j}")
            L.append(f"      c{i}_{j} = {combine('sum', n.dtype, f'c{i}_{j}', prod)};")
    L += ["    }", "    barrier(CLK_LOCAL_MEM_FENCE);", "  }"]
    for i in range(rm):
        L.append(f"  if (m0 + lm + {i * ts} < {M}) {{")
        for j in range(rn):
            col = f"n0 + ln + {j * ts}"
            off = f"po{i} + (g * {c.og} + {col}) * {c.of}"
            L.append(f"    if ({col} < {N}) {{ {_put(epi, n.dtype, off, f'c{i}_{j}')} }}")
        L.append("  }")
    body = "\n".join(L)
    sig, pre, out_t, inputs = _kernel_parts(n, epi)
    attr = f"__attribute__((reqd_work_group_size({ts}, {ts}, 1))) "

    def text(name: str) -> str:
        return pre.replace("KERNEL", name) + f"__kernel {attr}void {name}({sig}) {{\n{body}\n}}"

    gs = (-(-N // tn) * ts, -(-M // tm) * ts, c.groups)
    return _finish(text, _what(n), r, [("out", 0, out_t)], inputs, global_size=gs, local_size=(ts, ts, 1))


__all__ = ["CONV_DTYPES", "ConvDims", "conv_kernel", "conv_kernel_cpu"]
