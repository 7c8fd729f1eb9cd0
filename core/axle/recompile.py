"""Recompilation warnings: a jitted function traced again and again (because the shapes
or dtypes of its arguments keep changing) is usually a bug that makes it slow.

After ``config.retrace_warning_threshold`` traces of one function, every further trace
warns with a :class:`RecompilationWarning` naming the function and the argument(s)
whose shape, dtype or static value differ from the closest earlier signature (of the last
``history_size()``, twice ``config.jit_cache_size``: all that is kept), e.g.::

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
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from . import profiler
from .compiler import flags_key
from .config import config
from .forksafe import renew_in_child
from .frontend.pytree import flatten
from .frontend.tracing import leaf_aval

#: a signature: argument (leaf) name -> "f32[100,784]" / "static 3" / "weak f32[]"
Signature = dict[str, str]

_lock = threading.Lock()
renew_in_child(sys.modules[__name__], "_lock")


def history_size() -> int:
    """Signatures kept per function: twice ``config.jit_cache_size`` (read at each trace).
    Bounded, so a function traced for 10,000 shapes does not keep 10,000 signatures and
    explaining a retrace costs time linear in the bound (it compared each new trace with
    every earlier one before). Twice the cache's bound, so a signature whose executable the
    LRU evicted is still recognised when it comes back within as many traces again: a
    function cycling through a few more shapes than the cache holds is told so."""
    return 2 * max(1, config.jit_cache_size)


class _History:
    """One function's trace count and its most recent signatures (``history_size()``).
    ``_seen`` counts the retained copies of each signature, so an identical earlier one is
    found at once."""

    def __init__(self) -> None:
        self.count = 0
        self.recent: deque[tuple[frozenset[tuple[str, str]], Signature]] = deque()
        self._seen: Counter[frozenset[tuple[str, str]]] = Counter()

    def add(self, key: frozenset[tuple[str, str]], sig: Signature, bound: int) -> None:
        self.count += 1
        self.recent.append((key, sig))
        self._seen[key] += 1
        while len(self.recent) > bound:
            old, _ = self.recent.popleft()
            self._seen[old] -= 1
            if not self._seen[old]:
                del self._seen[old]

    def seen(self, key: frozenset[tuple[str, str]]) -> bool:
        return key in self._seen


_history: weakref.WeakKeyDictionary[Any, _History] = weakref.WeakKeyDictionary()


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
    try:
        t, weak = leaf_aval(x)
    except TypeError:
        return f"value {type(x).__name__}"
    return f"{'weak ' if weak else ''}{t}"


def signature(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
              static_argnums: Sequence[int] = (), device: Any = None,
              flags: tuple | None = None) -> Signature:
    """What a trace was specialised on, keyed by readable argument names
    (``params[1]`` for the second leaf of a pytree argument ``params``, ``params (structure)``
    for its nesting), plus the ``device`` and compile ``flags`` when given: every part of
    the jit cache key, so a retrace always has a named reason."""
    out: Signature = {}
    names = _param_names(fn, len(args))
    for i, a in enumerate(args):
        if i in static_argnums:
            out[names[i]] = f"static {a!r}"
            continue
        _describe_tree(out, names[i], a, flatten)
    for k, v in kwargs.items():
        _describe_tree(out, k, v, flatten)
    if device is not None:
        out[_DEVICE] = getattr(device, "name", str(device))
    if flags is not None:
        out[_FLAGS] = _describe_flags(flags)
    return out


#: signature keys that are not arguments (parentheses keep them apart from Python names)
_DEVICE, _FLAGS = "(device)", "(flags)"


def _describe_tree(out: Signature, name: str, value: Any, flatten: Callable[..., Any]) -> None:
    leaves, td = flatten(value)
    if len(leaves) == 1 and leaves[0] is value:
        out[name] = _describe_leaf(value)
        return
    out[f"{name} (structure)"] = repr(td)
    for j, leaf in enumerate(leaves):
        out[name if len(leaves) == 1 and td.kind == "leaf" else f"{name}[{j}]"] = _describe_leaf(leaf)


def _describe_flags(flags: tuple) -> str:
    """compiler.flags_key() as 'optimize=True strict_placement=False ...'."""
    names = ("optimize", "strict_placement", "disable_passes", "backend_flags", "check_indices")
    if len(flags) != len(names):
        return repr(flags)
    return " ".join(f"{n}={v!r}" for n, v in zip(names, flags))


def _describe_change(name: str, a: str, b: str) -> str:
    if name == _DEVICE:
        return f"the device changed {a} -> {b}"
    if name == _FLAGS:
        return f"the compile flags changed ({a} -> {b})"
    return f"argument '{name}' changed {a} -> {b}"


def diff(old: Signature, new: Signature) -> list[str]:
    """``"argument 'x' changed f32[100] -> f32[50]"`` for each part that differs."""
    out = []
    for name in list(old) + [k for k in new if k not in old]:
        a, b = old.get(name, "absent"), new.get(name, "absent")
        if a != b:
            out.append(_describe_change(name, a, b))
    return out


#: the reason when nothing in the signature changed: the executable left the cache
_DROPPED = ("nothing in its signature changed: the compiled executable had been dropped from the "
            "cache (clear_cache() or the cache's size bound)")


def note_trace(jit_fn: Any, args: Sequence[Any], kwargs: dict[str, Any], stacklevel: int = 3,
               device: Any = None) -> list[str]:
    """Records one trace of ``jit_fn`` (a JitFunction; call right after tracing, with the
    device it compiles for) and warns once its trace count passes the threshold; the
    warning points ``stacklevel`` frames up (the user's call). Returns the changes from
    the closest of the retained earlier signatures (empty for the first trace, and when an
    identical one was retained: the executable had been dropped from the cache)."""
    sig = signature(jit_fn.fn, args, kwargs, getattr(jit_fn, "static_argnums", ()), device=device,
                    flags=flags_key())
    key = frozenset(sig.items())
    with _lock:
        history = _history.get(jit_fn)
        if history is None:
            history = _history[jit_fn] = _History()
        # An identical recent signature: its executable left the cache. Else the closest
        # recent one explains the retrace best (fewest differences).
        same = history.seen(key)
        previous = [] if same else [p for _, p in history.recent]
        first = history.count == 0
        history.add(key, sig, history_size())
        count = history.count
    if first:
        return []
    changes = [] if same else min((diff(p, sig) for p in reversed(previous)), key=len)  # ties: the latest
    name = getattr(jit_fn, "name", getattr(jit_fn.fn, "__name__", "fn"))
    why = "; ".join(changes) or _DROPPED
    profiler.instant(f"retrace {name}", "retrace", count=count, changes=why)
    threshold = config.retrace_warning_threshold
    if threshold >= 0 and count > threshold:
        warnings.warn(
            f"axle.jit function '{name}' was traced {count} times (threshold {threshold}); this time "
            f"because {why}. Each new shape or dtype costs a trace and a compile: pad inputs "
            f"to a few fixed shapes, or mark the argument static (static_argnums). "
            f"Raise config.retrace_warning_threshold to silence this.",
            RecompilationWarning, stacklevel=stacklevel)
    return changes


def traces(jit_fn: Any) -> list[Signature]:
    """The signatures of ``jit_fn``'s most recent traces (at most ``history_size()``), oldest
    first."""
    with _lock:
        history = _history.get(jit_fn)
        return [] if history is None else [sig for _, sig in history.recent]

