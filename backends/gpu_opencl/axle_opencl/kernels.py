"""Kernel builders: turn one fused computation (or one unfused op wrapped as one) into
OpenCL C kernels with their launch shapes.

* ``map`` kernels: one output element (loop fusions), or one row (row fusions, and
  reductions with enough outputs to fill the device), per iteration. On GPUs one
  work-item per element; on CPU devices each work-item walks a contiguous chunk, in
  ``floatN`` vectors where the fusion allows (PoCL's vectorizer gives up on
  grid-stride loops), with a scalar tail.
* ``group reduce`` kernels: input fusions with few outputs and long reductions; each
  work-group reduces its output's range in registers, then a tree in local memory (a
  reduction into too few outputs to fill the device arrives split in two launches by
  the kernel plan, axle.lowering.split).
* ``dot`` kernels: in ``dots.py``.

Sizes that a kernel only needs as loop bounds (``n``, ``chunk``) are arguments, so an
elementwise kernel's source, and its compiled program, serve every shape."""
from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from axle.errors import BackendError
from axle.ir.dtypes import DType
from axle.ir.module import Computation, Node
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.lowering import index as ix
from axle.lowering.c import used_helpers

from . import render
from .emitter import Emitter, Idx
from .render import CL, STORAGE, identity, program_source, round_16
from .values import (
    FAST_EXTREMA,
    MASK,
    Renderer,
    acc_dtype,
    combine,
    horizontal,
    load,
    reg_type,
    spill_plan,
    store,
    vector_ok,
)

INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class DeviceInfo:
    """What code generation needs to know about a device."""

    is_gpu: bool
    compute_units: int
    max_work_group: int
    local_mem: int
    fp64: bool
    float_lanes: int = 8
    double_lanes: int = 4

    @property
    def group_lanes(self) -> int:
        """Work-items in one work-group of a reduction kernel (PoCL runs a work-group on
        one core: a few lanes there, a full group on a GPU)."""
        if self.is_gpu:
            return 1 << min(8, int(math.log2(max(1, self.max_work_group))))
        return 4 if self.max_work_group >= 4 else 1

    @property
    def split_reductions(self) -> tuple[int, int]:
        """(workers, min_part) for the kernel plan's split reductions: a reduction into
        fewer outputs than the work-groups that keep every compute unit busy is launched
        in two, each part at least 2048 elements per work-item on a CPU device, 64 on a GPU
        (whose work-groups are many and short-lived: with 2048 the seed's 2^24-element sum
        ran 32 work-groups on an H100's 132 compute units, 0.80 ms against 0.27 with 128
        and 0.27 with 32)."""
        if self.is_gpu:
            return self.compute_units * 8, self.group_lanes * 64
        return self.compute_units * 4, self.group_lanes * 2048


@dataclass
class Kernel:
    """One kernel launch: its program source, argument layout and launch shape.

    ``inputs`` name where each buffer argument comes from: ("param", i) the unit's
    i-th operand, ("const", array) an array uploaded once at compile time. ``outputs``
    are ("out", k, type): the unit's k-th result."""

    name: str
    source: str
    what: str  # the op(s) it computes, for errors and profiles
    outputs: list[tuple[str, int, TensorType]]
    inputs: list[tuple[str, Any]]  # ("param", index) or ("const", array), as above
    scalars: list[int] = field(default_factory=list)
    global_size: tuple[int, ...] = (1,)
    local_size: tuple[int, ...] | None = None
    uses_fp64: bool = False
    body: str = ""
    #: the helper functions ``body`` calls (None: not known, the source is searched): a
    #: program of several kernels includes their union (runtime.build_many)
    helpers: tuple[str, ...] | None = None


def _finish(body_fn: Callable[[str], str], what: str, r: Renderer, outs: list[tuple[str, int, TensorType]],
            ins: list[tuple[str, object]], **kw: Any) -> Kernel:
    """Names the kernel after a hash of its source (identical sources share programs)."""
    body = body_fn("KERNEL")
    helpers = tuple(used_helpers(CL, body))
    src = program_source(body, r.uses_fp64, helpers)
    name = "axle_" + hashlib.sha1(src.encode()).hexdigest()[:12]
    return Kernel(name, src.replace("KERNEL", name), what, outs, ins, uses_fp64=r.uses_fp64,
                  body=body.replace("KERNEL", name), helpers=helpers, **kw)


def _signature(outs: list[tuple[str, TensorType]], params: list[tuple[str, DType]],
               consts: list[tuple[str, np.ndarray]], extra: str) -> str:
    args = [f"__global {STORAGE[t.dtype]}* restrict {n}" for n, t in outs]
    args += [f"__global const {STORAGE[dt]}* restrict {n}" for n, dt in params]
    args += [f"__global const {STORAGE[DType(_dt(a))]}* restrict {n}" for n, a in consts]
    return ", ".join(args + ([extra] if extra else []))


def _dt(a: np.ndarray) -> str:
    from axle.ir.dtypes import dtype

    return dtype(a.dtype).value


def describe(comp: Computation) -> str:
    ops = [n for n in comp.nodes if n.op is not Op.PARAMETER and n.op is not Op.TUPLE]
    names = ", ".join(dict.fromkeys(n.op.value for n in ops))
    locs = next((n.loc for n in ops if n.loc), None)
    return f"{names} -> {comp.root.type}" + (f" (at {locs})" if locs else "")


# ----------------------------------------------------------------------------- map


def map_kernel(comp: Computation, outputs: list[tuple[Node, int]], outer: tuple[int, ...], dev: DeviceInfo,
               pre: Sequence[Node] = ()) -> Kernel:
    """One iteration per element of ``outer``; outputs have shape ``outer`` or
    ``outer + tail`` (row kernels: ``pre`` are the per-row reductions, computed once
    per row before the tail loop writes the full-shape outputs)."""
    n_outer = math.prod(outer)
    tails = {n.shape[len(outer):] for n, _ in outputs if n.shape != outer}
    assert len(tails) <= 1, f"outputs {[n.shape for n, _ in outputs]} do not share a row shape"
    tail = tails.pop() if tails else ()
    if pre and dev.is_gpu and math.prod(pre[0].operands[0].shape[len(outer):]) >= GROUP_ROW_MIN:
        return group_row_kernel(comp, outputs, outer, dev, pre)
    out_dt = {n.dtype for n, _ in outputs}
    lanes = 0
    if not dev.is_gpu and not pre and not tail and len(out_dt) == 1:
        dt = next(iter(out_dt))
        w = dev.float_lanes if dt is DType.FLOAT32 else dev.double_lanes
        memo: dict[int, bool] = {}
        if n_outer >= 2 * w and all(vector_ok(n, outer, 0, dt, memo) for n, _ in outputs):
            lanes = w

    # Row kernels: the tail loop runs in floatN when its outputs allow.
    tail_lanes = 0
    full_outs = [n for n, _ in outputs if n.shape != outer]
    if tail and not dev.is_gpu and len({n.dtype for n in full_outs}) == 1:
        dt = full_outs[0].dtype
        w = dev.float_lanes if dt is DType.FLOAT32 else dev.double_lanes
        memo2: dict[int, bool] = {}
        if math.prod(tail) >= 2 * w and all(vector_ok(n, outer + tail, len(outer), dt, memo2) for n in full_outs):
            tail_lanes = w
    # Every per-row value (the reductions and what is computed from them alone) is
    # computed once per row, before the tail loop.
    if pre:
        pre = [n for n in comp.nodes if isinstance(n.type, TensorType) and n.shape == outer
               and n.op not in (Op.PARAMETER, Op.CONSTANT)]

    def body(em: Emitter, r: Renderer, i: str, w: int) -> None:
        idx = Idx(outer, i)
        r.spilled = set()
        if pre:
            r.row_home = (outer + tail, list(em.coords(idx)))
            for p in pre:
                r.value(p, idx)
        for k, (n, _) in enumerate(outputs):
            if n.shape == outer:
                em.line(store(f"out{k}", n.dtype, i, r.value(n, idx, w), w))
        if tail:
            t = math.prod(tail)
            j = em.fresh("j")
            oc = em.coords(idx) if outer else []
            em.line(f"int {j} = 0;")
            if tail_lanes:
                r.row = (outer, list(oc))
                em.open(f"for (; {j} + {tail_lanes} <= {t}; {j} += {tail_lanes})")
                vflat = em.tmp("int", f"{i} * {t} + {j}" if outer else j, "f")
                tail_loop(em, r, Idx(outer + tail, vflat), tail_lanes)
                em.close()
                r.row = None
            em.open(f"for (; {j} < {t}; {j}++)")
            tidx = Idx(tail, j)
            full_flat = em.tmp("int", f"{i} * {t} + {j}" if outer else j, "f")
            tail_loop(em, r, Idx(outer + tail, full_flat, list(oc) + list(em.coords(tidx))), 1)
            em.close()

    def tail_loop(em: Emitter, r: Renderer, fidx: Idx, w: int) -> None:
        """One step of the loop over a row writing the full-shape outputs; spilled
        values are loaded first (their buffer may be an output written here)."""
        r.home = fidx
        for uid, (node, _) in r.spill.items():
            if uid in r.spilled:
                r.value(node, fidx, w)
        for k, (n, _) in enumerate(outputs):
            if n.shape != outer:
                em.line(store(f"out{k}", n.dtype, em.flat(fidx), r.value(n, fidx, w), w))
        r.home = None

    params = {p.attr["index"]: f"in{p.attr['index']}" for p in comp.parameters}
    em = Emitter(2)
    r = Renderer(em, params)
    if not dev.is_gpu:
        r.vector_lanes = dev.float_lanes if any(isinstance(n.type, TensorType) and n.dtype is DType.FLOAT32
                                                for n in comp.nodes) else dev.double_lanes
        if pre and tail:
            r.spill = spill_plan(comp.nodes, [n for n in comp.nodes if n.op is Op.REDUCE and n.attr["axes"]],
                                 [(n, f"out{k}") for k, (n, _) in enumerate(outputs) if n.shape != outer],
                                 outer + tail)
    if dev.is_gpu:
        body(em, r, "i", 1)
        loop = "  const int i = (int)get_global_id(0);\n  if (i < n) {\n" + "\n".join(em.lines) + "\n  }"
    else:
        vec_lines: list[str] = []
        if lanes:
            em.open(f"for (; i + {lanes} <= end; i += {lanes})")
            body(em, r, "i", lanes)
            em.close()
            vec_lines, em.lines = em.lines, []
        em.depth = 2
        em.scopes = [{}]
        em.open("for (; i < end; i++)")
        body(em, r, "i", 1)
        em.close()
        lines = [ln[2:] for ln in vec_lines + em.lines]
        loop = ("  const int start = (int)get_global_id(0) * chunk;\n  const int end = min(start + chunk, n);\n"
                "  int i = start;\n" + "\n".join(lines))
    outs = [(f"out{k}", n.tensor_type) for k, (n, _) in enumerate(outputs)]
    pars = [(f"in{p.attr['index']}", p.dtype) for p in comp.parameters]
    sig = _signature(outs, pars, r.consts, "const int n, const int chunk")

    def text(name: str) -> str:
        return f"__kernel void {name}({sig}) {{\n{loop}\n}}"

    # launch shape
    if dev.is_gpu:
        wg = min(256, dev.max_work_group)
        gsize, lsize, chunk = (max(1, -(-n_outer // wg)) * wg,), (wg,), 1
    else:
        per_item = max(1, math.prod(tail))
        items = max(1, min(dev.compute_units * 8, -(-n_outer * per_item // 4096), n_outer))
        chunk = max(1, -(-n_outer // items))  # an empty launch (n_outer 0) still divides by it
        if lanes:
            chunk = -(-chunk // lanes) * lanes
        # local size 1: PoCL runs a work-group on one core, so every chunk is its own group
        gsize, lsize = (max(1, -(-n_outer // chunk)),), (1,)
    ins: list[tuple[str, object]] = [("param", p.attr["index"]) for p in comp.parameters]
    ins += [("const", a) for _, a in r.consts]
    return _finish(text, describe(comp), r, [("out", k, n.tensor_type) for (n, k) in outputs], ins,
                   scalars=[n_outer, chunk], global_size=gsize, local_size=lsize)


# ------------------------------------------------------------------------ group row

#: on GPUs, rows at least this long get a work-group each (one work-item per row would
#: walk the row alone, its neighbours' loads never coalesced)
GROUP_ROW_MIN = 64


def group_row_kernel(comp: Computation, outputs: list[tuple[Node, int]], outer: tuple[int, ...], dev: DeviceInfo,
                     pre: Sequence[Node]) -> Kernel:
    """A row kernel for GPUs: one work-group per row. Each per-row reduction is strided
    over the group's work-items (consecutive items, consecutive elements), combined by a
    tree in local memory and read back by every item; then the items write the row's
    full-shape outputs, strided the same way. Per-row values are computed by every item
    (no second barrier round), per-row outputs stored by item 0."""
    red_shape = pre[0].operands[0].shape[len(outer):]
    T = math.prod(red_shape)
    L = max(1, min(256, 1 << int(math.log2(max(1, dev.max_work_group))), 1 << max(0, (T - 1).bit_length())))
    params = {p.attr["index"]: f"in{p.attr['index']}" for p in comp.parameters}
    em = Emitter(1)
    r = Renderer(em, params)
    em.line("const int i = (int)get_group_id(0);")
    em.line("const int lid = (int)get_local_id(0);")
    idx = Idx(outer, "i")
    oc = list(em.coords(idx)) if outer else []
    base = f"i * {T}" if outer else "0"
    reduces = [n for n in comp.nodes if n.op is Op.REDUCE and n.attr["axes"] and n.shape == outer]
    for k, n in enumerate(reduces):
        (x,) = n.operands
        kind, dt = n.attr["kind"], n.dtype
        adt = acc_dtype(dt)
        acc = em.tmp(reg_type(adt), identity(kind, dt), "acc")
        em.open(f"for (int rr = lid; rr < {T}; rr += {L})")
        xi = Idx(x.shape, em.tmp("int", f"{base} + rr", "f"), oc + list(em.coords(Idx(tuple(red_shape), "rr"))))
        v = r.value(x, xi)  # (coordinates: a broadcast of an earlier reduction finds it by them)
        em.line(f"{acc} = {combine(kind, dt, acc, v)};")
        em.close()
        local_tree(em, [(f"sh{k}", n, acc)], L)
        red = f"sh{k}[0]"
        res = em.tmp(reg_type(adt), round_16(dt, red) if kind in ("sum", "prod") else red, "row")
        # every later use of the reduction at this row (its broadcasts) finds it here
        em.remember((n.uid, 1, idx.key), res)
        em.remember((n.uid, 1, ("f", "i")), res)
    for n in comp.nodes:  # every per-row value once, before the loop (as map_kernel's ``pre``)
        if isinstance(n.type, TensorType) and n.shape == outer and n.op not in (Op.PARAMETER, Op.CONSTANT):
            r.value(n, idx)
    per_row = [(k, n) for k, (n, _) in enumerate(outputs) if n.shape == outer]
    if per_row:
        em.open("if (lid == 0)")
        for k, n in per_row:
            em.line(store(f"out{k}", n.dtype, "i" if outer else "0", r.value(n, idx)))
        em.close()
    if any(n.shape != outer for n, _ in outputs):
        em.open(f"for (int j = lid; j < {T}; j += {L})")
        flat = em.tmp("int", f"{base} + j", "f")
        fidx = Idx(outer + tuple(red_shape), flat, oc + list(em.coords(Idx(tuple(red_shape), "j"))))
        for k, (n, _) in enumerate(outputs):
            if n.shape != outer:
                em.line(store(f"out{k}", n.dtype, flat, r.value(n, fidx)))
        em.close()
    outs = [(f"out{k}", n.tensor_type) for k, (n, _) in enumerate(outputs)]
    return _group_kernel(comp, em, r, outs, [("out", k, n.tensor_type) for (n, k) in outputs], L, math.prod(outer))


# ----------------------------------------------------------------------------- update


def update_kernel(comp: Computation, dev: DeviceInfo) -> Kernel | None:
    """Scatter or dynamic-update-slice over ``out0``, which already holds the operand (the
    plan copies it there, or hands over the operand's own buffer when it dies here): only
    the windows are written. Work-items take window positions; each applies every update
    in index order, so duplicates combine as the reference does (no atomics). A scatter
    whose windows of different updates may meet at different window positions runs on one
    work-item (ix.scatter_window_parallel). None when there is nothing to write."""
    n = comp.root
    x = n.operands[0]
    u = ix.update_loops(n)
    nw, nb = math.prod(u.window), math.prod(u.batch)
    if nw == 0 or nb == 0 or x.tensor_type.size == 0:
        return None
    em = Emitter(1)
    r = Renderer(em, {p.attr["index"]: f"in{p.attr['index']}" for p in comp.parameters})
    if u.parallel:
        em.open(f"for (int w = (int)get_global_id(0); w < {nw}; w += (int)get_global_size(0))")
    else:
        em.open("if (get_global_id(0) == 0)")
    bix: list[ix.Ix] = []
    if u.batch:
        em.open(f"for (int b = 0; b < {nb}; b++)")
        bix = em.ix_coords(Idx(u.batch, "b"))
    if not u.parallel:
        em.open(f"for (int w = 0; w < {nw}; w++)")
    wix = em.ix_coords(Idx(u.window, "w"))
    starts = [r._start(n.operands[k], c) for k, c in ix.update_starts(n, bix)]
    pos, inside, src, coords = ix.update_target(n, bix, wix, starts)
    if inside.const != 1:
        em.open(f"if ({ix.to_c(inside)})")  # an out-of-bounds window is dropped
    new = r._at(n.operands[src], coords)
    off = em.bind(ix.linearize(pos, x.shape))
    if u.combiner is not None:
        new = render.binary(u.combiner, n.dtype, load("out0", n.dtype, off), new)
    em.line(store("out0", n.dtype, off, new))
    while len(em.scopes) > 1:
        em.close()
    pars = [(f"in{p.attr['index']}", p.dtype) for p in comp.parameters]
    sig = _signature([("out0", n.tensor_type)], pars, r.consts, "")
    body = "\n".join(em.lines)

    def text(name: str) -> str:
        return f"__kernel void {name}({sig}) {{\n{body}\n}}"

    if not u.parallel:
        gsize, lsize = (1,), (1,)
    elif dev.is_gpu:
        wg = min(256, dev.max_work_group)
        gsize, lsize = (max(1, -(-min(nw, 1 << 22) // wg)) * wg,), (wg,)
    else:
        gsize, lsize = (max(1, min(nw // 4096 + 1, dev.compute_units * 8)),), (1,)
    ins: list[tuple[str, object]] = [("param", p.attr["index"]) for p in comp.parameters]
    ins += [("const", a) for _, a in r.consts]
    return _finish(text, describe(comp), r, [("out", 0, n.tensor_type)], ins, global_size=gsize, local_size=lsize)


# ---------------------------------------------------------------------- group reduce


def group_reduce_kernel(comp: Computation, reduces: list[tuple[Node, int]], dev: DeviceInfo) -> Kernel:
    """Work-group tree reductions for reduces sharing operand shape and axes: one
    work-group of ``dev.group_lanes`` work-items per output element. (A long reduction
    into too few outputs to fill the device arrives split in two by the kernel plan.)"""
    first = reduces[0][0]
    x_shape = first.operands[0].shape
    axes = first.attr["axes"]
    kept = first.shape
    red_shape = tuple(x_shape[a] for a in axes)
    R = math.prod(red_shape)
    L = dev.group_lanes
    trailing = tuple(axes) == tuple(range(len(x_shape) - len(axes), len(x_shape)))
    em = Emitter(1)
    params = {p.attr["index"]: f"in{p.attr['index']}" for p in comp.parameters}
    r = Renderer(em, params)
    em.line("const int o = (int)get_group_id(0);")
    em.line("const int lid = (int)get_local_id(0);")
    accs = []
    for n, _ in reduces:
        accs.append(em.tmp(reg_type(acc_dtype(n.dtype)), identity(n.attr["kind"], n.dtype), "acc"))
    kidx = Idx(kept, "o")

    def index(rv: str) -> Idx:
        if trailing:
            return Idx(x_shape, em.tmp("int", f"o * {R} + {rv}" if kept else rv, "f"))
        kc, rc = em.coords(kidx), em.coords(Idx(red_shape, rv))
        it_k, it_r = iter(kc), iter(rc)
        return Idx(x_shape, None, [next(it_r) if i in axes else next(it_k) for i in range(len(x_shape))])

    masks: list[str] = []  # per reduce: the isnan mask of an fmax/fmin vector loop, or ""

    def accumulate(rv: str, w: int, targets: list[str]) -> None:
        idx = index(rv)
        for k, ((n, _), a) in enumerate(zip(reduces, targets)):
            v = r.value(n.operands[0], idx, w)
            if w > 1 and masks[k]:  # (the IEEE combine is restored below: values.FAST_EXTREMA)
                em.line(f"{a} = {FAST_EXTREMA[n.attr['kind']]}({a}, {v});")
                em.line(f"{masks[k]} |= isnan({v});")
            else:
                em.line(f"{a} = {combine(n.attr['kind'], n.dtype, a, v)};")

    dts = {n.dtype for n, _ in reduces}
    w = 0
    if not dev.is_gpu and trailing and len(dts) == 1 and R >= 16:
        dt = next(iter(dts))
        w = dev.float_lanes if dt is DType.FLOAT32 else dev.double_lanes
        memo: dict[int, bool] = {}
        if not all(vector_ok(n.operands[0], x_shape, len(kept), dt, memo) for n, _ in reduces):
            w = 0
    if dev.is_gpu:
        em.open(f"for (int rr = lid; rr < {R}; rr += {L})")
        accumulate("rr", 1, accs)
        em.close()
    else:
        em.line(f"const int sub = {-(-R // L)};")
        em.line("int rr = lid * sub;")
        em.line(f"const int re = min(rr + sub, {R});")
        if w:
            vaccs = [em.tmp(reg_type(n.dtype, w), f"(({reg_type(n.dtype, w)})({identity(n.attr['kind'], n.dtype)}))",
                            "vacc") for n, _ in reduces]
            masks += [em.tmp(f"{MASK[n.dtype]}{w}", f"(({MASK[n.dtype]}{w})(0))", "nan")
                      if n.attr["kind"] in FAST_EXTREMA else "" for n, _ in reduces]
            if kept:
                r.row = (kept, em.coords(kidx))
            em.open(f"for (; rr + {w} <= re; rr += {w})")
            accumulate("rr", w, vaccs)
            em.close()
            r.row = None
            for (n, _), a, va, mask in zip(reduces, accs, vaccs, masks):
                h = horizontal(em, n.attr["kind"], n.dtype, va, w)
                em.line(f"{a} = {combine(n.attr['kind'], n.dtype, a, h)};")
                if mask:
                    _exact_extremum(em, r, n, a, mask, index)
        em.open("for (; rr < re; rr++)")
        accumulate("rr", 1, accs)
        em.close()
    local_tree(em, [(f"sh{k}", n, a) for k, ((n, _), a) in enumerate(zip(reduces, accs))], L)
    em.open("if (lid == 0)")
    outs: list[tuple[str, TensorType]] = []
    for k, (n, _) in enumerate(reduces):
        outs.append((f"out{k}", n.tensor_type))
        v = f"sh{k}[0]"
        if n.attr["kind"] in ("sum", "prod"):
            v = round_16(n.dtype, v)
        em.line(store(f"out{k}", n.dtype, "o", v))
    em.close()
    kouts = [("out", j, n.tensor_type) for n, j in reduces]
    return _group_kernel(comp, em, r, outs, kouts, L, math.prod(kept))


def _exact_extremum(em: Emitter, r: Renderer, n: Node, acc: str, mask: str, index: Callable[[str], Idx]) -> None:
    """After an fmax/fmin vector loop over ``[lid * sub, rr)``: NaN if one was seen, and a
    zero result found again by the exact combine (values.Renderer._exact_extremum)."""
    em.open(f"if (any({mask}))")
    em.line(f"{acc} = NAN;")
    em.close()
    em.open(f"else if ({acc} == 0)")
    em.line(f"{acc} = {identity(n.attr['kind'], n.dtype)};")
    em.open("for (int q = lid * sub; q < rr; q++)")
    em.line(f"{acc} = {combine(n.attr['kind'], n.dtype, acc, r.value(n.operands[0], index('q')))};")
    em.close()
    em.close()


def local_tree(em: Emitter, parts: list[tuple[str, Node, str]], L: int) -> None:
    """Combines each work-item's partial ``acc`` of reduce ``n`` into ``name[0]`` (a
    ``__local`` array of ``L``, a power of two): a tree of halves, one barrier a level."""
    for name, n, acc in parts:
        em.line(f"__local {reg_type(acc_dtype(n.dtype))} {name}[{L}];")
        em.line(f"{name}[lid] = {acc};")
    em.line("barrier(CLK_LOCAL_MEM_FENCE);")
    em.open(f"for (int st = {L // 2}; st > 0; st >>= 1)")
    em.open("if (lid < st)")
    for name, n, _ in parts:
        em.line(f"{name}[lid] = {combine(n.attr['kind'], n.dtype, f'{name}[lid]', f'{name}[lid + st]')};")
    em.close()
    em.line("barrier(CLK_LOCAL_MEM_FENCE);")
    em.close()


def _group_kernel(comp: Computation, em: Emitter, r: Renderer, outs: list[tuple[str, TensorType]],
                  kouts: list[tuple[str, int, TensorType]], L: int, groups: int) -> Kernel:
    """A kernel of ``groups`` work-groups of ``L`` items whose body ``em`` holds."""
    pars = [(f"in{p.attr['index']}", p.dtype) for p in comp.parameters]
    sig = _signature(outs, pars, r.consts, "")
    attr = f"__attribute__((reqd_work_group_size({L}, 1, 1))) "

    def text(name: str) -> str:
        return f"__kernel {attr}void {name}({sig}) {{\n" + "\n".join(em.lines) + "\n}"

    ins: list[tuple[str, object]] = [("param", p.attr["index"]) for p in comp.parameters]
    ins += [("const", a) for _, a in r.consts]
    return _finish(text, describe(comp), r, kouts, ins, global_size=(max(1, groups) * L,), local_size=(L,))


def check_size(n: Node) -> None:
    for t in [n.type] + [o.type for o in n.operands]:
        if isinstance(t, TensorType) and t.size > INT_MAX:
            raise BackendError(f"opencl: {n.op.value} on {t} exceeds the 2^31 elements a kernel indexes", where=n.loc)
