"""Parses the text form written by :mod:`axle.ir.printer`."""
from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from ..errors import AxleError, ParseError
from .builder import make_node
from .dtypes import DType
from .literal import Literal
from .module import Computation, Module, Node
from .ops import BY_NAME, OPS, AttrKind, Op
from .types import TensorType, TupleType, Type

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+|//[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<name>[%@][A-Za-z0-9_.\-]+)
  | (?P<num>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan))
  | (?P<word>[A-Za-z_][A-Za-z0-9_\-]*)
  | (?P<arrow>->)
  | (?P<punct>[(){}\[\],=:])
""", re.VERBOSE)

_DTYPES = {d.value: d for d in DType}


class _Tokens:
    def __init__(self, text: str) -> None:
        self.toks: list[tuple[str, str, int]] = []
        pos = 0
        line = 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise ParseError(f"line {line}: unexpected character {text[pos]!r}")
            kind = m.lastgroup or ""
            if kind != "ws":
                self.toks.append((kind, m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.i = 0

    def peek(self, k: int = 0) -> tuple[str, str, int]:
        return self.toks[self.i + k] if self.i + k < len(self.toks) else ("eof", "", -1)

    def next(self) -> tuple[str, str, int]:
        t = self.peek()
        self.i += 1
        return t

    def expect(self, value: str) -> None:
        kind, v, line = self.next()
        if v != value:
            raise ParseError(f"line {line}: expected {value!r}, found {v!r}")

    def accept(self, value: str) -> bool:
        if self.peek()[1] == value:
            self.i += 1
            return True
        return False


def _parse_type(t: _Tokens) -> Type:
    if t.accept("("):
        elems = []
        while not t.accept(")"):
            elems.append(_parse_type(t))
            t.accept(",")
        return TupleType(tuple(elems))  # type: ignore[arg-type]
    kind, v, line = t.next()
    if v not in _DTYPES:
        raise ParseError(f"line {line}: unknown element type {v!r}")
    t.expect("[")
    dims = []
    while not t.accept("]"):
        dims.append(int(t.next()[1]))
        t.accept(",")
    return TensorType(_DTYPES[v], tuple(dims))


def parse_type(text: str) -> TensorType:
    t = _parse_type(_Tokens(text))
    if not isinstance(t, TensorType):
        raise ParseError(f"{text!r} is not an array type")
    return t


def _parse_nested(t: _Tokens) -> Any:
    if t.accept("{"):
        items = []
        while not t.accept("}"):
            items.append(_parse_nested(t))
            t.accept(",")
        return items
    kind, v, line = t.next()
    if v in ("true", "false"):
        return v == "true"
    try:
        return float(v) if any(c in v for c in ".eEn") or v.endswith("inf") else int(v)
    except ValueError:
        raise ParseError(f"line {line}: bad literal element {v!r}") from None


def _literal(value: Any, tt: TensorType) -> Literal:
    if tt.size == 0:
        return Literal(np.zeros(tt.shape, tt.dtype.np))
    arr = np.array(value, dtype=np.float64 if tt.dtype.is_float else None)
    if tt.dtype.is_int:
        arr = np.array(value, dtype=np.int64)
    return Literal(arr.astype(tt.dtype.np).reshape(tt.shape))


def _parse_attr(t: _Tokens, kind: AttrKind, comps: dict[str, Computation]) -> Any:
    if kind is AttrKind.INTS:
        t.expect("{")
        vals = []
        while not t.accept("}"):
            vals.append(int(t.next()[1]))
            t.accept(",")
        return tuple(vals)
    if kind is AttrKind.SHAPE:
        t.expect("[")
        vals = []
        while not t.accept("]"):
            vals.append(int(t.next()[1]))
            t.accept(",")
        return tuple(vals)
    kind_, v, line = t.next()
    if kind is AttrKind.INT:
        return int(v)
    if kind is AttrKind.DTYPE:
        if v not in _DTYPES:
            raise ParseError(f"line {line}: unknown dtype {v!r}")
        return _DTYPES[v]
    if kind is AttrKind.STR:
        return json.loads(v)
    if kind is AttrKind.COMPUTATION:
        if v[1:] not in comps:
            raise ParseError(f"line {line}: unknown computation {v}")
        return comps[v[1:]]
    return v


def _parse_computation(t: _Tokens, comps: dict[str, Computation]) -> tuple[Computation, bool]:
    entry = t.accept("entry")
    kind, name, line = t.next()
    if kind != "name" or not name.startswith("%"):
        raise ParseError(f"line {line}: expected a computation name, found {name!r}")
    t.expect("(")
    while not t.accept(")"):  # the signature repeats the parameter instructions
        t.next()
    t.expect("->")
    _parse_type(t)
    t.expect("{")
    values: dict[str, Node] = {}
    params: dict[int, Node] = {}
    root: Node | None = None
    last: Node | None = None
    while not t.accept("}"):
        is_root = t.accept("ROOT")
        kind, vname, line = t.next()
        if kind != "name":
            raise ParseError(f"line {line}: expected an instruction name, found {vname!r}")
        t.expect("=")
        typ = _parse_type(t)
        _, opname, oline = t.next()
        if opname not in BY_NAME:
            raise ParseError(f"line {oline}: unknown op {opname!r}")
        op = BY_NAME[opname]
        t.expect("(")
        operands: list[Node] = []
        attrs: dict[str, Any] = {}
        if op is Op.CONSTANT:
            assert isinstance(typ, TensorType)
            attrs["value"] = _literal(_parse_nested(t), typ)
            t.expect(")")
        elif op is Op.PARAMETER:
            attrs["index"] = int(t.next()[1])
            t.expect(")")
        else:
            while not t.accept(")"):
                _, ref, rline = t.next()
                if ref[1:] not in values:
                    raise ParseError(f"line {rline}: {ref} is used before it is defined")
                operands.append(values[ref[1:]])
                t.accept(",")
        while t.accept(","):
            _, aname, aline = t.next()
            t.expect("=")
            try:
                spec = OPS[op].attr_spec(aname)
            except KeyError:
                raise ParseError(f"line {aline}: {op.value} has no attribute {aname!r}") from None
            attrs[aname] = _parse_attr(t, spec.kind, comps)
        try:
            node = make_node(op, operands, attrs, name=vname[1:], type=typ if op is Op.PARAMETER else None)
        except AxleError as e:
            raise ParseError(f"line {oline}: {e.message}") from None
        if node.type != typ:
            raise ParseError(f"line {oline}: %{vname[1:]} is declared {typ} but {op.value} gives {node.type}")
        if op is Op.PARAMETER:
            params[node.attr["index"]] = node
        values[vname[1:]] = node
        last = node
        if is_root:
            root = node
    root = root or last
    if root is None:
        raise ParseError(f"computation {name} is empty")
    if sorted(params) != list(range(len(params))):
        raise ParseError(f"computation {name}: parameter indices {sorted(params)} are not 0..n-1")
    comp = Computation(name[1:], tuple(params[i] for i in range(len(params))), root)
    comps[name[1:]] = comp
    return comp, entry


def parse_module(text: str) -> Module:
    """Parses IR text into a verified module."""
    from .verifier import verify

    t = _Tokens(text)
    t.expect("module")
    kind, mname, line = t.next()
    if not mname.startswith("@"):
        raise ParseError(f"line {line}: expected @name after 'module'")
    comps: dict[str, Computation] = {}
    entry: Computation | None = None
    last: Computation | None = None
    while t.peek()[0] != "eof":
        comp, is_entry = _parse_computation(t, comps)
        last = comp
        if is_entry:
            entry = comp
    entry = entry or last
    if entry is None:
        raise ParseError("module has no computation")
    module = Module(mname[1:], entry)
    verify(module)
    return module
