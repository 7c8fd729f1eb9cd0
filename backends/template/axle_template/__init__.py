"""axle-template: a minimal, working axle backend to copy for a new device.

Its "device" is host memory: each kernel is a C loop nest written by the core's C-family
renderer (``axle.lowering.c``), compiled with the system C compiler and launched through
ctypes, so a fresh copy passes the conformance kit (``python -m axle.testing NAME``) on day
one. Every place where real hardware code goes is marked ``HARDWARE:``.
"""
from .backend import TemplateBackend

__all__ = ["TemplateBackend"]
