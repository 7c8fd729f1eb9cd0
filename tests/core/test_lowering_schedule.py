"""The shared schedules (axle.lowering.schedule): the form of each launch, its index space
and loop sizes, the column form, where a large reduction splits, and that every fusion the
fusion pass forms gets the schedule of its kind."""
from __future__ import annotations

import math

import numpy as np
import pytest

from axle.ir import Builder, DType, Module
from axle.ir.types import TensorType
from axle.lowering.plan import kernel_plan
from axle.lowering.schedule import FORMS, Schedule, schedule
from axle.passes import optimize
from axle.passes.policy import FusionPolicy
from axle.testing.random_modules import random_module
from axle.ir.types import squeeze

f32 = DType.FLOAT32


def _schedules(build) -> list[Schedule]:  # noqa: ANN001
    b = Builder("m")
    root = build(b)
    plan = kernel_plan(optimize(Module("m", b.computation(root))), assign_buffers=False)
    return [schedule(launch.computation, launch.kind) for launch in plan.launches]


def _softmax(b: Builder):  # noqa: ANN202
    x = b.parameter(TensorType(f32, (6, 10)))
    m = b.broadcast_in_dim(b.reduce(x, kind="max", axes=(1,)), shape=(6, 10), broadcast_dimensions=(0,))
    e = b.exp(b.sub(x, m))
    s = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=(1,)), shape=(6, 10), broadcast_dimensions=(0,))
    return b.div(e, s)


def test_softmax_is_one_row_schedule_over_the_full_shape() -> None:
    (s,) = _schedules(_softmax)
    assert s.form == "row" and s.iter_shape == (6, 10) and s.row_shape == (6,)
    assert len(s.reduces) == 2 and s.trailing and not s.flat and not s.column
    assert (s.rows, s.cols) == (6, 10) and s.reduced == 10


def test_elementwise_is_a_flat_loop() -> None:
    def build(b: Builder):  # noqa: ANN202
        x = b.parameter(TensorType(f32, (3, 4, 5)))
        return b.tanh(b.add(b.mul(x, x), x))

    (s,) = _schedules(build)
    assert s.form == "loop" and s.flat and (s.rows, s.cols) == (1, 60)


def test_a_broadcast_operand_makes_rows_and_columns() -> None:
    def build(b: Builder):  # noqa: ANN202
        x = b.parameter(TensorType(f32, (3, 7)))
        v = b.parameter(TensorType(f32, (7,)))
        return b.add(x, b.broadcast_in_dim(v, shape=(3, 7), broadcast_dimensions=(1,)))

    (s,) = _schedules(build)
    assert s.form == "loop" and not s.flat and (s.rows, s.cols) == (3, 7)


def test_column_sum_is_the_column_form_and_a_row_sum_is_not() -> None:
    def cols(b: Builder):  # noqa: ANN202
        return b.reduce(b.parameter(TensorType(f32, (100, 8))), kind="sum", axes=(0,))

    def rows(b: Builder):  # noqa: ANN202
        return b.reduce(b.parameter(TensorType(f32, (100, 8))), kind="sum", axes=(1,))

    (c,), (r,) = _schedules(cols), _schedules(rows)
    assert c.form == r.form == "reduce"
    assert c.column and not c.trailing and c.reduced == 100 and c.row_shape == (8,)
    assert not r.column and r.trailing and r.reduced == 8 and r.row_shape == (100,)


def test_a_large_reduction_into_few_outputs_splits_along_its_first_reduced_axis() -> None:
    def build(b: Builder):  # noqa: ANN202
        return b.reduce(b.parameter(TensorType(f32, (4, 1 << 16))), kind="sum", axes=(1,))

    (s,) = _schedules(build)
    assert s.split_extent == 1 << 16


def test_a_lone_dot_is_the_dot_form() -> None:
    def build(b: Builder):  # noqa: ANN202
        x, w = b.parameter(TensorType(f32, (4, 8))), b.parameter(TensorType(f32, (8, 3)))
        return b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,), lhs_batch=(), rhs_batch=())

    (s,) = _schedules(build)
    assert s.form == "dot" and s.iter_shape == (4, 3) and s.split_extent == 0


class _EpiloguePolicy:
    name = "epilogue"

    def passes(self) -> list:
        return []

    def fusion_policy(self) -> FusionPolicy:
        return FusionPolicy(dot_epilogue=True)


def test_an_output_fusion_is_the_dot_form_with_its_epilogue() -> None:
    b = Builder("m")
    x, w, bias = (b.parameter(TensorType(f32, s)) for s in ((4, 8), (8, 3), (3,)))
    d = b.dot_general(x, w, lhs_contracting=(1,), rhs_contracting=(0,))
    relu = b.max(b.add(d, b.broadcast_in_dim(bias, shape=(4, 3), broadcast_dimensions=(1,))),
                 b.broadcast_in_dim(b.constant(0.0, f32), shape=(4, 3), broadcast_dimensions=()))
    plan = kernel_plan(optimize(Module("m", b.computation(relu)), backend=_EpiloguePolicy()), assign_buffers=False)
    (launch,) = plan.launches
    s = schedule(launch.computation, launch.kind)
    assert launch.kind == "output" and s.form == "dot" and s.epilogue and s.iter_shape == (4, 3)
    assert s.dot is not None and s.dot.op.value == "dot" and s.outputs[0].op.value == "maximum"
    lone = schedule(b.computation(d), "dot")
    assert lone.form == "dot" and lone.dot is lone.outputs[0] and not lone.epilogue


def test_output_fusions_of_random_programs_are_the_dot_form() -> None:
    seen = 0
    for seed in range(0, 60, 3):
        module, _ = random_module(seed, 10 + seed % 25)
        for launch in kernel_plan(optimize(module, backend=_EpiloguePolicy()), assign_buffers=False).launches:
            s = schedule(launch.computation, launch.kind)
            if launch.kind == "output":
                seen += 1
                assert s.form == "dot" and s.epilogue and s.dot is not None and s.outputs[0].shape == s.dot.shape
    assert seen  # the generator's dense pattern (max(x @ w + b, 0)) makes some


@pytest.mark.parametrize("seed", range(60))
def test_every_fusion_gets_the_schedule_of_its_kind(seed: int) -> None:
    """Over random programs: a row fusion is scheduled as a row, an input fusion as a
    reduction, a loop fusion as a loop; every output fits the index space walked."""
    module, _ = random_module(seed, 10 + seed % 25)
    for launch in kernel_plan(optimize(module), assign_buffers=False).launches:
        s = schedule(launch.computation, launch.kind)
        assert s.form in FORMS
        want = {"row": "row", "input": "reduce", "loop": "loop", "output": "dot"}.get(launch.kind)
        if want is not None and launch.node.op.value == "fusion":
            assert s.form == want, (launch.label, launch.kind, s.form)
        size = math.prod(s.iter_shape)
        for o in s.outputs:
            if s.form == "row":
                assert o.shape == s.iter_shape or squeeze(o.shape) == squeeze(s.row_shape)
            else:
                assert math.prod(o.shape) <= size
        if s.form in ("row", "reduce"):
            assert s.reduced == math.prod(np.asarray(s.reduces[0].operands[0].shape)[list(s.reduce_axes)])
