"""Dot epilogue fusion on every backend that takes it (cpu, opencl, the template claiming
everything): a dot_general and its elementwise consumers (bias add, relu, tanh, logistic,
gelu's chain, a scaled residual add, a convert) are one ``output`` fusion, one kernel,
and agree with the interpreter for float32/float64/float16/int32 dots at odd shapes
(1, 7, 33, 129, size 0, a K long enough for several K blocks), with batch dims and
transposed operands; opencl's local-memory (GPU) strategy too."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.config import config
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.module import Module, Node
from axle.ir.ops import OPS, Op
from axle.ir.types import TensorType
from axle.lowering.plan import kernel_plan
from axle.testing import require_backend
from axle.testing.cases import OpCase, compile_case, random_input, run_case, tolerance

# name: lhs shape, rhs shape, dot_general attributes (output [batch..., M, N])
LAYOUTS: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict]] = {
    "odd": ((7, 33), (33, 129), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "one-row": ((1, 129), (129, 7), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "one-column": ((33, 7), (7, 1), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "empty-rows": ((0, 7), (7, 33), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "empty-k": ((7, 0), (0, 33), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "long-k": ((9, 1100), (1100, 40), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "batch": ((3, 7, 33), (3, 33, 9), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,),
                                           rhs_contracting=(1,))),
    "lhs-transposed": ((33, 7), (33, 17), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    "rhs-transposed": ((7, 33), (17, 33), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
}


def _bias(b: Builder, d: Node, dt: DType, extra: list[TensorType]) -> Node:
    n = d.shape[-1]
    extra.append(TensorType(dt, (n,)))
    p = b.parameter(extra[-1])
    return b.add(d, b.broadcast_in_dim(p, shape=d.shape, broadcast_dimensions=(len(d.shape) - 1,)))


def _splat(b: Builder, v: float, dt: DType, shape: tuple[int, ...]) -> Node:
    return b.broadcast_in_dim(b.constant(v, dt), shape=shape, broadcast_dimensions=())


def _gelu(b: Builder, x: Node, dt: DType) -> Node:
    s = x.shape
    inner = b.mul(_splat(b, 0.7978845608, dt, s), b.add(x, b.mul(_splat(b, 0.044715, dt, s), b.mul(x, b.mul(x, x)))))
    return b.mul(b.mul(_splat(b, 0.5, dt, s), x), b.add(_splat(b, 1.0, dt, s), b.tanh(inner)))


def _residual(b: Builder, d: Node, dt: DType, extra: list[TensorType]) -> Node:
    extra.append(TensorType(dt, d.shape))
    return b.add(b.mul(d, _splat(b, 2.0 if dt.is_int else 0.5, dt, d.shape)), b.parameter(extra[-1]))


_CONVERT_TO = {DType.FLOAT32: DType.FLOAT16, DType.FLOAT64: DType.FLOAT32, DType.FLOAT16: DType.FLOAT32,
               DType.INT32: DType.FLOAT32}

#: epilogue name -> (builder of the epilogue over the dot, whether it needs a float dot)
EPILOGUES: dict[str, tuple[Callable[[Builder, Node, DType, list[TensorType]], Node], bool]] = {
    "bias": (_bias, False),
    "relu": (lambda b, d, dt, ex: b.max(_bias(b, d, dt, ex), _splat(b, 0, dt, d.shape)), False),
    "tanh": (lambda b, d, dt, ex: b.tanh(_bias(b, d, dt, ex)), True),
    "logistic": (lambda b, d, dt, ex: b.logistic(d), True),
    "gelu": (lambda b, d, dt, ex: _gelu(b, _bias(b, d, dt, ex), dt), True),
    "residual": (_residual, False),
    "convert": (lambda b, d, dt, ex: b.convert(_bias(b, d, dt, ex), dtype=_CONVERT_TO[dt]), False),
}
DTYPES = (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32)


def epilogue_case(layout: str, epilogue: str, dt: DType) -> OpCase:
    ls, rs, attrs = LAYOUTS[layout]
    b = Builder(f"epi_{layout}_{epilogue}".replace("-", "_"))
    x, w = b.parameter(TensorType(dt, ls)), b.parameter(TensorType(dt, rs))
    extra: list[TensorType] = []
    root = EPILOGUES[epilogue][0](b, b.dot_general(x, w, **attrs), dt, extra)
    module = b.build(root)
    rng = np.random.default_rng(len(layout) * 31 + len(epilogue))
    small = dt is DType.FLOAT16
    inputs = [random_input(rng, t, special=False, small=small)
              for t in (TensorType(dt, ls), TensorType(dt, rs), *extra)]
    if dt.is_int:  # sums that stay far from overflow: the float convert sees exact values
        inputs = [np.asarray(rng.integers(-9, 10, size=a.shape), dtype=a.dtype) for a in inputs]
    return OpCase(f"{layout}-{epilogue}-{dt.value}", module, inputs)


def _dot_bound(case: OpCase) -> np.ndarray:
    """K * eps * (|A|.|B|) per output element: how far any summation order may stray."""
    dot = next(n for n in case.module.entry.nodes if n.op is Op.DOT_GENERAL)
    attrs = dict(dot.attrs)
    b = Builder("bound")
    x, w = (b.parameter(TensorType(DType.FLOAT64, o.shape)) for o in dot.operands)
    mag = evaluate(b.build(b.dot_general(x, w, **attrs)), *(np.abs(a.astype(np.float64)) for a in case.inputs[:2]))[0]
    k = int(np.prod([dot.operands[0].shape[c] for c in attrs["lhs_contracting"]]))
    # float16 dots sum in float32 and round once (the rounding is the result's tolerance);
    # integer dots are exact
    eps = {DType.FLOAT16: 2.0**-24, DType.FLOAT32: 2.0**-24, DType.FLOAT64: 2.0**-53}.get(dot.dtype, 0.0)
    return max(k, 1) * eps * mag


def check_epilogue(case: OpCase, device) -> Module:  # noqa: ANN001
    """One output fusion (one kernel), and the interpreter's values: exact for integers,
    for floats within the dot's summation bound (the epilogues here at most double an
    error) plus the output dtype's rounding."""
    exe, optimized = compile_case(case.module, device)
    kinds = [n.attr["kind"] for n in optimized.entry.nodes if n.op is Op.FUSION]
    assert kinds == ["output"], f"{case.id}: fusions {kinds}"
    n = exe.report()["kernels"]  # an empty output may need no launch at all
    assert n == 1 or (n == 0 and case.module.entry.root.tensor_type.size == 0), f"{case.id}: {n} kernels"
    (expected,) = evaluate(case.module, *case.inputs)
    (actual,) = run_case(case, device)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, case.id
    if expected.dtype.kind in "iu":
        np.testing.assert_array_equal(actual, expected, err_msg=case.id)
        return optimized
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    ops = [n.op for n in case.module.entry.nodes]
    main_op = next((o for o in ops if OPS[o].traits.transcendental), None)
    rtol, atol = tolerance(case.module.entry.root.dtype, main_op)
    dot_dt = next(n for n in case.module.entry.nodes if n.op is Op.DOT_GENERAL).dtype
    if dot_dt is DType.FLOAT16:  # the dot's own float16 rounding, then the epilogue's
        rtol, atol = 2 * rtol + 1e-3, 2 * atol + 1e-3
    tol = 2 * _dot_bound(case) + rtol * np.abs(e) + atol
    err = np.abs(a - e)
    assert (err <= tol).all(), f"{case.id} on {device.name}: max excess {(err - tol).max()}"
    return optimized


#: layouts that run every (epilogue, dtype); every other layout runs each epilogue in one
#: dtype, rotating with the layout (layout and epilogue dtype are separate parts of the
#: kernel: each pair of them is met without the whole product)
EVERY_DTYPE = ("odd", "batch", "rhs-transposed")


def _cases() -> list[tuple[str, str, DType]]:
    out = []
    for i, lay in enumerate(LAYOUTS):
        for j, (epi, (_, float_only)) in enumerate(EPILOGUES.items()):
            dts = [dt for dt in DTYPES if not (float_only and dt.is_int)]
            out += [(lay, epi, dt) for dt in (dts if lay in EVERY_DTYPE else [dts[(i + j) % len(dts)]])]
    return out


@pytest.fixture(params=["cpu", "opencl", "template"])
def device(request):  # noqa: ANN001, ANN201
    if request.param == "template":
        config.backend_flags["template_claim_all"] = "true"  # the template claims dot_general
        yield require_backend("template")
        config.backend_flags.pop("template_claim_all", None)
        return
    yield require_backend(request.param)


@pytest.mark.parametrize(("layout", "epilogue", "dt"), _cases(), ids=lambda v: getattr(v, "value", v))
def test_dot_and_its_epilogue_are_one_kernel_and_match_the_interpreter(layout, epilogue, dt, device) -> None:  # noqa: ANN001
    check_epilogue(epilogue_case(layout, epilogue, dt), device)


@pytest.mark.parametrize("layout", ["odd", "batch", "rhs-transposed", "long-k"])
def test_opencl_local_memory_dot_kernel_takes_the_epilogue(layout: str) -> None:
    dev = require_backend("opencl")
    config.backend_flags["opencl_strategy"] = "gpu"
    try:
        for dt in (DType.FLOAT32, DType.INT32):
            check_epilogue(epilogue_case(layout, "relu", dt), dev)
            check_epilogue(epilogue_case(layout, "convert", dt), dev)
    finally:
        config.backend_flags.pop("opencl_strategy", None)


def _softmax_relu_dense(x, w, bias):  # noqa: ANN001, ANN202
    h = anp.maximum(bias + x @ w, 0.0)
    e = anp.exp(h - anp.max(h, axis=-1, keepdims=True))
    return e / anp.sum(e, axis=-1, keepdims=True)


def _dense_relu(x, w, bias):  # noqa: ANN001, ANN202
    return anp.maximum(x @ w + bias, 0.0)


@pytest.mark.parametrize("backend", ["cpu", "opencl"])
def test_softmax_of_relu_of_biased_matmul_is_two_kernels_and_the_pre_activation_never_reaches_memory(
        backend: str) -> None:
    dev = require_backend(backend)
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((33, 64), (64, 129), (129,))]
    for fn, n_kernels in ((_softmax_relu_dense, 2), (_dense_relu, 1)):
        lowered = axle.jit(fn, device=dev).lower(*args)
        case = OpCase(fn.__name__, lowered.module, args)
        exe, optimized = compile_case(case.module, dev)
        assert exe.report()["kernels"] <= n_kernels, (fn.__name__, exe.report()["kernels"])
        # every buffer the plan holds is an input, the dot's own sum, or a result: the
        # biased value and its relu are computed inside the kernels that read them
        plan = kernel_plan(optimized)
        temps = {launch.computation.root.op for launch in plan.launches if not set(launch.outputs) & set(plan.results)}
        assert not temps & {Op.ADD, Op.MAX}, (fn.__name__, temps)
        (expected,) = evaluate(case.module, *args)
        (actual,) = run_case(case, dev)
        np.testing.assert_allclose(actual, expected, rtol=2e-4, atol=2e-5)  # K = 64 summed in another order
    # the dense layer alone: one output fusion whose one output is the result
    ((launch),) = plan.launches
    assert launch.kind == "output" and launch.outputs == tuple(plan.results)
