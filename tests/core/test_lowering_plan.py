"""The shared kernel plan (axle.lowering.plan): slots, launch kinds, arena offsets, and that
running its launches one by one over slots computes exactly what the module computes."""
from __future__ import annotations

import numpy as np
import pytest

from axle.interpreter import evaluate, evaluate_computation
from axle.ir import Builder, DType, Module, Op
from axle.ir.opcodes import PLUMBING
from axle.ir.types import TensorType
from axle.lowering.plan import KernelPlan, kernel_plan, single_op
from axle.passes import optimize
from axle.passes.buffers import assign
from axle.testing.random_modules import random_module

f32 = DType.FLOAT32


def run_plan(plan: KernelPlan, args: list[np.ndarray]) -> list[np.ndarray]:
    """A minimal backend: each launch's computation evaluated over the slots it names."""
    slots: dict[int, np.ndarray] = dict(enumerate(args))
    slots.update(plan.constants)
    for launch in plan.launches:
        assert all(s in slots for s in launch.inputs), f"{launch.label} reads a slot not yet written"
        assert not any(s in slots for s in launch.outputs), f"{launch.label} overwrites a slot"
        out = evaluate_computation(launch.computation, [slots[s] for s in launch.inputs])
        for s, t, v in zip(launch.outputs, launch.output_types, out if isinstance(out, tuple) else (out,), strict=True):
            assert v.shape == t.shape and v.dtype == t.dtype.np
            slots[s] = v
    return [slots[s] for s in plan.results]


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("optimized", [False, True], ids=["raw", "optimized"])
def test_launches_run_in_order_compute_the_module(seed: int, optimized: bool) -> None:
    module, inputs = random_module(seed, 12 + seed % 20)
    expected = evaluate(module, *inputs)
    m = optimize(module) if optimized else module
    plan = kernel_plan(m, assign_buffers=seed % 2 == 0)
    assert plan.n_params == len(inputs) and plan.n_slots >= plan.n_params
    for got, want in zip(run_plan(plan, [np.asarray(a) for a in inputs]), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def _module() -> Module:
    b = Builder("m")
    x = b.parameter(TensorType(f32, (4, 8)))
    w = b.parameter(TensorType(f32, (8, 3)))
    c = b.constant(np.float32(2.0))
    y = b.add(b.mul(x, b.broadcast_in_dim(c, shape=(4, 8), broadcast_dimensions=())), x)
    s = b.reduce(y, kind="sum", axes=(1,))
    d = b.dot_general(y, w, lhs_contracting=(1,), rhs_contracting=(0,), lhs_batch=(), rhs_batch=())
    r = b.reshape(d, shape=(12,))
    return Module("m", b.computation(b.tuple(s, r)))


def test_slots_are_parameters_then_constants_then_outputs_in_launch_order() -> None:
    plan = kernel_plan(_module(), assign_buffers=False)
    assert plan.n_params == 2 and list(plan.constants) == [2]
    assert plan.constants[2].flags.c_contiguous
    written = [s for launch in plan.launches for s in launch.outputs]
    assert written == list(range(3, plan.n_slots))
    assert plan.result_types == [TensorType(f32, (4,)), TensorType(f32, (12,))]


def test_unfused_ops_get_their_kind_and_a_one_op_computation() -> None:
    plan = kernel_plan(_module(), assign_buffers=False)
    kinds = {launch.node.op: launch.kind for launch in plan.launches}
    assert kinds[Op.REDUCE] == "input" and kinds[Op.DOT_GENERAL] == "dot"
    assert kinds[Op.ADD] == kinds[Op.MUL] == kinds[Op.RESHAPE] == "loop"
    (reshape,) = [launch for launch in plan.launches if launch.node.op is Op.RESHAPE]
    assert reshape.is_bitcast and not any(l.is_bitcast for l in plan.launches if l is not reshape)
    for launch in plan.launches:
        comp = launch.computation
        assert comp.root.op is launch.node.op and comp.root.attrs == launch.node.attrs
        assert [p.type for p in comp.parameters] == [o.type for o in launch.node.operands]


def test_fusions_launch_with_the_fusion_pass_kind() -> None:
    m = optimize(_module())
    plan = kernel_plan(m)
    fused = [n for n in m.entry.nodes if n.op is Op.FUSION]
    assert fused, "the optimizer fuses the elementwise chain into the reduce"
    by_node = {launch.node.uid: launch for launch in plan.launches}
    for n in fused:
        assert by_node[n.uid].kind == n.attr["kind"]
        assert by_node[n.uid].computation is n.attr["computation"]


def test_assigned_buffers_give_the_arena_offsets_of_temporaries() -> None:
    m = optimize(_module())
    plan = kernel_plan(m)
    ba = assign(m)
    assert plan.temp_bytes == ba.temp_bytes
    assert [launch.node.uid for launch in plan.launches] == [n.uid for n in ba.order if n.op not in PLUMBING]
    for launch in plan.launches:
        for i, s in enumerate(launch.outputs):
            a = ba.allocations[(launch.node.uid, i)]
            assert (s in plan.temp_offsets) == (a.region == "temp")
            if a.region == "temp":
                assert plan.temp_offsets[s] == a.offset
    assert not kernel_plan(m, assign_buffers=False).temp_offsets


def test_single_op_names_its_computation() -> None:
    b = Builder("m")
    x = b.parameter(TensorType(f32, (3,)))
    n = b.neg(x)
    assert single_op(n).name == Op.NEG.value.replace("-", "_") and single_op(n, "neg.1").name == "neg.1"
    assert single_op(n).root is not n and single_op(n).root.operands[0].op is Op.PARAMETER


def test_a_builder_operand_that_is_not_a_node_is_an_argument_error() -> None:
    from axle.errors import ArgumentError

    b = Builder("m")
    x = b.parameter(TensorType(f32, (2,)))
    with pytest.raises(ArgumentError, match=r"tuple: operand 0 is a list, not a node"):
        b.tuple([x, x])
