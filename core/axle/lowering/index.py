"""Index algebra: where a movement op's output element comes from, as expressions.

Every movement op (broadcast, reshape, transpose, slice, pad, concatenate, reverse) and
iota is a map from an output index to an operand index. Here those maps are written once,
over small integer expressions (:class:`Ix`), so that every emitter reuses them: a C
dialect prints them with :func:`to_c`, an IR emitter walks the same tree, and the tests
evaluate them in Python (:func:`evaluate`) against the ops' NumPy references.

Division and remainder are C's (truncating). The maps only divide values that are
non-negative, except where a predicate guards the result (pad's interior test), and every
operand index a map returns is in bounds even where its predicate is false (clamped), so
an emitter may load it unconditionally and select afterwards.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..ir.opcodes import Op
from ..ir.types import squeeze

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Ix:
    """An integer expression: ``op`` is ``var`` (args: name), ``const`` (args: value), a
    binary operator (``+ - * / %``, comparisons ``< >= ==``, ``&&``) or ``min``/``max``."""

    op: str
    args: tuple[Any, ...]

    def __add__(self, other: IxLike) -> Ix:
        return add(self, other)

    def __sub__(self, other: IxLike) -> Ix:
        return add(self, mul(other, -1))

    def __mul__(self, other: IxLike) -> Ix:
        return mul(self, other)

    def __floordiv__(self, other: int) -> Ix:
        return div(self, other)

    def __mod__(self, other: int) -> Ix:
        return mod(self, other)

    @property
    def const(self) -> int | None:
        """The value of a constant expression, else None."""
        return self.args[0] if self.op == "const" else None


IxLike = Ix | int


def var(name: str) -> Ix:
    return Ix("var", (name,))


def const(value: int) -> Ix:
    return Ix("const", (int(value),))


def ix(e: IxLike) -> Ix:
    return e if isinstance(e, Ix) else const(e)


def add(a: IxLike, b: IxLike) -> Ix:
    a, b = ix(a), ix(b)
    if a.const is not None and b.const is not None:
        return const(a.const + b.const)
    if b.const == 0:
        return a
    if a.const == 0:
        return b
    if b.const is not None and b.const < 0:
        return Ix("-", (a, const(-b.const)))
    return Ix("+", (a, b))


def mul(a: IxLike, b: IxLike) -> Ix:
    a, b = ix(a), ix(b)
    if a.const is not None and b.const is not None:
        return const(a.const * b.const)
    if 0 in (a.const, b.const):
        return const(0)
    if b.const == 1:
        return a
    if a.const == 1:
        return b
    return Ix("*", (a, b))


def div(a: IxLike, k: int) -> Ix:
    """``a / k`` truncating (k > 0)."""
    a = ix(a)
    if k == 1:
        return a
    return const(_trunc_div(a.const, k)) if a.const is not None else Ix("/", (a, const(k)))


def mod(a: IxLike, k: int) -> Ix:
    """``a % k`` with the sign of ``a`` (k > 0)."""
    a = ix(a)
    if k == 1:
        return const(0)
    return const(a.const - k * _trunc_div(a.const, k)) if a.const is not None else Ix("%", (a, const(k)))


def minimum(a: IxLike, b: IxLike) -> Ix:
    a, b = ix(a), ix(b)
    return const(min(a.const, b.const)) if a.const is not None and b.const is not None else Ix("min", (a, b))


def maximum(a: IxLike, b: IxLike) -> Ix:
    a, b = ix(a), ix(b)
    return const(max(a.const, b.const)) if a.const is not None and b.const is not None else Ix("max", (a, b))


def clamp(a: IxLike, lo: int, hi: int) -> Ix:
    return minimum(maximum(a, lo), hi)


def compare(op: str, a: IxLike, b: IxLike) -> Ix:
    a, b = ix(a), ix(b)
    if a.const is not None and b.const is not None:
        return const(int(_COMPARE[op](a.const, b.const)))
    return Ix(op, (a, b))


def all_of(preds: Sequence[Ix]) -> Ix:
    """The conjunction of predicates (constant-true ones dropped)."""
    out = const(1)
    for p in preds:
        if p.const == 0:
            return const(0)
        if p.const is None:
            out = p if out.const == 1 else Ix("&&", (out, p))
    return out


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, "==": lambda a, b: a == b}


def _as_int(f: Callable[[int, int], bool]) -> Callable[[int, int], int]:
    return lambda a, b: int(f(a, b))


_EVAL: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": _trunc_div,
    "%": lambda a, b: a - b * _trunc_div(a, b), "min": min, "max": max,
    "&&": lambda a, b: int(bool(a) and bool(b)),
    **{k: _as_int(f) for k, f in _COMPARE.items()}}


def evaluate(e: Ix, env: Mapping[str, int]) -> int:
    """The value of ``e`` with variables bound by ``env`` (C's integer semantics)."""
    if e.op == "const":
        return e.args[0]
    if e.op == "var":
        return env[e.args[0]]
    return _EVAL[e.op](evaluate(e.args[0], env), evaluate(e.args[1], env))


def to_c(e: Ix) -> str:
    """C syntax, shared by every C-like dialect (min/max as conditionals: operands are
    variables or small expressions, so repeating one is cheap)."""
    if e.op == "const":
        return str(e.args[0]) if e.args[0] >= 0 else f"({e.args[0]})"
    if e.op == "var":
        return e.args[0]
    a, b = (to_c(x) for x in e.args)
    if e.op in ("min", "max"):
        return f"({a} {'<' if e.op == 'min' else '>'} {b} ? {a} : {b})"
    return f"({a} {e.op} {b})"


def is_simple(e: Ix) -> bool:
    """Whether ``e`` is a variable or a constant (worth no temporary of its own)."""
    return e.op in ("var", "const")


# ---------------------------------------------------------------------- flat offsets


def row_major_strides(shape: Shape) -> Shape:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def linearize(coords: Sequence[IxLike], shape: Shape) -> Ix:
    """The row-major flat offset of ``coords`` in ``shape`` (unit dims contribute nothing)."""
    out: Ix = const(0)
    for c, s, n in zip(coords, row_major_strides(shape), shape):
        if n != 1:
            out = add(out, mul(c, s))
    return out


def delinearize(flat: IxLike, shape: Shape) -> list[Ix]:
    """The coordinates of row-major offset ``flat`` in ``shape``."""
    out = []
    for k, (n, s) in enumerate(zip(shape, row_major_strides(shape))):
        if n == 1:
            out.append(const(0))
            continue
        e = div(flat, s)
        # the leading non-unit dim needs no modulo: the offset is below the size
        out.append(mod(e, n) if any(d != 1 for d in shape[:k]) else e)
    return out


# --------------------------------------------------------------- movement-op index maps


def broadcast_index(out: Sequence[Ix], operand_shape: Shape, dims: Sequence[int]) -> list[Ix]:
    """broadcast_in_dim: operand dim i is output dim ``dims[i]`` (a unit operand dim stays 0)."""
    return [out[d] if operand_shape[i] != 1 else const(0) for i, d in enumerate(dims)]


def reshape_index(out: Sequence[Ix], out_shape: Shape, operand_shape: Shape) -> list[Ix]:
    """Row-major reshape. Where only unit dims differ the coordinates map straight across
    (no flat round trip, and a per-row value keeps the row loop's spelling)."""
    if squeeze(out_shape) == squeeze(operand_shape):
        it = iter([c for c, d in zip(out, out_shape) if d != 1])
        return [next(it) if d != 1 else const(0) for d in operand_shape]
    return delinearize(linearize(out, out_shape), operand_shape)


def transpose_index(out: Sequence[Ix], permutation: Sequence[int]) -> list[Ix]:
    """Output dim i is operand dim ``permutation[i]``."""
    res: list[Ix] = [const(0)] * len(out)
    for i, p in enumerate(permutation):
        res[p] = out[i]
    return res


def slice_index(out: Sequence[Ix], start: Sequence[int], stride: Sequence[int]) -> list[Ix]:
    return [add(mul(c, st), s) for c, s, st in zip(out, start, stride)]


def reverse_index(out: Sequence[Ix], operand_shape: Shape, dims: Sequence[int]) -> list[Ix]:
    return [add(const(n - 1), mul(c, -1)) if i in dims else c for i, (c, n) in enumerate(zip(out, operand_shape))]


def pad_index(out: Sequence[Ix], operand_shape: Shape, low: Sequence[int], high: Sequence[int],
              interior: Sequence[int]) -> tuple[list[Ix], Ix]:
    """(operand coordinates, clamped into bounds; the predicate "this output element is an
    operand element", else it is the padding value). A non-empty operand is assumed."""
    coords, preds = [], []
    for c, lo, hi, it, n in zip(out, low, high, interior, operand_shape):
        if lo == hi == it == 0:  # not padded: no test, no clamp
            coords.append(c)
            continue
        if lo == 0 and it == 0:  # padded at the high end only
            preds.append(compare("<", c, n))
            coords.append(minimum(c, n - 1))
            continue
        t = add(c, -lo)
        q = div(t, it + 1)
        preds += [compare(">=", t, 0), compare("<", q, n)]
        if it:
            preds.append(compare("==", mod(t, it + 1), 0))
        coords.append(clamp(q, 0, n - 1))
    return coords, all_of(preds)


def concatenate_pieces(out: Sequence[Ix], dimension: int,
                       operand_shapes: Sequence[Shape]) -> list[tuple[int, list[Ix], Ix]]:
    """For each non-empty operand: (its position, its coordinates clamped into bounds, the
    predicate "the output element lies before this operand's end"). The element comes
    from the first piece whose predicate holds."""
    pieces, off = [], 0
    for k, shape in enumerate(operand_shapes):
        n = shape[dimension]
        if n > 0:
            coords = list(out)
            coords[dimension] = clamp(add(out[dimension], -off), 0, n - 1)
            pieces.append((k, coords, compare("<", out[dimension], off + n)))
        off += n
    return pieces


def iota_value(out: Sequence[Ix], dimension: int) -> Ix:
    return out[dimension]


#: single-operand movement ops: (node, output coordinates) -> operand coordinates
OperandIndex = Callable[[Any, Sequence[Ix]], list[Ix]]
MOVEMENT: dict[Op, OperandIndex] = {
    Op.BROADCAST_IN_DIM: lambda n, c: broadcast_index(c, n.operands[0].shape, n.attr["broadcast_dimensions"]),
    Op.RESHAPE: lambda n, c: reshape_index(c, n.shape, n.operands[0].shape),
    Op.TRANSPOSE: lambda n, c: transpose_index(c, n.attr["permutation"]),
    Op.SLICE: lambda n, c: slice_index(c, n.attr["start"], n.attr["stride"]),
    Op.REVERSE: lambda n, c: reverse_index(c, n.operands[0].shape, n.attr["dimensions"]),
}


# ------------------------------------------------------------------ indexing-op maps
# gather, dynamic-slice, scatter and dynamic-update-slice (semantics: axle.ir.indexing).
# Their operand positions depend on index *values* loaded at run time: an emitter loads
# each start index (at the coordinates ``*_start_coords`` give), converts it to a 64-bit
# index, names it (a variable), and passes those names in as ``starts``. Clamping is done
# here, so every position a gather or dynamic slice returns is in bounds.


def _clamped_start(start: IxLike, dim: int, size: int) -> Ix:
    """A start index clamped so that a window of ``size`` fits in ``dim`` (StableHLO)."""
    return const(0) if dim == size else clamp(start, 0, dim - size)


def _index_vector(batch: Sequence[Ix], ivd: int, rank: int, k: int) -> list[Ix]:
    """Coordinates of entry ``k`` of the index vector at ``batch`` in an indices array of
    ``rank`` dims whose index vectors lie along ``ivd`` (``ivd == rank``: scalar indices)."""
    coords = list(batch)
    if ivd < rank:
        coords.insert(ivd, const(k))
    return coords


def gather_batch(out: Sequence[Ix], n: Any) -> list[Ix]:
    """The output coordinates of a gather that pick its index vector (the non-offset dims)."""
    offset = set(n.attr["offset_dims"])
    return [c for d, c in enumerate(out) if d not in offset]


def gather_start_coords(out: Sequence[Ix], n: Any) -> list[list[Ix]]:
    """For each entry ``k`` of ``start_index_map``: where in the indices operand the start
    index of output element ``out`` is."""
    batch, rank = gather_batch(out, n), len(n.operands[1].shape)
    return [_index_vector(batch, n.attr["index_vector_dim"], rank, k) for k in range(len(n.attr["start_index_map"]))]


def gather_index(out: Sequence[Ix], n: Any, starts: Sequence[IxLike]) -> list[Ix]:
    """The operand coordinates of gather output element ``out``, given its loaded start
    indices (one per ``start_index_map`` entry): the clamped start plus the window offset."""
    operand_shape, sizes = n.operands[0].shape, n.attr["slice_sizes"]
    collapsed = set(n.attr["collapsed_slice_dims"])
    offsets = iter(out[d] for d in n.attr["offset_dims"])
    coords: list[Ix] = [const(0) if d in collapsed else next(offsets) for d in range(len(operand_shape))]
    for k, d in enumerate(n.attr["start_index_map"]):
        coords[d] = add(coords[d], _clamped_start(starts[k], operand_shape[d], sizes[d]))
    return coords


def dynamic_slice_index(out: Sequence[Ix], operand_shape: Shape, sizes: Sequence[int],
                        starts: Sequence[IxLike]) -> list[Ix]:
    """dynamic-slice (and dynamic-update-slice's window, ``sizes`` the update's shape):
    the operand coordinates of window element ``out`` at the clamped ``starts``."""
    return [add(c, _clamped_start(s, dim, size)) for c, s, dim, size in zip(out, starts, operand_shape, sizes)]


#: the elementwise op a scatter update combines with the value at its position (None: the
#: update replaces it), applied in the operand's dtype as the reference does
SCATTER_COMBINER: dict[str, Op | None] = {"replace": None, "add": Op.ADD, "mul": Op.MUL, "min": Op.MIN, "max": Op.MAX}


def scatter_window(n: Any) -> Shape:
    """A scatter's update window in operand order (inserted dims of extent 1)."""
    updates_shape, window = n.operands[2].shape, [1] * len(n.operands[0].shape)
    kept = [d for d in range(len(window)) if d not in n.attr["inserted_window_dims"]]
    for wd, od in zip(n.attr["update_window_dims"], kept):
        window[od] = updates_shape[wd]
    return tuple(window)


def scatter_batch_shape(n: Any) -> Shape:
    """The shape the updates are applied over, one window each, in row-major order."""
    wd = set(n.attr["update_window_dims"])
    return tuple(s for d, s in enumerate(n.operands[2].shape) if d not in wd)


def scatter_start_coords(batch: Sequence[Ix], n: Any) -> list[list[Ix]]:
    """For each ``scatter_dims_to_operand_dims`` entry: where the start index of update
    ``batch`` is in the indices operand."""
    rank = len(n.operands[1].shape)
    return [_index_vector(batch, n.attr["index_vector_dim"], rank, k)
            for k in range(len(n.attr["scatter_dims_to_operand_dims"]))]


def scatter_update_coords(batch: Sequence[Ix], window: Sequence[Ix], n: Any) -> list[Ix]:
    """The coordinates in the updates operand of window element ``window`` (operand
    order, inserted dims included) of update ``batch``."""
    wd, inserted = n.attr["update_window_dims"], set(n.attr["inserted_window_dims"])
    wins = iter(c for d, c in enumerate(window) if d not in inserted)
    bs = iter(batch)
    return [next(wins) if d in wd else next(bs) for d in range(len(n.operands[2].shape))]


def scatter_index(window: Sequence[Ix], n: Any, starts: Sequence[IxLike]) -> tuple[list[Ix], Ix]:
    """(operand coordinates of window element ``window`` of the update whose loaded start
    indices are ``starts``; the predicate "the whole window is in bounds": an update whose
    window is not is dropped, so nothing is stored when it is false)."""
    shape, win = n.operands[0].shape, scatter_window(n)
    coords, preds = list(window), []
    for k, d in enumerate(n.attr["scatter_dims_to_operand_dims"]):
        s = ix(starts[k])
        coords[d] = add(coords[d], s)
        preds += [compare(">=", s, 0), compare("<", s, shape[d] - win[d] + 1)]
    return coords, all_of(preds)


def scatter_window_parallel(n: Any) -> bool:
    """Whether a scatter's window positions may run in parallel, each applying every
    update in order: two updates meet at a position only through the same window position
    when every indexed operand dim has a window of extent 1 (the usual ``x.at[i].add``);
    otherwise overlapping windows of different updates meet at different window positions
    and the whole scatter must run in update order on one thread."""
    win = scatter_window(n)
    return all(win[d] == 1 for d in n.attr["scatter_dims_to_operand_dims"])


@dataclass(frozen=True)
class UpdateLoops:
    """How an update kernel (scatter, dynamic-update-slice) walks its work: over the
    ``batch`` of updates in row-major (index) order and each update's ``window``; window
    positions may run in parallel when ``parallel`` (every update then in order at each)."""

    window: Shape
    batch: Shape
    parallel: bool
    combiner: Op | None  # how an update meets the value at its position (None: replaces it)


def update_loops(n: Any) -> UpdateLoops:
    if n.op is Op.SCATTER:
        return UpdateLoops(scatter_window(n), scatter_batch_shape(n), scatter_window_parallel(n),
                           SCATTER_COMBINER[n.attr["kind"]])
    return UpdateLoops(n.operands[1].shape, (), True, None)


def update_starts(n: Any, batch: Sequence[Ix]) -> list[tuple[int, list[Ix]]]:
    """(operand position, coordinates) of each start index of update ``batch``."""
    if n.op is Op.SCATTER:
        return [(1, c) for c in scatter_start_coords(batch, n)]
    return [(k, []) for k in range(2, len(n.operands))]


def update_target(n: Any, batch: Sequence[Ix], window: Sequence[Ix],
                  starts: Sequence[IxLike]) -> tuple[list[Ix], Ix, int, list[Ix]]:
    """(operand coordinates written; the predicate "written at all" (a scatter drops an
    out-of-bounds window); the operand position of the value written and its coordinates)
    for window element ``window`` of update ``batch`` with loaded ``starts``."""
    if n.op is Op.SCATTER:
        pos, inside = scatter_index(window, n, starts)
        return pos, inside, 2, scatter_update_coords(batch, window, n)
    return dynamic_slice_index(window, n.operands[0].shape, n.operands[1].shape, starts), const(1), 1, list(window)


# windowed


def reduce_window_index(out: Sequence[Ix], window: Sequence[Ix], operand_shape: Shape,
                        attrs: Mapping[str, Any]) -> tuple[list[Ix], Ix]:
    """(operand coordinates, clamped into bounds; the predicate "a real operand element")
    that window position ``window`` of output element ``out`` of a reduce_window reads:
    the operand dilated by ``base_dilations`` and padded as the reference does, so a hole
    or padding cell (predicate false) contributes the reduction's identity."""
    return pad_index(_window_padded(out, window, attrs), operand_shape, attrs["padding_low"],
                     attrs["padding_high"], [d - 1 for d in attrs["base_dilations"]])


def reduce_window_source(out: Sequence[Ix], window: Sequence[Ix], attrs: Mapping[str, Any]) -> list[Ix]:
    """The operand coordinates reduce_window_index gives, unclamped: right only where its
    predicate holds (for a load under that predicate, whose addresses stay contiguous)."""
    return [div(add(c, -lo), d) for c, lo, d in zip(_window_padded(out, window, attrs), attrs["padding_low"],
                                                       attrs["base_dilations"])]


def _window_padded(out: Sequence[Ix], window: Sequence[Ix], attrs: Mapping[str, Any]) -> list[Ix]:
    """Window position ``window`` of output element ``out`` in the padded, dilated operand."""
    return [add(mul(o, s), mul(w, d)) for o, w, s, d in zip(out, window, attrs["window_strides"],
                                                           attrs["window_dilations"])]
