"""Compiling ahead in batches: the native builds of many small modules done together.

A test run compiles thousands of small modules, one at a time; where the device's
toolchain has a large cost per invocation beyond the code it compiles (PoCL: ~70 ms to
preprocess a program and link its kernel library, against ~9 ms per kernel), most of the
run is that cost. :func:`prebuild` compiles the next modules a run will compile inside the
backend's ``batched_builds`` (axle.backend): their kernels are built together into the
backend's caches, and each module's own compile afterwards finds them built. It changes
what is built when, never what is built or checked: every module is still compiled by its
own check, which reports any failure (a batch that fails to build caches nothing).
"""
from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterable, Sequence

from ..backend import Device
from ..compiler import compile_optimized
from ..ir.module import Module
from ..registry import REGISTRY
from .cases import device_claims, strict_placement
from .check import Check

#: tests or checks per batch, on average (see batches)
MEAN_BATCH = 16


def prebuild(modules: Iterable[tuple[Module, bool]], device: Device) -> None:
    """Builds ahead, as one batch, what compiling each (module, optimize) pair on
    ``device`` will build, for the modules the device claims whole (the others are split
    with the host, whose part this would compile for nothing). Nothing where the backend
    does not batch. Never raises for a module: its own compile reports what goes wrong."""
    batch = REGISTRY.backend_for(device).batched_builds(device)
    if batch is None:
        return
    with warnings.catch_warnings(), batch:
        warnings.simplefilter("ignore")
        for module, optimize in modules:
            try:
                if device_claims(module, device):
                    with strict_placement():
                        compile_optimized(module, device, optimize=optimize)
            except Exception:  # noqa: BLE001 - the module's own compile reports it
                continue


def prebuild_checks(checks: Iterable[Check], device: Device) -> None:
    """:func:`prebuild` of what these kit checks compile (``Check.forms``)."""
    prebuild(((c.case.module, optimize) for c in checks if c.case is not None for optimize in c.forms), device)


def batches(ids: Sequence[str], mean: int = MEAN_BATCH) -> list[Sequence[str]]:
    """``ids`` (of checks or tests, in run order) cut into batches of about ``mean``: a
    batch ends after an id whose CRC-32 is a multiple of ``mean``, or at 4 x ``mean``
    ids. The cuts depend on the ids, not on their positions: adding or removing a check
    changes its own batch only, and the driver's cache (PoCL's is keyed by a program's
    whole source) still holds the programs of all the others."""
    out, start = [], 0
    for i, one in enumerate(ids):
        if zlib.crc32(one.encode()) % mean == 0 or i + 1 - start == 4 * mean:
            out.append(ids[start:i + 1])
            start = i + 1
    return out + ([ids[start:]] if start < len(ids) else [])
