"""tools/accuracy.py runs and prints the accuracy table (a small sweep on cpu:0), and the
CPU backend's sin/cos figures in it are within their bound."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from axle.ir import DType, Op
from axle.testing import require_backend
from axle.testing.accuracy import binade_sweep, functions, ulp_error

TOOL = Path(__file__).resolve().parents[2] / "tools" / "accuracy.py"
#: sin/cos on cpu:0, in ulps (float16/32 against NumPy in float64, float64 against
#: axle.testing.exact); tests/backends/cpu/test_cpu_trig.py sweeps far more inputs
SINCOS_BOUND = {"float16": 0.51, "float32": 1.0, "float64": 1.0}


@pytest.fixture(scope="module")
def tool():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("_accuracy_tool_under_test", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_table_on_a_small_sweep(tool, capsys) -> None:  # noqa: ANN001
    require_backend("cpu")
    assert tool.main(["--per-binade", "2", "--devices", "cpu:0", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Measured on: ") and "2 random inputs per binade" in out
    rows = re.findall(r"^\| (\w+) \| (float\d+) \| ([^|]+) \|$", out, flags=re.M)
    names = [op.name.lower() for op in functions()]
    assert {"sin", "cos", "exp", "log", "tanh", "logistic", "sqrt", "rsqrt", "pow"} <= set(names)
    assert [(f, d) for f, d, _ in rows] == [(f, d) for f in names for d in ("float16", "float32", "float64")]
    figures = {(f, d): float(v) for f, d, v in rows}  # every cell a number (n/a only for unsupported)
    for f in ("sin", "cos"):
        for d, bound in SINCOS_BOUND.items():
            assert figures[(f, d)] <= bound, f"cpu:0 {f} {d}: {figures[(f, d)]} ulp"


def test_unknown_function_is_a_usage_error(tool, capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit) as e:
        tool.main(["--functions", "sinh"])
    assert e.value.code == 2 and "unknown function(s) sinh" in capsys.readouterr().err


def test_ulp_error_and_sweep() -> None:
    one = np.float32(1.0)
    got = np.array([one, np.nextafter(one, np.float32(2)), np.nan, np.inf, np.inf, np.inf, 0.0], np.float32)
    ref = np.array([1.0, 1.0, np.nan, np.inf, 1e300, 1e30, np.nan])  # 1e300 overflows float32: inf is right
    np.testing.assert_array_equal(ulp_error(got, ref, DType.FLOAT32), [0.0, 1.0, 0.0, 0.0, 0.0, np.inf, np.inf])
    # a reference halfway between two floats: the correctly rounded one counts as exact,
    # the other is half an ulp off
    half = np.array([1.0 + 2.0 ** -24] * 2)
    np.testing.assert_array_equal(ulp_error(np.float32([1.0, 1.0 + 2.0 ** -23]), half, DType.FLOAT32), [0.0, 0.5])
    x = binade_sweep(DType.FLOAT16, 3, np.random.default_rng(0))
    e = np.frexp(np.abs(x[x != 0].astype(np.float64)))[1] - 1
    assert x.dtype == np.float16 and set(range(-24, 16)) <= set(e.tolist()) and (x < 0).sum() == (x > 0).sum()
    assert Op.SIN in functions() and Op.SQRT in functions()
