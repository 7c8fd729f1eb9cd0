"""What each collective of a module moves per step (``explain``'s communication section):
kind, replica groups, bytes per replica and in all, and whether it crosses processes (and
how: axle.distributed's MPI ``Allreduce`` or ``Allgather``)."""
from __future__ import annotations

from dataclasses import dataclass

from .collectives import groups_of, permute_pairs
from .module import Module, Node
from .opcodes import Op

#: the collective ops (replica-id reads no other replica)
COLLECTIVE_OPS = (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL, Op.COLLECTIVE_PERMUTE)


@dataclass(frozen=True)
class Traffic:
    """What one collective of a module moves each time it runs (``axle explain``)."""

    node: Node
    in_loop: bool  # inside a loop body or branch: per trip, not per step
    processes: int  # the processes the run spans (axle.distributed), replicas split evenly
    run_replicas: int  # the replicas of the run (every process's)

    @property
    def kind(self) -> str:
        k = self.node.attr.get("kind")
        return f"{self.node.op.value}({k})" if k else self.node.op.value

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        if self.node.op is Op.COLLECTIVE_PERMUTE:
            pairs = permute_pairs(self.node.op, self.node.attr["source_target_pairs"])
            return tuple(pairs)
        return groups_of(self.node.op, self.node.attr["replica_groups"], self.node.attr["group_size"])

    @property
    def replicas(self) -> int:
        return self.run_replicas

    @property
    def bytes_per_replica(self) -> int:
        """The operand each replica posts to the exchange."""
        return self.node.operands[0].tensor_type.nbytes

    @property
    def total_bytes(self) -> int:
        """Every replica's operand: what the communicator moves through host memory."""
        return self.bytes_per_replica * self.replicas

    def cross_process(self) -> str:
        """How the collective crosses processes (axle.distributed's MPI call and the bytes
        it moves), or that it stays in this process."""
        if self.processes <= 1:
            return "local (one process: host memory)"
        n, b = self.run_replicas, self.bytes_per_replica
        local = max(1, n // self.processes)
        if not any(len({r // local for r in g}) > 1 for g in self.groups):
            return "local (each group within one process)"
        op = self.node.op
        if op is Op.COLLECTIVE_PERMUTE:
            crossing = sum(1 for s, t in self.groups if s // local != t // local)
            return (f"cross-process: MPI point-to-point, {crossing} of {len(self.groups)} pairs cross processes, "
                    f"{crossing * b} B in all")
        whole = self.groups == (tuple(range(n)),)  # the cases axle.distributed runs as one call of their own
        reduced = self.node.operands[0].tensor_type.dtype.np.name in MPI_TYPES
        if whole and op is Op.ALL_REDUCE and reduced:
            return f"cross-process: MPI Allreduce of {b} B per process"
        if whole and op is Op.REDUCE_SCATTER and reduced:
            return f"cross-process: MPI Reduce_scatter_block of {b} B per process, {local * b // n} B back"
        if whole and op is Op.ALL_TO_ALL:
            return f"cross-process: MPI Alltoall, {local * b * (n - local) // n} B sent and received per process"
        got = (self.processes - 1) * local * b
        return f"cross-process: MPI Allgather, {local * b} B sent and {got} B received per process"

    def describe(self) -> str:
        groups = self.groups
        shown = ", ".join("{" + ",".join(map(str, g)) + "}" for g in groups[:4]) + (", ..." if len(groups) > 4 else "")
        what = "pairs" if self.node.op is Op.COLLECTIVE_PERMUTE else "groups"
        return (f"{self.kind} {self.node.operands[0].type} over {self.replicas} replicas, {what} {shown}: "
                f"{self.bytes_per_replica} B per replica, {self.total_bytes} B per "
                f"{'trip of its loop' if self.in_loop else 'step'} in all; {self.cross_process()}")


#: the MPI datatype (mpi4py's ``MPI`` attribute) of each NumPy dtype MPI reduces natively:
#: axle.distributed reduces these with ``Allreduce``; float16, bfloat16 and bool travel as
#: their bit patterns and are reduced by NumPy
MPI_TYPES = {"float32": "FLOAT", "float64": "DOUBLE", "int8": "INT8_T", "int16": "INT16_T", "int32": "INT32_T",
             "int64": "INT64_T", "uint8": "UINT8_T", "uint16": "UINT16_T", "uint32": "UINT32_T",
             "uint64": "UINT64_T"}


def traffic(module: Module, processes: int = 1) -> list[Traffic]:
    """Every collective of ``module`` (entry first, then those in loop bodies and branches)."""
    found = [(n, comp is not module.entry) for comp in [module.entry, *module.computations()[:-1]]
             for n in comp.nodes if n.op in COLLECTIVE_OPS]
    # the run's replica count: what the replica groups cover (a permute names only its pairs)
    count = max((len(n.attr["replica_groups"]) if "replica_groups" in n.attr else max(n.attr["source_target_pairs"],
                                                                                         default=0) + 1
                 for n, _ in found), default=1)
    return [Traffic(n, in_loop, processes, count) for n, in_loop in found]


def collective_signature(module: Module) -> str:
    """The collectives of ``module`` in program order (op, attributes, operand type): what
    the processes of a multi-process run must agree on for their MPI calls to match. Not
    the whole program: processes may differ in anything else (a per-process constant)."""
    return "\n".join(f"{n.op.value} {sorted(n.attr.items())} {n.operands[0].type}"
                     for comp in module.computations() for n in comp.nodes if n.op in COLLECTIVE_OPS)
