"""The fast tier (``pytest --fast``, ``make test`` outside CI) deselects by dtype and by
file in tests/conftest.py; the full sweep (CI) keeps everything and refuses ``--fast``."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

SAMPLE = '''
import numpy as np
import pytest
from axle.ir.dtypes import DType
from axle.testing.cases import cases_for
from axle.ir.ops import Op

@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64, np.bool_, np.float16])
def test_numpy_types(dt):
    assert dt

@pytest.mark.parametrize("dt", ["f64", "s64"])
def test_only_wide(dt):
    assert dt

@pytest.mark.parametrize("case", cases_for(Op.ADD) + cases_for(Op.RESHAPE), ids=lambda c: c.id)
def test_case(case):
    assert case

def test_plain():
    assert True
'''


def _collect(tmp_path: Path, *args: str, ci: bool = False) -> subprocess.CompletedProcess:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}  # e.g. -v: another listing
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path), *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path)


def _ids(out: str) -> set[str]:
    return {line.split("::", 1)[1] for line in out.splitlines() if "::" in line}


def test_full_sweep_keeps_every_variant(tmp_path):
    full = _ids(_collect(tmp_path).stdout)
    assert "test_numpy_types[float64]" in full and "test_case[add-f64[7]]" in full
    assert "test_case[reshape-f16[6]-to[2, 3]]" in full and "test_case[add-bf16[7]]" in full
    # add: 12 numeric dtypes x 8 shapes; reshape: 13 dtypes x 6 specs
    assert len(full) == 6 + 2 + 12 * 8 + 13 * 6 + 1


def test_fast_tier_keeps_one_dtype_per_path(tmp_path):
    fast = _ids(_collect(tmp_path, "--fast").stdout)
    assert {f"test_numpy_types[{t}]" for t in ("float32", "int32", "bool", "float16")} <= fast
    assert not {"test_numpy_types[float64]", "test_numpy_types[int64]"} & fast
    # float16 where it computes (add), not where it only moves elements (reshape)
    assert "test_case[add-f16[7]]" in fast and "test_case[add-f32[7]]" in fast and "test_case[add-s32[7]]" in fast
    assert "test_case[reshape-f32[6]-to[2, 3]]" in fast and "test_case[reshape-f16[6]-to[2, 3]]" not in fast
    assert not any("-f64" in i or "-s64" in i for i in fast)
    # the narrow/unsigned integers and bfloat16 run in the full tier only
    assert not any(f"-{t}[" in i for i in fast for t in ("s8", "s16", "u8", "u16", "u32", "u64", "bf16"))
    # a test with no fast variant keeps them all: the fast tier never drops a whole test
    assert {"test_only_wide[f64]", "test_only_wide[s64]", "test_plain"} <= fast


def test_ci_refuses_the_fast_tier(tmp_path):
    run = _collect(tmp_path, "--fast", ci=True)
    assert run.returncode != 0 and "CI=true" in run.stdout + run.stderr
    assert "test_numpy_types[float64]" in _collect(tmp_path, ci=True).stdout


def test_xdist_workers_start_the_long_files_first(tmp_path: Path) -> None:
    """make test's parallel pass hands files to its workers in collection order
    (--no-loadscope-reorder): conftest's LONG_FILES first (test_resnet.py here, one test),
    then the others most tests first; not pytest-xdist's order (most tests first), which
    started a long file of two tests last."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    test = "def test_{n}():\n    open({log!r}, 'a').write(__name__ + '\\n')\n"
    log = str(tmp_path / "ran.txt")
    for name, count in (("test_few", 2), ("test_many", 5), ("test_resnet", 1)):
        (tmp_path / f"{name}.py").write_text("\n".join(test.format(n=i, log=log) for i in range(count)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # e.g. this xdist worker's
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                        "-n", "1", "--dist", "loadfile", "--no-loadscope-reorder", str(tmp_path)],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = (tmp_path / "ran.txt").read_text().split()
    assert ran == ["test_resnet"] + ["test_many"] * 5 + ["test_few"] * 2, ran
