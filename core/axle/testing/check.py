"""One conformance check as data, whether the device claims it, and running it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..backend import Device
from ..ir.module import Module
from .cases import OpCase, device_claims, strict_placement


@dataclass
class Check:
    """One conformance check."""

    id: str
    category: str
    run: Callable[[Device], None]
    #: what the check needs the device to run (None: only transfers, always claimed)
    module: Module | None = None
    #: the case it runs (module and inputs), printed when it fails
    case: OpCase | None = None
    #: the optimize settings it compiles ``case.module`` with (axle.testing.prebuild
    #: compiles them ahead, in batches; () where the check compiles something else)
    forms: tuple[bool, ...] = ()


def claimed(check: Check, device: Device) -> bool:
    """Whether the device's capabilities cover everything the check runs (see device_claims)."""
    return check.module is None or device_claims(check.module, device)


def run_check(check: Check, device: Device) -> bool:
    """Runs a check; claimed checks under strict placement. Returns whether it was claimed."""
    is_claimed = claimed(check, device)
    with strict_placement(is_claimed):
        check.run(device)
    return is_claimed
