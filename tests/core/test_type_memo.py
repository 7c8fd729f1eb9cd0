"""make_node's memo of result types and canonical attributes: a node whose types and
attributes were seen before skips the op's rules, and the memo never changes an answer:
bad input still raises on every call, a bool is not taken for the int it equals, an
unhashable attribute value goes the long way, and the memo stays bounded."""
from __future__ import annotations

import pytest

from axle.errors import AxleError
from axle.ir import ops as ops_mod
from axle.ir.builder import make_node
from axle.ir.dtypes import DType
from axle.ir.module import Node
from axle.ir.ops import Op, canonical_attrs, infer_type
from axle.ir.types import TensorType

F32_2x3 = TensorType(DType.FLOAT32, (2, 3))


def _param(t: TensorType, i: int = 0) -> Node:
    return make_node(Op.PARAMETER, (), {"index": i}, type=t)


def test_repeated_node_skips_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    ops_mod._TYPE_MEMO.clear()
    calls: list[Op] = []
    rules = ops_mod._infer_type

    def counting(op, ts, attrs):  # noqa: ANN001, ANN202
        calls.append(op)
        return rules(op, ts, attrs)

    monkeypatch.setattr(ops_mod, "_infer_type", counting)
    x = _param(F32_2x3)
    a = make_node(Op.TRANSPOSE, [x], {"permutation": (1, 0)})
    b = make_node(Op.TRANSPOSE, [x], {"permutation": (1, 0)})
    assert a.type == b.type == TensorType(DType.FLOAT32, (3, 2))
    assert calls == [Op.TRANSPOSE]  # the second node's type came from the memo


def test_bad_input_raises_every_time() -> None:
    x = _param(F32_2x3)
    y = _param(TensorType(DType.FLOAT32, (4,)), 1)
    for _ in range(2):
        with pytest.raises(AxleError):
            make_node(Op.ADD, [x, y])
        with pytest.raises(AxleError):
            make_node(Op.TRANSPOSE, [x], {"permutation": (0, 0)})


def test_memoized_types_equal_the_rules_answers() -> None:
    x = _param(F32_2x3)
    for dims, shape in (((0, 1), (2, 3, 4)), ((1, 2), (4, 2, 3))):
        attrs = {"broadcast_dimensions": dims, "shape": shape}
        memo = infer_type(Op.BROADCAST_IN_DIM, [x.type], dict(canonical_attrs(Op.BROADCAST_IN_DIM, attrs)))
        canon = dict(ops_mod._canonical_attrs(Op.BROADCAST_IN_DIM, attrs))
        direct = ops_mod._infer_type(Op.BROADCAST_IN_DIM, [x.type], canon)
        assert memo == direct


def _outcome(fn, op: Op, attrs: dict) -> object:  # noqa: ANN001
    try:
        return fn(op, attrs)
    except AxleError as e:
        return type(e), e.message


def test_bool_is_not_taken_for_the_int_it_equals() -> None:
    # True == 1 and hash(True) == hash(1): a memo keyed on values alone would answer for one
    # with the other's canonical form (or let through what the schema refuses)
    ops_mod._ATTRS_MEMO.clear()
    assert canonical_attrs(Op.GET_TUPLE_ELEMENT, {"index": 1}) == (("index", 1),)
    for v in (True, 1.0):
        assert (_outcome(canonical_attrs, Op.GET_TUPLE_ELEMENT, {"index": v})
                == _outcome(ops_mod._canonical_attrs, Op.GET_TUPLE_ELEMENT, {"index": v}))


def test_unhashable_attribute_value_goes_the_long_way() -> None:
    x = _param(F32_2x3)
    n = make_node(Op.TRANSPOSE, [x], {"permutation": [1, 0]})  # a list: coerced, not memoized as given
    assert n.type == TensorType(DType.FLOAT32, (3, 2)) and n.attrs == (("permutation", (1, 0)),)
    assert not any(isinstance(v, list) for k in ops_mod._ATTRS_MEMO for _, v in k[1])


def test_memos_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops_mod, "_TYPE_MEMO_MAX", 4)
    ops_mod._TYPE_MEMO.clear()
    ops_mod._ATTRS_MEMO.clear()
    for n in range(1, 12):
        x = _param(TensorType(DType.FLOAT32, (n,)))
        assert make_node(Op.NEG, [x]).type == x.type
        make_node(Op.BROADCAST_IN_DIM, [x], {"broadcast_dimensions": (0,), "shape": (n,)})
    assert len(ops_mod._TYPE_MEMO) <= 4 and len(ops_mod._ATTRS_MEMO) <= 4


def test_op_and_dtype_hash_by_identity() -> None:
    # members are singletons: an identity hash (cheap) agrees with their identity equality
    assert hash(Op.ADD) == object.__hash__(Op.ADD)
    assert hash(DType.FLOAT32) == object.__hash__(DType.FLOAT32)
    assert {Op.ADD: 1}[Op("add")] == 1 and {DType.FLOAT32: 2}[DType("f32")] == 2
