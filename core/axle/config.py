"""Process-wide settings, from ``AXLE_FLAGS`` and ``axle.config.update(...)``.

``AXLE_FLAGS="--jit_level=auto --dump_to=/tmp/d --no_optimize --cpu_threads=2"``: a flag
named after a backend (``--<backend>_<name>``) is passed to that backend's compile."""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import AxleError


@dataclass
class Config:
    #: run the optimizer pipeline before compiling
    optimize: bool = True
    #: run the verifier between passes
    check_passes: bool = False
    #: "off" (eager op-by-op) or "auto" (lazy auto-clustering of eager code)
    jit_level: str = "off"
    #: fail instead of falling back to the host for ops a device cannot run
    strict_placement: bool = False
    #: traced indices out of range raise (OutOfBoundsError) instead of being clamped / filled /
    #: dropped: each traced index op computes an any(out of range) flag output
    check_indices: bool = False
    #: dump modules before/after passes into this folder
    dump_to: str = ""
    #: only passes whose name matches this regex are dumped
    dump_pass_re: str = ".*"
    #: write a Chrome trace of the whole process to this file
    trace_to: str = ""
    #: warn when one function was traced more than this many times
    retrace_warning_threshold: int = 8
    #: passes disabled by name, comma-separated
    disable_passes: str = ""
    #: compiled executables kept per cache (each jit function's and pmap's, the eager op cache,
    #: the lazy cluster cache, and each backend's compile caches): least recently used beyond this
    #: are dropped and their native code freed
    jit_cache_size: int = 256
    #: the directory of every backend's on-disk compile cache (cpu object code, OpenCL
    #: program binaries, ...); "" is the user cache directory (~/.cache/axle), "off" disables it
    compile_cache: str = ""
    #: size bound of the compile cache directory: beyond it the entries used longest ago go
    compile_cache_max_mb: float = 1024.0
    #: seconds a backend plugin may take to load and list its devices before it is
    #: recorded as unavailable ("timed out after N s in devices()")
    backend_timeout: float = 30.0
    #: freeze the objects alive when axle's import and the loading of backends end
    #: (``gc.freeze``: no full collection scans them again; axle/gcfreeze.py)
    gc_freeze: bool = True
    #: flags addressed to one backend: {"cpu_threads": "2"}
    backend_flags: dict[str, str] = field(default_factory=dict)

    def update(self, **kw: Any) -> None:
        names = {f.name: f for f in fields(self)}
        for k, v in kw.items():
            if k not in names:
                raise AxleError(f"unknown axle setting {k!r}; known: {', '.join(sorted(names))}")
            setattr(self, k, _coerce(names[k].type, v, k))

    def load_flags(self, text: str) -> None:
        names = {f.name for f in fields(self)}
        for tok in shlex.split(text):
            if not tok.startswith("--"):
                raise AxleError(f"AXLE_FLAGS: {tok!r} is not a --flag")
            key, eq, value = tok[2:].partition("=")
            if not eq:
                value = "false" if key.startswith("no_") else "true"
                key = key[3:] if key.startswith("no_") else key
            if key in names:
                self.update(**{key: value})
            elif "_" in key:
                self.backend_flags[key] = value
            else:
                raise AxleError(f"AXLE_FLAGS: unknown flag --{key}")


def _coerce(typ: Any, v: Any, name: str) -> Any:
    t = str(typ)
    if t == "bool" and isinstance(v, str):
        if v.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise AxleError(f"setting {name} wants a boolean, got {v!r}")
        return v.lower() in ("1", "true", "yes", "on")
    if t in _NUMBERS:
        return _number(_NUMBERS[t], v, name)
    if name == "jit_level" and v not in ("off", "auto"):
        raise AxleError(f"jit_level must be 'off' or 'auto', got {v!r}")
    return v


_NUMBERS: dict[str, type] = {"int": int, "float": float}
#: settings that must be positive (a cache of 0 entries or a zero time bound makes no sense)
_POSITIVE = ("jit_cache_size", "backend_timeout", "compile_cache_max_mb")


def _number(kind: type, v: Any, name: str) -> Any:
    try:
        out = kind(v)
    except (TypeError, ValueError):
        raise AxleError(f"setting {name} wants {'an integer' if kind is int else 'a number'}, got {v!r}") from None
    if name in _POSITIVE and not out > 0:
        raise AxleError(f"setting {name} must be positive, got {v!r}")
    return out


config = Config()
config.load_flags(os.environ.get("AXLE_FLAGS", ""))
