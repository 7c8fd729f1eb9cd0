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
import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .errors import BackendError
from .ir.computation import called_computations
from .ir.dtypes import BASE_DTYPES, DType
from .ir.module import Module, Node
from .ir.opcodes import PLUMBING
from .ir.ops import BASE_PRIMITIVES, Op
from .ir.types import TensorType
from .passes.conv_layout import ConvLayout
from .passes.fusion import fusion_size
from .passes.policy import FusionPolicy

if TYPE_CHECKING:
    from .passes.pipeline import Pass

#: (major, minor). A plugin whose major differs is refused; a newer minor is accepted.
API_VERSION: tuple[int, int] = (1, 0)


class BackendUnavailable(Exception):
    """Raised by a backend's ``__init__`` when it cannot run here (no driver, no device);
    the message is shown to the user by ``axle devices``."""


@dataclass(frozen=True)
class Device:
    """One device of a backend, named ``<backend>:<index>``: a plain value. ``with device:``
    (the device as the default one for a block) comes from axle.placement."""

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

    def __str__(self) -> str:
        return self.name

    if TYPE_CHECKING:
        # ``with device:``, attached by axle.placement at import; declared for type checkers
        def __enter__(self) -> Device: ...
        def __exit__(self, *exc: object) -> None: ...


#: A per-op refinement of a claim. Called with a node whose op and dtypes the device
#: claims (its operands' and result's types: shapes, dtypes, ``rank``; its attributes; for
#: ``Op.FUSION`` its ``kind`` and ``computation``), it returns None to accept the node or a
#: non-empty reason to refuse it; the placement summary and strict-mode errors print it.
Predicate = Callable[[Node], "str | None"]



@dataclass(frozen=True)
class Capabilities:
    """What a device can run. The partitioner sends everything else to the host.

    A node is claimed when its op is in ``ops``, every dtype it touches is in ``dtypes`` and
    in ``op_dtypes[op]`` (when given), and ``predicates[op]`` (when given) accepts it; a
    fusion when every node inside is claimed, it has at most ``limits["max_fusion_nodes"]``
    ops and ``predicates[Op.FUSION]`` accepts it. The fusion pass builds no fusion this
    device refuses by those two rules (see :meth:`bound`)."""

    #: the default leaves out the extended primitives (gather, scatter...): a device that
    #: lowers one lists it (``BASE_PRIMITIVES | {Op.GATHER}``); the others get its decomposition
    ops: frozenset[Op] = BASE_PRIMITIVES
    #: the default is the contract's first dtype set (bool, s32, s64, f16, f32, f64): a plugin
    #: claims the narrow/unsigned integers and bfloat16 only by naming them, so one written
    #: before they existed sends them to the host instead of mis-running them
    dtypes: frozenset[DType] = BASE_DTYPES
    #: per-op dtype restrictions, e.g. {Op.DOT_GENERAL: frozenset({DType.FLOAT32})}
    op_dtypes: Mapping[Op, frozenset[DType]] = field(default_factory=dict)
    #: ``max_fusion_nodes`` (ops in one fusion), ``max_buffer_bytes`` and ``max_elements``
    #: (of any one operand or result), e.g. {"max_fusion_nodes": 64, "max_buffer_bytes": 2**31}
    limits: Mapping[str, int] = field(default_factory=dict)
    #: per-op predicates, e.g. {Op.REDUCE: lambda n: None if n.attr["axes"] == (len(n.operands[0].shape) - 1,)
    #: else "reduces the last axis only"}
    predicates: Mapping[Op, Predicate] = field(default_factory=dict)
    #: the convolution layout the device's kernels run fastest in, e.g.
    #: ``ConvLayout(lhs="NSC", rhs="SIO", out="NSC")`` (NHWC, HWIO): the layout pass
    #: rewrites every claimed convolution into it, with as few transposes as it can
    #: (passes/conv_layout.py). None (default): each convolution keeps the program's layout.
    conv_layout: ConvLayout | None = None
    #: True: each lhs-dilated convolution (a strided convolution's input gradient) is split
    #: into ordinary convolutions of the undilated input, one per output phase, interleaved
    #: (passes/conv_phases.py), so that no multiply-add is spent on the dilation's holes;
    #: a split whose phase convolutions the device refuses is not made. False (default):
    #: the device gets the dilated convolution as written.
    conv_phase_split: bool = False

    def supports(self, node: Node) -> bool:
        """True if the device runs this node (see the class docstring). Prefer
        ``predicates`` to overriding this: an override cannot say why it refuses."""
        return self._refusal(node) is None

    def refusal(self, node: Node) -> str | None:
        """Why :meth:`supports` refuses ``node`` (None when it accepts it)."""
        if self.supports(node):
            return None
        return self._refusal(node) or (f"op '{node.op.value}' is refused by {type(self).__name__}.supports(), "
                                       f"which gives no reason (Capabilities.predicates can give one)")

    def bound(self, policy: FusionPolicy) -> FusionPolicy:
        """``policy`` narrowed to the fusions this device accepts: at most
        ``limits["max_fusion_nodes"]`` ops, and ``predicates[Op.FUSION]`` as a veto on each
        candidate (the core optimizes for a device under this policy)."""
        limit = min(self.limits.get("max_fusion_nodes", policy.max_fusion_nodes), policy.max_fusion_nodes)
        pred = self.predicates.get(Op.FUSION)
        veto = policy.veto if pred is None else functools.partial(_ask, pred)
        return replace(policy, max_fusion_nodes=limit, veto=veto)

    def _refusal(self, node: Node) -> str | None:
        if node.op in PLUMBING:
            return None
        if node.op is Op.FUSION:
            why = self._fusion_refusal(node)
        elif node.op not in self.ops:
            return f"op '{node.op.value}' is not in the device's capabilities"
        else:
            why = self._dtype_refusal(node) or self._body_refusal(node)
        pred = self.predicates.get(node.op)
        return why or (None if pred is None else _ask(pred, node))

    def _dtype_refusal(self, node: Node) -> str | None:
        allowed = self.op_dtypes.get(node.op, self.dtypes)
        types = [o.type for o in node.operands] + [node.type]
        if all(not isinstance(t, TensorType) or (t.dtype in allowed and t.dtype in self.dtypes) for t in types):
            return None  # (every node of every compile gets here: no sorted set when all is claimed)
        bad = sorted({t.dtype.value for t in types if isinstance(t, TensorType)
                      and (t.dtype not in allowed or t.dtype not in self.dtypes)})
        return f"op '{node.op.value}' is not claimed for dtype {', '.join(bad)}"

    def _body_refusal(self, node: Node) -> str | None:
        """A loop or conditional is claimed only with every node it runs (it runs whole on
        one device)."""
        if not node.traits.control:
            return None
        for comp in called_computations(node):
            for n in comp.nodes:
                why = None if n.op is Op.PARAMETER else self.refusal(n)
                if why:
                    return f"{node.op.value} runs {why}"
        return None

    def _fusion_refusal(self, node: Node) -> str | None:
        comp = node.attr["computation"]
        for n in comp.nodes:
            why = self.refusal(n)
            if why:
                return f"fusion holds {why}"
        limit = self.limits.get("max_fusion_nodes")
        size = fusion_size(comp)
        if limit is not None and size > limit:
            return f"the {node.attr['kind']} fusion has {size} ops, above the device's max_fusion_nodes={limit}"
        return None


def _ask(predicate: Predicate, node: Node) -> str | None:
    """A predicate's verdict on a node, checked: None or a non-empty reason."""
    try:
        why = predicate(node)
    except Exception as e:  # a plugin's bug, reported with the node it failed on
        raise BackendError(f"the device's capability predicate for op '{node.op.value}' raised "
                           f"{type(e).__name__}: {e} on {node.op.value} {node.type}") from e
    if why is None or (isinstance(why, str) and why):
        return why
    raise BackendError(f"the device's capability predicate for op '{node.op.value}' returned {why!r}: a predicate "
                       f"returns None to accept a node or a non-empty reason string to refuse it")


@dataclass(frozen=True)
class LoweringEntry:
    """One place where a backend lowers an op, for ``axle explain-op`` (optional, see
    :meth:`Backend.lowering_entries`).

    ``what`` says how, in one line. ``where`` names the code: a function, method or class
    as ``"package.module:Name.attr"`` (``".module:Name"`` is relative to the backend's
    package) or the object itself; its source is shown. With ``key`` (an ``Op``), ``where``
    names a dict keyed by op and only the entry for ``key`` is shown, with the functions it
    runs; a dict without that key is left out, so a backend may list every table an op
    could be in. Names are resolved when explain-op runs: listing them imports nothing."""

    what: str
    where: str | object
    key: Op | None = None


@dataclass(frozen=True)
class CompileOptions:
    """Options the core passes to ``Backend.compile``."""

    #: whether the module was optimized by the core pipeline (fusions present)
    optimized: bool = True
    #: free-form backend flags from AXLE_FLAGS (``--<backend>_<flag>=...``)
    flags: Mapping[str, str] = field(default_factory=dict)
    #: the SHA-256 (hex) of the module's text form when the persistent compile cache is on
    #: (else None): a backend may key what it caches on disk for the whole module by it
    #: (with its own code, flags and device) instead of describing the module again
    module_digest: str | None = None
    #: the core asked :meth:`Backend.cached_executable` for ``module_digest`` just before
    #: and got None: ``compile`` need not look the same entry up again (it may store one)
    cache_checked: bool = False


@dataclass(frozen=True, eq=False)
class Buffer:
    """An array living on a device. ``handle`` is whatever the backend uses (a NumPy array,
    a cl.Buffer, a pointer...); the core only passes it back to the same backend."""

    device: Device
    type: TensorType
    handle: Any
    #: eager dispatch's small int for (device, type), stamped on the buffer's dict by the
    #: frontend at its first eager use (frontend/eager.py ``_hot_id``); 0: not yet. Not a
    #: field: backends never set it.
    hot_id: ClassVar[int] = 0

    def __init__(self, device: Device, type: TensorType, handle: Any) -> None:  # noqa: A002 - the field's name (replace())
        # Written out: the generated frozen __init__ (an object.__setattr__ per field) took
        # a sixth of an eager op's dispatch, and every eager result makes one. Still frozen:
        # assignment raises; the instance dict is filled once, here.
        d = self.__dict__
        d["device"], d["type"], d["handle"] = device, type, handle

    def __getstate__(self) -> dict[str, Any]:
        # (pickle, copy, deepcopy) without the hot id: ids are this process's, and a
        # copy carried to another process would name another device and type there
        state = dict(self.__dict__)
        state.pop("hot_id", None)
        return state

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


class Executable(abc.ABC):
    """A compiled module, ready to run on one device."""

    @abc.abstractmethod
    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        """Runs the module on argument buffers (parameter order) and returns the result
        buffers (one per entry result; a tuple root gives several)."""

    def launcher(self) -> Callable[[Sequence[Buffer]], list[Buffer]] | None:
        """Optional: the eager hot path of this executable, or None (the default) to use
        :meth:`execute`. Eager dispatch compiles each op signature (op, attributes, operand
        types, device) once, runs it with ``execute``, then asks this once and calls what
        it returns for every later call of that signature with buffers of exactly the
        compiled parameter types on this device (the core checks that before the call). It
        may therefore skip ``execute``'s argument checks and bookkeeping (a NumPy backend
        returns the op's reference bound to its attributes; a kernel backend, the single
        launch with its arguments prepared), and must return the same results as
        ``execute``. The core calls ``execute`` instead while the profiler records."""
        return None

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
        """The ops and dtypes ``device`` runs; the default claims every primitive but the
        extended ones, which the core then expands into their decompositions, over the
        contract's first dtypes (:attr:`Capabilities.dtypes`)."""
        return Capabilities()

    @abc.abstractmethod
    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        """Compiles an (optimized) module for ``device``."""

    def cached_executable(self, device: Device, options: CompileOptions) -> Executable | None:
        """Optional: the executable of the optimized module whose text has SHA-256
        ``options.module_digest`` from this backend's own persistent cache, made without the
        module, or None (the default: the core then reads the module back and calls
        :meth:`compile`). The core asks this on a hit of its optimized-module cache, before
        parsing the module: a backend that keeps everything its executable needs (a kernel
        plan, compiled code) under the digest makes a new process's first call skip the
        parse too. Whatever it loads must be validated as ``compile``'s own cache reads are
        (a damaged entry is None, never a wrong executable)."""
        return None

    @abc.abstractmethod
    def to_device(self, array: np.ndarray, device: Device) -> Buffer:
        """Copies a host array to the device."""

    @abc.abstractmethod
    def to_host(self, buffer: Buffer) -> np.ndarray:
        """Copies a device buffer back to a host array (waiting for pending work)."""

    def free(self, buffer: Buffer) -> None:  # noqa: B027 - optional: a no-op unless the backend frees early
        """Releases a buffer early (otherwise garbage collection does)."""

    def passes(self) -> list[Pass]:
        """Target-specific passes appended to the core pipeline."""
        return []

    def fusion_policy(self) -> Any:
        """The fusion policy (see axle.passes.fusion.FusionPolicy); None = core default."""
        return None

    def device_priority(self, device: Device) -> int:
        """Priority of one device for the default-device choice (e.g. GPUs above CPUs)."""
        return self.priority

    def synchronize(self, device: Device) -> None:  # noqa: B027 - optional: a no-op for synchronous backends
        """Waits until all work queued on ``device`` has finished."""

    def lowering_entries(self, op: Op) -> Sequence[LoweringEntry]:
        """Where and how this backend lowers ``op``: its op-table entries and the functions
        that emit the code, shown by ``axle explain-op`` and docs/ops/. Optional; the
        default (empty) reads "not described"."""
        return []

    def batched_builds(self, device: Device) -> AbstractContextManager[None] | None:
        """Optional: a context in which ``compile`` (in the thread that entered it) only
        plans: the executables it returns are placeholders that never run, and what their
        native builds need (an OpenCL backend's kernels) is gathered; leaving the context
        builds all of it together (one toolchain invocation instead of one per module)
        into the backend's own caches, so that compiling the same modules again afterwards
        builds nothing. For callers about to compile many small modules one at a time,
        where the toolchain's fixed cost per invocation dominates (the conformance kit:
        ``axle.testing.prebuild``). A batch that fails to build caches nothing:
        each module's own compile then builds, and reports a failure, as it would without
        the batch. None (the default): the backend does not batch (nothing is compiled
        ahead)."""
        return None
