"""The interpreter's eager launcher binds exact fast forms of some references
(backends/interpreter.py ``_EXACT``): they must give bit-identical results, in the
reference's dtype, to the op table's reference, warn about nothing the reference
hides, and leave every other case to the reference."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from axle.backend import Buffer
from axle.backends.interpreter import _EXACT, InterpreterExecutable
from axle.frontend.eager import one_op_module
from axle.ir.dtypes import dtype
from axle.ir.ops import OPS, Op
from axle.ir.types import TensorType
from axle.registry import REGISTRY

_SPECIAL = np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, 1e38, -1e38, 3.0, 1e-40, 0.5])


def _values(dt: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt.kind == "f":
        x = rng.standard_normal(shape) * 10
        flat = x.reshape(-1)
        flat[: min(flat.size, _SPECIAL.size)] = rng.permutation(_SPECIAL)[: flat.size]
        return x.astype(dt)
    return rng.integers(-1000, 1000, shape).astype(dt)


def _launch(op: Op, arrays: list[np.ndarray], attrs: dict) -> tuple[np.ndarray, bool]:
    """The interpreter launcher's result for ``op`` and whether it took a fast form."""
    types = [TensorType(dtype(a.dtype), a.shape) for a in arrays]
    module = one_op_module(op, types, attrs)
    dev = REGISTRY.backend("interpreter").devices()[0]
    exe = InterpreterExecutable(module, dev)
    run = exe.launcher()
    assert run is not None
    (out,) = run([Buffer(dev, t, a) for t, a in zip(types, arrays)])
    assert out.type == module.entry.root.type
    return out.handle, _EXACT.get(op, lambda n: None)(module.entry.root) is not None


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


CASES = [
    *((op, dt, 2) for op in (Op.ADD, Op.SUB, Op.MUL) for dt in ("float32", "float64", "int32", "int64")),
    *((Op.NEG, dt, 1) for dt in ("float32", "int64")),
    *((op, dt, 1) for op in (Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.SIN, Op.COS) for dt in ("float32", "float64")),
]


@pytest.mark.parametrize("op,dt,arity", CASES, ids=[f"{o.value}-{d}" for o, d, _ in CASES])
def test_elementwise_fast_forms_equal_the_reference(op: Op, dt: str, arity: int) -> None:
    arrays = [_values(np.dtype(dt), (3, 4), seed) for seed in range(arity)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the reference is quiet: so is its fast form
        got, fast = _launch(op, arrays, {})
    assert fast
    _same(got, OPS[op].reference(*arrays))


@pytest.mark.parametrize("kind,dt,shape,axes", [
    ("sum", "float32", (8,), (0,)), ("sum", "float64", (3, 5), (1,)), ("prod", "float32", (2, 3, 4), (0, 2)),
    ("sum", "int32", (6,), (0,)), ("max", "int64", (4, 3), (0,)), ("min", "int32", (4, 3), (0, 1)),
    ("sum", "float32", (0, 3), (0,)),
])
def test_reduce_fast_forms_equal_the_reference(kind: str, dt: str, shape: tuple, axes: tuple) -> None:
    x = _values(np.dtype(dt), shape, 1)
    attrs = {"kind": kind, "axes": axes}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, fast = _launch(Op.REDUCE, [x], attrs)
    assert fast
    _same(got, OPS[Op.REDUCE].reference(x, **attrs))


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (4, 4, 4), (3, 17, 5), (64, 300, 33), (2, 0, 3)])
def test_matmul_fast_form_equals_the_reference_bit_for_bit(dt: str, m: int, k: int, n: int) -> None:
    a = _values(np.dtype(dt), (m, k), 2)  # inf, nan, -0... in the lhs
    b = np.abs(np.random.default_rng(3).standard_normal((k, n))).astype(dt)
    if k:
        a[0, :] = -0.0  # a row of -0 products: the reference's sum is +0
    attrs = {"lhs_contracting": (1,), "rhs_contracting": (0,), "lhs_batch": (), "rhs_batch": ()}
    got, fast = _launch(Op.DOT_GENERAL, [a, b], attrs)
    assert fast
    want = OPS[Op.DOT_GENERAL].reference(a, b, **attrs)
    _same(got, want)
    assert not np.signbit(got[0]).any() or not k


@pytest.mark.parametrize("op,arrays,attrs", [
    (Op.ADD, [np.ones(3, np.float16)] * 2, {}),  # widened in float32 by the reference
    (Op.REDUCE, [np.array([0.0, -0.0], np.float32)], {"kind": "max", "axes": (0,)}),  # signed-zero fixup
    (Op.REDUCE, [np.ones(4, np.float16)], {"kind": "sum", "axes": (0,)}),  # float32 accumulator
    (Op.DOT_GENERAL, [np.ones((2, 3, 4), np.float32)] * 2,
     {"lhs_contracting": (2,), "rhs_contracting": (2,), "lhs_batch": (0,), "rhs_batch": (0,)}),
    (Op.DOT_GENERAL, [np.ones((3, 4), np.int32), np.ones((4, 2), np.int32)],
     {"lhs_contracting": (1,), "rhs_contracting": (0,), "lhs_batch": (), "rhs_batch": ()}),
])
def test_other_cases_run_the_reference(op: Op, arrays: list, attrs: dict) -> None:
    got, fast = _launch(op, arrays, attrs)
    assert not fast
    _same(got, np.asarray(OPS[op].reference(*arrays, **attrs)))
