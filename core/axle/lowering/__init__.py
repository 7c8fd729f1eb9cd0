"""The target-independent layer between the optimizer and a backend's code emitter.

``plan``: an optimized module as an ordered list of kernel launches over buffer slots, the
same for every backend (see docs/architecture.md, "The lowering layer")."""
from .plan import KernelLaunch, KernelPlan, kernel_plan, single_op

__all__ = ["KernelLaunch", "KernelPlan", "kernel_plan", "single_op"]
