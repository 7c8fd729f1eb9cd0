"""axle.lowering.index: each movement op's index map, evaluated in Python at every output
index, gathers exactly what the op's NumPy reference computes (size-0 and size-1 dims
included); the expression constructors fold constants and print as C."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.module import Node
from axle.ir.ops import OPS, Op
from axle.ir.types import TensorType
from axle.lowering import index as I


def node(op: Op, shapes: list[tuple[int, ...]], **attrs: object) -> Node:
    b = Builder("t")
    params = [b.parameter(TensorType(DType.INT32, s)) for s in shapes]
    if op is Op.PAD:
        params.append(b.constant(np.int32(-1)))
    return b.op(op, *params, **attrs)


def gathered(n: Node, xs: list[np.ndarray]) -> np.ndarray:
    """The op's result computed element by element through the index maps."""
    out = np.empty(n.shape, np.int64)
    names = [f"c{k}" for k in range(len(n.shape))]
    coords = [I.var(v) for v in names]
    for at in itertools.product(*map(range, n.shape)):
        env = dict(zip(names, at))
        out[at] = element(n, xs, coords, env)
    return out


def element(n: Node, xs: list[np.ndarray], coords: list[I.Ix], env: dict[str, int]) -> int:
    if n.op in I.MOVEMENT:
        src = [I.evaluate(e, env) for e in I.MOVEMENT[n.op](n, coords)]
        return int(xs[0][tuple(src)])
    if n.op is Op.IOTA:
        return I.evaluate(I.iota_value(coords, n.attr["dimension"]), env)
    if n.op is Op.PAD:
        x = xs[0]
        if x.size == 0:
            return -1
        src, inside = I.pad_index(coords, x.shape, n.attr["low"], n.attr["high"], n.attr["interior"])
        at = tuple(I.evaluate(e, env) for e in src)
        assert all(0 <= a < d for a, d in zip(at, x.shape)), "a pad index out of bounds even where unused"
        return int(x[at]) if I.evaluate(inside, env) else -1
    assert n.op is Op.CONCATENATE
    for k, src, before_end in I.concatenate_pieces(coords, n.attr["dimension"], [x.shape for x in xs]):
        at = tuple(I.evaluate(e, env) for e in src)
        assert all(0 <= a < d for a, d in zip(at, xs[k].shape))
        if I.evaluate(before_end, env):
            return int(xs[k][at])
    raise AssertionError("no concatenate piece holds the element")


CASES = [
    (Op.BROADCAST_IN_DIM, [(3,)], {"shape": (2, 3), "broadcast_dimensions": (1,)}),
    (Op.BROADCAST_IN_DIM, [(1,)], {"shape": (4,), "broadcast_dimensions": (0,)}),
    (Op.BROADCAST_IN_DIM, [(2, 1)], {"shape": (2, 5, 3), "broadcast_dimensions": (0, 2)}),
    (Op.BROADCAST_IN_DIM, [()], {"shape": (2, 2), "broadcast_dimensions": ()}),
    (Op.BROADCAST_IN_DIM, [(3,)], {"shape": (3, 0), "broadcast_dimensions": (0,)}),
    (Op.RESHAPE, [(2, 3)], {"shape": (3, 2)}),
    (Op.RESHAPE, [(2, 1, 3)], {"shape": (2, 3)}),
    (Op.RESHAPE, [(6,)], {"shape": (1, 6, 1)}),
    (Op.RESHAPE, [(4, 6)], {"shape": (2, 3, 4)}),
    (Op.RESHAPE, [(1,)], {"shape": ()}),
    (Op.RESHAPE, [(0, 3)], {"shape": (3, 0)}),
    (Op.TRANSPOSE, [(2, 3, 4)], {"permutation": (2, 0, 1)}),
    (Op.TRANSPOSE, [(1, 3)], {"permutation": (1, 0)}),
    (Op.SLICE, [(10,)], {"start": (1,), "limit": (9,), "stride": (3,)}),
    (Op.SLICE, [(4, 5)], {"start": (1, 0), "limit": (3, 5), "stride": (1, 2)}),
    (Op.SLICE, [(5,)], {"start": (2,), "limit": (2,), "stride": (1,)}),
    (Op.REVERSE, [(3, 4)], {"dimensions": (1,)}),
    (Op.REVERSE, [(1, 5)], {"dimensions": (0, 1)}),
    (Op.PAD, [(3,)], {"low": (2,), "high": (1,), "interior": (2,)}),
    (Op.PAD, [(2, 3)], {"low": (0, 1), "high": (1, 0), "interior": (0, 1)}),
    (Op.PAD, [(2, 3)], {"low": (0, 0), "high": (2, 0), "interior": (0, 0)}),
    (Op.PAD, [(1,)], {"low": (0,), "high": (0,), "interior": (3,)}),
    (Op.PAD, [(0,)], {"low": (1,), "high": (2,), "interior": (1,)}),
    (Op.CONCATENATE, [(2, 3), (0, 3), (1, 3)], {"dimension": 0}),
    (Op.CONCATENATE, [(2, 1), (2, 2)], {"dimension": 1}),
    (Op.CONCATENATE, [(4,)], {"dimension": 0}),
    (Op.IOTA, [], {"shape": (3, 4), "dtype": DType.INT32, "dimension": 1}),
]


@pytest.mark.parametrize("op,shapes,attrs", CASES, ids=[f"{c[0].value}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_index_map_matches_the_reference(op: Op, shapes: list, attrs: dict) -> None:
    n = node(op, shapes, **attrs)
    rng = np.random.default_rng(0)
    xs = [rng.integers(0, 100, s).astype(np.int32) for s in shapes]
    ref_args = [*xs, np.int32(-1)] if op is Op.PAD else xs
    want = OPS[op].reference(*ref_args, **attrs)
    np.testing.assert_array_equal(gathered(n, xs), want)


@pytest.mark.parametrize("shape", [(), (1,), (5,), (2, 3), (4, 1, 3), (1, 1), (2, 3, 5)])
def test_flat_offsets_round_trip(shape: tuple[int, ...]) -> None:
    f = I.var("f")
    coords = I.delinearize(f, shape)
    back = I.linearize(coords, shape)
    for flat in range(int(np.prod(shape))):
        assert tuple(I.evaluate(c, {"f": flat}) for c in coords) == np.unravel_index(flat, shape)
        assert I.evaluate(back, {"f": flat}) == flat


def test_constructors_fold_and_print_as_c() -> None:
    i = I.var("i")
    assert (i * 1 + 0) == i and (i * 0).const == 0 and (I.const(7) // 2).const == 3
    assert I.to_c(i * 4 + 3) == "((i * 4) + 3)" and I.to_c(i - 2) == "(i - 2)"
    assert I.to_c(I.clamp(i, 0, 5)) == "((i > 0 ? i : 0) < 5 ? (i > 0 ? i : 0) : 5)"
    # C's truncating division and remainder, as the rendered code computes them
    assert I.evaluate(I.Ix("/", (I.const(-7), I.const(2))), {}) == -3
    assert I.evaluate(I.Ix("%", (I.const(-7), I.const(2))), {}) == -1
    assert I.all_of([I.compare("<", 1, 2), I.compare(">=", i, 0)]) == I.compare(">=", i, 0)
    assert I.all_of([I.compare("<", 2, 1), I.compare(">=", i, 0)]).const == 0
    # the leading non-unit dim needs no modulo, the others do
    assert [I.to_c(c) for c in I.delinearize(i, (1, 3, 4))] == ["0", "(i / 4)", "(i % 4)"]


# ------------------------------------------------------------------ indexing-op maps
# The maps evaluated in Python with the start indices "loaded" from the index arrays:
# every element equals the op's NumPy reference (clamping, dropped scatter windows and
# the order of duplicate updates included).


GATHERS = [
    # rows of a table (the embedding lookup), ids out of range on both sides
    ([(7, 5), (6,)], np.array([0, 6, -1, 9, 3, 3]),
     dict(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 5))),
    # 2-D windows at 2-D starts along index_vector_dim 0, map reversed, offsets first
    ([(6, 7, 3), (2, 4)], np.array([[0, 5, 2, 9], [0, 6, -3, 1]]),
     dict(offset_dims=(0, 1, 2), collapsed_slice_dims=(), start_index_map=(1, 0), index_vector_dim=0,
          slice_sizes=(2, 3, 3))),
]


@pytest.mark.parametrize("shapes, idx, attrs", GATHERS)
def test_gather_map_matches_the_reference(shapes: list, idx: np.ndarray, attrs: dict) -> None:
    n = node(Op.GATHER, shapes, **attrs)
    x = np.arange(np.prod(shapes[0])).reshape(shapes[0])
    idx = idx.reshape(shapes[1])
    want = OPS[Op.GATHER].reference(x, idx, **attrs)
    names = [f"c{k}" for k in range(len(n.shape))]
    got = np.empty(n.shape, np.int64)
    for at in itertools.product(*map(range, n.shape)):
        env = dict(zip(names, at))
        coords = [I.var(v) for v in names]
        starts = [int(idx[tuple(I.evaluate(e, env) for e in c)]) for c in I.gather_start_coords(coords, n)]
        got[at] = x[tuple(I.evaluate(e, env) for e in I.gather_index(coords, n, starts))]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("starts", [(2, 0), (7, -3), (-5, 2), (100, 100)])
def test_dynamic_slice_map_clamps(starts: tuple[int, int]) -> None:
    x = np.arange(54).reshape(9, 6)
    want = OPS[Op.DYNAMIC_SLICE].reference(x, *map(np.int32, starts), slice_sizes=(4, 6))
    got = np.empty((4, 6), np.int64)
    for at in itertools.product(range(4), range(6)):
        got[at] = x[tuple(I.evaluate(e, {}) for e in I.dynamic_slice_index(list(at), x.shape, (4, 6), starts))]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["replace", "add"])
@pytest.mark.parametrize("shapes, idx, window_dims, inserted", [
    ([(6, 5), (7,), (7, 5)], [1, 4, 1, -1, 6, 1, 0], (1,), (0,)),  # rows, duplicates, out of range
    ([(8, 2), (5,), (5, 3, 2)], [0, 1, 2, 6, 5], (1, 2), ()),  # overlapping 3-row windows, one past the end
])
def test_scatter_maps_match_the_reference_in_update_order(shapes: list, idx: list, window_dims: tuple,
                                                            inserted: tuple, kind: str) -> None:
    attrs = dict(update_window_dims=window_dims, inserted_window_dims=inserted, scatter_dims_to_operand_dims=(0,),
                 index_vector_dim=1, kind=kind)
    n = node(Op.SCATTER, shapes, **attrs)
    x = np.arange(np.prod(shapes[0])).reshape(shapes[0])
    ids = np.array(idx)
    upd = 1000 + np.arange(np.prod(shapes[2])).reshape(shapes[2])
    want = OPS[Op.SCATTER].reference(x, ids, upd, **attrs)
    u = I.update_loops(n)
    assert u.parallel == (window_dims == (1,))  # overlapping windows run in order on one thread
    got = x.copy()
    for b in itertools.product(*map(range, u.batch)):
        bix = [I.const(v) for v in b]
        starts = [int(ids[tuple(I.evaluate(e, {}) for e in c)]) for _, c in I.update_starts(n, bix)]
        for w in itertools.product(*map(range, u.window)):
            pos, inside, src, coords = I.update_target(n, bix, [I.const(v) for v in w], starts)
            if I.evaluate(inside, {}):
                at = tuple(I.evaluate(e, {}) for e in pos)
                new = upd[tuple(I.evaluate(e, {}) for e in coords)]
                got[at] = new if u.combiner is None else got[at] + new
    np.testing.assert_array_equal(got, want)
