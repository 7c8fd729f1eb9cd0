"""Random well-typed modules over the whole primitive set, for differential testing.

``random_module(seed, n_nodes)`` builds a module of about ``n_nodes`` steps whose
operands come from earlier values, fresh parameters or constants (constants favour the
values rewrites look for: 0, -0.0, 1, 2, -1, all-ones, true/false), plus random inputs
that include NaN, ±inf and integer corner cases. Some steps are patterns shaped like what
found backend bugs: softmax-like rows, dots with epilogues, NaN/inf made inside a fusion
and fed to transcendentals, int64 chains with overflow and division by 0 or -1, float16
interior pads, long elementwise chains ending in a reduction. The optimizer tests evaluate
it before and after each pass; backends (and ``make fuzz``, axle.testing.fuzz) run it
against the interpreter."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from ..ir.builder import Builder
from ..ir.conv import conv_dimension_numbers
from ..ir.dtypes import DType
from ..ir.module import Module, Node
from ..ir.ops import CORE_PRIMITIVES, CUSTOM_CALL_TARGETS, OPS, Op, register_custom_call
from ..ir.types import TensorType

DTYPES = (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32, DType.INT64, DType.BOOL)
SHAPES = ((), (1,), (3,), (2, 3), (3, 1), (2, 1, 4), (0, 3), (4, 3))
CUSTOM_TARGET = "axle.random.scale2"
_INTERESTING = (0, -0.0, 1, 2, -1, 0.5)
T = TypeVar("T")
FLOATS = (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16)
#: sizes just below and at the backends' path thresholds (threshold_pattern), which SHAPES
#: never reach: output columns around the cpu GEMM's column split (COLUMNS_OUTER_MIN, 256),
#: K around its split K (SPLIT_K_MIN, 4096), rows around opencl's packed panels
#: (PACKED_MIN_ROWS, 32) and row lengths around the row kernels' thresholds (cpu SHORT_ROW
#: 64 and its 8192-element row cache, opencl GROUP_ROW_MIN 64 and group reductions from 1024);
#: tests/backends/*/test_*_path_grid.py check that they still straddle them
WIDE_SIZES = (255, 256, 257, 300)
LONG_K_SIZES = (4095, 4096, 4100)
TALL_SIZES = (31, 32, 33)
ROW_SIZES = (63, 64, 65, 1023, 1024, 8192, 8193)
#: the narrow and unsigned integers and bfloat16, made by narrow_pattern (issue 15)
NARROW_DTYPES = (DType.INT8, DType.INT16, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64, DType.BFLOAT16)
_NARROW_OPS = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.REM, Op.MAX, Op.MIN, Op.NEG, Op.ABS, Op.SIGN, Op.AND, Op.OR,
               Op.NOT, Op.POW, Op.EXP, Op.TANH, Op.SQRT, Op.FLOOR, Op.LOG)
# the bit and float elementwise primitives meet the new dtypes too (each op only on the
# dtypes its table row allows)
_NARROW_OPS += (Op.XOR, Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL, Op.SHIFT_RIGHT_ARITHMETIC, Op.POPCNT, Op.CLZ,
                Op.TAN, Op.EXPM1, Op.LOG1P, Op.CBRT, Op.ERF, Op.ATAN2, Op.ROUND_NEAREST_EVEN, Op.NEXT_AFTER)
#: what consumes a NaN or inf in nonfinite_pattern: transcendentals and float arithmetic
_NONFINITE_CONSUMERS = (Op.EXP, Op.TANH, Op.LOGISTIC, Op.SIN, Op.COS, Op.LOG, Op.SQRT, Op.RSQRT, Op.FLOOR,
                        Op.CEIL, Op.SIGN, Op.ABS, Op.ADD, Op.MUL, Op.SUB, Op.DIV, Op.MAX, Op.MIN, Op.POW, Op.REM)
# elementwise completeness: a NaN or inf made inside a kernel reaches these too
_NONFINITE_CONSUMERS += (Op.TAN, Op.EXPM1, Op.LOG1P, Op.CBRT, Op.ERF, Op.ATAN2, Op.ROUND_NEAREST_EVEN, Op.NEXT_AFTER)
_INT_OPS = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.REM, Op.MAX, Op.MIN, Op.NEG, Op.ABS, Op.SIGN, Op.AND, Op.OR,
            Op.NOT, Op.POW)
# bit operations: shift amounts from the splats (0, -1, INT_MIN, INT_MAX...) are out of range
_INT_OPS += (Op.XOR, Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL, Op.SHIFT_RIGHT_ARITHMETIC, Op.POPCNT, Op.CLZ)
_CHAIN_OPS = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAX, Op.MIN, Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.TANH,
              Op.LOGISTIC, Op.SQRT, Op.SIN, Op.COS, Op.FLOOR)


def _cast(v: object, dt: DType) -> np.ndarray:
    """v as a dt array; an integer out of an unsigned type's range wraps (-1 -> all ones)."""
    return np.asarray(np.asarray(v).astype(dt.np) if dt.is_unsigned else np.asarray(v, dt.np))


def _ensure_custom_call() -> None:
    if CUSTOM_TARGET not in CUSTOM_CALL_TARGETS:
        register_custom_call(CUSTOM_TARGET, lambda x, config: (x * 2).astype(x.dtype))


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.b = Builder("random")
        self.pool: list[Node] = []
        self.inputs: list[np.ndarray] = []

    # -- values -------------------------------------------------------------------
    def choice(self, seq: Sequence[T]) -> T:
        return seq[int(self.rng.integers(len(seq)))]

    def values(self, t: TensorType) -> np.ndarray:
        """Random values with specials sprinkled at random positions (any array size)."""
        rng, dt = self.rng, t.dtype
        if dt.is_bool:
            return rng.random(t.shape) < 0.5
        if dt.is_float:
            x = (rng.standard_normal(t.shape) * 3).astype(dt.np)
            specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0], dtype=dt.np)
        else:
            info = np.iinfo(dt.np)
            x = rng.integers(-5, 6, size=t.shape).astype(dt.np)  # (unsigned: small values and wrapped ones)
            specials = np.array([0, -1, 1, info.min, info.max] if dt.is_signed else
                                [0, 1, 2, info.max, info.max // 2 + 1], dtype=dt.np)
        mask = rng.random(t.shape) < 0.3
        return np.where(mask, specials[rng.integers(len(specials), size=t.shape)], x).astype(dt.np)

    def param(self, t: TensorType) -> Node:
        self.inputs.append(self.values(t))
        return self.b.parameter(t)

    def const(self, t: TensorType) -> Node:
        r = self.rng.random()
        if r < 0.5:
            v = self.choice(_INTERESTING)
            if t.dtype.is_bool:
                v = bool(self.rng.integers(2))
            elif not t.dtype.is_float:
                v = int(v) if v != 0.5 else 3
            arr = np.broadcast_to(_cast(v, t.dtype), t.shape).copy()
            c = self.b.constant(_cast(v, t.dtype))
            if t.shape and r < 0.3:  # a broadcast splat, as the frontend makes them
                return self.b.broadcast_in_dim(c, shape=t.shape, broadcast_dimensions=())
            return self.b.constant(arr)
        return self.b.constant(self.values(t))

    def splat(self, t: TensorType) -> Node:
        """A constant every element of which is a value rewrites look for."""
        v = self.choice(_INTERESTING + (np.inf, -np.inf))
        if t.dtype.is_bool:
            v = bool(self.rng.integers(2))
        elif not t.dtype.is_float:
            v = self.choice((0, 1, -1, 2, int(np.iinfo(t.dtype.np).min), int(np.iinfo(t.dtype.np).max)))
        c = self.b.constant(_cast(v, t.dtype))
        return self.b.broadcast_in_dim(c, shape=t.shape, broadcast_dimensions=()) if t.shape else c

    def fresh(self, t: TensorType) -> Node:
        return self.param(t) if self.rng.random() < 0.5 else self.const(t)

    def pick(self, pred: Callable[[Node], bool] = lambda n: True) -> Node | None:
        cands = [n for n in self.pool if isinstance(n.type, TensorType) and pred(n)]
        if not cands:
            return None
        # favour recent values: chains make fusions
        i = len(cands) - 1 - min(int(self.rng.geometric(0.4)) - 1, len(cands) - 1)
        return cands[i]

    def like(self, t: TensorType) -> Node:
        same = self.pick(lambda n: n.type == t) if self.rng.random() < 0.6 else None
        return same if same is not None else self.fresh(t)

    def operand(self, dtypes: frozenset[DType] | tuple[DType, ...]) -> Node:
        x = self.pick(lambda n: n.dtype in dtypes)
        if x is None or self.rng.random() < 0.15:
            x = self.fresh(TensorType(self.choice([d for d in DTYPES if d in dtypes]), self.choice(SHAPES)))
        return x

    # -- patterns the fusion kinds are made for ----------------------------------------
    def row_pattern(self) -> Node:
        """x (op) broadcast(reduce(x over trailing axes)), as softmax and layer norm do."""
        b = self.b
        x = self.pick(lambda n: n.dtype.is_float and len(n.shape) >= 1)
        if x is None:
            x = self.param(TensorType(self.choice(DTYPES[:3]), self.choice([(2, 3), (4, 3), (2, 1, 4), (3,)])))
        k = int(self.rng.integers(0, len(x.shape)))
        axes = tuple(range(k, len(x.shape)))
        r = b.reduce(x, kind=self.choice(("sum", "max", "min")), axes=axes)
        if self.rng.random() < 0.5:  # keepdims, as axle.numpy writes it
            kept = x.shape[:k] + (1,) * len(axes)
            r = b.reshape(r, shape=kept)
            back = b.broadcast_in_dim(r, shape=x.shape, broadcast_dimensions=tuple(range(len(x.shape))))
        else:
            back = b.broadcast_in_dim(r, shape=x.shape, broadcast_dimensions=tuple(range(k)))
        op = self.choice((Op.SUB, Op.DIV, Op.MUL, Op.ADD))
        return b.op(op, b.exp(x) if self.rng.random() < 0.5 else x, back)

    def dense_pattern(self) -> Node:
        """max(x @ w + bias, 0): a dot with an elementwise epilogue."""
        b = self.b
        dt = self.choice((DType.FLOAT32, DType.FLOAT64, DType.INT32))
        m, k, n = (int(v) for v in self.rng.integers(1, 5, 3))
        x = self.like(TensorType(dt, (m, k)))
        w = self.like(TensorType(dt, (k, n)))
        d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
        bias = b.broadcast_in_dim(self.like(TensorType(dt, (n,))), shape=(m, n), broadcast_dimensions=(1,))
        return b.max(b.add(d, bias), self.splat(TensorType(dt, (m, n))))

    def convolution(self) -> Node:
        """A small 1-D or 2-D convolution in a random layout, strides, padding, dilations and groups."""
        b = self.b
        dt = self.choice((DType.FLOAT32, DType.FLOAT64, DType.INT32))
        ns = int(self.rng.integers(1, 3))
        spatial = "HW"[:ns]
        lhs = "".join(self.rng.permutation(list("NC" + spatial)))
        out = "".join(self.rng.permutation(list("NC" + spatial)))
        rhs = "".join(self.rng.permutation(list("OI" + spatial)))
        g = int(self.choice((1, 1, 2)))
        n, ci, co = int(self.rng.integers(1, 3)), int(self.rng.integers(1, 3)), g * int(self.rng.integers(1, 3))
        sizes = {"N": n, "C": ci * g, **{ch: int(self.rng.integers(1, 6)) for ch in spatial}}
        ksizes = {"O": co, "I": ci, **{ch: int(self.rng.integers(1, 4)) for ch in spatial}}
        x = self.like(TensorType(dt, tuple(sizes[ch] for ch in lhs)))
        w = self.like(TensorType(dt, tuple(ksizes[ch] for ch in rhs)))
        ints = lambda lo, hi: tuple(int(v) for v in self.rng.integers(lo, hi, ns))  # noqa: E731 - local shorthand
        return b.convolution(x, w, **conv_dimension_numbers(lhs, rhs, out), window_strides=ints(1, 3),
                             padding_low=ints(0, 2), padding_high=ints(0, 2), lhs_dilation=ints(1, 3),
                             rhs_dilation=ints(1, 3), feature_group_count=g)

    # -- what found real backend bugs ------------------------------------------------
    def float_value(self, dtypes: tuple[DType, ...] = FLOATS) -> Node:
        x = self.pick(lambda n: n.dtype in dtypes and n.tensor_type.size > 0)
        if x is None or self.rng.random() < 0.3:
            x = self.fresh(TensorType(self.choice(dtypes), self.choice([s for s in SHAPES if s != (0, 3)])))
        return x

    def nonfinite_pattern(self) -> Node:
        """A NaN or inf made inside what becomes one fused kernel (log of a negative, 0/0,
        inf-inf, sqrt of a negative, log 0), then fed through transcendentals and
        arithmetic, as the cpu NaN-in-exp bug needed."""
        b, x = self.b, self.float_value()
        t = x.tensor_type
        makers = (
            lambda: b.log(b.neg(b.abs(x))),
            lambda: b.div(b.sub(x, x), b.sub(x, x)),
            lambda: b.sub(b.mul(x, self.splat_of(t, np.inf)), b.mul(x, self.splat_of(t, np.inf))),
            lambda: b.sqrt(b.sub(self.splat_of(t, -1.0), b.abs(x))),
            lambda: b.log(b.sub(x, x)),
            lambda: b.sub(b.log(x), b.log(x)),
        )
        v = self.choice(makers)()
        for _ in range(int(self.rng.integers(1, 4))):
            op = self.choice(_NONFINITE_CONSUMERS)
            v = b.op(op, v) if OPS[op].arity == 1 else b.op(op, v, self.like(t) if self.rng.random() < 0.5 else x)
        return v

    def splat_of(self, t: TensorType, v: object) -> Node:
        c = self.b.constant(_cast(v, t.dtype))
        return self.b.broadcast_in_dim(c, shape=t.shape, broadcast_dimensions=()) if t.shape else c

    # -- sizes at the backends' path thresholds -----------------------------------
    def clean_values(self, t: TensorType) -> np.ndarray:
        """Values of ``t`` without specials: one NaN in a long sum would hide every other
        value of the result."""
        if t.dtype.is_float:
            return self.rng.standard_normal(t.shape).astype(t.dtype.np)
        return self.rng.integers(-5, 6, size=t.shape).astype(t.dtype.np)

    def clean(self, t: TensorType) -> Node:
        """A parameter of ``t`` with clean_values."""
        self.inputs.append(self.clean_values(t))
        return self.b.parameter(t)

    def threshold_pattern(self) -> Node:
        """A dot (a bias-relu epilogue half the time; an operand transposed sometimes) or a
        row of a size just below or at one of the backends' path thresholds (THRESHOLD_SIZES):
        the small SHAPES never reach the kernel paths those sizes select."""
        b, rng = self.b, self.rng
        dt = self.choice((DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32, DType.INT64))
        if rng.random() < 0.25:  # x - max(x) over a long row
            x = self.clean(TensorType(self.choice(FLOATS), (int(rng.integers(1, 4)), self.choice(ROW_SIZES))))
            mx = b.broadcast_in_dim(b.reduce(x, kind="max", axes=(1,)), shape=x.shape, broadcast_dimensions=(0,))
            return b.sub(x, mx)
        s = [int(v) for v in rng.integers(1, (6, 9, 4, 4, 9))]  # the small sides
        m, k, n = self.choice(((s[0], s[1], self.choice(WIDE_SIZES)),  # columns split
                               (s[2], self.choice(LONG_K_SIZES), s[3]),  # split K
                               (self.choice(TALL_SIZES), s[4], self.choice((15, 16, 17)))))  # packed panels
        lt, rt = rng.random() < 0.3, rng.random() < 0.4  # A [K, M], B [N, K]
        x = self.clean(TensorType(dt, (k, m) if lt else (m, k)))
        w = self.clean(TensorType(dt, (n, k) if rt else (k, n)))
        d = b.dot_general(x, w, lhs_contracting=(0 if lt else 1,), rhs_contracting=(1 if rt else 0,))
        if rng.random() < 0.5:
            return d
        bias = b.broadcast_in_dim(self.clean(TensorType(dt, (n,))), shape=(m, n), broadcast_dimensions=(1,))
        return b.max(b.add(d, bias), self.splat_of(TensorType(dt, (m, n)), 0))

    def int_pattern(self) -> Node:
        """Integer arithmetic in a fusion: wrapping overflow, division and remainder by 0
        and INT_MIN / -1 (docs/ir.md fixes each result), often summed at the end."""
        b = self.b
        x = self.operand((DType.INT64, DType.INT32) if self.rng.random() < 0.3 else (DType.INT64,))
        t = x.tensor_type
        info = np.iinfo(t.dtype.np)
        for _ in range(int(self.rng.integers(2, 7))):
            op = self.choice(_INT_OPS)
            if OPS[op].arity == 1:
                x = b.op(op, x)
                continue
            y = self.splat_of(t, self.choice((0, -1, 1, 2, int(info.min), int(info.max)))) if (
                self.rng.random() < 0.5) else self.like(t)
            x = b.op(op, *((y, x) if self.rng.random() < 0.3 else (x, y)))
        if x.shape and self.rng.random() < 0.5:
            x = b.reduce(x, kind=self.choice(("sum", "prod", "max", "min")), axes=tuple(range(len(x.shape))))
        return x

    def f16_pad_pattern(self) -> Node:
        """float16 pad with interior padding (the value a special), then an elementwise op."""
        b = self.b
        x = self.float_value((DType.FLOAT16,))
        if not x.shape:
            x = b.reshape(x, shape=(1,))
        r = len(x.shape)
        lo, hi = ([int(v) for v in self.rng.integers(0, 3, r)] for _ in range(2))
        it = [int(v) for v in self.rng.integers(1, 3, r)]
        pad_value = self.choice((np.nan, np.inf, -np.inf, -0.0, 1.0))
        p = b.pad(x, b.constant(np.asarray(pad_value, np.float16)), low=lo, high=hi, interior=it)
        return b.op(self.choice((Op.ADD, Op.MUL, Op.MAX)), p, self.like(p.tensor_type)) if (
            self.rng.random() < 0.6) else p

    def chain_pattern(self) -> Node:
        """A long elementwise chain (one loop fusion) ending in a reduction (an input fusion)."""
        b = self.b
        x = self.float_value()
        t = x.tensor_type
        for _ in range(int(self.rng.integers(5, 13))):
            op = self.choice(_CHAIN_OPS)
            x = b.op(op, x) if OPS[op].arity == 1 else b.op(op, x, self.like(t) if self.rng.random() < 0.7 else
                                                            self.splat(t))
        if not x.shape:
            return x
        axes = tuple(i for i in range(len(x.shape)) if self.rng.random() < 0.6) or (len(x.shape) - 1,)
        return b.reduce(x, kind=self.choice(("sum", "max", "min", "prod")), axes=axes)

    # -- narrow and unsigned integers and bfloat16 (issue 15) ---------------------------
    def narrow_pattern(self) -> Node:
        """A chain in int8 ... uint64 or bfloat16: wrapping, unsigned division by 0,
        converts in (saturating from floats) and out, a reduction or a dot (with int32 or
        float32 accumulation), so every op meets the new dtypes beside the others."""
        b = self.b
        dt = self.choice(NARROW_DTYPES)
        x = self.pick(lambda n: n.dtype is dt)
        if x is None or self.rng.random() < 0.3:
            x = (b.convert(self.operand(DTYPES), dtype=dt) if self.rng.random() < 0.4 else
                 self.fresh(TensorType(dt, self.choice(SHAPES))))
        ops = [o for o in _NARROW_OPS if dt in OPS[o].operand_dtypes]
        for _ in range(int(self.rng.integers(1, 5))):
            op = self.choice(ops)
            if OPS[op].arity == 1:
                x = b.op(op, x)
                continue
            y = self.splat(x.tensor_type) if self.rng.random() < 0.4 else self.like(x.tensor_type)
            x = b.op(op, *((y, x) if self.rng.random() < 0.3 else (x, y)))
        r = self.rng.random()
        if x.shape and r < 0.3:
            kinds = ["sum", "prod", "max", "min"] + (["and", "or"] if dt.is_int else [])
            x = b.reduce(x, kind=self.choice(kinds), axes=tuple(range(len(x.shape))))
        elif x.shape and r < 0.5:
            y = self.like(TensorType(dt, (x.shape[-1], int(self.rng.integers(1, 4)))))
            wide = {DType.INT8: DType.INT32, DType.UINT8: DType.UINT32, DType.INT16: DType.INT64,
                    DType.BFLOAT16: DType.FLOAT32}.get(dt)
            extra = {"preferred_element_type": wide} if wide is not None and self.rng.random() < 0.7 else {}
            x = b.dot_general(x, y, lhs_contracting=(len(x.shape) - 1,), rhs_contracting=(0,), **extra)
        if self.rng.random() < 0.5:
            x = b.convert(x, dtype=self.choice((DType.FLOAT32, DType.INT64, DType.INT32, DType.FLOAT64)))
        return x

    def bitcast(self) -> Node:
        """An integer's bits as a float of its width, or a fresh float parameter's bits as
        an integer: a NaN computed inside a kernel has no fixed payload (0/0 is a negative
        NaN on x86, a constant-folded one positive), so floats bitcast only as loaded."""
        widths = {dt: [o for o in DTYPES if o is not dt and not o.is_bool and o.itemsize == dt.itemsize]
                  for dt in DTYPES if not dt.is_bool}
        src = self.choice([dt for dt, outs in widths.items() if outs])
        x = self.param(TensorType(src, self.choice(SHAPES))) if src.is_float else self.operand((src,))
        return self.b.op(Op.BITCAST_CONVERT, x, dtype=self.choice(widths[src]))

    # -- control flow (random_module(..., control=True)) ----------------------------
    # Loops and conditionals whose bodies and branches are random programs themselves (a
    # _BodyGen over the computation's parameters: every pattern and most primitives, and
    # loops and conditionals again up to MAX_DEPTH), so that the passes and lowerings meet
    # fusible chains, reductions, dots, counter-indexed slices and scans inside loops.
    depth = 0  # how many loop bodies or branches this generator's builder is inside
    counter: Node | None = None  # a loop counter (s32[]) this computation can read

    def body_gen(self, name: str, types: Sequence[TensorType]) -> tuple[_BodyGen, list[Node]]:
        """A generator for a sub-computation over parameters of ``types`` (in its pool)."""
        sub = _BodyGen(self.rng, name, self.depth + 1)
        params = [sub.b.parameter(t, name=f"q{k}") for k, t in enumerate(types)]
        sub.pool.extend(params)
        return sub, params

    def body_steps(self, lo: int, hi: int) -> Node | None:
        """lo..hi-1 random steps; the last one made (None if none)."""
        last = None
        for _ in range(int(self.rng.integers(lo, hi))):
            last = self.body_step()
            self.pool.append(last)
        return last

    def body_step(self) -> Node:
        """One step of a body or branch: a nested loop or conditional, a slice by the loop
        counter, or what a top-level step makes (a pattern or one op)."""
        r = self.rng.random()
        if r < 0.2 and self.depth < MAX_DEPTH:
            return self.choice((_Gen.while_pattern, _Gen.conditional_pattern))(self)
        if r < 0.35 and self.counter is not None:
            x = self.pick(lambda n: len(n.shape) >= 1 and n.shape[0] >= 1)
            if x is not None:
                return self.counter_slice(x)
        if r < 0.5:  # what fusion makes kernels of: a dot with an epilogue, a chain, a row
            return self.choice((_Gen.dense_pattern, _Gen.chain_pattern, _Gen.row_pattern))(self)
        r = self.rng.random()
        pattern = next((p for bound, p in _PATTERNS if r < bound), None)
        return pattern(self) if pattern else self.make(self.choice(_BODY_OPS))

    def counter_slice(self, x: Node) -> Node:
        """Row ``counter`` of x (clamped once the counter passes the last row)."""
        assert self.counter is not None
        b, zero = self.b, self.b.constant(np.int32(0))
        row = b.dynamic_slice(x, self.counter, *(zero for _ in x.shape[1:]), slice_sizes=(1,) + x.shape[1:])
        return b.reshape(row, shape=x.shape[1:])

    def fit(self, v: Node, t: TensorType) -> Node:
        """v made into a value of type t: reduced to a scalar and broadcast when the shapes
        differ, converted when the dtypes do."""
        b = self.b
        if v.shape != t.shape:
            if v.shape:
                v = b.reduce(v, kind=self.choice(("max", "min")), axes=tuple(range(len(v.shape))))
            if t.shape:
                v = b.broadcast_in_dim(v, shape=t.shape, broadcast_dimensions=())
        return v if v.dtype is t.dtype else b.convert(v, dtype=t.dtype)

    def update(self, x: Node, last: Node | None = None, peers: Sequence[Node] = ()) -> Node:
        """A carry's next value: ``last`` or a recent value of the body fitted to x's type,
        often combined with x itself; sometimes x unchanged (an invariant carry) or another
        carry of its type (carries that swap: in-place carries must not overwrite each other)."""
        r = self.rng.random()
        if r < 0.1 and last is None:
            return x
        swaps = [p for p in peers if p.type == x.type and p is not x]
        if swaps and r < 0.25:
            return self.choice(swaps)
        v = self.fit(last or self.other(x), x.tensor_type)
        if r < 0.3:
            return v
        ops = [op for op in _COMBINE if x.dtype in OPS[op].operand_dtypes]
        return self.b.op(self.choice(ops), x, v)

    def other(self, x: Node) -> Node:
        """A recent value of the pool other than x (x if there is none)."""
        return self.pick(lambda n: n is not x) or x

    def predicate(self, b: Builder, v: Node) -> Node:
        """A data-dependent pred[] of v (a compare of one of its reductions with a constant)."""
        if v.shape:
            v = b.reduce(v, kind=self.choice(("max", "min") if v.dtype.is_bool else ("max", "min", "sum")),
                         axes=tuple(range(len(v.shape))))
        if v.dtype.is_bool:
            return v if self.rng.random() < 0.5 else b.not_(v)
        threshold = b.constant(_cast(self.choice((0, 1, 2, -1) if not v.dtype.is_float else (0, 1, 2, -1, 0.5)),
                                     v.dtype))
        return b.compare(v, threshold, direction=self.choice(("lt", "le", "gt", "ge", "eq", "ne")))

    def carry(self) -> Node:
        """A loop's or branch's operand: a value of the pool or a fresh one of any shape
        (scalars and size 0 included)."""
        if self.rng.random() < 0.6:
            x = self.pick()
            if x is not None:
                return x
        return self.fresh(TensorType(self.choice(DTYPES), self.choice(SHAPES)))

    def trip_bound(self, trips: int) -> Node:
        i32 = TensorType(DType.INT32, ())
        return self.b.constant(np.int32(trips)) if self.rng.random() < 0.5 else self._param_value(i32, trips)

    def while_pattern(self) -> Node:
        """i = 0; while i < n [and go]: carries = body(...); i += 1. n a constant or input in
        0..4 (0 and 1 simplify away); an early exit that the body computes from the data
        (``go``) or the condition reads from a carry; 1-3 carries of any type; at times an
        input sliced by the counter (``xs``, invariant) and a scan's stacked output written
        at the counter's row (``ys``, dynamic_update_slice)."""
        b, rng = self.b, self.rng
        i32 = TensorType(DType.INT32, ())
        n = self.trip_bound(int(rng.integers(0, 5)))
        xs0 = [self.carry() for _ in range(int(rng.integers(1, 4)))]
        if len(xs0) > 1 and rng.random() < 0.4:  # two carries of one type, that may swap
            xs0[1] = self.like(xs0[0].tensor_type)
        extra: dict[str, Node] = {}
        if rng.random() < 0.35:  # a scan's stacked output: one row per trip
            row = TensorType(self.choice(DTYPES), self.choice(((), (3,), (2, 1), (0,))))
            extra["ys"] = self.fresh(TensorType(row.dtype, (int(rng.integers(1, 5)),) + row.shape))
        if rng.random() < 0.35:  # a scan's input, read a row per trip
            extra["xs"] = self.fresh(TensorType(self.choice(DTYPES), (int(rng.integers(1, 5)),) +
                                                self.choice(((), (3,), (2, 2)))))
        if rng.random() < 0.4:  # an early exit the body decides
            extra["go"] = b.constant(np.bool_(True))
        types = [i32, i32] + [x.tensor_type for x in xs0] + [v.tensor_type for v in extra.values()]
        sub, ps = self.body_gen("body", types)
        sub.counter = ps[0]
        named = dict(zip(extra, ps[2 + len(xs0):]))
        last = sub.body_steps(1, 5)  # (the first carry takes the last step: it stays in the body)
        outs = [sub.b.add(ps[0], sub.b.constant(np.int32(1))), ps[1]]
        carried = ps[2:2 + len(xs0)]
        outs += [sub.update(p, last if k == 0 else None, carried) for k, p in enumerate(carried)]
        for key, p in named.items():
            if key == "ys":
                row_t = TensorType(p.dtype, p.shape[1:])
                v = sub.fit(sub.other(p), row_t)
                zero = sub.b.constant(np.int32(0))
                outs.append(sub.b.dynamic_update_slice(p, sub.b.reshape(v, shape=(1,) + row_t.shape), ps[0],
                                                       *(zero for _ in row_t.shape)))
            elif key == "xs":
                outs.append(p)
            else:
                outs.append(sub.b.and_(p, sub.predicate(sub.b, sub.other(p))))
        cond = Builder("cond")
        cp = [cond.parameter(t, name=f"q{k}") for k, t in enumerate(types)]
        go = cond.compare(cp[0], cp[1], direction="lt")
        if "go" in named:
            go = cond.and_(go, cp[-1])
        elif rng.random() < 0.4:  # an exit the condition computes from a carry
            go = cond.and_(go, self.predicate(cond, cp[2 + int(rng.integers(len(xs0)))]))
        loop = b.op(Op.WHILE, b.constant(np.int32(0)), n, *xs0, *extra.values(),
                    condition=cond.computation(go), body=sub.b.computation(*outs))
        picks = list(range(2, len(types) - ("go" in named)))
        results = [b.get_tuple_element(loop, index=int(k)) for k in dict.fromkeys(
            self.choice(picks) for _ in range(int(rng.integers(1, 3))))]
        self.pool.extend(results[:-1])
        return results[-1]

    def conditional_pattern(self) -> Node:
        """A conditional over 1-3 operands with 1-3 branches (or two chosen by a pred[]),
        each a random computation fitted to one result type; the index a constant or an
        input (in range or not), or inside a loop the counter or a predicate of the data."""
        b, rng = self.b, self.rng
        ops = [self.carry() for _ in range(int(rng.integers(1, 4)))]
        if self.counter is not None and rng.random() < 0.5:
            ops.append(self.counter)  # the branches may slice by it too
        out_t = self.choice(ops).tensor_type if rng.random() < 0.7 else TensorType(self.choice(DTYPES),
                                                                                 self.choice(SHAPES))
        by_pred = rng.random() < 0.3
        nb = 2 if by_pred else int(rng.integers(1, 4))
        r = rng.random()
        if by_pred:
            index = self.predicate(b, self.pick() or ops[0])
        elif self.counter is not None and r < 0.5:
            index = self.counter
        else:
            k = int(rng.integers(-1, nb + 1))
            i32 = TensorType(DType.INT32, ())
            index = b.constant(np.int32(k)) if r < 0.75 else self._param_value(i32, k)
        branches = []
        for j in range(nb):
            sub, ps = self.body_gen(f"branch{j}", [o.tensor_type for o in ops])
            if self.counter is not None and ops[-1] is self.counter:
                sub.counter = ps[-1]
            last = sub.body_steps(0, 4)
            v = sub.fit(last if last is not None else sub.choice(ps), out_t)
            same = [p for p in ps if p.type == out_t]
            if same and rng.random() < 0.5:
                cands = [op for op in _COMBINE if out_t.dtype in OPS[op].operand_dtypes]
                v = sub.b.op(sub.choice(cands), sub.choice(same), v)
            branches.append(sub.b.computation(v))
        return b.op(Op.CONDITIONAL, index, *ops, branches=tuple(branches))

    def _param_value(self, t: TensorType, value: int) -> Node:
        self.inputs.append(np.asarray(value, t.dtype.np))
        return self.b.parameter(t)

    # -- ops ----------------------------------------------------------------------
    def make(self, op: Op) -> Node:  # one branch per op family is the point
        b, d = self.b, OPS[op]
        if op is Op.BITCAST_CONVERT:
            return self.bitcast()
        if d.traits.elementwise and op not in (Op.CONVERT, Op.SELECT, Op.COMPARE):
            x = self.operand(d.operand_dtypes)
            ys = [self.splat(x.tensor_type) if self.rng.random() < 0.35 else self.like(x.tensor_type)
                  for _ in range((d.arity or 1) - 1)]
            if ys and n_commutes(op) and self.rng.random() < 0.3:
                x, ys[0] = ys[0], x
            return b.op(op, x, *ys)
        if op is Op.COMPARE:
            x = self.operand(DTYPES)
            return b.compare(x, self.like(x.tensor_type), direction=self.choice(("eq", "ne", "lt", "le", "gt", "ge")))
        if op is Op.SELECT:
            x = self.operand(DTYPES)
            y = self.like(x.tensor_type)
            p = self.pick(lambda n: n.dtype is DType.BOOL and n.shape == x.shape)
            if p is None:
                p = b.compare(x, y, direction=self.choice(("lt", "gt", "eq")))
            return b.select(p, x, y) if self.rng.random() < 0.7 else b.select(b.not_(p), x, y)
        if op is Op.CONVERT:
            return b.convert(self.operand(DTYPES), dtype=self.choice(DTYPES))
        if op is Op.REDUCE:
            x = self.operand(DTYPES)
            kinds = ["max", "min"] + (["sum", "prod"] if not x.dtype.is_bool else []) + (
                ["and", "or"] if not x.dtype.is_float else [])
            axes = tuple(i for i in range(len(x.shape)) if self.rng.random() < 0.5)
            return b.reduce(x, kind=self.choice(kinds), axes=axes)
        if op is Op.DOT_GENERAL:
            x = self.operand(frozenset(DTYPES) - {DType.BOOL})
            if not x.shape:
                x = b.broadcast_in_dim(x, shape=(3,), broadcast_dimensions=())
            k = x.shape[-1]
            y = self.like(TensorType(x.dtype, (k, int(self.rng.integers(1, 4)))))
            return b.dot_general(x, y, lhs_contracting=(len(x.shape) - 1,), rhs_contracting=(0,))
        if op is Op.BROADCAST_IN_DIM:
            x = self.operand(DTYPES)
            shape = list(x.shape)
            dims = list(range(len(shape)))
            pos = int(self.rng.integers(len(shape) + 1))
            shape.insert(pos, 2)
            dims = [i if i < pos else i + 1 for i in dims]
            shape = [2 if s == 1 and self.rng.random() < 0.5 else s for s in shape]
            return b.broadcast_in_dim(x, shape=tuple(shape), broadcast_dimensions=tuple(dims))
        if op is Op.RESHAPE:
            x = self.operand(DTYPES)
            n = x.tensor_type.size
            options = [(n,), (1, n), (n, 1)] + ([tuple(reversed(x.shape))] if x.shape else [])
            return b.reshape(x, shape=self.choice(options))
        if op is Op.TRANSPOSE:
            x = self.operand(DTYPES)
            return b.transpose(x, permutation=tuple(int(i) for i in self.rng.permutation(len(x.shape))))
        if op is Op.SLICE:
            x = self.operand(DTYPES)
            start, limit, stride = [], [], []
            for s in x.shape:
                a = int(self.rng.integers(0, s + 1))
                start.append(a)
                limit.append(int(self.rng.integers(a, s + 1)))
                stride.append(int(self.rng.integers(1, 3)))
            return b.slice(x, start=start, limit=limit, stride=stride)
        if op is Op.PAD:
            x = self.operand(DTYPES)
            r = len(x.shape)
            lo, hi, it = ([int(v) for v in self.rng.integers(0, 3, r)] for _ in range(3))
            return b.pad(x, self.const(TensorType(x.dtype, ())), low=lo, high=hi, interior=it)
        if op is Op.CONCATENATE:
            x = self.operand(DTYPES)
            if not x.shape:
                x = b.reshape(x, shape=(1,))
            return b.concatenate(x, self.like(x.tensor_type), dimension=int(self.rng.integers(len(x.shape))))
        if op is Op.REVERSE:
            x = self.operand(DTYPES)
            return b.reverse(x, dimensions=tuple(i for i in range(len(x.shape)) if self.rng.random() < 0.5))
        if op is Op.IOTA:
            shape = self.choice([s for s in SHAPES if s])
            return b.iota(shape=shape, dtype=self.choice([t for t in DTYPES if not t.is_bool]),
                          dimension=int(self.rng.integers(len(shape))))
        if op is Op.CONSTANT:
            return self.const(TensorType(self.choice(DTYPES), self.choice(SHAPES)))
        if op is Op.RNG_BIT_GENERATOR:
            key = self.pick(lambda n: n.type == TensorType(DType.INT64, ())) or self.fresh(TensorType(DType.INT64, ()))
            return b.rng_bit_generator(key, shape=self.choice(SHAPES), dtype=self.choice((DType.INT32, DType.INT64)))
        if op is Op.CONVOLUTION:
            return self.convolution()
        if op is Op.REDUCE_WINDOW:
            x = self.operand(DTYPES)
            kinds = ["max", "min"] + (["sum"] if not x.dtype.is_bool else []) + (
                ["and", "or"] if not x.dtype.is_float else [])
            r = len(x.shape)
            ints = lambda lo, hi: tuple(int(v) for v in self.rng.integers(lo, hi, r))  # noqa: E731 - local shorthand
            return b.reduce_window(x, kind=self.choice(kinds), window_dimensions=ints(1, 4), window_strides=ints(1, 3),
                                   padding_low=ints(0, 2), padding_high=ints(0, 2), base_dilations=ints(1, 3),
                                   window_dilations=ints(1, 3))
        if op is Op.CUSTOM_CALL:
            _ensure_custom_call()
            x = self.operand((DType.FLOAT32, DType.INT32))
            return b.custom_call(x, target=CUSTOM_TARGET, shape=x.shape, dtype=x.dtype)
        # sorting
        if op is Op.SORT:
            return self.sort()
        if op in _INDEXING:
            return _INDEXING[op](self)
        if op in _COLLECTIVES:
            return _COLLECTIVES[op](self)
        raise AssertionError(f"no generator for {op}")

    def sort(self) -> Node:
        """A sort of 1-2 keys (often with ties and specials), with a carried operand of
        another dtype or an iota (the permutation itself) at times, any output chosen."""
        b = self.b
        x = self.operand(DTYPES)
        if not x.shape:
            x = b.reshape(x, shape=(1,))
        t = x.tensor_type
        dim = int(self.rng.integers(len(t.shape)))
        keys = [x] + ([self.like(t)] if self.rng.random() < 0.3 else [])
        carried = []
        if self.rng.random() < 0.5:
            carried.append(b.iota(shape=t.shape, dtype=self.choice((DType.INT32, DType.INT64)), dimension=dim))
        if self.rng.random() < 0.3:
            carried.append(self.like(TensorType(self.choice(DTYPES), t.shape)))
        operands = keys + carried
        return b.op(Op.SORT, *operands, dimension=dim, num_keys=len(keys), descending=int(self.rng.integers(2)),
                    index=int(self.rng.integers(len(operands))))

    # -- indexing: indices from -5..5 and the integer extremes, so windows clamp or drop --
    def index(self, shape: tuple[int, ...]) -> Node:
        return self.fresh(TensorType(self.choice((DType.INT32, DType.INT64)), shape))

    def indexed_operand(self) -> tuple[Node, int]:
        """An operand of rank >= 1 and an axis of it with at least one element."""
        x = self.operand(DTYPES)
        if not x.shape or 0 in x.shape:
            x = self.fresh(TensorType(x.dtype, self.choice(((3,), (4, 3), (2, 1, 4)))))
        return x, int(self.rng.integers(len(x.shape)))

    def gather(self) -> Node:
        x, a = self.indexed_operand()
        ids = self.index(self.choice(((2,), (3, 2), (1,), ())))
        rank, nb = len(x.shape), len(ids.shape)
        sizes = tuple(1 if d == a else int(self.rng.integers(0, n + 1)) for d, n in enumerate(x.shape))
        return self.b.gather(x, ids, offset_dims=tuple(range(nb, nb + rank - 1)), collapsed_slice_dims=(a,),
                             start_index_map=(a,), index_vector_dim=nb, slice_sizes=sizes)

    def scatter(self) -> Node:
        x, a = self.indexed_operand()
        k = int(self.rng.integers(0, 4))
        rest = tuple(n for d, n in enumerate(x.shape) if d != a)
        # float add/mul with duplicates round in another order than the reference: ints only
        kinds = ("replace", "min", "max") + (("add", "mul") if not x.dtype.is_float else ())
        return self.b.scatter(x, self.index((k,)), self.like(TensorType(x.dtype, (k,) + rest)),
                              update_window_dims=tuple(range(1, len(x.shape))), inserted_window_dims=(a,),
                              scatter_dims_to_operand_dims=(a,), index_vector_dim=1, kind=self.choice(kinds))

    def dynamic_slice(self) -> Node:
        x = self.operand(DTYPES)
        sizes = tuple(int(self.rng.integers(0, n + 1)) for n in x.shape)
        return self.b.dynamic_slice(x, *(self.index(()) for _ in x.shape), slice_sizes=sizes)

    def dynamic_update_slice(self) -> Node:
        x = self.operand(DTYPES)
        u = self.like(TensorType(x.dtype, tuple(int(self.rng.integers(0, n + 1)) for n in x.shape)))
        return self.b.dynamic_update_slice(x, u, *(self.index(()) for _ in x.shape))


#: indexing ops -> their generator (see _Gen.index)
_INDEXING: dict[Op, Callable[[_Gen], Node]] = {
    Op.GATHER: _Gen.gather, Op.SCATTER: _Gen.scatter, Op.DYNAMIC_SLICE: _Gen.dynamic_slice,
    Op.DYNAMIC_UPDATE_SLICE: _Gen.dynamic_update_slice,
}


# collectives: a random module runs as one replica (the differential tests evaluate it
# alone), so each is over the one group {0}; the kit's cases run several replicas
_ONE = {"replica_groups": (0,), "group_size": 1}


def _numeric(g: _Gen) -> Node:
    return g.operand(frozenset(DTYPES) - {DType.BOOL})


def _dim_of(g: _Gen, x: Node) -> Node:
    return x if x.shape else g.b.reshape(x, shape=(1,))


_COLLECTIVES: dict[Op, Callable[[_Gen], Node]] = {
    Op.ALL_REDUCE: lambda g: g.b.op(Op.ALL_REDUCE, _numeric(g), kind=g.choice(("sum", "prod", "max", "min")), **_ONE),
    Op.ALL_GATHER: lambda g: g.b.op(Op.ALL_GATHER, x := _dim_of(g, g.operand(DTYPES)),
                                    dimension=int(g.rng.integers(len(x.shape))), **_ONE),
    Op.REDUCE_SCATTER: lambda g: g.b.op(Op.REDUCE_SCATTER, x := _dim_of(g, _numeric(g)),
                                        kind=g.choice(("sum", "max")), dimension=len(x.shape) - 1, **_ONE),
    Op.ALL_TO_ALL: lambda g: g.b.op(Op.ALL_TO_ALL, x := _dim_of(g, g.operand(DTYPES)), split_dimension=0,
                                    concat_dimension=len(x.shape) - 1, **_ONE),
    Op.COLLECTIVE_PERMUTE: lambda g: g.b.op(Op.COLLECTIVE_PERMUTE, g.operand(DTYPES),
                                            source_target_pairs=g.choice(((0, 0), ()))),
    Op.REPLICA_ID: lambda g: g.b.op(Op.REPLICA_ID),
}


def n_commutes(op: Op) -> bool:
    return OPS[op].traits.commutative


#: every core primitive but parameter (parameters appear as fresh operands)
GENERATED_OPS: tuple[Op, ...] = tuple(sorted(CORE_PRIMITIVES - {Op.PARAMETER}, key=lambda o: o.value))
# elementwise ops three times as often: they are what rewrites and fusion work on
_WEIGHTED: tuple[Op, ...] = GENERATED_OPS + 2 * tuple(o for o in GENERATED_OPS if OPS[o].traits.elementwise)


#: (cumulative probability, pattern) per step; the rest of the steps make one random op
_PATTERNS: tuple[tuple[float, Callable[[_Gen], Node]], ...] = (
    (0.06, _Gen.row_pattern), (0.10, _Gen.dense_pattern), (0.14, _Gen.nonfinite_pattern),
    (0.18, _Gen.int_pattern), (0.20, _Gen.f16_pad_pattern), (0.24, _Gen.chain_pattern),
    (0.28, _Gen.narrow_pattern), (0.29, _Gen.threshold_pattern),
)


#: with control=True, the share of steps that make a loop or a conditional
_CONTROL_PATTERNS: tuple[tuple[float, Callable[[_Gen], Node]], ...] = (
    (0.15, _Gen.while_pattern), (0.25, _Gen.conditional_pattern),
)
#: loops and conditionals nest this deep (a loop in a body or branch in a body or branch)
MAX_DEPTH = 2
#: how a body's value joins a carry (each op on the dtypes its table row allows)
_COMBINE = (Op.ADD, Op.SUB, Op.MUL, Op.MAX, Op.MIN, Op.XOR, Op.AND, Op.OR)
#: the ops a body or branch makes: no collectives (a random module is one replica, and
#: no backend claims them: a loop holding one would only ever run on the host) and no
#: custom call (the same: cpu refuses a loop holding one)
_BODY_OPS: tuple[Op, ...] = tuple(o for o in _WEIGHTED if o not in _COLLECTIVES and o is not Op.CUSTOM_CALL)


class _BodyGen(_Gen):
    """Makes a loop body, condition or branch: its fresh values are constants (a
    computation's only parameters are its operands), its rng the module's (one stream per seed)."""

    def __init__(self, rng: np.random.Generator, name: str, depth: int) -> None:
        self.rng, self.depth = rng, depth
        self.b = Builder(name)
        self.pool = []
        self.inputs = []  # the values of its constants' draws go nowhere

    def param(self, t: TensorType) -> Node:
        return self.const(t)

    def _param_value(self, t: TensorType, value: int) -> Node:
        return self.b.constant(np.asarray(value, t.dtype.np))

    def clean(self, t: TensorType) -> Node:
        return self.b.constant(self.clean_values(t))


def random_module(seed: int, n_nodes: int, *, control: bool = False) -> tuple[Module, list[np.ndarray]]:
    """A random well-typed module with about ``n_nodes`` ops, and inputs for it; with
    ``control``, loops and conditionals too (a separate stream: the default keeps the one
    every backend's differential test runs; the cpu's and opencl's run both)."""
    g = _Gen(seed)
    while len(g.pool) < n_nodes:
        r = g.rng.random()
        if control and r < _CONTROL_PATTERNS[-1][0]:
            g.pool.append(next(p for bound, p in _CONTROL_PATTERNS if r < bound)(g))
            continue
        pattern = next((p for bound, p in _PATTERNS if r < bound), None)
        g.pool.append(pattern(g) if pattern else g.make(g.choice(_WEIGHTED)))
    outs = [g.pool[-1]] + [g.choice(g.pool) for _ in range(int(g.rng.integers(0, 3)))]
    return g.b.build(*outs), g.inputs
