"""Multi-process SPMD over MPI (jax's multi-controller model): every process runs the same
program on its local devices, and the collectives span every process's replicas.

    mpirun -n 2 python train.py          # in train.py: axle.distributed.initialize() first

``initialize()`` takes MPI's world communicator (mpi4py, the ``mpi`` extra) or one given;
afterwards ``axle.pmap`` over a process's local devices runs replicas
``process_index * local .. + local - 1`` of ``local * process_count`` (every process must
map the same number of devices). Each collective meets the local replicas first, then
crosses processes on their host-staged NumPy buffers with MPI datatypes (ir/collectives.py
decides which call): an all-reduce over every replica combines the local replicas and
calls ``Allreduce``, a reduce-scatter ``Reduce_scatter_block``, an all-to-all
``Alltoall``, a collective-permute point-to-point sends; an all-gather (and float16 /
bfloat16 reductions, which MPI lacks: their bit patterns travel, NumPy reduces) gathers
the operands with one ``Allgather``. Before a program's first run the processes
compare a digest of its collectives (kind, replica groups, operand shape and dtype, in
program order) with one small allgather; processes that disagree get a
``CollectiveError`` naming each process's argument shapes, on every process, rather than
wrong numbers or a hung MPI call.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import CollectiveError
from .ir.traffic import MPI_TYPES

#: environment variables an MPI launcher sets (Open MPI, MPICH/PMI, Slurm)
_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS")


#: the dtypes without an MPI type, moved as bits of the same width (no reduction needed)
_BIT_PATTERNS = {1: "UINT8_T", 2: "UINT16_T", 4: "UINT32_T", 8: "UINT64_T"}
_MPI_OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN"}


@dataclass(frozen=True)
class World:
    """This process's place among the processes of a multi-process run."""

    comm: Any  # an mpi4py communicator
    process_index: int
    process_count: int
    mpi: Any = None  # mpi4py's MPI module (its datatypes and reduction ops)

    def _typed(self, a: np.ndarray) -> list[Any]:
        """``a`` as an MPI buffer: [array, datatype], a dtype MPI lacks as its bit pattern."""
        name = MPI_TYPES.get(a.dtype.name)
        if name is None:
            name = _BIT_PATTERNS[a.dtype.itemsize]
            a = a.view(np.dtype(f"u{a.dtype.itemsize}"))
        return [a, getattr(self.mpi, name)]

    def allgather(self, local: list[Any]) -> list[Any]:
        """Every process's replica values, process after process (replica order): one
        buffer ``Allgather`` of the local replicas' values stacked. Every process must post
        the same shapes (the program's collectives, :meth:`agree`, checked that once)."""
        send = np.ascontiguousarray(np.stack([np.asarray(v) for v in local]))
        recv = np.empty((self.process_count,) + send.shape, send.dtype)
        self.comm.Allgather(self._typed(send), self._typed(recv))
        return list(recv.reshape((-1,) + send.shape[1:]))

    def can_reduce(self, dtype: np.dtype, kind: str) -> bool:
        """Whether MPI reduces ``dtype`` with ``kind`` itself (``Allreduce``)."""
        return dtype.name in MPI_TYPES and kind in _MPI_OPS

    def allreduce(self, local: np.ndarray, kind: str) -> np.ndarray:
        """``local`` (this process's replicas already combined) combined over the processes."""
        a = np.array(local, order="C")  # not ascontiguousarray: that makes a 0-d value 1-d
        out = np.empty_like(a)
        self.comm.Allreduce(self._typed(a), self._typed(out), op=getattr(self.mpi, _MPI_OPS[kind]))
        return out

    def reduce_scatter(self, send: np.ndarray, kind: str) -> np.ndarray:
        """``send`` ([process, ...], this process's combined blocks for each process)
        combined over the processes; this process gets its own part (``Reduce_scatter_block``)."""
        out = np.empty(send.shape[1:], send.dtype)
        self.comm.Reduce_scatter_block(self._typed(send), self._typed(out), op=getattr(self.mpi, _MPI_OPS[kind]))
        return out

    def alltoall(self, send: np.ndarray) -> np.ndarray:
        """Part q of ``send`` ([process, ...]) goes to process q; part p of the result came from p."""
        out = np.empty_like(send)
        self.comm.Alltoall(self._typed(send), self._typed(out))
        return out

    def permute(self, sends: list[tuple[int, int, np.ndarray]], receives: list[tuple[int, int, np.ndarray]]) -> None:
        """Point-to-point: each (process, tag, array) of ``sends`` goes to that process, each
        of ``receives`` is filled from it (nonblocking sends and receives, then one wait)."""
        requests = [self.comm.Isend(self._typed(a), dest=p, tag=t) for p, t, a in sends]
        requests += [self.comm.Irecv(self._typed(a), source=p, tag=t) for p, t, a in receives]
        self.mpi.Request.Waitall(requests)

    def agree(self, what: str, summary: str, digest: str) -> None:
        """Raises CollectiveError on every process unless all agree on ``digest`` (the
        program's collectives: what their MPI calls must match), naming each process's
        ``summary``: one small pickled allgather per program, not per step."""
        parts = self.comm.allgather((summary, digest))
        if len({d for _, d in parts}) > 1:
            listed = "; ".join(f"process {p}: {s}" for p, (s, _) in enumerate(parts))
            same = len({s for s, _ in parts}) == 1
            raise CollectiveError(f"the processes disagree on {what} ({listed}"
                                  f"{': the same shapes, but the programs differ in their collectives' if same else ''}"
                                  "): every "
                                  "process must run the same program on the same shapes")


_WORLD: World | None = None


def launched_by_mpi() -> bool:
    """Whether this process was started by an MPI launcher (mpirun, srun...)."""
    return any(v in os.environ for v in _LAUNCH_VARS)


def initialize(comm: Any = None) -> World:
    """Joins the multi-process run: ``comm`` (an mpi4py communicator), else MPI's world
    communicator. Idempotent; returns this process's :class:`World`."""
    global _WORLD
    if _WORLD is not None:
        return _WORLD
    try:
        from mpi4py import MPI
    except ImportError:
        raise CollectiveError("axle.distributed.initialize needs mpi4py: pip install 'axle[mpi]' "
                              "(and an MPI runtime, e.g. Debian's openmpi-bin)") from None
    comm = MPI.COMM_WORLD if comm is None else comm
    _WORLD = World(comm, int(comm.Get_rank()), int(comm.Get_size()), MPI)
    return _WORLD


def world() -> World | None:
    """The multi-process run this process joined (None: a single-process run)."""
    return _WORLD


def process_index() -> int:
    return 0 if _WORLD is None else _WORLD.process_index


def process_count() -> int:
    return 1 if _WORLD is None else _WORLD.process_count
