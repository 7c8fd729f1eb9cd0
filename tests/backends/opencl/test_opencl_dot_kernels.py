"""The register-tiled dot kernels at sizes that divide none of their tiles (rows per
work-item, vector panels, local-memory tiles), with batch dims in any position,
transposed operands, several contracting or free dims, every dtype, on both launch
strategies; and which kernel each layout gets on a CPU device."""
from __future__ import annotations

import numpy as np
import pytest

from axle.compiler import compile_module
from axle.config import config
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.types import TensorType
from axle.testing.cases import OpCase, random_input, run_case
from ocl_fusing import check_float_dot

# name: lhs shape, rhs shape, dot_general attributes
LAYOUTS = {
    "plain": ((67, 131), (131, 83), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "narrow": ((13, 40), (40, 5), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "one-vector": ((7, 9), (9, 16), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "lhs-transposed": ((45, 70), (45, 37), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    "rhs-transposed": ((29, 75), (38, 75), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
    "both-transposed": ((33, 21), (19, 33), dict(lhs_contracting=(0,), rhs_contracting=(1,))),
    "batch-both-transposed": ((2, 40, 9), (2, 11, 40), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(1,),
                                                             rhs_contracting=(2,))),
    "free-split": ((4, 30, 5), (7, 30), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
    "matvec": ((23, 101), (101,), dict(lhs_contracting=(1,), rhs_contracting=(0,))),
    "vecmat": ((53,), (53, 70), dict(lhs_contracting=(0,), rhs_contracting=(0,))),
    "batch": ((3, 19, 35), (3, 35, 70), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,), rhs_contracting=(1,))),
    "batch-middle": ((9, 2, 17), (17, 2, 66), dict(lhs_batch=(1,), rhs_batch=(1,), lhs_contracting=(2,),
                                                   rhs_contracting=(0,))),
    "batch-rhs-transposed": ((2, 11, 40), (2, 7, 40), dict(lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,),
                                                            rhs_contracting=(2,))),
    "two-contracting": ((5, 6, 13), (6, 13, 34), dict(lhs_contracting=(1, 2), rhs_contracting=(0, 1))),
    "split-contracting": ((6, 9, 5), (5, 6, 20), dict(lhs_contracting=(0, 2), rhs_contracting=(1, 0))),
    "two-free": ((7, 3, 12), (12, 5, 8), dict(lhs_contracting=(2,), rhs_contracting=(0,))),
    "free-around-contracting": ((10, 14), (4, 14, 9), dict(lhs_contracting=(1,), rhs_contracting=(1,))),
}
DTYPES = [DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT32, DType.INT64]


def _case(layout: str, dt: DType) -> OpCase:
    ls, rs, attrs = LAYOUTS[layout]
    b = Builder("dot_" + layout.replace("-", "_"))
    p, q = b.parameter(TensorType(dt, ls)), b.parameter(TensorType(dt, rs))
    module = b.build(b.dot_general(p, q, **attrs))
    rng = np.random.default_rng(len(layout))
    # integers include INT_MIN/INT_MAX (products and sums wrap); f16 stays small
    inputs = [random_input(rng, TensorType(dt, s), special=dt.is_int, small=dt is DType.FLOAT16) for s in (ls, rs)]
    return OpCase(f"dot-{layout}-{dt.value}", module, inputs)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_dot_layouts(layout: str, dt: DType, ocl, strategy) -> None:  # noqa: ANN001
    case = _case(layout, dt)
    if dt.is_float:
        check_float_dot(case, case.module, ocl)
    else:
        (actual,) = run_case(case, ocl, optimize=False)
        np.testing.assert_array_equal(actual, evaluate(case.module, *case.inputs)[0])


def _source(layout: str, dt: DType, dev) -> str:  # noqa: ANN001
    (src,) = compile_module(_case(layout, dt).module, dev, optimize=False).kernel_sources().values()
    return src


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.value)
def test_cpu_devices_get_register_blocks_without_local_memory(dt: DType, ocl) -> None:  # noqa: ANN001
    if ocl.kind != "cpu":
        return
    plain = _source("plain", dt, ocl)
    # rows x vectors: a rhs row loaded as vectors, lhs scalars splatted
    assert "__local" not in plain and "vload" in plain and "c5_1" in plain
    # x @ w.T: dot products along k
    rt = _source("rhs-transposed", dt, ocl)
    assert "__local" not in rt and "v3_3" in rt
    # a.T @ b.T: vectors along the lhs free dim, results stored lane by lane
    bt = _source("both-transposed", dt, ocl)
    assert "__local" not in bt and "c5_0" in bt and "c0_0.s1" in bt
    # neither operand contiguous where a micro-kernel needs it: local-memory tiles
    assert "__local" in _source("free-split", dt, ocl)


def test_gpu_strategy_tiles_are_register_blocked(ocl) -> None:  # noqa: ANN001
    config.backend_flags["opencl_strategy"] = "gpu"
    try:
        src = _source("plain", DType.FLOAT32, ocl)
    finally:
        config.backend_flags.pop("opencl_strategy", None)
    # each work-item keeps 4 x 4 accumulators and reads 4 + 4 local values per step
    assert "__local" in src and "c3_3" in src and "As[kk][lm + 48]" in src
