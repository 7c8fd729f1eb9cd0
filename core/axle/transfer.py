"""Copies between the host and a device, below the partitioner and the frontend: the
partitioner's transfers between clusters and the frontend's ``device_put`` and array
reads all go through here (one profiler span per copy)."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import profiler
from .backend import Buffer, Device
from .registry import REGISTRY


def host_to_device(host: Any, dev: Device) -> Buffer:
    """``host`` (a NumPy array of an axle dtype) copied to ``dev`` as a C-ordered buffer."""
    host = np.asarray(host, order="C")
    with profiler.span(f"to {dev.name}", "transfer", bytes=host.nbytes, shape=host.shape, dtype=host.dtype):
        return REGISTRY.backend_for(dev).to_device(host, dev)
