"""Row fusions whose per-row outputs are laid out in another arrangement of unit dims than
the reductions' kept shape (``[1,3]`` or ``[3,1]`` for the rows of ``[3,4]``; docs/ir.md,
"Fusions"). The kernel once indexed such an output with a prefix of the walked index:
``[1,3]`` was written at ``[row, 0]``, out of bounds, and read garbage (issue 12, finding
1: ``random_module(100293, 35)`` and ``random_module(100818, 40)``)."""
from __future__ import annotations

import numpy as np
import pytest

from axle.compiler import compile_module
from axle.interpreter import evaluate
from axle.ir import Builder
from axle.ir.parser import parse_module
from axle.frontend.device_put import to_buffer
from axle.testing.cases import assert_close
from test_cpu_kernels import fused_module, run

#: random_module(100293, 35), reduced: a row fusion over [3,1] also exporting the [1,3]
#: transpose of its input
TRANSPOSED_ROW_OUTPUT = """module @r1
entry %r1 (p0: s64[3,1]) -> (f16[3,1], s64[1,3]) {
  %p0 = s64[3,1] parameter(0)
  %convert = f16[3,1] convert(%p0), dtype=f16
  %exponential = f16[3,1] exponential(%convert)
  %reduce = f16[3] reduce(%exponential), axes={1}, kind=sum
  %broadcast = f16[3,1] broadcast(%reduce), broadcast_dimensions={0}, shape=[3,1]
  %add = f16[3,1] add(%exponential, %broadcast)
  %transpose = s64[1,3] transpose(%p0), permutation={1,0}
  ROOT %tuple = (f16[3,1], s64[1,3]) tuple(%add, %transpose)
}
"""

#: random_module(100818, 40), reduced: a row max over [3,1], an output reshaped to [1,3]
RESHAPED_ROW_OUTPUT = """module @r3
entry %r3 (p0: f32[3,1]) -> (f32[3,1], f32[1,3]) {
  %p0 = f32[3,1] parameter(0)
  %constant = f32[] constant(1.0)
  %broadcast = f32[3,1] broadcast(%constant), broadcast_dimensions={}, shape=[3,1]
  %maximum = f32[3,1] maximum(%p0, %broadcast)
  %reduce = f32[3] reduce(%maximum), axes={1}, kind=max
  %reshape = f32[3,1] reshape(%reduce), shape=[3,1]
  %divide = f32[3,1] divide(%maximum, %reshape)
  %reshape.1 = f32[1,3] reshape(%divide), shape=[1,3]
  ROOT %tuple = (f32[3,1], f32[1,3]) tuple(%maximum, %reshape.1)
}
"""


@pytest.mark.parametrize("text,x", [
    (TRANSPOSED_ROW_OUTPUT, np.array([[1], [-2], [3]], np.int64)),
    (RESHAPED_ROW_OUTPUT, np.array([[2], [-1], [5]], np.float32)),
], ids=["transposed", "reshaped"])
def test_fuzz_row_fusion_outputs_optimized(text: str, x: np.ndarray, cpu) -> None:  # noqa: ANN001
    m = parse_module(text)
    exe = compile_module(m, cpu, optimize=True)
    for _ in range(3):  # the bad kernel read out of bounds: results varied run to run
        got = [np.asarray(o.handle) for o in exe.execute([to_buffer(x, cpu)])]
        for g, w in zip(got, evaluate(m, x), strict=True):
            assert_close(g, w, 2e-3, 1e-3, m.name)


def _row_outputs(b: Builder, p: list):  # noqa: ANN202
    x = p[0]
    r = b.reduce(x, kind="sum", axes=(1,))
    y = b.sub(x, b.broadcast_in_dim(r, shape=(3, 4), broadcast_dimensions=(0,)))
    # the full shape, then the row sums as [3], [3,1], [1,3] and [1,3,1]
    return y, r, b.reshape(r, shape=(3, 1)), b.reshape(r, shape=(1, 3)), b.reshape(r, shape=(1, 3, 1))


def test_row_fusion_per_row_outputs_in_any_unit_dim_layout(cpu) -> None:  # noqa: ANN001
    m = fused_module("rowouts", ["f32[3,4]"], _row_outputs, "row")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got, _ = run(m, [x], cpu)
    for g, w in zip(got, evaluate(m, x), strict=True):
        np.testing.assert_array_equal(g, w)


def test_row_fusion_with_only_per_row_outputs_walks_the_full_shape(cpu) -> None:  # noqa: ANN001
    """No output has the reduced operand's shape: the rows are still those of [3,4]."""
    m = fused_module("rowonly", ["f64[3,4]"], lambda b, p: (
        b.reshape(b.reduce(p[0], kind="max", axes=(1,)), shape=(1, 3)),
        b.exp(b.reduce(p[0], kind="sum", axes=(1,)))), "row")
    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    got, _ = run(m, [x], cpu)
    for g, w in zip(got, evaluate(m, x), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-13)
