"""Multi-process SPMD over MPI (jax's multi-controller model): every process runs the same
program on its local devices, and the collectives span every process's replicas.

    mpirun -n 2 python train.py          # in train.py: axle.distributed.initialize() first

``initialize()`` takes MPI's world communicator (mpi4py, the ``mpi`` extra) or one given;
afterwards ``axle.pmap`` over a process's local devices runs replicas
``process_index * local .. + local - 1`` of ``local * process_count`` (every process must
map the same number of devices), and each collective gathers the replicas' host-staged
operands across processes with one MPI allgather (``comm.allgather``) after the local
replicas met. Processes that disagree on a collective's shapes or dtypes get a
``CollectiveError`` naming both, on every process, rather than wrong numbers.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import CollectiveError

#: environment variables an MPI launcher sets (Open MPI, MPICH/PMI, Slurm)
_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS")


@dataclass(frozen=True)
class World:
    """This process's place among the processes of a multi-process run."""

    comm: Any  # an mpi4py communicator
    process_index: int
    process_count: int

    def allgather(self, local: list[Any]) -> list[Any]:
        """Every process's replica values, process after process (replica order), checked
        to agree in shape and dtype (the same program runs everywhere)."""
        parts = self.comm.allgather([np.asarray(v) for v in local])  # pickled: any layout, 0-d kept
        values = [v for part in parts for v in part]
        kinds = {(v.shape, v.dtype.str) for v in values}
        if len(kinds) > 1:
            listed = ", ".join(f"process {p}: {part[0].dtype}{list(part[0].shape)}" for p, part in enumerate(parts)
                               if part)
            raise CollectiveError(f"the processes disagree on a collective's operand ({listed}): every process "
                                  "must run the same program on the same shapes")
        return values


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
    if comm is None:
        try:
            from mpi4py import MPI
        except ImportError:
            raise CollectiveError("axle.distributed.initialize needs mpi4py: pip install 'axle[mpi]' "
                                  "(and an MPI runtime, e.g. Debian's openmpi-bin)") from None
        comm = MPI.COMM_WORLD
    _WORLD = World(comm, int(comm.Get_rank()), int(comm.Get_size()))
    return _WORLD


def world() -> World | None:
    """The multi-process run this process joined (None: a single-process run)."""
    return _WORLD


def process_index() -> int:
    return 0 if _WORLD is None else _WORLD.process_index


def process_count() -> int:
    return 1 if _WORLD is None else _WORLD.process_count
