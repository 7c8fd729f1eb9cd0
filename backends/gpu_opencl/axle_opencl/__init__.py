"""axle-opencl: the OpenCL backend (OpenCL C code generation with pyopencl).

Importing this package is cheap: pyopencl is imported when the registry instantiates
:class:`OpenCLBackend`, which reports itself unavailable (never raises an import
error) on machines without an OpenCL platform."""
from __future__ import annotations

from .backend import OpenCLBackend

__all__ = ["OpenCLBackend"]
