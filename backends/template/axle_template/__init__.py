"""axle-template: a minimal, working axle backend to copy for a new device.

Its "device" is host memory and its code generator emits a small Python/NumPy function
per kernel, so a fresh copy passes the conformance kit (``python -m axle.testing NAME``)
on day one. Every place where real hardware code goes is marked ``HARDWARE:``.
"""
from .backend import TemplateBackend

__all__ = ["TemplateBackend"]
