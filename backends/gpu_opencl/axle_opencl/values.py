"""Rendering the value of a node at an index: the recursive heart of code generation.

``value(node, idx)`` returns a C expression (a temporary or a literal) holding the node's
element at ``idx``. Elementwise ops pass the index through, movement ops rewrite it
(broadcast drops dims, transpose permutes, slice scales, reverse mirrors, pad and
concatenate select with clamped in-bounds loads), reductions and dots become loops
in the kernel body. Producers are thus recomputed inline and nothing in between is
written to memory: a whole loop fusion is one expression tree per output element.

With ``lanes > 1`` the same renderer emits ``floatN`` code for the float ops the
vectorizer accepts: the index is then the first of N consecutive flat offsets."""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from axle.errors import BackendError
from axle.ir.dotdims import DotDims
from axle.ir.dtypes import DType
from axle.ir.module import Node
from axle.ir.numerics import TANH_F32, TANH_SATURATION_F32
from axle.ir.ops import Op
from axle.ir.reductions import REDUCE_KINDS
from axle.ir.types import squeeze
from axle.lowering import c
from axle.lowering import index as ix

from . import render
from .emitter import Emitter, Idx
from .render import REG, identity, literal

LANE_NAMES = "0123456789abcdef"
#: float max/min reductions whose vector loops use the one-instruction fmax/fmin
#: (Renderer._exact_extremum restores the IEEE maximum/minimum's NaN and signed zeros)
FAST_EXTREMA = {"max": "fmax", "min": "fmin"}
#: the integer lanes of isnan's result on a float vector
MASK = {DType.FLOAT32: "int", DType.FLOAT64: "long"}


def reg_type(dt: DType, lanes: int = 1) -> str:
    return REG[dt] + (str(lanes) if lanes > 1 else "")


def acc_dtype(dt: DType) -> DType:
    """Accumulators of f16 and bf16 sums run in f32 (as the interpreter does)."""
    return DType.FLOAT32 if dt.is_half else dt


def load(ptr: str, dt: DType, off: str, lanes: int = 1) -> str:
    if lanes > 1:
        return f"vload{lanes}(0, {ptr} + {off})"
    if dt is DType.FLOAT16:  # NaN payload kept (axle.lowering.c's axle_ldh: NVIDIA's vload_half drops it)
        return f"axle_ldh({off}, {ptr})"
    if dt is DType.BFLOAT16:
        return f"axle_bf16_f32({ptr}[{off}])"
    if dt is DType.BOOL:
        return f"((int){ptr}[{off}])"
    return f"{ptr}[{off}]"


def store(ptr: str, dt: DType, off: str, value: str, lanes: int = 1) -> str:
    if lanes > 1:
        return f"vstore{lanes}({value}, 0, {ptr} + {off});"
    if dt is DType.FLOAT16:
        return f"vstore_half_rte({value}, {off}, {ptr});"
    if dt is DType.BFLOAT16:
        return f"{ptr}[{off}] = (ushort)axle_f32_bf16({value});"
    if dt is DType.BOOL:
        return f"{ptr}[{off}] = (uchar)({value});"
    return f"{ptr}[{off}] = {value};"


def combine(kind: str, dt: DType, a: str, b: str) -> str:
    """Expression merging two partial reductions of ``kind`` (f16 partials are f32)."""
    return render.binary(REDUCE_KINDS[kind].combiner, acc_dtype(dt), a, b)


class Renderer:
    """Renders one fused computation's nodes into an :class:`Emitter`."""

    def __init__(self, em: Emitter, param_args: dict[int, str]) -> None:
        self.em = em
        self.param_args = param_args  # parameter index -> kernel argument name
        self.consts: list[tuple[str, np.ndarray]] = []  # (argument name, array)
        self._const_args: dict[int, str] = {}
        self.uses_fp64 = False
        #: inside a vectorized row: (row shape, its coordinates); lets a broadcast of a
        #: per-row value become a splat of one scalar
        self.row: tuple[tuple[int, ...], list[str]] | None = None
        #: Row kernels (CPU devices): full-shape values that a per-row reduction loop
        #: computes and the outputs need again (``exp(x - max)`` in softmax) are stored
        #: into an output buffer by the first loop and loaded afterwards instead of being
        #: recomputed: uid -> (node, output argument). Only at ``home``, the index of the
        #: row element the current loop visits (elementwise ops pass it on unchanged), so
        #: a work-item only ever touches its own row, and every element is stored before
        #: it is loaded.
        self.spill: dict[int, tuple[Node, str]] = {}
        self.spilled: set[int] = set()
        self.home: Idx | None = None
        #: (full row-kernel shape, the row's coordinates): where a reduction loop visits
        #: exactly the current row (set by the row kernel builder)
        self.row_home: tuple[tuple[int, ...], list[str]] | None = None
        self._storing = False
        self._pending: set[int] = set()

    # -- entry point ---------------------------------------------------------------
    def value(self, n: Node, idx: Idx, lanes: int = 1) -> str:
        if n.dtype is DType.FLOAT64:
            self.uses_fp64 = True
        key = (n.uid, lanes, idx.key)
        hit = self.em.lookup(key)
        if hit is not None:
            return hit
        sp = self.spill.get(n.uid) if idx is self.home else None
        if sp is not None and n.uid in self.spilled:
            expr = self.em.tmp(reg_type(n.dtype, lanes), load(sp[1], n.dtype, self.em.flat(idx), lanes))
            self.em.remember(key, expr)
            return expr
        expr = _RULES[n.op](self, n, idx, lanes)
        if not (expr.isidentifier() or _is_literal(expr)):
            expr = self.em.tmp(reg_type(n.dtype, lanes), expr)
        if sp is not None and self._storing:
            self.em.line(store(sp[1], n.dtype, self.em.flat(idx), expr, lanes))
            self._pending.add(n.uid)
        self.em.remember(key, expr)
        # the key may have changed (coords filled in): remember both spellings
        self.em.remember((n.uid, lanes, idx.key), expr)
        return expr

    def splat(self, expr: str, dt: DType, lanes: int) -> str:
        return expr if lanes == 1 else f"(({reg_type(dt, lanes)})({expr}))"

    def const_arg(self, n: Node) -> str:
        name = self._const_args.get(n.uid)
        if name is None:
            name = f"k{len(self.consts)}"
            self._const_args[n.uid] = name
            self.consts.append((name, n.attr["value"].array))
        return name

    # -- rules ---------------------------------------------------------------------
    def _parameter(self, n: Node, idx: Idx, lanes: int) -> str:
        ptr = self.param_args[n.attr["index"]]
        if n.tensor_type.size <= 1:
            return self.splat(load(ptr, n.dtype, "0"), n.dtype, lanes)
        return load(ptr, n.dtype, self.em.flat(idx), lanes)

    def _constant(self, n: Node, idx: Idx, lanes: int) -> str:
        arr = n.attr["value"].array
        if arr.size == 1:
            return self.splat(literal(arr.reshape(-1)[0], n.dtype), n.dtype, lanes)
        return load(self.const_arg(n), n.dtype, self.em.flat(idx), lanes)

    def _iota(self, n: Node, idx: Idx, lanes: int) -> str:
        c = self.em.coords(idx)[n.attr["dimension"]]
        return render.convert(c, DType.INT32, n.dtype)

    def _convert(self, n: Node, idx: Idx, lanes: int) -> str:
        (x,) = n.operands
        return render.convert(self.value(x, idx), x.dtype, n.dtype)

    def _elementwise(self, n: Node, idx: Idx, lanes: int) -> str:
        args = [self.value(o, idx, lanes) for o in n.operands]
        if lanes > 1 and n.op is Op.TANH:
            return self._vector_tanh(args[0], n.dtype, lanes)
        if len(args) == 1:
            return render.unary(n.op, n.dtype, args[0])
        return render.binary(n.op, n.dtype, args[0], args[1])

    def _vector_tanh(self, x: str, dt: DType, lanes: int) -> str:
        """f32 tanh as a rational function (PoCL scalarizes the builtin tanh; this
        vectorizes): the shared fit axle.ir.numerics.TANH_F32 (max ~3e-7 relative error
        evaluated in f32, Q >= 1 so no poles), NaN passed on, +-1 exactly where tanh
        rounds to +-1 (as the scalar rule: NVIDIA's division, not correctly rounded by
        default, gave 0.99999994 at the clamp)."""
        assert dt is DType.FLOAT32, "vector tanh is f32 only (vector_ok keeps f64 scalar)"
        t = reg_type(dt, lanes)
        lim = literal(TANH_F32.clamp, dt)
        c = self.em.tmp(t, f"clamp({x}, -{lim}, {lim})")
        s = self.em.tmp(t, f"{c} * {c}")

        def horner(coeffs: tuple[float, ...]) -> str:
            e = literal(coeffs[-1], dt)
            for a in reversed(coeffs[:-1]):
                e = f"({e} * {s} + {literal(a, dt)})"
            return e

        p = self.em.tmp(t, horner(TANH_F32.p))
        q = self.em.tmp(t, horner(TANH_F32.q))
        sat = f"fabs({x}) > {literal(TANH_SATURATION_F32, dt)} ? copysign(({t})(1.0f), {x})"
        return f"(isnan({x}) ? {x} : {sat} : clamp({c} * {p} / {q}, -1.0f, 1.0f))"

    def _is_finite(self, n: Node, idx: Idx, lanes: int) -> str:
        return c.is_finite(self.value(n.operands[0], idx))

    def _bitcast(self, n: Node, idx: Idx, lanes: int) -> str:
        return c.bitcast(render.CL, n, self.value(n.operands[0], idx))

    def _compare(self, n: Node, idx: Idx, lanes: int) -> str:
        a, b = (self.value(o, idx) for o in n.operands)
        return c.compare(n.attr["direction"], a, b)

    def _select(self, n: Node, idx: Idx, lanes: int) -> str:
        p, a, b = (self.value(o, idx) for o in n.operands)
        return f"({p} ? {a} : {b})"

    def _at(self, x: Node, coords: list[ix.Ix]) -> str:
        """``x``'s scalar value at index expressions ``coords`` (bound to temporaries)."""
        return self.value(x, Idx(x.shape, None, [self.em.bind(c) for c in coords]))

    def _movement(self, n: Node, idx: Idx, lanes: int) -> str:
        """Broadcast, reshape, transpose, slice, reverse: the shared index maps
        (axle.lowering.index). Vector lanes only through a broadcast of a per-row value or
        a reshape (checked by vector_ok)."""
        (x,) = n.operands
        if x.tensor_type.size <= 1:
            return self.value(x, Idx(x.shape, "0", ["0"] * len(x.shape)), lanes)
        if n.op in (Op.BROADCAST_IN_DIM, Op.RESHAPE) and x.shape == n.shape:
            return self.value(x, idx, lanes)
        if n.op is Op.BROADCAST_IN_DIM and lanes > 1:
            # the splat of one scalar: x is a per-row value
            dims = n.attr["broadcast_dimensions"]
            assert self.row is not None and all(d < len(self.row[0]) for d in dims), "bad vector broadcast"
            coords = [self.row[1][d] if x.shape[i] != 1 else "0" for i, d in enumerate(dims)]
            return self.splat(self.value(x, Idx(x.shape, None, coords)), x.dtype, lanes)
        if n.op is Op.RESHAPE and (lanes > 1 or idx.coords is None or squeeze(x.shape) != squeeze(n.shape)):
            # the same row-major offset. Where only unit dims differ and coordinates are
            # known, the map below keeps them instead: that spells a row fusion's per-row
            # value (reduce -> reshape -> broadcast) at the same coordinates as the row
            # loop that computed it, so the output loop finds it instead of recomputing
            # the reduction from a spill buffer it is overwriting (random_module(400027, 28)).
            return self.value(x, Idx(x.shape, self.em.flat(idx)), lanes)
        return self._at(x, ix.MOVEMENT[n.op](n, self.em.ix_coords(idx)))

    def _pad(self, n: Node, idx: Idx, lanes: int) -> str:
        x, pv = n.operands
        padv = self.value(pv, Idx((), "0", []))
        if x.tensor_type.size == 0:
            return padv
        coords, inside = ix.pad_index(self.em.ix_coords(idx), x.shape, n.attr["low"], n.attr["high"],
                                      n.attr["interior"])
        v = self._at(x, coords)
        return v if inside.const == 1 else f"({ix.to_c(inside)} ? {v} : {padv})"

    def _concatenate(self, n: Node, idx: Idx, lanes: int) -> str:
        pieces = ix.concatenate_pieces(self.em.ix_coords(idx), n.attr["dimension"], [o.shape for o in n.operands])
        vals = [(pred, self._at(n.operands[k], coords)) for k, coords, pred in pieces]
        expr = vals[-1][1]
        for pred, v in reversed(vals[:-1]):
            expr = f"({ix.to_c(pred)} ? {v} : {expr})"
        return expr

    def _start(self, x: Node, coords: list[ix.Ix]) -> ix.Ix:
        """An integer of ``x`` at ``coords``, loaded as a ``long`` start index: clamped by
        the index algebra before it narrows to an ``int`` coordinate."""
        v = self._at(x, coords) if coords else self.value(x, Idx((), "0", []))
        return ix.var(self.em.tmp("long", f"((long){v})", "s"))

    def _gather(self, n: Node, idx: Idx, lanes: int) -> str:
        """An indexed load (axle.lowering.index): the operand at the clamped start indices
        loaded for this element plus its window offset."""
        coords = self.em.ix_coords(idx)
        starts = [self._start(n.operands[1], c) for c in ix.gather_start_coords(coords, n)]
        return self._at(n.operands[0], ix.gather_index(coords, n, starts))

    def _dynamic_slice(self, n: Node, idx: Idx, lanes: int) -> str:
        x, *start_nodes = n.operands
        starts = [self._start(s, []) for s in start_nodes]
        return self._at(x, ix.dynamic_slice_index(self.em.ix_coords(idx), x.shape, n.attr["slice_sizes"], starts))

    def _rng(self, n: Node, idx: Idx, lanes: int) -> str:
        (key,) = n.operands
        k = self.value(key, Idx((), "0", []))
        z = f"axle_rng((ulong){k}, (ulong){self.em.flat(idx)})"
        return f"((int)(uint)({z} >> 32))" if n.dtype is DType.INT32 else f"((long){z})"

    def _reduce(self, n: Node, idx: Idx, lanes: int) -> str:
        (x,) = n.operands
        axes, kind, dt = n.attr["axes"], n.attr["kind"], n.dtype
        if not axes:
            return self.value(x, Idx(x.shape, None, list(self.em.coords(idx))))
        if any(x.shape[a] == 0 for a in axes):
            return identity(kind, dt)
        kept = self.em.coords(idx)
        adt = acc_dtype(dt)
        acc = self.em.tmp(reg_type(adt), identity(kind, dt), "acc")
        red = math.prod(x.shape[a] for a in axes)
        trailing = tuple(axes) == tuple(range(x.tensor_type.rank - len(axes), x.tensor_type.rank))
        # a reduction over exactly the current row of a row kernel stores spilled values
        at_home = bool(self.spill) and trailing and self.row_home == (x.shape, list(kept))
        saved = self.home, self._storing
        self._storing = at_home
        lanes_ok = self.vector_lanes if trailing else 0
        if lanes_ok and red >= 2 * lanes_ok and vector_ok(x, x.shape, len(kept), dt):
            self._vector_reduce(x, kind, dt, acc, kept, red, lanes_ok, at_home)
        else:
            loops = []
            for a in axes:
                v = self.em.fresh("r")
                self.em.open(f"for (int {v} = 0; {v} < {x.shape[a]}; {v}++)")
                loops.append(v)
            it_k, it_r = iter(kept), iter(loops)
            coords = [next(it_r) if i in axes else next(it_k) for i in range(x.tensor_type.rank)]
            xi = Idx(x.shape, None, coords)
            self.home = xi if at_home else saved[0]
            v = self.value(x, xi)
            self.em.line(f"{acc} = {combine(kind, dt, acc, v)};")
            for _ in loops:
                self.em.close()
        self.home, self._storing = saved
        if at_home:  # every element of the row has been stored now
            self.spilled |= self._pending
            self._pending = set()
        return render.round_16(dt, acc) if kind in ("sum", "prod") else acc

    #: lanes for vectorized reduction loops (set by the kernel builder on CPU devices)
    vector_lanes: int = 0

    def _vector_reduce(self, x: Node, kind: str, dt: DType, acc: str, kept: list[str], red: int, w: int,
                       at_home: bool = False) -> None:
        """A contiguous trailing reduction with a floatN accumulator, then a scalar tail."""
        em = self.em
        kshape = x.shape[:len(kept)]
        base = em.flat(Idx(kshape, None, list(kept)))
        base = "0" if not kept else f"({base}) * {red}"
        vacc = em.tmp(reg_type(dt, w), f"(({reg_type(dt, w)})({identity(kind, dt)}))", "vacc")
        fast = FAST_EXTREMA.get(kind)
        mask = em.tmp(f"{MASK[dt]}{w}", f"(({MASK[dt]}{w})(0))", "nan") if fast else ""
        r = em.fresh("r")
        saved = self.row, self.home
        self.row = (kshape, list(kept))
        em.open(f"for (int {r} = 0; {r} + {w} <= {red}; {r} += {w})")
        xi = Idx(x.shape, em.tmp("int", f"{base} + {r}", "f"))
        self.home = xi if at_home else saved[1]
        v = self.value(x, xi, w)
        if fast:
            em.line(f"{vacc} = {fast}({vacc}, {v});")
            em.line(f"{mask} |= isnan({v});")
        else:
            em.line(f"{vacc} = {combine(kind, dt, vacc, v)};")
        em.close()
        em.line(f"{acc} = {combine(kind, dt, acc, horizontal(em, kind, dt, vacc, w))};")
        tail = red - red % w
        if fast:
            self.row, self.home = saved
            self._exact_extremum(x, kind, dt, acc, base, tail, mask)
        if tail < red:
            em.open(f"for (int {r} = {tail}; {r} < {red}; {r}++)")
            xi = Idx(x.shape, em.tmp("int", f"{base} + {r}", "f"))
            self.home = xi if at_home else saved[1]
            v = self.value(x, xi)
            em.line(f"{acc} = {combine(kind, dt, acc, v)};")
            em.close()
        self.row, self.home = saved

    def _exact_extremum(self, x: Node, kind: str, dt: DType, acc: str, base: str, end: int, mask: str) -> None:
        """After a max/min vector loop run with fmax/fmin (one instruction a vector, where the
        IEEE maximum/minimum combine costs several): fmax/fmin drop NaNs and may return
        either zero for -0.0 and +0.0, so a NaN seen makes the result NaN, and a zero result
        (the only value whose sign they may get wrong) is found again by the exact combine
        over the same elements, a rare scalar pass."""
        em = self.em
        em.open(f"if (any({mask}))")
        em.line(f"{acc} = NAN;")
        em.close()
        em.open(f"else if ({acc} == 0)")
        em.line(f"{acc} = {identity(kind, dt)};")
        r = em.fresh("r")
        em.open(f"for (int {r} = 0; {r} < {end}; {r}++)")
        saved = self._storing
        self._storing = False  # the vector loop stored every spilled value already
        v = self.value(x, Idx(x.shape, em.tmp("int", f"{base} + {r}", "f")))
        self._storing = saved
        em.line(f"{acc} = {combine(kind, dt, acc, v)};")
        em.close()
        em.close()

    def _dot(self, n: Node, idx: Idx, lanes: int) -> str:
        lhs, rhs = n.operands
        d = DotDims.of(n)
        c = self.em.coords(idx)
        adt = acc_dtype(n.dtype)
        acc = self.em.tmp(reg_type(adt), literal(0, adt), "acc")
        if d.k == 0:
            return acc
        ks = []
        for l in d.lhs_contracting:
            ks.append(self.em.fresh("r"))
            self.em.open(f"for (int {ks[-1]} = 0; {ks[-1]} < {lhs.shape[l]}; {ks[-1]}++)")
        lco, rco = d.operand_indices(c, ks, len(lhs.shape), len(rhs.shape))
        # (operands narrower than the accumulator, bf16 or preferred_element_type, widen exactly)
        x = render.convert(self.value(lhs, Idx(lhs.shape, None, lco)), lhs.dtype, adt)
        y = render.convert(self.value(rhs, Idx(rhs.shape, None, rco)), rhs.dtype, adt)
        prod = render.binary(Op.MUL, adt, x, y)
        self.em.line(f"{acc} = {render.binary(Op.ADD, adt, acc, prod)};")
        for _ in ks:
            self.em.close()
        return render.round_16(n.dtype, acc)

    def _unsupported(self, n: Node, idx: Idx, lanes: int) -> str:
        raise BackendError(f"opencl: {n.op.value} cannot appear inside a kernel ({n.type})", where=n.loc)


def horizontal(em: Emitter, kind: str, dt: DType, vec: str, w: int) -> str:
    """Combines the lanes of a ``w``-lane accumulator into one value: halves combined
    as vectors (log2 w steps) where w is a power of two, else lane by lane."""
    if w & (w - 1):
        e = f"{vec}.s0"
        for k in range(1, w):
            e = em.tmp(reg_type(dt), combine(kind, dt, e, f"{vec}.s{LANE_NAMES[k]}"), "h")
        return e
    while w > 1:
        w //= 2
        vec = em.tmp(reg_type(dt, w), combine(kind, dt, f"{vec}.lo", f"{vec}.hi"), "h")
    return vec


def spill_plan(comp_nodes: list[Node], reduces: list[Node], full_outputs: list[tuple[Node, str]],
               full: tuple[int, ...]) -> dict[int, tuple[Node, str]]:
    """Which full-shape values a row kernel stores during its reduction loops and loads
    again for its outputs: those reached, keeping the element index (elementwise ops),
    both from a reduction's operand and from an output, that cost more than a load
    (they involve a transcendental or other non-cheap op); the outermost such values,
    each given its own output buffer of its dtype (its final value is written later)."""
    def reach(roots: list[Node]) -> dict[int, Node]:
        seen: dict[int, Node] = {}
        stack = list(roots)
        while stack:
            n = stack.pop()
            if n.uid in seen or n.shape != full:
                continue
            seen[n.uid] = n
            if n.traits.elementwise or (n.op is Op.BROADCAST_IN_DIM and n.operands[0].shape == n.shape):
                stack.extend(n.operands)
        return seen

    from_red = reach([r.operands[0] for r in reduces])
    from_out = reach([n for n, _ in full_outputs])
    costly: dict[int, bool] = {}
    for n in comp_nodes:  # topological order
        if n.uid in from_red:
            costly[n.uid] = (n.traits.elementwise and not n.traits.cheap) or \
                any(costly.get(o.uid, False) for o in n.operands)
    shared = [n for n in comp_nodes if n.uid in from_out and costly.get(n.uid)]
    inner: set[int] = set()
    for n in shared:
        inner |= set(reach(list(n.operands)))
    plan: dict[int, tuple[Node, str]] = {}
    free = list(full_outputs)
    for n in reversed([n for n in shared if n.uid not in inner]):
        buf = next((b for b in free if b[0].dtype is n.dtype), None)
        if buf is not None:
            free.remove(buf)
            plan[n.uid] = (n, buf[1])
    return plan


def _is_literal(e: str) -> bool:
    if e.startswith("(-") and e.endswith(")"):
        e = e[1:-1]
    return e.lstrip("-").replace(".", "", 1).rstrip("fL").isdigit() or e in ("INT_MIN", "LONG_MIN")


Rule = Callable[[Renderer, Node, Idx, int], str]
_RULES: dict[Op, Rule] = {
    Op.PARAMETER: Renderer._parameter, Op.CONSTANT: Renderer._constant, Op.IOTA: Renderer._iota,
    Op.CONVERT: Renderer._convert, Op.COMPARE: Renderer._compare, Op.SELECT: Renderer._select,
    **{op: Renderer._movement for op in ix.MOVEMENT}, Op.PAD: Renderer._pad,
    Op.CONCATENATE: Renderer._concatenate, Op.RNG_BIT_GENERATOR: Renderer._rng, Op.REDUCE: Renderer._reduce,
    Op.DOT_GENERAL: Renderer._dot, Op.CUSTOM_CALL: Renderer._unsupported, Op.TUPLE: Renderer._unsupported,
    Op.GET_TUPLE_ELEMENT: Renderer._unsupported, Op.FUSION: Renderer._unsupported,
    # control flow: not claimed (Capabilities.ops), so the partitioner runs loops on the host
    Op.WHILE: Renderer._unsupported, Op.CONDITIONAL: Renderer._unsupported,
    # windowed: extended primitives opencl does not claim (the core's decompositions run instead)
    Op.CONVOLUTION: Renderer._unsupported, Op.REDUCE_WINDOW: Renderer._unsupported,
    # sorting: never fused, launched by its own kernel (sort.py)
    Op.SORT: Renderer._unsupported,
    # indexing: scatter and dynamic-update-slice are update kernels of their own (kernels.py)
    Op.GATHER: Renderer._gather, Op.DYNAMIC_SLICE: Renderer._dynamic_slice,
    Op.SCATTER: Renderer._unsupported, Op.DYNAMIC_UPDATE_SLICE: Renderer._unsupported,
    # collectives: not claimed (Capabilities.ops), so the core's host communicator runs them
    # between the replicas' kernels (partition.py cuts the program there)
    **{op: Renderer._unsupported for op in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL,
                                            Op.COLLECTIVE_PERMUTE, Op.REPLICA_ID)},
}
for _op in (Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.TANH, Op.LOGISTIC, Op.SIN, Op.COS, Op.FLOOR,
            Op.CEIL, Op.SIGN, Op.NOT, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.REM, Op.POW, Op.MAX, Op.MIN, Op.AND, Op.OR):
    _RULES[_op] = Renderer._elementwise
# elementwise completeness and bit operations: the shared C tables (scalar; see vector_ok)
for _op in (Op.ATAN2, Op.TAN, Op.EXPM1, Op.LOG1P, Op.CBRT, Op.ERF, Op.ROUND_NEAREST_EVEN, Op.NEXT_AFTER, Op.XOR,
            Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL, Op.SHIFT_RIGHT_ARITHMETIC, Op.POPCNT, Op.CLZ):
    _RULES[_op] = Renderer._elementwise
_RULES[Op.IS_FINITE], _RULES[Op.BITCAST_CONVERT] = Renderer._is_finite, Renderer._bitcast
assert set(_RULES) == set(Op), f"renderer misses {set(Op) - set(_RULES)}"


def vector_ok(n: Node, full: tuple[int, ...], row_rank: int, dt: DType, _memo: dict[int, bool] | None = None) -> bool:
    """Whether ``n`` (an array of shape ``full``) can be rendered N lanes at a time:
    float ops of one dtype (f32/f64) over contiguous operands, scalars and per-row values
    (row = the leading ``row_rank`` dims)."""
    memo = {} if _memo is None else _memo
    if n.uid in memo:
        return memo[n.uid]
    ok = _vector_ok(n, full, row_rank, dt, memo)
    memo[n.uid] = ok
    return ok


def _vector_ok(n: Node, full: tuple[int, ...], row_rank: int, dt: DType, memo: dict[int, bool]) -> bool:
    if dt not in (DType.FLOAT32, DType.FLOAT64) or n.dtype is not dt:
        return False
    size = n.tensor_type.size
    if n.op is Op.PARAMETER:
        return n.shape == full or size <= 1
    if n.op is Op.CONSTANT:
        return size <= 1
    if n.op is Op.BROADCAST_IN_DIM:
        x = n.operands[0]
        if x.tensor_type.size <= 1:
            return True
        if x.shape == full:
            return vector_ok(x, full, row_rank, dt, memo)
        return n.shape == full and all(d < row_rank for d in n.attr["broadcast_dimensions"])
    if n.op is Op.RESHAPE:
        # a reshape keeps row-major order: N consecutive offsets of its result are N
        # consecutive offsets of its operand (a split reduction's [parts, chunk] view)
        x = n.operands[0]
        if x.tensor_type.size <= 1 or x.shape == full:
            return x.tensor_type.size <= 1 or vector_ok(x, full, row_rank, dt, memo)
        return n.shape == full and vector_ok(x, x.shape, 0, dt)
    if n.op is Op.TANH and dt is not DType.FLOAT32:
        return False  # the vector tanh is an f32 approximation
    if n.op in (Op.POW, Op.REM) and dt is DType.FLOAT64:
        # PoCL's double2..8 pow and fmod are wrong at the extremes where the scalar
        # builtins are right: pow(5e-324, 1) = 4.6e-305, fmod(-1, 5e-324) = NaN.
        return False
    if n.op in render.VECTOR_OK and n.traits.elementwise:
        return n.shape == full and all(vector_ok(o, full, row_rank, dt, memo) for o in n.operands)
    return False


__all__ = ["Renderer", "vector_ok", "load", "store", "combine", "acc_dtype", "reg_type", "horizontal", "spill_plan"]
