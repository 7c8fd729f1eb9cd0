"""Parses the text form written by :mod:`axle.ir.printer`.

Every malformed input raises :class:`axle.errors.ParseError` with the line and column
and an excerpt of the line with a caret under the offending token; a module that parses
has also passed the verifier. The grammar has no unbounded recursion: tuple types hold
arrays only and constant literals are read iteratively, their nesting bounded by the
declared rank."""
from __future__ import annotations

import base64
import binascii
import bisect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..errors import AxleError, ParseError
from .dtypes import DType
from .literal import Literal
from .module import Computation, Module, Node, make_node
from .ops import BY_NAME, OPS, AttrKind, AttrSpec, Op
from .types import TensorType, TupleType, Type
from .verifier import check_made_node, verify, verify_computation

#: white space and comments (each to the end of its line: a failed match never backtracks
#: into one and finds a token there; a run of white space splits one way only)
_WS = r"[ \t\r\n]*(?://[^\n]*(?![^\n])[ \t\r\n]*)*"
#: one token with the white space before it (one match per token: half the matches)
_TOKEN = re.compile(_WS + r"""(?:
    (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<name>[%@][A-Za-z0-9_.\-]+)
  | (?P<num>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?
                   |(?:inf|nan(?:\(0x[0-9a-fA-F]+\))?)(?![A-Za-z0-9_\-])))
  | (?P<type>(?:""" + "|".join(sorted((d.value for d in DType), key=len, reverse=True)) + r""")
              \[(?:\d{1,18}(?:,\d{1,18})*)?\])
  | (?P<word>[A-Za-z_][A-Za-z0-9_\-]*)
  | (?P<arrow>->)
  | (?P<punct>[(){}\[\],=:])
  | (?P<bad>[^ \t\r\n])
)""", re.VERBOSE)
_SPACE = re.compile(_WS)
#: array types by their text (a ``type`` token): each distinct one is made and checked once
_TYPES: dict[str, TensorType] = {}
_TYPES_MAX = 4096
_INT = re.compile(r"[-+]?\d+")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_EXCERPT = 72  # characters of the offending line shown in an error

_DTYPES = {d.value: d for d in DType}


class _Tok:
    """One token: its kind (a group of _TOKEN, or "eof"), text and offset in the source.
    Its line and column are worked out only when asked for (an error message), from the
    offsets of the source's line starts: counting newlines for every token was a third of
    parsing a module."""

    __slots__ = ("kind", "text", "pos", "_starts")

    def __init__(self, kind: str, text: str, pos: int, starts: list[int]) -> None:
        self.kind = kind
        self.text = text
        self.pos = pos
        self._starts = starts

    @property
    def line(self) -> int:
        return bisect.bisect_right(self._starts, self.pos)

    @property
    def col(self) -> int:
        return self.pos - self._starts[self.line - 1] + 1

    def describe(self) -> str:
        return "end of input" if self.kind == "eof" else repr(self.text)


class _Tokens:
    def __init__(self, text: str) -> None:
        #: the constants written by reference (parse_module's ``refs``)
        self.refs: Callable[[str, TensorType], Literal] | None = None
        self.lines = text.split("\n")
        starts = [0]
        for line in self.lines[:-1]:
            starts.append(starts[-1] + len(line) + 1)
        self.toks: list[_Tok] = []
        append = self.toks.append
        m = None
        # every character but trailing white space is in a match: one that no token starts
        # with is a "bad" token
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup or ""
            if kind == "bad":
                pos = m.start(kind)
                raise self.error(_Tok("char", text[pos], pos, starts), f"unexpected character {text[pos]!r}")
            append(_Tok(kind, m.group(kind), m.start(kind), starts))
        pos = _SPACE.match(text, m.end() if m else 0).end()  # type: ignore[union-attr]  # _WS matches ""
        assert pos == len(text), "a character matched no token"
        self.eof = _Tok("eof", "", len(text), starts)
        #: the tokens then the end of input, which ``next`` never moves past
        self.toks.append(self.eof)
        self.last = len(self.toks) - 1
        self.i = 0

    # -- errors -------------------------------------------------------------------
    def error(self, tok: _Tok, message: str) -> ParseError:
        """A ParseError at ``tok``: the position, the message and the line with a caret."""
        src = self.lines[tok.line - 1] if 0 < tok.line <= len(self.lines) else ""
        start = max(0, tok.col - 1 - _EXCERPT // 2)
        excerpt = src[start:start + _EXCERPT]
        prefix = "..." if start else ""
        caret = " " * (len(prefix) + tok.col - 1 - start) + "^"
        return ParseError(f"line {tok.line}, column {tok.col}: {message}\n  {prefix}{excerpt}\n  {caret}",
                          line=tok.line, column=tok.col)

    # -- reading ------------------------------------------------------------------
    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        i = self.i
        if i < self.last:
            self.i = i + 1
        return self.toks[i]

    def expect(self, value: str, what: str = "") -> _Tok:
        tok = self.next()
        if tok.text != value or tok.kind in ("str", "eof"):
            raise self.error(tok, f"expected {value!r}{what}, found {tok.describe()}")
        return tok

    def accept(self, value: str) -> bool:
        tok = self.toks[self.i]
        if tok.text == value and tok.kind not in ("str", "eof"):
            self.i += 1
            return True
        return False

    def int(self, what: str) -> int:
        tok = self.next()
        if tok.kind != "num" or not _INT.fullmatch(tok.text):
            raise self.error(tok, f"expected an integer ({what}), found {tok.describe()}")
        v = int(tok.text)
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise self.error(tok, f"{what} {tok.text} does not fit in 64 bits")
        return v

    def name(self, sigil: str, what: str) -> _Tok:
        tok = self.next()
        if tok.kind != "name" or tok.text[0] != sigil:
            raise self.error(tok, f"expected {what} ({sigil}name), found {tok.describe()}")
        return tok


T = TypeVar("T")


def _seq(t: _Tokens, close: str, item: Callable[[], T]) -> list[T]:
    """Items separated by ',' up to ``close`` (the opening bracket already read)."""
    out: list[T] = []
    if t.accept(close):
        return out
    while True:
        out.append(item())
        tok = t.next()
        if tok.text == close and tok.kind == "punct":
            return out
        if tok.text != "," or tok.kind != "punct":
            raise t.error(tok, f"expected ',' or {close!r}, found {tok.describe()}")


# ----------------------------------------------------------------------------- types


def _parse_tensor_type(t: _Tokens) -> TensorType:
    tok = t.next()
    if tok.kind == "type":  # a known dtype and dims of at most 18 digits, written without spaces
        typ = _TYPES.get(tok.text)
        if typ is None:
            name, dims = tok.text[:-1].split("[")
            try:
                typ = TensorType(_DTYPES[name], tuple(int(d) for d in dims.split(",")) if dims else ())
            except AxleError as e:
                raise t.error(tok, e.message) from None
            if len(_TYPES) >= _TYPES_MAX:
                _TYPES.clear()
            _TYPES[tok.text] = typ
        return typ
    if tok.kind != "word" or tok.text not in _DTYPES:
        what = f"unknown element type {tok.text!r}" if tok.kind == "word" else f"found {tok.describe()}"
        raise t.error(tok, f"{what}; expected an element type ({', '.join(_DTYPES)})")
    t.expect("[", " after the element type")
    dims = _seq(t, "]", lambda: t.int("a dimension"))
    try:
        return TensorType(_DTYPES[tok.text], tuple(dims))
    except AxleError as e:
        raise t.error(tok, e.message) from None


def _parse_type(t: _Tokens) -> Type:
    if t.accept("("):  # tuples hold arrays only: no nesting, no recursion
        return TupleType(tuple(_seq(t, ")", lambda: _parse_tensor_type(t))))
    return _parse_tensor_type(t)


def parse_type(text: str) -> TensorType:
    """'f32[2,3]' -> TensorType."""
    t = _Tokens(text)
    start = t.peek()
    typ = _parse_type(t)
    if not isinstance(typ, TensorType):
        raise t.error(start, f"{text!r} is not an array type")
    if t.peek().kind != "eof":
        raise t.error(t.peek(), f"unexpected {t.peek().describe()} after the type")
    return typ


# -------------------------------------------------------------------------- literals


def _scalar(t: _Tokens, dt: DType) -> object:
    """One element of a constant, checked against its dtype: never a silent change of value."""
    tok = t.next()
    if dt.is_bool:
        if tok.kind != "word" or tok.text not in ("true", "false"):
            raise t.error(tok, f"expected true or false (a pred element), found {tok.describe()}")
        return tok.text == "true"
    if tok.kind != "num":
        raise t.error(tok, f"expected a number (an {dt.value} element), found {tok.describe()}")
    if dt.is_int:
        info = np.iinfo(dt.np)
        if not _INT.fullmatch(tok.text):
            raise t.error(tok, f"{tok.text} is not an integer ({dt.value} element)")
        v = int(tok.text)
        if not info.min <= v <= info.max:
            raise t.error(tok, f"{tok.text} is out of range for {dt.value} [{info.min}, {info.max}]")
        return v
    if tok.text.startswith("nan("):
        return _nan_with_bits(t, tok, dt)
    f = float(tok.text)
    with np.errstate(over="ignore"):
        rounded = dt.np.type(f)
    if math.isfinite(f) != bool(np.isfinite(rounded)) or (math.isinf(f) and "inf" not in tok.text):
        raise t.error(tok, f"{tok.text} is out of range for {dt.value}")
    return f


def _nan_with_bits(t: _Tokens, tok: Any, dt: DType) -> object:
    """``nan(0x...)``: a NaN given by its bits (sign and payload), as the printer writes a
    NaN other than the dtype's canonical one."""
    bits = int(tok.text[len("nan(0x"):-1], 16)
    width = dt.itemsize * 8
    if bits >> width:
        raise t.error(tok, f"{tok.text} has more than the {width} bits of a {dt.value} element")
    v = np.array(bits, dtype=f"u{dt.itemsize}").view(dt.np)[()]
    if not np.isnan(v):
        raise t.error(tok, f"{tok.text} is not a NaN of {dt.value} (these bits are {float(v)!r})")
    return v


def _parse_literal(t: _Tokens, tt: TensorType) -> Literal:
    """A constant's elements, nested as its type's shape. Read with an explicit stack of
    counts, one per open brace, so nesting depth is bounded by the rank, not by Python's
    recursion limit."""
    shape, dt = tt.shape, tt.dtype
    if t.peek().kind == "word" and t.peek().text == "bytes":
        return _bytes_literal(t, tt)
    if t.peek().kind == "word" and t.peek().text == "ref":
        return _ref_literal(t, tt)
    if not shape:
        return Literal(np.array(_scalar(t, dt), dtype=dt.np))
    if tt.size == 0:
        t.expect("{", f" (the empty constant of type {tt} is written {{}})")
        t.expect("}", f" (the empty constant of type {tt} is written {{}})")
        return Literal(np.zeros(shape, dt.np))
    values: list[object] = []
    t.expect("{", f" (a constant of type {tt} starts with '{{')")
    counts = [0]  # elements read so far at each open level
    while counts:
        level = len(counts) - 1
        tok = t.peek()
        if counts[-1] == shape[level]:
            if not t.accept("}"):
                raise t.error(tok, f"constant of type {tt}: dimension {level} has {shape[level]} elements, "
                                   f"found {tok.describe()} after them")
            counts.pop()
            if counts:
                counts[-1] += 1
            continue
        if counts[-1] and not t.accept(","):
            raise t.error(tok, f"constant of type {tt}: dimension {level} has {shape[level]} elements, found "
                               f"{counts[-1]} then {tok.describe()}")
        if level == len(shape) - 1:
            values.append(_scalar(t, dt))
            counts[-1] += 1
        else:
            t.expect("{", f" (constant of type {tt}: dimension {level + 1} opens with '{{')")
            counts.append(0)
    return Literal(np.array(values, dtype=dt.np).reshape(shape))


def _ref_literal(t: _Tokens, tt: TensorType) -> Literal:
    """``ref "<name>"``: a constant held outside the text (a compile-cache entry's large
    constant, by digest), looked up by the ``refs`` given to ``parse_module``."""
    t.next()
    tok = t.next()
    if tok.kind != "str":
        raise t.error(tok, f"expected the quoted name of a {tt} constant, found {tok.describe()}")
    if t.refs is None:
        raise t.error(tok, f"a {tt} constant by reference ({tok.text}): no store of constants was given to read it")
    name = json.loads(tok.text)
    try:
        lit = t.refs(name, tt)
    except ValueError as e:
        raise t.error(tok, f"the {tt} constant {tok.text}: {e}") from None
    if lit.type != tt:
        raise t.error(tok, f"the constant {tok.text} is a {lit.type}, not a {tt}")
    return lit


def _bytes_literal(t: _Tokens, tt: TensorType) -> Literal:
    """``bytes "<base64>"``: a constant's elements as little-endian bytes (how the printer
    writes large constants), checked for length and, for pred, 0/1 elements."""
    t.next()
    tok = t.next()
    if tok.kind != "str":
        raise t.error(tok, f"expected the quoted base64 bytes of a {tt} constant, found {tok.describe()}")
    try:
        data = base64.b64decode(json.loads(tok.text), validate=True)
    except (ValueError, binascii.Error) as e:
        raise t.error(tok, f"bad base64 bytes of a {tt} constant: {e}") from None
    item = tt.dtype.itemsize
    if len(data) != tt.size * item:
        raise t.error(tok, f"a {tt} constant holds {tt.size * item} bytes, found {len(data)}")
    unsigned = np.frombuffer(data, np.dtype(f"<u{item}")).astype(f"=u{item}")
    if tt.dtype.is_bool and unsigned.size and unsigned.max() > 1:
        raise t.error(tok, f"a {tt} constant's elements are 0 or 1, found {int(unsigned.max())}")
    return Literal(unsigned.view(tt.dtype.np).reshape(tt.shape))


# ------------------------------------------------------------------------ attributes


def _computation_ref(t: _Tokens, comps: dict[str, Computation]) -> Computation:
    tok = t.name("%", "a computation")
    if tok.text[1:] not in comps:
        raise t.error(tok, f"unknown computation {tok.text} (computations are defined before their use)")
    return comps[tok.text[1:]]


def _parse_attr(t: _Tokens, op: Op, spec: AttrSpec, comps: dict[str, Computation]) -> Any:
    """One attribute value, coerced by its schema (errors point at the value)."""
    start = t.peek()
    kind = spec.kind
    if kind is AttrKind.INTS:
        t.expect("{", f" ({spec.name} is a list of ints, like {{0,1}})")
        value: Any = tuple(_seq(t, "}", lambda: t.int(f"an element of {spec.name}")))
    elif kind is AttrKind.SHAPE:
        t.expect("[", f" ({spec.name} is a shape, like [2,3])")
        value = tuple(_seq(t, "]", lambda: t.int(f"a dimension of {spec.name}")))
    elif kind is AttrKind.INT:
        value = t.int(spec.name)
    elif kind is AttrKind.COMPUTATION:
        value = _computation_ref(t, comps)
    elif kind is AttrKind.COMPUTATIONS:
        t.expect("{", f" ({spec.name} is a list of computations, like {{%a, %b}})")
        value = tuple(_seq(t, "}", lambda: _computation_ref(t, comps)))
    elif kind is AttrKind.STR:
        tok = t.next()
        if tok.kind != "str":
            raise t.error(tok, f"expected a quoted string for {spec.name}, found {tok.describe()}")
        try:
            value = json.loads(tok.text)
        except ValueError as e:
            raise t.error(tok, f"bad string literal: {e}") from None
    elif kind in (AttrKind.DTYPE, AttrKind.ENUM):
        tok = t.next()
        if tok.kind != "word":
            raise t.error(tok, f"expected a word for {spec.name}, found {tok.describe()}")
        value = tok.text
    else:  # literals are written inside constant(...)
        raise t.error(start, f"{op.value}: attribute {spec.name} cannot be written as name=value")
    try:
        return spec.coerce(op, value)
    except AxleError as e:
        raise t.error(start, e.message) from None


# ---------------------------------------------------------------------- computations


@dataclass
class _Body:
    """What one computation's instructions define, for the checks made at its end."""

    values: dict[str, tuple[Node, _Tok]]
    params: dict[int, tuple[Node, _Tok]]
    root: tuple[Node, _Tok] | None = None
    last: tuple[Node, _Tok] | None = None


def _parse_signature(t: _Tokens) -> list[tuple[Type, _Tok]]:
    """``(x: f32[2], y: s32[])``: the parameters' names (not checked: the body names them)
    and types (checked against the body's parameter instructions)."""
    t.expect("(", " after the computation name")

    def item() -> tuple[Type, _Tok]:
        first = t.peek()
        while t.peek().kind in ("word", "num", "name") and t.peek().text != ":":
            t.next()
        if t.peek() is first:
            raise t.error(first, f"expected a parameter name, found {first.describe()}")
        t.expect(":", " after the parameter name")
        tok = t.peek()
        return _parse_type(t), tok

    return _seq(t, ")", item)


def _parse_instruction(t: _Tokens, body: _Body, comps: dict[str, Computation], cname: str) -> None:
    root_tok = t.peek()
    is_root = t.accept("ROOT")
    name_tok = t.name("%", "an instruction name")
    vname = name_tok.text[1:]
    if vname in body.values:
        raise t.error(name_tok, f"{name_tok.text} is defined twice in %{cname} "
                                f"(first on line {body.values[vname][1].line})")
    t.expect("=", f" after {name_tok.text}")
    type_tok = t.peek()
    typ = _parse_type(t)
    op_tok = t.next()
    if op_tok.kind != "word" or op_tok.text not in BY_NAME:
        raise t.error(op_tok, f"unknown op {op_tok.text!r}" if op_tok.kind == "word"
                      else f"expected an op name, found {op_tok.describe()}")
    op = BY_NAME[op_tok.text]
    t.expect("(", f" after {op.value}")
    operands: list[Node] = []
    attrs: dict[str, Any] = {}
    if op is Op.CONSTANT:
        if not isinstance(typ, TensorType):
            raise t.error(type_tok, f"a constant has an array type, not {typ}")
        attrs["value"] = _parse_literal(t, typ)
        t.expect(")", " after the constant's value")
    elif op is Op.PARAMETER:
        index_tok = t.peek()
        index = t.int("the parameter index")
        if index in body.params:
            raise t.error(index_tok, f"parameter({index}) is defined twice in %{cname} "
                                     f"(first on line {body.params[index][1].line})")
        attrs["index"] = index
        t.expect(")", " after the parameter index")
    else:
        def operand() -> Node:
            ref = t.name("%", "an operand")
            if ref.text[1:] not in body.values:
                raise t.error(ref, f"{ref.text} is used before it is defined")
            return body.values[ref.text[1:]][0]

        operands = _seq(t, ")", operand)
    while t.accept(","):
        attr_tok = t.next()
        if attr_tok.kind != "word":
            raise t.error(attr_tok, f"expected an attribute name, found {attr_tok.describe()}")
        try:
            spec = OPS[op].attr_spec(attr_tok.text)
        except KeyError:
            known = ", ".join(a.name for a in OPS[op].attrs) or "none"
            raise t.error(attr_tok, f"{op.value} has no attribute {attr_tok.text!r} "
                                    f"(its attributes: {known})") from None
        if spec.name in attrs:
            raise t.error(attr_tok, f"attribute {spec.name} is given twice")
        t.expect("=", f" after {spec.name}")
        attrs[spec.name] = _parse_attr(t, op, spec, comps)
    try:
        node = make_node(op, operands, attrs, name=vname, type=typ if op is Op.PARAMETER else None)
    except AxleError as e:
        raise t.error(op_tok, e.message) from None
    if node.type != typ:
        raise t.error(type_tok, f"{name_tok.text} is declared {typ} but {op.value} gives {node.type}")
    try:
        check_made_node(node)  # make_node checked the rest of check_node's rules
    except AxleError as e:
        raise t.error(op_tok, e.message) from None
    if op is Op.PARAMETER:
        body.params[node.attr["index"]] = (node, name_tok)
    body.values[vname] = (node, name_tok)
    body.last = (node, name_tok)
    if is_root:
        if body.root is not None:
            raise t.error(root_tok, f"%{cname} has a second ROOT (the first is on line {body.root[1].line})")
        body.root = (node, name_tok)


def _check_fusions(t: _Tokens, body: _Body) -> None:
    """A fused computation is checked as one (only fusible ops) where a fusion names it."""
    for node, tok in body.values.values():
        if node.op is Op.FUSION:
            try:
                verify_computation(node.attr["computation"], fused=True, nodes_checked=True)
            except AxleError as e:
                raise t.error(tok, e.message) from None


def _parse_computation(t: _Tokens, comps: dict[str, Computation]) -> tuple[Computation, bool]:
    entry = t.accept("entry")
    name_tok = t.name("%", "a computation name")
    cname = name_tok.text[1:]
    if cname in comps:
        raise t.error(name_tok, f"computation {name_tok.text} is defined twice")
    signature = _parse_signature(t)
    t.expect("->", " after the parameter list")
    result_tok = t.peek()
    result_type = _parse_type(t)
    t.expect("{", " to open the computation's body")
    body = _Body({}, {})
    while not t.accept("}"):
        if t.peek().kind == "eof":
            raise t.error(t.peek(), f"computation {name_tok.text} is not closed with '}}'")
        _parse_instruction(t, body, comps, cname)
    root = body.root or body.last
    if root is None:
        raise t.error(name_tok, f"computation {name_tok.text} has no instructions")
    indices = sorted(body.params)
    if indices != list(range(len(indices))):
        raise t.error(name_tok, f"computation {name_tok.text}: parameter indices {indices} are not 0..n-1")
    params = [body.params[i][0] for i in indices]
    declared = [typ for typ, _ in signature]
    if declared != [p.type for p in params]:
        raise t.error(name_tok, f"computation {name_tok.text}: the signature declares parameters "
                                f"({', '.join(map(str, declared))}) but the body defines "
                                f"({', '.join(str(p.type) for p in params)})")
    if result_type != root[0].type:
        raise t.error(result_tok, f"computation {name_tok.text} is declared to return {result_type} but its "
                                  f"root {root[1].text} is {root[0].type}")
    _check_fusions(t, body)
    comp = Computation(cname, tuple(params), root[0])
    comps[cname] = comp
    return comp, entry


def parse_module(text: str, refs: Callable[[str, TensorType], Literal] | None = None) -> Module:
    """Parses IR text into a verified module; any malformed input raises ParseError
    (or VerifierError for a module-wide rule) naming the line and column. ``refs(name,
    type)`` gives the constants the text names by reference (``ref "<name>"``); it raises
    ValueError for one it does not have."""
    t = _Tokens(text)
    t.refs = refs
    t.expect("module", " (IR text starts with 'module @name')")
    mname = t.name("@", "the module name")
    comps: dict[str, Computation] = {}
    entry: tuple[Computation, _Tok] | None = None
    last: tuple[Computation, _Tok] | None = None
    while t.peek().kind != "eof":
        start = t.peek()
        comp, is_entry = _parse_computation(t, comps)
        last = (comp, start)
        if is_entry:
            if entry is not None:
                raise t.error(start, f"a second entry computation (the first is on line {entry[1].line})")
            entry = last
    chosen = entry or last
    if chosen is None:
        raise t.error(t.eof, "the module has no computation")
    module = Module(mname.text[1:], chosen[0])
    try:
        verify(module, nodes_checked=True)  # each node was checked as it was parsed
    except AxleError as e:
        raise t.error(chosen[1], e.message) from None
    return module
