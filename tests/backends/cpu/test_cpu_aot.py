"""AOT: a 2-layer MLP forward pass and the seed example compiled to .o + .h, linked into
a C harness with ``cc``, run with no Python, and compared with the interpreter."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from axle.errors import AxleError
from axle.interpreter import evaluate
from axle.ir import Builder, DType
from axle.ir.types import TensorType
from axle.testing import IN_CI
from axle.testing.cases import assert_close

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples" / "aot"))
import models  # noqa: E402

C_TYPE = {"f32": "float", "f64": "double", "s32": "int32_t", "s64": "int64_t", "pred": "bool", "s8": "int8_t",
          "s16": "int16_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t", "bf16": "uint16_t"}


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc) on PATH: the AOT test needs one") if IN_CI else pytest.skip("no C compiler")
    return cc  # type: ignore[return-value]


def harness(name: str, args: list[TensorType], results: list[TensorType]) -> str:
    """A C main() that reads each argument from a file and writes each result to one."""
    lines = ["#include <stdio.h>", "#include <stdlib.h>", f'#include "{name}.h"',
             "static void *rd(const char *p, size_t n) { void *b = malloc(n ? n : 1); FILE *f = fopen(p, \"rb\");",
             "  if (!f || fread(b, 1, n, f) != n) exit(3); fclose(f); return b; }",
             "static void wr(const char *p, const void *b, size_t n) { FILE *f = fopen(p, \"wb\");",
             "  if (!f || fwrite(b, 1, n, f) != n) exit(4); fclose(f); }",
             "int main(int argc, char **argv) {"]
    up = name.upper()
    for k, t in enumerate(args):
        lines.append(f"  {C_TYPE[t.dtype.value]} *a{k} = rd(argv[{k + 1}], {up}_ARG{k}_BYTES);")
    for k, t in enumerate(results):
        lines.append(f"  {C_TYPE[t.dtype.value]} *o{k} = malloc({up}_OUT{k}_BYTES ? {up}_OUT{k}_BYTES : 1);")
    call = ", ".join([f"a{k}" for k in range(len(args))] + [f"o{k}" for k in range(len(results))])
    lines.append(f"  if ({name}_run({call}) != 0) return 1;")
    for k in range(len(results)):
        lines.append(f"  wr(argv[{len(args) + 1 + k}], o{k}, {up}_OUT{k}_BYTES);")
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def build_and_run(res, inputs: list[np.ndarray], tmp: pathlib.Path) -> list[np.ndarray]:  # noqa: ANN001
    src = tmp / "main.c"
    src.write_text(harness(res.name, res.arg_types, res.result_types))
    exe = tmp / "main"
    r = subprocess.run([_cc(), "-O2", "-I", os.path.dirname(res.header_path), "-o", str(exe), str(src),
                        res.object_path, "-lm"], cwd=tmp, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    files = []
    for k, x in enumerate(inputs):
        p = tmp / f"in{k}.bin"
        np.ascontiguousarray(x).tofile(p)
        files.append(str(p))
    outs = [str(tmp / f"out{k}.bin") for k in range(len(res.result_types))]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    subprocess.run([str(exe), *files, *outs], check=True, env=env, timeout=60)
    return [np.fromfile(p, dtype=t.dtype.np).reshape(t.shape) for p, t in zip(outs, res.result_types)]


def test_aot_mlp_forward(tmp_path: pathlib.Path) -> None:
    from axle_cpu.aot import compile_aot, trace

    types = ["f32[100,784]", "f32[784,128]", "f32[128]", "f32[128,10]", "f32[10]"]
    res = compile_aot(models.mlp, types, str(tmp_path), name="mlp")
    header = pathlib.Path(res.header_path).read_text()
    assert "int mlp_run(const float* x, const float* w1, const float* b1, const float* w2, const float* b2, " \
           "float* out0);" in header
    assert "#define MLP_ARG0_SIZE 78400" in header and "#define MLP_OUT0_BYTES 4000" in header
    rng = np.random.default_rng(1)
    inputs = [(rng.standard_normal(t.shape) * 0.1).astype(np.float32) for t in res.arg_types]
    got = build_and_run(res, inputs, tmp_path)
    module = trace(models.mlp, res.arg_types, "mlp")
    want = evaluate(module, *inputs)
    assert_close(got[0], want[0], 1e-4, 1e-6, "aot mlp")
    np.testing.assert_allclose(got[0].sum(axis=1), 1.0, rtol=1e-5)


def test_aot_seed_example_via_cli(tmp_path: pathlib.Path) -> None:
    n = 100_003  # odd: not a multiple of any vector width
    out_dir = tmp_path / "seed"
    cmd = [sys.executable, "-m", "axle", "aot", f"{ROOT / 'examples' / 'aot' / 'models.py'}:seed",
           "--arg", f"f32[{n}]", "--arg", f"f32[{n}]", "--arg", f"f32[{n}]", "-o", str(out_dir)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (out_dir / "README.md").exists() and (out_dir / "seed.h").exists()
    from axle_cpu.aot import AotResult, trace

    types = [TensorType(DType.FLOAT32, (n,))] * 3
    module = trace(models.seed, types, "seed")
    res = AotResult("seed", str(out_dir / "seed.o"), str(out_dir / "seed.h"), str(out_dir / "README.md"), 0,
                    types, [module.entry.root.tensor_type], 0)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    got = build_and_run(res, inputs, tmp_path)
    want = evaluate(module, *inputs)
    assert_close(got[0], want[0], 1e-4, 1e-3, "aot seed")


def test_aot_module_with_every_kind_of_result(tmp_path: pathlib.Path) -> None:
    """Results that are an input, a constant and a repeated value are copied; ints work."""
    from axle_cpu.aot import compile_aot

    b = Builder("multi")
    x = b.parameter("s32[5]", name="x")
    y = b.parameter("f64[2,3]", name="y")
    c = b.constant(np.arange(3, dtype=np.int64))
    s = b.div(x, b.constant(np.array([0, -1, 2, 3, 4], np.int32)))
    m = b.build(s, x, c, b.transpose(y, permutation=(1, 0)), s)
    res = compile_aot(m, ["s32[5]", "f64[2,3]"], str(tmp_path), name="multi")
    inputs = [np.array([7, -2**31, 9, -4, 5], np.int32), np.arange(6, dtype=np.float64).reshape(2, 3)]
    got = build_and_run(res, inputs, tmp_path)
    for g, w in zip(got, evaluate(m, *inputs)):
        np.testing.assert_array_equal(g, w)


def test_aot_new_dtypes(tmp_path: pathlib.Path) -> None:
    """Unsigned division by 0, int8 constants and bfloat16 (its bits in the C interface)."""
    import ml_dtypes

    from axle_cpu.aot import compile_aot

    b = Builder("narrow")
    x = b.parameter("u8[5]", name="x")
    y = b.parameter("bf16[3]", name="y")
    q = b.div(x, b.constant(np.array([0, 1, 2, 3, 255], np.uint8)))
    s = b.add(b.convert(x, dtype="s8"), b.constant(np.array([-128, 127, 1, 2, 3], np.int8)))
    m = b.build(q, s, b.mul(y, b.convert(b.constant(np.array([1.5, 3.0, -1.0], np.float32)), dtype="bf16")))
    res = compile_aot(m, ["u8[5]", "bf16[3]"], str(tmp_path), name="narrow")
    inputs = [np.array([7, 200, 255, 9, 254], np.uint8), np.array([1.0078125, 3.3e38, np.nan], ml_dtypes.bfloat16)]
    got = build_and_run(res, inputs, tmp_path)
    for g, w in zip(got, evaluate(m, *inputs)):
        assert g.dtype == w.dtype
        if g.dtype.kind == "V":  # bfloat16: the same bits, NaN for NaN (whatever its sign)
            nan = np.isnan(w.astype(np.float32))
            np.testing.assert_array_equal(np.isnan(g.astype(np.float32)), nan)
            g, w = g[~nan].view(np.uint16), w[~nan].view(np.uint16)
        np.testing.assert_array_equal(g, w)


def test_aot_errors(tmp_path: pathlib.Path) -> None:
    from axle_cpu.aot import compile_aot

    with pytest.raises(AxleError, match="cannot read argument type"):
        compile_aot(models.seed, ["f32[10", "f32[10]", "f32[10]"], str(tmp_path))
    with pytest.raises(AxleError):
        compile_aot(models.seed, ["f32[10]", "f32[11]", "f32[10]"], str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "axle", "aot", "nope.py:f", "-o", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no such file" in r.stderr


def test_aot_sin_cos_huge_arguments(tmp_path: pathlib.Path) -> None:
    """sin/cos are module functions with a vector variant and a 2/pi table (kept through
    llvm.compiler.used): the object links and is right for huge arguments too."""
    from axle_cpu.aot import compile_aot

    b = Builder("trig")
    x = b.parameter("f32[1003]", name="x")
    y = b.parameter("f64[1003]", name="y")
    m = b.build(b.sin(x), b.cos(y))
    res = compile_aot(m, ["f32[1003]", "f64[1003]"], str(tmp_path), name="trig")
    rng = np.random.default_rng(3)
    xs = (10.0 ** rng.uniform(-3, 38, 1003) * rng.choice([-1, 1], 1003)).astype(np.float32)
    ys = 10.0 ** rng.uniform(-3, 308, 1003)
    got = build_and_run(res, [xs, ys], tmp_path)
    np.testing.assert_allclose(got[0], np.sin(xs.astype(np.float64)), rtol=2e-7, atol=1e-7)
    np.testing.assert_allclose(got[1], np.cos(ys), rtol=1e-15, atol=1e-16)


# control flow: loops and conditionals in the object file (no Python at run time)


def test_aot_stacked_lstm_scan(tmp_path: pathlib.Path) -> None:
    """The seeds' stacked LSTM (3 layers of 60, 10 steps) written with scan: one native loop
    in the object, run from C, equal to NumPy."""
    from axle_cpu.aot import compile_aot

    types = ["f32[10,1,60]", "f32[3,60,240]", "f32[3,60,240]", "f32[3,240]"]
    res = compile_aot(models.lstm, types, str(tmp_path), name="lstm")
    inputs = models.lstm_inputs()
    (got,) = build_and_run(res, inputs, tmp_path)
    np.testing.assert_allclose(got, models.lstm_numpy(*inputs), rtol=1e-5, atol=1e-6)


def test_aot_fori_loop_and_switch_with_traced_bounds(tmp_path: pathlib.Path) -> None:
    """A fori_loop whose trip count is an argument (0 included), a switch on an argument
    (lax.switch clamps it) and a conditional inside the loop."""
    import axle.numpy as anp
    from axle import lax
    from axle_cpu.aot import compile_aot

    def fn(x, n, k):  # noqa: ANN001, ANN202
        def step(i, v):  # noqa: ANN001, ANN202
            return lax.cond(i % 2 == 0, lambda w: w * 0.5 + 1.0, lambda w: w - i.astype(anp.float32), v)

        y = lax.fori_loop(0, n, step, x)
        return lax.switch(k, [lambda w: w, lambda w: -w, lambda w: w * w], y), y.sum()

    res = compile_aot(fn, ["f32[5]", "s32[]", "s32[]"], str(tmp_path), name="loops")
    x = np.linspace(-2, 2, 5).astype(np.float32)
    for n, k in ((0, 0), (1, 1), (6, 2), (9, 7), (3, -1)):
        want = x.copy()
        for i in range(n):
            want = want * np.float32(0.5) + np.float32(1) if i % 2 == 0 else want - np.float32(i)
        out = [want, -want, want * want][min(max(k, 0), 2)]
        got = build_and_run(res, [x, np.asarray(n, np.int32), np.asarray(k, np.int32)], tmp_path)
        np.testing.assert_allclose(got[0], out, rtol=1e-6)
        np.testing.assert_allclose(got[1], want.sum(), rtol=1e-5)


@pytest.mark.parametrize("case_id", ["while-0-trips-f32[7]", "while-5-trips-s64[2, 0]", "while-nested-f32[3,4]",
                                     "while-conditional-inside-f32[3,4]", "conditional-index--1-f32[3,4]",
                                     "conditional-index-3-f32[3,4]", "conditional-pred-true-f32[3,4]"])
def test_aot_kit_control_cases(case_id: str, tmp_path: pathlib.Path) -> None:
    """Kit loops and conditionals at the IR level (an s32 index out of range takes the
    last branch; size-0 carries; nested loops) compiled ahead of time."""
    from axle.testing.cases import control_cases
    from axle_cpu.aot import compile_aot

    (case,) = [c for c in control_cases() if c.id == case_id]
    res = compile_aot(case.module, [p.type for p in case.module.entry.parameters], str(tmp_path), name="ctl")
    got = build_and_run(res, case.inputs, tmp_path)
    for g, w in zip(got, evaluate(case.module, *case.inputs)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("cpu", ["haswell", None], ids=["avx2", "host"])
def test_aot_long_rows_on_avx2_and_the_host(cpu: str | None, tmp_path: pathlib.Path) -> None:
    """Layer norm and row softmax over rows of 1024 and 1100 (a vector tail) compiled for
    AVX2 (256-bit, 16 registers) and for the host (AVX-512 here), against the interpreter:
    the row reductions of 1024 stay loops of vector accumulators on an AVX-512 host
    (emitter._rolled), those of 1100 are unrolled."""
    import axle.numpy as anp
    from axle_cpu.aot import compile_aot, trace

    def rows(x):  # noqa: ANN001, ANN202
        mean = anp.mean(x, axis=1, keepdims=True)
        xc = x - mean
        e = anp.exp(x - anp.max(x, axis=1, keepdims=True))
        return xc / anp.sqrt(anp.mean(xc * xc, axis=1, keepdims=True) + 1e-5), e / anp.sum(e, axis=1, keepdims=True)

    for cols in (1024, 1100):
        types = [f"f32[6,{cols}]"]
        # features "": the named CPU's own (else the host's, AVX-512 included, are added)
        res = compile_aot(rows, types, str(tmp_path / str(cols)), name="rows", cpu=cpu, features="" if cpu else None)
        if cpu and shutil.which("objdump"):  # 256-bit code only
            dump = subprocess.run(["objdump", "-d", res.object_path], capture_output=True, text=True).stdout
            assert "ymm" in dump and "zmm" not in dump
        x = np.random.default_rng(cols).standard_normal((6, cols)).astype(np.float32)
        got = build_and_run(res, [x], tmp_path / str(cols))
        want = evaluate(trace(rows, res.arg_types, "rows"), x)
        for g, w, what in zip(got, want, ("layer norm", "softmax")):
            assert_close(g, w, 2e-5, 1e-6, f"aot {what} {cols} ({cpu or 'host'})")


@pytest.mark.parametrize("cpu", ["haswell", None], ids=["avx2", "host"])
def test_aot_prepacked_constant_weights(cpu: str | None, tmp_path: pathlib.Path) -> None:
    """Weights closed over by the function are constants: the object holds them packed in
    the target's panels (AVX2's 16 wide, AVX-512's 64: gemm.pack_b) and its dot and
    convolution read them so, giving the interpreter's results."""
    import axle
    import axle.numpy as anp
    from axle_cpu.aot import compile_aot, trace
    from axle_cpu.gemm import vector_bits_for
    from axle_cpu.plan import build_plan

    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 150)).astype(np.float32)
    k = rng.standard_normal((3, 3, 24, 40)).astype(np.float32)

    def fn(x, img):  # noqa: ANN001, ANN202
        y = axle.lax.conv_general_dilated(img, k, (1, 1), [(1, 1), (1, 1)], dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return anp.tanh(x @ w), y

    types = ["f32[40,64]", "f32[1,9,10,24]"]
    features = "" if cpu else None
    res = compile_aot(fn, types, str(tmp_path), name="packed", cpu=cpu, features=features)
    module = trace(fn, res.arg_types, "packed")
    labels = [s.label for s in build_plan(module, arena=False, vector_bits=vector_bits_for(features)).steps]
    assert sum(label.endswith("(prepacked)") for label in labels) >= 1, labels
    inputs = [rng.standard_normal(t.shape).astype(np.float32) for t in res.arg_types]
    got = build_and_run(res, inputs, tmp_path)
    for g, want, what in zip(got, evaluate(module, *inputs), ("dot", "conv")):
        assert_close(g, want, 1e-4, 1e-4, f"aot prepacked {what} ({cpu or 'host'})")
