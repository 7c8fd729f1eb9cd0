"""The indexing primitives (gather, scatter, dynamic-slice, dynamic-update-slice) in the
core: their references, the extended-primitive mechanism (a decomposition per op in the
op table, expanded for a device that does not claim the op), printing and parsing."""
from __future__ import annotations

import numpy as np
import pytest

from axle.errors import DTypeError, ShapeError
from axle.interpreter import evaluate
from axle.ir.builder import Builder
from axle.ir.dtypes import DType, is_float_numpy
from axle.ir.ops import BASE_PRIMITIVES, EXTENDED_PRIMITIVES, OPS, Op
from axle.ir.parser import parse_module
from axle.ir.types import TensorType
from axle.passes.expand import expand_extended
from axle.testing.cases import cases_for

INDEXING = (Op.GATHER, Op.SCATTER, Op.DYNAMIC_SLICE, Op.DYNAMIC_UPDATE_SLICE)
ROWS = dict(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), index_vector_dim=1)


def _module(types, build):
    b = Builder("t")
    return b.build(build(b, [b.parameter(TensorType(dt, shape)) for dt, shape in types]))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise-equal up to NaN payloads (signs of zeros count)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not is_float_numpy(a.dtype):  # bfloat16 is a float too (NumPy kind 'V')
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a) | np.isnan(a),
                                                                          np.signbit(b) | np.isnan(b)))


def test_the_indexing_ops_are_extended_with_a_decomposition():
    assert set(INDEXING) <= EXTENDED_PRIMITIVES
    assert not set(INDEXING) & BASE_PRIMITIVES
    for op in INDEXING:
        assert OPS[op].traits.extended and OPS[op].decomposition is not None


@pytest.mark.parametrize("op", INDEXING, ids=lambda o: o.value)
def test_decomposition_matches_the_reference_on_every_kit_case(op):
    """Exact (bitwise) on every kit case: clamped, dropped, negative and duplicate indices,
    size-0 and size-1 dims, scalars, every dtype, every scatter kind (float add/mul cases
    use halves, which sum exactly in any order)."""
    for case in cases_for(op):
        expanded, done = expand_extended(case.module, lambda n: False)
        assert done == {op.value: 1}, case.id
        assert not any(n.traits.extended for n in expanded.entry.nodes), case.id
        assert all(n.op in BASE_PRIMITIVES or n.op in (Op.PARAMETER, Op.CONSTANT) for n in expanded.entry.nodes)
        want = evaluate(case.module, *case.inputs)
        got = evaluate(expanded, *case.inputs)
        assert all(_same(g, w) for g, w in zip(got, want)), f"{case.id}: {got} != {want}"


def test_a_claimed_extended_op_is_left_alone():
    m = _module([(DType.FLOAT32, (4,)), (DType.INT32, ())], lambda b, p: b.dynamic_slice(*p, slice_sizes=(2,)))
    same, done = expand_extended(m, lambda n: True)
    assert same is m and not done


def test_scatter_reference_with_no_index_entries():
    """A scatter whose index vectors have no entries (a whole-operand window) combines its
    one update; the reference once failed to reshape the empty index vectors."""
    m = _module([(DType.FLOAT32, ()), (DType.INT32, (0,)), (DType.FLOAT32, ())],
                lambda b, p: b.scatter(*p, update_window_dims=(), inserted_window_dims=(),
                                       scatter_dims_to_operand_dims=(), index_vector_dim=0, kind="add"))
    (out,) = evaluate(m, np.float32(1.5), np.zeros(0, np.int32), np.float32(2.0))
    assert out == np.float32(3.5)


def test_scatter_replace_last_update_wins_and_out_of_bounds_windows_are_dropped():
    m = _module([(DType.INT32, (4, 2)), (DType.INT64, (4,)), (DType.INT32, (4, 2))],
                lambda b, p: b.scatter(*p, kind="replace", **ROWS))
    ids = np.array([1, 3, 1, 4], np.int64)
    upd = np.arange(8, dtype=np.int32).reshape(4, 2) + 10
    (out,) = evaluate(m, np.zeros((4, 2), np.int32), ids, upd)
    np.testing.assert_array_equal(out, [[0, 0], [14, 15], [0, 0], [12, 13]])


def test_gather_clamps_windows_into_bounds():
    m = _module([(DType.FLOAT32, (5,)), (DType.INT32, (3, 1))],
                lambda b, p: b.gather(*p, offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,),
                                      index_vector_dim=1, slice_sizes=(2,)))
    (out,) = evaluate(m, np.arange(5, dtype=np.float32), np.array([[-7], [4], [2]], np.int32))
    np.testing.assert_array_equal(out, [[0, 1], [3, 4], [2, 3]])


@pytest.mark.parametrize("op", INDEXING, ids=lambda o: o.value)
def test_indexing_ops_print_and_parse_back(op):
    case = cases_for(op)[0]
    text = case.module.as_text()
    again = parse_module(text)
    assert again.as_text() == text
    want = evaluate(case.module, *case.inputs)
    assert all(_same(g, w) for g, w in zip(evaluate(again, *case.inputs), want))


@pytest.mark.parametrize("build, error", [
    (lambda b: b.gather(b.parameter("f32[4,3]"), b.parameter("f32[2,1]"), offset_dims=(1,), collapsed_slice_dims=(0,),
                        start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 3)), DTypeError),
    (lambda b: b.gather(b.parameter("f32[4,3]"), b.parameter("s32[2,1]"), offset_dims=(1,), collapsed_slice_dims=(0,),
                        start_index_map=(0,), index_vector_dim=1, slice_sizes=(2, 3)), ShapeError),
    (lambda b: b.scatter(b.parameter("f32[4,3]"), b.parameter("s32[2]"), b.parameter("f32[3,3]"), kind="add",
                         **ROWS), ShapeError),
    (lambda b: b.scatter(b.parameter("f32[4,3]"), b.parameter("s32[2]"), b.parameter("f64[2,3]"), kind="add",
                         **ROWS), DTypeError),
    (lambda b: b.dynamic_slice(b.parameter("f32[4,3]"), b.parameter("s32[]"), slice_sizes=(2, 2)), ShapeError),
    (lambda b: b.dynamic_slice(b.parameter("f32[4]"), b.parameter("f32[]"), slice_sizes=(2,)), DTypeError),
    (lambda b: b.dynamic_update_slice(b.parameter("f32[4]"), b.parameter("f32[5]"), b.parameter("s32[]")),
     ShapeError),
], ids=["float-indices", "collapsed-size", "batch-mismatch", "update-dtype", "start-count", "float-start",
        "update-too-big"])
def test_bad_indexing_ops_are_refused_naming_the_op(build, error):
    with pytest.raises(error, match="gather|scatter|dynamic"):
        build(Builder("bad"))
