"""The HLO-like text form. ``parse_module(print_module(m))`` rebuilds an equal module.

    module @seed

    entry %main (x: f32[1024], y: f32[1024], z: f32[1024]) -> f32[] {
      %x = f32[1024] parameter(0)
      ...
      %multiply.3 = f32[1024] multiply(%y, %z)
      %add.4 = f32[1024] add(%x, %multiply.3)
      ROOT %reduce.5 = f32[] reduce(%add.4), axes={0}, kind=sum
    }
"""
from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .dtypes import DType, is_float_numpy
from .literal import Literal
from .ops import OPS, AttrKind, Op

if TYPE_CHECKING:  # module.py imports this module for Module.as_text/as_dot
    from .computation import Computation
    from .module import Module, Node

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def format_scalar(v: Any, dt: np.dtype) -> str:
    if dt == np.bool_:
        return "true" if v else "false"
    if is_float_numpy(dt):  # bfloat16's NumPy kind is 'V'
        f = float(v)
        if math.isnan(f):
            return format_nan(v, dt)
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return repr(f)
    return str(int(v))


def nan_bits(v: Any, dt: np.dtype) -> tuple[int, int]:
    """A float element's bit pattern and the pattern of its dtype's canonical NaN."""
    ut = np.dtype(f"u{dt.itemsize}")
    return int(np.asarray(v, dtype=dt).view(ut)), int(np.asarray(np.nan, dtype=dt).view(ut))


def format_nan(v: Any, dt: np.dtype) -> str:
    """``nan`` for the dtype's canonical quiet NaN, else ``nan(0x...)`` with the element's
    bits (sign and payload), so printing and parsing keep every bit of a constant."""
    bits, canonical = nan_bits(v, dt)
    return "nan" if bits == canonical else f"nan(0x{bits:0{2 * dt.itemsize}x})"


#: constants of more elements are written as their bytes, ``bytes "<base64>"`` (little-endian
#: elements): written and read an element at a time, a jitted function closing over a
#: 512x512 array took 3 s before its first call, a model's weights minutes
BYTES_MIN = 1024


def literal_bytes(arr: np.ndarray) -> bytes:
    """A constant's elements as little-endian bytes (the ``bytes`` form's payload)."""
    unsigned = np.dtype(f"u{arr.dtype.itemsize}")
    return np.ascontiguousarray(arr).view(unsigned).astype(unsigned.newbyteorder("<"), copy=False).tobytes()


#: a printer's choice of constants written by reference: ``ref(literal)`` is the name the
#: text gives it (``ref "<name>"``), or None to write its elements (compile-cache entries
#: name large constants by digest: axle.constant_store)
Refs = Callable[[Literal], "str | None"]


#: with ``refs`` (a compile-cache entry's text, read by the parser only) constants of more
#: elements than this are written as bytes: a ResNet's batch-norm vectors, 20k scalars,
#: were 0.15 s of every first call's key printed an element at a time
MACHINE_BYTES_MIN = 16


def format_literal(lit: Literal, refs: Refs | None = None) -> str:
    arr = lit.array
    if refs is not None:
        name = refs(lit)
        if name is not None:
            return f'ref "{name}"'
    if arr.size > (BYTES_MIN if refs is None else MACHINE_BYTES_MIN):
        return f'bytes "{base64.b64encode(literal_bytes(arr)).decode("ascii")}"'

    def rec(a: np.ndarray) -> str:
        if a.ndim == 0:
            return format_scalar(a[()], arr.dtype)
        return "{" + ", ".join(rec(x) for x in a) + "}"

    if arr.ndim > 0 and arr.size == 0:
        return "{}"
    return rec(arr)


def format_attr(kind: AttrKind, value: Any, names: dict[int, str]) -> str:
    if kind in (AttrKind.INTS,):
        return "{" + ",".join(map(str, value)) + "}"
    if kind is AttrKind.SHAPE:
        return "[" + ",".join(map(str, value)) + "]"
    if kind is AttrKind.DTYPE:
        return value.value
    if kind is AttrKind.STR:
        return json.dumps(value)
    if kind is AttrKind.COMPUTATION:
        return "%" + names[id(value)]
    if kind is AttrKind.COMPUTATIONS:
        return "{" + ", ".join("%" + names[id(c)] for c in value) + "}"
    return str(value)


def safe_name(name: str) -> str:
    """A name the parser accepts: letters, digits, '_', '.', '-' (others become '_')."""
    if _IDENT.match(name):  # nearly every name: already one (the substitution would keep it)
        return name
    out = _UNSAFE.sub("_", name) or "v"
    return out if _IDENT.match(out) else "v" + out


class _Namer:
    def __init__(self) -> None:
        self.used: set[str] = set()
        self.counter = 0

    def fresh(self, hint: str) -> str:
        base = safe_name(hint)
        name = base
        while name in self.used:
            self.counter += 1
            name = f"{base}.{self.counter}"
        self.used.add(name)
        return name


def _node_names(comp: Computation) -> dict[int, str]:
    namer = _Namer()
    names: dict[int, str] = {}
    for p in comp.parameters:
        names[p.uid] = namer.fresh(p.name or f"p{p.attr['index']}")
    for n in comp.nodes:
        if n.uid not in names:
            names[n.uid] = namer.fresh(n.name or n.op.value)
    return names


#: (op, attribute) -> (its kind, whether it is written when None): attr_spec is a linear
#: search, and the printer asks it for every attribute of every node (the text of a traced
#: module is its compile-cache key, made in every first call)
_ATTR_PRINT: dict[tuple[Op, str], tuple[AttrKind, bool]] = {}


def _attr_print(op: Op, name: str) -> tuple[AttrKind, bool]:
    hit = _ATTR_PRINT.get((op, name))
    if hit is None:
        spec = OPS[op].attr_spec(name)
        hit = _ATTR_PRINT[(op, name)] = (spec.kind, spec.default is not None)
    return hit


#: each op's name in the text form (``Op.value``: an enum property, read per node)
_OP_NAMES: dict[Op, str] = {op: op.value for op in Op}


def print_node(n: Node, names: dict[int, str], comp_names: dict[int, str], root: bool = False,
               refs: Refs | None = None) -> str:
    lhs = ("ROOT %" if root else "%") + names[n.uid] + " = " + str(n.type)
    op = n.op
    if op is Op.PARAMETER:
        return f"{lhs} parameter({n.attr['index']})"
    if op is Op.CONSTANT:
        return f"{lhs} constant({format_literal(n.attr['value'], refs)})"
    args = ", ".join(["%" + names[o.uid] for o in n.operands])
    text = f"{lhs} {_OP_NAMES[op]}({args})"
    if not n.attrs:
        return text
    # an optional attribute whose default is None is written only when it is set
    parts = []
    for k, v in n.attrs:
        kind, written_when_none = _attr_print(op, k)
        if v is not None or written_when_none:
            parts.append(f"{k}={format_attr(kind, v, comp_names)}")
    return text + ", " + ", ".join(parts) if parts else text


def print_computation(comp: Computation, comp_names: dict[int, str], entry: bool = False,
                      refs: Refs | None = None) -> str:
    names = _node_names(comp)
    sig = ", ".join(f"{names[p.uid]}: {p.type}" for p in comp.parameters)
    head = ("entry " if entry else "") + f"%{comp_names[id(comp)]} ({sig}) -> {comp.root.type} {{"
    lines = [head]
    root = comp.root
    for n in comp.nodes:
        lines.append("  " + print_node(n, names, comp_names, n is root, refs))
    lines.append("}")
    return "\n".join(lines)


def computation_names(module: Module, comps: list[Computation] | None = None) -> dict[int, str]:
    """Each computation's printed name (``comps``: ``module.computations()``, when known)."""
    namer = _Namer()
    return {id(c): namer.fresh(c.name) for c in (module.computations() if comps is None else comps)}


def print_module(module: Module, refs: Refs | None = None) -> str:
    """The module's text; ``refs`` names the constants written by reference (``ref "..."``,
    read back by ``parse_module(text, refs=...)``)."""
    comps = module.computations()  # (a walk over every node: once)
    comp_names = computation_names(module, comps)
    parts = [f"module @{safe_name(module.name)}"]
    for c in comps:
        parts.append(print_computation(c, comp_names, entry=c is module.entry, refs=refs))
    return "\n\n".join(parts) + "\n"


def print_computation_alone(comp: Computation) -> str:
    return print_computation(comp, {id(comp): comp.name})


__all__ = ["print_module", "format_literal", "format_scalar", "literal_bytes", "DType"]
