"""Collectives (StableHLO's all_reduce, all_gather, reduce_scatter, all_to_all,
collective_permute): shape rules and references over replicas.

A module that holds collectives is an SPMD program: every replica runs the same module on
its own inputs, and each collective exchanges values between the replicas of a group.

Replica groups are one flat attribute ``replica_groups`` (the replica ids, group after
group) and ``group_size``: ``replica_groups={0,2,1,3}, group_size=2`` is the groups
{0,2} and {1,3}. The groups partition the replicas ``0 .. len(replica_groups)-1``, so the
replica count a collective runs over is fixed by the IR, and the shapes (all_gather's
result grows by ``group_size``) are static. ``collective-permute`` names
``source_target_pairs`` (flat: source, target, source, target...) instead; a replica that
no pair targets receives zeros.

The references read the replica they run as from :func:`replica_context`, set by the SPMD
interpreter (``axle.interpreter.evaluate_spmd``), which runs each replica in a thread
and exchanges values through a :class:`Rendezvous`. Outside such a run a module runs as a
single replica (replica 0 of 1), where only groups of one replica fit.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from ..errors import CollectiveError, OpAttributeError, ShapeError
from .opcodes import Op
from .reductions import REDUCE_KINDS
from .types import Shape, TensorType

T = TypeVar("T")

#: the reductions an all-reduce / reduce-scatter combines with
COLLECTIVE_KINDS: tuple[str, ...] = ("sum", "prod", "max", "min")
#: how long a replica waits at a collective for the others before the run is declared hung
RENDEZVOUS_TIMEOUT_S = 300.0


# ------------------------------------------------------------------ replica groups


def groups_of(op: Op, flat: Sequence[int], size: int) -> tuple[tuple[int, ...], ...]:
    """The replica groups of a flat ``replica_groups`` attribute; checks that they
    partition the replicas 0..len(flat)-1 into groups of ``size``."""
    if size < 1 or not flat or len(flat) % size:
        raise OpAttributeError(f"{op.value}: replica_groups {tuple(flat)} is not a whole number of "
                               f"groups of group_size={size} (at least one group of at least one replica)")
    if sorted(flat) != list(range(len(flat))):
        raise OpAttributeError(f"{op.value}: replica_groups {tuple(flat)} must name each replica "
                               f"0..{len(flat) - 1} exactly once")
    return tuple(tuple(flat[i:i + size]) for i in range(0, len(flat), size))


def permute_pairs(op: Op, flat: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """The (source, target) pairs of ``source_target_pairs``: distinct sources, distinct targets."""
    if len(flat) % 2 or any(v < 0 for v in flat):
        raise OpAttributeError(f"{op.value}: source_target_pairs {tuple(flat)} must be pairs of replica ids >= 0")
    pairs = tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2))
    for what, ids in (("sources", [s for s, _ in pairs]), ("targets", [t for _, t in pairs])):
        if len(set(ids)) != len(ids):
            raise OpAttributeError(f"{op.value}: source_target_pairs {tuple(flat)} repeats one of its {what}")
    return pairs


# ------------------------------------------------------------------ shape rules


def _err(op: Op, ts: Sequence[TensorType], why: str) -> ShapeError:
    return ShapeError(f"{op.value}: {why} (operand: {', '.join(str(t) for t in ts)})")


def _dim(op: Op, ts: Sequence[TensorType], d: int, name: str) -> int:
    rank = len(ts[0].shape)
    if not 0 <= d < rank:
        raise _err(op, ts, f"{name}={d} is not a dimension of a rank-{rank} operand")
    return d


def all_reduce_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    groups_of(op, attrs["replica_groups"], attrs["group_size"])
    return ts[0].shape


def all_gather_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    n = len(groups_of(op, attrs["replica_groups"], attrs["group_size"])[0])
    d = _dim(op, ts, attrs["dimension"], "dimension")
    s = list(ts[0].shape)
    s[d] *= n
    return tuple(s)


def reduce_scatter_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    n = len(groups_of(op, attrs["replica_groups"], attrs["group_size"])[0])
    d = _dim(op, ts, attrs["dimension"], "dimension")
    s = list(ts[0].shape)
    if s[d] % n:
        raise _err(op, ts, f"dimension {d} (size {s[d]}) does not split into {n} equal parts")
    s[d] //= n
    return tuple(s)


def all_to_all_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    n = len(groups_of(op, attrs["replica_groups"], attrs["group_size"])[0])
    split = _dim(op, ts, attrs["split_dimension"], "split_dimension")
    concat = _dim(op, ts, attrs["concat_dimension"], "concat_dimension")
    s = list(ts[0].shape)
    if s[split] % n:
        raise _err(op, ts, f"split_dimension {split} (size {s[split]}) does not split into {n} equal parts")
    s[split] //= n
    s[concat] *= n
    return tuple(s)


def collective_permute_shape(op: Op, ts: Sequence[TensorType], attrs: dict[str, Any]) -> Shape:
    permute_pairs(op, attrs["source_target_pairs"])
    return ts[0].shape


# ------------------------------------------------------------------ replicas at run time


class ReplicaAborted(CollectiveError):
    """Raised in the replicas a failed replica left waiting: the failure's own error is the
    one to report (evaluate_spmd does)."""


#: gathers one process's replica values into the whole run's, in replica order (the
#: other processes': axle.distributed over MPI); None: this process holds every replica
OuterExchange = Callable[[list[Any]], list[Any]]


class Processes(Protocol):
    """The other processes of a multi-process run (axle.distributed.World, on MPI), for
    the collectives that cross processes in one call of their own instead of a gather:
    this process's operands go in, this process's results come out."""

    def can_reduce(self, dtype: np.dtype, kind: str) -> bool: ...

    def allreduce(self, local: np.ndarray, kind: str) -> np.ndarray: ...

    def reduce_scatter(self, send: np.ndarray, kind: str) -> np.ndarray: ...

    def alltoall(self, send: np.ndarray) -> np.ndarray: ...

    def permute(self, sends: list[tuple[int, int, np.ndarray]], receives: list[tuple[int, int, np.ndarray]]) -> None:
        ...


#: what the barrier's action makes of the local replicas' values (one per replica, in
#: local order) for a collective with a cross-process call of its own
Plan = Callable[[list[Any]], Any]


class Rendezvous:
    """Where the replicas of one SPMD run meet at each collective: every replica posts its
    operand and gets every replica's, in replica order. All replicas reach the same
    collectives in the same order (the module is the same), so one barrier per exchange
    is enough; a replica that fails aborts it so that the others stop instead of hanging.

    This process's threads run the replicas ``first .. first + local - 1`` of ``count``;
    with several processes, ``outer`` (run by one thread once all local replicas arrived)
    exchanges the local values with the other processes'; with ``processes`` a collective
    over every replica may instead run a plan of its own (:meth:`meet`: MPI Allreduce,
    Reduce_scatter, Alltoall, point-to-point)."""

    def __init__(self, count: int, timeout: float = RENDEZVOUS_TIMEOUT_S, *, local: int | None = None,
                 first: int = 0, outer: OuterExchange | None = None, processes: Processes | None = None) -> None:
        self.count = count
        self.local = count if local is None else local
        self.first = first
        self._outer = outer
        self.processes = processes
        self._plan: Plan | None = None  # set while the replicas meet at a meet()
        self._slots: list[Any] = [None] * self.local
        self._all: Any = []
        self._barrier = threading.Barrier(self.local, action=self._gather, timeout=timeout)
        # a second barrier without the action: the exchange (an MPI call) runs once per collective
        self._read = threading.Barrier(self.local, timeout=timeout)

    def _gather(self) -> None:
        if self._plan is not None:
            self._all, self._plan = self._plan(list(self._slots)), None
            return
        self._all = self._outer(list(self._slots)) if self._outer is not None else list(self._slots)

    def whole(self, flat: Sequence[int], size: int) -> Processes | None:
        """The other processes, when the groups are one group of every replica in replica
        order and there are other processes (else None: gather)."""
        if self.processes is None or size != self.count or tuple(flat) != tuple(range(self.count)):
            return None
        return self.processes

    def meet(self, replica: int, value: Any, plan: Plan) -> Any:
        """What ``plan`` makes of the local replicas' values (every replica passes the same plan)."""
        self._plan = plan
        return self._meet(replica, value)

    def exchange(self, replica: int, value: Any) -> list[Any]:
        out: list[Any] = self._meet(replica, value)
        return out

    def _meet(self, replica: int, value: Any) -> Any:
        """Posts ``value`` and returns what the barrier's action made of all of them."""
        self._slots[replica - self.first] = value
        try:
            self._barrier.wait()
            out = self._all
            self._read.wait()  # nobody posts the next collective's value before all have read this one
        except threading.BrokenBarrierError:
            raise ReplicaAborted(f"replica {replica} of {self.count}: another replica failed or never "
                                 "reached this collective") from None
        return out

    def abort(self) -> None:
        self._barrier.abort()
        self._read.abort()


@dataclass(frozen=True)
class ReplicaContext:
    replica: int
    rendezvous: Rendezvous | None  # None: a run of one replica

    @property
    def count(self) -> int:
        return 1 if self.rendezvous is None else self.rendezvous.count

    def exchange(self, value: Any) -> list[Any]:
        return [value] if self.rendezvous is None else self.rendezvous.exchange(self.replica, value)


_SINGLE = ReplicaContext(0, None)
_LOCAL = threading.local()


def current_replica() -> ReplicaContext:
    """The replica the running thread evaluates (replica 0 of 1 outside an SPMD run)."""
    ctx: ReplicaContext = getattr(_LOCAL, "ctx", _SINGLE)
    return ctx


@contextlib.contextmanager
def replica_context(replica: int, rendezvous: Rendezvous) -> Iterator[None]:
    """Runs the body as ``replica`` of the run ``rendezvous`` joins (one thread per replica)."""
    prev = getattr(_LOCAL, "ctx", _SINGLE)
    _LOCAL.ctx = ReplicaContext(replica, rendezvous)
    try:
        yield
    finally:
        _LOCAL.ctx = prev


def run_replicas(count: int, run: Callable[[int], T], *, total: int | None = None, first: int = 0,
                 outer: OuterExchange | None = None, processes: Processes | None = None) -> list[T]:
    """``run(r)`` for each local replica r (0 .. count-1) of a run, a thread per replica,
    each in a ``replica_context`` of one rendezvous as replica ``first + r`` of ``total``
    (default: ``count``, this process alone; ``outer`` exchanges with the other processes).
    A replica that raises aborts the rendezvous, so the others stop at their next collective
    instead of waiting; the failed replica's own error is raised here (not the
    ReplicaAborted of the others)."""
    if count < 1:
        raise CollectiveError("an SPMD run needs at least one replica")
    rendezvous = Rendezvous(total or count, local=count, first=first, outer=outer, processes=processes)

    def one(r: int) -> T:
        with replica_context(first + r, rendezvous):
            try:
                return run(r)
            except BaseException:
                rendezvous.abort()
                raise

    with ThreadPoolExecutor(count, thread_name_prefix="axle-replica") as pool:
        futures = [pool.submit(one, r) for r in range(count)]
        errors = [f.exception() for f in futures]
    failed = [e for e in errors if e is not None and not isinstance(e, ReplicaAborted)]
    failed = failed or [e for e in errors if e is not None]
    if failed:
        raise failed[0]
    return [f.result() for f in futures]


def _exchange(op: Op, x: np.ndarray, replicas: int) -> tuple[int, list[np.ndarray]]:
    """This replica's id and every replica's operand; checks the run has ``replicas``."""
    ctx = current_replica()
    if replicas and ctx.count != replicas:
        raise CollectiveError(f"{op.value}: its replica groups cover {replicas} replica(s), but the run has "
                              f"{ctx.count} (run it with axle.interpreter.evaluate_spmd or under pmap)")
    return ctx.replica, ctx.exchange(x)


def _my_group(op: Op, x: np.ndarray, flat: Sequence[int], size: int) -> tuple[int, list[np.ndarray]]:
    """This replica's position in its group and its group's operands, in group order."""
    me, values = _exchange(op, x, len(flat))
    group = next(g for g in groups_of(op, flat, size) if me in g)
    return group.index(me), [values[r] for r in group]


def _combine(kind: str, xs: Sequence[np.ndarray]) -> np.ndarray:
    # Left to right in group order: every replica gets the same bits.
    fn = REDUCE_KINDS[kind].combine
    acc = xs[0]
    with np.errstate(all="ignore"):
        for x in xs[1:]:
            acc = np.asarray(fn(acc, x)).astype(xs[0].dtype, copy=False)
    return np.array(acc, copy=True)


def _whole_run(flat: Sequence[int], size: int) -> tuple[ReplicaContext, Rendezvous, Processes] | None:
    """(context, rendezvous, processes) when this collective may cross processes in a call
    of its own: one group of every replica, several processes."""
    ctx = current_replica()
    rv = ctx.rendezvous
    procs = rv.whole(flat, size) if rv is not None else None
    return None if rv is None or procs is None else (ctx, rv, procs)


def all_reduce(x: np.ndarray, *, kind: str, replica_groups: tuple[int, ...], group_size: int) -> np.ndarray:
    run = _whole_run(replica_groups, group_size)
    if run is not None and run[2].can_reduce(x.dtype, kind):
        ctx, rv, procs = run  # the local replicas combined in replica order, then one MPI Allreduce
        out = rv.meet(ctx.replica, x, lambda xs: procs.allreduce(_combine(kind, xs), kind))
        return np.array(out, copy=True)
    _, xs = _my_group(Op.ALL_REDUCE, x, replica_groups, group_size)
    return _combine(kind, xs)


def all_gather(x: np.ndarray, *, dimension: int, replica_groups: tuple[int, ...], group_size: int) -> np.ndarray:
    _, xs = _my_group(Op.ALL_GATHER, x, replica_groups, group_size)
    return np.concatenate(xs, axis=dimension)


def _by_process(parts: Sequence[np.ndarray], processes: int) -> np.ndarray:
    """[process, local replica, ...]: per-replica parts (in replica order) grouped by the
    process holding the replica, contiguous for an MPI call."""
    local = len(parts) // processes
    return np.ascontiguousarray(np.stack([np.stack(parts[q * local:(q + 1) * local]) for q in range(processes)]))


def reduce_scatter(x: np.ndarray, *, kind: str, dimension: int, replica_groups: tuple[int, ...],
                   group_size: int) -> np.ndarray:
    run = _whole_run(replica_groups, group_size)
    if run is not None and run[2].can_reduce(x.dtype, kind):
        ctx, rv, procs = run

        def plan(xs: list[Any]) -> list[np.ndarray]:  # local combine, then MPI Reduce_scatter_block
            blocks = np.split(_combine(kind, xs), rv.count, axis=dimension)
            return list(procs.reduce_scatter(_by_process(blocks, rv.count // rv.local), kind))
        return np.array(rv.meet(ctx.replica, x, plan)[ctx.replica - rv.first], copy=True)
    pos, xs = _my_group(Op.REDUCE_SCATTER, x, replica_groups, group_size)
    return np.split(_combine(kind, xs), len(xs), axis=dimension)[pos].copy()


def all_to_all(x: np.ndarray, *, split_dimension: int, concat_dimension: int, replica_groups: tuple[int, ...],
               group_size: int) -> np.ndarray:
    run = _whole_run(replica_groups, group_size)
    if run is not None:
        ctx, rv, procs = run
        n, local = rv.count, rv.local
        processes = n // local

        def plan(xs: list[Any]) -> list[np.ndarray]:
            # send[q, m, j]: local member m's block for replica j of process q (MPI Alltoall)
            blocks = [np.split(v, n, axis=split_dimension) for v in xs]
            send = np.ascontiguousarray(np.stack([_by_process(b, processes) for b in blocks], axis=1))
            recv = procs.alltoall(send)  # recv[p, m, j]: member m of process p's block for local replica j
            return [np.concatenate([recv[p, m, j] for p in range(processes) for m in range(local)],
                                   axis=concat_dimension) for j in range(local)]
        return np.array(rv.meet(ctx.replica, x, plan)[ctx.replica - rv.first], copy=True)
    pos, xs = _my_group(Op.ALL_TO_ALL, x, replica_groups, group_size)
    # member i's operand splits into n blocks; block ``pos`` of each member comes here, in member order
    return np.concatenate([np.split(v, len(xs), axis=split_dimension)[pos] for v in xs], axis=concat_dimension)


def collective_permute(x: np.ndarray, *, source_target_pairs: tuple[int, ...]) -> np.ndarray:
    op = Op.COLLECTIVE_PERMUTE
    pairs = permute_pairs(op, source_target_pairs)
    ctx = current_replica()
    if any(r >= ctx.count for pair in pairs for r in pair):
        raise CollectiveError(f"{op.value}: source_target_pairs {source_target_pairs} name a replica >= the "
                              f"run's {ctx.count} replica(s)")
    rv = ctx.rendezvous
    if rv is not None and rv.processes is not None:
        procs, first, local = rv.processes, rv.first, rv.local

        def plan(xs: list[Any]) -> list[np.ndarray]:
            # pairs within this process copy; the others are MPI point-to-point, tagged by pair
            out = [np.zeros_like(xs[0]) for _ in xs]
            sends, receives = [], []
            for tag, (src, dst) in enumerate(pairs):
                mine_src, mine_dst = first <= src < first + local, first <= dst < first + local
                if mine_src and mine_dst:
                    out[dst - first] = np.array(xs[src - first], copy=True)
                elif mine_src:
                    sends.append((dst // local, tag, np.ascontiguousarray(xs[src - first])))
                elif mine_dst:
                    receives.append((src // local, tag, out[dst - first]))
            if sends or receives:
                procs.permute(sends, receives)
            return out
        return np.array(rv.meet(ctx.replica, x, plan)[ctx.replica - first], copy=True)
    me, values = _exchange(op, x, 0)
    src = next((s for s, t in pairs if t == me), None)
    return np.zeros_like(x) if src is None else np.array(values[src], copy=True)


def replica_id() -> np.ndarray:
    return np.array(current_replica().replica, np.int32)


def inverse_pairs(flat: Sequence[int]) -> tuple[int, ...]:
    """``source_target_pairs`` sending every value back where it came from (the transpose)."""
    return tuple(v for i in range(0, len(flat), 2) for v in (flat[i + 1], flat[i]))

