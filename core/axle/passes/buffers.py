"""Buffer assignment: where every value of the entry computation lives.

Given a schedule (:func:`axle.passes.schedule.schedule`), each value gets a live range
``[start, end]`` in schedule steps (``end`` is its last reader's step; entry outputs live
to the end). Temporaries are packed into one arena: a value takes the best-fitting hole
left by values already dead, so memory is reused. An elementwise kernel may write its
result *in place* over an operand that dies at that very kernel (every element is read
before the same element is written), and so does a scatter or dynamic-update-slice over
its first operand (it rewrites windows of it: the kernel then never copies the operand).
Parameters belong to the caller and are never overwritten unless donated; constants belong
to the executable; entry outputs get their own buffers, handed back to the caller. A loop
body assigned with ``carry=True`` (its parameters donated) may write result ``i`` over
parameter ``i`` by the same in-place rule: the new carry then needs no copy back.

Backends use it as an API::

    a = axle.passes.buffers.assign(module)
    for node in a.order:                    # run kernels in this order
        alloc = a.allocation(node)          # region, offset, size of its result
    a.temp_bytes                            # size of the temp arena to allocate once
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..ir.module import Module, Node
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType
from .schedule import ALIASING, schedule

#: (node uid, output index): one array-valued result
ValueId = tuple[int, int]
ALIGNMENT = 64


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class Allocation:
    """Where one value lives and when it is alive (schedule steps, inclusive)."""

    value: ValueId
    region: str  # "temp" (offset in the arena), "output" (offset in the outputs block),
    #              "parameter" (offset = parameter index), "constant" (offset 0)
    offset: int
    size: int
    start: int
    end: int
    in_place_of: ValueId | None = None


@dataclass
class BufferAssignment:
    """The result of :func:`assign`."""

    order: list[Node]
    allocations: dict[ValueId, Allocation]
    temp_bytes: int
    peak_bytes: int
    naive_temp_bytes: int
    output_bytes: int
    parameter_bytes: int
    constant_bytes: int
    donated: frozenset[int] = frozenset()
    nodes: dict[int, Node] = field(default_factory=dict)

    def values_of(self, node: Node) -> list[ValueId]:
        """The values a node's result consists of (through tuple views)."""
        return resolve(node)

    def allocation(self, node: Node, index: int = 0) -> Allocation:
        """The allocation of a node's result (element ``index`` of a tuple result)."""
        return self.allocations[resolve(node)[index]]

    @property
    def kernels(self) -> int:
        return sum(1 for n in self.order if n.op not in (Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT))

    @property
    def in_place(self) -> int:
        return sum(1 for a in self.allocations.values() if a.in_place_of is not None)

    def report(self) -> dict[str, Any]:
        """The facts ``Compiled.report()`` shows."""
        return {
            "kernels": self.kernels,
            "temp_bytes": self.temp_bytes,
            "peak_bytes": self.peak_bytes,
            "naive_temp_bytes": self.naive_temp_bytes,
            "output_bytes": self.output_bytes,
            "parameter_bytes": self.parameter_bytes,
            "constant_bytes": self.constant_bytes,
            "temp_buffers": sum(1 for a in self.allocations.values() if a.region == "temp"),
            "in_place": self.in_place,
        }

    def describe(self) -> str:
        """One line per value: step, node, region, offset, size, live range."""
        lines = []
        for step, n in enumerate(self.order):
            for v in _own_values(n):
                a = self.allocations[v]
                ip = f" in-place of {a.in_place_of}" if a.in_place_of else ""
                lines.append(f"{step:4d} {n.name or n.op.value:<24} {a.region:<9} @{a.offset:<8} "
                             f"{a.size:>10}B live [{a.start}, {a.end}]{ip}")
        return "\n".join(lines)


def resolve(n: Node) -> list[ValueId]:
    """The values behind a node, looking through get-tuple-element and tuple views."""
    if n.op is Op.GET_TUPLE_ELEMENT:
        return [resolve(n.operands[0])[n.attr["index"]]]
    if n.op is Op.TUPLE:
        return [v for o in n.operands for v in resolve(o)]
    return _own_values(n)


def _own_values(n: Node) -> list[ValueId]:
    if n.op in ALIASING:
        return []
    if isinstance(n.type, TupleType):
        return [(n.uid, i) for i in range(len(n.type.elements))]
    return [(n.uid, 0)]


def _value_type(n: Node, i: int) -> TensorType:
    return n.type.elements[i] if isinstance(n.type, TupleType) else n.type


def elementwise_positions(n: Node) -> set[int]:
    """Operand positions whose every element is read only to compute the same element of
    the result, so the result may overwrite that operand in place."""
    if not isinstance(n.type, TensorType):
        return set()
    out_t = n.type
    if n.op is Op.FUSION:
        comp = n.attr["computation"]
        if n.attr["kind"] != "loop" or comp.root.op is Op.TUPLE:
            return set()
        ok = set()
        for pos, p in enumerate(comp.parameters):
            down = {p.uid}
            fine = True
            for m in comp.nodes:
                if m.uid in down or not any(o.uid in down for o in m.operands):
                    continue
                if not (m.traits.elementwise and m.shape == out_t.shape):
                    fine = False
                    break
                down.add(m.uid)
            if fine and comp.root.uid in down and p.type == TensorType(p.type.dtype, out_t.shape):
                ok.add(pos)
        return ok
    if n.traits.updates_operand:
        # scatter, dynamic-update-slice: an element of operand 0 is read, if at all, only
        # to write the same element of the result (the other operands are not in place)
        return {0}
    if n.traits.elementwise and not n.traits.side_effect:
        return {i for i, o in enumerate(n.operands) if isinstance(o.type, TensorType) and o.type.shape == out_t.shape}
    return set()


class _Arena:
    """Best-fit allocator over one growing block, coalescing freed holes."""

    def __init__(self) -> None:
        self.top = 0
        self.holes: list[tuple[int, int]] = []  # (offset, size), sorted by offset
        self.in_use = 0

    def alloc(self, size: int) -> int:
        size = _align(max(size, 1))
        best = None
        for i, (_off, sz) in enumerate(self.holes):
            if sz >= size and (best is None or sz < self.holes[best][1]):
                best = i
        self.in_use += size
        if best is not None:
            off, sz = self.holes.pop(best)
            if sz > size:
                self.holes.insert(best, (off + size, sz - size))
            return off
        if self.holes and sum(self.holes[-1]) == self.top:  # grow the last hole
            off, _ = self.holes.pop()
            self.top = off + size
            return off
        off = self.top
        self.top += size
        return off

    def free(self, off: int, size: int) -> None:
        size = _align(max(size, 1))
        self.in_use -= size
        self.holes.append((off, size))
        self.holes.sort()
        merged: list[tuple[int, int]] = []
        for o, s in self.holes:
            if merged and sum(merged[-1]) == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((o, s))
        self.holes = merged


def live_ranges(order: list[Node], root: Node) -> dict[ValueId, tuple[int, int]]:
    """[definition step, last reading step] of every value; entry outputs to the end."""
    ranges: dict[ValueId, tuple[int, int]] = {}
    for step, n in enumerate(order):
        for v in _own_values(n):
            ranges[v] = (step, step)
        if n.op in ALIASING:
            continue
        for o in n.operands:
            for v in resolve(o):
                s, _ = ranges[v]
                ranges[v] = (s, step)
    for v in resolve(root):
        ranges[v] = (ranges[v][0], len(order))
    return ranges


def assign(module: Module, order: Iterable[Node] | None = None, donated: Iterable[int] = (),
           carry: bool = False) -> BufferAssignment:
    """Schedules the entry computation (unless ``order`` is given) and assigns buffers.

    ``donated``: parameter indices whose buffers the executable may overwrite.
    ``carry``: the entry is a loop body whose result ``i`` replaces parameter ``i``: a
    result may take a donated parameter's buffer at its own position (region
    ``parameter``), so the loop need not copy it back."""
    comp = module.entry
    order = list(order) if order is not None else schedule(comp)
    donated_set = frozenset(donated)
    ranges = live_ranges(order, comp.root)
    root_values = resolve(comp.root)
    outputs = set(root_values)
    # a result at one position only may replace the parameter at that position
    carry_pos = {v: i for i, v in enumerate(root_values) if carry and root_values.count(v) == 1}
    nodes = {n.uid: n for n in order}
    arena = _Arena()
    allocs: dict[ValueId, Allocation] = {}
    out_off = 0
    out_bytes = 0
    param_bytes = sum(p.type.nbytes for p in comp.parameters)
    const_bytes = 0
    naive = 0
    peak = 0
    for step, n in enumerate(order):
        handed_over: set[ValueId] = set()
        if n.op is Op.PARAMETER:
            v = (n.uid, 0)
            allocs[v] = Allocation(v, "parameter", n.attr["index"], n.type.nbytes, *ranges[v])
        elif n.op is Op.CONSTANT:
            v = (n.uid, 0)
            const_bytes += n.type.nbytes
            allocs[v] = Allocation(v, "constant", 0, n.type.nbytes, *ranges[v])
        elif n.op not in ALIASING:
            positions = elementwise_positions(n)
            for v in _own_values(n):
                t = _value_type(n, v[1])
                start, end = ranges[v]
                if v in carry_pos and carry_pos[v] in donated_set:
                    donor = _in_place_donor(n, positions, t, allocs, step, handed_over, outputs,
                                            frozenset({carry_pos[v]}), temps=False)
                    if donor is not None:
                        d = allocs[donor]
                        handed_over.add(donor)
                        allocs[v] = Allocation(v, d.region, d.offset, t.nbytes, start, end, in_place_of=donor)
                        continue
                if v in outputs:
                    allocs[v] = Allocation(v, "output", out_off, t.nbytes, start, end)
                    out_off += _align(t.nbytes)
                    out_bytes += t.nbytes
                    continue
                naive += t.nbytes
                donor = _in_place_donor(n, positions, t, allocs, step, handed_over, outputs, donated_set)
                if donor is not None:
                    d = allocs[donor]
                    handed_over.add(donor)
                    allocs[v] = Allocation(v, d.region, d.offset, t.nbytes, start, end, in_place_of=donor)
                    continue
                allocs[v] = Allocation(v, "temp", arena.alloc(t.nbytes), t.nbytes, start, end)
        peak = max(peak, param_bytes + out_bytes + arena.in_use)
        # free what dies here (after this step's results took their places)
        for o in {v for op in n.operands for v in resolve(op)} | set(_own_values(n)):
            a = allocs.get(o)
            if a is None or a.region != "temp" or a.end != step or o in handed_over:
                continue
            if a.in_place_of is not None and allocs[a.in_place_of].region != "temp":
                continue
            arena.free(a.offset, a.size)
    return BufferAssignment(order, allocs, arena.top, peak, naive, out_bytes, param_bytes, const_bytes,
                            donated_set, nodes)


def _in_place_donor(n: Node, positions: set[int], t: TensorType, allocs: dict[ValueId, Allocation], step: int,
                    handed_over: set[ValueId], outputs: set[ValueId], donated: frozenset[int],
                    temps: bool = True) -> ValueId | None:
    """An operand value ``n`` may overwrite: it dies here, has the result's size and
    is read only elementwise (at every position it is passed in). ``temps=False``: only
    a value living in a donated parameter's buffer (a loop body's new carry)."""
    by_value: dict[ValueId, list[int]] = {}
    for pos, o in enumerate(n.operands):
        for v in resolve(o):
            by_value.setdefault(v, []).append(pos)
    for v, poss in by_value.items():
        a = allocs[v]
        if v in handed_over or v in outputs or a.end != step or a.size != t.nbytes:
            continue
        if not all(p in positions for p in poss):
            continue
        if (temps and a.region == "temp") or (a.region == "parameter" and a.offset in donated):
            return v
    return None
