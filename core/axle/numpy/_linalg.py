"""einsum, tensordot, outer, inner: contractions lowered to one dot_general each."""
from __future__ import annotations

import builtins
from typing import Any

from .. import lax
from ..errors import ArgumentError
from ..frontend.source import user_location
from ..frontend.validate import as_sequence, axis_arg, size_arg
from ._core import _fail, _is_array, _to_value, asarray, matmul, multiply, reshape, result_type, sum, transpose, where
from ._shape import eye

ArrayLike = Any


def _parse(subscripts: str, n: int) -> tuple[list[str], str]:
    if not isinstance(subscripts, str):
        raise ArgumentError(f"einsum: subscripts must be a string like 'ij,jk->ik', got {subscripts!r}",
                            where=user_location())
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise ArgumentError("einsum: ellipsis ('...') is not supported; name every axis", where=user_location())
    if "->" in spec:
        lhs, out = spec.split("->")
    else:
        lhs = spec
        letters = lhs.replace(",", "")
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    ins = lhs.split(",")
    if len(ins) != n:
        raise ArgumentError(f"einsum: {len(ins)} operand subscripts for {n} operands", where=user_location())
    return ins, out


def _reduce_to(x: Any, sub: str, keep: set[str]) -> tuple[Any, str]:
    """Sums away the letters of ``sub`` that are not in ``keep``."""
    axes = tuple(i for i, c in enumerate(sub) if c not in keep)
    if not axes:
        return x, sub
    return sum(x, axis=axes), "".join(c for c in sub if c in keep)


def _contract(a: Any, sa: str, b: Any, sb: str, keep: set[str]) -> tuple[Any, str]:
    """One pairwise step: letters in both and kept are batch, in both and not kept are
    contracted, the rest are free (summed first when not kept)."""
    a, sa = _reduce_to(a, sa, keep | set(sb))
    b, sb = _reduce_to(b, sb, keep | set(sa))
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    for c in batch + contract:
        if a.shape[sa.index(c)] != b.shape[sb.index(c)]:
            raise _fail("einsum", f"size of axis {c!r} differs: {a.shape[sa.index(c)]} vs {b.shape[sb.index(c)]}", a, b)
    out = lax.dot_general(a, b, [sa.index(c) for c in contract], [sb.index(c) for c in contract],
                          [sa.index(c) for c in batch], [sb.index(c) for c in batch])
    sub = "".join(batch) + "".join(c for c in sa if c not in sb) + "".join(c for c in sb if c not in sa)
    return out, sub


def einsum(subscripts: str, *operands: ArrayLike) -> Any:
    """Einstein summation for the common patterns (matmul, batched matmul, outer, traces
    of transposes, reductions): each pairwise step is one dot_general. Repeated letters
    within one operand (diagonals) and ellipses are not supported."""
    ins, out = _parse(subscripts, len(operands))
    dt = result_type(*operands)
    xs = [_to_value(asarray(o) if not _is_array(o) else o, dt) for o in operands]
    for x, s in zip(xs, ins):
        if len(s) != x.ndim:
            raise _fail("einsum", f"subscripts {s!r} do not match rank {x.ndim}", x)
        if len(set(s)) != len(s):
            raise _fail("einsum", f"repeated subscript in {s!r} (diagonals) is not supported", x)
    acc, sacc = xs[0], ins[0]
    for i in range(1, len(xs)):
        later = set(out).union(*ins[i + 1:])
        acc, sacc = _contract(acc, sacc, xs[i], ins[i], later)
    acc, sacc = _reduce_to(acc, sacc, set(out))
    if sorted(sacc) != sorted(out):
        raise ArgumentError(f"einsum: output subscripts {out!r} name an axis no operand has", where=user_location())
    return transpose(acc, [sacc.index(c) for c in out]) if sacc != out else acc


def tensordot(a: ArrayLike, b: ArrayLike, axes: Any = 2) -> Any:
    a = asarray(a) if not _is_array(a) else a
    b = asarray(b) if not _is_array(b) else b
    if not isinstance(axes, (list, tuple)):
        n = size_arg(axes, "tensordot", "axes", 0, builtins.min(a.ndim, b.ndim))
        ax_a, ax_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    elif len(axes) != 2:
        raise ArgumentError(f"tensordot: axes must be an int or a pair of axis lists, got {axes!r}",
                            where=user_location())
    else:
        ax_a, ax_b = list(as_sequence(axes[0])), list(as_sequence(axes[1]))
    if len(ax_a) != len(ax_b):
        raise _fail("tensordot", f"axes {axes!r} name {len(ax_a)} and {len(ax_b)} axes", a, b)
    ax_a = [axis_arg(x, a.ndim, "tensordot") for x in ax_a]
    ax_b = [axis_arg(x, b.ndim, "tensordot") for x in ax_b]
    dt = result_type(a, b)
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise _fail("tensordot", f"shape mismatch on contracted axes {i} and {j}", a, b)
    return lax.dot_general(_to_value(a, dt), _to_value(b, dt), ax_a, ax_b)


def outer(a: ArrayLike, b: ArrayLike) -> Any:
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def inner(a: ArrayLike, b: ArrayLike) -> Any:
    a = asarray(a) if not _is_array(a) else a
    b = asarray(b) if not _is_array(b) else b
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def vdot(a: ArrayLike, b: ArrayLike) -> Any:
    return matmul(reshape(a, (-1,)), reshape(b, (-1,)))


def trace(x: ArrayLike) -> Any:
    """Sum of the main diagonal of a 2-D array."""
    x = asarray(x) if not _is_array(x) else x
    if x.ndim != 2:
        raise _fail("trace", "needs a 2-D array", x)
    return sum(where(eye(x.shape[0], x.shape[1], dtype=bool), x, 0))
