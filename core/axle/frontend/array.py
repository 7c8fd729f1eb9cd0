"""axle.Array: an immutable array living on a device."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Buffer, Device
from ..ir.types import TensorType
from .arrayops import ArrayOps


class Array(ArrayOps):
    """A concrete array on a device. ``np.asarray(a)`` copies it to the host."""

    __slots__ = ("buffer", "weak", "_host")
    __array_priority__ = 1000

    def __init__(self, buffer: Buffer, weak: bool = False) -> None:
        self.buffer = buffer
        self.weak = weak
        self._host: np.ndarray | None = None

    @property
    def aval(self) -> TensorType:
        return self.buffer.type

    @property
    def device(self) -> Device:
        return self.buffer.device

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.buffer.type.dtype.np

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    def numpy(self) -> np.ndarray:
        """The values as a read-only host array (copied once, then cached)."""
        if self._host is None:
            from .. import profiler
            from ..registry import REGISTRY

            with profiler.span(f"from {self.device.name}", "transfer", bytes=self.nbytes, type=self.aval):
                host = np.asarray(REGISTRY.backend_for(self.device).to_host(self.buffer))
            host = host.view()
            host.flags.writeable = False
            self._host = host
        return self._host

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.numpy()
        if copy or dtype is not None:
            return np.array(host, dtype=dtype, copy=True)
        return host

    def block_until_ready(self) -> "Array":
        from ..registry import REGISTRY

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

    def __iter__(self) -> Any:
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype.name}, device='{self.device.name}')"

    def __str__(self) -> str:
        return str(self.numpy())

    def __format__(self, spec: str) -> str:
        return format(self.numpy().item() if not self.shape else self.numpy(), spec) if spec else str(self)
