"""Structured control flow for traced programs: ``while_loop``, ``fori_loop``, ``scan``,
``cond``, ``switch`` and ``map`` (exported as ``axle.lax.*``), staged as the IR's ``while``
and ``conditional`` ops.

Each user function is traced once into a sub-computation (a :class:`SubTrace`). Values it
closes over from an enclosing trace become extra operands: a loop carries them through
unchanged, every branch takes them all. Outside any trace (eager), the construct is traced
into a jit function, compiled and run once, as jax does."""
from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError, TracingError
from ..ir.builder import make_node
from ..ir.computation import inline
from ..ir.dtypes import DType
from ..ir.dtypes import dtype as to_dtype
from ..ir.literal import Literal
from ..ir.module import Computation, Node
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType
from .array import Array
from .bind import bind
from .pytree import TreeDef, flatten, unflatten
from .source import user_location
from .tracing import Trace, Tracer, current_trace, trace_context

#: the outputs of ``axle.custom_jvp`` calls traced into a sub-computation (as the
#: function's primitives), by node: replayed by :func:`call_computation` inside a
#: transformation, ``replay(n, env)`` calls the function again there so that its rule
#: applies (autodiff/custom.py); None where it does not apply
CUSTOM_OUTPUTS: weakref.WeakKeyDictionary[Node, Any] = weakref.WeakKeyDictionary()


def _custom_copied(comp: Computation, copies: dict[int, Node]) -> None:
    """``comp`` spliced in (``copies``: its nodes' copies): the custom_jvp outputs' copies
    are custom_jvp outputs too."""
    if not CUSTOM_OUTPUTS:
        return
    for n in comp.nodes:
        hook = CUSTOM_OUTPUTS.get(n)
        if hook is not None and copies[n.uid] is not n:
            CUSTOM_OUTPUTS[copies[n.uid]] = hook.moved(copies)


class SubTrace(Trace):
    """The trace of one loop body, condition or branch, nested in ``parent``: its first
    parameters are ``in_types``; a value of an enclosing trace it reads becomes a further
    parameter (``captured`` lists those values, as values of ``parent``)."""

    def __init__(self, parent: Trace, name: str, in_types: Sequence[TensorType],
                 seeded: Sequence[Tracer] = ()) -> None:
        super().__init__(name)
        self.parent = parent
        self.captured: list[Tracer] = []
        self._params: dict[int, Node] = {}  # parent node uid -> its parameter here
        self.args = [Tracer(self, self.builder.parameter(t, name=f"arg{i}")) for i, t in enumerate(in_types)]
        for x in seeded:
            self.capture(x)

    def capture(self, x: Tracer) -> Node:
        """The parameter standing for ``x``, a value of ``parent`` (made on first use)."""
        p = self._params.get(x.node.uid)
        if p is None:
            p = self.builder.parameter(x.aval, name=f"captured{len(self.captured)}")
            self._params[x.node.uid] = p
            self.captured.append(x)
        return p

    def to_node(self, x: Any, fn: str = "jit") -> Node:
        if isinstance(x, Tracer) and x.trace is not self:
            outer = _lift(self.parent, x)
            if outer is not None:
                return self.capture(outer)
        return super().to_node(x, fn)

    def computation(self, root: Node) -> Computation:
        return Computation(self.builder.name, tuple(self.builder.params), root)


def _lift(trace: Trace, x: Tracer) -> Tracer | None:
    """``x`` as a value of ``trace`` (captured through every trace in between), or None
    when ``x`` belongs to no trace enclosing it."""
    if x.trace is trace:
        return x
    if isinstance(trace, SubTrace):
        outer = _lift(trace.parent, x)
        return None if outer is None else Tracer(trace, trace.capture(outer))
    # an outermost trace: jit's refuses a value of no enclosing trace; autodiff's private
    # trace makes a value of the caller's trace one of its inputs
    return Tracer(trace, trace.to_node(x))


def _complete(traces: Sequence[SubTrace]) -> list[Tracer]:
    """Gives every trace the parameters of all values any of them captured (the last one
    was seeded with the others' captures); returns those values, in parameter order."""
    everything = traces[-1].captured
    for t in traces[:-1]:
        for x in everything[len(t.captured):]:
            t.capture(x)
    return list(everything)


def _where(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__name__", type(fn).__name__)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code is not None else name


def results_of(root: Node) -> list[Node]:
    """A computation root's values: a tuple's elements (roots built here are tuples)."""
    return list(root.operands) if root.op is Op.TUPLE else [root]


def _types_text(types: Sequence[TensorType]) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def _leaf_node(trace: Trace, x: Any, want: TensorType | None, what: str) -> Node:
    """A returned leaf as a node of ``trace``; a Python scalar takes the dtype ``want`` asks
    (as a weakly typed value does in jax), any other value keeps its own."""
    if want is not None and isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        x = np.asarray(x, dtype=want.dtype.np)
    return trace.to_node(x, what)


def _trace_fn(sub: SubTrace, fn: Callable[..., Any], args: Any, want: Sequence[TensorType] | None,
              what: str) -> tuple[list[Node], TreeDef]:
    """Runs ``fn(*args)`` inside ``sub``; its results' nodes and structure."""
    with trace_context(sub):
        out = fn(*args)
        leaves, tree = flatten(out)
        fits = want is not None and len(want) == len(leaves)
        wants: Sequence[TensorType | None] = want if fits and want is not None else [None] * len(leaves)
        nodes = [_leaf_node(sub, x, w, what) for x, w in zip(leaves, wants)]
    return nodes, tree


def _tensor_types(nodes: Sequence[Node]) -> list[TensorType]:
    return [n.tensor_type for n in nodes]


def _parent_and_nodes(leaves: Sequence[Any], what: str) -> tuple[Trace, list[Node]]:
    trace = current_trace()
    assert trace is not None, "called outside a trace: the eager path wraps it in jit"
    return trace, [trace.to_node(x, what) for x in leaves]


#: how a construct called outside any trace runs: ``axle.jit`` (frontend/jit.py sets it;
#: jit imports what imports lax, so lax's control flow cannot import jit)
EAGER_JIT: list[Callable[..., Any]] = []


def _staged(impl: Callable[..., Any], *args: Any) -> Any:
    """``impl(*args)`` in the current trace; outside one (eager), traced into a jit
    function over the array leaves of ``args`` and run once (compiled, as jax does)."""
    if current_trace() is not None or any(isinstance(x, Tracer) for x in flatten(list(args))[0]):
        return impl(*args)
    leaves, tree = flatten(list(args))
    arrays = [i for i, x in enumerate(leaves) if isinstance(x, (Array, np.ndarray, np.generic))]

    def run(*xs: Any) -> Any:
        full = list(leaves)
        for i, x in zip(arrays, xs):
            full[i] = x
        return impl(*unflatten(tree, full))

    return EAGER_JIT[0](run)(*[leaves[i] for i in arrays])


def bind_control(op: Op, operands: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """Applies a loop or conditional node's op to values (a replay, as autodiff's): a tuple
    of values for a tuple result, else one value; eagerly, as a jit function."""
    def impl(*xs: Any) -> Any:
        trace = current_trace()
        assert trace is not None
        node = make_node(op, [trace.to_node(x, op.value) for x in xs], attrs, loc=user_location())
        if not isinstance(node.type, TupleType):
            return Tracer(trace, node)
        return tuple(Tracer(trace, make_node(Op.GET_TUPLE_ELEMENT, [node], {"index": i}))
                     for i in range(len(node.type.elements)))

    return _staged(impl, *operands)


def call_computation(comp: Computation, args: Sequence[Any]) -> list[Any]:
    """``comp`` applied to values op by op with ``bind`` in the caller's mode (traced,
    eager or lazy), as autodiff replays a graph; returns the root's values."""
    env: dict[int, Any] = {p.uid: a for p, a in zip(comp.parameters, args, strict=True)}
    for n in comp.nodes:
        if n.uid in env:
            continue
        operands = [env[o.uid] for o in n.operands]
        if n.op is Op.CONSTANT:
            env[n.uid] = np.asarray(n.attr["value"].array)
        elif n.op is Op.TUPLE:
            env[n.uid] = tuple(operands)
        elif n.op is Op.GET_TUPLE_ELEMENT and isinstance(operands[0], tuple):
            env[n.uid] = operands[0][n.attr["index"]]
        elif n.traits.control:
            env[n.uid] = bind_control(n.op, operands, n.attr)
        elif CUSTOM_OUTPUTS and n in CUSTOM_OUTPUTS and (v := CUSTOM_OUTPUTS[n].replay(n, env)) is not None:
            env[n.uid] = v
        else:
            env[n.uid] = bind(n.op, *operands, **n.attr)
    out = env[comp.root.uid]
    return list(out) if isinstance(out, tuple) else [out]


_PRED = TensorType(DType.BOOL, ())


def _false() -> Node:
    return make_node(Op.CONSTANT, (), {"value": Literal(np.asarray(False))})


def _add_checks(trace: Trace, flags: Sequence[Any], checks: Sequence[tuple[Any, str, str | None]]) -> None:
    """Index checks (--check_indices) found inside a sub-computation, as flags of ``trace``."""
    for flag, (_, message, where) in zip(flags, checks, strict=True):
        trace.index_checks.append((flag, message, where))


# ----------------------------------------------------------------------------- loops


def _check_carry(name: str, fn: Callable[..., Any], in_tree: TreeDef, in_types: Sequence[TensorType],
                 out_tree: TreeDef, out_types: Sequence[TensorType]) -> None:
    if out_tree is not in_tree or list(out_types) != list(in_types):
        raise TracingError(f"{name}: the body {_where(fn)} must return a carry of the same structure and types "
                           f"as its input: it takes {in_tree} {_types_text(in_types)} and returns {out_tree} "
                           f"{_types_text(out_types)}", where=user_location())


def _while_impl(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any,
                name: str = "while_loop", user_body: Callable[..., Any] | None = None) -> Any:
    """The loop staged in the current trace; errors name ``user_body`` (the function the
    user wrote, when ``body_fun`` wraps it)."""
    leaves, tree = flatten(init_val)
    parent, init = _parent_and_nodes(leaves, name)
    types = _tensor_types(init)
    body = SubTrace(parent, "body", types)
    outs, out_tree = _trace_fn(body, lambda *xs: body_fun(unflatten(tree, list(xs))), body.args, types, name)
    _check_carry(name, user_body or body_fun, tree, types, out_tree, _tensor_types(outs))
    cond = SubTrace(parent, "cond", types, seeded=body.captured)
    (pred, *extra), _ = _trace_fn(cond, lambda *xs: cond_fun(unflatten(tree, list(xs))), cond.args, None, name)
    if extra or pred.type != TensorType(DType.BOOL, ()):
        got = _types_text(_tensor_types([pred, *extra]))
        raise TracingError(f"{name}: the condition {_where(cond_fun)} must return one pred[] (a bool scalar), "
                           f"it returns {got}", where=user_location())
    captured = _complete([body, cond])
    passed = [body.capture(x) for x in captured]  # the body passes closed-over values through
    # --check_indices flags of the body: extra pred[] carries after the captured values,
    # false at first and or-ed every trip, checked after the loop as the body's own
    checks = body.index_checks
    flag_params = [body.builder.parameter(_PRED, name=f"out_of_range{k}") for k in range(len(checks))]
    for _ in checks:
        cond.builder.parameter(_PRED)
    flags = [make_node(Op.OR, [p, body.to_node(flag)]) for p, (flag, _, _) in zip(flag_params, checks)]
    body_comp = body.computation(make_node(Op.TUPLE, outs + passed + flags))
    operands = init + [x.node for x in captured] + [_false() for _ in checks]
    loop = make_node(Op.WHILE, operands, {"condition": cond.computation(pred), "body": body_comp},
                     loc=user_location())
    values = [Tracer(parent, make_node(Op.GET_TUPLE_ELEMENT, [loop], {"index": i})) for i in range(len(operands))]
    _add_checks(parent, values[len(init) + len(captured):], checks)
    return unflatten(tree, values[:len(init)])


def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any) -> Any:
    """Repeats ``val = body_fun(val)`` while ``cond_fun(val)`` is true; returns the final
    ``val`` (any pytree of arrays; the body must keep its structure and types)."""
    return _staged(_while_impl, cond_fun, body_fun, init_val)


def _is_static_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _value(x: Any) -> Any:
    """An array-like with ``shape`` and ``dtype``: a traced or device array as it is, else NumPy."""
    return x if isinstance(x, (Tracer, Array)) else np.asarray(x)


def _as_dtype(x: Any, dt: np.dtype) -> Any:
    if np.dtype(x.dtype) == dt:
        return x
    return bind(Op.CONVERT, x, dtype=to_dtype(dt))


def _fori_impl(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    if _is_static_int(lower) and _is_static_int(upper):
        lo, hi = np.int32(lower), np.int32(upper)
    else:
        lo, hi = _value(lower), _value(upper)
        # a Python int bound is weakly typed: it takes the traced bound's dtype
        kinds = [np.dtype(b.dtype) for b, raw in ((lo, lower), (hi, upper)) if not _is_static_int(raw)]
        dt = np.result_type(*kinds)
        if dt.kind not in "iu" or lo.shape != () or hi.shape != ():
            raise TracingError(f"fori_loop: the bounds must be integer scalars, got {np.dtype(lo.dtype)}"
                               f"{list(lo.shape)} and {np.dtype(hi.dtype)}{list(hi.shape)}", where=user_location())
        lo, hi = _as_dtype(lo, dt), _as_dtype(hi, dt)

    def cond(carry: Any) -> Any:
        return carry[0] < hi

    def body(carry: Any) -> Any:
        i, x = carry
        return i + 1, body_fun(i, x)

    return _while_impl(cond, body, (lo, init_val), name="fori_loop", user_body=body_fun)[1]


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    """``for i in range(lower, upper): val = body_fun(i, val)``; the bounds may be Python
    ints or traced integer scalars."""
    return _staged(_fori_impl, lower, upper, body_fun, init_val)


# ----------------------------------------------------------------------------- scan


def _read_row(xs: Any, i: Any) -> Any:
    """``xs[i]`` along axis 0 for a traced ``i``: a dynamic slice of one row (O(row))."""
    zero = np.zeros((), np.int32)
    row = bind(Op.DYNAMIC_SLICE, xs, i, *([zero] * (len(xs.shape) - 1)), slice_sizes=(1,) + tuple(xs.shape[1:]))
    return bind(Op.RESHAPE, row, shape=tuple(xs.shape[1:]))


def _write_row(ys: Any, i: Any, y: Any) -> Any:
    """``ys`` with row ``i`` (traced) replaced by ``y``: a dynamic update slice, which
    buffer assignment can run in place on the carried ``ys``."""
    zero = np.zeros((), np.int32)
    row = bind(Op.RESHAPE, y, shape=(1,) + tuple(ys.shape[1:]))
    return bind(Op.DYNAMIC_UPDATE_SLICE, ys, row, i, *([zero] * (len(ys.shape) - 1)))


def _scan_length(xs_leaves: Sequence[Any], length: int | None) -> int:
    lengths = {int(x.shape[0]) if getattr(x, "shape", ()) else -1 for x in xs_leaves}
    if -1 in lengths:
        raise ShapeError("scan: every leaf of xs needs a leading axis to scan over; got a scalar",
                         where=user_location())
    if length is not None:
        lengths.add(int(length))
    if len(lengths) > 1:
        raise ShapeError(f"scan: xs leaves and length disagree on the number of steps: {sorted(lengths)}",
                         where=user_location())
    if not lengths:
        raise ShapeError("scan: give xs or length", where=user_location())
    return lengths.pop()


def _scan_impl(f: Callable[[Any, Any], Any], init: Any, xs: Any, length: int | None, reverse: bool,
               unroll: int) -> Any:
    xs_leaves, xs_tree = flatten(xs)
    n = _scan_length(xs_leaves, length)
    c_leaves, c_tree = flatten(init)
    parent, c_nodes = _parent_and_nodes(c_leaves, "scan")
    c_types = _tensor_types(c_nodes)
    xs_vals = [Tracer(parent, parent.to_node(x, "scan")) for x in xs_leaves]
    x_types = [TensorType(t.dtype, t.shape[1:]) for t in _tensor_types([x.node for x in xs_vals])]
    # f is traced once, into a computation over (carry, x, captured...); each step splices it in.
    fn = SubTrace(parent, "scan_step", c_types + x_types)
    k = len(c_types)
    outs, out_tree = _trace_fn(fn, lambda *a: f(unflatten(c_tree, list(a[:k])), unflatten(xs_tree, list(a[k:]))),
                               fn.args, None, "scan")
    if out_tree.kind != "tuple" or len(out_tree.children) != 2:
        raise TracingError(f"scan: {_where(f)} must return a pair (carry, y), it returns {out_tree}",
                           where=user_location())
    c_out_tree, y_tree = out_tree.children
    ncarry = c_out_tree.num_leaves
    _check_carry("scan", f, c_tree, c_types, c_out_tree, _tensor_types(outs[:ncarry]))
    y_types = _tensor_types(outs[ncarry:])
    step_comp = fn.computation(make_node(Op.TUPLE, outs + [fn.to_node(flag) for flag, _, _ in fn.index_checks]))
    captured = list(fn.captured)

    def step(i: Any, carry: list[Any], ys: list[Any]) -> tuple[list[Any], list[Any]]:
        trace = current_trace()
        assert trace is not None
        j = (n - 1) - i if reverse else i
        args = [trace.to_node(v, "scan") for v in carry + [_read_row(v, j) for v in xs_vals] + captured]
        copies: dict[int, Node] = {}
        res = [Tracer(trace, r) for r in results_of(inline(step_comp, args, copies))]
        _custom_copied(step_comp, copies)
        _add_checks(trace, res[len(outs):], fn.index_checks)
        return res[:ncarry], [_write_row(b, j, v) for b, v in zip(ys, res[ncarry:len(outs)])]

    def body(state: tuple[Any, list[Any], list[Any]]) -> tuple[Any, list[Any], list[Any]]:
        i, carry, ys = state
        for k in range(unroll):
            carry, ys = step(i + k if k else i, carry, ys)
        return i + unroll, carry, ys  # one add per trip: a counted loop (static_trip_count)

    unroll = max(1, int(unroll))
    trips, rest = divmod(n, unroll)
    ys0 = [bind(Op.BROADCAST_IN_DIM, np.zeros((), t.dtype.np), shape=(n,) + t.shape, broadcast_dimensions=())
           for t in y_types]
    state: Any = (np.int32(0), [Tracer(parent, c) for c in c_nodes], ys0)
    if trips:
        state = _while_impl(lambda s: s[0] < np.int32(trips * unroll), body, state, name="scan", user_body=f)
    i, carry, ys = state
    for _ in range(rest):  # the steps unroll leaves over, straight-line after the loop
        carry, ys = step(i, carry, ys)
        i = i + 1
    return unflatten(c_out_tree, carry), unflatten(y_tree, ys)


def scan(f: Callable[[Any, Any], Any], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int = 1) -> Any:
    """``carry, y = f(carry, x)`` for each ``x`` along axis 0 of ``xs`` (a pytree); returns
    the final carry and the ``y``s stacked along a new axis 0. ``length`` gives the step
    count when ``xs`` is None; ``reverse`` scans from the end; ``unroll`` steps per loop
    iteration."""
    return _staged(lambda fn, c, x: _scan_impl(fn, c, x, length, reverse, unroll), f, init, xs)


def map(f: Callable[[Any], Any], xs: Any) -> Any:  # noqa: A001 - jax's name
    """``f`` applied to each slice of ``xs`` along axis 0, results stacked (a scan with no carry)."""
    return scan(lambda c, x: (c, f(x)), (), xs)[1]


# ----------------------------------------------------------------------------- branches


def _switch_impl(index: Any, branches: Sequence[Callable[..., Any]], operands: tuple[Any, ...],
                 name: str = "switch", pred: bool = False) -> Any:
    leaves, tree = flatten(list(operands))
    parent, nodes = _parent_and_nodes(leaves, name)
    types = _tensor_types(nodes)
    traces: list[SubTrace] = []
    results: list[tuple[list[Node], TreeDef]] = []
    for k, branch in enumerate(branches):
        sub = SubTrace(parent, f"branch{k}", types, seeded=traces[-1].captured if traces else ())
        results.append(_trace_fn(sub, lambda *xs, b=branch: b(*unflatten(tree, list(xs))), sub.args, None, name))
        traces.append(sub)
    first_nodes, first_tree = results[0]
    for (outs, out_tree), branch in zip(results[1:], branches[1:]):
        if out_tree is not first_tree or _tensor_types(outs) != _tensor_types(first_nodes):
            raise TracingError(f"{name}: the branches must return the same structure and types: {_where(branches[0])} "
                               f"returns {first_tree} {_types_text(_tensor_types(first_nodes))}, {_where(branch)} "
                               f"returns {out_tree} {_types_text(_tensor_types(outs))}", where=user_location())
    captured = _complete(traces)
    # --check_indices flags of every branch: extra pred[] results (false in the other branches)
    checks = [(k, c) for k, t in enumerate(traces) for c in t.index_checks]
    comps = tuple(t.computation(make_node(Op.TUPLE, outs + [t.to_node(c[0]) if j == k else _false()
                                                            for j, c in checks]))
                  for k, (t, (outs, _)) in enumerate(zip(traces, results)))
    idx = parent.to_node(index, name)
    node = make_node(Op.CONDITIONAL, [idx] + nodes + [x.node for x in captured], {"branches": comps},
                     loc=user_location())
    n_out = len(first_nodes) + len(checks)
    values = [Tracer(parent, make_node(Op.GET_TUPLE_ELEMENT, [node], {"index": i})) for i in range(n_out)]
    _add_checks(parent, values[len(first_nodes):], [c for _, c in checks])
    return unflatten(first_tree, values[:len(first_nodes)])


def _index_value(index: Any, n: int) -> Any:
    """The branch index as an s32 scalar clamped to [0, n) (jax's switch clamps)."""
    i = _value(index)
    if i.shape != () or np.dtype(i.dtype).kind not in "iub":
        raise TracingError(f"switch: the index must be an integer scalar, got {np.dtype(i.dtype)}{list(i.shape)}",
                           where=user_location())
    wide = bind(Op.CONVERT, i, dtype=DType.INT64)
    clamped = bind(Op.MAX, bind(Op.MIN, wide, np.int64(n - 1)), np.int64(0))
    return bind(Op.CONVERT, clamped, dtype=DType.INT32)


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """``branches[index](*operands)``, the index clamped to the valid range; every branch
    must return the same structure and types."""
    branches = list(branches)
    if not branches:
        raise TracingError("switch: needs at least one branch", where=user_location())
    return _staged(lambda i, *ops: _switch_impl(_index_value(i, len(branches)), branches, ops), index, *operands)


def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any) -> Any:
    """``true_fun(*operands)`` if ``pred`` (a bool scalar) else ``false_fun(*operands)``."""
    def impl(p: Any, *ops: Any) -> Any:
        p = _value(p)
        if p.shape != ():
            raise TracingError(f"cond: the predicate must be a scalar, got shape {list(p.shape)}",
                               where=user_location())
        if np.dtype(p.dtype) != np.bool_:
            p = bind(Op.COMPARE, p, np.zeros((), p.dtype), direction="ne")
        return _switch_impl(p, [false_fun, true_fun], ops, name="cond")

    return _staged(impl, pred, *operands)


__all__ = ["while_loop", "fori_loop", "scan", "map", "cond", "switch", "SubTrace"]
