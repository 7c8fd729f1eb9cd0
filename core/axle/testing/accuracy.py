"""Accuracy of a backend's math functions in ulps, over every binade of a dtype.

For each function (the transcendental primitives of the op table, plus sqrt and rsqrt) and
float dtype, inputs are drawn from every binade of the dtype's finite range (random
mantissas, both signs where the function is defined there), run on a device, and compared
with the interpreter's NumPy reference evaluated in float64 (for float16 and float32 that is
exact to far below their ulp; for float64 it is the platform libm, itself within about an
ulp, except sin and cos, which come from ``axle.testing.exact``). The error of one result is
|got - ref| in units of the dtype's ulp at ref; NaN where the reference has NaN (and nowhere
else), infinities of the same sign, and results equal
to the reference rounded to the dtype count as exact.

``tools/accuracy.py`` prints the table kept in docs/reliability.md.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..backend import CompileOptions
from ..ir import Builder, DType, Module, Op
from ..ir.ops import OPS
from ..registry import REGISTRY
from .exact import sincos_array

if TYPE_CHECKING:
    from ..backend import Device

_FINFO = {  # dtype: (precision p, exponent of the smallest subnormal, smallest normal exponent, largest exponent)
    DType.FLOAT16: (11, -24, -14, 15),
    DType.FLOAT32: (24, -149, -126, 127),
    DType.FLOAT64: (53, -1074, -1022, 1023),
}
_POSITIVE = frozenset({Op.LOG, Op.SQRT, Op.RSQRT, Op.POW})  # where negative inputs give NaN


def functions() -> list[Op]:
    """Every transcendental primitive of the op table, then sqrt and rsqrt."""
    trans = [op for op, d in OPS.items() if d.traits.transcendental]
    return trans + [op for op in (Op.SQRT, Op.RSQRT) if op not in trans]


def ulp_error(got: np.ndarray, ref: np.ndarray, dtype: DType, ref_tail: np.ndarray | None = None) -> np.ndarray:
    """|got - (ref + ref_tail)| in ulps of ``dtype`` at ref, elementwise (float64 result);
    0 where both are NaN or got equals ref rounded to the dtype (infinities included), inf
    where only one is NaN or got is infinite and ref is not."""
    p, emin_sub, _, _ = _FINFO[dtype]
    got = np.asarray(got).astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    _, e = np.frexp(ref)
    ulp = np.ldexp(1.0, np.maximum(e - p, emin_sub))
    with np.errstate(all="ignore"):
        diff = got - ref
        if ref_tail is not None:
            diff = diff - ref_tail
        err = np.abs(diff) / ulp
        rounded = ref.astype(dtype.np).astype(np.float64)
    same = (got == rounded) | (np.isnan(got) & np.isnan(ref))
    bad = (np.isnan(got) != np.isnan(ref)) | (np.isinf(got) & ~np.isinf(rounded))
    return np.where(same, 0.0, np.where(bad, np.inf, err))


def binade_sweep(dtype: DType, per_binade: int, rng: np.random.Generator, *, positive: bool = False,
                 exponents: Sequence[int] | None = None) -> np.ndarray:
    """``per_binade`` random values from each binade (subnormals count as one binade per
    exponent below the smallest normal), both signs unless ``positive``."""
    p, emin_sub, emin, emax = _FINFO[dtype]
    exps = range(emin_sub, emax + 1) if exponents is None else exponents
    mant = rng.random((len(exps), per_binade))  # [0, 1): the position inside the binade
    e = np.asarray(list(exps), dtype=np.float64)[:, None]
    # 2^e (1 + m) rounded to the dtype stays inside the binade (or reaches its top end)
    x = np.ldexp(1.0 + np.floor(mant * 2.0 ** (p - 1)) / 2.0 ** (p - 1), e.astype(np.int64))
    k = np.minimum(e, emin) - emin_sub  # a subnormal binade holds 2^k multiples of the smallest subnormal
    x = np.where(e < emin, np.ldexp(np.floor(mant * 2.0 ** k) + 2.0 ** k, emin_sub), x)
    x = x.reshape(-1).astype(dtype.np)
    x = x[np.isfinite(x)]
    return x if positive else np.concatenate([x, -x])


@dataclass(frozen=True)
class Measured:
    max_ulp: float
    worst_input: tuple[float, ...]
    count: int


def _module(op: Op, dtype: DType, n: int) -> Module:
    """op on one (pow: two) dtype[n] parameters."""
    b = Builder(f"acc_{op.name.lower()}_{dtype.name.lower()}")
    xs = [b.parameter(f"{dtype.value}[{n}]") for _ in range(OPS[op].arity or 1)]
    return b.build(b.op(op, *xs))


def inputs(op: Op, dtype: DType, per_binade: int, seed: int = 0) -> list[np.ndarray]:
    """The sweep's inputs for ``op``: x over every binade; for pow also y in [-4, 4]; for
    atan2 the second operand is the same sweep shuffled (every ratio of magnitudes)."""
    rng = np.random.default_rng(seed)
    x = binade_sweep(dtype, per_binade, rng, positive=op in _POSITIVE)
    if op is Op.POW:
        return [x, rng.uniform(-4.0, 4.0, x.size).astype(dtype.np)]
    if OPS[op].arity == 2:
        return [x, rng.permutation(x)]
    return [x]


def reference(op: Op, args: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, tails or None): float64 sin and cos from ``axle.testing.exact`` (far beyond
    float64), everything else the interpreter's NumPy reference evaluated in float64."""
    if args[0].dtype == np.float64 and op in _EXACT:
        return sincos_array(args[0], _EXACT[op])
    with np.errstate(all="ignore"):
        return np.asarray(OPS[op].reference(*[a.astype(np.float64) for a in args]), dtype=np.float64), None


_EXACT = {Op.SIN: "sin", Op.COS: "cos"}


@dataclass(frozen=True)
class Sweep:
    """One function's inputs for one dtype and their reference."""

    op: Op
    dtype: DType
    args: list[np.ndarray]
    ref: np.ndarray
    tail: np.ndarray | None

    @classmethod
    def make(cls, op: Op, dtype: DType, per_binade: int, seed: int = 0) -> Sweep:
        args = inputs(op, dtype, per_binade, seed)
        return cls(op, dtype, args, *reference(op, args))


def measure(device: Device, sweep: Sweep) -> Measured:
    """Max ulp error of the sweep's function on ``device`` (see the module docstring)."""
    module = _module(sweep.op, sweep.dtype, sweep.args[0].size)
    be = REGISTRY.backend(device.backend)
    exe = be.compile(module, device, CompileOptions())
    got = be.to_host(exe.execute([be.to_device(a, device) for a in sweep.args])[0])
    err = ulp_error(got, sweep.ref, sweep.dtype, sweep.tail)
    i = int(np.argmax(err))
    return Measured(float(err[i]), tuple(float(a[i]) for a in sweep.args), int(err.size))


def supports(device: Device, op: Op, dtype: DType) -> bool:
    caps = REGISTRY.backend(device.backend).capabilities(device)
    return op in caps.ops and dtype in caps.op_dtypes.get(op, caps.dtypes)


def _cell(m: Measured | None) -> str:
    if m is None:
        return "n/a"
    return "inf" if not np.isfinite(m.max_ulp) else f"{m.max_ulp:.2f}"


def table(devices: Sequence[Device], ops: Sequence[Op], dtypes: Sequence[DType], per_binade: int,
          progress: Callable[[str], None] | None = None) -> tuple[str, dict[tuple[str, str, str], Measured]]:
    """(Markdown table: a row per function and dtype, a column per device; the measurements
    keyed by (function, dtype, device))."""
    results: dict[tuple[str, str, str], Measured] = {}
    names = [str(d) for d in devices]
    lines = ["| function | dtype | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for op in ops:
        for dt in dtypes:
            cells = []
            sweep = Sweep.make(op, dt, per_binade)
            for dev in devices:
                m = measure(dev, sweep) if supports(dev, op, dt) else None
                if m is not None:
                    results[(op.name.lower(), dt.np.name, str(dev))] = m
                if progress:
                    progress(f"{op.name.lower()} {dt.np.name} {dev}: {_cell(m)}")
                cells.append(_cell(m))
            lines.append(f"| {op.name.lower()} | {dt.np.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines), results
