"""Collectives in the IR (ir/collectives.py): semantics over several replicas against
NumPy written out by hand, the text form, the verifier's checks, the SPMD interpreter's
failure modes, and the VJP/JVP/batching rules against finite differences over replicas."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import axle
from axle.errors import CollectiveError, OpAttributeError, ParseError, ShapeError
from axle.frontend.bind import bind
from axle.frontend.jit import trace_function
from axle.interpreter import evaluate, evaluate_spmd
from axle.ir import collectives as c
from axle.ir.builder import Builder
from axle.ir.module import Module
from axle.ir.ops import Op
from axle.ir.parser import parse_module
from axle.ir.printer import print_module

R = 4
ALL4 = {"replica_groups": (0, 1, 2, 3), "group_size": 4}
PAIRS = {"replica_groups": (0, 2, 1, 3), "group_size": 2}  # groups {0,2} and {1,3}


def _one_op(op: Op, shape: tuple[int, ...], dtype: str = "f32", **attrs: Any) -> Module:
    b = Builder()
    x = b.parameter(f"{dtype}{list(shape)}".replace(" ", ""))
    return b.build(b.op(op, x, **attrs))


def _inputs(shape: tuple[int, ...], dtype: Any = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(R)]


def _run(module: Module, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [out[0] for out in evaluate_spmd(module, [[x] for x in xs])]


# ------------------------------------------------------------------ semantics


@pytest.mark.parametrize("kind,fn", [("sum", np.add), ("prod", np.multiply), ("max", np.maximum),
                                     ("min", np.minimum)])
def test_all_reduce_combines_each_group(kind: str, fn: Callable[..., np.ndarray]) -> None:
    xs = _inputs((2, 3))
    outs = _run(_one_op(Op.ALL_REDUCE, (2, 3), kind=kind, **PAIRS), xs)
    for group in ((0, 2), (1, 3)):
        want = fn(xs[group[0]], xs[group[1]])
        for r in group:
            np.testing.assert_array_equal(outs[r], want)


def test_all_gather_concatenates_in_group_order() -> None:
    xs = _inputs((2, 3))
    outs = _run(_one_op(Op.ALL_GATHER, (2, 3), dimension=1, **PAIRS), xs)
    np.testing.assert_array_equal(outs[0], np.concatenate([xs[0], xs[2]], axis=1))
    np.testing.assert_array_equal(outs[3], np.concatenate([xs[1], xs[3]], axis=1))
    assert outs[0].shape == (2, 6)


def test_reduce_scatter_gives_member_i_block_i() -> None:
    xs = _inputs((8, 3))
    outs = _run(_one_op(Op.REDUCE_SCATTER, (8, 3), kind="sum", dimension=0, **ALL4), xs)
    total = xs[0] + xs[1] + xs[2] + xs[3]
    for r in range(R):
        np.testing.assert_allclose(outs[r], total[2 * r:2 * r + 2], rtol=1e-6)


def test_all_to_all_transposes_blocks_between_members() -> None:
    xs = [np.arange(8, dtype=np.int32).reshape(4, 2) + 100 * r for r in range(R)]
    outs = _run(_one_op(Op.ALL_TO_ALL, (4, 2), dtype="s32", split_dimension=0, concat_dimension=1, **ALL4), xs)
    for r in range(R):  # block r of every member, side by side in member order
        np.testing.assert_array_equal(outs[r], np.concatenate([xs[i][r:r + 1] for i in range(R)], axis=1))


def test_collective_permute_sends_and_zero_fills() -> None:
    xs = _inputs((3,))
    outs = _run(_one_op(Op.COLLECTIVE_PERMUTE, (3,), source_target_pairs=(0, 1, 1, 2, 2, 3)), xs)
    np.testing.assert_array_equal(outs[0], np.zeros(3, np.float32))  # no pair targets replica 0
    for r in (1, 2, 3):
        np.testing.assert_array_equal(outs[r], xs[r - 1])


def test_replica_id_and_single_replica_run() -> None:
    b = Builder()
    m = b.build(b.op(Op.REPLICA_ID))
    assert [o[0].item() for o in evaluate_spmd(m, [[]] * 3)] == [0, 1, 2]
    assert evaluate(m)[0].item() == 0
    # groups of one replica run alone, as the identity
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(evaluate(_one_op(Op.ALL_REDUCE, (3,), kind="sum", replica_groups=(0,),
                                                   group_size=1), x)[0], x)


def test_collectives_inside_a_loop_meet_every_trip() -> None:
    # a while loop whose body all-reduces: the replicas meet once per trip (threads, not lock-step)
    def step(x: Any) -> Any:
        def body(i: Any, v: Any) -> Any:
            return bind(Op.ALL_REDUCE, v, kind="sum", **ALL4) * 0.5
        return axle.lax.fori_loop(0, 3, body, x)

    module, _ = trace_function(step, [np.zeros(2, np.float32)], {}, (), "loop")
    assert any(n.op is Op.WHILE for n in module.entry.nodes)
    xs = [np.full(2, float(r + 1), np.float32) for r in range(R)]
    outs = _run(module, xs)
    want = np.full(2, 10.0, np.float32)
    for _ in range(3):
        want = want * R * 0.5 if _ else want * 0.5
    for o in outs:
        np.testing.assert_allclose(o, want)


# ------------------------------------------------------------------ text form and checks


def test_prints_and_parses_back() -> None:
    b = Builder()
    x = b.parameter("f32[4,6]")
    outs = [b.op(Op.ALL_REDUCE, x, kind="max", **PAIRS), b.op(Op.ALL_GATHER, x, dimension=0, **ALL4),
            b.op(Op.REDUCE_SCATTER, x, kind="sum", dimension=1, **PAIRS),
            b.op(Op.ALL_TO_ALL, x, split_dimension=0, concat_dimension=1, **ALL4),
            b.op(Op.COLLECTIVE_PERMUTE, x, source_target_pairs=(0, 1, 1, 0)), b.op(Op.REPLICA_ID)]
    text = print_module(b.build(*outs))
    assert "replica_groups={0,2,1,3}" in text and "source_target_pairs={0,1,1,0}" in text
    assert print_module(parse_module(text)) == text


@pytest.mark.parametrize("attrs,err", [
    ({"replica_groups": (0, 1, 2), "group_size": 2}, OpAttributeError),  # not whole groups
    ({"replica_groups": (0, 1, 1, 3), "group_size": 2}, OpAttributeError),  # 1 twice, 2 missing
    ({"replica_groups": (), "group_size": 1}, OpAttributeError),
])
def test_bad_groups_are_refused(attrs: dict[str, Any], err: type) -> None:
    with pytest.raises(err, match="all-gather: replica_groups"):
        _one_op(Op.ALL_GATHER, (4,), dimension=0, **attrs)


def test_shape_checks_name_the_op() -> None:
    with pytest.raises(ShapeError, match=r"reduce-scatter: dimension 0 \(size 6\) does not split into 4"):
        _one_op(Op.REDUCE_SCATTER, (6,), kind="sum", dimension=0, **ALL4)
    with pytest.raises(ShapeError, match="all-gather: dimension=2 is not a dimension"):
        _one_op(Op.ALL_GATHER, (6, 2), dimension=2, **ALL4)
    with pytest.raises(OpAttributeError, match="repeats one of its targets"):
        _one_op(Op.COLLECTIVE_PERMUTE, (6,), source_target_pairs=(0, 1, 2, 1))
    with pytest.raises(ParseError, match="replica_groups .* must name each replica 0..3 exactly once"):
        text = print_module(_one_op(Op.ALL_REDUCE, (3,), kind="sum", **PAIRS))
        parse_module(text.replace("replica_groups={0,2,1,3}", "replica_groups={0,2,1,1}"))


def test_wrong_replica_count_and_failed_replica_raise() -> None:
    m = _one_op(Op.ALL_REDUCE, (3,), kind="sum", **ALL4)
    with pytest.raises(CollectiveError, match="cover 4 replica.*run has 2"):
        evaluate_spmd(m, [[np.zeros(3, np.float32)]] * 2)
    with pytest.raises(CollectiveError, match="cover 4 replica.*run has 1"):
        evaluate(m, np.zeros(3, np.float32))
    # replica 2's input has the wrong shape: it fails, and the others stop rather than hang
    xs = [[np.zeros(3, np.float32)]] * 2 + [[np.zeros(4, np.float32)]] + [[np.zeros(3, np.float32)]]
    with pytest.raises(TypeError, match="parameter 0 expects"):
        evaluate_spmd(m, xs)
    m2 = _one_op(Op.COLLECTIVE_PERMUTE, (3,), source_target_pairs=(0, 5))
    with pytest.raises(CollectiveError, match="name a replica >= the run's 2"):
        evaluate_spmd(m2, [[np.zeros(3, np.float32)]] * 2)


def test_never_constant_folded() -> None:
    # all-reduce of a constant is R times it over R replicas: folding on one replica would give it once
    def f(x: Any) -> Any:
        return x + bind(Op.ALL_REDUCE, axle.numpy.ones(3, np.float32), kind="sum", **ALL4)

    module, _ = trace_function(f, [np.zeros(3, np.float32)], {}, (), "fold")
    optimized = axle.jit(f).lower(np.zeros(3, np.float32)).optimize()
    assert any(n.op is Op.ALL_REDUCE for n in optimized.entry.nodes)
    for out in _run(optimized, [np.zeros(3, np.float32)] * R):
        np.testing.assert_array_equal(out, np.full(3, 4.0, np.float32))
    del module


# ------------------------------------------------------------------ autodiff over replicas


def _spmd_loss(collective: Callable[[Any], Any], w: np.ndarray) -> Callable[[Any], Any]:
    # a per-replica loss whose value depends on the other replicas' inputs through the collective
    def loss(x: Any) -> Any:
        y = collective(axle.numpy.sin(x))
        return axle.numpy.sum(y * y * w[: y.size].reshape(y.shape))
    return loss


def _global_loss(module: Module, xs: Sequence[np.ndarray]) -> float:
    return float(sum(o[0].astype(np.float64).sum() for o in evaluate_spmd(module, [[x] for x in xs])))


_COLLECTIVES: list[tuple[str, Callable[[Any], Any]]] = [
    ("all-reduce-sum", lambda v: bind(Op.ALL_REDUCE, v, kind="sum", **PAIRS)),
    ("all-reduce-max", lambda v: bind(Op.ALL_REDUCE, v, kind="max", **ALL4)),
    ("all-reduce-prod", lambda v: bind(Op.ALL_REDUCE, v, kind="prod", **PAIRS)),
    ("all-gather", lambda v: bind(Op.ALL_GATHER, v, dimension=1, **PAIRS)),
    ("reduce-scatter-sum", lambda v: bind(Op.REDUCE_SCATTER, v, kind="sum", dimension=0, **ALL4)),
    ("reduce-scatter-min", lambda v: bind(Op.REDUCE_SCATTER, v, kind="min", dimension=0, **PAIRS)),
    ("all-to-all", lambda v: bind(Op.ALL_TO_ALL, v, split_dimension=0, concat_dimension=1, **ALL4)),
    ("collective-permute", lambda v: bind(Op.COLLECTIVE_PERMUTE, v, source_target_pairs=(0, 1, 1, 2, 2, 0))),
]


@pytest.mark.parametrize("name,collective", _COLLECTIVES, ids=[c[0] for c in _COLLECTIVES])
def test_vjp_and_jvp_match_finite_differences(name: str, collective: Callable[[Any], Any]) -> None:
    """The sum over replicas of each replica's loss, differentiated per replica (grad and
    jvp run inside every replica), against central differences of that global loss."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal(64)
    xs = [rng.standard_normal((4, 2)) for _ in range(R)]
    loss = _spmd_loss(collective, w)
    fwd, _ = trace_function(loss, [xs[0]], {}, (), "loss")
    grad_m, _ = trace_function(axle.grad(loss), [xs[0]], {}, (), "grad")
    grads = [o[0] for o in evaluate_spmd(grad_m, [[x] for x in xs])]
    tangents = [rng.standard_normal((4, 2)) for _ in range(R)]

    def jvp_fn(x: Any, t: Any) -> Any:
        return axle.jvp(loss, (x,), (t,))[1]

    jvp_m, _ = trace_function(jvp_fn, [xs[0], tangents[0]], {}, (), "jvp")
    jvp = sum(float(o[0]) for o in evaluate_spmd(jvp_m, [[x, t] for x, t in zip(xs, tangents)]))
    eps = 1e-6
    plus = _global_loss(fwd, [x + eps * t for x, t in zip(xs, tangents)])
    minus = _global_loss(fwd, [x - eps * t for x, t in zip(xs, tangents)])
    fd = (plus - minus) / (2 * eps)
    np.testing.assert_allclose(jvp, fd, rtol=1e-5, atol=1e-6, err_msg=f"{name}: jvp")
    vjp_dot = sum(float((g * t).sum()) for g, t in zip(grads, tangents))
    np.testing.assert_allclose(vjp_dot, fd, rtol=1e-5, atol=1e-6, err_msg=f"{name}: vjp")


def test_vmap_inside_a_replica_shifts_dimensions() -> None:
    def f(x: Any) -> Any:
        return axle.vmap(lambda row: bind(Op.ALL_GATHER, row, dimension=0, **PAIRS))(x)

    module, _ = trace_function(f, [np.zeros((3, 2), np.float32)], {}, (), "vmapped")
    xs = _inputs((3, 2))
    outs = _run(module, xs)
    np.testing.assert_array_equal(outs[0], np.concatenate([xs[0], xs[2]], axis=1))


class _CountingProcesses:
    """Stands in for axle.distributed.World as the only process: records the
    cross-process calls a rendezvous makes; reduces only float32 (MPI lacks float16)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def allgather(self, local: list[Any]) -> list[Any]:
        self.calls.append(f"allgather of {len(local)}")
        return local

    def can_reduce(self, dtype: np.dtype, kind: str) -> bool:
        return dtype == np.float32

    def allreduce(self, local: np.ndarray, kind: str) -> np.ndarray:
        self.calls.append(f"allreduce {local.dtype.name} {kind}")
        return local

    def reduce_scatter(self, send: np.ndarray, kind: str) -> np.ndarray:
        self.calls.append(f"reduce_scatter {send.shape}")
        return send[0]

    def alltoall(self, send: np.ndarray) -> np.ndarray:
        self.calls.append(f"alltoall {send.shape}")
        return send

    def permute(self, sends: list[Any], receives: list[Any]) -> None:
        self.calls.append(f"permute {len(sends)} {len(receives)}")


def test_one_cross_process_call_per_collective() -> None:
    """The exchange with the other processes (an MPI call) runs once per collective, and a
    collective over every replica makes its own call (Allreduce, Reduce_scatter, Alltoall,
    point-to-point) instead of a gather, with the single-process results."""
    procs = _CountingProcesses()
    groups = {"replica_groups": (0, 1), "group_size": 2}

    def replica(r: int) -> list[np.ndarray]:
        x = np.arange(4, dtype=np.float32) + 10 * r
        return [c.all_gather(x, dimension=0, **groups), c.all_reduce(x, kind="sum", **groups),
                c.all_reduce(x.astype(np.float16), kind="max", **groups),
                c.reduce_scatter(x, kind="sum", dimension=0, **groups),
                c.all_to_all(x.reshape(2, 2), split_dimension=0, concat_dimension=1, **groups),
                c.collective_permute(x, source_target_pairs=(0, 1))]

    outs = c.run_replicas(2, replica, outer=procs.allgather, processes=procs)
    assert procs.calls == ["allgather of 2", "allreduce float32 sum", "allgather of 2", "reduce_scatter (1, 2, 2)",
                           "alltoall (1, 2, 2, 1, 2)"]  # the permute's one pair is within the process
    x = [np.arange(4, dtype=np.float32) + 10 * r for r in range(2)]
    whole = [c.run_replicas(2, replica)[r] for r in range(2)]  # one process: every value gathered
    for r in range(2):
        np.testing.assert_array_equal(outs[r][0], np.concatenate(x))
        np.testing.assert_array_equal(outs[r][2], np.maximum(x[0], x[1]).astype(np.float16))
        np.testing.assert_array_equal(outs[r][3], (x[0] + x[1])[2 * r:2 * r + 2])
        np.testing.assert_array_equal(outs[r][4], np.concatenate([v.reshape(2, 2)[r:r + 1] for v in x], axis=1))
        np.testing.assert_array_equal(outs[r][5], x[0] if r == 1 else np.zeros(4, np.float32))
        for got, want in zip(outs[r], whole[r]):
            np.testing.assert_array_equal(got, want)
