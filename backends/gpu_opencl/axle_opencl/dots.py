"""dot_general kernels, register-tiled: every work-item keeps a block of outputs in
registers, so each operand value it loads feeds several multiply-adds.

Operands are viewed as batched matrices through strides: batch, free and contracting
dimension groups (each possibly several non-adjacent dims) are flattened, so transposed
operands and batch dims in any position need no copies.

* ``dot_kernel`` (GPUs, and any layout elsewhere): work-groups of TS x TS work-items
  stage TSK-deep slabs of both operands in ``__local`` memory; each work-item computes
  RM x RN outputs strided by TS (so neighbouring work-items touch neighbouring
  addresses), reading RM + RN local values per RM x RN multiply-adds.
* ``dot_kernel_cpu`` (CPU devices such as PoCL, where local memory and barriers are
  emulated and slow): each work-item computes MR rows x NR columns with vector
  accumulators. With enough rows (PACKED_MIN_ROWS) and at least one vector of columns,
  *packed panels* (any layout): each work-group packs a KC x NR slab of the rhs into
  ``__local`` memory (contiguous, zero-padded, free of the power-of-two row strides that
  alias rows onto one set of cache lines) and runs MR x NR tiles of many rows over it.
  Otherwise one of two micro-kernels without local memory, picked from the layout:
  *rows x vectors* when the rhs free dims are contiguous (per k: NV vector loads of a
  rhs row, MR scalars of the lhs broadcast, MR x NV fused multiply-adds), and
  *dot products* when both operands are contiguous along k but the rhs free dims are
  not (``x @ w.T``, matrix-vector): MR x NC vector accumulators over k, summed
  horizontally once at the end.

Integer dots accumulate in the unsigned twin type (wrapping, as the interpreter), f16
dots load halves into f32 registers and round once when storing.

An ``output`` fusion (a dot and its elementwise epilogue, docs/ir.md "Fusions") uses the
same kernels: each accumulator, still in registers, is passed with its flat output index
to ``<kernel>_epi`` (:class:`Epilogue`, the fused computation rendered by the shared value
renderer with the dot's element given), which computes the epilogue and stores it; the
dot's value itself is never stored."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from axle.ir.dotdims import DotDims
from axle.ir.dtypes import DType
from axle.ir.module import Computation, Node
from axle.ir.types import TensorType
from axle.lowering.index import row_major_strides

from .emitter import Emitter, Idx
from .kernels import DeviceInfo, Kernel, _finish, _signature
from .render import REG, STORAGE, UNSIGNED, identity, round_half
from .values import Renderer, acc_dtype, combine, load, reg_type, store


def _group_offset(g: str, dims: Sequence[int], shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """Offset of flattened index ``g`` over ``dims`` (row-major among themselves)."""
    if not dims:
        return "0"
    g = g if g.isidentifier() else f"({g})"
    sizes = [shape[d] for d in dims]
    terms = []
    for k in range(len(dims) - 1, -1, -1):
        inner = math.prod(sizes[k + 1:])
        c = f"({g} / {inner})" if inner > 1 else g
        if k > 0:
            c = f"({c} % {sizes[k]})"
        terms.append(f"{c} * {strides[dims[k]]}")
    return "(" + " + ".join(terms) + ")"


def _trailing(dims: Sequence[int], rank: int) -> bool:
    """Whether ``dims`` are the trailing dims in order: their flattened index is the offset."""
    return tuple(dims) == tuple(range(rank - len(dims), rank))


def _what(n: Node) -> str:
    lhs, rhs = n.operands
    return f"dot {lhs.type} x {rhs.type} -> {n.type}" + (f" (at {n.loc})" if n.loc else "")


class Epilogue:
    """An output fusion's epilogue as an OpenCL function ``KERNEL_epi(out0, e<i>..., f, v)``:
    output element ``f`` (flat) from the dot's accumulator ``v`` there, computed by the
    shared value renderer (other operands read at the same index or through broadcasts)
    and stored. The kernel passes every parameter of the fused computation as ``e<i>``
    after its two operands, then the renderer's constants."""

    def __init__(self, comp: Computation, dot: Node) -> None:
        out = comp.root
        self.out = out
        em = Emitter(1)
        r = Renderer(em, {p.attr["index"]: f"e{p.attr['index']}" for p in comp.parameters})
        idx = Idx(out.shape, "f")
        em.coords(idx)  # the index by coordinates from here on: the key the readers look up
        dt = dot.dtype
        v = em.tmp("float", round_half("v")) if dt is DType.FLOAT16 else (
            f"(({REG[dt]})v)" if dt.is_int else "v")
        em.remember((dot.uid, 1, idx.key), v)
        em.line(store("out0", out.dtype, "f", r.value(out, idx)))
        self.renderer = r
        self.params = [(f"e{p.attr['index']}", p.dtype) for p in comp.parameters]
        self.inputs: list[tuple[str, object]] = [("param", p.attr["index"]) for p in comp.parameters]
        self.inputs += [("const", a) for _, a in r.consts]
        acc = _ACC.get(dt, reg_type(acc_dtype(dt)))
        sig = _signature([("out0", out.tensor_type)], self.params, r.consts, f"const int f, const {acc} v")
        self.source = "void KERNEL_epi(" + sig + ") {\n" + "\n".join(em.lines) + "\n}\n"
        self.args = ", ".join(["out0", *(n for n, _ in self.params), *(n for n, _ in r.consts)])

    def call(self, off: str, value: str) -> str:
        return f"KERNEL_epi({self.args}, {off}, {value});"


def _put(epi: Epilogue | None, dt: DType, off: str, value: str) -> str:
    """Stores dot element ``off`` of out0 (flat), or finishes it with the epilogue."""
    return store("out0", dt, off, value) if epi is None else epi.call(off, value)


def _kernel_parts(n: Node, epi: Epilogue | None) -> tuple[str, str, TensorType, list[tuple[str, object]]]:
    """(signature, text before the kernel, output type, inputs) of a dot kernel."""
    lhs, rhs = n.operands
    ins = [("in0", lhs.dtype), ("in1", rhs.dtype)]
    inputs: list[tuple[str, object]] = [("param", 0), ("param", 1)]
    if epi is None:
        return _signature([("out0", n.tensor_type)], ins, [], ""), "", n.tensor_type, inputs
    sig = _signature([("out0", epi.out.tensor_type)], ins + epi.params, epi.renderer.consts, "")
    return sig, epi.source, epi.out.tensor_type, inputs + epi.inputs


# ------------------------------------------------------------------ local-memory tiles


def dot_kernel(n: Node, dev: DeviceInfo, epi: Epilogue | None = None) -> Kernel:
    """Register-tiled batched matmul through local memory (any layout, every dtype)."""
    lhs, rhs = n.operands
    d = DotDims.of(n)
    ts = 16 if dev.max_work_group >= 256 else (8 if dev.max_work_group >= 64 else 4)
    rm = rn = 4
    tm, tn, tk = ts * rm, ts * rn, ts
    ls, rs = row_major_strides(lhs.shape), row_major_strides(rhs.shape)
    adt = acc_dtype(n.dtype)
    act = reg_type(adt)
    r = Renderer(Emitter(1), {0: "in0", 1: "in1"})
    r.uses_fp64 = n.dtype is DType.FLOAT64 or (epi is not None and epi.renderer.uses_fp64)
    la = load("in0", lhs.dtype, "(lb_off + m_off + ka_off)")
    lbv = load("in1", rhs.dtype, "(rb_off + n_off + kb_off)")
    zero = identity("sum", adt)
    lines = [
        "  const int ln = (int)get_local_id(0), lm = (int)get_local_id(1), bb = (int)get_global_id(2);",
        f"  const int n0 = (int)get_group_id(0) * {tn}, m0 = (int)get_group_id(1) * {tm};",
        f"  __local {act} As[{tk}][{tm + 1}];",
        f"  __local {act} Bs[{tk}][{tn + 1}];",
        f"  const int lb_off = {_group_offset('bb', d.lhs_batch, lhs.shape, ls)}, "
        f"rb_off = {_group_offset('bb', d.rhs_batch, rhs.shape, rs)};",
    ]
    lines += [f"  {act} c{i}_{j} = {zero};" for i in range(rm) for j in range(rn)]
    lines.append(f"  for (int k0 = 0; k0 < {d.k}; k0 += {tk}) {{")
    # cooperative loads: each work-item stages rm lhs and rn rhs values (zero outside)
    lines.append("    const int ka = k0 + ln, kb = k0 + lm;")
    lines.append(f"    const int ka_off = {_group_offset('ka', d.lhs_contracting, lhs.shape, ls)}, "
                 f"kb_off = {_group_offset('kb', d.rhs_contracting, rhs.shape, rs)};")
    for i in range(rm):
        lines.append(f"    {{ const int m = m0 + lm + {i * ts};")
        lines.append(f"      if (m < {d.m} && ka < {d.k}) {{ const int m_off = "
                     f"{_group_offset('m', d.lhs_free, lhs.shape, ls)}; As[ln][lm + {i * ts}] = {la}; }}")
        lines.append(f"      else As[ln][lm + {i * ts}] = {zero}; }}")
    for j in range(rn):
        lines.append(f"    {{ const int nn = n0 + ln + {j * ts};")
        lines.append(f"      if (nn < {d.n} && kb < {d.k}) {{ const int n_off = "
                     f"{_group_offset('nn', d.rhs_free, rhs.shape, rs)}; Bs[lm][ln + {j * ts}] = {lbv}; }}")
        lines.append(f"      else Bs[lm][ln + {j * ts}] = {zero}; }}")
    lines.append("    barrier(CLK_LOCAL_MEM_FENCE);")
    lines.append(f"    for (int kk = 0; kk < {tk}; kk++) {{")
    lines += [f"      const {act} a{i} = As[kk][lm + {i * ts}];" for i in range(rm)]
    lines += [f"      const {act} b{j} = Bs[kk][ln + {j * ts}];" for j in range(rn)]
    for i in range(rm):
        for j in range(rn):
            prod = combine("prod", n.dtype, f"a{i}", f"b{j}")
            lines.append(f"      c{i}_{j} = {combine('sum', n.dtype, f'c{i}_{j}', prod)};")
    lines += ["    }", "    barrier(CLK_LOCAL_MEM_FENCE);", "  }"]
    for i in range(rm):
        lines.append(f"  {{ const int m = m0 + lm + {i * ts};")
        lines.append(f"    if (m < {d.m}) {{")
        for j in range(rn):
            off = f"(bb * {d.m} + m) * {d.n} + n0 + ln + {j * ts}"
            lines.append(f"      if (n0 + ln + {j * ts} < {d.n}) {{ {_put(epi, n.dtype, off, f'c{i}_{j}')} }}")
        lines.append("    }")
        lines.append("  }")
    body = "\n".join(lines)
    sig, pre, out_t, inputs = _kernel_parts(n, epi)
    attr = f"__attribute__((reqd_work_group_size({ts}, {ts}, 1))) "

    def text(name: str) -> str:
        return pre.replace("KERNEL", name) + f"__kernel {attr}void {name}({sig}) {{\n{body}\n}}"

    gs = (-(-d.n // tn) * ts, -(-d.m // tm) * ts, d.batch)
    return _finish(text, _what(n), r, [("out", 0, out_t)], inputs, global_size=gs, local_size=(ts, ts, 1))


# ------------------------------------------------------------------------ CPU devices

#: register type of a dot's accumulators: unsigned for integers (wrapping sums)
#: the dtypes the tiled dot kernels compute; a dot of another dtype (the narrow/unsigned
#: integers, bfloat16) is a map kernel whose elements each loop over the contraction
DOT_DTYPES = frozenset({DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64})
_ACC = {DType.FLOAT16: "float", DType.FLOAT32: "float", DType.FLOAT64: "double",
        DType.INT32: UNSIGNED[DType.INT32], DType.INT64: UNSIGNED[DType.INT64]}

#: bytes of one packed rhs slab (KC x NR in __local memory): a quarter of a Zen/Skylake
#: L2, so the slab and the lhs rows streaming past it stay cached while a group's row
#: tiles reuse it
PANEL_BYTES = 256 * 1024
#: fewer lhs rows than this: packing costs a large part of the tiles it feeds (the
#: unpacked micro-kernels stream the rhs while they compute)
PACKED_MIN_ROWS = 32
#: register tiles (MR rows each) per work-group: a group packs its slab once for all of
#: them, and at least GROUPS_PER_UNIT groups per compute unit keep the cores balanced
MAX_TILES_PER_GROUP = 256
GROUPS_PER_UNIT = 4


@dataclass(frozen=True)
class _Ops:
    """How one dtype is loaded, multiplied-added and stored by the CPU micro-kernels."""

    dt: DType
    w: int

    @property
    def acc(self) -> str:
        return _ACC[self.dt]

    def vt(self, w: int | None = None) -> str:
        return f"{self.acc}{w or self.w}"

    def vload(self, ptr: str, w: int | None = None) -> str:
        w = w or self.w
        if self.dt is DType.FLOAT16:
            return f"vload_half{w}(0, {ptr})"
        if self.dt.is_int:
            return f"as_{self.acc}{w}(vload{w}(0, {ptr}))"
        return f"vload{w}(0, {ptr})"

    def sload(self, ptr: str, off: str) -> str:
        if self.dt is DType.FLOAT16:
            return f"vload_half({off}, {ptr})"
        if self.dt.is_int:
            return f"(({self.acc}){ptr}[{off}])"
        return f"{ptr}[{off}]"

    def vstore(self, value: str, ptr: str) -> str:
        if self.dt is DType.FLOAT16:
            return f"vstore_half{self.w}_rte({value}, 0, {ptr});"
        if self.dt.is_int:
            return f"vstore{self.w}(as_{REG[self.dt]}{self.w}({value}), 0, {ptr});"
        return f"vstore{self.w}({value}, 0, {ptr});"

    def sstore(self, value: str, ptr: str, off: str) -> str:
        if self.dt is DType.FLOAT16:
            return f"vstore_half_rte({value}, {off}, {ptr});"
        if self.dt.is_int:
            return f"{ptr}[{off}] = ({REG[self.dt]}){value};"
        return f"{ptr}[{off}] = {value};"

    def mac(self, acc: str, a: str, b: str) -> str:
        """acc += a * b (fused for floats; wrapping unsigned for integers)."""
        if self.dt.is_float:
            return f"{acc} = fma({a}, {b}, {acc});"
        return f"{acc} += {a} * {b};"


_LANES = "0123456789abcdef"


def _lanes(dt: DType, dev: DeviceInfo) -> int:
    return dev.double_lanes if dt in (DType.FLOAT64, DType.INT64) else dev.float_lanes


@dataclass(frozen=True)
class _Side:
    """One operand as the CPU micro-kernels see it: a kernel argument, its batch,
    contracting and free dim groups, and the flattened free size."""

    arg: str
    node: Node
    batch: Sequence[int]
    contracting: Sequence[int]
    free: Sequence[int]
    size: int

    def offset(self, g: str, dims: Sequence[int]) -> str:
        return _group_offset(g, dims, self.node.shape, row_major_strides(self.node.shape))

    def trailing(self, dims: Sequence[int]) -> bool:
        return _trailing(dims, len(self.node.shape))

    @property
    def ptr(self) -> str:
        return f"__global const {STORAGE[self.node.dtype]}* restrict"


def dot_kernel_cpu(n: Node, dev: DeviceInfo, epi: Epilogue | None = None) -> Kernel | None:
    """CPU devices: register-blocked work-items without local memory; None where the
    layout suits no micro-kernel (the local-memory kernel is used then)."""
    if n.dtype not in _ACC:
        return None
    d = DotDims.of(n)
    lhs, rhs = n.operands
    x = _Side("in0", lhs, d.lhs_batch, d.lhs_contracting, d.lhs_free, d.m)
    y = _Side("in1", rhs, d.rhs_batch, d.rhs_contracting, d.rhs_free, d.n)
    w = _lanes(n.dtype, dev)
    k_contig = x.trailing(x.contracting) and y.trailing(y.contracting)
    if d.n >= w and d.m >= PACKED_MIN_ROWS and d.k:
        k = _packed(n, d, x, y, w, dev, epi)
        if k is not None:
            return k
    if y.trailing(y.free) and (d.n >= w or not k_contig or d.k < w):
        return _rows_times_vectors(n, d, x, y, w, transposed=False, epi=epi)
    if k_contig:
        return _dot_products(n, d, x, y, w, epi)
    if x.trailing(x.free):  # a.T @ b.T: vectors along the lhs free dims, stored transposed
        return _rows_times_vectors(n, d, y, x, w, transposed=True, epi=epi)
    return None


def _common(n: Node, d: DotDims, x: _Side, y: _Side, epi: Epilogue | None) -> list[str]:
    c = (f"  __global {STORAGE[n.dtype]}* restrict C = out0 + bb * {d.m * d.n};" if epi is None
         else f"  const int cb = bb * {d.m * d.n};")  # the epilogue stores by flat index
    return [
        "  const int bb = (int)get_global_id(2);",
        f"  {x.ptr} X = {x.arg} + {x.offset('bb', x.batch)};",
        f"  {y.ptr} Y = {y.arg} + {y.offset('bb', y.batch)};",
        c,
    ]


def _cput(epi: Epilogue | None, ops: _Ops, value: str, off: str) -> str:
    """Stores element ``off`` of this batch's C, or finishes it with the epilogue."""
    return ops.sstore(value, "C", off) if epi is None else epi.call(f"cb + {off}", value)


def _rows_times_vectors(n: Node, d: DotDims, x: _Side, y: _Side, w: int, transposed: bool,
                        epi: Epilogue | None = None) -> Kernel:
    """Each work-item: MR rows of ``x`` x NV vectors of W columns of ``y`` (y's free dims
    contiguous). Per k, NV vector loads of a row of y, MR scalars of x splatted, MR x NV
    multiply-adds; columns past the last full panel in single vectors, then scalars.
    ``transposed``: x is the rhs and y the lhs, so a vector of results is a column of
    the output, stored lane by lane."""
    ops = _Ops(n.dtype, w)
    R, V = x.size, y.size
    wide = w * (4 if n.dtype is DType.FLOAT16 else n.dtype.itemsize) >= 64  # AVX-512: 32 vector registers
    mr = min(6, R)
    nv = max(0, min(4 if wide else 2, V // w))
    nr = nv * w if nv else V
    kx, ky = x.offset("k", x.contracting), y.offset("k", y.contracting)
    L = _common(n, d, x, y, epi)
    L.append(f"  const int r0 = (int)get_global_id(0) * {mr}, c0 = (int)get_global_id(1) * {nr};")
    for i in range(mr):
        L.append(f"  {x.ptr} x{i} = X + {x.offset(f'min(r0 + {i}, {R - 1})', x.free)};")

    def out(row: str, col: str) -> str:
        return f"({col}) * {R} + {row}" if transposed else f"({row}) * {V} + {col}"

    def vstore(v: str, row: str, col: str) -> str:
        if epi is not None:  # lanes through a private array: one epilogue call site, not w
            return (f"{{ {ops.acc} e_[{w}]; vstore{w}({v}, 0, e_); for (int l_ = 0; l_ < {w}; l_++) "
                    f"{_cput(epi, ops, 'e_[l_]', out(row, f'{col} + l_'))} }}")
        if transposed:
            return " ".join(ops.sstore(f"{v}.s{_LANES[k]}", "C", out(row, f"{col} + {k}")) for k in range(w))
        return ops.vstore(v, f"C + {out(row, col)}")

    def block(cols: list[str], vec: bool, indent: str) -> None:
        """MR x len(cols) accumulators over k; ``cols`` are column offsets (C exprs)."""
        t = ops.vt() if vec else ops.acc
        for i in range(mr):
            for j in range(len(cols)):
                L.append(f"{indent}{t} c{i}_{j} = ({t})(0);")
        L.append(f"{indent}for (int k = 0; k < {d.k}; k++) {{")
        L.append(f"{indent}  const int kx = {kx}, ky = {ky};")
        for j, c in enumerate(cols):
            L.append(f"{indent}  const {t} y{j} = " +
                     (ops.vload(f"Y + ky + {c}") if vec else ops.sload("Y", f"ky + {c}")) + ";")
        for i in range(mr):
            L.append(f"{indent}  const {t} s{i} = ({t})({ops.sload(f'x{i}', 'kx')});")
            for j in range(len(cols)):
                L.append(f"{indent}  {ops.mac(f'c{i}_{j}', f's{i}', f'y{j}')}")
        L.append(f"{indent}}}")
        for i in range(mr):
            cond = f"if (r0 + {i} < {R}) " if R % mr else ""
            row = f"r0 + {i}"
            stores = " ".join(vstore(f"c{i}_{j}", row, c) if vec else _cput(epi, ops, f"c{i}_{j}", out(row, c))
                              for j, c in enumerate(cols))
            L.append(f"{indent}{cond}{{ {stores} }}")

    column_panels(L, V, w, nv, block)
    gs = (-(-R // mr), -(-V // nr), d.batch)
    return _cpu_kernel(n, "\n".join(L), gs, epi)


def column_panels(L: list[str], V: int, w: int, nv: int, block: Callable[[list[str], bool, str], None]) -> None:
    """The column walk of a CPU micro-kernel over ``V`` columns from ``c0``: a full panel
    of ``nv`` vectors of ``w`` lanes (``block(cols, vector, indent)`` renders MR rows x
    ``cols``), then the columns past the last full panel in single vectors, then scalars."""
    nr = nv * w if nv else V
    rest = V % nr if nv else V
    if nv:
        L.append(f"  if (c0 + {nr} <= {V}) {{")
        block([f"c0 + {j * w}" for j in range(nv)], True, "    ")
        L.append("    return;")
        L.append("  }")
    if rest:
        L.append("  int cc = c0;")
        if rest >= w:
            L.append(f"  for (; cc + {w} <= {V}; cc += {w}) {{")
            block(["cc"], True, "    ")
            L.append("  }")
        if rest % w:
            L.append(f"  for (; cc < {V}; cc++) {{")
            block(["cc"], False, "    ")
            L.append("  }")


def _dot_products(n: Node, d: DotDims, x: _Side, y: _Side, w: int, epi: Epilogue | None = None) -> Kernel:
    """Each work-item: MR rows x NC columns, k walked in vectors (both operands
    contiguous along k), MR x NC vector accumulators summed horizontally at the end,
    then a scalar k tail."""
    ops = _Ops(n.dtype, w)
    mr, nc = min(4, d.m), min(4, d.n)
    vt, t = ops.vt(), ops.acc
    L = _common(n, d, x, y, epi)
    L.append(f"  const int m0 = (int)get_global_id(0) * {mr}, n0 = (int)get_global_id(1) * {nc};")
    L += [f"  {x.ptr} a{i} = X + {x.offset(f'min(m0 + {i}, {d.m - 1})', x.free)};" for i in range(mr)]
    L += [f"  {y.ptr} b{j} = Y + {y.offset(f'min(n0 + {j}, {d.n - 1})', y.free)};" for j in range(nc)]
    L += [f"  {vt} v{i}_{j} = ({vt})(0);" for i in range(mr) for j in range(nc)]
    L.append("  int k = 0;")
    L.append(f"  for (; k + {w} <= {d.k}; k += {w}) {{")
    L += [f"    const {vt} x{i} = {ops.vload(f'a{i} + k')};" for i in range(mr)]
    L += [f"    const {vt} y{j} = {ops.vload(f'b{j} + k')};" for j in range(nc)]
    L += [f"    {ops.mac(f'v{i}_{j}', f'x{i}', f'y{j}')}" for i in range(mr) for j in range(nc)]
    L.append("  }")
    for i in range(mr):
        for j in range(nc):
            L.append(f"  {t} c{i}_{j} = {_lane_sum(L, ops.acc, f'v{i}_{j}', w)};")
    if d.k % w:
        L.append(f"  for (; k < {d.k}; k++) {{")
        L += [f"    const {t} x{i} = {ops.sload(f'a{i}', 'k')};" for i in range(mr)]
        L += [f"    const {t} y{j} = {ops.sload(f'b{j}', 'k')};" for j in range(nc)]
        L += [f"    {ops.mac(f'c{i}_{j}', f'x{i}', f'y{j}')}" for i in range(mr) for j in range(nc)]
        L.append("  }")
    for i in range(mr):
        for j in range(nc):
            cond = [c for c, partial in ((f"m0 + {i} < {d.m}", d.m % mr), (f"n0 + {j} < {d.n}", d.n % nc)) if partial]
            st = _cput(epi, ops, f"c{i}_{j}", f"(m0 + {i}) * {d.n} + n0 + {j}")
            L.append(f"  if ({' && '.join(cond)}) {st}" if cond else f"  {st}")
    gs = (-(-d.m // mr), -(-d.n // nc), d.batch)
    return _cpu_kernel(n, "\n".join(L), gs, epi)


def _lane_sum(L: list[str], acc: str, v: str, w: int) -> str:
    """The sum of a vector's lanes: halves added as vectors where w is a power of two."""
    if w & (w - 1):
        return " + ".join(f"{v}.s{_LANES[k]}" for k in range(w))
    cur = v
    while w > 1:
        w //= 2
        nxt = f"{v}_h{w}"
        L.append(f"  const {acc}{w if w > 1 else ''} {nxt} = {cur}.lo + {cur}.hi;")
        cur = nxt
    return cur


def _cpu_kernel(n: Node, body: str, gs: tuple[int, int, int], epi: Epilogue | None = None,
                what: str | None = None) -> Kernel:
    r = Renderer(Emitter(1), {0: "in0", 1: "in1"})
    r.uses_fp64 = n.dtype is DType.FLOAT64 or (epi is not None and epi.renderer.uses_fp64)
    sig, pre, out_t, inputs = _kernel_parts(n, epi)

    def text(name: str) -> str:
        return pre.replace("KERNEL", name) + f"__kernel void {name}({sig}) {{\n{body}\n}}"

    # local size 1: PoCL runs a work-group on one core, so every block is its own group
    return _finish(text, what or _what(n), r, [("out", 0, out_t)], inputs, global_size=gs, local_size=(1, 1, 1))


# ------------------------------------------------------------- CPU: packed rhs panels


def _packed(n: Node, d: DotDims, x: _Side, y: _Side, w: int, dev: DeviceInfo,
            epi: Epilogue | None = None) -> Kernel | None:
    """Each work-group (one work-item: PoCL runs it as one loop on one core) owns NR =
    NV x W columns of y and up to MC rows of x. Per KC-deep slab of k it first packs y's
    slab into ``__local`` memory, contiguous in the order the micro-kernel reads it, zero
    past the last column (whatever y's layout: transposed, batched, strided; and no
    power-of-two row stride left to alias rows onto the same cache sets), then runs MR x
    NR register tiles down its rows over the packed slab: per k, NV aligned vector loads,
    MR lhs scalars splatted, MR x NV multiply-adds. Partial sums of a k deeper than one
    slab wait in ``__local`` accumulators; the last slab stores (or runs the epilogue).
    None where the device's local memory holds too little for a slab and one tile's sums."""
    ops = _Ops(n.dtype, w)
    R, V, K = x.size, y.size, d.k
    wide = w * (4 if n.dtype is DType.FLOAT16 else n.dtype.itemsize) >= 64  # AVX-512: 32 vector registers
    mr = min(6, R)
    nv = max(1, min(4 if wide else 2, V // w))
    nr = nv * w
    esize = 8 if ops.acc in ("double", "ulong") else 4
    budget = min(PANEL_BYTES, dev.local_mem // 2)
    kc = max(1, min(K, budget // (nr * esize)))
    tiles, panels = -(-R // mr), -(-V // nr)
    # row tiles per group: as many as keep GROUPS_PER_UNIT groups per compute unit (each
    # group packs its slab once for all its rows), at most MAX_TILES_PER_GROUP
    per = max(1, min(MAX_TILES_PER_GROUP, tiles * panels * d.batch // (GROUPS_PER_UNIT * dev.compute_units)))
    slabs = -(-K // kc)
    if slabs > 1:  # the partial sums of every row of the group share the local memory left
        per = min(per, (dev.local_mem - kc * nr * esize) // (mr * nr * esize))
    if per < 1 or kc * nr * esize > dev.local_mem:
        return None  # a device with too little local memory: the unpacked micro-kernels
    per = -(-tiles // -(-tiles // per))  # the same number of tiles in every group of a panel
    mc = per * mr
    vt, t = ops.vt(), ops.acc
    L = [f"  // cpu strategy: packed rhs panels of {kc} x {nr}, {mr} x {nr} register tiles, {mc} rows a group",
         *_common(n, d, x, y, epi)]
    L.append(f"  const int rs = (int)get_global_id(0) * {mc}, c0 = (int)get_global_id(1) * {nr};")
    L.append(f"  __local {vt} P[{kc * nv}];")
    L.append(f"  __local {t}* Ps = (__local {t}*)P;")
    if slabs > 1:
        L.append(f"  __local {vt} S[{mc * nv}];")
    L.append(f"  for (int kc = 0; kc < {K}; kc += {kc}) {{")
    L.append(f"    const int kn = min({kc}, {K} - kc);")
    _pack(L, d, y, ops, nv, nr, V)
    L.append(f"    for (int r0 = rs; r0 < min(rs + {mc}, {R}); r0 += {mr}) {{")
    for i in range(mr):
        L.append(f"      {x.ptr} x{i} = X + {x.offset(f'min(r0 + {i}, {R - 1})', x.free)};")
    for i in range(mr):
        for j in range(nv):
            init = f"({vt})(0)" if slabs == 1 else f"kc ? S[(r0 - rs + {i}) * {nv} + {j}] : ({vt})(0)"
            L.append(f"      {vt} c{i}_{j} = {init};")
    L.append("      for (int k = 0; k < kn; k++) {")
    L.append(f"        const int kx = {x.offset('kc + k', x.contracting)};")
    for j in range(nv):
        L.append(f"        const {vt} y{j} = P[k * {nv} + {j}];")
    for i in range(mr):
        L.append(f"        const {vt} s{i} = ({vt})({ops.sload(f'x{i}', 'kx')});")
        for j in range(nv):
            L.append(f"        {ops.mac(f'c{i}_{j}', f's{i}', f'y{j}')}")
    L.append("      }")
    if slabs > 1:
        L.append(f"      if (kc + {kc} < {K}) {{")
        L += [f"        S[(r0 - rs + {i}) * {nv} + {j}] = c{i}_{j};" for i in range(mr) for j in range(nv)]
        L.append("        continue;")
        L.append("      }")
    for i in range(mr):
        cond = f"if (r0 + {i} < {R}) " if R % mr else ""
        stores = " ".join(_panel_store(ops, epi, f"c{i}_{j}", f"r0 + {i}", j, w, V, nr) for j in range(nv))
        L.append(f"      {cond}{{ {stores} }}")
    L.append("    }")
    L.append("  }")
    gs = (-(-tiles // per), panels, d.batch)
    return _cpu_kernel(n, "\n".join(L), gs, epi, what=_what(n) + f" [cpu: packed {mr}x{nr} tiles]")


def _pack(L: list[str], d: DotDims, y: _Side, ops: _Ops, nv: int, nr: int, V: int) -> None:
    """y[kc : kc + kn, c0 : c0 + NR] into P (k-major, NR columns a row, zero past V): whole
    vectors along y's rows where its free dims are contiguous, else element by element
    with k innermost (the order y is stored in then)."""
    w, t = ops.w, ops.acc
    if y.trailing(y.free):
        L.append("    for (int k = 0; k < kn; k++) {")
        L.append(f"      {y.ptr} yr = Y + {y.offset('kc + k', y.contracting)} + c0;")
        vectors = " ".join(f"P[k * {nv} + {j}] = {ops.vload(f'yr + {j * w}')};" for j in range(nv))
        if V % nr == 0:
            L.append(f"      {vectors}")
        else:  # the last panel, partial: element by element
            L.append(f"      if (c0 + {nr} <= {V}) {{ {vectors} }}")
            L.append(f"      else for (int j = 0; j < {nr}; j++) Ps[k * {nr} + j] = "
                     f"c0 + j < {V} ? {ops.sload('yr', 'j')} : ({t})(0);")
        L.append("    }")
        return
    L.append(f"    for (int j = 0; j < {nr}; j++) {{")
    L.append(f"      if (c0 + j >= {V}) {{ for (int k = 0; k < kn; k++) Ps[k * {nr} + j] = ({t})(0); continue; }}")
    L.append(f"      {y.ptr} yc = Y + {y.offset('c0 + j', y.free)};")
    ky = y.offset("kc + k", y.contracting)
    L.append(f"      for (int k = 0; k < kn; k++) Ps[k * {nr} + j] = {ops.sload('yc', ky)};")
    L.append("    }")


def _panel_store(ops: _Ops, epi: Epilogue | None, v: str, row: str, j: int, w: int, V: int, nr: int) -> str:
    """Vector ``j`` of a row's panel: a vector store where the whole panel is inside the
    output (or lane by lane through the epilogue), else the lanes before column V."""
    col = f"c0 + {j * w}"
    base = f"({row}) * {V} + {col}"
    if epi is None and V % nr == 0:
        return ops.vstore(v, f"C + {base}")
    lanes = (f"{{ {ops.acc} e_[{w}]; vstore{w}({v}, 0, e_); for (int l_ = 0; l_ < {w}; l_++) "
             f"if ({col} + l_ < {V}) {_cput(epi, ops, 'e_[l_]', f'{base} + l_')} }}")
    if epi is None:
        return f"if ({col} + {w} <= {V}) {ops.vstore(v, f'C + {base}')} else {lanes}"
    return lanes


__all__ = ["DotDims", "Epilogue", "dot_kernel", "dot_kernel_cpu"]
