"""Statement emission with scoped common-subexpression memory, and array indices that
are known by their flat offset, their coordinates, or both."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from axle.lowering import index as ix


@dataclass
class Idx:
    """A position in an array of ``shape``: flat row-major offset and/or coordinates
    (C expressions). Whichever is missing is derived on demand by :class:`Emitter`."""

    shape: tuple[int, ...]
    flat: str | None = None
    coords: list[str] | None = None

    @property
    def key(self) -> tuple:
        return ("c", *self.coords) if self.coords is not None else ("f", self.flat)


class Emitter:
    """Collects kernel statements; ``value`` memories live in nested scopes so a value
    computed inside a loop body is never reused after the loop."""

    def __init__(self, indent: int = 1) -> None:
        self.lines: list[str] = []
        self.depth = indent
        self.scopes: list[dict[Any, str]] = [{}]
        self._n = 0

    def fresh(self, prefix: str = "t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def tmp(self, ctype: str, expr: str, prefix: str = "t") -> str:
        name = self.fresh(prefix)
        self.line(f"{ctype} {name} = {expr};")
        return name

    def open(self, header: str) -> None:
        self.line(header + " {")
        self.depth += 1
        self.scopes.append({})

    def close(self) -> None:
        self.scopes.pop()
        self.depth -= 1
        self.line("}")

    def lookup(self, key: Any) -> str | None:
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def remember(self, key: Any, value: str) -> None:
        self.scopes[-1][key] = value

    # -- indices -------------------------------------------------------------------
    # Coordinates and offsets are C expressions here; the maps between them are the
    # shared index algebra's (axle.lowering.index), bound to int temporaries.
    def bind(self, e: ix.Ix) -> str:
        """An index expression as a variable or literal (a temporary shared in scope)."""
        return self._cached_tmp("int", ix.to_c(e), "c")

    def ix_coords(self, idx: Idx) -> list[ix.Ix]:
        return [ix.const(int(c)) if c.lstrip("-").isdigit() else ix.var(c) for c in self.coords(idx)]

    def coords(self, idx: Idx) -> list[str]:
        if idx.coords is None:
            assert idx.flat is not None
            flat = ix.const(int(idx.flat)) if idx.flat.isdigit() else ix.var(idx.flat)
            idx.coords = [self.bind(c) for c in ix.delinearize(flat, idx.shape)]
        return idx.coords

    def flat(self, idx: Idx) -> str:
        if idx.flat is None:
            assert idx.coords is not None
            idx.flat = "0" if math.prod(idx.shape) <= 1 else self.bind(ix.linearize(self.ix_coords(idx), idx.shape))
        return idx.flat

    def _cached_tmp(self, ctype: str, expr: str, prefix: str) -> str:
        if expr.isidentifier() or expr.lstrip("-").isdigit():
            return expr
        if expr.startswith("(-") and expr.endswith(")") and expr[2:-1].isdigit():
            return expr  # a negative literal, as ix.to_c prints it
        key = ("expr", expr)
        hit = self.lookup(key)
        if hit is None:
            hit = self.tmp(ctype, expr, prefix)
            self.remember(key, hit)
        return hit
