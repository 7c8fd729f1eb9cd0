"""Module dumps around passes, like XLA's ``--xla_dump_to`` / ``--xla_dump_hlo_pass_re``.

``AXLE_FLAGS="--dump_to=DIR --dump_pass_re=fusion|simplify"`` writes, for every pass
whose name matches, ``<module>.<seq>.<pass>.before.txt`` / ``.dot`` and the same
``.after`` files, ``seq`` counting dumps in this process so that nothing is overwritten."""
from __future__ import annotations

import itertools
import os
import re

from ..config import config
from ..ir.module import Module
from ..ir.printer import safe_name

_seq = itertools.count()


def wants_dump(pass_name: str) -> bool:
    return bool(config.dump_to) and re.search(config.dump_pass_re or ".*", pass_name) is not None


def _write(module: Module, pass_name: str, when: str) -> str:
    os.makedirs(config.dump_to, exist_ok=True)
    stem = os.path.join(config.dump_to, f"{safe_name(module.name)}.{next(_seq):04d}.{safe_name(pass_name)}.{when}")
    with open(stem + ".txt", "w") as f:
        f.write(module.as_text())
    with open(stem + ".dot", "w") as f:
        f.write(module.as_dot())
    return stem


def dump_before(module: Module, pass_name: str) -> str:
    return _write(module, pass_name, "before")


def dump_after(module: Module, pass_name: str, changed: bool) -> str:
    return _write(module, pass_name, "after" if changed else "after-unchanged")
