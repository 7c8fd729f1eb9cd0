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

* ``conv_kernel_cpu`` (CPU devices such as PoCL): each work-item computes MR rows x NR
  output features in vector accumulators (vectors along the output features, loaded
  whole where the kernel's output-feature dim is contiguous, HWIO, else gathered), for
  each window position a branch-free inner loop over the input features when all its
  rows read inside the input, a masked one otherwise.
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
from dataclasses import dataclass

from axle.ir.dtypes import DType
from axle.ir.module import Node
from axle.lowering.index import row_major_strides

from .dots import _ACC, Epilogue, _cpu_kernel, _kernel_parts, _lanes, _Ops, _put, column_panels
from .emitter import Emitter
from .kernels import DeviceInfo, Kernel, _finish
from .render import STORAGE, identity
from .values import Renderer, acc_dtype, combine, load, reg_type

#: the dtypes the convolution kernels compute (those of the tiled dots); the others get
#: the core's decomposition (backend.py's capability predicate)
CONV_DTYPES = frozenset(_ACC)


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
        conds, offs = [], [f"xb{self.tag}"]
        for j, dj in enumerate(self.d):
            t = f"({dj} + {kpos[j]} * {c.rhs_dil[j]})" if c.rhs_dil[j] != 1 else f"({dj} + {kpos[j]})"
            ld, n = c.lhs_dil[j], c.in_sp[j]
            if ld == 1:
                conds.append(f"(uint){t} < {n}u")
                offs.append(f"{t} * {c.xsp[j]}")
            else:
                conds += [f"{t} >= 0", f"{t} % {ld} == 0", f"{t} < {(n - 1) * ld + 1}"]
                offs.append(f"({t} / {ld}) * {c.xsp[j]}")
        return (" && ".join(conds) or "1"), " + ".join(offs)


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
    M, V = c.rows, c.og
    mr = max(1, min(6 if wide else 4, M))
    nv = max(0, min(4 if wide else 2, V // w))
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
