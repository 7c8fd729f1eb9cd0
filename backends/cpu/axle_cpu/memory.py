"""Output and temporary buffers: a reusing pool of page-aligned anonymous mappings.

A fresh 64 MB NumPy output costs ~16k page faults (one per 4 KB page, ~20 ms here) the
first time it is written, every call. The pool keeps mappings of finished arrays and
hands them out again (no faults at all), and large mappings ask the kernel for
transparent huge pages (``madvise(MADV_HUGEPAGE)``), so even a first touch faults once
per 2 MB. Small buffers (< ``MMAP_MIN``) come from NumPy: malloc is already fast there.

An array handed to the user keeps its mapping alive through its ``base`` object; when the
last view dies, a finalizer puts the mapping back on the free list.
"""
from __future__ import annotations

import ctypes
import math
import mmap
import os
import threading
import weakref
from collections import defaultdict

import numpy as np

MMAP_MIN = 1 << 18  # 256 KB
HUGE = 1 << 21  # 2 MB: a transparent huge page
_MAX_FREE_BYTES = 1 << 31  # never keep more than 2 GB of idle mappings


def _round(nbytes: int) -> int:
    """Size class: whole 2 MB pages (huge-page friendly), else power-of-two-ish pages."""
    if nbytes >= HUGE:
        return -(-nbytes // HUGE) * HUGE
    return 1 << (max(nbytes, 1) - 1).bit_length()


class _Mapping:
    __slots__ = ("mm", "addr", "size")

    def __init__(self, size: int) -> None:
        # Over-map by one huge page so the usable range can start 2 MB-aligned.
        extra = HUGE if size >= HUGE else 0
        self.mm = mmap.mmap(-1, size + extra, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.addr = -(-base // HUGE) * HUGE if extra else base
        self.size = size
        if size >= HUGE and hasattr(self.mm, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self.mm.madvise(mmap.MADV_HUGEPAGE, self.addr - base, size)
            except OSError:  # THP disabled: still correct, just more faults on first touch
                pass


class _Owner:
    """The ``base`` of a pooled array: exposes the mapping as an array and, when the
    last array using it is gone, returns the mapping to the pool."""

    def __init__(self, m: _Mapping, nbytes: int) -> None:
        self.mapping = m
        # bytes, viewed as the dtype by the caller: the interface's typestr cannot name
        # bfloat16 (its ``str`` is '<V2', which made a void array)
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (m.addr, False), "version": 3}


class Pool:
    """Size-classed free lists of mappings (thread-safe)."""

    def __init__(self) -> None:
        self._free: dict[int, list[_Mapping]] = defaultdict(list)
        self._free_bytes = 0
        self._lock = threading.Lock()
        self.stats = {"mapped": 0, "reused": 0}

    def empty(self, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        """An uninitialized C-contiguous array, 64-byte aligned."""
        return self.alloc(shape, dt)[0]

    def alloc(self, shape: tuple[int, ...], dt: np.dtype) -> tuple[np.ndarray, int]:
        """``empty`` plus the array's address (what a kernel launch needs)."""
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes < MMAP_MIN:
            return _aligned_empty(shape, dt)
        size = _round(nbytes)
        with self._lock:
            lst = self._free.get(size)
            m = lst.pop() if lst else None
            if m is not None:
                self._free_bytes -= size
                self.stats["reused"] += 1
        if m is None:
            m = _Mapping(size)
            self.stats["mapped"] += 1
        owner = _Owner(m, nbytes)
        weakref.finalize(owner, self._give_back, m)
        return np.asarray(owner).view(dt).reshape(shape), m.addr

    def _give_back(self, m: _Mapping) -> None:
        with self._lock:
            if self._free_bytes + m.size <= _MAX_FREE_BYTES:
                self._free[m.size].append(m)
                self._free_bytes += m.size


def address(a: np.ndarray) -> int:
    """The address of an array's first element (ctypes.addressof is ~4x faster than
    ``a.ctypes.data``, but needs a writable, non-empty buffer)."""
    if a.flags.writeable and a.size and a.flags.c_contiguous and a.dtype.kind != "V":
        # (bfloat16, kind 'V', has no buffer-protocol format: it takes the slower path)
        return ctypes.addressof(ctypes.c_char.from_buffer(a))  # type: ignore[arg-type]  # an ndarray is a buffer
    return a.ctypes.data


def _aligned_empty(shape: tuple[int, ...], dt: np.dtype) -> tuple[np.ndarray, int]:
    n = math.prod(shape)
    nbytes = max(n, 1) * dt.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    base = ctypes.addressof(ctypes.c_char.from_buffer(raw))  # type: ignore[arg-type]  # an ndarray is a buffer
    off = (-base) % 64
    # one constructor over raw's bytes (a slice, a view, a slice and a reshape cost 4x)
    return np.ndarray(shape, dt, raw, off), base + off


POOL = Pool()


def _after_fork_in_child() -> None:
    POOL._lock = threading.Lock()  # a parent thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
