"""Kernel objects without pyopencl's call invoker made up front.

pyopencl's ``Kernel`` constructor generates, for every kernel object, the Python function
behind ``kernel(queue, sizes, *args)`` and ``kernel.set_args(...)`` (its "invoker"): it
calls ``pyopencl.invoker.generate_enqueue_and_set_args``, which looks the function up by
kernel name in pytools' persistent dictionary (a sqlite query, an unpickle, a code object
executed): 0.1-0.2 ms per kernel object, 2-4 ms of a cached first call of the MNIST MLP
step (20 kernels) on PoCL. axle never uses that function: a launch binds each argument
with ``set_arg`` and enqueues with ``enqueue_nd_range_kernel`` (executable.py).

:func:`new_kernel` makes the kernel object while that generator is replaced by one that
defers it: the object gets an invoker that generates the real one, with the same
arguments, the first time it is called. Nothing changes for a caller that does use
``kernel(...)`` or ``set_args``: it gets pyopencl's own function then, once per kernel
object. The replacement holds only during the constructor, under a lock (another thread's
kernel object made meanwhile defers its invoker too, which changes nothing for it either);
a pyopencl whose constructor fails with it in place but not without it gets the plain
constructor from then on."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pyopencl as cl
import pyopencl.invoker as _invoker

_lock = threading.Lock()
#: False once a constructor failed with the deferred generator in place: pyopencl's plain
#: constructor from then on
_deferring = True


def deferred_invoker(generate: Callable[..., Any]) -> Callable[..., tuple[Callable[..., Any], Callable[..., Any]]]:
    """A stand-in for ``generate`` (pyopencl's ``generate_enqueue_and_set_args``) returning
    the (enqueue, set_args) pair whose first call generates the real pair with the same
    arguments, once, and calls it."""

    def stand_in(*args: Any, **kwargs: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
        made: list[tuple[Callable[..., Any], Callable[..., Any]]] = []
        made_lock = threading.Lock()

        def real() -> tuple[Callable[..., Any], Callable[..., Any]]:
            with made_lock:
                if not made:
                    enqueue, set_args = generate(*args, **kwargs)
                    made.append((enqueue, set_args))
                return made[0]

        def enqueue(*a: Any, **k: Any) -> Any:
            return real()[0](*a, **k)

        def set_args(*a: Any, **k: Any) -> Any:
            return real()[1](*a, **k)

        return enqueue, set_args

    return stand_in


def new_kernel(program: cl.Program, name: str) -> cl.Kernel:
    """``cl.Kernel(program, name)`` whose call invoker is generated only if it is ever called."""
    global _deferring
    if not _deferring or not hasattr(_invoker, "generate_enqueue_and_set_args"):
        return cl.Kernel(program, name)
    with _lock:
        # read under the lock: outside it, another thread's stand-in may be in place, and
        # putting that back would leave it there for good
        generate = _invoker.generate_enqueue_and_set_args
        _invoker.generate_enqueue_and_set_args = deferred_invoker(generate)
        try:
            return cl.Kernel(program, name)
        except Exception:  # noqa: BLE001 - any failure is tried again below with pyopencl's own generator, which raises the real error
            pass
        finally:
            _invoker.generate_enqueue_and_set_args = generate
    kernel = cl.Kernel(program, name)  # a bad name raises here, as it did above
    _deferring = False  # the plain constructor works where the stand-in failed: no more stand-ins
    return kernel
