"""The backend contract.

A backend is a Python distribution that exposes a :class:`Backend` subclass under the
entry-point group ``axle.backends``::

    [project.entry-points."axle.backends"]
    mydev = "axle_mydev:MyBackend"

The core traces and optimizes a program into a :class:`~axle.ir.Module`; the backend
turns it into an :class:`Executable` for one of its :class:`Device` s and moves data in and
out through :class:`Buffer` s. Everything else (fallback, caching, placement, profiling)
is the core's job. Methods without ``@abstractmethod`` are optional and have defaults, so
a plugin written against an older minor version keeps loading.
"""
from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .ir.dtypes import ALL_DTYPES, DType
from .ir.module import Module, Node
from .ir.ops import CORE_PRIMITIVES, Op
from .ir.types import TensorType

if TYPE_CHECKING:
    from .passes.pipeline import Pass

#: (major, minor). A plugin whose major differs is refused; a newer minor is accepted.
API_VERSION: tuple[int, int] = (1, 0)


class BackendUnavailable(Exception):
    """Raised by a backend's ``__init__`` when it cannot run here (no driver, no device);
    the message is shown to the user by ``axle devices``."""


@dataclass(frozen=True)
class Device:
    """One device of a backend, named ``<backend>:<index>``."""

    backend: str
    index: int
    description: str = ""
    kind: str = "cpu"  # "cpu", "gpu", "accelerator" or "host"
    properties: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    aliases: tuple[str, ...] = field(default=(), compare=False, hash=False)

    @property
    def name(self) -> str:
        return f"{self.backend}:{self.index}"

    def __repr__(self) -> str:
        return f"Device('{self.name}')"

    def __enter__(self) -> "Device":
        from .placement import push_default

        push_default(self)
        return self

    def __exit__(self, *exc: object) -> None:
        from .placement import pop_default

        pop_default()

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Capabilities:
    """What a device can run. The partitioner sends everything else to the host."""

    ops: frozenset[Op] = CORE_PRIMITIVES
    dtypes: frozenset[DType] = frozenset(ALL_DTYPES)
    #: per-op dtype restrictions, e.g. {Op.DOT_GENERAL: frozenset({DType.FLOAT32})}
    op_dtypes: Mapping[Op, frozenset[DType]] = field(default_factory=dict)
    #: e.g. {"max_fusion_nodes": 64, "max_buffer_bytes": 2**31}
    limits: Mapping[str, int] = field(default_factory=dict)

    def supports(self, node: Node) -> bool:
        """True if the device runs this node (its op and every dtype it touches)."""
        if node.op in (Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.CONSTANT):
            return True
        if node.op is Op.FUSION:
            return all(self.supports(n) for n in node.attr["computation"].nodes)
        if node.op not in self.ops:
            return False
        types = [o.type for o in node.operands] + [node.type]
        allowed = self.op_dtypes.get(node.op, self.dtypes)
        return all(t.dtype in allowed and t.dtype in self.dtypes for t in types if isinstance(t, TensorType))


@dataclass(frozen=True)
class CompileOptions:
    """Options the core passes to ``Backend.compile``."""

    #: whether the module was optimized by the core pipeline (fusions present)
    optimized: bool = True
    #: free-form backend flags from AXLE_FLAGS (``--<backend>_<flag>=...``)
    flags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Buffer:
    """An array living on a device. ``handle`` is whatever the backend uses (a NumPy array,
    a cl.Buffer, a pointer...); the core only passes it back to the same backend."""

    device: Device
    type: TensorType
    handle: Any

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


class Executable(abc.ABC):
    """A compiled module, ready to run on one device."""

    @abc.abstractmethod
    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        """Runs the module on argument buffers (parameter order) and returns the result
        buffers (one per entry result; a tuple root gives several)."""

    def report(self) -> dict[str, Any]:
        """Facts about the compiled code: at least ``kernels`` (launches per call)."""
        return {}

    def kernel_sources(self) -> dict[str, str]:
        """Generated code per kernel name (LLVM IR, OpenCL C...), for `axle explain`."""
        return {}


class Backend(abc.ABC):
    """A device plugin. Instantiated once per process by the registry; ``__init__``
    raises :class:`BackendUnavailable` when the backend cannot run on this machine."""

    #: the name devices are prefixed with (``cpu`` -> ``cpu:0``)
    name: ClassVar[str]
    #: contract version this plugin was written against
    api_version: ClassVar[tuple[int, int]] = API_VERSION
    #: higher wins when choosing the default device
    priority: ClassVar[int] = 0

    @abc.abstractmethod
    def devices(self) -> Sequence[Device]:
        """The devices this backend can run on, index 0 first."""

    def capabilities(self, device: Device) -> Capabilities:
        """The ops and dtypes ``device`` runs; the default claims the whole core set."""
        return Capabilities()

    @abc.abstractmethod
    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        """Compiles an (optimized) module for ``device``."""

    @abc.abstractmethod
    def to_device(self, array: np.ndarray, device: Device) -> Buffer:
        """Copies a host array to the device."""

    @abc.abstractmethod
    def to_host(self, buffer: Buffer) -> np.ndarray:
        """Copies a device buffer back to a host array (waiting for pending work)."""

    def free(self, buffer: Buffer) -> None:
        """Releases a buffer early (otherwise garbage collection does)."""

    def passes(self) -> list["Pass"]:
        """Target-specific passes appended to the core pipeline."""
        return []

    def fusion_policy(self) -> Any:
        """The fusion policy (see axle.passes.fusion.FusionPolicy); None = core default."""
        return None

    def device_priority(self, device: Device) -> int:
        """Priority of one device for the default-device choice (e.g. GPUs above CPUs)."""
        return self.priority

    def synchronize(self, device: Device) -> None:
        """Waits until all work queued on ``device`` has finished."""
