"""The target-independent optimizer: pass manager, rewrites, fusion, scheduling and
buffer assignment. ``optimize(module, backend)`` runs the default pipeline plus the
backend's own passes under the backend's fusion policy (see docs/optimizer.md)."""
from __future__ import annotations

from typing import Any

from ..errors import BackendError
from ..ir.module import Module
from .buffers import BufferAssignment, assign
from .constant_fold import ConstantFolding
from .control import ControlFlowSimplifier, LoopInvariantCodeMotion
from .conv_layout import ConvLayout
from .conv_phases import ConvPhaseSplit
from .cse import CSE
from .dce import DCE
from .fusion import Fusion
from .layout import LayoutAssignment
from .pipeline import Entry, FixedPoint, FunctionPass, Pass, Pipeline
from .policy import DEFAULT_POLICY, FusionPolicy
from .schedule import schedule
from .simplify import AlgebraicSimplifier
from .transpose_fold import TransposeFolding


def default_pipeline(policy: FusionPolicy | None = None, layout: LayoutAssignment | None = None,
                     conv_phase_split: ConvPhaseSplit | None = None) -> Pipeline:
    """The core pipeline, one readable list (``layout``: the layout pass with the device's
    convolution layout; by default none, the program's own; ``conv_phase_split``: the
    phase split for the device, by default off)."""
    return Pipeline("default", [
        (FixedPoint("simplify-loop", [
            (AlgebraicSimplifier(), "local rewrites first: they expose constants and duplicates"),
            (ConstantFolding(), "folds what simplification left all-constant (small results only)"),
            (CSE(), "merges duplicates, so the next simplify round sees x - x, select(p, a, a)..."),
            (DCE(), "forwards tuple plumbing so rewrites see through it"),
            (ControlFlowSimplifier(), "loops run 0 or 1 times and known branches become plain code"),
            (LoopInvariantCodeMotion(), "work on loop-invariant carries runs once, before the loop"),
        ]), "repeat until nothing changes: each rewrite can enable the others"),
        (layout or LayoutAssignment(), "convolutions in the device's layout; a dot read only through a transpose "
                                       "computes that layout (C^T = B^T A^T)"),
        (conv_phase_split or ConvPhaseSplit(enabled=False),
         "lhs-dilated convolutions (strided convolutions' input gradients) as convolutions of the undilated "
         "input, after the layout pass: the phases and their interleave are in the device's layout"),
        (TransposeFolding(), "after transpose chains are composed; a dot reads the untransposed operand"),
        (Fusion(policy), "after the graph is minimal, so fusion sees only the real work"),
        (CSE(), "identical fusions (same computation, same operands) become one kernel"),
        (DCE(), "drops fusion outputs and parameters that merging made dead"),
    ])


def policy_for(backend: Any = None, device: Any = None) -> FusionPolicy:
    """The backend's fusion policy (the core default when it has none), bounded by the
    device's capabilities when a device is given (``Capabilities.bound``)."""
    policy = backend.fusion_policy() if backend is not None else None
    if policy is not None and not isinstance(policy, FusionPolicy):
        raise BackendError(f"backend {getattr(backend, 'name', backend)!r}: fusion_policy() returned "
                           f"{policy!r}; expected axle.passes.policy.FusionPolicy or None")
    policy = policy or DEFAULT_POLICY
    return backend.capabilities(device).bound(policy) if device is not None else policy


def layout_for(backend: Any = None, device: Any = None) -> LayoutAssignment:
    """The layout pass for ``device``: its convolution layout (``Capabilities.conv_layout``),
    a rewritten convolution kept only where the device claims it. Without a device, the
    program's layouts."""
    if backend is None or device is None:
        return LayoutAssignment()
    caps = backend.capabilities(device)
    pref = getattr(caps, "conv_layout", None)
    if pref is not None and not isinstance(pref, ConvLayout):
        raise BackendError(f"backend {getattr(backend, 'name', backend)!r}: Capabilities.conv_layout is {pref!r}; "
                           f"expected axle.passes.ConvLayout or None")
    return LayoutAssignment(pref, caps.supports)


def phase_split_for(backend: Any = None, device: Any = None) -> ConvPhaseSplit:
    """The phase split for ``device``: on when its capabilities ask for it
    (``Capabilities.conv_phase_split``), a split kept only where the device claims every
    phase convolution. Without a device, off."""
    if backend is None or device is None:
        return ConvPhaseSplit(enabled=False)
    caps = backend.capabilities(device)
    return ConvPhaseSplit(caps.supports, enabled=bool(getattr(caps, "conv_phase_split", False)))


def pipeline_for(backend: Any = None, device: Any = None) -> Pipeline:
    """The default pipeline under the backend's fusion policy (bounded by the device's
    capabilities when a device is given), plus its passes."""
    extra: list[Pass] = list(backend.passes() or []) if backend is not None else []
    pipe = default_pipeline(policy_for(backend, device), layout_for(backend, device),
                            phase_split_for(backend, device))
    if extra:
        name = getattr(backend, "name", "backend")
        pipe = pipe.extended([(p, f"target-specific pass of the {name} backend, after core fusion") for p in extra])
    return pipe


def optimize(module: Module, backend: Any = None, device: Any = None) -> Module:
    """Runs the default pipeline (and the backend's passes) over a module, for ``device``
    when given (its capabilities bound the fusions)."""
    out, _ = pipeline_for(backend, device).run(module)
    return out


__all__ = ["optimize", "default_pipeline", "pipeline_for", "policy_for", "Pass", "FunctionPass", "Pipeline",
           "FixedPoint",
           "Entry", "FusionPolicy", "DEFAULT_POLICY", "AlgebraicSimplifier", "ConstantFolding", "CSE", "DCE",
           "Fusion", "LayoutAssignment", "TransposeFolding", "ControlFlowSimplifier", "LoopInvariantCodeMotion",
           "assign",
           "BufferAssignment", "schedule",
           "ConvLayout", "layout_for", "ConvPhaseSplit", "phase_split_for"]
