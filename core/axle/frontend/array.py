"""axle.Array: an immutable array living on a device."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import profiler
from ..backend import Buffer, Device
from ..ir.types import TensorType
from ..registry import REGISTRY
from .arrayops import ArrayOps


class Array(ArrayOps):
    """An array on a device. ``np.asarray(a)`` copies it to the host.

    In ``jit_scope`` / auto-clustering mode an Array may be *pending*: its value is a node
    of a lazy cluster (see frontend/lazy.py) and reading ``buffer`` (or the values)
    compiles and runs that cluster first. Shape, dtype and device never force it.

    ``committed`` (as in JAX): the array was placed on its device on purpose, by
    ``device_put(x, device)``, a ``jit(device=...)`` or an eager op on committed operands. An
    eager op runs on its committed operands' device (two different ones are an error), and
    uncommitted operands (Python scalars, NumPy data, arrays made without naming a device)
    follow it there."""

    __slots__ = ("_buffer", "weak", "committed", "_host", "_lazy", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, buffer: Buffer | None, weak: bool = False, lazy: Any = None, committed: bool = False) -> None:
        self._buffer = buffer
        self.weak = weak
        self.committed = committed
        self._host: np.ndarray | None = None
        self._lazy = lazy  # (cluster, node) while pending

    @property
    def buffer(self) -> Buffer:
        if self._buffer is None:
            self._lazy[0].flush()
            assert self._buffer is not None, "a lazy cluster did not fill one of its arrays"
        return self._buffer

    @property
    def is_pending(self) -> bool:
        """True while the value is still an unexecuted node of a lazy cluster."""
        return self._buffer is None

    @property
    def aval(self) -> TensorType:
        if self._buffer is None:
            return self._lazy[1].tensor_type
        return self._buffer.type

    @property
    def device(self) -> Device:
        if self._buffer is None:
            return self._lazy[0].device
        return self._buffer.device

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype.np

    @property
    def nbytes(self) -> int:
        return self.aval.size * self.aval.dtype.itemsize

    def numpy(self) -> np.ndarray:
        """The values as a read-only host array (copied once, then cached)."""
        if self._host is None:
            buf = self.buffer  # a pending (lazy) value runs its cluster first, outside the copy's span
            backend = REGISTRY.backend_for(buf.device)
            if profiler.enabled():
                with profiler.span(f"from {buf.device.name}", "transfer", bytes=self.nbytes, type=self.aval):
                    host = np.asarray(backend.to_host(buf))
            else:  # the common case, on every result a caller reads
                host = np.asarray(backend.to_host(buf))
            host = host.view()
            host.flags.writeable = False
            self._host = host
        return self._host

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.numpy()
        if copy or dtype is not None:
            return np.array(host, dtype=dtype, copy=True)
        return host

    def _rebind(self, other: Array) -> None:
        """Makes this array hold ``other``'s value (``x[i] = v``): the array object is
        rebound to other's buffer; no buffer is ever written, so every other array that
        shared the old buffer keeps its value."""
        self._buffer = other.buffer  # a pending value runs its cluster first
        self._lazy = None
        self._host = None

    def block_until_ready(self) -> Array:
        REGISTRY.backend_for(self.device).synchronize(self.device)
        return self

    def item(self) -> Any:
        return self.numpy().item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __float__(self) -> float:
        return float(self.numpy())

    def __int__(self) -> int:
        return int(self.numpy())

    def __index__(self) -> int:
        return int(self.numpy().__index__())

    def __bool__(self) -> bool:
        return bool(self.numpy())

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype.name}, device='{self.device.name}')"

    def __str__(self) -> str:
        return str(self.numpy())

    def __format__(self, spec: str) -> str:
        return format(self.numpy().item() if not self.shape else self.numpy(), spec) if spec else str(self)
