"""The ``interpreter`` backend: runs any module with the NumPy reference interpreter.

It is the oracle for every other backend and the host fallback of partial backends.
Its buffers are host NumPy arrays, so transfers are copies and execution is exact
reference semantics."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import profiler
from ..backend import Backend, Buffer, Capabilities, CompileOptions, Device, Executable, LoweringEntry
from ..interpreter import _check_input, eval_node, evaluate
from ..ir.dtypes import ALL_DTYPES, DType, dtype
from ..ir.module import Module, Node
from ..ir.ops import CONTROL_OPS, CORE_PRIMITIVES, OPS, Op
from ..ir.reductions import REDUCE_KINDS
from ..ir.types import TensorType

#: entry nodes that are plumbing, not a launch (a kernel per other node, fusions included)
_NOT_LAUNCHED = (Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.CONSTANT)


# ------------------------------------------------------------- eager hot path
# An eager op's whole budget is a few microseconds; the op table's references re-derive
# per call what the node fixes (a reduction's identity and accumulator, a dot's einsum
# spec and contraction path) and enter np.errstate (a microsecond by itself). For the
# common cases below the launcher binds, once, the very NumPy calls the reference makes
# for the node's attributes and operand dtypes, so results are bit-identical (checked
# against the references by tests/core/test_interpreter_launcher.py); anything else runs
# the reference itself.

#: NumPy 2's floating-point error state is a context variable: setting it to a state built
#: once is what np.errstate(all="ignore") does, less rebuilding that state on each call
#: (None on NumPy 1: the fast forms are then not used)
_ERRORS: tuple[Any, Any] | None
try:
    from numpy._core._ufunc_config import _extobj_contextvar  # type: ignore[attr-defined]  # private, checked

    with np.errstate(all="ignore"):
        _ERRORS = (_extobj_contextvar, _extobj_contextvar.get())
except (ImportError, AttributeError):  # NumPy 1.x
    _ERRORS = None

#: elementwise ops whose reference is this ufunc on operands of these dtypes (the
#: reference's bfloat16/float16 widening and result cast change nothing for them)
_UFUNCS: dict[Op, tuple[np.ufunc, frozenset[DType]]] = {
    **{op: (f, frozenset({DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64}))
       for op, f in ((Op.ADD, np.add), (Op.SUB, np.subtract), (Op.MUL, np.multiply), (Op.NEG, np.negative))},
    **{op: (f, frozenset({DType.FLOAT32, DType.FLOAT64}))
       for op, f in ((Op.EXP, np.exp), (Op.LOG, np.log), (Op.SQRT, np.sqrt), (Op.TANH, np.tanh),
                     (Op.SIN, np.sin), (Op.COS, np.cos))},
}


def _exact_ufunc(node: Node) -> Callable[..., Any] | None:
    f, dts = _UFUNCS[node.op]
    ok = all(o.dtype in dts and o.dtype is node.dtype for o in node.operands)
    return f if ok else None


def _exact_reduce(node: Node) -> Callable[..., Any] | None:
    """ops._reduce without its per-call dtype decisions: sums and products, and integer
    max/min (float max/min fix up signed zeros), that need no widened accumulator."""
    d = node.operands[0].dtype
    rk = REDUCE_KINDS[node.attr["kind"]]
    if rk.accumulator(d) is not d or d is DType.BFLOAT16 or rk.name in ("max", "min") and d.is_float:
        return None
    reduce, axes, ident, np_dt = rk.ufunc.reduce, tuple(node.attr["axes"]), rk.identity(d), d.np
    return lambda x: np.asarray(reduce(x, axis=axes, initial=ident)).astype(np_dt)


def _exact_matmul(node: Node) -> Callable[..., Any] | None:
    """ops._dot_general of two float32/float64 matrices (lhs [m,k], rhs [k,n]): its
    einsum "ab,bc->ac" with optimize=True runs tensordot(rhs, lhs), that is
    dot(rhs.T, lhs.T), and transposes that back; then adds +0 (no -0 sums)."""
    lhs, rhs = (o.tensor_type for o in node.operands)
    a = node.attr
    if (lhs.dtype not in (DType.FLOAT32, DType.FLOAT64) or rhs.dtype is not lhs.dtype or len(lhs.shape) != 2
            or len(rhs.shape) != 2 or a.get("preferred_element_type") is not None or a.get("lhs_batch")
            or a.get("rhs_batch") or tuple(a["lhs_contracting"]) != (1,) or tuple(a["rhs_contracting"]) != (0,)):
        return None
    zero, dot = lhs.dtype.np.type(0), np.dot
    return lambda x, y: dot(y.T, x.T).T + zero


#: per op, the exact fast form of its reference for a node, or None where there is none
_EXACT: dict[Op, Callable[[Node], Callable[..., Any] | None]] = {
    **{op: _exact_ufunc for op in _UFUNCS},
    Op.REDUCE: _exact_reduce,
    Op.DOT_GENERAL: _exact_matmul,
}


class InterpreterExecutable(Executable):
    def __init__(self, module: Module, device: Device) -> None:
        self.module = module
        self.device = device
        self._kernels = sum(1 for n in module.entry.nodes if n.op not in _NOT_LAUNCHED)

    def _evaluate_profiled(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Like ``evaluate``, but one timeline kernel event per launched node, named as
        the printed module names it (``fusion.3 [add, multiply, reduce]``)."""
        comp = self.module.entry
        names = profiler.kernel_names(self.module)
        env: dict[int, Any] = {p.uid: _check_input(p, a) for p, a in zip(comp.parameters, args, strict=True)}
        for n in comp.nodes:
            if n.op is Op.PARAMETER:
                continue
            t0 = profiler.now_us()
            env[n.uid] = eval_node(n, [env[o.uid] for o in n.operands])
            if n.op not in _NOT_LAUNCHED:
                profiler.kernel_event(names[n.uid], self.device.name, t0,
                                      profiler.now_us() - t0, module=self.module.name, op=n.op.value)
        out = env[comp.root.uid]
        return list(out) if isinstance(out, tuple) else [out]

    def execute(self, args: Sequence[Buffer]) -> list[Buffer]:
        if profiler.enabled():
            outs = self._evaluate_profiled([np.asarray(a.handle) for a in args])
        else:
            outs = evaluate(self.module, *[a.handle for a in args])
        types = self.module.entry.result_types
        return [Buffer(self.device, t, o) for t, o in zip(types, outs)]  # type: ignore[arg-type]  # results are arrays

    def launcher(self) -> Callable[[Sequence[Buffer]], list[Buffer]] | None:
        """A one-op module (eager dispatch's): the op's reference bound to its attributes,
        on the arguments as they are (the core guarantees their types). ``evaluate`` would
        only add the checks of those types and a walk over one node."""
        comp = self.module.entry
        node = comp.root
        if (node.op is Op.FUSION or node.traits.control or not isinstance(node.type, TensorType)
                or node.operands != comp.parameters or type(self).execute is not InterpreterExecutable.execute):
            return None  # (a subclass that runs differently, e.g. a test's asynchronous device: its execute)
        device, t = self.device, node.type
        shape, dt = t.shape, t.dtype.np
        bind = _EXACT.get(node.op)
        fast = bind(node) if bind is not None else None
        if fast is not None and _ERRORS is not None:
            var, ignore = _ERRORS

            def run_fast(args: Sequence[Buffer]) -> list[Buffer]:
                token = var.set(ignore)  # the reference's np.errstate(all="ignore"), prebuilt
                try:
                    out = np.asarray(fast(*[a.handle for a in args]))
                finally:
                    var.reset(token)
                return [Buffer(device, t, out)]

            return run_fast
        ref, kwargs = OPS[node.op].reference, dict(node.attrs)

        def run(args: Sequence[Buffer]) -> list[Buffer]:
            out = np.asarray(ref(*[a.handle for a in args], **kwargs))
            assert out.shape == shape and out.dtype == dt, (
                f"reference of {node.op.value} returned {out.dtype}{list(out.shape)}, expected {t}")
            return [Buffer(device, t, out)]

        return run

    def report(self) -> dict[str, Any]:
        return {"kernels": self._kernels}


class InterpreterBackend(Backend):
    name = "interpreter"
    priority = 0

    def __init__(self) -> None:
        self._device = Device("interpreter", 0, "NumPy reference interpreter", kind="host")

    def devices(self) -> Sequence[Device]:
        return [self._device]

    def capabilities(self, device: Device) -> Capabilities:
        """Every op of the table, loops, conditionals and extended ops (gather, scatter...)
        included, in every dtype of the IR: it is the host fallback that runs what no other
        device claims, each op by its reference."""
        return Capabilities(ops=CORE_PRIMITIVES | CONTROL_OPS, dtypes=frozenset(ALL_DTYPES))

    def compile(self, module: Module, device: Device, options: CompileOptions) -> Executable:
        return InterpreterExecutable(module, device)

    def lowering_entries(self, op: Op) -> list[LoweringEntry]:
        return [LoweringEntry("runs the op table's NumPy reference (shown above) on each node",
                              "axle.interpreter:eval_node")]

    def to_device(self, array: np.ndarray, device: Device) -> Buffer:
        arr = np.array(array, copy=True, order="C")
        return Buffer(device, TensorType(dtype(arr.dtype), arr.shape), arr)

    def to_host(self, buffer: Buffer) -> np.ndarray:
        return buffer.handle
