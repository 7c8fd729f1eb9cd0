"""``axle.vmap``: vectorizing a function over a batch axis.

The function is traced once over one example's types (capture.py); the graph is then
replayed in the caller's mode with batched values, each primitive that meets a batched
operand going through its batching rule (batching.py). The result is one batched
computation: under ``jit`` the number of kernels does not depend on the batch size.
Inside the replay every batched value carries its batch as dimension 0; ``in_axes`` are
moved there on entry and the batch is moved to ``out_axes`` on exit.

Transformations nest because the replay calls ``bind`` in the caller's mode:
``vmap(grad(f))`` traces grad's forward and backward into the graph and batches both,
``vmap(vmap(f))`` batches the inner vmap's batched graph again, ``jit(vmap(f))`` stages
the batched computation into the jit trace.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import lax
from .. import numpy as anp
from ..errors import ArgumentError, ShapeError, TracingError
from ..frontend import checks
from ..frontend.array import Array
from ..frontend.pytree import TreeDef, broadcast_prefix, flatten, unflatten
from ..frontend.source import user_location
from ..frontend.tracing import Tracer, aval_of, leaf_aval
from ..ir.ops import Op
from ..ir.types import TensorType, TupleType
from .batching import BATCH, batched_like, move_axis
from .capture import Graph, apply, constant_of, trace_graph
from .collective_rules import reads_replicas, replica_batch_rules, replicas_as_batch
from .control_batching import VMAP_FN

__all__ = ["vmap", "vmap_replicas"]

Axis = int | None


def _is_axis(p: Any) -> bool:
    return p is None or (isinstance(p, (int, np.integer)) and not isinstance(p, (bool, np.bool_)))


def _axes_per_leaf(spec: Any, td: TreeDef, what: str) -> list[Axis]:
    try:
        axes = broadcast_prefix(spec, td, what, _is_axis)
    except ArgumentError as e:
        raise ArgumentError(e.message + "; give an int, None, or a tree of them matching the structure",
                            where=user_location()) from None
    return [None if a is None else int(a) for a in axes]


def _in_axes(in_axes: Any, args_tree: TreeDef, what: str = "vmap") -> list[Axis]:
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)  # a list at the top names the arguments, as a tuple does
    if isinstance(in_axes, tuple) and len(in_axes) != len(args_tree.children):
        raise ArgumentError(f"{what}: in_axes has {len(in_axes)} entries for {len(args_tree.children)} "
                            f"positional arguments", where=user_location())
    return _axes_per_leaf(in_axes, args_tree, f"{what} in_axes")


def _leaf_names(args_tree: TreeDef, n_positional: int) -> list[str]:
    """How errors name each leaf: ``argument 1`` or ``argument 1 (leaf 2)``, keywords last."""
    out = []
    for i, td in enumerate(args_tree.children):
        base = f"argument {i}" if i < n_positional else "the keyword arguments"
        out += [base] if td.kind == "leaf" else [f"{base} (leaf {j})" for j in range(td.num_leaves)]
    return out


def _as_value(x: Any) -> Any:
    return x if isinstance(x, (Array, Tracer)) else anp.asarray(x)


class _Batched:
    """The batch-axis facts of one call: each input leaf's axis and the common size."""

    def __init__(self, leaves: list[Any], axes: list[Axis], axis_size: int | None, names: list[str]) -> None:
        self.avals: list[tuple[TensorType, bool]] = []
        self.values: list[Any] = []
        sizes: list[tuple[int, int, TensorType]] = []
        for i, (x, ax) in enumerate(zip(leaves, axes)):
            t, weak = leaf_aval(x)
            if ax is None:
                self.avals.append((t, weak))
                self.values.append(x)
                continue
            if not -t.rank <= ax < t.rank:
                raise ArgumentError(f"vmap: in_axes {ax} is out of range for {names[i]} of type {t} (rank {t.rank})",
                                    where=user_location())
            ax %= t.rank
            sizes.append((i, t.shape[ax], t))
            self.avals.append((TensorType(t.dtype, t.shape[:ax] + t.shape[ax + 1:]), weak))
            self.values.append(move_axis(_as_value(x), ax, 0, t.rank))
        self.batched = [ax is not None for ax in axes]
        found = {s for _, s, _ in sizes}
        if axis_size is not None:
            found.add(int(axis_size))
        if len(found) > 1:
            desc = ", ".join(f"{names[i]} ({t}) has {s}" for i, s, t in sizes)
            given = f" and axis_size={axis_size}" if axis_size is not None else ""
            raise ShapeError(f"vmap: the batched axes have different sizes: {desc}{given}", where=user_location())
        if not found:
            raise ArgumentError("vmap: no input is batched (every in_axes is None); give axis_size",
                                where=user_location())
        self.size = found.pop()


#: whether a value is batched; for a loop's or conditional's tuple of results, one flag each
Flag = bool | tuple[bool, ...]


def _run(graph: Graph, b: _Batched) -> dict[int, tuple[Any, Flag]]:
    """Every node's (value, batched), the batch at dimension 0 of batched values."""
    env: dict[int, tuple[Any, Flag]] = {p.uid: (v, s) for p, v, s in zip(graph.params, b.values, b.batched)}
    env.update({uid: (v, False) for uid, v in graph.captured.items()})
    replicas = replica_batch_rules()  # pmap inside a trace: the batch is the replicas
    for n in graph.order:
        if n.op is Op.PARAMETER:
            continue
        if n.op is Op.CONSTANT:
            env[n.uid] = (constant_of(n), False)
            continue
        if n.op is Op.GET_TUPLE_ELEMENT:
            values, batched = env[n.operands[0].uid]
            if isinstance(batched, tuple):  # a batched loop's or conditional's results
                env[n.uid] = (values[n.attr["index"]], batched[n.attr["index"]])
                continue
        vals = [env[o.uid][0] for o in n.operands]
        flags = [bool(env[o.uid][1]) for o in n.operands]  # array operands: one flag each
        if replicas is not None and n.op in replicas:  # batched or not: it exchanges between replicas
            env[n.uid] = (replicas[n.op](n, vals, flags, b.size), True)
            continue
        if replicas is not None and n.traits.control and not all(flags) and reads_replicas(n):
            # a loop whose body exchanges between replicas: every carry may differ between them
            vals = [v if f else batched_like(v, o.tensor_type, b.size) for v, f, o in zip(vals, flags, n.operands)]
            flags = [True] * len(flags)
        if not any(flags):
            env[n.uid] = (apply(n, vals), False)
            continue
        rule = BATCH.get(n.op)
        if rule is None:  # an op merged without its rule: refuse rather than guess
            raise TracingError(f"vmap: {n.op.value} has no batching rule (operands: "
                               f"{', '.join(str(o.type) for o in n.operands)})", where=n.loc or user_location())
        if n.traits.control:  # one (value, batched) pair per result
            pairs = rule(n, vals, flags, b.size)
            env[n.uid] = ((tuple(v for v, _ in pairs), tuple(f for _, f in pairs)) if isinstance(n.type, TupleType)
                          else pairs[0])
            continue
        out = rule(n, vals, flags, b.size)
        assert aval_of(out) == TensorType(n.tensor_type.dtype, (b.size,) + n.tensor_type.shape), \
            f"batching rule of {n.op.value} gave {aval_of(out)} for {n.tensor_type} with batch {b.size}"
        env[n.uid] = (out, True)
    return env


def _check_indices(graph: Graph, env: dict[int, tuple[Any, Flag]]) -> None:
    """--check_indices flags of the traced function: a batched flag fails if any example's does."""
    for node, message, where in graph.index_checks:
        flag, batched = env[node.uid]
        checks.replayed(lax.reduce(flag, "or", (0,)) if batched else flag, message, where)


def _output(value: Any, batched: Flag, t: TensorType, axis: Axis, size: int, i: int) -> Any:
    if axis is None:
        if batched:
            raise ArgumentError(f"vmap: output {i} ({t}) depends on the batched inputs, but its out_axes is None",
                                where=user_location())
        return _as_value(value)
    rank = t.rank + 1
    if not -rank <= axis < rank:
        raise ArgumentError(f"vmap: out_axes {axis} is out of range for output {i} of per-example type {t} "
                            f"(batched rank {rank})", where=user_location())
    if not batched:  # an output that does not depend on the batch is repeated along it
        value = batched_like(value, t, size)
    return move_axis(value, 0, axis % rank, rank)


def vmap(fn: Callable[..., Any], in_axes: Any = 0, out_axes: Any = 0,
         axis_size: int | None = None) -> Callable[..., Any]:
    """Vectorizes ``fn`` over an axis of its inputs: ``vmap(f)(xs)[i] == f(xs[i])``.

    ``in_axes``: an int (the batch axis of every input), None (unbatched), or a tuple with
    one entry per positional argument, each an int, None or a tree of them matching a
    prefix of the argument. ``out_axes``: the same for the outputs. ``axis_size``: the
    batch size, needed only when no input is batched. The batched function is one
    computation (batching rules per primitive, batching.py), composable with ``jit``,
    ``grad``, ``jvp`` and itself. Keyword arguments are batched along their axis 0."""
    return _vmap(fn, in_axes, out_axes, axis_size, None)


def vmap_replicas(fn: Callable[..., Any], in_axes: Any, out_axes: Any, count: int) -> Callable[..., Any]:
    """``fn`` (traced as one replica, with its collectives) run for ``count`` replicas as
    one batch: vmap, except that the collectives exchange between the rows of the batch
    (collective_rules.REPLICA_BATCH). ``pmap`` inside a trace (jit, grad, vmap, loops) is
    this, so its replicas run on the enclosing computation's device."""
    return _vmap(fn, in_axes, out_axes, count, count)


def _vmap(fn: Callable[..., Any], in_axes: Any, out_axes: Any, axis_size: int | None,
          replicas: int | None) -> Callable[..., Any]:
    @functools.wraps(fn)
    def batched(*args: Any, **kwargs: Any) -> Any:
        leaves, args_tree = flatten(tuple(args))
        axes = _in_axes(in_axes, args_tree)
        f = fn
        if kwargs:  # keyword arguments are batched along their axis 0, as jax does
            kw_leaves = flatten(kwargs)[0]
            leaves, axes = leaves + kw_leaves, axes + [0] * len(kw_leaves)
            args_tree = flatten((*args, kwargs))[1]

            def f(*a: Any) -> Any:
                return fn(*a[:-1], **a[-1])
        b = _Batched(leaves, axes, axis_size, _leaf_names(args_tree, len(args)))
        graph = trace_graph(f, args_tree, b.avals, False, "vmap")
        if replicas is None:
            env = _run(graph, b)
        else:
            with replicas_as_batch(replicas):
                env = _run(graph, b)
        _check_indices(graph, env)
        axes = _axes_per_leaf(out_axes, graph.out_tree, "vmap out_axes")
        outs = [_output(*env[n.uid], n.tensor_type, ax, b.size, i)
                for i, (n, ax) in enumerate(zip(graph.out_nodes, axes))]
        return unflatten(graph.out_tree, outs)

    return batched


VMAP_FN[:] = [vmap]  # the control-flow rules batch sub-computations with it
