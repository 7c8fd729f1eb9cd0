"""axle.ir.numerics is the one home of the inlined approximations' constants: its tanh fit is
what tools/fit_tanh.py produces (so it is regenerable), and that fit is accurate in float32."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from axle.ir.numerics import EXP_LOG, TANH_F32

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fit_tanh.py"


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


def test_tanh_coefficients_are_the_fitting_tools() -> None:
    p = _tool("--check")
    assert p.returncode == 0, p.stderr


def test_check_fails_on_a_changed_coefficient_and_write_restores_it(tmp_path: Path) -> None:
    from axle.ir import numerics

    copy = tmp_path / "numerics.py"
    copy.write_text(Path(numerics.__file__).read_text().replace(repr(TANH_F32.p[1]), "0.1339"))
    bad = _tool("--check", "--numerics", str(copy))
    assert bad.returncode == 1 and "run it with --write" in bad.stderr
    assert _tool("--write", "--numerics", str(copy)).returncode == 0
    assert _tool("--check", "--numerics", str(copy)).returncode == 0
    # this host's fit, equal to the stored one to the check's tolerance (the last digits
    # follow the BLAS build), the rest of the file untouched
    written, stored = copy.read_text(), Path(numerics.__file__).read_text()
    assert "0.1339," not in written
    assert written.split("# BEGIN fit_tanh.py")[0] == stored.split("# BEGIN fit_tanh.py")[0]
    assert written.split("# END fit_tanh.py")[1] == stored.split("# END fit_tanh.py")[1]


def test_tanh_fit_is_accurate_in_float32() -> None:
    sys.path.insert(0, str(TOOL.parent))
    try:
        import fit_tanh
    finally:
        sys.path.remove(str(TOOL.parent))
    rel, _ = fit_tanh.f32_error(np.array(TANH_F32.p), np.array(TANH_F32.q))
    assert rel < 3.2e-7  # f32_error covers |x| <= 10: the clamp costs nothing measurable


def test_ln2_splits_are_exact_in_their_high_part() -> None:
    for dt, k in EXP_LOG.items():
        assert float(np.array(k.ln2_hi, dt.np)) == k.ln2_hi  # representable in the format
        assert abs(k.ln2_hi + k.ln2_lo - np.log(2.0)) < 2.0 ** -40
        # n * ln2_hi is exact for every n exp's clamps allow: ln2_hi's significand has at
        # least as many trailing zero bits as n has bits
        n_max = int(np.ceil(max(-k.exp_lo, k.exp_hi) / np.log(2.0)))
        significand = int(np.ldexp(np.frexp(k.ln2_hi)[0], np.finfo(dt.np).nmant + 1))
        trailing_zeros = (significand & -significand).bit_length() - 1
        assert trailing_zeros >= n_max.bit_length(), (dt, trailing_zeros, n_max)
