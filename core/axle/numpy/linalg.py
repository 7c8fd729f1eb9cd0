"""``axle.numpy.linalg``: the array API standard's linalg extension (2024.12).

Products, norms and views (matmul, tensordot, vecdot, outer, cross, trace, diagonal,
matrix_transpose, matrix_power, vector_norm, matrix_norm) are compositions of primitives.
The factorizations (cholesky, det, eigh, inv, qr, slogdet, solve, svd, svdvals) are
``custom_call`` nodes whose targets, ``axle.linalg.<name>``, call LAPACK through NumPy on
the host: eagerly and inside jit alike, stated in the placement summary as a host step
(a device may claim a target and run its own kernel instead). eigvalsh, pinv and
matrix_rank are built on eigh and svd. A target's several results (eigh's values and
vectors...) travel as one flat array that the frontend slices apart, so one LAPACK call
serves them all; VJP rules for the targets live in autodiff/linalg_rules.py.

Inputs are real (complex is out of scope, docs/array-api.md); integer inputs compute in
float64 as NumPy's do, float16 computes in float32 on the host (LAPACK has no half
precision) and rounds its results back."""
from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as _np

from .. import lax
from ..errors import ArgumentError
from ..frontend.source import user_location
from ..frontend.validate import size_arg
from ..ir.ops import register_custom_call
from ._api_shape import matrix_transpose, vecdot
from ._core import (
    _fail,
    _is_array,
    _norm_axes,
    _norm_axis,
    abs,
    asarray,
    astype,
    broadcast_shapes,
    broadcast_to,
    matmul,
    max,
    min,
    multiply,
    power,
    reshape,
    result_type,
    sqrt,
    subtract,
    sum,
    true_divide,
    where,
)
from ._linalg import tensordot as _tensordot
from ._shape import eye, stack

ArrayLike = Any
Shape = tuple[int, ...]

#: the prefix of every custom-call target of this module
PREFIX = "axle.linalg."


class EighResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class QRResult(NamedTuple):
    Q: Any
    R: Any


class SlogdetResult(NamedTuple):
    sign: Any
    logabsdet: Any


class SVDResult(NamedTuple):
    U: Any
    S: Any
    Vh: Any


# ------------------------------------------------------------------ host targets

def _host_dtype(dt: _np.dtype) -> _np.dtype:
    """The dtype LAPACK computes in for results of dtype dt."""
    return _np.dtype(_np.float32) if dt == _np.float16 else dt


def _pack(outs: Sequence[_np.ndarray], dt: _np.dtype) -> _np.ndarray:
    """One result as it is; several as one flat array (see unpack)."""
    if len(outs) == 1:
        return _np.asarray(outs[0], dtype=dt)
    return _np.concatenate([_np.asarray(o, dtype=dt).reshape(-1) for o in outs])


def _solve_ref(a: _np.ndarray, b: _np.ndarray) -> _np.ndarray:
    return _np.linalg.solve(a, b)


#: target name -> the NumPy computation: (operands in the host dtype, config) -> results
_REFERENCES: dict[str, Callable[..., tuple[_np.ndarray, ...]]] = {
    "cholesky": lambda a, config: (_np.linalg.cholesky(a),),
    "det": lambda a, config: (_np.linalg.det(a),),
    "eigh": lambda a, config: tuple(_np.linalg.eigh(a)),
    "inv": lambda a, config: (_np.linalg.inv(a),),
    "qr": lambda a, config: tuple(_np.linalg.qr(a, mode=config)),
    "slogdet": lambda a, config: tuple(_np.linalg.slogdet(a)),
    "solve": lambda a, b, config: (_solve_ref(a, b),),
    "svd": lambda a, config: tuple(_np.linalg.svd(a, full_matrices=config == "full")),
    "svdvals": lambda a, config: (_np.linalg.svd(a, compute_uv=False),),
}


def _reference(name: str) -> Callable[..., _np.ndarray]:
    compute = _REFERENCES[name]

    def ref(*xs: _np.ndarray, config: str) -> _np.ndarray:
        dt = xs[0].dtype
        host = [x.astype(_host_dtype(dt), copy=False) for x in xs]
        return _pack(compute(*host, config=config), dt)

    ref.__name__ = f"linalg_{name}"
    return ref


for _name in _REFERENCES:
    register_custom_call(PREFIX + _name, _reference(_name))


def _call(name: str, xs: Sequence[Any], shapes: Sequence[Shape], config: str = "") -> list[Any]:
    """The results of target ``name`` on xs (of one float dtype), of the given shapes."""
    dt = xs[0].dtype
    out_shape = shapes[0] if len(shapes) == 1 else (builtins.sum(math.prod(s) for s in shapes),)
    return unpack(lax.custom_call(PREFIX + name, list(xs), out_shape, dt, config), shapes)


def unpack(out: Any, shapes: Sequence[Shape]) -> list[Any]:
    """The results of a target: its output itself when it has one, else slices of its
    flat output (used by the VJP rules too)."""
    if len(shapes) == 1:
        return [out]
    pieces, off = [], 0
    for s in shapes:
        n = math.prod(s)
        pieces.append(lax.reshape(lax.slice(out, (off,), (off + n,)), s))
        off += n
    return pieces


def result_shapes(name: str, in_shapes: Sequence[Shape], config: str = "") -> list[Shape]:
    """The shapes of target ``name``'s results for operands of shapes in_shapes."""
    s = in_shapes[0]
    batch, (m, n) = s[:-2], s[-2:]
    k = builtins.min(m, n)
    table: dict[str, Callable[[], list[Shape]]] = {
        "cholesky": lambda: [s],
        "det": lambda: [batch],
        "eigh": lambda: [batch + (n,), s],
        "inv": lambda: [s],
        "qr": lambda: ([batch + (m, m), s] if config == "complete" else [batch + (m, k), batch + (k, n)]),
        "slogdet": lambda: [batch, batch],
        "solve": lambda: [in_shapes[1]],
        "svd": lambda: ([batch + (m, m), batch + (k,), batch + (n, n)] if config == "full"
                        else [batch + (m, k), batch + (k,), batch + (k, n)]),
        "svdvals": lambda: [batch + (k,)],
    }
    return table[name]()


# ------------------------------------------------------------------ argument checks

def _float(x: ArrayLike, fn: str, square: bool = False) -> Any:
    """x as a float array of rank >= 2 (a stack of matrices), square when asked."""
    x = asarray(x) if not _is_array(x) else x
    if x.ndim < 2:
        raise _fail(f"linalg.{fn}", "needs a stack of matrices (rank >= 2)", x)
    if square and x.shape[-1] != x.shape[-2]:
        raise _fail(f"linalg.{fn}", f"needs square matrices, got {x.shape[-2]} x {x.shape[-1]}", x)
    return x if x.dtype.kind == "f" else astype(x, _np.float64)


def _factor(name: str, x: ArrayLike, square: bool, config: str = "") -> list[Any]:
    a = _float(x, name, square)
    return _call(name, [a], result_shapes(name, [a.shape], config), config)


# ------------------------------------------------------------------ factorizations

def cholesky(x: ArrayLike, /, *, upper: bool = False) -> Any:
    """The lower (or upper) Cholesky factor of symmetric positive-definite matrices."""
    (lo,) = _factor("cholesky", x, square=True)
    return matrix_transpose(lo) if upper else lo


def det(x: ArrayLike, /) -> Any:
    return _factor("det", x, square=True)[0]


def slogdet(x: ArrayLike, /) -> SlogdetResult:
    """sign and log|det| of square matrices (sign 0 and log|det| -inf when singular)."""
    return SlogdetResult(*_factor("slogdet", x, square=True))


def inv(x: ArrayLike, /) -> Any:
    return _factor("inv", x, square=True)[0]


def eigh(x: ArrayLike, /) -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices (the lower triangle
    is read, as LAPACK's syevd with UPLO='L')."""
    return EighResult(*_factor("eigh", x, square=True))


def eigvalsh(x: ArrayLike, /) -> Any:
    return eigh(x).eigenvalues


def qr(x: ArrayLike, /, *, mode: str = "reduced") -> QRResult:
    if mode not in ("reduced", "complete"):
        raise ArgumentError(f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r}", where=user_location())
    return QRResult(*_factor("qr", x, square=False, config=mode))


def svd(x: ArrayLike, /, *, full_matrices: bool = True) -> SVDResult:
    return SVDResult(*_factor("svd", x, square=False, config="full" if full_matrices else "reduced"))


def svdvals(x: ArrayLike, /) -> Any:
    """Singular values, descending."""
    return _factor("svdvals", x, square=False)[0]


def solve(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """X with x1 @ X == x2: x2 is a stack of matrices (..., M, K), or one vector (M,)
    for every matrix of x1 (2024.12's rule); batch dims broadcast."""
    a = _float(x1, "solve", square=True)
    b = asarray(x2) if not _is_array(x2) else x2
    dt = result_type(a, b)
    dt = dt if dt.kind == "f" else _np.dtype(_np.float64)
    a = astype(a, dt)
    vector = b.ndim == 1
    b = astype(reshape(b, b.shape + (1,)) if vector else b, dt)
    if b.shape[-2] != a.shape[-1]:
        raise _fail("linalg.solve", f"x2 has {b.shape[-2]} rows for {a.shape[-1]} x {a.shape[-1]} matrices", a, b)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = broadcast_to(a, batch + a.shape[-2:]), broadcast_to(b, batch + b.shape[-2:])
    (out,) = _call("solve", [a, b], [b.shape])
    return reshape(out, out.shape[:-1]) if vector else out


def _default_rtol(x: Any, s: Any) -> Any:
    return max(x.shape[-2:]) * _np.finfo(s.dtype).eps


def pinv(x: ArrayLike, /, *, rtol: Any = None) -> Any:
    """The Moore-Penrose pseudo-inverse from the SVD: singular values <= rtol * largest
    count as zero (rtol default max(M, N) * eps)."""
    a = _float(x, "pinv")
    u, s, vh = svd(a, full_matrices=False)
    tol = _rtol_times_max(a, s, rtol)
    keep = s > tol
    s_inv = where(keep, true_divide(1.0, where(keep, s, 1.0)), 0.0)
    return matmul(multiply(matrix_transpose(vh), s_inv[..., None, :]), matrix_transpose(u))


def _rtol_times_max(a: Any, s: Any, rtol: Any) -> Any:
    r = _default_rtol(a, s) if rtol is None else rtol
    r = asarray(r, dtype=s.dtype) if not _is_array(r) else astype(r, s.dtype)
    if r.ndim:
        r = r[..., None]
    smax = max(s, axis=-1, keepdims=True) if s.shape[-1] else s
    return multiply(r, smax)


def matrix_rank(x: ArrayLike, /, *, rtol: Any = None) -> Any:
    """The number of singular values > rtol * largest (rtol default max(M, N) * eps)."""
    a = _float(x, "matrix_rank")
    s = svdvals(a)
    return sum(s > _rtol_times_max(a, s, rtol), axis=-1, dtype=_np.int64)


# ------------------------------------------------------------------ in primitives

def tensordot(x1: ArrayLike, x2: ArrayLike, /, *, axes: Any = 2) -> Any:
    return _tensordot(x1, x2, axes)


def outer(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    a = asarray(x1) if not _is_array(x1) else x1
    b = asarray(x2) if not _is_array(x2) else x2
    if a.ndim != 1 or b.ndim != 1:
        raise _fail("linalg.outer", "needs two 1-D arrays", a, b)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def diagonal(x: ArrayLike, /, *, offset: int = 0) -> Any:
    """The diagonal ``offset`` (above the main one when > 0) of each matrix: one strided
    slice of the matrices flattened row-major (element [i, i + offset] is i * (m + 1) +
    offset from the start)."""
    x = asarray(x) if not _is_array(x) else x
    if x.ndim < 2:
        raise _fail("linalg.diagonal", "needs a stack of matrices (rank >= 2)", x)
    k = size_arg(offset, "linalg.diagonal", "offset", -2**62)
    batch, (n, m) = x.shape[:-2], x.shape[-2:]
    length = builtins.max(0, builtins.min(n, m - k) if k >= 0 else builtins.min(n + k, m))
    if length == 0:
        return reshape(lax.slice(reshape(x, batch + (n * m,)), (0,) * (len(batch) + 1),
                                 batch + (0,)), batch + (0,))
    flat = reshape(x, batch + (n * m,))
    start = k if k >= 0 else -k * m
    limit = start + (length - 1) * (m + 1) + 1
    nb = len(batch)
    return lax.slice(flat, (0,) * nb + (start,), batch + (limit,), (1,) * nb + (m + 1,))


def trace(x: ArrayLike, /, *, offset: int = 0, dtype: Any = None) -> Any:
    """Sum of each matrix's diagonal ``offset`` (integers sum in int64, as sum does)."""
    return sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def cross(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1) -> Any:
    """Cross products of 3-vectors along ``axis`` (other axes broadcast)."""
    a = asarray(x1) if not _is_array(x1) else x1
    b = asarray(x2) if not _is_array(x2) else x2
    if a.ndim == 0 or b.ndim == 0:
        raise _fail("linalg.cross", "needs arrays of rank >= 1", a, b)
    shape = broadcast_shapes(a.shape, b.shape)
    if axis >= 0 or -axis > builtins.min(a.ndim, b.ndim):
        ax = _norm_axis(axis, builtins.min(a.ndim, b.ndim), "linalg.cross", a)
        axis = ax - builtins.min(a.ndim, b.ndim)
    ax = len(shape) + axis
    if a.shape[axis] != 3 or b.shape[axis] != 3:
        raise _fail("linalg.cross", f"axis {axis} must have size 3 in both operands", a, b)
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    lead = (slice(None),) * ax

    def comp(v: Any, i: int) -> Any:
        return v[lead + (i,)]

    parts = [subtract(multiply(comp(a, i), comp(b, j)), multiply(comp(a, j), comp(b, i)))
             for i, j in ((1, 2), (2, 0), (0, 1))]
    return stack(parts, axis=ax)


def matrix_power(x: ArrayLike, n: int, /) -> Any:
    """x @ x @ ... (n times) by repeated squaring; n == 0 gives identities, n < 0 powers
    of the inverse."""
    a = asarray(x) if not _is_array(x) else x
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise _fail("linalg.matrix_power", "needs square matrices", a)
    k = size_arg(n, "linalg.matrix_power", "n", -2**62)
    if k == 0:
        return broadcast_to(eye(a.shape[-1], dtype=a.dtype), a.shape)
    if k < 0:
        a, k = inv(a), -k
    out = None
    while k:
        if k & 1:
            out = a if out is None else matmul(out, a)
        k >>= 1
        if k:
            a = matmul(a, a)
    return out


def _to_float(x: ArrayLike, fn: str) -> Any:
    x = asarray(x) if not _is_array(x) else x
    return x if x.dtype.kind == "f" else astype(x, _np.float64)


def vector_norm(x: ArrayLike, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:  # noqa: A002 - the standard names the parameter ord
    """The p-norm over ``axis`` (all axes when None): ord inf / -inf (max / min of |x|),
    0 (the count of non-zeros), any other p: (sum |x|^p)^(1/p)."""
    x = _to_float(x, "vector_norm")
    axes = _norm_axes(axis, x.ndim, "linalg.vector_norm", x)
    a = abs(x)
    if ord == math.inf:
        out = max(a, axis=axes, keepdims=True) if a.size else sum(a, axis=axes, keepdims=True)
    elif ord == -math.inf:
        out = min(a, axis=axes, keepdims=True) if a.size else sum(a, axis=axes, keepdims=True)
    elif ord == 0:
        out = sum(astype(a != 0, x.dtype), axis=axes, keepdims=True)
    elif ord == 1:
        out = sum(a, axis=axes, keepdims=True)
    elif ord == 2:
        out = sqrt(sum(multiply(a, a), axis=axes, keepdims=True))
    else:
        p = _np.asarray(ord, x.dtype)
        out = power(sum(power(a, p), axis=axes, keepdims=True), _np.asarray(1.0, x.dtype) / p)
    if keepdims:
        return out
    return reshape(out, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def matrix_norm(x: ArrayLike, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:  # noqa: A002 - the standard names the parameter ord
    """Norms of each matrix: 'fro', 'nuc', 1 / -1 (max / min column sum of |x|), inf / -inf
    (max / min row sum), 2 / -2 (largest / smallest singular value)."""
    x = _float(x, "matrix_norm")
    a = abs(x)
    if ord == "fro":
        out = sqrt(sum(multiply(a, a), axis=(-2, -1), keepdims=True))
    elif ord == "nuc":
        out = sum(svdvals(x), axis=-1)[..., None, None]
    elif ord in (1, -1):
        cols = sum(a, axis=-2, keepdims=True)
        out = max(cols, axis=-1, keepdims=True) if ord == 1 else min(cols, axis=-1, keepdims=True)
    elif ord in (math.inf, -math.inf):
        rows = sum(a, axis=-1, keepdims=True)
        out = max(rows, axis=-2, keepdims=True) if ord > 0 else min(rows, axis=-2, keepdims=True)
    elif ord in (2, -2):
        s = svdvals(x)
        out = (max(s, axis=-1) if ord == 2 else min(s, axis=-1))[..., None, None]
    else:
        raise ArgumentError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}",
                            where=user_location())
    return out if keepdims else reshape(out, x.shape[:-2])


__all__ = ["EighResult", "QRResult", "SVDResult", "SlogdetResult", "cholesky", "cross", "det", "diagonal", "eigh",
           "eigvalsh", "inv", "matmul", "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer",
           "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm"]
