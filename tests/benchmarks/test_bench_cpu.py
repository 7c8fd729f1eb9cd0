"""benchmarks/bench_cpu.py's stacked-LSTM row in quick mode: the ahead-of-time column runs
and was checked against NumPy before it was timed (no timing assertions)."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("bench_cpu.py")


def _cc() -> None:
    # The AOT column needs a C compiler; the project's CI image has one.
    assert shutil.which("cc") or shutil.which("gcc"), "no C compiler (cc) on PATH"


def test_the_native_baselines_leave_no_build_directory(
    bench: ModuleType, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The C loops and the AOT LSTM are loaded from libraries built in temporary directories,
    removed once loaded: a bench run used to leave two directories in the temp dir."""
    _cc()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    so = bench._c_library()
    x = np.arange(5, dtype=np.float32)
    assert so.seed(x.ctypes.data, x.ctypes.data, x.ctypes.data, 5) == pytest.approx(float(np.sum(x + x * x)))
    lstm = bench.load_example("lstm")
    rng = np.random.default_rng(3)
    call = bench._aot_lstm(lstm, lstm.init_params(rng), lstm.sample_inputs(rng))
    np.testing.assert_array_equal(call(), call())
    assert list(tmp_path.iterdir()) == []


def test_aot_lstm_is_the_examples_lstm_run_natively(bench: ModuleType) -> None:
    """The ctypes call of the AOT object gives examples/lstm.py's NumPy reference, and
    calling it again (the timing loop) gives the same numbers."""
    _cc()
    lstm = bench.load_example("lstm")
    rng = np.random.default_rng(3)
    params, xs = lstm.init_params(rng), lstm.sample_inputs(rng)
    call = bench._aot_lstm(lstm, params, xs)
    assert call is not None
    want = lstm.lstm_numpy(params, xs)
    first = np.array(call())
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(call(), first)


def test_lstm_row_has_an_aot_column_checked_before_timing(bench: ModuleType) -> None:
    _cc()
    import axle

    row = bench._lstm_row(axle, axle.device("cpu:0"), None, np.random.default_rng(0), 3)
    assert row.workload.startswith("stacked LSTM forward 3x60 units, 10 steps, batch 1")
    assert {"numpy", "axle-cpu", "axle-aot"} <= set(row.times_ms)
    assert all(t > 0 for t in row.times_ms.values())
