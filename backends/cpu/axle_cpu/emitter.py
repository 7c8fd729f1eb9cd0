"""Lowering one kernel (a fused computation, or a single op wrapped as one) to an LLVM
function that walks its output index space.

Every kernel has the signature ``void k(ptr bufs, i64 o0, i64 o1, i64 i0, i64 i1, i64 r0,
i64 r1)``: ``bufs`` holds the input pointers then the output pointers; the loop nest
runs outer rows ``[o0, o1)`` (all dims but the last, row-major) and inner columns
``[i0, i1)`` (the last dim), and ``[r0, r1)`` restricts the first reduced axis of the root
reductions (used to split a big reduction across threads; the host combines the
partial results).

Values are produced by ``value(node, idx)``: the value of ``node`` at the multi-index
``idx``, producers inlined (``OPS`` lowering table below). Index entries are Python ints
(folded) or LLVM i64 values tagged with the loop level they depend on; anything that
does not depend on the inner loop is emitted once per row (the "preamble"), and anything
depending on no loop at all once per call. That is what makes a ``row`` fusion compute
its reductions once per row and an ``input`` fusion's broadcast operands load once.
"""
from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

import numpy as np
from llvmlite import ir

from axle.errors import BackendError
from axle.ir.dotdims import DotDims
from axle.ir.dtypes import DType
from axle.ir.module import Computation, Node
from axle.ir.ops import Op
from axle.ir.reductions import REDUCE_KINDS
from axle.ir.types import TensorType
from axle.lowering import index as ix
from axle.lowering.schedule import Schedule, outputs_of, schedule

from . import mathfns
from .lltypes import COMPUTE, F16, F32, I1, I8, I16, I32, I64, PTR, STORAGE, VOID, const, storage_consts, suffix
from .target import host

Index: TypeAlias = int | ir.Value
R = TypeVar("R")
SIG = ir.FunctionType(VOID, [PTR, I64, I64, I64, I64, I64, I64])
INT64_MAX = 2**63 - 1


@dataclass
class KernelSpec:
    """What one kernel computes: ``comp``'s parameters are the kernel inputs; ``outputs``
    are the root (or the root tuple's elements)."""

    name: str
    comp: Computation
    kind: str  # loop / input / row (fusion kinds); single ops get loop or input

    @functools.cached_property
    def schedule(self) -> Schedule:
        """The shared schedule (axle.lowering.schedule): form, index space, loop sizes."""
        return schedule(self.comp, self.kind)

    @property
    def outputs(self) -> list[Node]:
        return list(outputs_of(self.comp))

    @property
    def iter_shape(self) -> tuple[int, ...]:
        """The index space walked; every output not of this shape holds one element per
        row (see output_index)."""
        return self.schedule.iter_shape

    @property
    def flat(self) -> bool:
        return self.schedule.flat

    @property
    def loop_sizes(self) -> tuple[int, int]:
        """(outer rows, inner columns) of the loop nest; an ``update`` kernel (scatter,
        dynamic-update-slice) is one trip: it applies its updates in order on one thread."""
        if self.kind == "update":
            return 1, 1
        return self.schedule.rows, self.schedule.cols

    #: rows up to this long are walked whole (constant trip count), never split by column
    SHORT_ROW = 64

    @property
    def fixed_columns(self) -> bool:
        """Short rows: the column loop runs over the constant range [0, C) whatever
        [i0, i1) says, so LLVM unrolls and vectorizes it without remainder loops and
        runtime checks per row (a [100, 10] softmax row is 10 elements); such kernels are
        only split across threads by rows (executable.py)."""
        if self.kind in ("gemm", "update") or self.flat or self.column_reduce or self.windowed:
            return False
        s = self.iter_shape
        return len(s) >= 1 and 0 < s[-1] <= self.SHORT_ROW

    @property
    def windowed(self) -> bool:
        """A reduce_window kernel with unit column stride: its padded loads are branches,
        which LLVM vectorizes (masked loads) in a column loop with a run-time range but
        left scalar in a constant short one (measured: a 3x3 stride-1 max pool over
        [32, 64, 56, 56], 167 ms against 24 ms). A column stride > 1 reads interleaved
        and is faster as a short constant loop (the stride-2 ResNet pool: 32 vs 96 ms)."""
        return any(n.op is Op.REDUCE_WINDOW and n.attr["window_strides"][-1:] == (1,) for n in self.outputs)

    @property
    def column_reduce(self) -> bool:
        """The schedule's column form: the kernel walks the reduced axes outside and the
        columns inside, so memory streams (see KernelEmitter.build_columns)."""
        return self.schedule.column

    @property
    def split_reduce_size(self) -> int:
        """Extent of the axis a big reduction splits along across threads (0: none)."""
        return self.schedule.split_extent

    @property
    def reduce_split_first(self) -> bool:
        """Split along the reduced axis even where the rows would do (a GEMM's long K)."""
        return False

    @property
    def largest_array(self) -> int:
        """Elements of the kernel's largest array (a loop's kernels split above a size)."""
        return max((n.type.size for n in self.comp.nodes if isinstance(n.type, TensorType)), default=0)

    @property
    def combine_kinds(self) -> tuple[str, ...]:
        """Per output, the reduce kind that combines partial results of a split reduction
        ("sum" for a contraction; "" for an output that is no reduction: a scatter's or a
        collective's ``kind`` is none)."""
        kinds = ("sum" if n.traits.contraction else str(n.attr.get("kind", "")) for n in self.outputs)
        return tuple(k if k in REDUCE_KINDS else "" for k in kinds)


class _Unsupported(BackendError):
    pass


class KernelEmitter:
    """Emits one kernel function into an LLVM module."""

    cur_level: int  # the loop level being emitted; set by each kernel form before its body

    def __init__(self, module: ir.Module, spec: KernelSpec) -> None:
        self.mod = module
        self.spec = spec
        self.fn = ir.Function(module, self.signature(), name=spec.name)
        self.bufs, self.o0, self.o1, self.i0, self.i1, self.r0, self.r1 = self.fn.args[:7]
        self.flat = spec.flat
        self.shape_of: Callable[[Node], tuple[int, ...]] = (
            (lambda n: (math.prod(n.shape),) if n.shape == spec.iter_shape else n.shape) if self.flat
            else (lambda n: n.shape))
        self.level: dict[int, int] = {}
        self.memo: list[dict] = [{}, {}, {}]
        self._const_ids = itertools.count()
        self.row_cache: dict[int, ir.Value] = {}  # node uid -> per-row stack buffer
        self.filling: int | None = None  # the cached node being computed by its fill loop
        self.row_idx: list[Index] = []

    def signature(self) -> ir.FunctionType:
        """The kernel's LLVM signature: ``SIG`` (a subclass may append arguments)."""
        return SIG

    # ------------------------------------------------------------------ index helpers
    def lv(self, v: Index) -> int:
        return 0 if isinstance(v, int) else self.level.get(id(v), 0)

    def _ix(self, build: Callable[[], ir.Value], *srcs: Index) -> ir.Value:
        """Emits index arithmetic where its inputs' loop level is open (the row or call
        preamble), so values hoisted there can use it; tags it with that level."""
        level = max((self.lv(x) for x in srcs), default=0)
        cur = getattr(self, "cur_level", level)
        if level < min(cur, 2):
            tail = self.tails[level]
            if not tail.is_terminated:
                saved = self.b.block
                self.b.position_at_end(tail)
                v = build()
                self.tails[level] = self.b.block
                self.b.position_at_end(saved)
                self.level[id(v)] = level
                return v
            level = cur  # cannot hoist it: pin it (and its users) here
        v = build()
        self.level[id(v)] = level
        return v

    def iv(self, v: Index) -> ir.Value:
        return ir.Constant(I64, v) if isinstance(v, int) else v

    def add(self, a: Index, c: Index) -> Index:
        if isinstance(a, int) and isinstance(c, int):
            return a + c
        if isinstance(c, int) and c == 0:
            return a
        if isinstance(a, int) and a == 0:
            return c
        return self._ix(lambda: self.b.add(self.iv(a), self.iv(c)), a, c)

    def mul(self, a: Index, c: int) -> Index:
        if isinstance(a, int):
            return a * c
        if c == 1:
            return a
        if c == 0:
            return 0
        return self._ix(lambda: self.b.mul(a, ir.Constant(I64, c)), a)

    def sub(self, a: Index, c: Index) -> Index:
        if isinstance(c, int):
            return self.add(a, -c)
        if isinstance(a, int):
            return self._ix(lambda: self.b.sub(ir.Constant(I64, a), c), c)
        return self._ix(lambda: self.b.sub(a, c), a, c)

    def div(self, a: Index, c: int) -> Index:
        if isinstance(a, int):
            return a // c
        return a if c == 1 else self._ix(lambda: self.b.udiv(a, ir.Constant(I64, c)), a)

    def rem(self, a: Index, c: int) -> Index:
        if isinstance(a, int):
            return a % c
        return 0 if c == 1 else self._ix(lambda: self.b.urem(a, ir.Constant(I64, c)), a)

    def _minmax(self, pred: str, a: Index, c: Index) -> Index:
        if isinstance(a, int) and isinstance(c, int):
            return min(a, c) if pred == "<" else max(a, c)
        b = self.b
        return self._ix(lambda: b.select(b.icmp_signed(pred, self.iv(a), self.iv(c)), self.iv(a), self.iv(c)), a, c)

    # The shared index algebra (axle.lowering.index) emitted as LLVM: index expressions
    # go through the helpers above, so they are folded and hoisted like every index.
    def ix_value(self, e: ix.Ix, env: dict[str, Index]) -> Index:
        """The index expression ``e`` over the coordinates named in ``env``. Comparisons
        and ``&&`` give i1 values (predicates for selects, never indices)."""
        if e.op == "const":
            return e.args[0]
        if e.op == "var":
            return env[e.args[0]]
        a, c = (self.ix_value(x, env) for x in e.args)
        return _IX_OPS[e.op](self, a, c)

    def ix_map(self, f: Callable[[list[ix.Ix]], R], idx: Sequence[Index]) -> tuple[R, dict[str, Index]]:
        """``f`` applied to ``idx`` as index-algebra variables (ints stay constants)."""
        env = {f"v{k}": v for k, v in enumerate(idx) if not isinstance(v, int)}
        return f([ix.const(v) if isinstance(v, int) else ix.var(f"v{k}") for k, v in enumerate(idx)]), env

    def linear(self, idx: Sequence[Index], shape: Sequence[int]) -> Index:
        e, env = self.ix_map(lambda c: ix.linearize(c, tuple(shape)), idx)
        return self.ix_value(e, env)

    def unravel(self, lin: Index, shape: Sequence[int]) -> list[Index]:
        es, env = self.ix_map(lambda c: ix.delinearize(c[0], tuple(shape)), [lin])
        return [self.ix_value(e, env) for e in es]

    # ------------------------------------------------------------------- loops & blocks
    def loop(self, lo: Index, hi: Index, body: Callable[[ir.Value], None], level: int, unroll: bool = True) -> None:
        """for v in [lo, hi): body(v) -- v tagged with ``level``; a fresh memo scope;
        ``unroll`` False keeps it a loop (``_rolled``)."""
        b = self.b
        # A loop emitted into an open preamble (a reduction hoisted to the row preamble)
        # keeps that preamble open in a block of its own before the loop, so values its
        # body hoists (e.g. the row max inside the loop summing exp(x - max)) still land
        # ahead of the loop rather than inside it.
        gap_level = next((lvl for lvl, t in self.tails.items() if t is b.block), None)
        if gap_level is not None:
            self.tails[gap_level] = self.fn.append_basic_block("pre")
            b.branch(self.tails[gap_level])
        pre = b.block
        cond = self.fn.append_basic_block("cond")
        bodyb = self.fn.append_basic_block("body")
        exit_ = self.fn.append_basic_block("exit")
        if gap_level is None:
            b.branch(cond)
        b.position_at_end(cond)
        v = b.phi(I64)
        b.cbranch(b.icmp_signed("<", v, self.iv(hi)), bodyb, exit_)
        b.position_at_end(bodyb)
        self.level[id(v)] = level
        self.memo.append({})
        body(v)
        self.memo.pop()
        nxt = b.add(v, ir.Constant(I64, 1))
        v.add_incoming(nxt, b.block)
        latch = b.branch(cond)
        if not unroll:
            _rolled(latch)
        if gap_level is not None:
            pre = self.tails[gap_level]  # hoisted code may have moved it on
            b.position_at_end(pre)
            b.branch(cond)
            self.tails[gap_level] = exit_
        v.add_incoming(self.iv(lo), pre)
        b.position_at_end(exit_)

    def entry_alloca(self, t: ir.Type) -> ir.Value:
        with self.b.goto_block(self.entry):
            self.b.position_at_start(self.entry)
            return self.b.alloca(t)

    # ------------------------------------------------------------------ memory access
    def buffer(self, k: int) -> ir.Value:
        if k not in self._bufptr:
            with self.b.goto_block(self.entry):
                self.b.position_at_start(self.entry)
                slot = self.b.gep(self.bufs, [ir.Constant(I64, k)], source_etype=PTR)
                ptr = self.b.load(slot, typ=PTR)
            self._bufptr[k] = ptr
        return self._bufptr[k]

    def load(self, ptr: ir.Value, dt: DType, lin: Index) -> ir.Value:
        st = STORAGE[dt]
        addr = self.b.gep(ptr, [self.iv(lin)], source_etype=st, inbounds=True)
        v = self.b.load(addr, typ=st)
        if dt is DType.BOOL:
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        if dt is DType.FLOAT16:
            return self.b.fpext(v, F32)
        if dt is DType.BFLOAT16:
            return bf16_to_f32(self.b, v)
        return v

    def store(self, ptr: ir.Value, dt: DType, lin: Index, v: ir.Value) -> None:
        st = STORAGE[dt]
        if dt is DType.BOOL:
            v = self.b.zext(v, I8)
        elif dt is DType.FLOAT16:
            v = self.b.fptrunc(v, F16)
        elif dt is DType.BFLOAT16:
            v = f32_to_bf16(self.b, v)
        addr = self.b.gep(ptr, [self.iv(lin)], source_etype=st, inbounds=True)
        self.b.store(v, addr)

    def round16(self, v: ir.Value, dt: DType = DType.FLOAT16) -> ir.Value:
        """A float32 rounded to the 16-bit float ``dt`` and back (every f16/bf16 op rounds once)."""
        if dt is DType.BFLOAT16:
            return bf16_to_f32(self.b, f32_to_bf16(self.b, v))
        return self.b.fpext(self.b.fptrunc(v, F16), F32)

    # ------------------------------------------------------------------------ values
    def value(self, n: Node, idx: Sequence[Index]) -> ir.Value:
        key = (n.uid, tuple(v if isinstance(v, int) else id(v) for v in idx))
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        level = max((self.lv(v) for v in idx), default=0)
        if level < 2 and level < self.cur_level and not self.tails[level].is_terminated:
            # Loop-invariant: emit once, in the preamble of its level.
            saved, saved_level, saved_memo = self.b.block, self.cur_level, self.memo
            self.b.position_at_end(self.tails[level])
            self.cur_level, self.memo = level, self.memo[: level + 1]
            try:
                v = self._emit(n, idx)
            finally:
                self.tails[level] = self.b.block
                self.b.position_at_end(saved)
                self.cur_level, self.memo = saved_level, saved_memo
            self.memo[level][key] = v
            return v
        cache = self.row_cache.get(n.uid)
        if cache is not None and n.uid != self.filling and self._row_index(idx[:-1]):
            # Computed once per row, by the fill loop at the head of the row preamble.
            v = self.b.load(self.b.gep(cache, [ir.Constant(I64, 0), self.iv(idx[-1])], inbounds=True),
                            typ=COMPUTE[n.dtype])
        else:
            v = self._emit(n, idx)
        self.memo[-1][key] = v
        return v

    def _row_index(self, idx: Sequence[Index]) -> bool:
        """Whether ``idx`` is exactly the kernel's current row (its outer indices)."""
        return len(idx) == len(self.row_idx) and all(
            a is c if not isinstance(a, int) else a == c for a, c in zip(idx, self.row_idx))

    #: bytes of stack a row cache may take (per cached value)
    ROW_CACHE_BYTES = 64 << 10

    def _plan_row_cache(self) -> None:
        """Values that a row fusion needs twice per element: inside a reduction over the
        row (softmax's sum of exp) and again for the full-shape outputs (exp / sum). An
        expensive one (a transcendental function in its inlined expression) is computed
        once per row into a stack buffer by a fill loop at the head of the row preamble
        (before anything that reads it), and loaded wherever the current row needs it."""
        spec = self.spec
        shape = spec.iter_shape
        if self.flat or spec.split_reduce_size or all(isinstance(v, int) for v in self.row_idx):
            return  # (a single row: its reductions are hoisted out of the row loop, ahead of any fill)

        def chain(roots: Sequence[Node]) -> set[int]:
            seen: set[int] = set()
            stack = [r for r in roots if r.shape == shape]
            while stack:
                n = stack.pop()
                if n.uid in seen:
                    continue
                seen.add(n.uid)
                if n.op is Op.PARAMETER or not (n.traits.elementwise or n.op is Op.CONVERT):
                    continue
                stack.extend(o for o in n.operands if o.shape == shape)
            return seen

        last = len(shape) - 1
        in_reductions = chain([n.operands[0] for n in spec.comp.nodes
                               if n.op is Op.REDUCE and tuple(n.attr["axes"]) == (last,)])
        in_outputs = chain(spec.outputs)
        if shape[-1] * 8 > self.ROW_CACHE_BYTES:  # 8: the widest register type
            return
        expensive: dict[int, bool] = {}

        def costly(n: Node) -> bool:
            """A transcendental function recomputed inline (a cached value is a load)."""
            if n.uid not in expensive:
                expensive[n.uid] = n.op is not Op.REDUCE and n.uid not in self.row_cache and (
                    bool(n.traits.transcendental) or any(costly(o) for o in n.operands if o.shape == shape))
            return expensive[n.uid]

        for n in spec.comp.nodes:  # in topological order: a producer is cached before its users
            if n.uid in in_reductions and n.uid in in_outputs and n.op is not Op.PARAMETER and costly(n):
                self.row_cache[n.uid] = self.entry_alloca(ir.ArrayType(COMPUTE[n.dtype], shape[-1]))
                expensive.clear()
        nodes = {n.uid: n for n in spec.comp.nodes}
        for uid, cache in self.row_cache.items():
            def fill(j: ir.Value, uid: int = uid, cache: ir.Value = cache) -> None:
                self.filling = uid
                v = self.value(nodes[uid], [*self.row_idx, j])
                self.filling = None
                self.b.store(v, self.b.gep(cache, [ir.Constant(I64, 0), j], inbounds=True))

            saved = self.cur_level
            self.cur_level = 3
            self.loop(0, shape[-1], fill, level=3)
            self.cur_level = saved

    def _emit(self, n: Node, idx: Sequence[Index]) -> ir.Value:
        if 0 in n.shape:
            # An empty array is never read at run time (its loops run zero times); any
            # value keeps the dead code well-formed.
            return const(n.dtype, 0)
        rule = LOWERING.get(n.op)
        if rule is None:
            raise BackendError(f"cpu: no LLVM lowering for {n.op.value} ({n.type})", where=n.loc)
        v = rule(self, n, idx)
        if n.dtype.is_half and n.op not in (Op.PARAMETER, Op.CONSTANT):
            v = self.round16(v, n.dtype)
        return v

    # ------------------------------------------------------------------------ driver
    def build(self) -> ir.Function:
        spec = self.spec
        self.fn.attributes.add("nounwind")
        self.entry = self.fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self._bufptr: dict[int, ir.Value] = {}
        if spec.column_reduce:
            return self.build_columns()
        if spec.kind == "update":
            return build_update(self)
        ocond = self.fn.append_basic_block("outer.cond")
        obody = self.fn.append_basic_block("outer.body")
        icond = self.fn.append_basic_block("inner.cond")
        ibody = self.fn.append_basic_block("inner.body")
        ilatch = self.fn.append_basic_block("inner.latch")
        olatch = self.fn.append_basic_block("outer.latch")
        ret = self.fn.append_basic_block("ret")
        b = self.b
        b.position_at_end(ocond)
        o = b.phi(I64)
        b.cbranch(b.icmp_signed("<", o, self.o1), obody, ret)
        b.position_at_end(icond)
        i = b.phi(I64)
        i0, i1 = ((ir.Constant(I64, 0), ir.Constant(I64, spec.iter_shape[-1])) if spec.fixed_columns
                  else (self.i0, self.i1))
        b.cbranch(b.icmp_signed("<", i, i1), ibody, olatch)
        self.level[id(o)] = 1
        self.level[id(i)] = 2
        self.tails = {0: self.entry, 1: obody}
        # Row index of the outer loop, unravelled once per row in the preamble.
        shape = spec.iter_shape
        b.position_at_end(obody)
        self.cur_level = 1
        if self.flat:
            idx: list[Index] = [i]
        elif not shape:
            idx = []
        else:
            idx = self.unravel(o, shape[:-1]) + [i]
        if idx and spec.loop_sizes[1] == 1:
            # A column loop of one element only ever runs i = 0: say so, so that what
            # depends on the element index alone is hoisted out of the loops. Left inside,
            # LLVM sees it as uniform work it cannot hoist (the output store may alias
            # its loads), and its loop vectorizer takes time exponential in the depth of
            # such a chain where a value is used twice (x*x: 26 squarings took 3.5 s).
            idx[-1] = 0
        self.row_idx = idx[:-1]
        self.tails[1] = b.block
        self._plan_row_cache()
        b.position_at_end(ibody)
        self.cur_level = 2
        nin = len(spec.comp.parameters)
        for k, out in enumerate(spec.outputs):
            oshape = self.shape_of(out)
            oidx = self.output_index(idx, oshape)
            val = self.value(out, oidx)
            lvl = max((self.lv(v) for v in oidx), default=0)
            if lvl < 2:  # a per-row output of a row fusion: store it once per row
                saved = b.block
                b.position_at_end(self.tails[lvl])
                self.store(self.buffer(nin + k), out.dtype, self.linear(oidx, oshape), val)
                self.tails[lvl] = b.block
                b.position_at_end(saved)
            else:
                self.store(self.buffer(nin + k), out.dtype, self.linear(oidx, oshape), val)
        b.branch(ilatch)
        b.position_at_end(ilatch)
        inext = b.add(i, ir.Constant(I64, 1))
        b.branch(icond)
        i.add_incoming(inext, ilatch)
        return self._finish(o, ocond, olatch, ret, i, icond, i0)

    def output_index(self, idx: list[Index], oshape: tuple[int, ...]) -> list[Index]:
        """The index into an output of shape ``oshape`` at the walked index ``idx``.

        An output of the walked shape takes ``idx``. Any other is a row fusion's per-row
        output: its elements are the rows of a leading part ``S[:k]`` of the walked shape
        ``S`` in row-major order, in any arrangement of unit dims (``[3]``, ``[3,1]``,
        ``[1,3]`` for the rows of ``[3,4]``; docs/ir.md, "Fusions"), so its non-unit dims
        take the non-unit row indices in order and its unit dims 0. Taking a prefix of
        ``idx`` instead would address ``[1,3]`` as ``[row, 0]``: out of bounds."""
        shape = self.spec.iter_shape if not self.flat else (math.prod(self.spec.iter_shape),)
        if tuple(oshape) == tuple(shape):
            return idx
        k = next((k for k in range(len(shape) + 1) if math.prod(shape[:k]) == math.prod(oshape)), None)
        rows = [v for v, d in zip(idx[:k or 0], shape) if d != 1]
        if k is None or [d for d in shape[:k] if d != 1] != [d for d in oshape if d != 1]:
            raise BackendError(f"cpu: kernel {self.spec.name}: output {list(oshape)} is neither the walked shape "
                               f"{list(shape)} nor one element per row of it")
        it = iter(rows)
        return [next(it) if d != 1 else 0 for d in oshape]

    def _finish(self, o: ir.Value, ocond: ir.Block, olatch: ir.Block, ret: ir.Block,
                i: ir.Value, icond: ir.Block, i0: ir.Value) -> ir.Function:
        """Ends the outer loop ``o`` and the function, then closes the preambles, now that
        everything hoisted into them is emitted: the entry enters the outer loop, the row
        preamble enters the column loop ``i`` (from ``i0``)."""
        b = self.b
        b.position_at_end(olatch)
        onext = b.add(o, ir.Constant(I64, 1))
        b.branch(ocond)
        b.position_at_end(ret)
        b.ret_void()
        b.position_at_end(self.tails[0])
        b.branch(ocond)
        o.add_incoming(self.o0, self.tails[0])
        o.add_incoming(onext, olatch)
        b.position_at_end(self.tails[1])
        b.branch(icond)
        i.add_incoming(i0, self.tails[1])
        return self.fn

    #: columns accumulated per pass of a column reduction (accumulators on the stack)
    COLUMN_CHUNK = 512

    def build_columns(self) -> ir.Function:
        """A column reduction: for each output row, for each chunk of (up to COLUMN_CHUNK)
        columns, accumulators are set to the identity, then the reduced axes are walked
        with the chunk's columns innermost (contiguous, vectorized), then stored. ``[r0,
        r1)`` restricts the first reduced axis, as in every reduction kernel."""
        spec, b = self.spec, self.b
        outs = spec.outputs
        xshape = outs[0].operands[0].shape
        axes = tuple(sorted(outs[0].attr["axes"]))
        kept = [d for d in range(len(xshape)) if d not in axes]  # the last one is the column
        oshape = outs[0].shape
        nin = len(spec.comp.parameters)
        accs = []
        for out in outs:
            dt = out.operands[0].dtype
            arr = ir.ArrayType(COMPUTE[dt], self.COLUMN_CHUNK)
            accs.append((self.entry_alloca(arr), COMPUTE[dt], dt))
        self.tails = {0: self.entry}
        self.cur_level = 1
        # Open preamble blocks (entry, row) are closed at the end, as in build().
        ocond = self.fn.append_basic_block("outer.cond")
        b.position_at_end(ocond)
        o = b.phi(I64)
        self.level[id(o)] = 1
        rowpre = self.fn.append_basic_block("row.pre")
        ret = self.fn.append_basic_block("ret")
        b.cbranch(b.icmp_signed("<", o, self.o1), rowpre, ret)
        self.tails[1] = rowpre
        ccond = self.fn.append_basic_block("chunk.cond")
        b.position_at_end(ccond)
        c0 = b.phi(I64)
        self.level[id(c0)] = 2
        cbody = self.fn.append_basic_block("chunk.body")
        olatch = self.fn.append_basic_block("outer.latch")
        b.cbranch(b.icmp_signed("<", c0, self.i1), cbody, olatch)
        b.position_at_end(cbody)
        self.cur_level = 2
        rest = b.sub(self.i1, c0)
        chunk = ir.Constant(I64, self.COLUMN_CHUNK)
        ch = b.select(b.icmp_signed("<", rest, chunk), rest, chunk)
        self.level[id(ch)] = 2
        orow = self.unravel(o, oshape[:-1]) if len(oshape) > 1 else []

        def slot(acc: ir.Value, c: ir.Value) -> ir.Value:
            return b.gep(acc, [ir.Constant(I64, 0), c], inbounds=True)  # typed: the alloca's array

        def init(c: ir.Value) -> None:
            for (acc, _t, dt), out in zip(accs, outs):
                ident = REDUCE_KINDS[out.attr["kind"]].identity(dt)
                b.store(const(dt, ident.item() if hasattr(ident, "item") else ident), slot(acc, c))

        self.loop(0, ch, init, level=2)
        full: list[Index] = [0] * len(xshape)
        for d, v in zip(kept[:-1], orow):
            full[d] = v
        depth = 3 + len(axes)

        def nest(k: int) -> None:
            if k == len(axes):
                def column(c: ir.Value) -> None:
                    full[kept[-1]] = self.add(c0, c)
                    for (acc, t, dt), out in zip(accs, outs):
                        v = self.value(out.operands[0], full)
                        p = slot(acc, c)
                        b.store(combine(self, out.attr["kind"], dt, b.load(p, typ=t), v), p)

                self.loop(0, ch, column, level=2)
                return
            ax = axes[k]
            lo: Index = 0
            hi: Index = xshape[ax]
            if k == 0:
                lo = self.r0
                hi = b.select(b.icmp_signed("<", self.r1, ir.Constant(I64, xshape[ax])), self.r1,
                              ir.Constant(I64, xshape[ax]))

            def body(v: ir.Value) -> None:
                full[ax] = v
                nest(k + 1)

            self.loop(lo, hi, body, level=3 + k)

        self.cur_level = depth
        nest(0)
        self.cur_level = 2

        def store(c: ir.Value) -> None:
            col = self.add(c0, c)
            for k, ((acc, t, _dt), out) in enumerate(zip(accs, outs)):
                lin = self.linear([*orow, col], oshape)
                self.store(self.buffer(nin + k), out.dtype, lin, b.load(slot(acc, c), typ=t))

        self.loop(0, ch, store, level=2)
        c0next = b.add(c0, chunk)
        b.branch(ccond)
        c0.add_incoming(c0next, b.block)
        return self._finish(o, ocond, olatch, ret, c0, ccond, self.i0)

    # ------------------------------------------------------------------- constants
    def global_array(self, arr: np.ndarray, dt: DType) -> ir.Value:
        st = STORAGE[dt]
        vals = storage_consts(arr, dt)
        at = ir.ArrayType(st, len(vals))
        g = ir.GlobalVariable(self.mod, at, name=f"{self.spec.name}.c{next(self._const_ids)}")
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(at, vals)
        g.align = 64
        return g


# ============================================================== the lowering table


def _param(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    k = n.attr["index"]
    return em.load(em.buffer(k), n.dtype, em.linear(idx, em.shape_of(n)))


def _constant(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    arr = n.attr["value"].array
    if arr.size == 1:
        return const(n.dtype, arr.reshape(-1)[0].item())
    g = em.global_array(arr, n.dtype)
    return em.load(g, n.dtype, em.linear(idx, em.shape_of(n)))


def _iota(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    return _from_i64(em, em.iv(idx[n.attr["dimension"]]), n.dtype)


def _from_i64(em: KernelEmitter, v: ir.Value, dt: DType) -> ir.Value:
    b = em.b
    if dt.is_float:
        return b.sitofp(v, COMPUTE[dt])
    if dt is DType.BOOL:
        return b.icmp_signed("!=", v, ir.Constant(I64, 0))
    t = COMPUTE[dt]
    return b.trunc(v, t) if t.width < 64 else v


def _movement(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    """Broadcast, reshape, transpose, slice, reverse: the shared index maps."""
    x = n.operands[0]
    if n.op is Op.RESHAPE:  # in the kernel's (possibly flattened) shapes
        es, env = em.ix_map(lambda c: ix.reshape_index(c, em.shape_of(n), em.shape_of(x)), idx)
    else:
        es, env = em.ix_map(lambda c: ix.MOVEMENT[n.op](n, c), idx)
    return em.value(x, [em.ix_value(e, env) for e in es])


def _pad(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    x, pv = n.operands
    padv = em.value(pv, [])
    if 0 in x.shape:
        return padv
    a = n.attr
    (coords, inside), env = em.ix_map(lambda c: ix.pad_index(c, x.shape, a["low"], a["high"], a["interior"]), idx)
    if inside.const == 0:
        return padv
    val = em.value(x, [em.ix_value(e, env) for e in coords])
    # every coordinate is clamped in bounds: load, then select (branch-free, vectorizes)
    return val if inside.const == 1 else em.b.select(em.ix_value(inside, env), val, padv)


def _concatenate(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    pieces, env = em.ix_map(lambda c: ix.concatenate_pieces(c, n.attr["dimension"], [o.shape for o in n.operands]), idx)
    live = []
    for k, coords, pred in pieces:
        if pred.const == 0:
            continue  # known to lie past this piece
        live.append((k, coords, pred))
        if pred.const == 1:
            break  # known to lie in this piece: later ones are never read
    assert live, "concatenate of empty parts has no elements to compute"
    # Every piece read at a clamped index, the right one picked by selects: branch-free,
    # so a loop over a concatenation still vectorizes.
    k, coords, _ = live[-1]
    acc = em.value(n.operands[k], [em.ix_value(e, env) for e in coords])
    for k, coords, pred in reversed(live[:-1]):
        val = em.value(n.operands[k], [em.ix_value(e, env) for e in coords])
        acc = em.b.select(em.ix_value(pred, env), val, acc)
    return acc


def _rng(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    b = em.b
    key = em.value(n.operands[0], [])
    lin = em.iv(em.add(em.linear(idx, em.shape_of(n)), 1))

    def c(v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    z = b.add(key, b.mul(lin, c(0x9E3779B97F4A7C15 - 2**64)))
    z = b.mul(b.xor(z, b.lshr(z, c(30))), c(0xBF58476D1CE4E5B9 - 2**64))
    z = b.mul(b.xor(z, b.lshr(z, c(27))), c(0x94D049BB133111EB - 2**64))
    z = b.xor(z, b.lshr(z, c(31)))
    if n.dtype is DType.INT32:
        return b.trunc(b.lshr(z, c(32)), I32)
    return z


# -- bfloat16 -----------------------------------------------------------------------


def bf16_to_f32(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """bfloat16 bits (i16) to the float32 they are the top half of: exact."""
    return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)


def f32_to_bf16(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """float32 to bfloat16 bits, rounded to nearest even (as ml_dtypes and the interpreter):
    add 0x7FFF plus the kept lowest bit and drop the low half; a carry into the exponent
    gives the next binade or inf, as it should. NaN stays a (quiet) NaN: rounding could
    carry its payload into inf or drop it to inf."""
    bits = b.bitcast(v, I32)
    hi = b.lshr(bits, ir.Constant(I32, 16))
    lsb = b.and_(hi, ir.Constant(I32, 1))
    rounded = b.lshr(b.add(bits, b.add(lsb, ir.Constant(I32, 0x7FFF))), ir.Constant(I32, 16))
    nan = b.fcmp_unordered("uno", v, v)
    return b.trunc(b.select(nan, b.or_(hi, ir.Constant(I32, 0x40)), rounded), I16)


# -- reductions and contractions --------------------------------------------------


#: reduction combiners by the reduce kind's combining op; float sums and products may be
#: reassociated (the loop vectorizer needs it), so they are not the elementwise ops' code
_COMBINE: dict[Op, Callable[[KernelEmitter, DType, ir.Value, ir.Value], ir.Value]] = {
    Op.ADD: lambda em, dt, a, v: em.b.fadd(a, v, flags=("reassoc", "contract")) if dt.is_float else (
        em.b.or_(a, v) if dt.is_bool else em.b.add(a, v)),
    Op.MUL: lambda em, dt, a, v: em.b.fmul(a, v, flags=("reassoc", "contract")) if dt.is_float else (
        em.b.and_(a, v) if dt.is_bool else em.b.mul(a, v)),
    Op.AND: lambda em, dt, a, v: em.b.and_(a, v),
    Op.OR: lambda em, dt, a, v: em.b.or_(a, v),
    Op.MAX: lambda em, dt, a, v: _maxmin(em, dt, a, v, True),
    Op.MIN: lambda em, dt, a, v: _maxmin(em, dt, a, v, False),
}


def combine(em: KernelEmitter, kind: str, dt: DType, acc: ir.Value, v: ir.Value) -> ir.Value:
    return _COMBINE[REDUCE_KINDS[kind].combiner](em, dt, acc, v)


def _maxmin(em: KernelEmitter, dt: DType, x: ir.Value, y: ir.Value, is_max: bool) -> ir.Value:
    b = em.b
    if dt is DType.BOOL:
        return b.or_(x, y) if is_max else b.and_(x, y)
    if dt.is_int:
        return b.select(_icmp_for(dt)(b, ">" if is_max else "<", x, y), x, y)
    # NaN-propagating, as NumPy's maximum/minimum: llvm.maximum/minimum, which the loop
    # vectorizer also recognizes as a reduction (vmaxps plus NaN fix-ups).
    return mathfns.intrinsic(b, f"llvm.{'maximum' if is_max else 'minimum'}.{suffix(x.type)}", x.type, [x, y])


#: a reduction over at most this many elements (LLVM unrolls its loop fully) keeps
#: SHORT_LANES accumulators, so its unrolled chain is that many times shorter
SHORT_REDUCTION = 64
SHORT_LANES = 8
#: a reduction over more vectors than the registers hold, up to ROLLED_MAX_VECTORS (what
#: LLVM unrolls whole), stays a loop of ROLLED_INTERLEAVE vector accumulators (``_rolled``)
ROLLED_MAX_VECTORS = 64
ROLLED_INTERLEAVE = 4
#: vector registers per vector width in bits (x86: AVX-512 has 32, AVX2 and SSE 16)
REGISTERS = {512: 32, 256: 16, 128: 16}


def rolled_row(nbytes: int) -> bool:
    """Whether a reduction over ``nbytes`` stays a loop (``_rolled``): from as many bytes
    as the host's vector registers hold (2 KB with AVX-512, 512 bytes with AVX2) to
    ROLLED_MAX_VECTORS vectors (4 KB, 2 KB). Longer ones LLVM does not unroll whole, and
    hints there measured no better or a little worse (float64 rows of 1024)."""
    bits = host().vector_bits
    return REGISTERS.get(bits, 16) * bits // 8 <= nbytes <= ROLLED_MAX_VECTORS * bits // 8


def no_unroll(latch: ir.Instruction) -> None:
    """Marks a loop (its latch branch) not to be unrolled: every GEMM loop has a long
    straight-line body (or is not hot), and unrolling them was most of the compile time."""
    _loop_hints(latch, "_axle_no_unroll", [])


def _rolled(latch: ir.Instruction) -> None:
    """Marks a long row reduction's loop to stay a loop of ROLLED_INTERLEAVE vector
    accumulators (``rolled_row``). Unrolled whole (its trip count is a constant), the
    row's loads were shared with the next pass over the row (layer norm: the mean, then
    the variance; softmax: the max, then the sum), more vectors than registers, spilled to
    the stack on every row. One thread, CPU time, best of 12-15 (2-core Zen 5, AVX-512,
    loaded): layer norm [8192, 1024] f32 2.83 -> 2.09 ms (the C loop 1.9), row softmax
    [4096, 1024] f32 2.57 -> 1.68 ms, layer norm [8192, 256] f64 1.5 -> 0.72 ms and
    [4096, 512] f64 1.1 -> 0.78 ms; shorter rows (softmax [16384, 128]) and longer ones
    (layer norm [2048, 1024] f64, [4096, 2048] f32) are as before."""
    mod = latch.parent.parent.module
    _loop_hints(latch, "_axle_rolled", [mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.interleave.count"),
                                                          ir.Constant(I32, ROLLED_INTERLEAVE)])])


def _loop_hints(latch: ir.Instruction, attr: str, extra: list) -> None:
    """Sets the loop's ``llvm.loop`` metadata: unrolling disabled, and ``extra`` hints (one
    node per module and ``attr``, where it is kept)."""
    mod = latch.parent.parent.module
    md = getattr(mod, attr, None)
    if md is None:
        md = mod.add_metadata([mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.unroll.disable")]), *extra])
        md.operands = (md, *md.operands)  # a loop ID refers to itself
        setattr(mod, attr, md)
    latch.set_metadata("llvm.loop", md)


def _reduce(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    x = n.operands[0]
    kind, axes = n.attr["kind"], tuple(sorted(n.attr["axes"]))
    dt = x.dtype
    ident = const(dt, (lambda v: v.item() if hasattr(v, "item") else v)(REDUCE_KINDS[kind].identity(dt)))
    acc_t = COMPUTE[dt]
    kept = iter(idx)
    full: list[Index] = [0 if d in axes else next(kept) for d in range(len(x.shape))]
    is_root = n in em.spec.outputs and em.spec.split_reduce_size > 0
    level0 = em.cur_level
    count = math.prod(x.shape[a] for a in axes)
    # A short reduction is unrolled by LLVM into one dependent chain of combines (a scalar
    # max costs ~8 cycles of latency each): spread it over independent accumulators, one
    # per element index mod `lanes`, combined as a tree at the end.
    lanes = 1
    if count <= SHORT_REDUCTION and not is_root and len(axes) == 1:
        while lanes < SHORT_LANES and 2 * lanes <= count // 2:
            lanes *= 2
    acc = em.entry_alloca(ir.ArrayType(acc_t, lanes))
    zero = ir.Constant(I64, 0)
    for k in range(lanes):
        em.b.store(ident, em.b.gep(acc, [zero, ir.Constant(I64, k)], inbounds=True))

    def nest(k: int) -> None:
        if k == len(axes):
            v = em.value(x, full)
            lane = em.b.and_(em.iv(full[axes[-1]]), ir.Constant(I64, lanes - 1)) if lanes > 1 else zero
            slot = em.b.gep(acc, [zero, lane], inbounds=True)
            em.b.store(combine(em, kind, dt, em.b.load(slot, typ=acc_t), v), slot)
            return
        ax = axes[k]
        lo: Index = 0
        hi: Index = x.shape[ax]
        if k == 0 and is_root:
            lo = em.r0
            hi = em.b.select(em.b.icmp_signed("<", em.r1, ir.Constant(I64, x.shape[ax])), em.r1,
                             ir.Constant(I64, x.shape[ax]))

        def body(v: ir.Value) -> None:
            full[ax] = v
            nest(k + 1)

        # a reduction over a long row stays a loop (rolled_row); a short one is unrolled (SHORT_LANES)
        em.loop(lo, hi, body, level=max(level0, 2) + k + 1, unroll=not rolled_row(count * dt.np.itemsize))

    saved = em.cur_level
    em.cur_level = max(saved, 2) + 1
    nest(0)
    em.cur_level = saved
    parts = [em.b.load(em.b.gep(acc, [zero, ir.Constant(I64, k)], inbounds=True), typ=acc_t) for k in range(lanes)]
    while len(parts) > 1:
        parts = [combine(em, kind, dt, parts[k], parts[k + 1]) for k in range(0, len(parts), 2)]
    return parts[0]


def _dot(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    lhs, rhs = n.operands
    dims = DotDims.of(n)
    lc, rc = dims.lhs_contracting, dims.rhs_contracting
    li, ri = dims.operand_indices(idx, [0] * len(lc), len(lhs.shape), len(rhs.shape))
    dt = n.dtype
    # float32/float16 products are accumulated in double: the result then differs from
    # the exact dot only by its final rounding, whatever the contraction length.
    wide = dt in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
    acc_dt = DType.FLOAT64 if wide else dt
    acc_t = COMPUTE[acc_dt]
    acc = em.entry_alloca(acc_t)
    em.b.store(const(acc_dt, 0), acc)
    level0 = em.cur_level

    def nest(k: int) -> None:
        if k == len(lc):
            x, y = em.value(lhs, li), em.value(rhs, ri)
            if lhs.dtype is not dt:  # preferred_element_type: widen the operands exactly first
                x, y = convert_value(em.b, x, lhs.dtype, dt), convert_value(em.b, y, rhs.dtype, dt)
            if wide:
                x, y = em.b.fpext(x, acc_t), em.b.fpext(y, acc_t)
            p = em.b.fmul(x, y) if dt.is_float else em.b.mul(x, y)
            em.b.store(combine(em, "sum", acc_dt, em.b.load(acc, typ=acc_t), p), acc)
            return

        def body(v: ir.Value) -> None:
            li[lc[k]] = v
            ri[rc[k]] = v
            nest(k + 1)

        em.loop(0, lhs.shape[lc[k]], body, level=max(level0, 2) + k + 1)

    saved = em.cur_level
    em.cur_level = max(saved, 2) + 1
    nest(0)
    em.cur_level = saved
    r = em.b.load(acc, typ=acc_t)
    return em.b.fptrunc(r, COMPUTE[dt]) if wide else r



# -- windowed reductions ------------------------------------------------------------


#: a window's float sums and products combine in row-major window order, unreassociated,
#: as the reference does (a window is short: nothing to vectorize along it)
_IN_ORDER: dict[Op, Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]] = {
    Op.ADD: ir.IRBuilder.fadd, Op.MUL: ir.IRBuilder.fmul}


def _load_if(em: KernelEmitter, pred: ir.Value, x: Node, lin: Index, other: ir.Value) -> ir.Value:
    """Parameter ``x`` at ``lin`` where ``pred`` holds, else ``other``: the load in a block
    of its own (the loop vectorizer makes it a masked load whose addresses stay contiguous,
    where a clamped index would need a gather)."""
    b = em.b
    start = b.block
    then, join = em.fn.append_basic_block("window.in"), em.fn.append_basic_block("window.join")
    b.cbranch(pred, then, join)
    b.position_at_end(then)
    v = em.load(em.buffer(x.attr["index"]), x.dtype, lin)
    b.branch(join)
    b.position_at_end(join)
    phi = b.phi(v.type)
    phi.add_incoming(v, then)
    phi.add_incoming(other, start)
    for level, tail in list(em.tails.items()):  # a preamble being emitted goes on in `join`
        if tail is start:
            em.tails[level] = join
    return phi


#: windows of up to this many positions are unrolled here (straight-line code: the loop
#: over output columns around it vectorizes); bigger ones get a loop per window dim
UNROLL_WINDOW = 64


def _reduce_window(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    """One output element: the window positions in row-major order (unrolled up to
    UNROLL_WINDOW positions, else a loop per window dim of size > 1), each reading the
    operand through the dilated, padded view's bounds checks (a clamped load, then a
    select: a hole or padding cell gives the kind's identity, as the reference pads with
    it; the checks of the outer dims are hoisted to the row). float16/bfloat16 sums and
    products accumulate in float32 and round once (_emit), as the reference does."""
    x = n.operands[0]
    a = n.attr
    rk = REDUCE_KINDS[a["kind"]]
    dt, acc_dt = x.dtype, rk.accumulator(x.dtype)
    ident = const(dt, rk.identity(dt).item())  # the padding value, in the operand's dtype
    if 0 in x.shape:  # every window reads padding only
        return ident
    in_order = _IN_ORDER.get(rk.combiner) if acc_dt.is_float else None

    def step(acc: ir.Value, pos: Sequence[Index]) -> ir.Value:
        (coords, inside), env = em.ix_map(
            lambda c: ix.reduce_window_index(c[:len(idx)], c[len(idx):], x.shape, a), [*idx, *pos])
        if inside.const == 0:
            v = ident
        elif inside.const == 1:
            v = em.value(x, [em.ix_value(e, env) for e in coords])
        elif x.op is Op.PARAMETER and not em.flat:
            src, _ = em.ix_map(lambda c: ix.reduce_window_source(c[:len(idx)], c[len(idx):], a), [*idx, *pos])
            v = _load_if(em, em.ix_value(inside, env), x, em.linear([em.ix_value(e, env) for e in src], x.shape),
                         ident)
        else:
            v = em.b.select(em.ix_value(inside, env), em.value(x, [em.ix_value(e, env) for e in coords]), ident)
        return in_order(em.b, acc, v) if in_order else combine(em, a["kind"], acc_dt, acc, v)

    win = a["window_dimensions"]
    if math.prod(win) <= UNROLL_WINDOW:
        acc = ident
        for pos in itertools.product(*(range(k) for k in win)):
            acc = step(acc, pos)
        return acc
    acc_t = COMPUTE[acc_dt]
    slot = em.entry_alloca(acc_t)
    em.b.store(ident, slot)
    at: list[Index] = [0] * len(win)
    level0 = em.cur_level
    depth = max(level0, 2)

    def nest(k: int) -> None:
        if k == len(win):
            em.b.store(step(em.b.load(slot, typ=acc_t), at), slot)
        elif win[k] == 1:
            nest(k + 1)
        else:
            def body(v: ir.Value) -> None:
                at[k] = v
                nest(k + 1)

            em.loop(0, win[k], body, level=depth + k + 1)

    em.cur_level = depth + 1
    try:
        nest(0)
    finally:
        em.cur_level = level0
    return em.b.load(slot, typ=acc_t)


# -- elementwise ------------------------------------------------------------------


def _ew(fn: Callable[[KernelEmitter, DType, list[ir.Value]], ir.Value]) -> Callable[..., ir.Value]:
    def rule(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
        args = [em.value(o, idx) for o in n.operands]
        return fn(em, n.operands[0].dtype, args) if n.op is not Op.SELECT else fn(em, n.dtype, args)

    return rule


def _arith(fop: str, iop: str, bop: str | None = None) -> Callable[..., ir.Value]:
    def f(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
        b = em.b
        if dt.is_float:
            return getattr(b, fop)(*a)
        if dt.is_bool and bop:
            return getattr(b, bop)(*a)
        return getattr(b, iop)(*a)

    return _ew(f)


def _int_div(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    b = em.b
    x, y = a
    if dt.is_float:
        return b.fdiv(x, y)
    t = COMPUTE[dt]
    zero = b.icmp_signed("==", y, ir.Constant(t, 0))
    if dt.is_unsigned:  # x/0 is all ones (XLA); no overflow case
        return b.select(zero, ir.Constant(t, -1), b.udiv(x, b.select(zero, ir.Constant(t, 1), y)))
    mn = ir.Constant(t, -(2 ** (t.width - 1)))
    ovf = b.and_(b.icmp_signed("==", x, mn), b.icmp_signed("==", y, ir.Constant(t, -1)))
    safe = b.select(b.or_(zero, ovf), ir.Constant(t, 1), y)
    q = b.sdiv(x, safe)
    q = b.select(zero, ir.Constant(t, -1), q)
    return b.select(ovf, mn, q)


def _int_rem(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    b = em.b
    x, y = a
    if dt.is_float:
        return b.frem(x, y)
    t = COMPUTE[dt]
    zero = b.icmp_signed("==", y, ir.Constant(t, 0))
    if dt.is_unsigned:  # x % 0 = x
        return b.select(zero, x, b.urem(x, b.select(zero, ir.Constant(t, 1), y)))
    m1 = b.icmp_signed("==", y, ir.Constant(t, -1))
    r = b.srem(x, b.select(b.or_(zero, m1), ir.Constant(t, 1), y))
    r = b.select(m1, ir.Constant(t, 0), r)
    return b.select(zero, x, r)


def _pow(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    b = em.b
    x, y = a
    if dt.is_float:
        return mathfns.intrinsic(b, f"llvm.pow.{'f32' if x.type == F32 else 'f64'}", x.type, [x, y])
    t = COMPUTE[dt]
    one, zero = ir.Constant(t, 1), ir.Constant(t, 0)
    if dt.is_unsigned:  # no negative exponents
        return _ipow_loop(em, x, y)
    neg = b.icmp_signed("<", y, zero)
    result = _ipow_loop(em, x, b.select(neg, zero, y))
    yodd = b.icmp_unsigned("!=", b.and_(y, one), zero)
    negval = b.select(b.icmp_signed("==", x, one), one,
                      b.select(b.icmp_signed("==", x, ir.Constant(t, -1)), b.select(yodd, ir.Constant(t, -1), one),
                               zero))
    return b.select(neg, negval, result)


def _ipow_loop(em: KernelEmitter, x: ir.Value, e0: ir.Value) -> ir.Value:
    """x**e0 (e0 >= 0, wrapping) by square-and-multiply in a real loop over e0's
    significant bits. Not unrolled over all 63 bits: with loop-invariant operands LLVM's
    loop vectorizer takes time exponential in the number of unrolled rounds (hours for
    63; 4 s for 28 rounds, doubling with each one). A constant exponent still folds: the
    loop's trip count is then known and the unroller flattens it."""
    b = em.b
    t = x.type
    one, zero = ir.Constant(t, 1), ir.Constant(t, 0)
    start = b.block
    cond = em.fn.append_basic_block("ipow.cond")
    body = em.fn.append_basic_block("ipow.body")
    done = em.fn.append_basic_block("ipow.done")
    b.branch(cond)
    b.position_at_end(cond)
    r, p, e = b.phi(t), b.phi(t), b.phi(t)
    b.cbranch(b.icmp_unsigned("!=", e, zero), body, done)
    b.position_at_end(body)
    odd = b.icmp_unsigned("!=", b.and_(e, one), zero)
    r.add_incoming(b.select(odd, b.mul(r, p), r), body)
    p.add_incoming(b.mul(p, p), body)
    e.add_incoming(b.lshr(e, one), body)
    b.branch(cond)
    for phi, v in ((r, one), (p, x), (e, e0)):
        phi.add_incoming(v, start)
    b.position_at_end(done)
    # Code emitted here was being appended to an open preamble: it goes on in `done`.
    for level, tail in list(em.tails.items()):
        if tail is start:
            em.tails[level] = done
    return r


def _maxmin_rule(is_max: bool) -> Callable[..., ir.Value]:
    return _ew(lambda em, dt, a: _maxmin(em, dt, a[0], a[1], is_max))


def _neg(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    return em.b.fneg(a[0]) if dt.is_float else em.b.sub(ir.Constant(a[0].type, 0), a[0])


def _abs(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    if dt.is_float:
        return mathfns.unary_intr(em.b, "fabs", a[0])
    if dt.is_unsigned:
        return a[0]
    b = em.b
    return b.select(b.icmp_signed("<", a[0], ir.Constant(a[0].type, 0)), b.sub(ir.Constant(a[0].type, 0), a[0]), a[0])


def _sign(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    b = em.b
    x = a[0]
    t = x.type
    if dt.is_float:
        one, m1 = ir.Constant(t, 1.0), ir.Constant(t, -1.0)
        # NumPy: sign(+-0.0) = +0.0, sign(NaN) = NaN.
        rest = b.select(b.fcmp_unordered("uno", x, x), x, ir.Constant(t, 0.0))
        return b.select(b.fcmp_ordered(">", x, ir.Constant(t, 0.0)), one,
                        b.select(b.fcmp_ordered("<", x, ir.Constant(t, 0.0)), m1, rest))
    zero = ir.Constant(t, 0)
    if dt.is_unsigned:
        return b.zext(b.icmp_unsigned("!=", x, zero), t)
    return b.select(b.icmp_signed(">", x, zero), ir.Constant(t, 1),
                    b.select(b.icmp_signed("<", x, zero), ir.Constant(t, -1), zero))


def _not(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    return em.b.not_(a[0])


def _float_fn(fn: Callable[[ir.IRBuilder, ir.Value], ir.Value]) -> Callable[..., ir.Value]:
    return _ew(lambda em, dt, a: fn(em.b, a[0]))


def _intr(name: str) -> Callable[..., ir.Value]:
    return _float_fn(lambda b, x: mathfns.unary_intr(b, name, x))


def _rsqrt(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fdiv(ir.Constant(x.type, 1.0), mathfns.unary_intr(b, "sqrt", x))


_FCMP = {"eq": ("==", True), "ne": ("!=", False), "lt": ("<", True), "le": ("<=", True), "gt": (">", True),
         "ge": (">=", True)}


def _compare(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    x, y = (em.value(o, idx) for o in n.operands)
    dt = n.operands[0].dtype
    op, ordered = _FCMP[n.attr["direction"]]
    b = em.b
    if dt.is_float:
        return b.fcmp_ordered(op, x, y) if ordered else b.fcmp_unordered(op, x, y)
    return _icmp_for(dt)(b, op, x, y)


def _icmp_for(dt: DType) -> Callable[[ir.IRBuilder, str, ir.Value, ir.Value], ir.Value]:
    """The integer comparison of dt's order: unsigned for bool and the unsigned types."""
    return ir.IRBuilder.icmp_unsigned if dt.is_bool or dt.is_unsigned else ir.IRBuilder.icmp_signed


def _select(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    p, x, y = (em.value(o, idx) for o in n.operands)
    return em.b.select(p, x, y)


def convert_value(b: ir.IRBuilder, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    """Element conversion with the interpreter's rules (float->int saturates, NaN->0)."""
    st, tt = COMPUTE[src], COMPUTE[dst]
    if dst is DType.BOOL:
        if src.is_float:
            return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
        return v if src is DType.BOOL else b.icmp_unsigned("!=", v, ir.Constant(st, 0))
    if src is DType.BOOL:
        return b.uitofp(v, tt) if dst.is_float else b.zext(v, tt)
    if src.is_float and dst.is_float:
        if st == tt:
            return v
        return b.fpext(v, tt) if tt == ir.DoubleType() else b.fptrunc(v, tt)
    if src.is_float:
        return mathfns.fptoui_sat(b, v, tt) if dst.is_unsigned else mathfns.fptosi_sat(b, v, tt)
    if dst.is_float:
        return b.uitofp(v, tt) if src.is_unsigned else b.sitofp(v, tt)
    if st.width == tt.width:
        return v
    if tt.width < st.width:
        return b.trunc(v, tt)
    return b.zext(v, tt) if src.is_unsigned else b.sext(v, tt)


def _convert(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    x = n.operands[0]
    v = em.value(x, idx)
    src, dst = x.dtype, n.dtype
    if src is DType.FLOAT64 and dst is DType.FLOAT16:
        # Rounded through float32 (double rounding differs from a direct f64->f16 only
        # on exact f32 ties, which a random f64 essentially never is). The fence stops
        # LLVM from merging the two truncations into a double->half libcall
        # (__truncdfhf2), which the JIT process does not provide.
        f = em.b.fptrunc(v, F32)
        return mathfns.intrinsic(em.b, "llvm.arithmetic.fence.f32", F32, [f])
    return convert_value(em.b, v, src, dst)


def _float_fn2(fn: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]) -> Callable[..., ir.Value]:
    return _ew(lambda em, dt, a: fn(em.b, a[0], a[1]))


def _next_after(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    if dt is DType.BFLOAT16:  # computed on the float register it sits in, stepping its top half
        return mathfns.next_after(em.b, a[0], a[1], F32, bf16=True)
    return mathfns.next_after(em.b, a[0], a[1], STORAGE[dt])


def _is_finite(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    # ordered: NaN is not finite
    return em.b.fcmp_ordered("<", mathfns.unary_intr(em.b, "fabs", a[0]), ir.Constant(a[0].type, math.inf))


def _width(v: ir.Value) -> int:
    return int(v.type.width)


def _shift(kind: str) -> Callable[..., ir.Value]:
    """StableHLO shifts: the amount read as unsigned, >= the width gives 0 (ashr: the sign
    fill). The amount is masked first, so LLVM never sees a shift by the width or more
    (poison)."""
    def f(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
        b, (x, y) = em.b, a
        w = _width(x)
        masked = b.and_(y, ir.Constant(y.type, w - 1))
        ok = b.icmp_unsigned("<", y, ir.Constant(y.type, w))
        shifted = getattr(b, kind)(x, masked)
        fill = b.ashr(x, ir.Constant(x.type, w - 1)) if kind == "ashr" else ir.Constant(x.type, 0)
        return b.select(ok, shifted, fill)

    return _ew(f)


def _popcnt(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    return mathfns.unary_intr(em.b, "ctpop", a[0])


def _clz(em: KernelEmitter, dt: DType, a: list[ir.Value]) -> ir.Value:
    x = a[0]  # is_zero_poison = false: ctlz(0) is the width
    return mathfns.intrinsic(em.b, f"llvm.ctlz.{suffix(x.type)}", x.type, [x, ir.Constant(ir.IntType(1), 0)])


def _bitcast(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    (x,) = n.operands
    v = em.value(x, idx)
    if COMPUTE[x.dtype] == STORAGE[x.dtype] and COMPUTE[n.dtype] == STORAGE[n.dtype]:
        return em.b.bitcast(v, COMPUTE[n.dtype])
    if x.dtype in _BITS16 and n.dtype in _BITS16:  # a 16-bit float sits in a float register
        return _BITS16[n.dtype][1](em.b, _BITS16[x.dtype][0](em.b, v))
    raise BackendError(f"cpu: bitcast-convert {x.type} to {n.dtype.value}: a register type differs from the "
                       "storage type", where=n.loc)


#: 16-bit dtypes: (register value -> its i16 bits, and back); float16 values are exact
#: halves in float registers, bfloat16 values the top half of a float's bits
_BITS16: dict[DType, tuple[Callable[[ir.IRBuilder, ir.Value], ir.Value],
                           Callable[[ir.IRBuilder, ir.Value], ir.Value]]] = {
    DType.INT16: (lambda b, v: v, lambda b, v: v),
    DType.UINT16: (lambda b, v: v, lambda b, v: v),
    DType.FLOAT16: (lambda b, v: b.bitcast(b.fptrunc(v, F16), I16), lambda b, v: b.fpext(b.bitcast(v, F16), F32)),
    DType.BFLOAT16: (lambda b, v: b.trunc(b.lshr(b.bitcast(v, I32), ir.Constant(I32, 16)), I16),
                     lambda b, v: bf16_to_f32(b, v)),
}


# -- indexing ----------------------------------------------------------------------


def loaded_index(em: KernelEmitter, x: Node, coords: Sequence[Index]) -> Index:
    """The integer ``x`` at ``coords`` as a 64-bit index (a constant stays a Python int),
    tagged with the loop level it was computed at, so that what depends on it is hoisted
    exactly as far as it may be (a token id once per row of an embedding lookup)."""
    v = em.value(x, list(coords))
    if isinstance(v, ir.Constant):
        return int(v.constant)
    level = max((em.lv(c) for c in coords), default=0)
    if not (level < 2 and level < em.cur_level and not em.tails[level].is_terminated):
        level = em.cur_level  # value() emitted it here, not in a preamble
    em.level[id(v)] = level
    if v.type.width < 64:
        # widened by the index dtype's signedness (an unsigned byte 255 is 255, not -1)
        widen = em.b.zext if np.dtype(x.dtype.np).kind == "u" else em.b.sext
        return em._ix(lambda: widen(v, I64), v)
    return v


def _indexed(em: KernelEmitter, n: Node, idx: Sequence[Index],
             start_coords: Callable[[list[ix.Ix]], list[list[ix.Ix]]],
             index_of: Callable[[int], Node],
             operand_index: Callable[[list[ix.Ix], list[ix.Ix]], list[ix.Ix]]) -> ir.Value:
    """An indexed load (gather, dynamic-slice): the start indices are loaded at the
    coordinates the shared index algebra gives, then the operand at the position it
    computes from them (clamped in bounds: the load is never out of range)."""
    coords, env = em.ix_map(lambda c: c, idx)
    starts = []
    for k, sc in enumerate(start_coords(coords)):
        name = f"start{k}"
        env[name] = loaded_index(em, index_of(k), [em.ix_value(e, env) for e in sc])
        starts.append(ix.var(name))
    return em.value(n.operands[0], [em.ix_value(e, env) for e in operand_index(coords, starts)])


def _gather(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    return _indexed(em, n, idx, lambda c: ix.gather_start_coords(c, n), lambda k: n.operands[1],
                    lambda c, s: ix.gather_index(c, n, s))


def _dynamic_slice(em: KernelEmitter, n: Node, idx: Sequence[Index]) -> ir.Value:
    shape, sizes = n.operands[0].shape, n.attr["slice_sizes"]
    return _indexed(em, n, idx, lambda c: [[] for _ in shape], lambda k: n.operands[1 + k],
                    lambda c, s: ix.dynamic_slice_index(c, shape, sizes, s))


#: how a scatter update meets the value at its position: in order, no reassociation
_SCATTER_COMBINE: dict[str, Callable[[KernelEmitter, DType, ir.Value, ir.Value], ir.Value]] = {
    "replace": lambda em, dt, old, new: new,
    "add": lambda em, dt, a, v: em.b.fadd(a, v) if dt.is_float else (em.b.or_(a, v) if dt.is_bool else em.b.add(a, v)),
    "mul": lambda em, dt, a, v: em.b.fmul(a, v) if dt.is_float else (em.b.and_(a, v) if dt.is_bool else em.b.mul(a, v)),
    "max": lambda em, dt, a, v: _maxmin(em, dt, a, v, True),
    "min": lambda em, dt, a, v: _maxmin(em, dt, a, v, False),
}


def build_update(em: KernelEmitter) -> ir.Function:
    """An ``update`` kernel (scatter, dynamic-update-slice): the result is the operand
    with windows written over it. Buffer assignment gives the result the operand's buffer
    when the operand dies here, so the operand is copied only when the pointers differ;
    then the windows are written in update order (scatter: one update after another, each
    window inside, so duplicate indices combine exactly in the reference's order). Nothing
    else of the output is touched: the cost is the windows, not the operand."""
    n = em.spec.comp.root
    b = em.b
    em.tails, em.cur_level = {}, 0  # nothing is hoisted: each value is emitted where it is used
    body = em.fn.append_basic_block("update")
    ret = em.fn.append_basic_block("ret")
    b.cbranch(b.icmp_signed("<", em.o0, em.o1), body, ret)
    b.position_at_end(body)
    nin = len(em.spec.comp.parameters)
    src, dst = em.buffer(0), em.buffer(nin)
    size = n.tensor_type.nbytes
    if size:
        copy = em.fn.append_basic_block("copy")
        windows = em.fn.append_basic_block("windows")
        b.cbranch(b.icmp_unsigned("!=", src, dst), copy, windows)
        b.position_at_end(copy)
        memcpy = em.mod.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
        b.call(memcpy, [dst, src, ir.Constant(I64, size), ir.Constant(I1, 0)])
        b.branch(windows)
        b.position_at_end(windows)
    _write_windows(em, n, dst)
    b.branch(ret)
    b.position_at_end(ret)
    b.ret_void()
    return em.fn


def _nest(em: KernelEmitter, shape: Sequence[int], body: Callable[[list[Index]], None], level: int) -> None:
    """Row-major loops over ``shape`` (unit dims are not looped), ``body(coords)`` innermost."""
    coords: list[Index] = [0] * len(shape)

    def at(k: int) -> None:
        if k == len(shape):
            body(list(coords))
            return
        if shape[k] == 1:
            at(k + 1)
            return

        def step(v: ir.Value) -> None:
            coords[k] = v
            at(k + 1)

        em.loop(0, shape[k], step, level + k)

    if 0 not in shape:
        at(0)


def _write_windows(em: KernelEmitter, n: Node, dst: ir.Value) -> None:
    """The updates one after another (row-major over the batch), each window inside: the
    order of the reference, whatever the windows' overlaps."""
    x = n.operands[0]
    u = ix.update_loops(n)
    combine = _SCATTER_COMBINE[n.attr["kind"]] if n.op is Op.SCATTER else _SCATTER_COMBINE["replace"]

    def names(prefix: str, vals: Sequence[Index]) -> tuple[list[ix.Ix], dict[str, Index]]:
        return ([ix.const(v) if isinstance(v, int) else ix.var(f"{prefix}{k}") for k, v in enumerate(vals)],
                {f"{prefix}{k}": v for k, v in enumerate(vals) if not isinstance(v, int)})

    def update(batch: list[Index]) -> None:
        bix, env = names("b", batch)
        starts = [loaded_index(em, n.operands[k], [em.ix_value(e, env) for e in c])
                  for k, c in ix.update_starts(n, bix)]
        six, senv = names("s", starts)
        env.update(senv)
        _, inside, _, _ = ix.update_target(n, bix, [ix.const(0)] * len(u.window), six)
        if inside.const == 0:
            return
        if inside.const == 1:
            _nest(em, u.window, lambda w: window(w, bix, six, env), 1 + len(u.batch))
            return
        go, skip = em.fn.append_basic_block("window"), em.fn.append_basic_block("dropped")
        em.b.cbranch(em.ix_value(inside, env), go, skip)  # an out-of-bounds window is dropped
        em.b.position_at_end(go)
        _nest(em, u.window, lambda w: window(w, bix, six, env), 1 + len(u.batch))
        em.b.branch(skip)
        em.b.position_at_end(skip)

    def window(w: list[Index], bix: list[ix.Ix], six: list[ix.Ix], env: dict[str, Index]) -> None:
        wix, wenv = names("w", w)
        full = {**env, **wenv}
        pos, _, src, coords = ix.update_target(n, bix, wix, six)
        lin = em.linear([em.ix_value(e, full) for e in pos], x.shape)
        new = em.value(n.operands[src], [em.ix_value(e, full) for e in coords])
        em.store(dst, n.dtype, lin, combine(em, n.dtype, em.load(dst, n.dtype, lin), new))

    if 0 not in u.window:
        _nest(em, u.batch, update, 1)


LOWERING: dict[Op, Callable[[KernelEmitter, Node, Sequence[Index]], ir.Value]] = {
    Op.PARAMETER: _param,
    Op.CONSTANT: _constant,
    Op.IOTA: _iota,
    Op.CONVERT: _convert,
    Op.NEG: _ew(_neg),
    Op.ABS: _ew(_abs),
    Op.SIGN: _ew(_sign),
    Op.NOT: _ew(_not),
    Op.EXP: _float_fn(mathfns.exp),
    Op.LOG: _float_fn(mathfns.log),
    Op.TANH: _float_fn(mathfns.tanh),
    Op.LOGISTIC: _float_fn(mathfns.logistic),
    Op.SIN: _float_fn(mathfns.sin),
    Op.COS: _float_fn(mathfns.cos),
    Op.SQRT: _intr("sqrt"),
    Op.RSQRT: _float_fn(_rsqrt),
    Op.FLOOR: _intr("floor"),
    Op.CEIL: _intr("ceil"),
    Op.ADD: _arith("fadd", "add", "or_"),
    Op.SUB: _arith("fsub", "sub", "xor"),
    Op.MUL: _arith("fmul", "mul", "and_"),
    Op.DIV: _ew(_int_div),
    Op.REM: _ew(_int_rem),
    Op.POW: _ew(_pow),
    Op.MAX: _maxmin_rule(True),
    Op.MIN: _maxmin_rule(False),
    Op.AND: _arith("and_", "and_", "and_"),
    Op.OR: _arith("or_", "or_", "or_"),
    Op.COMPARE: _compare,
    Op.SELECT: _select,
    Op.REDUCE: _reduce,
    Op.DOT_GENERAL: _dot,
    **{op: _movement for op in ix.MOVEMENT},
    Op.PAD: _pad,
    Op.CONCATENATE: _concatenate,
    Op.RNG_BIT_GENERATOR: _rng,
    # elementwise completeness
    Op.TAN: _float_fn(mathfns.tan),
    Op.EXPM1: _float_fn(mathfns.expm1),
    Op.LOG1P: _float_fn(mathfns.log1p),
    Op.CBRT: _ew(lambda em, dt, a: mathfns.cbrt(em.b, a[0], half=dt is DType.FLOAT16)),
    Op.ERF: _ew(lambda em, dt, a: mathfns.erf(em.b, a[0], half=dt is DType.FLOAT16)),
    Op.ATAN2: _float_fn2(mathfns.atan2),
    Op.ROUND_NEAREST_EVEN: _intr("roundeven"),
    Op.IS_FINITE: _ew(_is_finite),
    Op.NEXT_AFTER: _ew(_next_after),
    # bit operations
    Op.XOR: _arith("xor", "xor", "xor"),
    Op.SHIFT_LEFT: _shift("shl"),
    Op.SHIFT_RIGHT_LOGICAL: _shift("lshr"),
    Op.SHIFT_RIGHT_ARITHMETIC: _shift("ashr"),
    Op.POPCNT: _ew(_popcnt),
    Op.CLZ: _ew(_clz),
    Op.BITCAST_CONVERT: _bitcast,
    Op.GATHER: _gather,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    # windowed
    Op.REDUCE_WINDOW: _reduce_window,
}


def _icmp(pred: str) -> Callable[[KernelEmitter, Index, Index], ir.Value]:
    return lambda em, a, c: em.b.icmp_signed(pred, em.iv(a), em.iv(c))


#: the index algebra's operators as emitter calls (division and remainder only ever see
#: non-negative values, or results a predicate discards: unsigned is right and cheaper)
_IX_OPS: dict[str, Callable[[KernelEmitter, Index, Index], Index]] = {
    "+": KernelEmitter.add, "-": KernelEmitter.sub, "*": KernelEmitter.mul,
    "/": KernelEmitter.div, "%": KernelEmitter.rem,
    "min": lambda em, a, c: em._minmax("<", a, c), "max": lambda em, a, c: em._minmax(">", a, c),
    "<": _icmp("<"), ">=": _icmp(">="), "==": _icmp("=="),
    "&&": lambda em, a, c: em.b.and_(a, c),
}
