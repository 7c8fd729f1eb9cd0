"""Hand-built fusions of every kind, threads, vectorization, the LLVM dot kernel, the
compile cache and the error paths of the CPU backend."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.backend import CompileOptions
from axle.errors import AxleError, BackendError
from axle.interpreter import evaluate
from axle.ir import Builder, DType, Module, TensorType
from axle.ir.parser import parse_type
from axle.testing.cases import assert_close, random_input, tolerance


def _backend():  # noqa: ANN202
    return axle.REGISTRY.backend("cpu")


def run(module: Module, inputs: list[np.ndarray], cpu, **flags: str) -> tuple[list[np.ndarray], object]:  # noqa: ANN001
    be = _backend()
    exe = be.compile(module, cpu, CompileOptions(optimized=False, flags=flags))
    outs = exe.execute([be.to_device(x, cpu) for x in inputs])
    return [be.to_host(o) for o in outs], exe


def check(module: Module, inputs: list[np.ndarray], cpu, n_reduced: int = 1, **flags: str) -> object:  # noqa: ANN001
    got, exe = run(module, inputs, cpu, **flags)
    want = evaluate(module, *inputs)
    for g, w in zip(got, want, strict=True):
        rtol, atol = tolerance(DType(axle.ir.dtype(w.dtype).value), None, n_reduced)
        assert_close(g, w, rtol, atol, module.name)
    return exe


def fused_module(name: str, types: list[str], body, kind: str) -> Module:  # noqa: ANN001
    """An entry computation with one fusion node of ``kind`` computing ``body``."""
    inner = Builder(name + "_f")
    ps = [inner.parameter(t) for t in types]
    roots = body(inner, ps)
    roots = roots if isinstance(roots, tuple) else (roots,)
    comp = inner.computation(*roots)
    b = Builder(name)
    qs = [b.parameter(t) for t in types]
    f = b.fusion(*qs, kind=kind, computation=comp)
    if len(roots) == 1:
        return b.build(f)
    return b.build(*[b.get_tuple_element(f, index=i) for i in range(len(roots))])


def _softmax(b: Builder, p: list, shape: tuple[int, int]):  # noqa: ANN001, ANN202
    x = p[0]
    m = b.broadcast_in_dim(b.reduce(x, kind="max", axes=(1,)), shape=shape, broadcast_dimensions=(0,))
    e = b.exp(b.sub(x, m))
    s = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=(1,)), shape=shape, broadcast_dimensions=(0,))
    return b.div(e, s)


RNG = np.random.default_rng(0)


def test_loop_fusion_multi_output(cpu) -> None:  # noqa: ANN001
    m = fused_module("mo", ["f32[37,5]", "f32[5]"], lambda b, p: (
        b.add(p[0], b.broadcast_in_dim(p[1], shape=(37, 5), broadcast_dimensions=(1,))),
        b.tanh(b.mul(p[0], p[0]))), "loop")
    check(m, [random_input(RNG, TensorType(DType.FLOAT32, (37, 5))), random_input(RNG, TensorType(DType.FLOAT32, (5,)))], cpu)


@pytest.mark.parametrize("shape,axes", [((64, 33), (1,)), ((33, 64), (0,)), ((9, 7, 5), (0, 2)), ((1001,), (0,)),
                                        ((6, 4, 3), (1,))])
@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
def test_input_fusion_reductions(shape, axes, kind, cpu) -> None:  # noqa: ANN001
    t = f"f64[{','.join(map(str, shape))}]"
    m = fused_module("red", [t], lambda b, p: b.reduce(b.neg(p[0]), kind=kind, axes=axes), "input")
    x = RNG.standard_normal(shape) * (0.9 if kind == "prod" else 3)
    check(m, [x], cpu, n_reduced=int(np.prod([shape[a] for a in axes])))


def test_input_fusion_sibling_reductions(cpu) -> None:  # noqa: ANN001
    m = fused_module("moments", ["f32[40,300]"], lambda b, p: (
        b.reduce(p[0], kind="sum", axes=(1,)), b.reduce(b.mul(p[0], p[0]), kind="sum", axes=(1,))), "input")
    check(m, [RNG.standard_normal((40, 300)).astype(np.float32)], cpu, n_reduced=300)


@pytest.mark.parametrize("shape,axes", [((1000, 513), (0,)), ((7, 3, 1030), (0, 1)), ((5, 9, 17), (1,)),
                                        ((2, 3, 4, 5), (0, 2)), ((3, 0, 5), (1,)), ((0, 4), (0,)), ((4, 2), (0,))])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "s32", "s64", "pred"])
def test_column_reductions_stream(shape, axes, dt, cpu) -> None:  # noqa: ANN001
    """Reductions keeping the last axis walk the columns innermost (build_columns), in
    chunks that need not divide the column count; sibling outputs share the pass."""
    t = f"{dt}[{','.join(map(str, shape))}]"
    kinds = ("or", "and") if dt == "pred" else ("sum", "max", "min")
    m = fused_module("col", [t], lambda b, p: tuple(b.reduce(p[0], kind=k, axes=axes) for k in kinds), "input")
    x = random_input(RNG, parse_type(t))
    exe = check(m, [x], cpu, n_reduced=max(1, int(np.prod([shape[a] for a in axes]))))
    specs = list(exe.plan.kernels.values())
    assert [s.column_reduce for s in specs] == [True]


def test_column_reduction_vectorized_and_split(cpu, monkeypatch) -> None:  # noqa: ANN001
    m = fused_module("colsum", ["f32[3001,1000]"], lambda b, p: b.reduce(p[0], kind="sum", axes=(0,)), "input")
    x = RNG.standard_normal((3001, 1000)).astype(np.float32)
    _, exe = run(m, [x], cpu)
    assert "<16 x float>" in exe.optimized_ir() or "<8 x float>" in exe.optimized_ir()
    # split across threads: over columns, and (few columns) over the reduced axis
    monkeypatch.setenv("AXLE_CPU_THREADS", "2")
    thin = fused_module("colthin", ["f64[50001,3]"], lambda b, p: b.reduce(p[0], kind="sum", axes=(0,)), "input")
    for mod, arg in ((m, x), (thin, RNG.standard_normal((50001, 3)))):
        _backend()._cache.clear()
        exe = _backend().compile(mod, cpu, CompileOptions(optimized=False))
        for launch, _ in exe._steps:
            launch.parallel = True
        got = _backend().to_host(exe.execute([_backend().to_device(arg, cpu)])[0])
        np.testing.assert_allclose(got, arg.sum(axis=0, dtype=np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape", [(4, 5), (33, 129), (1, 1), (3, 0)])
def test_row_fusion_softmax(shape, cpu) -> None:  # noqa: ANN001
    t = f"f32[{shape[0]},{shape[1]}]"
    m = fused_module("softmax", [t], lambda b, p: _softmax(b, p, shape), "row")
    check(m, [RNG.standard_normal(shape).astype(np.float32)], cpu, n_reduced=max(shape[1], 1))


def test_row_fusion_layer_norm_with_row_outputs(cpu) -> None:  # noqa: ANN001
    shape = (17, 257)

    def ln(b: Builder, p: list):  # noqa: ANN202
        x = p[0]
        n = b.constant(np.array(1.0 / shape[1], np.float32))
        mean = b.mul(b.reduce(x, kind="sum", axes=(1,)), b.broadcast_in_dim(n, shape=(shape[0],), broadcast_dimensions=()))
        xc = b.sub(x, b.broadcast_in_dim(mean, shape=shape, broadcast_dimensions=(0,)))
        var = b.reduce(b.mul(xc, xc), kind="sum", axes=(1,))
        var = b.mul(var, b.broadcast_in_dim(n, shape=(shape[0],), broadcast_dimensions=()))
        eps = b.broadcast_in_dim(b.constant(np.array(1e-5, np.float32)), shape=(shape[0],), broadcast_dimensions=())
        inv = b.rsqrt(b.add(var, eps))
        y = b.mul(xc, b.broadcast_in_dim(inv, shape=shape, broadcast_dimensions=(0,)))
        return y, mean, inv  # full-shape and per-row outputs from one pass

    m = fused_module("ln", ["f32[17,257]"], ln, "row")
    exe = check(m, [RNG.standard_normal(shape).astype(np.float32)], cpu, n_reduced=shape[1])
    assert exe.report()["kernels"] == 1


def test_movement_fusion(cpu) -> None:  # noqa: ANN001
    def body(b: Builder, p: list):  # noqa: ANN202
        x = b.transpose(p[0], permutation=(1, 0))  # [7,5]
        x = b.reverse(x, dimensions=(0,))
        x = b.pad(x, b.constant(np.array(-1.5, np.float32)), low=(1, 0), high=(2, 1), interior=(1, 2))
        x = b.slice(x, start=(1, 0), limit=(15, 13), stride=(2, 3))
        y = b.concatenate(x, b.iota(shape=(7, 2), dtype="f32", dimension=0), dimension=1)
        return b.reshape(y, shape=(7 * y.shape[1],))

    m = fused_module("move", ["f32[5,7]"], body, "loop")
    check(m, [RNG.standard_normal((5, 7)).astype(np.float32)], cpu)


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "s32", "s64"])
def test_llvm_dot_kernel(dt, cpu) -> None:  # noqa: ANN001
    """The LLVM dot (used by AOT and whenever BLAS is off): batch dims, transposed operands."""
    b = Builder("dot")
    x = b.parameter(f"{dt}[3,17,33]")
    y = b.parameter(f"{dt}[33,3,9]")
    m = b.build(b.dot_general(x, y, lhs_batch=(0,), rhs_batch=(1,), lhs_contracting=(2,), rhs_contracting=(0,)))
    xs = [random_input(RNG, t, special=False, small=dt in ("f16", "s32", "s64")) for t in
          (m.entry.parameters[0].type, m.entry.parameters[1].type)]
    got, _ = run(m, xs, cpu, cpu_blas="false")
    exact = np.einsum("bik,kbj->bij", xs[0].astype(np.float64), xs[1].astype(np.float64))
    if dt.startswith("s"):
        np.testing.assert_array_equal(got[0], evaluate(m, *xs)[0])
    else:
        tol = {"f16": 2e-3, "f32": 1e-6, "f64": 1e-13}[dt]
        np.testing.assert_allclose(got[0].astype(np.float64), exact, rtol=tol, atol=tol * 10)


def test_threads_on_off_same_numbers(cpu, monkeypatch) -> None:  # noqa: ANN001
    """Big kernels are split across threads (rows, columns, or a reduction into partial
    results); the numbers match a single-threaded run."""
    n = 1 << 20
    b = Builder("seedbig")
    x, y, z = (b.parameter(f"f32[{n}]") for _ in range(3))
    ew = b.add(x, b.mul(y, z))
    seed = fused_module("seedbig", [f"f32[{n}]"] * 3, lambda bb, p: bb.reduce(bb.add(p[0], bb.mul(p[1], p[2])),
                                                                              kind="sum", axes=(0,)), "input")
    elem = b.build(b.tanh(ew))
    rows = fused_module("rows", ["f32[512,1024]"], lambda bb, p: _softmax(bb, p, (512, 1024)), "row")
    ins = [RNG.standard_normal(n).astype(np.float32) for _ in range(3)]
    cases = [(seed, ins), (elem, ins), (rows, [RNG.standard_normal((512, 1024)).astype(np.float32)])]
    from axle_cpu import threads

    results = {}
    for nt in ("1", "2"):
        monkeypatch.setenv("AXLE_CPU_THREADS", nt)
        outs = []
        for m, xs in cases:
            _backend()._cache.clear()
            exe = _backend().compile(m, cpu, CompileOptions(optimized=False))
            for launch, _ in exe._steps:
                if launch is not None and nt == "2":
                    launch.parallel = True  # force the split whatever the timing says
            outs.append([_backend().to_host(o) for o in exe.execute([_backend().to_device(a, cpu) for a in xs])])
        results[nt] = outs
        assert threads.pool().n == int(nt)
    for (m, _), one, two in zip(cases, results["1"], results["2"]):
        for a, c in zip(one, two):
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-3, err_msg=m.name)
    check(seed, ins, cpu, n_reduced=n)


def loop_float_lanes(ir: str) -> int:
    """The widest float vector of the host's loop vectorizer that ``ir`` holds (0: none):
    the register width, or on AVX-512 also 256 bits, as LLVM's tuning for Intel's cores
    prefers ("prefer-256-bit": Skylake-X to Sapphire Rapids; not Zen 4/5)."""
    from axle_cpu.target import host

    widths = {512: (16, 8), 256: (8,), 128: (4,)}[host().vector_bits]
    return next((n for n in widths if f"<{n} x float>" in ir), 0)


def test_vectorized_f32_elementwise(cpu) -> None:  # noqa: ANN001
    """The loop vectorizer uses the host's wide vectors: <8 x float> in ymm on AVX2,
    <4 x float> (xmm on x86-64) without AVX; on AVX-512 the width LLVM's tuning for the
    CPU prefers: <16 x float> in zmm on AMD's Zen 4/5, <8 x float> in ymm on Intel's cores
    (their "prefer-256-bit" tuning; 512-bit loops measured no faster for the seed on a
    Sapphire Rapids host, docs/backend-cpu.md)."""
    from axle_cpu.target import host

    m = fused_module("vec", ["f32[4099]"] * 2, lambda b, p: b.add(b.mul(p[0], p[1]), b.tanh(p[0])), "loop")
    _, exe = run(m, [np.ones(4099, np.float32)] * 2, cpu)
    lanes = loop_float_lanes(exe.optimized_ir())
    assert lanes, f"the loop vectorizer did not use the {host().vector_bits}-bit host's vectors ({host().cpu})"
    if host().triple.startswith("x86_64"):
        assert {4: "xmm", 8: "ymm", 16: "zmm"}[lanes] in exe.assembly()


def test_transcendentals_inline_no_libm(cpu) -> None:  # noqa: ANN001
    """No libm call: the math is inlined, or (sin, cos) a function of the module itself."""
    import re

    for op in ("exp", "log", "tanh", "logistic", "sin", "cos"):
        m = fused_module(op, ["f32[1000]"], lambda b, p, op=op: getattr(b, op)(p[0]), "loop")
        _, exe = run(m, [np.ones(1000, np.float32)], cpu)
        ir_ = exe.optimized_ir()
        defined = set(re.findall(r"^define [^@]*@\"?([\w.]+)", ir_, flags=re.M))
        callees = set(re.findall(r" call [^@]*@\"?([\w.]+)", ir_))
        outside = {c for c in callees if not c.startswith("llvm.") and c not in defined}
        assert not outside, f"{op}: calls {sorted(outside)}"


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("op,np_fn,lo,hi", [
    ("exp", np.exp, -100, 100), ("log", np.log, 1e-30, 1e30), ("tanh", np.tanh, -12, 12),
    ("logistic", lambda x: 1 / (1 + np.exp(-x)), -50, 50), ("sin", np.sin, -1000, 1000), ("cos", np.cos, -1000, 1000)])
def test_math_accuracy(op, np_fn, lo, hi, dt, cpu) -> None:  # noqa: ANN001
    """Documented accuracy of the inlined approximations over wide ranges (+ specials)."""
    n = 20000
    if op == "log":
        x = np.exp(RNG.uniform(np.log(lo), np.log(hi), n)).astype(dt)
    else:
        x = RNG.uniform(lo, hi, n).astype(dt)
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-3, -1e-3, 1.0]
    t = "f32" if dt is np.float32 else "f64"
    m = fused_module(op, [f"{t}[{n}]"], lambda b, p: getattr(b, op)(p[0]), "loop")
    got, _ = run(m, [x], cpu)
    with np.errstate(all="ignore"):
        want = np_fn(x.astype(np.float64)).astype(dt)
    rtol, atol = tolerance(DType.FLOAT32 if dt is np.float32 else DType.FLOAT64, axle.ir.Op.EXP)
    np.testing.assert_allclose(got[0], want, rtol=rtol, atol=atol, equal_nan=True)


def test_compile_cache_and_report(cpu) -> None:  # noqa: ANN001
    b = Builder("cached")
    x = b.parameter("f32[10]")
    m = b.build(b.exp(x))
    be = _backend()
    e1 = be.compile(m, cpu, CompileOptions(optimized=False))
    e2 = be.compile(m, cpu, CompileOptions(optimized=False))
    r = e1.report()
    assert r["kernels"] == 1 and r["compile_ms"] >= 0
    assert e2.report()["compile_ms"] == 0.0  # served from the per-fingerprint cache
    assert "define void @\"k0_exponential" in e1.kernel_sources()["llvm"]


def test_custom_call_host_step(cpu) -> None:  # noqa: ANN001
    from axle.ir import register_custom_call

    register_custom_call("test.cpu.double", lambda x, config: x * 2)
    b = Builder("cc")
    x = b.parameter("f32[4]")
    m = b.build(b.exp(b.custom_call(x, target="test.cpu.double", shape=(4,), dtype="f32")))
    exe = check(m, [np.arange(4, dtype=np.float32)], cpu)
    assert exe.report()["host_steps"] == 1


def test_errors_are_axle_errors(cpu) -> None:  # noqa: ANN001
    b = Builder("err")
    x = b.parameter("f32[4]")
    m = b.build(b.exp(x))
    be = _backend()
    exe = be.compile(m, cpu, CompileOptions(optimized=False))
    with pytest.raises(BackendError, match="argument 0 is f64"):
        exe.execute([be.to_device(np.zeros(4), cpu)])
    with pytest.raises(BackendError, match="takes 1 argument"):
        exe.execute([])
    # A custom call inside a fusion cannot be compiled: a clear error, not an LLVM crash.
    from axle.ir.module import Computation, Node
    from axle.ir.ops import Op

    p = Node(Op.PARAMETER, (), (("index", 0),), TensorType(DType.FLOAT32, (4,)))
    cc = Node(Op.CUSTOM_CALL, (p,), (("config", ""), ("dtype", DType.FLOAT32), ("shape", (4,)), ("target", "x")),
              TensorType(DType.FLOAT32, (4,)))
    q = Node(Op.PARAMETER, (), (("index", 0),), TensorType(DType.FLOAT32, (4,)))
    f = Node(Op.FUSION, (q,), (("computation", Computation("bad", (p,), cc)), ("kind", "loop")), cc.type)
    with pytest.raises(AxleError, match="custom-call"):
        be.compile(Module("bad", Computation("bad", (q,), f)), cpu, CompileOptions(optimized=False))


def test_pool_reuses_large_buffers(cpu) -> None:  # noqa: ANN001
    from axle_cpu.memory import POOL

    a = POOL.empty((1 << 20,), np.dtype(np.float32))
    assert a.ctypes.data % 64 == 0
    addr = a.ctypes.data
    del a
    before = POOL.stats["reused"]
    b = POOL.empty((1 << 20,), np.dtype(np.float32))
    assert POOL.stats["reused"] == before + 1 and b.ctypes.data == addr
    view = b[10:]
    del b
    c = POOL.empty((1 << 20,), np.dtype(np.float32))
    assert c.ctypes.data != addr  # the live view still owns that mapping
    view[:] = 1.0
    assert float(view.sum()) == (1 << 20) - 10


def test_exponential_inlining_is_split(cpu) -> None:  # noqa: ANN001
    """add(y, reverse(y)) nested 14 times would inline x 2^14 times in one kernel; the
    kernel plan materializes the most re-evaluated values of this hand-made fusion instead
    (still correct)."""
    from axle.passes.inline_cost import inline_cost
    from axle.passes.policy import DEFAULT_POLICY

    m = fused_module("blowup", ["f32[33,17]"], lambda bb, p: _nest(bb, p[0]), "loop")
    assert inline_cost([m.entry.root.attr["computation"].root]) > DEFAULT_POLICY.max_inline_cost
    exe = check(m, [RNG.standard_normal((33, 17)).astype(np.float32)], cpu)
    assert exe.report()["kernels"] > 1


def _nest(b: Builder, y):  # noqa: ANN001, ANN202
    for k in range(14):
        y = b.add(y, b.reverse(y, dimensions=(k % 2,)))
    return y


def test_row_cache_computes_exp_once_per_element(cpu) -> None:  # noqa: ANN001
    """Softmax needs exp(x - max) in the row sum and again for the outputs: the row fusion
    computes it once per element into a per-row stack buffer (one exp in the kernel)."""
    shape = (6, 1000)
    m = fused_module("softmax", ["f32[6,1000]"], lambda b, p: _softmax(b, p, shape), "row")
    exe = check(m, [RNG.standard_normal(shape).astype(np.float32)], cpu, n_reduced=shape[1])
    src = exe.kernel_sources()["llvm"]
    assert "alloca [1000 x float]" in src
    assert src.count('call float @"llvm.floor.f32"') == 1  # exp's range reduction, emitted once


def test_row_cache_only_serves_its_own_row(cpu) -> None:  # noqa: ANN001
    """The row sum is read at another row (reversed) than the output's: values cached for
    the current row must not stand in for that row's sum."""
    shape = (5, 64)

    def body(b: Builder, p: list):  # noqa: ANN202
        e = b.exp(p[0])
        s = b.reverse(b.reduce(e, kind="sum", axes=(1,)), dimensions=(0,))
        return b.add(e, b.broadcast_in_dim(s, shape=shape, broadcast_dimensions=(0,)))

    m = fused_module("rev", ["f32[5,64]"], body, "row")
    check(m, [RNG.standard_normal(shape).astype(np.float32)], cpu, n_reduced=shape[1])


@pytest.mark.parametrize(("regs", "rolled"), [(0.5, False), (1.5, True), (2, True), (8, False)])
def test_a_long_row_reduction_stays_a_loop(cpu, regs: float, rolled: bool) -> None:  # noqa: ANN001
    """Layer norm's two passes over a row (mean, then variance): a row of more float32
    than the host's vector registers hold (``regs`` times that), up to 64 vectors, keeps
    its reductions loops of vector accumulators (emitter._rolled). Unrolled whole, LLVM
    shared the first pass's loads with the second, more vectors than registers, spilled on
    every row (layer norm [8192, 1024] 1.4x slower on AVX-512); shorter and longer rows are
    as before. Values against NumPy either way (a row of 1.5 register files plus 3 has a
    vector tail)."""
    from axle_cpu import emitter, target

    bits = target.host().vector_bits
    cols = int(regs * emitter.REGISTERS.get(bits, 16) * bits // 32) + (3 if regs == 1.5 else 0)
    def layer_norm(x):  # noqa: ANN001, ANN202
        mean = anp.mean(x, axis=1, keepdims=True)
        xc = x - mean
        return xc / anp.sqrt(anp.mean(xc * xc, axis=1, keepdims=True) + 1e-5)

    x = np.random.default_rng(3).standard_normal((5, cols)).astype(np.float32)
    f = axle.jit(layer_norm, device=cpu)
    got = np.asarray(f(x))
    mean = x.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(got, (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5),
                               rtol=2e-5, atol=2e-5)
    sources = _backend().compile(f.lower(x).module, cpu, CompileOptions(optimized=False)).kernel_sources()["llvm"]
    assert ("llvm.loop.interleave.count" in sources) == rolled


def test_an_in_place_kernel_reads_its_operand_through_the_output_pointer(cpu) -> None:  # noqa: ANN001
    """A loop kernel writing its result over an operand that dies there (buffer
    assignment's in-place rule) reads that operand through the output's pointer: read
    through its own, LLVM's vectorizer checks the two pointers for overlap at run time,
    finds it, and runs the scalar loop (10x slower on a ResNet batch-norm backward)."""
    from llvmlite import ir as llir

    from axle_cpu.emitter import KernelEmitter

    t = "f32[8,4099]"

    def loop(b: Builder, operands: list, body, name: str):  # noqa: ANN001, ANN202
        inner = Builder(name)
        return b.fusion(*operands, kind="loop",
                        computation=inner.computation(body(inner, [inner.parameter(t) for _ in operands])))

    b = Builder("in_place")
    x, y = b.parameter(t), b.parameter(t)
    s = loop(b, [x, y], lambda i, p: i.add(p[0], p[1]), "sum")
    z = loop(b, [x, s], lambda i, p: i.mul(p[0], i.tanh(p[1])), "scale")  # over s, its operand 1
    m = b.build(b.reduce(z, kind="sum", axes=(1,)))
    exe = check(m, [random_input(RNG, parse_type(t)) for _ in range(2)], cpu, n_reduced=4099)
    (spec,) = [st.spec for st in exe.plan.steps if st.label.startswith("fusion.1")]
    assert spec.in_place == ((1, 0),)
    em = KernelEmitter(llir.Module(), spec)
    em.build()
    assert sorted(em._bufptr) == [0, 2], "operand 1 is read through its own pointer (table entry 1)"
    # the same computation not in place (its result is the program's) is another kernel:
    # the one reading through the output's pointer, reused here, would read garbage
    b = Builder("not_in_place")
    x, y = b.parameter(t), b.parameter(t)
    m = b.build(loop(b, [x, y], lambda i, p: i.mul(p[0], i.tanh(p[1])), "scale"))
    exe = check(m, [random_input(RNG, parse_type(t)) for _ in range(2)], cpu)
    assert [st.spec.in_place for st in exe.plan.steps] == [()]
