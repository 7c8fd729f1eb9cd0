"""Test cases for every core primitive: modules plus inputs, run on a device and compared
with the reference interpreter.

Shapes cover scalars, size-0 and size-1 dims and odd sizes that divide no vector or
work-group width; float inputs carry NaN, ±inf and -0.0; integer inputs carry the
division corner cases (0, -1, INT_MIN)."""
from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backend import Device
from ..config import config
from ..device_compile import expand_for
from ..frontend.device_put import to_buffer
from ..interpreter import evaluate, evaluate_spmd
from ..ir.builder import Builder
from ..ir.collectives import run_replicas
from ..ir.conv import conv_dimension_numbers
from ..ir.dotdims import DotDims
from ..ir.dtypes import DType, dtype, finfo, is_float_numpy
from ..ir.module import Computation, Module, Node
from ..ir.ops import CUSTOM_CALL_TARGETS, OPS, Op, register_custom_call
from ..ir.types import TensorType
from ..partition import unsupported_nodes
from ..registry import REGISTRY
from .session import compile_case

FLOAT_DTYPES = (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.BFLOAT16)
ALL = tuple(DType)

#: Elementwise shapes: scalar, empty, single, odd 1-D (not a multiple of 4/8/16/64),
#: a 2-D shape with an odd minor dim, a 3-D shape with a zero dim, and a large-ish one.
EW_SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (1,), (7,), (3, 5), (2, 0, 3), (1, 1, 1), (1029,))
REDUCE_SHAPES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((7,), (0,)), ((0,), (0,)), ((1,), (0,)), ((3, 5), (1,)), ((3, 5), (0,)), ((3, 5), (0, 1)),
    ((4, 0), (1,)), ((2, 3, 5), (0, 2)), ((129, 33), (1,)), ((33, 129), (0,)), ((1000,), (0,)), ((5,), ()),
    # axes are a set given in any order: the builder must hand the device the sorted set
    ((2, 3, 5), (2, 0)),
)


@dataclass
class OpCase:
    id: str
    module: Module
    inputs: list[np.ndarray]
    ops: frozenset[Op] = field(default_factory=frozenset)
    #: an SPMD case (collectives): each replica's inputs, run a thread per replica; ``inputs``
    #: is then replica 0's. Empty: one replica, on ``inputs``.
    replica_inputs: list[list[np.ndarray]] = field(default_factory=list)

    @property
    def dtypes(self) -> frozenset[DType]:
        out = set()
        for n in self.module.entry.nodes:
            if isinstance(n.type, TensorType):
                out.add(n.type.dtype)
        return frozenset(out)


def random_input(rng: np.random.Generator, t: TensorType, *, special: bool = True, positive: bool = False,
                 small: bool = False) -> np.ndarray:
    """Random values of type t, with edge values mixed in where the array is big enough."""
    n = t.size
    dt = t.dtype
    if dt.is_bool:
        return rng.random(t.shape) < 0.5
    if dt.is_int:
        hi = 4 if small else 100
        lo = 1 if positive else (0 if dt.is_unsigned else -hi)
        x = rng.integers(lo, hi, size=t.shape).astype(dt.np)
        if special and n >= 6 and not positive and not small:
            flat = x.reshape(-1)
            info = np.iinfo(dt.np)
            # the division corners: 0, -1 and INT_MIN (unsigned: 0, 1 and the top bit set)
            flat[:4] = [0, -1, info.min, info.max] if dt.is_signed else [0, 1, info.max, info.max // 2 + 1]
        return x
    x = rng.standard_normal(t.shape) * (1 if small else 3)
    if positive:
        x = np.abs(x) + 0.1
    x = x.astype(dt.np)
    if special and n >= 8 and not positive:
        flat = x.reshape(-1)
        flat[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    return x


#: Transcendental ops held to a bound in ulps (float32/float64) rather than the general
#: transcendental tolerance: every shipped backend measured within 3.2 ulps of the exact
#: value (docs/reliability.md), and the interpreter's NumPy within a few more.
ULP_TOLERANCE: dict[Op, int] = {op: 16 for op in (Op.TAN, Op.EXPM1, Op.LOG1P, Op.CBRT, Op.ERF, Op.ATAN2)}


def tolerance(dt: DType, op: Op | None = None, n_reduced: int = 1) -> tuple[float, float]:
    """(rtol, atol) a backend must meet against the interpreter."""
    transcendental = op is not None and OPS[op].traits.transcendental
    # bfloat16: two of its ulps (2^-7 relative); like float16 it is computed in float32 and
    # rounded once, so a one-ulp difference in float32 can flip its rounding
    base = {DType.FLOAT16: 2e-3, DType.BFLOAT16: 1.6e-2, DType.FLOAT32: 2e-6, DType.FLOAT64: 1e-13}.get(dt, 0.0)
    if op in ULP_TOLERANCE and dt in (DType.FLOAT32, DType.FLOAT64):
        base = ULP_TOLERANCE[op] * float(np.finfo(dt.np).eps)
    elif transcendental:
        base *= {DType.FLOAT16: 2, DType.BFLOAT16: 2, DType.FLOAT32: 4, DType.FLOAT64: 100}.get(dt, 1)
    if n_reduced > 1:
        base *= 4 * math.sqrt(n_reduced) if not dt.is_half else 8
    atol = {DType.FLOAT16: 1e-3, DType.BFLOAT16: 8e-3, DType.FLOAT32: 1e-6, DType.FLOAT64: 1e-12}.get(dt, 0.0) * (
        math.sqrt(n_reduced) if n_reduced > 1 else 1)
    return base, atol


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str = "") -> None:
    """Exact for integers and bools; NaN-aware, inf-exact allclose for floats."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != expected {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != expected {expected.dtype}"
    if expected.dtype.kind in "biu" or (rtol == 0 and atol == 0):
        np.testing.assert_array_equal(actual, expected, err_msg=what)
    else:
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=what)


def reduced_terms(node: Node) -> int:
    """How many terms ``node`` (a reduce, dot, convolution or reduce-window) sums into each
    result element; else 1."""
    if node.op is Op.REDUCE:
        return math.prod(node.operands[0].shape[a] for a in node.attr["axes"])
    if node.op is Op.DOT_GENERAL:
        return DotDims.of(node).k
    if node.op is Op.CONVOLUTION:
        rhs = node.operands[1].shape
        return rhs[node.attr["kernel_input_feature_dimension"]] * math.prod(
            rhs[d] for d in node.attr["kernel_spatial_dimensions"])
    if node.op is Op.REDUCE_WINDOW:
        return math.prod(node.attr["window_dimensions"])
    return 1


def n_reduced(module: Module) -> int:
    """The most terms any one reduce or dot of ``module`` sums (1 if none), loop bodies
    and branches included."""
    return max((reduced_terms(n) for c in module.computations() for n in c.nodes), default=1)


def assert_program_close(module: Module, actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                         what: str = "") -> None:
    """The comparison for whole programs (random or fused) against the interpreter: each
    result within its dtype's tolerance, transcendental when the program has any such op,
    widened by the longest reduction, times 8 because chains of ops compound rounding."""
    assert len(actual) == len(expected), f"{what}: {len(actual)} results, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_close(a, e, *program_tolerance(module, np.asarray(e).dtype), f"{what} result {i}")


def program_tolerance(module: Module, result_dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) for a result of a whole program (see assert_program_close)."""
    transcendental = any(node.traits.transcendental for c in module.computations() for node in c.nodes)
    rtol, atol = tolerance(DType(_dtype_value(result_dtype)), Op.EXP if transcendental else None, n_reduced(module))
    return rtol * 8, atol * 8


def _case(name: str, build: Callable[..., Any], types: Sequence[TensorType],
          rng: np.random.Generator, **input_kw: Any) -> OpCase:
    b = Builder(name.replace("-", "_").replace("[", "_").replace("]", "").replace(",", "x").replace(" ", "")[:60])
    params = [b.parameter(t, name=f"a{i}") for i, t in enumerate(types)]
    root = build(b, params)
    module = b.build(*root) if isinstance(root, tuple) else b.build(root)
    inputs = [random_input(rng, t, **input_kw) for t in types]
    ops = frozenset(n.op for n in module.entry.nodes)
    return OpCase(name, module, inputs, ops)


def _t(dt: DType, shape: Sequence[int]) -> TensorType:
    return TensorType(dt, tuple(shape))


#: (a, b) pairs on which IEEE 754-2019 max/min order the zeros (-0.0 < +0.0): both
#: operand orders, equal zeros, and NaN beside a zero
_ZERO_PAIRS = ((0.0, -0.0), (-0.0, 0.0), (0.0, 0.0), (-0.0, -0.0), (np.nan, -0.0), (-0.0, np.nan), (1.0, -0.0),
               (-1.0, 0.0))
#: rows whose max/min is a zero picked from both kinds (or NaN)
_ZERO_ROWS = ((0.0, -0.0, -0.0), (-0.0, -0.0, 0.0), (-0.0, -0.0, -0.0), (0.0, 0.0, 0.0), (np.nan, -0.0, 0.0),
              (-1.0, -0.0, 0.0), (0.0, 1.0, -0.0))


def _explicit_case(name: str, build: Callable[..., Any], inputs: list[np.ndarray]) -> OpCase:
    case = _case(name, build, [_t(DType(_dtype_value(x.dtype)), x.shape) for x in inputs], np.random.default_rng(0))
    return OpCase(case.id, case.module, inputs, case.ops)


def _signed_zero_pairs(op: Op) -> list[OpCase]:
    """max/min over (-0.0, +0.0) in both orders, per float dtype (check_case compares the
    zeros' signs of these ops, which allclose alone would not)."""
    out = []
    for dt in FLOAT_DTYPES:
        a, b = (np.tile(np.array(c, dt.np), 9) for c in zip(*_ZERO_PAIRS))  # 72: vector lanes and a tail
        out.append(_explicit_case(f"{op.value}-signed-zeros-{dt.value}", lambda bl, p: bl.op(op, *p), [a, b]))
    return out


def _signed_zero_rows() -> list[OpCase]:
    """reduce max/min over rows and columns holding both zeros, per float dtype."""
    out = []
    for kind in ("max", "min"):
        for dt in FLOAT_DTYPES:
            x = np.array([list(r) * 11 for r in _ZERO_ROWS], dt.np)  # rows of 33
            for axis, xin in ((1, x), (0, np.ascontiguousarray(x.T))):
                out.append(_explicit_case(f"reduce.{kind}-signed-zeros-{dt.value}-axis{axis}",
                                          lambda bl, p, k=kind, a=axis: bl.reduce(p[0], kind=k, axes=(a,)), [xin]))
    return out


def _orders_zeros(module: Module) -> bool:
    """Whether every op of the module picks among its operands with IEEE 754-2019's
    -0.0 < +0.0 (max/min, reduce max/min): then the sign of a zero result is specified."""
    def picks(n: Node) -> bool:
        return n.op in (Op.PARAMETER, Op.MAX, Op.MIN) or n.op is Op.REDUCE and n.attr["kind"] in ("max", "min")
    return all(picks(n) for n in module.entry.nodes)


#: How one case of an op is made: (op, rng, variant, dtype, spec) -> the case, or None
#: where the variant does not apply to the dtype (reduce "and" over floats).
MakeCase = Callable[[Op, np.random.Generator, Any, DType, Any], "OpCase | None"]


@dataclass(frozen=True)
class OpCaseRow:
    """One op's row of OP_CASES: one case per (variant, dtype, spec), in that loop order
    (the order fixes which random inputs each case draws from the op's seeded generator)."""

    make: MakeCase
    #: shapes and attributes, one case per dtype and spec
    specs: tuple[Any, ...]
    #: None: every dtype the op table allows for the op's operands
    dtypes: tuple[DType, ...] | None = None
    #: an attribute looped outside the dtypes (compare's direction, reduce's kind)
    variants: tuple[Any, ...] = (None,)
    #: cases with explicit inputs, after the grid (max/min's signed zeros)
    extra: Callable[[Op], list[OpCase]] | None = None

    def cases(self, op: Op, rng: np.random.Generator) -> list[OpCase]:
        dts = self.dtypes if self.dtypes is not None else tuple(dt for dt in ALL if dt in OPS[op].operand_dtypes)
        out = [c for v in self.variants for dt in dts for s in self.specs if (c := self.make(op, rng, v, dt, s))]
        return out + (self.extra(op) if self.extra else [])


def _elementwise(**input_kw: Any) -> MakeCase:
    def make(op: Op, rng: np.random.Generator, _: Any, dt: DType, shape: tuple[int, ...]) -> OpCase:
        return _case(f"{op.value}-{dt.value}{list(shape)}", lambda b, p: b.op(op, *p),
                     [_t(dt, shape)] * (OPS[op].arity or 1), rng, **input_kw)
    return make


def _compare(op: Op, rng: np.random.Generator, direction: str, dt: DType, shape: tuple[int, ...]) -> OpCase:
    return _case(f"compare.{direction}-{dt.value}{list(shape)}", lambda b, p: b.compare(*p, direction=direction),
                 [_t(dt, shape)] * 2, rng)


def _select(op: Op, rng: np.random.Generator, _: Any, dt: DType, shape: tuple[int, ...]) -> OpCase:
    return _case(f"select-{dt.value}{list(shape)}", lambda b, p: b.select(*p),
                 [_t(DType.BOOL, shape), _t(dt, shape), _t(dt, shape)], rng)


def _convert(op: Op, rng: np.random.Generator, _: Any, src: DType, dst: DType) -> OpCase:
    return _case(f"convert-{src.value}-to-{dst.value}", lambda b, p: b.convert(p[0], dtype=dst), [_t(src, (37,))], rng)


def _reduce(op: Op, rng: np.random.Generator, kind: str, dt: DType, spec: Any) -> OpCase | None:
    if kind in ("sum", "prod") and dt.is_bool or kind in ("and", "or") and dt.is_float:
        return None
    shape, axes = spec
    small = kind == "prod"  # products of small integers stay in range
    return _case(f"reduce.{kind}-{dt.value}{list(shape)}-axes{list(axes)}",
                 lambda b, p: b.reduce(p[0], kind=kind, axes=axes), [_t(dt, shape)], rng, small=small,
                 special=not small)


def _dot(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    name, ls, rs, attrs = spec
    return _case(f"dot.{name}-{dt.value}", lambda b, p: b.dot_general(*p, **attrs), [_t(dt, ls), _t(dt, rs)], rng,
                 special=False, small=dt.is_half or dt.itemsize < 4)  # small: narrow sums stay exact


def _broadcast(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    src, shape, dims = spec
    return _case(f"broadcast-{dt.value}{list(src)}-to{list(shape)}",
                 lambda b, p: b.broadcast_in_dim(p[0], shape=shape, broadcast_dimensions=dims), [_t(dt, src)], rng)


def _reshape(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    src, shape = spec
    return _case(f"reshape-{dt.value}{list(src)}-to{list(shape)}", lambda b, p: b.reshape(p[0], shape=shape),
                 [_t(dt, src)], rng)


def _transpose(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    src, perm = spec
    return _case(f"transpose-{dt.value}{list(src)}-{list(perm)}", lambda b, p: b.transpose(p[0], permutation=perm),
                 [_t(dt, src)], rng)


def _slice(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    src, s, l, st = spec
    return _case(f"slice-{dt.value}{list(src)}-{list(s)}:{list(l)}:{list(st)}",
                 lambda b, p: b.slice(p[0], start=s, limit=l, stride=st), [_t(dt, src)], rng)


def _pad(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    src, lo, hi, it = spec
    return _case(f"pad-{dt.value}{list(src)}-{list(lo)}-{list(hi)}-{list(it)}",
                 lambda b, p: b.pad(p[0], p[1], low=lo, high=hi, interior=it), [_t(dt, src), _t(dt, ())], rng)


def _concatenate(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    srcs, dim = spec
    return _case(f"concatenate-{dt.value}-{list(srcs)}-dim{dim}", lambda b, p: b.concatenate(*p, dimension=dim),
                 [_t(dt, s) for s in srcs], rng)


def _reverse(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    src, dims = spec
    return _case(f"reverse-{dt.value}{list(src)}-{list(dims)}", lambda b, p: b.reverse(p[0], dimensions=dims),
                 [_t(dt, src)], rng)


def _iota(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    shape, dim = spec  # iota plus a parameter: the result must not be a constant-folded input
    return _case(f"iota-{dt.value}{list(shape)}-dim{dim}",
                 lambda b, p: b.add(b.iota(shape=shape, dtype=dt, dimension=dim), p[0]), [_t(dt, shape)], rng,
                 special=False)


def _constant(op: Op, rng: np.random.Generator, _: Any, dt: DType, shape: tuple[int, ...]) -> OpCase:
    vals = random_input(rng, _t(dt, shape))
    return _case(f"constant-{dt.value}{list(shape)}",
                 lambda b, p: b.op(Op.MAX if dt.is_bool else Op.ADD, b.constant(vals), p[0]), [_t(dt, shape)], rng,
                 special=False)


def _rng_bits(op: Op, rng: np.random.Generator, _: Any, dt: DType, shape: tuple[int, ...]) -> OpCase:
    return _case(f"rng-{dt.value}{list(shape)}", lambda b, p: b.rng_bit_generator(p[0], shape=shape, dtype=dt),
                 [_t(DType.INT64, ())], rng)


def _parameter(op: Op, rng: np.random.Generator, _: Any, dt: DType, shape: tuple[int, ...]) -> OpCase:
    return _case(f"parameter-{dt.value}", lambda b, p: p[0], [_t(dt, shape)], rng)


#: the custom-call target the kit's custom_call cases call (registered on first use)
_CUMSUM = "axle.testing.cumsum"


def _custom_call(op: Op, rng: np.random.Generator, _: Any, dt: DType, shape: tuple[int, ...]) -> OpCase:
    if _CUMSUM not in CUSTOM_CALL_TARGETS:
        register_custom_call(_CUMSUM, lambda x, config: np.cumsum(x, axis=-1).astype(x.dtype))
    return _case(f"custom-call-{dt.value}", lambda b, p: b.custom_call(p[0], target=_CUMSUM, shape=shape, dtype=dt),
                 [_t(dt, shape)], rng, special=False)


def _preferred_dots(op: Op) -> list[OpCase]:
    """dot_general with preferred_element_type (quantized matmuls): full-range int8 operands
    whose sums overflow int8 but not int32, bfloat16 and float16 accumulated in float32."""
    rng = np.random.default_rng(15)
    out = []
    for src, dst, lo, hi in ((DType.INT8, DType.INT32, -128, 128), (DType.UINT8, DType.UINT32, 0, 256),
                             (DType.INT16, DType.INT64, -2**15, 2**15), (DType.UINT8, DType.INT32, 0, 256)):
        for name, ls, rs, attrs in (_DOT_SPECS[1], _DOT_SPECS[6], _DOT_SPECS[8]):
            a, b = (rng.integers(lo, hi, s).astype(src.np) for s in (ls, rs))
            out.append(_explicit_case(f"dot.{name}-{src.value}-to-{dst.value}",
                                      lambda bl, p, at=attrs, d=dst: bl.dot_general(*p, preferred_element_type=d, **at),
                                      [a, b]))
    for src, dst in ((DType.BFLOAT16, DType.FLOAT32), (DType.FLOAT16, DType.FLOAT32), (DType.FLOAT32, DType.FLOAT64)):
        for name, ls, rs, attrs in (_DOT_SPECS[1], _DOT_SPECS[6]):
            a, b = (rng.standard_normal(s).astype(src.np) for s in (ls, rs))
            out.append(_explicit_case(f"dot.{name}-{src.value}-to-{dst.value}",
                                      lambda bl, p, at=attrs, d=dst: bl.dot_general(*p, preferred_element_type=d, **at),
                                      [a, b]))
    return out


def _convolution(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    name, ls, rs, layouts, window = spec
    attrs = {**conv_dimension_numbers(*layouts), **window}
    return _case(f"convolution.{name}-{dt.value}", lambda b, p: b.convolution(*p, **attrs),
                 [_t(dt, ls), _t(dt, rs)], rng, special=False, small=not dt.is_float or dt is DType.FLOAT16)


def _window(n: int, strides: Sequence[int] | None = None, low: Sequence[int] | None = None,
            high: Sequence[int] | None = None, lhs_dilation: Sequence[int] | None = None,
            rhs_dilation: Sequence[int] | None = None, **groups: int) -> dict[str, Any]:
    """convolution's window attributes for n spatial dims (1s and 0s unless given)."""
    return {"window_strides": tuple(strides or (1,) * n), "padding_low": tuple(low or (0,) * n),
            "padding_high": tuple(high or (0,) * n), "lhs_dilation": tuple(lhs_dilation or (1,) * n),
            "rhs_dilation": tuple(rhs_dilation or (1,) * n), **groups}


def _reduce_window(op: Op, rng: np.random.Generator, kind: str, dt: DType, spec: Any) -> OpCase | None:
    if kind in ("sum", "prod") and dt.is_bool or kind in ("and", "or") and dt.is_float:
        return None
    shape, window, strides, low, high, base_dil, win_dil = spec
    attrs = dict(kind=kind, window_dimensions=window, window_strides=strides, padding_low=low, padding_high=high,
                 base_dilations=base_dil, window_dilations=win_dil)
    small = kind == "prod"
    return _case(f"reduce-window.{kind}-{dt.value}{list(shape)}-w{list(window)}-s{list(strides)}-p{list(low)}"
                 f"{list(high)}-d{list(base_dil)}{list(win_dil)}",
                 lambda b, p: b.reduce_window(p[0], **attrs), [_t(dt, shape)], rng, small=small, special=not small)


_CONV_SPECS = (
    ("1d", (2, 3, 9), (4, 3, 3), ("NCH", "OIH", "NCH"), _window(1)),
    ("2d-nchw", (2, 3, 7, 6), (5, 3, 3, 2), ("NCHW", "OIHW", "NCHW"), _window(2, low=(1, 0), high=(1, 1))),
    ("2d-nhwc", (1, 6, 5, 4), (3, 3, 4, 2), ("NHWC", "HWIO", "NHWC"), _window(2, strides=(2, 1), low=(1, 1),
                                                                              high=(1, 1))),
    ("2d-dilated", (1, 2, 9, 8), (3, 2, 2, 3), ("NCHW", "OIHW", "NCHW"),
     _window(2, lhs_dilation=(2, 1), rhs_dilation=(1, 2), strides=(1, 2))),
    ("2d-negative-pad", (1, 1, 6, 6), (1, 1, 2, 2), ("NCHW", "OIHW", "NCHW"), _window(2, low=(-1, 0),
                                                                                      high=(0, -2))),
    ("depthwise", (2, 4, 5, 5), (4, 1, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2, low=(1, 1), high=(1, 1),
                                                                                feature_group_count=4)),
    ("grouped", (1, 4, 5, 5), (6, 2, 2, 2), ("NCHW", "OIHW", "NCHW"), _window(2, feature_group_count=2)),
    ("batch-groups", (4, 3, 5, 5), (6, 3, 2, 2), ("NCHW", "OIHW", "NCHW"), _window(2, batch_group_count=2)),
    ("3d", (1, 2, 4, 4, 3), (2, 2, 2, 2, 2), ("NCDHW", "OIDHW", "NCDHW"), _window(3)),
    ("out-layout", (2, 3, 5, 5), (4, 3, 3, 3), ("NCHW", "OIHW", "NHWC"), _window(2)),
    ("1x1", (3, 8, 1, 1), (5, 8, 1, 1), ("NCHW", "OIHW", "NCHW"), _window(2)),
    ("empty-batch", (0, 3, 5, 5), (2, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2)),
    ("empty-output", (1, 3, 2, 2), (2, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2)),
    ("empty-features", (1, 0, 4, 4), (2, 0, 3, 3), ("NCHW", "OIHW", "NCHW"), _window(2)),
)
_REDUCE_WINDOW_SPECS = (
    # shape, window, strides, padding low, high, base dilations, window dilations
    ((9,), (3,), (1,), (0,), (0,), (1,), (1,)),
    ((9,), (2,), (2,), (1,), (1,), (1,), (1,)),
    ((4, 6), (2, 2), (2, 2), (0, 0), (0, 1), (1, 1), (1, 1)),
    ((1, 5, 5, 3), (1, 3, 3, 1), (1, 2, 2, 1), (0, 1, 1, 0), (0, 1, 1, 0), (1, 1, 1, 1), (1, 1, 1, 1)),
    ((5, 7), (2, 3), (1, 2), (0, 0), (0, 0), (2, 1), (1, 2)),
    ((0, 4), (1, 2), (1, 1), (0, 0), (0, 0), (1, 1), (1, 1)),
    ((3, 3), (4, 4), (1, 1), (0, 0), (0, 0), (1, 1), (1, 1)),
    ((33, 17), (5, 1), (3, 1), (2, 0), (2, 0), (1, 1), (1, 1)),
    ((), (), (), (), (), (), ()),
)


# indexing: explicit index values (in range, clamped or dropped, negative, duplicate), the
# operands and updates random; int32 and int64 indices alternate between the specs.


def _with_indices(case: OpCase, at: Sequence[int], values: Sequence[np.ndarray]) -> OpCase:
    inputs = list(case.inputs)
    for i, v in zip(at, values):
        inputs[i] = v
    return OpCase(case.id, case.module, inputs, case.ops)


def _ids(values: Any, k: int) -> np.ndarray:
    return np.asarray(values, (np.int32, np.int64)[k % 2])


#: (name, operand shape, index values, attributes); index_vector_dim is in the attributes
_GATHER_SPECS: tuple[tuple[str, tuple[int, ...], Any, dict[str, Any]], ...] = (
    ("rows", (5, 3), [[0], [4], [-1], [7], [2], [2]],
     dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 3))),
    ("implicit-vector", (6,), [[5, 0, 9], [-3, 2, 2]],
     dict(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=2, slice_sizes=(1,))),
    ("windows", (4, 5, 3), [[0, 3, -2], [1, 4, 9]],
     dict(offset_dims=(0, 1), collapsed_slice_dims=(2,), start_index_map=(2, 0), index_vector_dim=0,
          slice_sizes=(2, 5, 1))),
    ("columns", (3, 6), [5, 0, 0, 2, 6],
     dict(offset_dims=(0,), collapsed_slice_dims=(1,), start_index_map=(1,), index_vector_dim=1, slice_sizes=(3, 1))),
    ("no-indices", (3, 4), np.zeros((0, 1)),
     dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 4))),
    ("empty-window", (3, 0), [[1], [2]],
     dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 0))),
    ("scalar", (5,), [3],
     dict(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=0, slice_sizes=(1,))),
    ("size-1", (1, 1), [[3], [-4]],
     dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 1))),
)


def _gather(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    name, shape, values, attrs = spec
    ids = _ids(values, _GATHER_SPECS.index(spec))
    case = _case(f"gather-{name}-{dt.value}{list(shape)}", lambda b, p: b.gather(*p, **attrs),
                 [_t(dt, shape), _t(DType(_dtype_value(ids.dtype)), ids.shape)], rng)
    return _with_indices(case, [1], [ids])


#: (name, operand shape, index values, updates shape, attributes)
_SCATTER_SPECS: tuple[tuple[str, tuple[int, ...], Any, tuple[int, ...], dict[str, Any]], ...] = (
    ("rows", (5, 3), [[1], [3], [1], [-1], [5], [4]], (6, 3),
     dict(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), index_vector_dim=1)),
    ("points", (3, 4), [[0, 1], [2, 3], [0, 1], [3, 0]], (4,),
     dict(update_window_dims=(), inserted_window_dims=(0, 1), scatter_dims_to_operand_dims=(0, 1),
          index_vector_dim=1)),
    ("windows", (4, 5), [[0, 2, 3, 1], [1, 3, 0, 1]], (2, 4, 2),
     dict(update_window_dims=(0, 2), inserted_window_dims=(), scatter_dims_to_operand_dims=(0, 1),
          index_vector_dim=0)),
    ("no-updates", (3, 2), np.zeros((0, 1)), (0, 2),
     dict(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), index_vector_dim=1)),
    ("scalar", (), np.zeros((0,)), (),
     dict(update_window_dims=(), inserted_window_dims=(), scatter_dims_to_operand_dims=(), index_vector_dim=0)),
    ("size-1", (1, 1), [[0], [0], [2]], (3, 1),
     dict(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), index_vector_dim=1)),
)


def _scatter(op: Op, rng: np.random.Generator, kind: str, dt: DType, spec: Any) -> OpCase:
    name, shape, values, ushape, attrs = spec
    ids = _ids(values, _SCATTER_SPECS.index(spec))
    types = [_t(dt, shape), _t(DType(_dtype_value(ids.dtype)), ids.shape), _t(dt, ushape)]
    case = _case(f"scatter-{kind}-{name}-{dt.value}{list(shape)}", lambda b, p: b.scatter(*p, kind=kind, **attrs),
                 types, rng)
    if dt.is_float and kind in ("add", "mul"):
        # halves add and multiply exactly in any order (the decomposition sums duplicates in
        # another order than the reference); NaN and inf still ride along
        halves = [(rng.integers(-6, 7, size=t.shape) / 2).astype(dt.np) for t in (types[0], types[2])]
        for h, src in zip(halves, (case.inputs[0], case.inputs[2])):
            h.reshape(-1)[:3] = src.reshape(-1)[:3] if src.size >= 8 else h.reshape(-1)[:3]
        return _with_indices(case, [0, 1, 2], [halves[0], ids, halves[1]])
    return _with_indices(case, [1], [ids])


#: (operand shape, start values, slice sizes)
_DYNAMIC_SLICE_SPECS = (
    ((10,), (8,), (3,)), ((5, 7), (-2, 3), (2, 4)), ((4, 6, 3), (1, 100, 0), (2, 6, 3)), ((), (), ()),
    ((3, 0), (1, 0), (2, 0)), ((1, 5), (0, -1), (1, 1)),
)


def _dynamic_slice(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    shape, starts, sizes = spec
    ss = [_ids(s, k) for k, s in enumerate(starts)]
    case = _case(f"dynamic-slice-{dt.value}{list(shape)}-at{list(starts)}-{list(sizes)}",
                 lambda b, p: b.dynamic_slice(*p, slice_sizes=sizes),
                 [_t(dt, shape)] + [_t(DType(_dtype_value(s.dtype)), ()) for s in ss], rng)
    return _with_indices(case, range(1, len(ss) + 1), ss)


#: (operand shape, update shape, start values)
_DYNAMIC_UPDATE_SLICE_SPECS = (
    ((10,), (3,), (8,)), ((5, 7), (2, 4), (-2, 3)), ((4, 6, 3), (2, 6, 1), (1, 5, 2)), ((), (), ()),
    ((3, 4), (0, 2), (1, 1)), ((1, 5), (1, 5), (0, 9)),
)


def _dynamic_update_slice(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    shape, ushape, starts = spec
    ss = [_ids(s, k) for k, s in enumerate(starts)]
    case = _case(f"dynamic-update-slice-{dt.value}{list(shape)}-{list(ushape)}-at{list(starts)}",
                 lambda b, p: b.dynamic_update_slice(*p),
                 [_t(dt, shape), _t(dt, ushape)] + [_t(DType(_dtype_value(s.dtype)), ()) for s in ss], rng)
    return _with_indices(case, range(2, len(ss) + 2), ss)


def _bitcast(op: Op, rng: np.random.Generator, _: Any, src: DType, dst: DType) -> OpCase | None:
    if src is dst or src.is_bool or dst.is_bool or src.itemsize != dst.itemsize:
        return None  # only same-width bitcasts exist (docs/ir.md)
    return _case(f"bitcast-convert-{src.value}-to-{dst.value}", lambda b, p: b.op(op, p[0], dtype=dst),
                 [_t(src, (37,))], rng)


def _shift_amounts(op: Op) -> list[OpCase]:
    """Every amount from -2 to 2 * width + 1 (the out-of-range ones give 0 or the sign
    fill) against values with the top bit set and clear, per integer dtype."""
    out = []
    for dt in sorted(OPS[op].operand_dtypes, key=lambda d: d.value):
        info = np.iinfo(dt.np)
        amounts = np.arange(-2, 2 * dt.itemsize * 8 + 2).astype(dt.np)
        # the top bit alone (set), all ones, ...: written as their bits, so unsigned dtypes
        # get the same patterns as signed ones (an unsigned min would be 0)
        bits = dt.itemsize * 8
        top = 1 << (bits - 1)
        pats = np.array([top, info.max, -1, 1, 0x5A, top + 3], object) % (1 << bits)
        vals = np.resize(pats.astype(np.uint64).astype(dt.np), amounts.shape)
        out.append(_explicit_case(f"{op.value}-amounts-{dt.value}", lambda bl, p: bl.op(op, *p), [vals, amounts]))
    return out


_SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1e-5, 6e-8, 6e4, 1e30)


def _special_pairs(op: Op) -> list[OpCase]:
    """Every pair of special values (the grid's inputs pair each special only with itself),
    per float dtype: next-after from an infinity or towards the other zero, atan2 of zeros
    and infinities."""
    out = []
    for dt in FLOAT_DTYPES:
        with np.errstate(all="ignore"):
            k = np.array(_SPECIALS).astype(dt.np)
        a, b = (g.ravel() for g in np.meshgrid(k, k))
        out.append(_explicit_case(f"{op.value}-special-pairs-{dt.value}", lambda bl, p: bl.op(op, *p), [a, b]))
    return out

def tie_heavy(rng: np.random.Generator, t: TensorType) -> np.ndarray:
    """Values with many ties (a handful of distinct keys), and for floats NaN, +-inf and
    both zeros scattered anywhere: what a sort's order, stability and NaN placement need."""
    dt = t.dtype
    if dt.is_bool:
        return rng.random(t.shape) < 0.5
    x = rng.integers(-2, 3, size=t.shape).astype(dt.np)
    flat = x.reshape(-1)
    specials = ([np.nan, np.inf, -np.inf, 0.0, -0.0] if dt.is_float
                else [np.iinfo(dt.np).min, np.iinfo(dt.np).max, 0])
    if flat.size:
        at = rng.integers(0, flat.size, size=max(1, flat.size // 4))
        flat[at] = rng.choice(np.array(specials, dt.np), size=at.size)
    return x


def _sort(op: Op, rng: np.random.Generator, _: Any, dt: DType, spec: Any) -> OpCase:
    # keys of dt, then an s32 iota along the dimension: when `index` names it the result is
    # the permutation itself, so order, stability and NaN placement are all checked exactly
    shape, dim, num_keys, descending, index = spec

    def build(b: Builder, p: list[Node]) -> Node:
        pos = b.iota(shape=shape, dtype=DType.INT32, dimension=dim)
        return b.op(Op.SORT, *p, pos, dimension=dim, num_keys=num_keys, descending=descending, index=index)

    order = "desc" if descending else "asc"
    types = [_t(dt, shape)] * num_keys
    case = _case(f"sort-{dt.value}{list(shape)}-dim{dim}-keys{num_keys}-{order}-out{index}", build, types, rng)
    return OpCase(case.id, case.module, [tie_heavy(rng, t) for t in types], case.ops)


#: (shape, dimension, num_keys, descending, index): index num_keys is the iota (an argsort)
_SORT_SPECS = (
    ((7,), 0, 1, 0, 0), ((7,), 0, 1, 1, 0), ((3, 5), 1, 1, 0, 1), ((3, 5), 0, 1, 1, 1), ((4, 6), 1, 2, 0, 2),
    ((4, 6), 1, 2, 1, 1), ((0,), 0, 1, 0, 1), ((1,), 0, 1, 1, 1), ((2, 0, 3), 2, 1, 0, 1), ((1000,), 0, 1, 0, 1),
    ((1000,), 0, 1, 1, 0), ((129, 33), 1, 1, 0, 1), ((33, 129), 0, 1, 1, 1), ((2, 3, 17), 1, 1, 0, 0),
)

_SMALL_SHAPES = ((), (7,), (3, 5), (0,))
_DOT_SPECS = (
    ("matmul", (5, 7), (7, 3), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    ("matmul-odd", (33, 65), (65, 17), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    ("matvec", (4, 6), (6,), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    ("vecvec", (9,), (9,), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    ("lhs-transposed", (7, 5), (7, 3), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    ("rhs-transposed", (5, 7), (3, 7), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
    ("batch", (2, 3, 4), (2, 4, 5), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))),
    ("batch-middle", (3, 2, 4), (4, 2, 5),
     dict(lhs_batch=(1,), rhs_batch=(1,), lhs_contracting=(2,), rhs_contracting=(0,))),
    ("empty-contract", (3, 0), (0, 4), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    ("empty-free", (0, 3), (3, 4), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    ("outer", (3,), (4,), dict(lhs_contracting=(), rhs_contracting=())),
)
_EW = OpCaseRow(_elementwise(), EW_SHAPES)
#: the narrow and unsigned integers and bfloat16 (issue 15)
_NEW_DTYPES = (DType.INT8, DType.INT16, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64, DType.BFLOAT16)
_INT_FLOAT = (DType.INT32, DType.INT64, DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, *_NEW_DTYPES)

# collectives: a case runs its module once per replica, a thread per replica (the host
# communicator exchanges the values: ir/collectives.py). An op's first case runs over one
# replica, as contract.py runs every op's first case alone.
#: (operand shape, replicas, group size)
_COLLECTIVE_SPECS: tuple[tuple[tuple[int, ...], int, int], ...] = (
    ((3, 4), 1, 1), ((6,), 2, 2), ((4, 6), 4, 2), ((2, 0, 4), 4, 4), ((8, 3), 4, 4), ((1029,), 3, 3))


def strided_groups(replicas: int, group_size: int) -> tuple[int, ...]:
    """Flat replica groups that interleave (4 replicas in 2s: {0,2},{1,3}), so that a
    backend that assumes contiguous groups fails."""
    n = replicas // group_size
    return tuple(g + k * n for g in range(n) for k in range(group_size))


def _spmd_case(name: str, build: Callable[..., Any], t: TensorType | None, replicas: int,
               rng: np.random.Generator) -> OpCase:
    case = _case(name, build, [t] if t is not None else [], rng)
    per = [[random_input(rng, t)] if t is not None else [] for _ in range(replicas)]
    return OpCase(case.id, case.module, per[0], case.ops, per if replicas > 1 else [])


def _first_divisible(shape: tuple[int, ...], n: int) -> int | None:
    return next((d for d, s in enumerate(shape) if s % n == 0), None)


def _collective(op: Op, rng: np.random.Generator, kind: Any, dt: DType, spec: Any) -> OpCase | None:
    shape, replicas, size = spec
    groups = {"replica_groups": strided_groups(replicas, size), "group_size": size}
    dim = _first_divisible(shape, size)
    attrs: dict[str, Any] | None = {
        Op.ALL_REDUCE: lambda: {"kind": kind, **groups},
        Op.ALL_GATHER: lambda: {"dimension": len(shape) - 1, **groups},
        Op.REDUCE_SCATTER: lambda: None if dim is None else {"kind": kind, "dimension": dim, **groups},
        Op.ALL_TO_ALL: lambda: None if dim is None else {"split_dimension": dim,
                                                          "concat_dimension": len(shape) - 1, **groups},
        # a ring with one link cut: the replica after the cut receives zeros
        Op.COLLECTIVE_PERMUTE: lambda: {"source_target_pairs": tuple(
            v for i in range(max(replicas - 1, 1)) for v in (i, (i + 1) % replicas))},
    }[op]()
    if attrs is None:
        return None
    tag = f"-{kind}" if kind else ""
    return _spmd_case(f"{op.value}{tag}-{dt.value}{list(shape)}x{replicas}/{size}",
                      lambda b, p: b.op(op, *p, **attrs), _t(dt, shape), replicas, rng)


def _replica_id(op: Op, rng: np.random.Generator, _: Any, dt: DType, replicas: int) -> OpCase:
    return _spmd_case(f"replica-id-x{replicas}", lambda b, p: b.op(Op.REPLICA_ID), None, replicas, rng)


_COLLECTIVE_KINDS = ("sum", "prod", "max", "min")


#: Every op a backend can claim, with the row that makes its cases: adding a primitive to
#: the op table means adding its row here (tests/core/test_reference.py checks it).
OP_CASES: dict[Op, OpCaseRow] = {
    **{op: _EW for op, d in OPS.items() if d.traits.elementwise and op not in (Op.CONVERT, Op.SELECT, Op.COMPARE)},
    Op.POW: OpCaseRow(_elementwise(small=True), EW_SHAPES),  # small: powers of large bases overflow
    Op.MAX: OpCaseRow(_elementwise(), EW_SHAPES, extra=lambda op: _signed_zero_pairs(op)),
    Op.MIN: OpCaseRow(_elementwise(), EW_SHAPES, extra=lambda op: _signed_zero_pairs(op)),
    Op.COMPARE: OpCaseRow(_compare, _SMALL_SHAPES, ALL, variants=("eq", "ne", "lt", "le", "gt", "ge")),
    Op.SELECT: OpCaseRow(_select, _SMALL_SHAPES, ALL),
    Op.CONVERT: OpCaseRow(_convert, ALL, ALL),  # specs: the destination dtype
    Op.REDUCE: OpCaseRow(_reduce, REDUCE_SHAPES, ALL, variants=("sum", "prod", "max", "min", "and", "or"),
                         extra=lambda op: _signed_zero_rows()),
    Op.DOT_GENERAL: OpCaseRow(_dot, _DOT_SPECS, (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32,
                                                  DType.INT64, *_NEW_DTYPES), extra=_preferred_dots),
    Op.CONVOLUTION: OpCaseRow(_convolution, _CONV_SPECS, (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32,
                                                          DType.INT64, *_NEW_DTYPES)),
    Op.REDUCE_WINDOW: OpCaseRow(_reduce_window, _REDUCE_WINDOW_SPECS, ALL,
                                variants=("sum", "prod", "max", "min", "and", "or")),
    Op.BROADCAST_IN_DIM: OpCaseRow(_broadcast, (
        ((), (3,), ()), ((), (0, 2), ()), ((3,), (2, 3), (1,)), ((3,), (3, 4), (0,)), ((1, 5), (4, 5), (0, 1)),
        ((2, 1, 3), (2, 7, 3), (0, 1, 2)), ((1,), (0,), (0,)), ((4, 1), (3, 4, 9), (1, 2))), ALL),
    Op.RESHAPE: OpCaseRow(_reshape, (((6,), (2, 3)), ((2, 3), (3, 2)), ((1,), ()), ((), (1, 1)), ((0, 3), (3, 0)),
                                     ((2, 3, 4), (4, 6))), ALL),
    Op.TRANSPOSE: OpCaseRow(_transpose, (((3, 5), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, 2, 1)),
                                         ((0, 3), (1, 0)), ((33, 17), (1, 0)), ((), ())), ALL),
    Op.SLICE: OpCaseRow(_slice, (((10,), (2,), (9,), (3,)), ((5, 7), (1, 0), (4, 7), (1, 2)), ((5,), (2,), (2,), (1,)),
                                 ((4, 6, 3), (0, 1, 1), (4, 6, 3), (2, 4, 1)), ((0, 3), (0, 1), (0, 3), (1, 1))), ALL),
    Op.PAD: OpCaseRow(_pad, (((3,), (1,), (2,), (0,)), ((3,), (0,), (0,), (2,)), ((2, 3), (1, 0), (0, 2), (1, 1)),
                             ((0,), (2,), (1,), (3,)), ((), (), (), ()), ((1, 4), (0, 0), (0, 0), (0, 0))), ALL),
    Op.CONCATENATE: OpCaseRow(_concatenate, (([(3,), (4,)], 0), ([(2, 3), (2, 1), (2, 0)], 1), ([(1, 2), (3, 2)], 0),
                                             ([(5,)], 0), ([(0, 2), (0, 2)], 1)), ALL),
    Op.REVERSE: OpCaseRow(_reverse, (((7,), (0,)), ((3, 5), (1,)), ((3, 5), (0, 1)), ((0, 2), (0,)),
                                     ((2, 3, 4), (0, 2))), ALL),
    Op.IOTA: OpCaseRow(_iota, (((5,), 0), ((3, 4), 1), ((3, 4), 0), ((0, 4), 1), ((2, 3, 33), 2)), _INT_FLOAT),
    Op.CONSTANT: OpCaseRow(_constant, ((), (3,), (2, 2), (0,)), ALL),
    Op.RNG_BIT_GENERATOR: OpCaseRow(_rng_bits, ((), (5,), (3, 7), (0,), (1000,)), (DType.INT32, DType.INT64)),
    Op.PARAMETER: OpCaseRow(_parameter, ((3,),), ALL),
    Op.CUSTOM_CALL: OpCaseRow(_custom_call, ((3, 5),), (DType.FLOAT32, DType.INT32)),
    # indexing
    Op.GATHER: OpCaseRow(_gather, _GATHER_SPECS, ALL),
    Op.SCATTER: OpCaseRow(_scatter, _SCATTER_SPECS, ALL, variants=("replace", "add", "mul", "min", "max")),
    Op.DYNAMIC_SLICE: OpCaseRow(_dynamic_slice, _DYNAMIC_SLICE_SPECS, ALL),
    Op.DYNAMIC_UPDATE_SLICE: OpCaseRow(_dynamic_update_slice, _DYNAMIC_UPDATE_SLICE_SPECS, ALL),
    # bit operations
    Op.BITCAST_CONVERT: OpCaseRow(_bitcast, ALL, ALL),  # specs: the destination dtype
    **{op: OpCaseRow(_elementwise(), EW_SHAPES, extra=_shift_amounts)
       for op in (Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL, Op.SHIFT_RIGHT_ARITHMETIC)},
    Op.ATAN2: OpCaseRow(_elementwise(), EW_SHAPES, extra=_special_pairs),
    Op.NEXT_AFTER: OpCaseRow(_elementwise(), EW_SHAPES, extra=_special_pairs),
    # sorting
    Op.SORT: OpCaseRow(_sort, _SORT_SPECS, ALL),
    # collectives
    Op.ALL_REDUCE: OpCaseRow(_collective, _COLLECTIVE_SPECS, variants=_COLLECTIVE_KINDS),
    Op.ALL_GATHER: OpCaseRow(_collective, _COLLECTIVE_SPECS),
    Op.REDUCE_SCATTER: OpCaseRow(_collective, _COLLECTIVE_SPECS, variants=_COLLECTIVE_KINDS),
    Op.ALL_TO_ALL: OpCaseRow(_collective, _COLLECTIVE_SPECS),
    Op.COLLECTIVE_PERMUTE: OpCaseRow(_collective, _COLLECTIVE_SPECS),
    Op.REPLICA_ID: OpCaseRow(_replica_id, (1, 2, 4), (DType.INT32,)),
}

#: The op table's ops that have no row, and why: no backend claims them, they are made by
#: the core around the claimed ops (the kit's fusion and multi-output checks cover them).
NOT_KIT_OPS: dict[Op, str] = {
    Op.TUPLE: "a multi-result root built by the core; the multi-output checks return tuples",
    Op.GET_TUPLE_ELEMENT: "reads a tuple the core built; never handed to a backend alone",
    Op.FUSION: "made by the optimizer's fusion pass; the fusion checks run the fusions it forms",
    # control flow
    Op.WHILE: "runs sub-computations: control_cases() runs loops as whole programs (0, 1, many trips, nested)",
    Op.CONDITIONAL: "runs sub-computations: control_cases() runs conditionals as whole programs (index, pred)",
}


def cases_for(op: Op, rng: np.random.Generator | None = None) -> list[OpCase]:
    """Cases exercising ``op`` alone over its dtypes and edge shapes (its OP_CASES row)."""
    if op not in OP_CASES:
        raise KeyError(f"no op cases for {op.value}: {NOT_KIT_OPS.get(op, 'add its row to OP_CASES')}")
    # A stable seed: hash() of a str changes per process (PYTHONHASHSEED).
    return OP_CASES[op].cases(op, rng or np.random.default_rng(zlib.crc32(op.value.encode())))


def fused_cases(rng: np.random.Generator | None = None) -> list[OpCase]:
    """Small programs mixing ops, so that fusions form once the optimizer runs."""
    rng = rng or np.random.default_rng(7)
    out = []
    for dt in (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16):
        for n in (1, 7, 1029):
            t = _t(dt, (n,))
            out.append(_case(f"seed-{dt.value}[{n}]",
                             lambda b, p: b.reduce(b.add(p[0], b.mul(p[1], p[2])), kind="sum", axes=(0,)),
                             [t, t, t], rng, special=False))
            out.append(_case(f"gelu-ish-{dt.value}[{n}]",
                             lambda b, p, t=t: b.mul(p[0], b.logistic(b.mul(p[0], b.constant(np.full(t.shape, 1.7,
                                                                                                     t.dtype.np))))),
                             [t], rng))
        for shape in ((4, 5), (33, 17), (1, 1)):
            t = _t(dt, shape)

            def softmax(b: Builder, p: list[Any], t: TensorType = t) -> Any:
                m = b.reduce(p[0], kind="max", axes=(1,))
                mb = b.broadcast_in_dim(m, shape=t.shape, broadcast_dimensions=(0,))
                e = b.exp(b.sub(p[0], mb))
                s = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=(1,)), shape=t.shape, broadcast_dimensions=(0,))
                return b.div(e, s)

            out.append(_case(f"softmax-{dt.value}{list(shape)}", softmax, [t], rng, special=False))

            def moments(b: Builder, p: list[Any], t: TensorType = t) -> Any:
                s = b.reduce(p[0], kind="sum", axes=(1,))
                q = b.reduce(b.mul(p[0], p[0]), kind="sum", axes=(1,))
                return (s, q)

            out.append(_case(f"moments-{dt.value}{list(shape)}", moments, [t], rng, special=False))
    for dt in (DType.INT32, DType.INT64):
        t = _t(dt, (3, 7))
        out.append(_case(f"int-chain-{dt.value}", lambda b, p: b.select(b.compare(p[0], p[1], direction="lt"),
                                                                        b.div(p[0], p[1]), b.rem(p[1], p[0])),
                         [t, t], rng))
    return out


# control flow: loops and conditionals run whole on one device (natively on one that claims
# them, as cpu, opencl and the template do, else the host fallback); each case's bounds and
# indices are inputs or constants, so the optimizer's trip-count and branch simplifications
# are checked against the loop itself.


def _sub(name: str, types: Sequence[TensorType], build: Callable[..., Any]) -> Computation:
    """A sub-computation over parameters of ``types``; ``build(b, params)`` returns its
    root value or a tuple of values (returned as a tuple)."""
    b = Builder(name)
    params = [b.parameter(t, name=f"c{i}") for i, t in enumerate(types)]
    out = build(b, params)
    return b.computation(b.op(Op.TUPLE, *out) if isinstance(out, tuple) else out)


def _counted_loop(b: Builder, n: Node, x: Node, step: Callable[[Builder, Node, Node], Node]) -> Node:
    """``for i in range(n): x = step(b, i, x)`` as a while over (i, n, x); returns x."""
    i32 = _t(DType.INT32, ())
    types = [i32, i32, x.tensor_type]
    cond = _sub("cond", types, lambda c, p: c.compare(p[0], p[1], direction="lt"))
    body = _sub("body", types, lambda c, p: (c.add(p[0], c.constant(np.int32(1))), p[1], step(c, p[0], p[2])))
    loop = b.op(Op.WHILE, b.constant(np.int32(0)), n, x, condition=cond, body=body)
    return b.get_tuple_element(loop, index=2)


def _affine(c: Builder, i: Node, x: Node) -> Node:
    t = x.tensor_type
    half = c.broadcast_in_dim(c.constant(np.asarray(0.5, t.dtype.np)), shape=t.shape, broadcast_dimensions=())
    iv = c.broadcast_in_dim(c.convert(i, dtype=t.dtype), shape=t.shape, broadcast_dimensions=())
    return c.add(c.mul(x, half), iv)


def _branches(t: TensorType) -> tuple[Computation, ...]:
    return (_sub("plus_one", [t], lambda c, p: c.add(p[0], c.broadcast_in_dim(
                 c.constant(np.asarray(1, t.dtype.np)), shape=t.shape, broadcast_dimensions=()))),
            _sub("twice", [t], lambda c, p: c.add(p[0], p[0])),
            _sub("negated", [t], lambda c, p: c.neg(p[0])))


def control_cases() -> list[OpCase]:
    """Loops with 0, 1 and many trips (bounds given as inputs and as constants), nested
    loops, a conditional inside a loop, size-0 carries, conditionals on an s32 index (out
    of range included: the last branch) and on a pred."""
    out = []
    for dt in (DType.FLOAT32, DType.INT64):
        for shape in ((7,), (0,), (2, 0)):
            t = _t(dt, shape)
            x = random_input(np.random.default_rng(3), t, small=True)
            for trips in (0, 1, 5, -2):
                out.append(_explicit_case(f"while-{trips}-trips-{dt.value}{list(shape)}",
                                          lambda b, p: _counted_loop(b, p[0], p[1], _affine),
                                          [np.asarray(trips, np.int32), x]))
                out.append(_explicit_case(f"while-const-{trips}-trips-{dt.value}{list(shape)}",
                                          lambda b, p, k=trips: _counted_loop(b, b.constant(np.int32(k)), p[0],
                                                                              _affine), [x]))
    t = _t(DType.FLOAT32, (3, 4))
    x = random_input(np.random.default_rng(4), t, special=False, small=True)
    out.append(_explicit_case("while-nested-f32[3,4]", lambda b, p: _counted_loop(
        b, p[0], p[1], lambda c, i, v: _counted_loop(c, c.add(i, c.constant(np.int32(2))), v, _affine)),
        [np.asarray(4, np.int32), x]))

    def switch_step(c: Builder, i: Node, v: Node) -> Node:
        k = c.rem(i, c.constant(np.int32(3)))
        return c.op(Op.CONDITIONAL, k, v, branches=_branches(v.tensor_type))

    out.append(_explicit_case("while-conditional-inside-f32[3,4]",
                              lambda b, p: _counted_loop(b, p[0], p[1], switch_step), [np.asarray(7, np.int32), x]))
    for k in (0, 1, 2, 3, -1):
        out.append(_explicit_case(f"conditional-index-{k}-f32[3,4]", lambda b, p: b.op(
            Op.CONDITIONAL, p[0], p[1], branches=_branches(t)), [np.asarray(k, np.int32), x]))
    for flag in (False, True):
        out.append(_explicit_case(f"conditional-pred-{str(flag).lower()}-f32[3,4]", lambda b, p: b.op(
            Op.CONDITIONAL, p[0], p[1], branches=_branches(t)[:2]), [np.asarray(flag), x]))
    return out


def core_cases(ops: Sequence[Op] | None = None) -> Iterator[OpCase]:
    """The cases of ``ops`` (default: every op of OP_CASES), ops in name order."""
    for op in sorted(ops or OP_CASES, key=lambda o: o.value):
        yield from cases_for(op)


@contextlib.contextmanager
def strict_placement(on: bool = True) -> Iterator[None]:
    """Strict placement for the duration: nothing may fall back to the host."""
    old = config.strict_placement
    config.strict_placement = on
    try:
        yield
    finally:
        config.strict_placement = old


def device_claims(module: Module, device: Device) -> bool:
    """Whether the device's capabilities cover every node of ``module`` (an extended op it
    does not claim counts as covered when its decomposition is: the device runs that)."""
    return not unsupported_nodes(expand_for(module, device)[0], REGISTRY.backend_for(device).capabilities(device))


def run_case(case: OpCase, device: Device, *, optimize: bool = True) -> list[np.ndarray]:
    """Compiles and runs a case on a device; returns host arrays. When the device claims
    every op of the case, it runs under strict placement: a backend whose compile fails
    must fail the case, not pass it through the host fallback. Extended ops it does not
    claim count as claimed when their decomposition is (the device runs that)."""
    claimed = device_claims(case.module, device)
    with strict_placement(claimed or config.strict_placement):
        exe, _ = compile_case(case.module, device, optimize=optimize)
    outs = exe.execute([to_buffer(x, device) for x in case.inputs])
    backend = REGISTRY.backend_for(device)
    return [np.asarray(backend.to_host(o)) for o in outs]


def reference_results(case: OpCase) -> list[list[np.ndarray]]:
    """The interpreter's results of a case, one list per replica (one replica but for SPMD cases)."""
    if case.replica_inputs:
        return evaluate_spmd(case.module, case.replica_inputs)
    return [evaluate(case.module, *case.inputs)]


def run_case_spmd(case: OpCase, device: Device, *, optimize: bool = True) -> list[list[np.ndarray]]:
    """An SPMD case compiled once and run by a thread per replica on ``device``, each
    replica's collectives exchanging through one rendezvous; each replica's results."""
    claimed = device_claims(case.module, device)
    with strict_placement(claimed or config.strict_placement):
        exe, _ = compile_case(case.module, device, optimize=optimize)
    backend = REGISTRY.backend_for(device)

    def run(r: int) -> list[np.ndarray]:
        outs = exe.execute([to_buffer(x, device) for x in case.replica_inputs[r]])
        return [np.asarray(backend.to_host(o)) for o in outs]

    return run_replicas(len(case.replica_inputs), run)


def check_case(case: OpCase, device: Device, *, optimize: bool = True) -> None:
    """Asserts the device's results equal the interpreter's within the op's tolerance
    (every replica's, for an SPMD case)."""
    if case.replica_inputs:
        expected_all = reference_results(case)
        for r, actual in enumerate(run_case_spmd(case, device, optimize=optimize)):
            assert_case_close(case, actual, expected_all[r], device)
        return
    expected = evaluate(case.module, *case.inputs)
    actual = run_case(case, device, optimize=optimize)
    assert_case_close(case, actual, expected, device)


def assert_case_close(case: OpCase, actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                      device: Device) -> None:
    """check_case's comparison: within the case's tolerance, signs of zeros where they count."""
    assert len(actual) == len(expected), f"{case.id}: {len(actual)} results, expected {len(expected)}"
    root_ops = [n.op for n in case.module.entry.nodes]
    main_op = next((o for o in reversed(root_ops) if OPS[o].traits.transcendental), None)
    n_reduced = max((reduced_terms(n) for n in case.module.entry.nodes if isinstance(n.type, TensorType)),
                    default=1)
    bound = _dot_error_bound(case)
    for i, (a, e) in enumerate(zip(actual, expected)):
        rtol, atol = tolerance(DType(_dtype_value(e.dtype)), main_op, max(n_reduced, 1))
        if bound is not None:
            # A dot whose terms cancel has a tiny result but an error that scales with
            # |A|.|B|: any summation order other than NumPy's differs by up to K*eps*|A|.|B|.
            err = np.abs(a.astype(np.float64) - e.astype(np.float64))
            ok = err <= rtol * np.abs(e.astype(np.float64)) + atol + bound
            assert ok.all(), f"{case.id} (result {i}) on {device.name}: max error {err.max()} exceeds the dot bound"
            continue
        assert_close(a, e, rtol, atol, f"{case.id} (result {i}) on {device.name}")
        if _orders_zeros(case.module) and is_float_numpy(e.dtype):
            zero = e == 0
            np.testing.assert_array_equal(np.signbit(a[zero]), np.signbit(e[zero]),
                                          err_msg=f"{case.id} (result {i}) on {device.name}: signs of zeros")


def _dot_error_bound(case: OpCase) -> np.ndarray | None:
    """For a case that is one float dot or convolution of two parameters, alone or with an
    elementwise epilogue (bias, activation, convert): K*eps*(|A|.|B|) per element (K the
    terms each result sums; the case run on |inputs| gives |A|.|B|, plus the bias's)."""
    nodes = case.module.entry.nodes
    dots = [n for n in nodes if n.op in (Op.DOT_GENERAL, Op.CONVOLUTION)]
    if len(dots) != 1 or not all(o.op is Op.PARAMETER for o in dots[0].operands) or not dots[0].dtype.is_float:
        return None
    (dot,) = dots
    # an epilogue: elementwise ops after the dot, on broadcast parameters or constants
    if not all(n is dot or n.traits.elementwise or n.op in _EPILOGUE_LEAVES for n in nodes):
        return None
    mag = evaluate(case.module, *[np.abs(x) for x in case.inputs])[0].astype(np.float64)
    return 2.0 * reduced_terms(dot) * float(finfo(dot.dtype).eps) * np.abs(mag)


#: the ops an epilogue's other operands may come from (besides elementwise ops)
_EPILOGUE_LEAVES = frozenset({Op.PARAMETER, Op.CONSTANT, Op.BROADCAST_IN_DIM})


def bias_relu(b: Builder, d: Node) -> Node:
    """``relu(d + bias)``, the bias a new parameter along ``d``'s last dim: a dense layer's
    epilogue (one output fusion with its dot where the backend fuses them)."""
    shape = d.shape
    bias = b.parameter(TensorType(d.dtype, shape[-1:]))
    z = b.add(d, b.broadcast_in_dim(bias, shape=shape, broadcast_dimensions=(len(shape) - 1,)))
    zero = b.broadcast_in_dim(b.constant(np.zeros((), d.dtype.np)), shape=shape, broadcast_dimensions=())
    return b.max(z, zero)


def row_softmax(b: Builder, x: Node) -> Node:
    """Softmax over ``x``'s last axis (max and sum of exp over it, each element divided): a
    row fusion wherever the backend has one."""
    shape, last = x.shape, len(x.shape) - 1
    keep = tuple(range(last))
    mx = b.broadcast_in_dim(b.reduce(x, kind="max", axes=(last,)), shape=shape, broadcast_dimensions=keep)
    e = b.exp(b.sub(x, mx))
    s = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=(last,)), shape=shape, broadcast_dimensions=keep)
    return b.div(e, s)


def _dtype_value(npd: np.dtype) -> str:
    return dtype(npd).value
