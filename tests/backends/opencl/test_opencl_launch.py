"""The launch path: size arguments bound once per step (kernels are shared by source across
shapes), and the one-kernel fast path that eager ops take."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import axle
from axle.compiler import compile_module
from axle.frontend.device_put import to_buffer
from axle.ir.builder import Builder


def _exe(build, *types: str, dev):  # noqa: ANN001, ANN202
    b = Builder("m")
    ps = [b.parameter(t) for t in types]
    return compile_module(b.build(build(b, *ps)), dev, optimize=False)


def _host(dev, buf):  # noqa: ANN001, ANN202
    return axle.REGISTRY.backend_for(dev).to_host(buf)


def test_shared_kernel_sources_keep_their_own_sizes(ocl) -> None:  # noqa: ANN001
    """add on f32[8], f32[1000] and f32[3,5] is one kernel source (n and chunk are
    arguments); called in turn, each executable must launch with its own sizes."""
    shapes = [(8,), (1000,), (3, 5), (100003,)]
    exes = [_exe(lambda b, x, y: b.add(x, y), *[f"f32[{','.join(map(str, s))}]"] * 2, dev=ocl) for s in shapes]
    names = {next(iter(e.kernel_sources())) for e in exes}
    assert len(names) < len(shapes)  # at least two share a program
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal(s).astype(np.float32), rng.standard_normal(s).astype(np.float32)) for s in shapes]
    for _ in range(3):
        for exe, (x, y) in zip(exes, data):
            (out,) = exe.execute([to_buffer(x, ocl), to_buffer(y, ocl)])
            np.testing.assert_array_equal(_host(ocl, out), x + y)


def test_one_kernel_fast_path_binds_fresh_buffers_each_call(ocl) -> None:  # noqa: ANN001
    """The fast path (taken by a one-kernel plan) writes each call's result to a buffer of
    its own and reads that call's operands, also when results are kept alive."""
    exe = _exe(lambda b, x, y: b.mul(x, y), "f32[17]", "f32[17]", dev=ocl)
    assert exe._single is not None
    rng = np.random.default_rng(1)
    pairs = [(rng.standard_normal(17).astype(np.float32), rng.standard_normal(17).astype(np.float32))
             for _ in range(5)]
    outs = [exe.execute([to_buffer(x, ocl), to_buffer(y, ocl)])[0] for x, y in pairs]
    for out, (x, y) in zip(outs, pairs):
        np.testing.assert_array_equal(_host(ocl, out), x * y)
    # the same operand twice, and a result fed back as an operand
    x = to_buffer(pairs[0][0], ocl)
    (sq,) = exe.execute([x, x])
    (quad,) = exe.execute([sq, sq])
    np.testing.assert_array_equal(_host(ocl, quad), (pairs[0][0] ** 2) ** 2)


def test_plans_with_more_than_one_kernel_take_the_full_path(ocl) -> None:  # noqa: ANN001
    b = Builder("two")
    x = b.parameter("f32[64]")
    big = b.reduce(b.exp(x), kind="sum", axes=(0,))
    exe = compile_module(b.build(big, b.sort(x, dimension=0)), ocl, optimize=False)
    assert exe._single is None
    v = np.linspace(-2, 2, 64, dtype=np.float32)[::-1].copy()
    got = [_host(ocl, o) for o in exe.execute([to_buffer(v, ocl)])]
    np.testing.assert_allclose(got[0], np.exp(v.astype(np.float64)).sum(), rtol=1e-5)
    np.testing.assert_array_equal(got[1], np.sort(v))


def test_eager_ops_from_threads_get_their_own_results(ocl) -> None:  # noqa: ANN001
    """Eager adds from several threads on the hot path (binding and enqueueing under the
    launch lock): every thread sees its own sums."""
    base = np.arange(33, dtype=np.float32)
    a = axle.device_put(base, ocl)
    errors: list[str] = []

    def work(k: int) -> None:
        c = axle.device_put(np.full(33, k, np.float32), ocl)
        for _ in range(50):
            got = np.asarray(a + c)
            if not np.array_equal(got, base + k):
                errors.append(f"thread {k}: {got[:4]}")
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ------------------------------------------------------------------ eager dispatch


def _on_interpreter(fn, *arrays: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """``fn`` (of axle.numpy) run eagerly on the interpreter: the reference."""
    return np.asarray(fn(*axle.device_put(arrays, axle.device("interpreter:0"))))


def test_eager_hot_path_launches_without_execute(ocl, monkeypatch) -> None:  # noqa: ANN001
    """After its first call, an eager signature goes straight to the executable's
    launcher: one enqueue and one pooled allocation per op, no ``execute`` (its checks
    and bookkeeping), each op counted once by the eager counters; results right."""
    import axle.numpy as anp
    import pyopencl as cl
    from axle import counters
    from axle_opencl.executable import OpenCLExecutable

    calls = {"execute": 0, "enqueue": 0}
    real_execute, real_enqueue = OpenCLExecutable.execute, cl.enqueue_nd_range_kernel

    def execute(self, args):  # noqa: ANN001, ANN202
        calls["execute"] += 1
        return real_execute(self, args)

    def enqueue(*a, **k):  # noqa: ANN002, ANN003, ANN202
        calls["enqueue"] += 1
        return real_enqueue(*a, **k)

    monkeypatch.setattr(OpenCLExecutable, "execute", execute)
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", enqueue)  # bound when a launcher is made
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal((3, 37)).astype(np.float32) for _ in range(2))  # a shape no other test uses
    xa, ya = axle.device_put((x, y), ocl)
    counters.reset()
    outs = [anp.subtract(xa, ya) for _ in range(12)]
    assert calls == {"execute": 1, "enqueue": 12}  # the first call compiles and runs through execute
    snap = counters.snapshot()["per_device"][ocl.name]
    assert snap["eager_ops"] == 12 and snap["kernel_launches"] == 12
    want = _on_interpreter(anp.subtract, x, y)
    for out in outs:
        np.testing.assert_array_equal(np.asarray(out), want)


def test_eager_ops_on_the_launcher_match_the_interpreter(ocl) -> None:  # noqa: ANN001
    """Unary, binary, reduction and dot eager ops on the hot path (second and later calls)
    against the interpreter, operands fed from earlier results."""
    import axle.numpy as anp

    rng = np.random.default_rng(3)
    v, m = rng.standard_normal(19).astype(np.float32), rng.standard_normal((5, 5)).astype(np.float32)
    ops = [(anp.exp, (v,)), (lambda a: anp.sum(a), (v,)), (anp.multiply, (v, v)), (anp.matmul, (m, m)),
           (lambda a: anp.matmul(anp.matmul(a, a), a), (m,)), (lambda a: anp.exp(anp.add(a, a)), (v,))]
    for fn, args in ops:
        want = _on_interpreter(fn, *args)
        dev_args = axle.device_put(args, ocl)
        for _ in range(3):  # the first call fills the hot path, the later ones take it
            np.testing.assert_allclose(np.asarray(fn(*dev_args)), want, rtol=2e-6, atol=1e-6)


def test_launcher_binds_each_input_in_its_place(ocl) -> None:  # noqa: ANN001
    """The one-result launch is written out for up to two inputs and loops beyond: one, two
    and three distinct inputs (select), an input given twice, and inputs in the order the
    kernel does not take them, each bound to its own argument, on the hot path."""
    import axle.numpy as anp

    rng = np.random.default_rng(11)
    c = rng.standard_normal(23) > 0
    u, v, w = (rng.standard_normal(23).astype(np.float32) for _ in range(3))
    ops = [(anp.negative, (u,)), (anp.subtract, (u, v)), (anp.subtract, (v, u)), (anp.subtract, (w, w)),
           (anp.where, (c, u, v)), (anp.where, (~c, v, u)), (anp.clip, (w, u, v))]
    for fn, args in ops:
        want = _on_interpreter(fn, *args)
        dev_args = axle.device_put(args, ocl)
        for _ in range(3):  # the first call fills the hot path, the later ones take it
            np.testing.assert_array_equal(np.asarray(fn(*dev_args)), want)


def test_a_dropped_result_is_not_overwritten_while_a_queued_kernel_reads_it(ocl) -> None:  # noqa: ANN001
    """Results come from a pool: a dropped result's buffer is handed to the next op of its
    size at once, while kernels reading it may still be queued. The in-order queue runs
    those readers first: a queued chain of ops, each dropping its operand, never sees a
    later op's values in its operand."""
    import axle.numpy as anp

    n = 1 << 18  # large enough that the chain is still queued when the next op is enqueued
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    xa, ya = axle.device_put((x, y), ocl)
    anp.multiply(xa, ya), anp.add(xa, ya), anp.exp(xa)  # compiled: what follows is the hot path
    a = anp.add(xa, ya)
    freed = a._buffer.handle.int_ptr
    b = anp.exp(a)  # queued, reading a's buffer
    del a  # its buffer goes back to the pool with b's kernel still queued
    c = anp.multiply(xa, ya)  # the next allocation of that size: a's buffer
    assert c._buffer.handle.int_ptr == freed  # (else this test would not test the reuse)
    # a longer chain: each step's operand dropped as soon as the next step is enqueued
    t = xa
    for _ in range(20):
        t = anp.add(t, ya)
    ref = x.copy()
    for _ in range(20):
        ref = ref + y
    np.testing.assert_allclose(np.asarray(b), np.exp(x + y), rtol=2e-6)
    np.testing.assert_array_equal(np.asarray(c), x * y)
    np.testing.assert_allclose(np.asarray(t), ref, rtol=1e-5, atol=1e-5)


def test_a_one_kernel_plan_with_two_results_launches_through_the_fast_path(ocl) -> None:  # noqa: ANN001
    """A multi-output fusion (one kernel, two results) takes the single launch with one
    pooled buffer per result, each call its own."""
    b = Builder("two")
    x, y = b.parameter("f32[41]"), b.parameter("f32[41]")
    exe = compile_module(b.build(b.add(x, y), b.mul(x, y)), ocl)
    assert exe.report()["kernels"] == 1 and exe.launcher() is not None
    rng = np.random.default_rng(9)
    runs = []
    for _ in range(3):
        u, v = rng.standard_normal(41).astype(np.float32), rng.standard_normal(41).astype(np.float32)
        runs.append((u, v, exe.launcher()([to_buffer(u, ocl), to_buffer(v, ocl)])))
    for u, v, (s, p) in runs:
        np.testing.assert_array_equal(_host(ocl, s), u + v)
        np.testing.assert_array_equal(_host(ocl, p), u * v)


def test_a_buffer_larger_than_the_device_allows_is_an_axle_error(ocl, monkeypatch) -> None:  # noqa: ANN001
    """A result or an upload over the device's largest buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)
    is refused with a BackendError naming the function, the sizes and the limit: never
    pyopencl's INVALID_BUFFER_SIZE. (Refused before anything is allocated: the shapes
    are broadcasts.) The limit is lowered to 1 MiB: at PoCL's 8 GiB the upload's host copy
    alone took 18 s of page faults, and an f32 result of 2^31 elements runs on the host."""
    rt = axle.REGISTRY.backend_for(ocl).runtime(ocl)
    monkeypatch.setattr(rt, "max_alloc", 1 << 20)
    shape = (rt.max_alloc // 4 + 1,)
    x = axle.device_put(np.float32(1), ocl)
    f = axle.jit(lambda v: axle.numpy.broadcast_to(v, shape) + 1, device=ocl)
    with pytest.raises(axle.errors.BackendError, match=r"jit\(lambda\): out of memory: .* cannot allocate a buffer of "
                                                       r".* bytes; its largest buffer is .* bytes"):
        f(x)
    with pytest.raises(axle.errors.BackendError, match=rf"device_put to opencl:0: out of memory: .*\(operands: f32\[{shape[0]}\]\)"):
        axle.device_put(np.broadcast_to(np.float32(1), shape), ocl)
    np.testing.assert_array_equal(np.asarray(x + 1), np.float32(2))  # the device still runs
