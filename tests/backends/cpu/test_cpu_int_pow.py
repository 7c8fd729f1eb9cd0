"""Integer power on cpu:0 (issue 12): every operand form compiles in bounded time and
matches the interpreter (docs/ir.md: by squaring, wrapping; a negative exponent gives 0
except for the bases +-1).

The cpu backend used to unroll 63 branch-free square-and-multiply rounds. With
loop-invariant operands (a constant array read at a fixed index, a broadcast scalar)
LLVM's loop vectorizer took time exponential in the number of rounds: 4 s at 28 rounds,
doubling with each further one, so 63 never finished."""
from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

import axle
from axle.compiler import compile_module
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Module

INTS = {DType.INT32: "s32", DType.INT64: "s64"}

#: issue 12: optimized cpu:0 never finished compiling this module
HANG = """module @random

entry %random (p0: s64[3]) -> s64[1] {
  %p0 = s64[3] parameter(0)
  %constant = s64[3] constant({23, -19, 11})
  %power = s64[3] power(%constant, %p0)
  ROOT %slice = s64[1] slice(%power), limit={3}, start={2}, stride={1}
}
"""

_HANG_RUN = f"""
import numpy as np, axle
from axle.compiler import compile_module
from axle.interpreter import evaluate
from axle.ir import parse_module
cpu = axle.device("cpu:0")
for t, dt in (("s64", np.int64), ("s32", np.int32)):
    m = parse_module({HANG!r}.replace("s64", t))
    exe = compile_module(m, cpu, optimize=True)
    big = np.iinfo(dt).max
    for e in ([0, 0, 5], [1, 2, 63], [0, 0, 64], [0, 0, big], [0, 0, big - 1], [0, 0, -1], [0, 0, 2 ** 31 - 1]):
        x = np.array(e, dt)
        got = np.asarray(exe.execute([axle.REGISTRY.backend("cpu").to_device(x, cpu)])[0].handle)
        assert np.array_equal(got, evaluate(m, x)[0]), (t, e, got, evaluate(m, x)[0])
print("ok")
"""


def test_power_of_a_constant_array_at_a_fixed_index_compiles() -> None:
    """Run apart, under a time limit, so that a regression fails instead of hanging the
    suite (a limit far above the compile time: the old code never finished)."""
    r = subprocess.run([sys.executable, "-c", _HANG_RUN], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "ok", r.stdout


def _bases(dt: DType) -> np.ndarray:
    i = np.iinfo(dt.np)
    return np.array([0, 1, -1, 2, -2, 3, -3, 7, 23, -19, 11, i.min, i.max, i.min + 1], dt.np)


def _exponents(dt: DType) -> np.ndarray:
    i = np.iinfo(dt.np)
    return np.array([0, 1, 2, 3, 5, 31, 32, 62, 63, 64, 65, 2 ** 31 - 1, i.max, i.max - 1, -1, -2, -3, i.min],
                    dt.np)


#: how each operand reaches the power: a parameter (a different value per element), a
#: constant array (read from memory), a scalar constant broadcast (folded by LLVM) or a
#: scalar parameter broadcast (loop-invariant, hoisted out of the element loop)
FORMS = ("param", "array", "const", "scalar")


def _operand(b: Builder, form: str, values: np.ndarray, k: int, dt: DType, n: int) -> tuple:
    """The node for one operand and the module inputs it needs."""
    if form == "param":
        return b.parameter(f"{INTS[dt]}[{n}]"), [values]
    if form == "array":
        return b.constant(values), []
    if form == "const":
        return b.broadcast_in_dim(b.constant(np.array(values[k], dt.np)), shape=(n,), broadcast_dimensions=()), []
    p = b.parameter(f"{INTS[dt]}[]")
    return b.broadcast_in_dim(p, shape=(n,), broadcast_dimensions=()), [np.array(values[k], dt.np)]


def _module(dt: DType, xf: str, yf: str, x: np.ndarray, y: np.ndarray, k: int) -> tuple[Module, list]:
    """power(x, y) + x inside one fusion (the add keeps the power fused, in the element loop)."""
    b = Builder(f"pow_{xf}_{yf}")
    n = len(x)
    xn, xin = _operand(b, xf, x, k, dt, n)
    yn, yin = _operand(b, yf, y, k, dt, n)
    return b.build(b.add(b.pow(xn, yn), xn)), xin + yin


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize("dt", list(INTS), ids=list(INTS.values()))
@pytest.mark.parametrize("xf,yf", list(itertools.product(FORMS, FORMS)))
def test_integer_power_matches_the_interpreter(xf: str, yf: str, dt: DType, optimize: bool, cpu) -> None:  # noqa: ANN001
    xs, ys = (np.array(v, dt.np) for v in zip(*itertools.product(_bases(dt), _exponents(dt))))
    # A scalar form takes one value per module: a few (base, exponent) pairs of the product.
    picks = range(len(xs)) if "const" not in (xf, yf) and "scalar" not in (xf, yf) else range(0, len(xs), 23)
    for k in picks:
        m, inputs = _module(dt, xf, yf, xs, ys, k)
        exe = compile_module(m, cpu, optimize=optimize)
        be = axle.REGISTRY.backend("cpu")
        got = be.to_host(exe.execute([be.to_device(a, cpu) for a in inputs])[0])
        want = evaluate(m, *inputs)[0]
        assert np.array_equal(got, want), f"{m.name} ({INTS[dt]}, k={k}): {got} != {want}"
        if xf in ("param", "array") and yf in ("param", "array"):
            break  # every pair is in the one module


_SQUARES_RUN = """
import numpy as np, axle
from axle.compiler import compile_module
from axle.interpreter import evaluate
from axle.ir import parse_module
lines = ["module @sq", "", "entry %sq (p0: s64[3]) -> s64[1] {", "  %p0 = s64[3] parameter(0)",
         "  %c = s64[3] constant({23, -19, 11})", "  %m0 = s64[3] add(%c, %p0)"]
lines += [f"  %m{k} = s64[3] multiply(%m{k - 1}, %m{k - 1})" for k in range(1, 41)]
lines += ["  ROOT %s = s64[1] slice(%m40), limit={3}, start={2}, stride={1}", "}", ""]
m = parse_module("\\n".join(lines))
cpu = axle.device("cpu:0")
x = np.array([0, 0, 2], np.int64)
got = np.asarray(compile_module(m, cpu, optimize=True).execute([axle.REGISTRY.backend("cpu").to_device(x, cpu)])[0].handle)
assert np.array_equal(got, evaluate(m, x)[0]), (got, evaluate(m, x)[0])
print("ok")
"""


def test_a_chain_of_squarings_of_one_element_compiles() -> None:
    """The same blow-up without power: 40 squarings of the one element a [1] slice reads.
    Its column loop (one element) left the chain inside the loop, where LLVM could not
    hoist it (the output store may alias the loads) and the vectorizer's time doubled
    with each squaring (26 took 3.5 s). Run apart, under a limit, as above."""
    r = subprocess.run([sys.executable, "-c", _SQUARES_RUN], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "ok", r.stdout
