"""Shared fixtures and the two test tiers. In CI (CI=true) nothing may be skipped: a
missing backend fails.

The tiers (``make test`` / ``make test-full``; README.md, "Two commands"):

- **full** (``pytest``, ``make test-full``, and ``make test`` with CI=true as ``.ci/run``
  sets it): every test.
- **fast** (``pytest --fast``, ``make test`` outside CI): one dtype per code path plus the
  cross-cutting tests. This hook deselects, in one place: the tests of ``FULL_ONLY_FILES``
  (campaigns, end-to-end builds and installs) and those marked ``full_only`` (a variant
  that repeats a fast one on another device), and each parametrized test's variants
  whose dtypes fall outside ``FAST_DTYPES`` (float16 kept where it computes, see
  ``_fast_dtypes``), unless that would leave the test with no variant at all.
  Deselection only: no test is skipped, and CI (CI=true) refuses ``--fast``.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np
import pytest

from axle.config import config as axle_config
from axle.ir.dtypes import DType, supported_numpy_dtype
from axle.ir.module import Module
from axle.ir.ops import Op
from axle.ir.types import TensorType
from axle.testing import IN_CI, OpCase, require_backend  # noqa: F401 - re-exported for tests
from axle.testing.check import Check

#: files the fast tier leaves out: random-program campaigns, end-to-end builds and wheel
#: installs, cache-bound sweeps (each 30 s or more; their code paths are the full
#: sweep's). The kit on every backend, its self-tests, threads, fork and the docs
#: walk-through stay in the fast tier (their dtype variants thinned like every test's).
FULL_ONLY_FILES = frozenset({
    "test_differential_campaign.py",
    "test_opencl_differential.py",
    "test_cpu_cache_bounds.py",
    "test_derived_backend.py",
    "test_wheel_install.py",
})

#: the files that run longest (seconds of one xdist worker in CI, 2-core AMD EPYC; only the
#: order matters): `make test` hands files to its workers in collection order
#: (--no-loadscope-reorder), and pytest-xdist's own order, most tests first, started a
#: 90 s file last while the other worker sat idle. These start first, longest first; the
#: other files follow, most tests first, so the run ends on short files on both workers.
#: (A run with AXLE_TEST_TIMES, below, gives each file's seconds to refresh them with.)
LONG_FILES = {
    "test_conformance.py": 460, "test_differential_campaign.py": 130, "test_opencl_conv.py": 120,
    "test_dot_epilogue.py": 110, "test_opencl_dot_kernels.py": 100, "test_bad_inputs.py": 90,
    "test_node_suite.py": 80, "test_cpu_conv.py": 60, "test_resnet.py": 55, "test_opencl_conformance.py": 45,
    "test_cpu_conformance.py": 45, "test_concurrency.py": 40, "test_opencl_row_kernels.py": 40,
    "test_cpu_gemm.py": 35, "test_kit_plugin.py": 33, "test_numpy_parity.py": 30,
    "test_signed_zero_maxmin.py": 30, "test_doc_blocks.py": 28, "test_numpy_sort.py": 25,
    "test_kit_crashes.py": 24, "test_dtypes_devices.py": 24, "test_indexing_lowering.py": 22,
    "test_ir.py": 22, "test_cpu_reduce_window.py": 22, "test_opencl_loops.py": 21,
}
#: one float, one int and bool: the fast tier's dtypes for every code path
FAST_DTYPES = frozenset({DType.FLOAT32, DType.INT32, DType.BOOL})
#: ops that only move or copy elements: their float16 path is the same copy as any other
#: dtype's, so a float16 variant of a case made only of these is not kept in the fast tier
_MOVES = frozenset({Op.PARAMETER, Op.BROADCAST_IN_DIM, Op.RESHAPE, Op.TRANSPOSE, Op.SLICE, Op.PAD,
                    Op.CONCATENATE, Op.REVERSE, Op.TUPLE, Op.GET_TUPLE_ELEMENT})
_DTYPE_NAMES = {d.value: d for d in DType}
_DTYPE_TOKEN = re.compile(r"(?<![a-z0-9])(" + "|".join(_DTYPE_NAMES) + r")(?![a-z0-9])")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true", default=False,
                     help="the fast tier: one dtype per code path, no campaigns (tests/conftest.py)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full_only: left out of the fast tier (tests/conftest.py)")
    config.addinivalue_line("markers", "serial: installs into this environment; run alone after the parallel "
                                       "pass (Makefile, `make test`)")
    if config.getoption("--fast") and IN_CI:
        raise pytest.UsageError("--fast deselects tests; CI (CI=true) runs the full sweep")
    _private_compile_cache()


#: the session's own compile cache (None: the user chose one with AXLE_FLAGS)
_SESSION_CACHE: list[str] = []


def _private_compile_cache() -> None:
    """Tests compile into a cache of their own, shared by this session's subprocesses and
    workers (through AXLE_FLAGS) and removed at its end: a test never loads an object that
    an earlier run (of other code) left in the user's cache, nor fills that cache."""
    if "--compile_cache=" in os.environ.get("AXLE_FLAGS", ""):
        return
    path = tempfile.mkdtemp(prefix="axle-test-cache-")
    _SESSION_CACHE.append(path)
    os.environ["AXLE_FLAGS"] = f"{os.environ.get('AXLE_FLAGS', '')} --compile_cache={shlex.quote(path)}".strip()
    axle_config.update(compile_cache=path)


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _SESSION_CACHE:
        shutil.rmtree(path, ignore_errors=True)
    if _TIMES_LOG and _FILE_TIMES:
        with open(_TIMES_LOG, "a") as f:
            f.writelines(f"{cpu:.2f}\t{wall:.2f}\t{name}\n" for name, (cpu, wall) in _FILE_TIMES.items())


#: AXLE_TEST_TIMES=FILE: each pytest process (each xdist worker) appends to FILE, per test
#: file, the CPU seconds its tests took (the process's and its finished subprocesses') and
#: their wall seconds, tab-separated: where a CI run's time goes (see LONG_FILES)
_TIMES_LOG = os.environ.get("AXLE_TEST_TIMES")
_FILE_TIMES: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201 - a hook wrapper
    if not _TIMES_LOG:
        yield
        return
    cpu, wall = _cpu_seconds(), time.perf_counter()
    yield
    times = _FILE_TIMES[item.nodeid.split("::")[0]]
    times[0] += _cpu_seconds() - cpu
    times[1] += time.perf_counter() - wall


@pytest.fixture
def compile_cache(tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    """A --compile_cache directory of the test's own (not yet created)."""
    path = tmp_path / "compile-cache"
    monkeypatch.setattr(axle_config, "compile_cache", str(path))
    return path


class PythonProcesses:
    """New Python processes running a program that prints one JSON line last (a new
    process's first call, concurrent writers of the compile cache)."""

    @staticmethod
    def start(program: str, cache: str, backends: str) -> subprocess.Popen:
        env = {**os.environ, "AXLE_FLAGS": f"--compile_cache={cache}", "AXLE_BACKENDS": backends}
        return subprocess.Popen([sys.executable, "-c", program], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    @staticmethod
    def counting(*targets: tuple[str, str, str]) -> str:
        """Code that counts, in ``calls[what]``, the calls of ``module.name`` for each
        (module, name, what): put before a program, which prints ``calls`` with its answer."""
        lines = ["import importlib", "calls = {}", "def _counted(mod, name, what):",
                 "    real = getattr(mod, name)", "    calls[what] = 0", "    def wrapper(*a, **k):",
                 "        calls[what] += 1", "        return real(*a, **k)", "    setattr(mod, name, wrapper)"]
        lines += [f"_counted(importlib.import_module({m!r}), {n!r}, {w!r})" for m, n, w in targets]
        return "\n".join(lines) + "\n"

    @staticmethod
    def answer(p: subprocess.Popen) -> dict:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def python_processes() -> type[PythonProcesses]:
    return PythonProcesses


def _module_dtypes(module: Module) -> set[DType]:
    return {n.type.dtype for c in module.computations() for n in c.nodes if isinstance(n.type, TensorType)}


def _module_moves_only(module: Module) -> bool:
    return all(n.op in _MOVES for c in module.computations() for n in c.nodes)


def _param_dtypes(value: object) -> tuple[set[DType], bool]:
    """(dtypes a parameter value stands for, whether it only moves elements)."""
    if isinstance(value, DType):
        return {value}, False
    if isinstance(value, str):
        return ({_DTYPE_NAMES[value]}, False) if value in _DTYPE_NAMES else (set(), False)
    if isinstance(value, np.dtype) or isinstance(value, type) and issubclass(value, np.generic):
        found = supported_numpy_dtype(np.dtype(value))
        return ({found} if found is not None else set()), False
    if isinstance(value, Check):
        if value.module is None:  # transfers: the dtype is in the id
            return {_DTYPE_NAMES[t] for t in _DTYPE_TOKEN.findall(value.id)}, True
        return _module_dtypes(value.module), _module_moves_only(value.module)
    if isinstance(value, OpCase):
        return _module_dtypes(value.module), _module_moves_only(value.module)
    return set(), False


def _fast_dtypes(item: pytest.Item) -> bool:
    """Whether the item's dtypes belong to the fast tier: all in FAST_DTYPES, or float16
    besides them where the variant computes (float16 is stored as half and rounded
    through float32 in the backends: its own code path)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    dtypes: set[DType] = set()
    moves = True
    for value in params.values():
        d, m = _param_dtypes(value)
        dtypes |= d
        moves = moves and (m or not d)
    extra = dtypes - FAST_DTYPES
    return not extra or extra == {DType.FLOAT16} and not moves


def _long_files_first(items: list[pytest.Item]) -> None:
    """Reorders ``items`` file by file (each file's own order kept): LONG_FILES' files
    longest first, then the others, most tests first."""
    by_file: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        by_file[str(item.path)].append(item)
    order = sorted(by_file, key=lambda f: (-LONG_FILES.get(os.path.basename(f), 0), -len(by_file[f])))
    items[:] = [item for f in order for item in by_file[f]]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its order is the run's
        _long_files_first(items)
    if not config.getoption("--fast"):
        return
    keep = [i for i in items if i.path.name not in FULL_ONLY_FILES and i.get_closest_marker("full_only") is None]
    by_test: dict[tuple, list[pytest.Item]] = defaultdict(list)
    for item in keep:
        by_test[(item.path, item.originalname if isinstance(item, pytest.Function) else item.name)].append(item)
    chosen = set()
    for variants in by_test.values():
        fast = [i for i in variants if _fast_dtypes(i)]
        chosen.update(map(id, fast or variants))  # a test with no fast variant keeps them all
    deselected = [i for i in items if id(i) not in chosen]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if id(i) in chosen]
