"""Core primitives against the interpreter on opencl:0 in the forms the conformance kit
does not compile itself (the kit, tests/conformance, runs every op case optimized and
every multi-op program both ways; ``axle.testing.kit.kit_compiles_same``: the same kernel
plan is the same test): the op cases whose unoptimized module (as eager mode compiles it)
gives other kernels than the kit's, every op inside hand-built fusions (producers and
consumers inlined), and small multi-op programs as one loop/input/row/multi-output fusion."""
from __future__ import annotations

import pytest
from ocl_fusing import check_float_dot, check_fused, fuse_whole, is_float_dot, opencl_device

import axle
from axle.ir.ops import OPS, Op
from axle.testing.cases import OpCase, check_case, core_cases, fused_cases
from axle.testing.kit import kit_compiles_same


@pytest.fixture(scope="module")
def ocl():  # noqa: ANN201
    return opencl_device()


#: what each test of this file compiles (all unoptimized), built ahead in batches (conftest.py)
PREBUILT = {
    "test_op": lambda p: [(p["case"].module, False)],
    "test_op_inside_fusion": lambda p: [(fuse_whole(p["case"].module), False)],
    "test_program_as_one_fusion": lambda p: [(fuse_whole(p["case"].module, wrap=w), False) for w in (False, True)],
}


CORE = list(core_cases())
FUSED = fused_cases()
# Unoptimized: only where the optimizer changes the kernels (folded constants, bitcast
# reshapes, dropped empty operands, iota fused into its consumer); the rest is the kit's.
# (Without an OpenCL device, outside CI, every case is collected and skipped by ``ocl``.)
_DEVICE = next((d for d in axle.devices() if d.backend == "opencl"), None)
_EAGER = [c for c in CORE if _DEVICE is None or not kit_compiles_same(c, c.module, _DEVICE)]
# Inside fusions: every op, for the dtypes that exercise each code path once
# (f32 vector/float path, f16 rounding path, s32 wrapping integer path, pred), in the shapes
# whose kernels differ: a scalar, odd, two-dimensional and one beyond a vector's tail.
# (Ops that never sit inside a fusion — sort, convolution, scatter... — run alone in test_op.)
# The kit's shapes of one operand, less those whose kernel inside a fusion is the one of a
# shape kept (size 0 and size 1 in every dim: the kit runs them alone, on opencl too).
_SAME_INSIDE = ("[0]", "[1]", "[2, 0, 3]", "[1, 1, 1]")
_FUSIBLE = [c for c in CORE if all(OPS[o].traits.fusible and not OPS[o].traits.updates_operand
                                   for o in c.ops - {Op.PARAMETER, Op.TUPLE}) and
            any(tag in c.id for tag in ("-f32", "-f16", "-s32", "-pred")) and not c.id.endswith(_SAME_INSIDE)]


@pytest.mark.parametrize("case", _EAGER, ids=[c.id for c in _EAGER])
def test_op(case: OpCase, ocl) -> None:  # noqa: ANN001
    if is_float_dot(case):
        check_float_dot(case, case.module, ocl)
    else:
        check_case(case, ocl, optimize=False)


@pytest.mark.parametrize("case", _FUSIBLE, ids=[c.id for c in _FUSIBLE])
def test_op_inside_fusion(case: OpCase, ocl) -> None:  # noqa: ANN001
    fused = fuse_whole(case.module)
    assert any(n.op is Op.FUSION for n in fused.entry.nodes)
    if is_float_dot(case):
        check_float_dot(case, fused, ocl)
    else:
        check_fused(case, fused, ocl)


@pytest.mark.parametrize("case", FUSED, ids=[c.id for c in FUSED])
def test_program_as_one_fusion(case: OpCase, ocl) -> None:  # noqa: ANN001
    for wrap in (False, True):
        check_fused(case, fuse_whole(case.module, wrap=wrap), ocl)
