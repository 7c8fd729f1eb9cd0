"""Recompilation warnings: a jitted function traced again and again (because the shapes
or dtypes of its arguments keep changing) is usually a bug that makes it slow.

After ``config.retrace_warning_threshold`` traces of one function, every further trace
warns with a :class:`RecompilationWarning` naming the function and the argument(s)
whose shape, dtype or static value differ from the closest earlier signature, e.g.::

    RecompilationWarning: axle.jit function 'step' was traced 9 times (threshold 8);
    this time because argument 'x' changed f32[100,784] -> f32[37,784].
    Pad to fixed shapes or mark the argument static.
"""
from __future__ import annotations

import inspect
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from . import profiler
from .forksafe import renew_in_child
from .config import config

#: a signature: argument (leaf) name -> "f32[100,784]" / "static 3" / "weak f32[]"
Signature = dict[str, str]

_lock = threading.Lock()
renew_in_child(sys.modules[__name__], "_lock")
_history: "weakref.WeakKeyDictionary[Any, list[Signature]]" = weakref.WeakKeyDictionary()


class RecompilationWarning(UserWarning):
    """A jitted function is being retraced more often than the configured threshold."""


def _param_names(fn: Callable[..., Any], n: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return params[:n] + [f"arg{i}" for i in range(len(params), n)]


def _describe_leaf(x: Any) -> str:
    from .frontend.jit import _leaf_aval

    try:
        t, weak = _leaf_aval(x)
    except TypeError:
        return f"value {type(x).__name__}"
    return f"{'weak ' if weak else ''}{t}"


def signature(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
              static_argnums: Sequence[int] = ()) -> Signature:
    """What a trace was specialised on, keyed by readable argument names
    (``params[1]`` for the second leaf of a pytree argument ``params``)."""
    from .frontend.pytree import flatten

    out: Signature = {}
    names = _param_names(fn, len(args))
    for i, a in enumerate(args):
        if i in static_argnums:
            out[names[i]] = f"static {a!r}"
            continue
        leaves, _ = flatten(a)
        if len(leaves) == 1 and leaves[0] is a:
            out[names[i]] = _describe_leaf(a)
        else:
            for j, leaf in enumerate(leaves):
                out[f"{names[i]}[{j}]"] = _describe_leaf(leaf)
    for k, v in kwargs.items():
        leaves, _ = flatten(v)
        for j, leaf in enumerate(leaves):
            out[k if len(leaves) == 1 else f"{k}[{j}]"] = _describe_leaf(leaf)
    return out


def diff(old: Signature, new: Signature) -> list[str]:
    """``"x: f32[100] -> f32[50]"`` for each argument that differs."""
    out = []
    for name in list(old) + [k for k in new if k not in old]:
        a, b = old.get(name, "absent"), new.get(name, "absent")
        if a != b:
            out.append(f"'{name}' changed {a} -> {b}")
    return out


def note_trace(jit_fn: Any, args: Sequence[Any], kwargs: dict[str, Any], stacklevel: int = 3) -> list[str]:
    """Records one trace of ``jit_fn`` (a JitFunction; call right after tracing) and warns
    once its trace count passes the threshold; the warning points ``stacklevel`` frames up
    (the user's call). Returns the changes from the closest earlier signature (empty for
    the first trace)."""
    sig = signature(jit_fn.fn, args, kwargs, getattr(jit_fn, "static_argnums", ()))
    with _lock:
        seen = _history.setdefault(jit_fn, [])
        previous = list(seen)
        seen.append(sig)
        count = len(seen)
    if not previous:
        return []
    # The closest earlier signature explains the retrace best (fewest differences).
    changes = min((diff(p, sig) for p in reversed(previous)), key=len)  # ties: the latest
    name = getattr(jit_fn, "name", getattr(jit_fn.fn, "__name__", "fn"))
    why = "; ".join(changes) or "the device or flags changed"
    profiler.instant(f"retrace {name}", "retrace", count=count, changes=why)
    threshold = config.retrace_warning_threshold
    if threshold >= 0 and count > threshold:
        warnings.warn(
            f"axle.jit function '{name}' was traced {count} times (threshold {threshold}); this time "
            f"because argument {why}. Each new shape or dtype costs a trace and a compile: pad inputs "
            f"to a few fixed shapes, or mark the argument static (static_argnums). "
            f"Raise config.retrace_warning_threshold to silence this.",
            RecompilationWarning, stacklevel=stacklevel)
    return changes


def traces(jit_fn: Any) -> list[Signature]:
    """Every signature ``jit_fn`` was traced for, oldest first."""
    with _lock:
        return list(_history.get(jit_fn, []))
