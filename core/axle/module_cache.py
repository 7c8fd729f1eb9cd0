"""The optimized module of a traced one, across processes: the core pipeline's result kept
in the persistent compile cache (``--compile_cache``, subdirectory ``module``), so that a
new process's first call of a program compiled before skips the optimizer passes (they
were most of such a call: docs/reliability.md, "Persistent compile cache").

An entry's key is everything the optimizer's result depends on: the traced module (after
the expansion of extended ops, as its text form's SHA-256), every setting but the cache's
own (``--optimize``, ``--disable_passes``, the backend flags...), the device (name,
description, kind, properties), the backend (name, contract version, fusion policy and
the names of its own passes), the code of
axle and of the backend's package (``diskcache.code_version``: axle's version is in its
``__init__.py``) and the versions of NumPy and ml_dtypes (constant folding runs their
functions).

An entry is data only, parsed strictly: the SHA-256 of the optimized module's text (64
hex digits and a newline), then a JSON object holding that text (read back by
``axle.ir.parser``, which verifies what it builds) and the fusion pass's records
(``Module.fusion_records``, which the text form does not carry). Constants of 64 KiB or
more are not in the text: it names them by digest (``constant(ref "<sha256>")``), their
bytes stored beside the entry, before it (``axle.constant_store``); the key's text names
them the same way, so a model's weights are hashed once per process, not printed. A
constant the entry names that is missing or corrupt makes the entry a miss like any
corruption. The digest comes first so
that a first call whose executable the backend keeps under it (``Backend.cached_executable``)
reads it without parsing the JSON (a fifth of a millisecond for the MNIST step, most of
what the entry cost such a call). Nothing is unpickled or evaluated. An entry that does not
parse back, whose text is not the digest's, or whose records name a fusion the module
lacks, is a miss counted as corrupt (``disk_cache_corrupt``), and the module is optimized
again (and the entry rewritten)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from typing import Any

import ml_dtypes
import numpy as np

from . import constant_store, counters
from .backend import Backend, Device
from .config import config
from .diskcache import DiskCache, code_version
from .errors import AxleError
from .ir.fusion_record import REASON_CODES, FusionRecord, NotFused, fusion_nodes
from .ir.literal import Literal, live
from .ir.module import Module
from .ir.parser import parse_module
from .ir.printer import print_module
from .ir.types import TensorType
from .passes import policy_for

#: optimized modules, under --compile_cache
DISK = DiskCache(None, "optimized module", sub="module")
#: bumped when the entry's layout changes
FORMAT = "axle-optimized-module-3"


def _settings() -> str:
    """Every setting that can change what compiling produces (the cache's own excluded)."""
    return repr(sorted((k, v) for k, v in vars(config).items() if not k.startswith("compile_cache")))


def _code(backend: Backend) -> str:
    """The code version of axle and of the backend's package (its passes and fusion policy
    shape the optimized module)."""
    pkg = type(backend).__module__.split(".")[0]
    where = getattr(sys.modules.get(pkg), "__file__", None)
    dirs = [os.path.dirname(__file__)]
    if where and os.path.dirname(where) != dirs[0]:
        dirs.append(os.path.dirname(where))
    return code_version(*dirs)


def _by_digest(lit: Literal) -> str | None:
    """A large constant's name in a key's or an entry's text: its digest (constant_store)."""
    return lit.digest() if constant_store.by_reference(lit.array) else None


def module_key(module: Module, device: Device, backend: Backend) -> bytes:
    """The cache key of ``module`` (traced, extended ops expanded) optimized for ``device``."""
    text = print_module(module, _by_digest)
    props = repr(sorted((k, repr(v)) for k, v in device.properties.items()))
    # the pipeline as the backend sets it up now: its fusion policy (bounded by the device)
    # and its own passes by name (a plugin may choose them at run time)
    pipeline = repr((policy_for(backend, device), [p.name for p in backend.passes() or []]))
    # NumPy and ml_dtypes compute what constant folding puts in the module (their float
    # functions' last bits differ between versions)
    parts = [FORMAT, _code(backend), np.__version__, ml_dtypes.__version__, backend.name, repr(backend.api_version),
             device.name, device.description, device.kind, props, pipeline, _settings(),
             hashlib.sha256(text.encode()).hexdigest()]
    return "\0".join(parts).encode()


@dataclasses.dataclass(frozen=True)
class Entry:
    """A cached optimized module before it is parsed. Its digest (the text's SHA-256) is
    read without parsing, so a backend that keeps its executable under that digest
    (``Backend.cached_executable``) is asked first, and a hit there parses nothing."""

    digest: str
    #: the JSON object (the text and the fusion records), not parsed yet
    body: bytes


_HEX = frozenset(b"0123456789abcdef")


def load_entry(key: bytes) -> Entry | None:
    """The entry cached under ``key``, not parsed (None: none, or not an entry)."""
    data = DISK.get(key)
    if data is None:
        return None
    head = data[:64]
    if len(data) < 65 or data[64:65] != b"\n" or not _HEX.issuperset(head):
        counters.record("disk_cache_corrupt")  # checksummed: a format change or a corrupted disk
        return None
    return Entry(head.decode("ascii"), data[65:])


def parse_entry(entry: Entry) -> Module | None:
    """The module of ``entry`` with its fusion records (None: it does not parse back whole,
    or its text is not the one its digest names)."""
    try:
        raw = json.loads(entry.body)
        text, records = raw["module"], raw["records"]
        if not isinstance(text, str) or not isinstance(records, list) or _digest(text) != entry.digest:
            raise TypeError("not an optimized-module entry")
        module = parse_module(text, _stored)
        fusions = _records(records, module)
    except (AxleError, ValueError, KeyError, TypeError, AttributeError):
        # written by this cache's own code, checksummed: only a format change or a
        # corrupted disk gets here; the module is optimized again
        counters.record("disk_cache_corrupt")
        return None
    return dataclasses.replace(module, fusion_records=fusions)


def load(key: bytes) -> tuple[Module, str] | None:
    """The optimized module cached under ``key`` and its text's SHA-256 (None: none, or an
    entry that does not parse back whole)."""
    entry = load_entry(key)
    module = None if entry is None else parse_entry(entry)
    return None if module is None or entry is None else (module, entry.digest)


def _stored(digest: str, t: TensorType) -> Literal:
    lit = live(digest)  # (the traced module's own, whose digest its key named)
    if lit is not None and lit.type == t:
        return lit
    return Literal(constant_store.get(digest, t.dtype.np, t.shape))


def entry(module: Module) -> tuple[bytes, str]:
    """The cache entry of ``module`` (optimized) and its text's SHA-256 (the backend is
    given the digest before the entry is written: ``store``). Its large constants are
    stored beside it (constant_store) before it is: an entry names only stored ones."""
    big: list[Literal] = []

    def by_digest(lit: Literal) -> str | None:
        name = _by_digest(lit)
        if name is not None:
            big.append(lit)
        return name

    text = print_module(module, by_digest)
    for lit in big:
        constant_store.put(lit.array, lit.digest())
    records = [{"fusion": r.fusion, "kind": r.kind, "members": list(r.members),
                "not_fused": [dataclasses.asdict(n) for n in r.not_fused]} for r in module.fusion_records]
    digest = _digest(text)
    return (digest + "\n").encode() + json.dumps({"module": text, "records": records}).encode(), digest


def store(key: bytes, payload: bytes) -> None:
    DISK.put(key, payload)


def enabled() -> bool:
    return DISK.enabled()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_NOT_FUSED = tuple(f.name for f in dataclasses.fields(NotFused))


def _records(raw: list[dict[str, Any]], module: Module) -> tuple[FusionRecord, ...]:
    """The fusion records of a cached entry, bound to the parsed module's fused
    computations (a record naming a fusion the module lacks: KeyError, the entry is bad)."""
    comps = {n.attr["computation"].name: n.attr["computation"] for n in fusion_nodes(module.entry)}
    out = []
    for r in raw:
        if any(n["code"] not in REASON_CODES for n in r["not_fused"]):
            raise ValueError("unknown fusion reason code")
        not_fused = tuple(NotFused(**{k: str(n[k]) for k in _NOT_FUSED}) for n in r["not_fused"])
        out.append(FusionRecord(str(r["fusion"]), str(r["kind"]), tuple(map(str, r["members"])), not_fused,
                                computation=comps[r["fusion"]]))
    return tuple(out)
