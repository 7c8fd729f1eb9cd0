"""Hand-built fusions for tests (the optimizer builds them once it lands): wrap a whole
entry computation into one fusion node, optionally routing every parameter and result
through an exact elementwise identity (neg(neg(x)), not(not(p))) so that movement ops,
reductions and dots read fused producer values instead of loading their inputs."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from axle.config import config
from axle.ir.builder import Builder, make_node
from axle.ir.dtypes import DType
from axle.ir.module import Computation, Module, Node
from axle.ir.ops import Op
from axle.ir.verifier import verify
from axle.passes.fusion import classify_computation
from axle.passes.policy import FusionPolicy
from axle.testing.prebuild import prebuild

#: a test file's ``PREBUILT`` (conftest.py builds ahead what its tests compile): test function
#: name -> what one of its tests compiles on opencl:0, (module, optimize) pairs, from the
#: test's parameters
Prebuilt = dict[str, Callable[[dict[str, Any]], list[tuple[Module, bool]]]]

#: the fusion pass's rules without its size limits, for whole-program test fusions
UNLIMITED = FusionPolicy(max_fusion_nodes=10**9, max_inline_cost=10**12, max_fused_constant_elements=10**12)


def _ident(b: Builder, x: Node) -> Node:
    if x.dtype is DType.BOOL:
        return b.not_(b.not_(x))
    return b.neg(b.neg(x))


def fusion_kind(comp: Computation) -> str:
    """The fusion pass's kind for the whole computation (its classify, with no size
    limits); "loop" for a kernel the pass would not form (a dot inside, a reduction read
    back across rows): the OpenCL backend plans a kernel from its computation."""
    return classify_computation(comp, UNLIMITED) or "loop"


def fuse_whole(module: Module, *, wrap: bool = True, kind: str | None = None) -> Module:
    """The module with its entry's computation moved into one fusion node."""
    entry = module.entry
    inner = Builder(module.name + "_fused")
    params = [inner.parameter(p.tensor_type) for p in entry.parameters]
    env: dict[int, Node] = {}
    for p, q in zip(entry.parameters, params):
        env[p.uid] = _ident(inner, q) if wrap else q
    for n in entry.nodes:
        if n.op is Op.PARAMETER:
            continue
        env[n.uid] = make_node(n.op, [env[o.uid] for o in n.operands], dict(n.attrs), loc=n.loc)
    roots = list(entry.root.operands) if entry.root.op is Op.TUPLE else [entry.root]
    outs = [_ident(inner, env[r.uid]) if wrap and r.op is not Op.PARAMETER else env[r.uid] for r in roots]
    comp = inner.computation(*outs)
    outer = Builder(module.name)
    oparams = [outer.parameter(p.tensor_type) for p in entry.parameters]
    f = outer.fusion(*oparams, kind=kind or fusion_kind(comp), computation=comp)
    if len(roots) == 1:
        m = Module(module.name, outer.computation(f))
    else:
        m = Module(module.name, outer.computation(*[outer.get_tuple_element(f, index=i) for i in range(len(roots))]))
    verify(m)
    return m


def opencl_device():  # noqa: ANN201
    """opencl:0; in CI a missing OpenCL device fails the run (axle.testing.require_backend)."""
    from axle.testing import require_backend

    return require_backend("opencl")


def prebuild_tests(prebuilt: Prebuilt, tests: list[tuple[str, dict[str, Any]]], device) -> None:  # noqa: ANN001
    """Builds ahead what the ``tests`` ((function name, parameters)) compile, one batch per
    launch strategy (axle.testing.prebuild: PoCL's cost per program, and per link of its
    kernel library, paid once for the batch, not per test); a test's ``strategy``
    parameter is the opencl_strategy flag while its modules build, as the ``strategy``
    fixture sets it while the test runs."""
    by_strategy: dict[str | None, list[tuple[Module, bool]]] = defaultdict(list)
    for name, params in tests:
        by_strategy[params.get("strategy")] += prebuilt[name](params)
    before = config.backend_flags.get("opencl_strategy")
    try:
        for strategy, forms in by_strategy.items():
            _set_strategy(strategy)
            prebuild(forms, device)
    finally:
        _set_strategy(before)


def _set_strategy(strategy: str | None) -> None:
    if strategy is None:
        config.backend_flags.pop("opencl_strategy", None)
    else:
        config.backend_flags["opencl_strategy"] = strategy


def check_fused(case, module: Module, device) -> None:  # noqa: ANN001
    """Like axle.testing.check_case for ``module`` (a fused form of ``case.module``),
    with the tolerance the unfused case gets: the reduction sizes and transcendental
    ops are read from the original, since the fused entry hides them in the fusion."""
    import math

    from axle.interpreter import evaluate
    from axle.ir.dtypes import dtype
    from axle.ir.ops import OPS
    from axle.testing.cases import OpCase, assert_close, run_case, tolerance

    expected = evaluate(case.module, *case.inputs)
    actual = run_case(OpCase(case.id, module, case.inputs, case.ops), device, optimize=False)
    assert len(actual) == len(expected)
    nodes = case.module.entry.nodes
    main_op = next((n.op for n in reversed(nodes) if OPS[n.op].traits.transcendental), None)
    n_red = 1
    for n in nodes:
        if n.op is Op.REDUCE:
            n_red = max(n_red, math.prod(n.operands[0].shape[a] for a in n.attr["axes"]))
        elif n.op is Op.DOT_GENERAL and n.attr["lhs_contracting"]:
            n_red = max(n_red, math.prod(n.operands[0].shape[a] for a in n.attr["lhs_contracting"]))
    for i, (a, e) in enumerate(zip(actual, expected)):
        rtol, atol = tolerance(dtype(e.dtype), main_op, n_red)
        assert_close(a, e, rtol, atol, f"{case.id} fused (result {i}) on {device.name}")


def is_float_dot(case) -> bool:  # noqa: ANN001
    return Op.DOT_GENERAL in case.ops and case.module.entry.root.dtype.is_float


def check_float_dot(case, module: Module, device) -> None:  # noqa: ANN001
    """A float dot against the interpreter within the classic forward error bound of a
    sum of K products in any order: |computed - exact| <= K * eps * (|A| . |B|).
    (A relative tolerance fails where the result cancels to near zero: any summation
    order other than NumPy's then differs by more than rtol * |result|.)"""
    import math

    import numpy as np

    from axle.interpreter import evaluate
    from axle.testing.cases import OpCase, run_case

    (dot,) = [n for n in case.module.entry.nodes if n.op is Op.DOT_GENERAL]
    k = max(1, math.prod(dot.operands[0].shape[a] for a in dot.attr["lhs_contracting"]))
    expected = evaluate(case.module, *case.inputs)[0]
    magnitude = evaluate(case.module, *[np.abs(x) for x in case.inputs])[0].astype(np.float64)
    (actual,) = run_case(OpCase(case.id, module, case.inputs, case.ops), device, optimize=False)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    work = np.float32 if expected.dtype == np.float16 else expected.dtype
    eps = float(np.finfo(work).eps)
    bound = 2 * k * eps * magnitude + (float(np.finfo(expected.dtype).eps) * np.abs(expected.astype(np.float64)))
    err = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    assert np.all(err <= bound + 1e-30), f"{case.id} on {device.name}: max error/bound {np.max(err / (bound + 1e-30)):.3g}"
