"""The Python array API standard's (2024.12) data-type functions and inspection API:
``__array_api_version__``, ``bool``, ``finfo``, ``iinfo``, ``isdtype``, ``can_cast`` and
``__array_namespace_info__``. Dtypes are NumPy's scalar types (``axle.numpy.float32 is
numpy.float32``), so ``x.dtype == axle.numpy.float32`` holds as it does in NumPy; the set is
axle's (ir/dtypes.py), complex is out of scope (docs/array-api.md)."""
from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

import numpy as _np

from ..backend import Device
from ..errors import ArgumentError, DTypeError
from ..frontend.source import user_location
from ..ir.dtypes import MAX_RANK, DType, is_float_numpy, supported_numpy_dtype
from ..ir.dtypes import finfo as _finfo
from ..placement import default_device as _default_device
from ..placement import devices as _devices
from ..placement import resolve as _resolve_device
from ._core import _is_array, result_type

__array_api_version__ = "2024.12"

bool = _np.bool_


def _as_dtype(x: Any, fn: str) -> _np.dtype:
    """The NumPy dtype of a dtype argument or of an array (finfo/iinfo/can_cast take both)."""
    dt = x.dtype if _is_array(x) or isinstance(x, _np.ndarray) else x
    try:
        npd = _np.dtype(dt)
    except TypeError:
        raise DTypeError(f"{fn}: {x!r} is neither a dtype nor an array", where=user_location()) from None
    if supported_numpy_dtype(npd) is None:
        raise DTypeError(f"{fn}: dtype {npd} is not supported by axle", where=user_location())
    return npd


@dataclass(frozen=True)
class finfo_object:
    """Machine limits of a floating dtype, as Python numbers (the standard asks for floats)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: _np.dtype


@dataclass(frozen=True)
class iinfo_object:
    """Machine limits of an integer dtype, as Python ints."""

    bits: int
    max: int
    min: int
    dtype: _np.dtype


def finfo(type: Any) -> finfo_object:  # noqa: A002 - the standard's parameter name
    dt = _as_dtype(type, "finfo")
    if not is_float_numpy(dt):
        raise DTypeError(f"finfo: needs a floating dtype, got {dt}", where=user_location())
    found = supported_numpy_dtype(dt)
    assert found is not None  # a float dtype axle supports: checked above
    f = _finfo(found)  # bfloat16 too (NumPy's finfo refuses it)
    return finfo_object(int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal), dt)


def iinfo(type: Any) -> iinfo_object:  # noqa: A002 - the standard's parameter name
    dt = _as_dtype(type, "iinfo")
    if dt.kind not in "iu":
        raise DTypeError(f"iinfo: needs an integer dtype, got {dt}", where=user_location())
    i = _np.iinfo(dt)
    return iinfo_object(int(i.bits), int(i.max), int(i.min), dt)


#: the standard's dtype kinds, each a test on a NumPy dtype
_KINDS: dict[str, Any] = {
    "bool": lambda d: d.kind == "b",
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.kind in "iu",
    "real floating": is_float_numpy,  # bfloat16 too (NumPy kind 'V')
    "complex floating": lambda d: d.kind == "c",
    "numeric": lambda d: d.kind in "iufc" or is_float_numpy(d),
}


def isdtype(dtype: Any, kind: Any) -> builtins.bool:
    """Whether ``dtype`` is of ``kind``: a kind name, a dtype, or a tuple of them."""
    dt = _as_dtype(dtype, "isdtype")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if isinstance(k, str):
            if k not in _KINDS:
                raise ArgumentError(f"isdtype: unknown kind {k!r}; one of {sorted(_KINDS)}", where=user_location())
            if _KINDS[k](dt):
                return True
        elif dt == _as_dtype(k, "isdtype"):
            return True
    return False


def can_cast(from_: Any, to: Any) -> builtins.bool:
    """Whether the standard's promotion rules allow ``from_`` -> ``to``: some dtype promotes
    with ``from_`` to ``to`` (so within a kind only, never int -> float; bool -> bool only)."""
    src, dst = _as_dtype(from_, "can_cast"), _as_dtype(to, "can_cast")
    if src == dst:
        return True
    if (src.kind == "b") != (dst.kind == "b") or is_float_numpy(src) != is_float_numpy(dst):
        return False
    return builtins.bool(_np.can_cast(src, dst, "safe"))


#: the standard's dtype names; axle's others (float16, bfloat16) are extensions it does not list
_STANDARD_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
                   "float64")


def _supported_dtypes() -> dict[str, _np.dtype]:
    """The standard's dtypes that axle supports, by name."""
    return {d.np.name: d.np for d in DType if d.np.name in _STANDARD_NAMES}


class __array_namespace_info__:
    """The standard's inspection API: devices are axle's devices (``axle.devices()``)."""

    def capabilities(self) -> dict[str, Any]:
        # Eagerly, boolean masks and nonzero/unique have data-dependent shapes; inside jit
        # they need concrete values or a static ``size=`` (docs/array-api.md).
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": MAX_RANK}

    def default_device(self) -> Device:
        return _default_device()

    def devices(self) -> list[Device]:
        return list(_devices())

    def default_dtypes(self, *, device: Any = None) -> dict[str, _np.dtype]:
        if device is not None:
            _resolve_device(device)  # an unknown device is an error
        f64, i64 = _np.dtype(_np.float64), _np.dtype(_np.int64)
        return {"real floating": f64, "integral": i64, "indexing": i64}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, _np.dtype]:
        if device is not None:
            _resolve_device(device)
        table = _supported_dtypes()
        if kind is None:
            return table
        return {n: d for n, d in table.items() if isdtype(d, kind)}


__all__ = ["__array_api_version__", "__array_namespace_info__", "bool", "can_cast", "finfo", "finfo_object",
           "iinfo", "iinfo_object", "isdtype", "result_type"]
