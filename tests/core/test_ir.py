"""IR: builder checks, printer/parser round trip on every op, verifier, DOT."""
from __future__ import annotations

import numpy as np
import pytest

from axle.errors import OpAttributeError, DTypeError, ParseError, ShapeError, VerifierError
from axle.ir import Builder, DType, Module, Op, parse_module, verify
from axle.ir.ops import OPS, AttrKind
from axle.ir.module import Computation, Node
from axle.ir.types import TensorType
from axle.testing.cases import core_cases, fused_cases


def seed_module() -> Module:
    b = Builder("seed")
    x, y, z = (b.parameter("f32[1024]", name=n) for n in "xyz")
    return b.build(b.reduce(b.add(x, b.mul(y, z)), kind="sum", axes=(0,)))


def test_seed_text_is_hlo_like():
    text = seed_module().as_text()
    assert "%multiply = f32[1024] multiply(%y, %z)" in text
    assert "ROOT %reduce = f32[] reduce(%add), axes={0}, kind=sum" in text


def test_printed_node_types_are_the_types_text():
    """An array type's text (a table of dtype names, not the enum property: a first call
    prints its traced module for the compile cache's key) is the dtype's IR name and its
    shape, for every dtype and rank, and a node and a tuple print it."""
    from axle.ir.printer import print_node
    for dt in DType:
        for shape, dims in [((), ""), ((0,), "0"), ((3, 1, 2), "3,1,2")]:
            t = TensorType(dt, shape)
            assert str(t) == repr(t) == f"{dt.value}[{dims}]"
            p = Builder("types").parameter(t)
            assert print_node(p, {p.uid: "v"}, {}) == f"%v = {dt.value}[{dims}] parameter(0)"
    b = Builder("tuple")
    pa, pb = b.parameter("f32[2]"), b.parameter("s32[]")
    root = b.build(pa, pb).entry.root
    assert root.op is Op.TUPLE
    line = print_node(root, {root.uid: "t", pa.uid: "a", pb.uid: "b"}, {}, root=True)
    assert line == f"ROOT %t = {root.type} tuple(%a, %b)" == "ROOT %t = (f32[2], s32[]) tuple(%a, %b)"


@pytest.mark.parametrize("case", list(core_cases()) + fused_cases(), ids=lambda c: c.id)
def test_round_trip_every_case(case):
    text = case.module.as_text()
    again = parse_module(text)
    assert again.as_text() == text
    assert again.entry == case.module.entry  # structural equality


def test_round_trip_constants_with_special_values():
    b = Builder("c")
    vals = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4e38, 0.1], np.float32)
    c = b.constant(vals)
    m = b.build(b.add(c, c))
    again = parse_module(m.as_text())
    got = again.entry.root.operands[0].attr["value"].array
    np.testing.assert_array_equal(got, vals)
    assert np.signbit(got[3])


@pytest.mark.parametrize("dt, bits", [
    (np.float32, [0x7FC00123, 0xFFC00000, 0x7FC00000, 0x7F800001]),
    (np.float64, [0x7FF8000000000001, 0xFFF8000000000000]),
    (np.float16, [0x7E01, 0xFE00]),
    ("bfloat16", [0x7FC1, 0xFFC0]),
], ids=["f32", "f64", "f16", "bf16"])
def test_round_trip_keeps_every_bit_of_a_nan(dt, bits):
    """A NaN's sign and payload survive printing and parsing (they printed as plain `nan`)."""
    import ml_dtypes
    dt = np.dtype(ml_dtypes.bfloat16 if dt == "bfloat16" else dt)
    raw = np.array(bits, dtype=f"u{dt.itemsize}")
    b = Builder("c")
    m = b.build(b.constant(raw.view(dt)))
    text = m.as_text()
    assert "nan(0x" in text
    got = parse_module(text).entry.root.attr["value"].array
    np.testing.assert_array_equal(np.asarray(got).view(raw.dtype), raw)
    assert parse_module(text).as_text() == text


@pytest.mark.parametrize("literal, why", [("nan(0x1ffffffff)", "more than the 32 bits"),
                                          ("nan(0x3f800000)", "not a NaN of f32")])
def test_nan_bits_are_checked(literal, why):
    with pytest.raises(ParseError, match=why):
        parse_module(f"module @m\nentry %m () -> f32[] {{ ROOT %c = f32[] constant({literal}) }}")


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16", "s8", "u16", "s32", "u64", "pred"])
def test_large_constants_round_trip_as_bytes(dt):
    """A constant of more than BYTES_MIN elements is written as its little-endian bytes in
    base64 (an element at a time, a 512x512 closure took seconds to print and parse): every
    bit survives, NaN payloads and -0.0 included, and small constants still print elements."""
    import ml_dtypes

    from axle.ir.printer import BYTES_MIN

    npdt = np.dtype(ml_dtypes.bfloat16 if dt == "bf16" else DType(dt).np)
    raw = np.random.default_rng(0).integers(0, 256, (BYTES_MIN + 3) * npdt.itemsize, np.uint8)
    vals = (raw % 2).astype(np.bool_) if dt == "pred" else raw.view(npdt)
    vals = vals.reshape(BYTES_MIN + 3, 1)
    b = Builder("c")
    m = b.build(b.constant(vals), b.constant(vals[:4, 0]))
    text = m.as_text()
    assert 'constant(bytes "' in text and text.count("bytes") == 1
    again = parse_module(text)
    for got, want in zip((n.attr["value"].array for n in again.entry.root.operands), (vals, vals[:4, 0])):
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    assert again.as_text() == text


@pytest.mark.parametrize("payload, why", [('"AAAA"', "holds 4100 bytes, found 3"),
                                          ('"A!=="', "bad base64"), ("1.5", "expected the quoted base64"),
                                          (None, "elements are 0 or 1, found 2")])
def test_bytes_constants_are_checked(payload, why):
    import base64

    if payload is None:  # a pred constant with a byte that is neither 0 nor 1
        payload = '"' + base64.b64encode(bytes([2]) + bytes(1024)).decode() + '"'
        typ = "pred[1025]"
    else:
        typ = "s32[1025]"
    with pytest.raises(ParseError, match=why):
        parse_module(f"module @m\nentry %m () -> {typ} {{ ROOT %c = {typ} constant(bytes {payload}) }}")


def test_round_trip_fusion_and_tuple():
    inner = Builder("fused")
    a, c = inner.parameter("f32[4]"), inner.parameter("f32[4]")
    comp = inner.computation(inner.exp(inner.add(a, c)))
    b = Builder("outer")
    x, y = b.parameter("f32[4]"), b.parameter("f32[4]")
    f = b.fusion(x, y, kind="loop", computation=comp)
    m = b.build(f, b.neg(f))
    text = m.as_text()
    assert "fusion(%p0, %p1), computation=%fused, kind=loop" in text
    again = parse_module(text)
    assert again.as_text() == text


def test_builder_errors_name_op_shapes_and_line():
    b = Builder("bad")
    x, y = b.parameter("f32[3]"), b.parameter("f32[4]")
    with pytest.raises(ShapeError, match=r"add: operands must have the same shape.*f32\[3\], f32\[4\]"):
        b.add(x, y)
    i = b.parameter("s32[3]")
    with pytest.raises(DTypeError, match=r"add: operands must have the same dtype.*f32\[3\], s32\[3\]"):
        b.add(x, i)
    with pytest.raises(DTypeError, match=r"exponential: operand dtype s32 is not supported"):
        b.exp(i)
    with pytest.raises(OpAttributeError, match=r"reduce: attribute kind='mean'"):
        b.reduce(x, kind="mean", axes=(0,))
    with pytest.raises(OpAttributeError, match=r"missing attribute 'axes'"):
        b.reduce(x, kind="sum")
    with pytest.raises(ShapeError, match=r"dot: lhs dim 1 \(size 3\) does not match rhs dim 0 \(size 4\)"):
        b.dot_general(b.parameter("f32[2,3]"), b.parameter("f32[4,5]"), lhs_contracting=(1,), rhs_contracting=(0,))
    with pytest.raises(ShapeError, match=r"cannot reshape 3 elements"):
        b.reshape(x, shape=(2, 2))
    with pytest.raises(ShapeError, match=r"slice .* out of bounds"):
        b.slice(x, start=(0,), limit=(5,), stride=(1,))
    with pytest.raises(ShapeError, match=r"negative padding"):
        b.pad(x, b.parameter("f32[]"), low=(-1,), high=(0,), interior=(0,))
    b.loc = "model.py:12 (f)"
    with pytest.raises(ShapeError) as ei:
        b.add(x, y)
    assert "model.py:12" in str(ei.value)


def _malformed(node: Node, params) -> Module:
    return Module("m", Computation("m", tuple(params), node))


def test_verifier_rejects_wrong_recorded_type():
    b = Builder("v")
    x = b.parameter("f32[3]")
    good = b.neg(x)
    bad = good.replace(type=TensorType(DType.FLOAT32, (4,)))
    with pytest.raises(VerifierError, match=r"%negate.*recorded type f32\[4\] but the op's rules give f32\[3\]"):
        verify(_malformed(bad, [x]))


def test_verifier_rejects_bad_operands_attrs_and_params():
    b = Builder("v")
    x = b.parameter("f32[3]")
    y = b.parameter("s32[3]")
    mixed = Node(Op.ADD, (x, y), (), TensorType(DType.FLOAT32, (3,)))
    with pytest.raises(VerifierError, match=r"add.*f32\[3\], s32\[3\].*same dtype"):
        verify(_malformed(mixed, [x, y]))
    arity = Node(Op.NEG, (x, x), (), x.type)
    with pytest.raises(VerifierError, match=r"negate: takes 1 operand"):
        verify(_malformed(arity, [x]))
    attrs = Node(Op.REDUCE, (x,), (("axes", (0,)), ("kind", "avg")), TensorType(DType.FLOAT32, ()))
    with pytest.raises(VerifierError, match=r"kind='avg'"):
        verify(_malformed(attrs, [x]))
    stray = Builder("other").parameter("f32[3]")
    foreign = Node(Op.NEG, (stray,), (), x.type)
    with pytest.raises(VerifierError, match=r"parameters|does not belong"):
        verify(_malformed(foreign, [x]))


def test_parser_errors_are_clear():
    with pytest.raises(ParseError, match="unknown op 'frobnicate'"):
        parse_module("module @m\nentry %m (x: f32[1]) -> f32[1] {\n  %x = f32[1] parameter(0)\n"
                     "  ROOT %y = f32[1] frobnicate(%x)\n}\n")
    with pytest.raises(ParseError, match=r"declared f32\[2\] but negate gives f32\[1\]"):
        parse_module("module @m\nentry %m (x: f32[1]) -> f32[2] {\n  %x = f32[1] parameter(0)\n"
                     "  ROOT %y = f32[2] negate(%x)\n}\n")
    with pytest.raises(ParseError, match="used before it is defined"):
        parse_module("module @m\nentry %m () -> f32[1] {\n  ROOT %y = f32[1] negate(%x)\n}\n")


def test_dot_export():
    dot = seed_module().as_dot()
    assert dot.startswith('digraph "seed"')
    for op in ("multiply", "add", "reduce"):
        assert op in dot
    assert dot.count("->") == 5  # y,z -> mul; x,mul -> add; add -> reduce


def test_structural_key_and_equality():
    a, b = seed_module(), seed_module()
    assert a.entry == b.entry and hash(a.entry) == hash(b.entry)
    bb = Builder("s")
    x = bb.parameter("f32[2]")
    n1, n2 = bb.exp(x), bb.exp(x)
    assert n1 is not n2 and n1.key == n2.key


def test_reduce_axes_are_one_sorted_set():
    """reduce's axes are a set of dims (issue 12: opencl read garbage for axes=(1, 0)). The
    IR keeps one spelling, sorted ascending: the builder and lax sort what they are given,
    text and hand-made nodes with another order are refused, naming the canonical one."""
    b = Builder("r")
    x = b.parameter("f32[2,3,4]")
    r = b.reduce(x, kind="sum", axes=[2, np.int64(0)])
    assert r.attr["axes"] == (0, 2) and r.shape == (3,)
    assert "reduce(%p0), axes={0,2}, kind=sum" in b.build(r).as_text()
    with pytest.raises(ShapeError, match=r"reduce: axes \(2, 2\) must be distinct"):
        b.reduce(x, kind="sum", axes=(2, 2))
    with pytest.raises(OpAttributeError, match=r"reduce: attribute axes=\(0, 'a'\)"):
        b.reduce(x, kind="sum", axes=(0, "a"))
    unsorted = Node(Op.REDUCE, (x,), (("axes", (2, 0)), ("kind", "sum")), TensorType(DType.FLOAT32, (3,)))
    with pytest.raises(VerifierError, match=r"reduce: axes \(2, 0\) must be sorted ascending .*write \{0,2\}"):
        verify(_malformed(unsorted, [x]))
    text = ("module @m\nentry %m (x: f32[2,3]) -> f32[] {\n  %x = f32[2,3] parameter(0)\n"
            "  ROOT %s = f32[] reduce(%x), axes={1,0}, kind=max\n}\n")
    with pytest.raises(ParseError, match=r"line 4, column 19: reduce: axes \(1, 0\) must be sorted ascending"):
        parse_module(text)
    assert parse_module(text.replace("{1,0}", "{0,1}")).entry.root.attr["axes"] == (0, 1)


#: every integer-valued attribute of the op table: (op, attribute name, kind)
INT_ATTRS = [(d.op, a.name, a.kind) for d in OPS.values() for a in d.attrs
             if a.kind in (AttrKind.INT, AttrKind.INTS, AttrKind.SHAPE)]
#: values that are not integers, with the type the error names
NOT_INTEGRAL = [(1.7, "float"), (1.0, "float"), (True, "bool"), (np.bool_(False), "bool"), ("1", "str"),
                (np.float32(2.0), "float32")]


@pytest.mark.parametrize("bad,kind", NOT_INTEGRAL, ids=[repr(v) for v, _ in NOT_INTEGRAL])
@pytest.mark.parametrize("op,name,attr_kind", INT_ATTRS, ids=[f"{o.value}.{n}" for o, n, _ in INT_ATTRS])
def test_integer_attributes_refuse_non_integral_values(op: Op, name: str, attr_kind: AttrKind, bad: object,
                                                       kind: str) -> None:
    """Issue 12: the op table turned each entry with int(v), so axes=(1.7,) reduced axis 1
    and shape=("3",) was a shape of 3. Every integer attribute now refuses a float, a bool
    or a string, naming the op, the attribute and the entry."""
    spec = next(a for a in OPS[op].attrs if a.name == name)
    value = bad if attr_kind is AttrKind.INT else (0, bad)
    with pytest.raises(OpAttributeError, match=rf"^{op.value}: attribute {name}=.* \(.* is a {kind}, not an integer\)"):
        spec.coerce(op, value)
    good = np.int64(1) if attr_kind is AttrKind.INT else (np.int32(0), np.int64(1), 2)
    assert spec.coerce(op, good) == (1 if attr_kind is AttrKind.INT else (0, 1, 2))


def test_float_axes_are_refused_not_truncated():
    """axle.lax.reduce(x, "sum", (1.7,)) summed axis 1; the Builder path took it too."""
    import axle

    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises(OpAttributeError, match=r"reduce: attribute axes=\(1\.7,\) .*1\.7 is a float"):
        axle.lax.reduce(x, "sum", (1.7,))
    with pytest.raises(OpAttributeError, match=r"reduce: attribute axes=\(True,\) .*True is a bool"):
        axle.lax.reduce(x, "sum", (True,))
    assert np.array_equal(np.asarray(axle.lax.reduce(x, "sum", np.array([1]))), x.sum(axis=1))
    b = Builder("f")
    p = b.parameter("f32[2,3]")
    with pytest.raises(OpAttributeError, match=r"slice: attribute start=\(0, 0\.5\)"):
        b.slice(p, start=(0, 0.5), limit=(2, 3), stride=(1, 1))
    with pytest.raises(OpAttributeError, match=r"reshape: attribute shape=\(6\.0,\)"):
        b.reshape(p, shape=(6.0,))
    with pytest.raises(OpAttributeError, match=r"get-tuple-element: attribute index=1\.0"):
        b.get_tuple_element(b.tuple(p, p), index=1.0)
    assert b.reduce(p, kind="sum", axes=(np.int64(1),)).shape == (2,)


@pytest.mark.parametrize("bad", ["1.7", "1.0", "true", '"1"', "1e0"])
def test_parser_refuses_non_integral_attribute_entries(bad: str):
    text = ("module @m\nentry %m (x: f32[2,3]) -> f32[2] {\n  %x = f32[2,3] parameter(0)\n"
            "  ROOT %s = f32[2] reduce(%x), axes={AX}, kind=sum\n}\n")
    with pytest.raises(ParseError, match=r"line 4, column \d+: expected an integer \(an element of axes\)"):
        parse_module(text.replace("AX", bad))
