"""One conformance check as data, whether the device claims it, and running it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..backend import Device
from ..ir.module import Module
from ..partition import unsupported_nodes
from ..registry import REGISTRY
from .cases import OpCase, strict_placement


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


def claimed(check: Check, device: Device) -> bool:
    """Whether the device's capabilities cover everything the check runs."""
    if check.module is None:
        return True
    caps = REGISTRY.backend_for(device).capabilities(device)
    return not unsupported_nodes(check.module, caps)


def run_check(check: Check, device: Device) -> bool:
    """Runs a check; claimed checks under strict placement. Returns whether it was claimed."""
    is_claimed = claimed(check, device)
    with strict_placement(is_claimed):
        check.run(device)
    return is_claimed
