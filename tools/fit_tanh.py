"""Fits the float32 tanh every backend inlines (axle.ir.numerics.TANH_F32, read by the cpu
backend's mathfns and the OpenCL backend's vector tanh): tanh(x) ~ x P(x^2)/Q(x^2)
on |x| <= 9 (beyond, tanh rounds to +-1 in float32), P and Q of degree 4 in x^2 with
P(0) = Q(0) = 1, so tanh(x) = x exactly for tiny x.

Method: linearized least squares (Sanathanan-Koerner iteration, weighting by the previous
denominator) for relative error, with Lawson-style reweighting towards minimax. Prints the
coefficients and the error of a float32 Horner evaluation against float64 tanh.

    python tools/fit_tanh.py            # print the fit and its error
    python tools/fit_tanh.py --write    # rewrite the generated block of core/axle/ir/numerics.py
    python tools/fit_tanh.py --check    # exit 1 if numerics.py differs from a fresh fit
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

NUMERICS = Path(__file__).resolve().parent.parent / "core" / "axle" / "ir" / "numerics.py"
_BLOCK = re.compile(r"(# BEGIN fit_tanh.py[^\n]*\n)(.*?)(# END fit_tanh.py)", re.S)

DEG, CLAMP = 4, 9.0


def fit(iters: int = 40) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(1e-3, CLAMP, 20000)
    f = np.tanh(x) / x
    s = x * x
    w = np.ones_like(x)
    q_prev = np.ones_like(x)
    for _ in range(iters):
        # f*Q(s) - P(s) = 0 with p0 = q0 = 1: unknowns p1..pd, q1..qd
        a = np.hstack([np.vstack([s ** k for k in range(1, DEG + 1)]).T,
                       -np.vstack([f * s ** k for k in range(1, DEG + 1)]).T])
        scale = w / (np.abs(q_prev) * f)
        sol, *_ = np.linalg.lstsq(a * scale[:, None], (f - 1.0) * scale, rcond=None)
        p = np.concatenate([[1.0], sol[:DEG]])
        q = np.concatenate([[1.0], sol[DEG:]])
        q_prev = np.polyval(q[::-1], s)
        err = np.abs(np.polyval(p[::-1], s) / q_prev / f - 1.0)
        w = w * (err / err.max()) ** 0.25 + 1e-6
    return p, q


def f32_error(p: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(max relative error, max error in float32 ulps) of the float32 evaluation."""
    x = np.concatenate([np.linspace(-10, 10, 2_000_001), np.geomspace(1e-30, 10, 200_000)]).astype(np.float32)
    xc = np.clip(x, np.float32(-CLAMP), np.float32(CLAMP))
    s = (xc * xc).astype(np.float32)

    def horner(c: np.ndarray) -> np.ndarray:
        acc = np.full_like(s, np.float32(c[-1]))
        for ck in c[-2::-1]:
            acc = (acc.astype(np.float64) * s + np.float64(np.float32(ck))).astype(np.float32)  # fma
        return acc

    r = (xc * horner(p) / horner(q)).astype(np.float32)
    ref = np.tanh(x.astype(np.float64))
    rel = np.abs(r - ref) / np.maximum(np.abs(ref), 1e-300)
    ulp = np.abs(r - ref) / np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    return float(rel.max()), float(ulp.max())


def block(p: np.ndarray, q: np.ndarray) -> str:
    """The generated part of numerics.py: the TANH_F32 constant."""
    fmt = lambda c: "(" + ", ".join(repr(float(v)) for v in c) + ")"  # noqa: E731
    return f"TANH_F32 = RationalTanh(\n    clamp={CLAMP!r},\n    p={fmt(p)},\n    q={fmt(q)},\n)\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the block in numerics.py")
    mode.add_argument("--check", action="store_true", help="fail if numerics.py is not the fit")
    ap.add_argument("--numerics", type=Path, default=NUMERICS, help="the file to check or rewrite")
    args = ap.parse_args(argv)
    p, q = fit()
    path: Path = args.numerics
    text = path.read_text()
    m = _BLOCK.search(text)
    if m is None:
        print(f"{path}: no '# BEGIN fit_tanh.py' ... '# END fit_tanh.py' block", file=sys.stderr)
        return 2
    if args.check:
        # to about a float32 ulp, the precision the kernels read the coefficients in: the
        # reweighted least squares amplifies the BLAS build's rounding (OpenBLAS's kernels for
        # Zen and for Sapphire Rapids give fits 5e-8 apart)
        stored = {k: np.array(v, dtype=float) for k, v in re.findall(r"(\w+)=\(([^)]*)\)", m.group(2))
                  for v in [[float(c) for c in v.split(",")]]}
        if set(stored) != {"p", "q"} or not all(np.allclose(stored[k], c, rtol=2.5e-7, atol=0)
                                                for k, c in (("p", p), ("q", q))):
            print(f"{path}: TANH_F32 is not what tools/fit_tanh.py fits; run it with --write", file=sys.stderr)
            return 1
        return 0
    if args.write:
        path.write_text(text[:m.start(2)] + block(p, q) + text[m.end(2):])
    print("P =", tuple(float(v) for v in p))
    print("Q =", tuple(float(v) for v in q))
    rel, ulp = f32_error(p, q)
    print(f"float32 evaluation: max relative error {rel:.3g}, max {ulp:.2f} ulp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
