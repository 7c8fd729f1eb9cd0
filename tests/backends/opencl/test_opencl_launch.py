"""The launch path: size arguments bound once per step (kernels are shared by source across
shapes), and the one-kernel fast path that eager ops take."""
from __future__ import annotations

import threading

import numpy as np

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
