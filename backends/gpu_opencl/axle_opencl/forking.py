"""OpenCL after ``fork``: refused with a clear error.

OpenCL drivers are not fork-safe: PoCL starts its worker threads when the platform is
first enumerated, and a forked child inherits the driver's state without those threads,
so any OpenCL call there (even a new context on a freshly enumerated device) waits
forever. Measured on PoCL: a child hangs in its first enqueue once the parent has only
listed the devices. So when a process that had initialized OpenCL forks, the child marks
the backend as unusable: every use raises :class:`axle.errors.BackendError` naming the
cause and the fix, instead of hanging. The parent's OpenCL objects are kept alive in the
child (never released: releasing them would call into the inherited driver state).

A child forked before the parent touched OpenCL (e.g. ``AXLE_BACKENDS=cpu`` in the
parent) uses OpenCL normally, and processes started with multiprocessing's ``spawn`` or
``forkserver`` methods are unaffected.
"""
from __future__ import annotations

import os
import weakref
from typing import Any

from axle.errors import BackendError

#: pid of the process that initialized OpenCL (None: not yet)
_initialized_in: int | None = None
#: in a forked child of that process: the parent's pid
_forked_from: int | None = None
#: the parent's OpenCL objects, kept so that the child never releases them
_orphans: list[Any] = []
#: live backends, told about a fork so they keep their runtimes
_backends: weakref.WeakSet[Any] = weakref.WeakSet()


def note_initialized(backend: Any) -> None:
    """Called by a backend about to touch the OpenCL driver (enumerate platforms)."""
    global _initialized_in
    if _initialized_in is None:
        _initialized_in = os.getpid()
    _backends.add(backend)


def in_forked_child() -> bool:
    """True in a child forked after the parent initialized OpenCL (the driver is unusable)."""
    return _forked_from is not None


def check_not_forked() -> None:
    if _forked_from is not None:
        raise BackendError(
            f"opencl: this process (pid {os.getpid()}) was forked from process {_forked_from} after that "
            f"process had initialized OpenCL; OpenCL drivers (PoCL included) do not survive fork, so OpenCL "
            f"cannot be used here, and arrays the parent made on an OpenCL device are not readable. Start "
            f"worker processes with multiprocessing.get_context('spawn') or 'forkserver', or fork before "
            f"the first axle call (or set AXLE_BACKENDS without opencl in the parent).")


def keep_forever(*objects: Any) -> None:
    _orphans.extend(objects)


def _after_fork_in_child() -> None:
    global _forked_from
    if _initialized_in is not None and _forked_from is None:
        _forked_from = _initialized_in
    for backend in list(_backends):
        backend.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
