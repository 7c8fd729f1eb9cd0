"""Loops and conditionals on opencl:0: claimed with everything inside them, run as host
loops over the body's kernels with the carry on the device. A loop with a trip count the
program fixes reads nothing back, any other loop one byte (the pred) per trip, a
conditional its index; a carry the body updates in place is never copied per trip; and
buffers shared between carries, constants and the caller are never written through."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import lax
from axle.testing.cases import control_cases, device_claims
from axle_opencl.executable import OpenCLExecutable
from axle_opencl.plan import AliasStep, BranchStep, KernelStep, LoopStep
from axle_opencl.runtime import DeviceRuntime

RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 3)).astype(np.float32)
XS = RNG.standard_normal((6, 3)).astype(np.float32)


@contextlib.contextmanager
def device_traffic(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[int]]]:
    """Bytes of each read back to the host and of each device copy, while the block runs."""
    seen: dict[str, list[int]] = {"reads": [], "copies": []}
    download, copy = DeviceRuntime.download, DeviceRuntime.copy

    def counted_download(self: DeviceRuntime, buf: Any, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        out = download(self, buf, dtype, shape)
        seen["reads"].append(out.nbytes)
        return out

    def counted_copy(self: DeviceRuntime, buf: Any, nbytes: int) -> Any:
        seen["copies"].append(nbytes)
        return copy(self, buf, nbytes)

    with monkeypatch.context() as m:
        m.setattr(DeviceRuntime, "download", counted_download)
        m.setattr(DeviceRuntime, "copy", counted_copy)
        yield seen


def run(ocl: Any, fn: Any, *args: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[np.ndarray], dict, Any]:
    """``fn`` compiled for opencl:0 (nothing on the host) and run once on device buffers:
    its results, the traffic of the run alone (not of reading the results), the executable."""
    compiled = axle.jit(fn, device=ocl).lower(*args).compile()
    exe = compiled.executable
    assert isinstance(exe, OpenCLExecutable), compiled.placement()
    backend = axle.REGISTRY.backend_for(ocl)
    bufs = [backend.to_device(np.asarray(a), ocl) for a in args]
    with device_traffic(monkeypatch) as seen:
        outs = exe.execute(bufs)
        backend.synchronize(ocl)
    return [backend.to_host(o) for o in outs], seen, exe


def loop_steps(exe: OpenCLExecutable) -> list[LoopStep]:
    return [s for s in exe.plan.steps if isinstance(s, LoopStep)]


def test_kit_control_cases_are_claimed_by_opencl(ocl) -> None:  # noqa: ANN001
    # the kit runs them (tests/conformance) under strict placement because of this
    assert all(device_claims(case.module, ocl) for case in control_cases())


def _fori(x: Any, w: Any) -> Any:
    return lax.fori_loop(0, 5, lambda i, v: anp.tanh(v @ w) + i.astype(np.float32), x)


def _scan(xs: Any, h: Any) -> Any:
    return lax.scan(lambda c, x: (anp.tanh(c * 0.5 + x), c * 2.0), h, xs)


def _switch(k: Any, x: Any) -> Any:
    return lax.switch(k, [lambda v: v + 1.0, lambda v: v * 3.0, lambda v: -v], x)


PROGRAMS = {"fori_loop": (_fori, (X, np.eye(3, dtype=np.float32) * 0.5)),
            "scan": (_scan, (XS, X[0])),
            "switch": (_switch, (np.int32(1), X))}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_loop_and_conditional_programs_run_whole_on_opencl(ocl, name) -> None:  # noqa: ANN001
    fn, args = PROGRAMS[name]
    compiled = axle.jit(fn, device=ocl).lower(*args).compile()
    summary = compiled.placement()
    assert summary is None or not summary.fallback, summary
    got = axle.jit(fn, device=ocl)(*args)
    want = axle.jit(fn, device="interpreter:0")(*args)
    for g, w in zip(axle.tree_util.tree_leaves(got), axle.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_a_loop_with_a_known_trip_count_reads_nothing_back(ocl, monkeypatch) -> None:  # noqa: ANN001
    (out,), seen, exe = run(ocl, lambda x: lax.fori_loop(0, 7, lambda i, v: v * 0.5 + i.astype(np.float32), x), X,
                            monkeypatch=monkeypatch)
    assert [s.trips for s in loop_steps(exe)] == [7]
    assert seen["reads"] == [] and seen["copies"] == []
    want = X.copy()
    for i in range(7):
        want = want * np.float32(0.5) + np.float32(i)
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 6])
def test_a_data_dependent_loop_reads_one_byte_per_trip(ocl, monkeypatch, n) -> None:  # noqa: ANN001
    def f(x, n):  # noqa: ANN001, ANN202
        return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5), (np.int32(0), x))[1]

    (out,), seen, exe = run(ocl, f, X, np.int32(n), monkeypatch=monkeypatch)
    assert [s.trips for s in loop_steps(exe)] == [None]
    assert seen["reads"] == [1] * (n + 1)  # the pred before each trip and after the last
    np.testing.assert_allclose(out, X * np.float32(1.5) ** n, rtol=1e-6)


@pytest.mark.parametrize(("k", "nbytes"), [(np.int32(2), 4), (np.int32(7), 4), (np.bool_(True), 1)])
def test_a_conditional_reads_back_only_its_index(ocl, monkeypatch, k, nbytes) -> None:  # noqa: ANN001
    def f(k, x):  # noqa: ANN001, ANN202
        if k.dtype == np.bool_:
            return lax.cond(k, lambda v: v + 1.0, lambda v: v * 3.0, x)
        return _switch(k, x)

    (out,), seen, exe = run(ocl, f, k, X, monkeypatch=monkeypatch)
    assert any(isinstance(s, BranchStep) for s in exe.plan.steps)
    assert seen["reads"] == [nbytes]
    want = {True: X + 1, 2: -X, 7: -X}[k.item()]  # switch clamps the index into range
    np.testing.assert_allclose(out, want, rtol=1e-6)


def _body_updates(exe: OpenCLExecutable) -> tuple[list[str], list[KernelStep]]:
    """The body's copy kernels (labels) and its in-place update kernels."""
    (loop,) = loop_steps(exe)
    kernels = [s for s in loop.body.steps if isinstance(s, KernelStep)]
    return [s.label for s in kernels if s.label.endswith("(copy)")], [s for s in kernels if s.in_place]


def test_scan_writes_its_stacked_outputs_in_place(ocl, monkeypatch) -> None:  # noqa: ANN001
    (h, ys), seen, exe = run(ocl, _scan, XS, X[0], monkeypatch=monkeypatch)
    copies, updates = _body_updates(exe)
    assert copies == [] and len(updates) == 1
    (loop,) = loop_steps(exe)
    assert loop.trips == 6 and 2 in loop.body.consumed
    assert seen["reads"] == [] and seen["copies"] == []  # the stacked buffer is the loop's from the start
    c, want = X[0], []
    for x in XS:
        want.append(c * 2)
        c = np.tanh(c * np.float32(0.5) + x)
    np.testing.assert_allclose(h, c, rtol=1e-5)
    np.testing.assert_allclose(ys, np.stack(want), rtol=1e-5)


@pytest.mark.parametrize("trips", [2, 8])
def test_a_carry_from_the_caller_is_copied_once_per_loop_not_per_trip(ocl, monkeypatch, trips) -> None:  # noqa: ANN001
    def f(x):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, trips, lambda i, v: lax.dynamic_update_slice(
            v, v[i % 4][None] * 2.0 + 1.0, (i % 4, 0)), x)

    before = X.copy()
    backend = axle.REGISTRY.backend_for(ocl)
    arg = backend.to_device(X, ocl)
    compiled = axle.jit(f, device=ocl).lower(X).compile()
    with device_traffic(monkeypatch) as seen:
        (out,) = compiled.executable.execute([arg])
    assert seen["copies"] == [X.nbytes] and seen["reads"] == []
    np.testing.assert_array_equal(backend.to_host(arg), before)  # the caller's buffer is unchanged
    want = X.copy()
    for i in range(trips):
        want[i % 4] = want[i % 4] * 2 + 1
    np.testing.assert_allclose(backend.to_host(out), want, rtol=1e-6)


def test_carries_sharing_a_buffer_are_not_written_through(ocl, monkeypatch) -> None:  # noqa: ANN001
    # the body returns y twice: from the second trip on, carries 0 and 1 share one buffer,
    # and the update of carry 0 must not change carry 1, which a later kernel reads
    def f(a, b, c):  # noqa: ANN001, ANN202
        def body(i, s):  # noqa: ANN001, ANN202
            a, b, c = s
            y = lax.dynamic_update_slice(a, c[None] + i.astype(np.float32), (i, 0))
            return y, y, anp.sum(b, axis=0) + c
        return lax.fori_loop(0, 4, body, (a, b, c))

    a, b, c = X.copy(), X[::-1].copy(), X[1].copy()
    outs, seen, _ = run(ocl, f, a, b, c, monkeypatch=monkeypatch)
    for i in range(4):
        y = a.copy()
        y[i] = c + np.float32(i)
        a, b, c = y, y, b.sum(axis=0) + c
    for got, want in zip(outs, (a, b, c), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert len(seen["copies"]) <= 4  # at most one per trip where the buffers are shared


def test_a_constant_carry_is_not_written_through(ocl, monkeypatch) -> None:  # noqa: ANN001
    # the body hands a constant back as the carry it updates in place on the next trip
    table = np.arange(12, dtype=np.float32).reshape(4, 3)

    def f(a):  # noqa: ANN001, ANN202
        def body(i, s):  # noqa: ANN001, ANN202
            a, acc = s
            y = lax.dynamic_update_slice(a, np.full((1, 3), -1.0, np.float32), (i, 0))
            return table, acc + y
        return lax.fori_loop(0, 3, body, (a, np.zeros((4, 3), np.float32)))

    outs, _, _ = run(ocl, f, X, monkeypatch=monkeypatch)
    a, acc = X.copy(), np.zeros((4, 3), np.float32)
    for i in range(3):
        y = a.copy()
        y[i] = -1
        a, acc = table, acc + y
    np.testing.assert_allclose(outs[0], a)
    np.testing.assert_allclose(outs[1], acc, rtol=1e-6)


def test_an_update_after_a_loop_never_writes_a_buffer_the_loop_passed_through(ocl) -> None:  # noqa: ANN001
    # xs passes through the loop unchanged: the loop's result may be the caller's buffer itself
    def f(xs, h):  # noqa: ANN001, ANN202
        _, xs2 = lax.fori_loop(0, 3, lambda i, s: (s[0] + s[1][i], s[1]), (h, xs))
        return lax.dynamic_update_slice(xs2, np.full((1, 3), 9.0, np.float32), (0, 0))

    before = XS.copy()
    backend = axle.REGISTRY.backend_for(ocl)
    args = [backend.to_device(XS, ocl), backend.to_device(X[0], ocl)]
    compiled = axle.jit(f, device=ocl).lower(XS, X[0]).compile()
    (out,) = compiled.executable.execute(args)
    np.testing.assert_array_equal(backend.to_host(args[0]), before)
    want = XS.copy()
    want[0] = 9.0
    np.testing.assert_array_equal(backend.to_host(out), want)


def test_nested_loops_and_a_conditional_inside_a_scan(ocl, monkeypatch) -> None:  # noqa: ANN001
    def f(xs, h, n):  # noqa: ANN001, ANN202
        def step(c, x):  # noqa: ANN001, ANN202
            inner = lax.fori_loop(0, 3, lambda j, v: v * 0.5 + x, c)  # known count inside
            picked = lax.cond(anp.sum(x) > 0, lambda v: v + 1.0, lambda v: v - 1.0, inner)
            return picked, lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * 1.1),
                                          (np.int32(0), picked))[1]
        return lax.scan(step, h, xs)

    (h, ys), seen, exe = run(ocl, f, XS, X[0], np.int32(2), monkeypatch=monkeypatch)
    c, want = X[0], []
    for x in XS:
        for _ in range(3):
            c = c * np.float32(0.5) + x
        c = c + 1 if x.sum() > 0 else c - 1
        want.append(c * np.float32(1.1) ** 2)
    np.testing.assert_allclose(h, c, rtol=1e-5)
    np.testing.assert_allclose(ys, np.stack(want), rtol=1e-5)
    # per outer trip: the conditional's pred (1 byte) and the inner while's 3 preds
    assert seen["reads"] == [1] * (len(XS) * 4)


def test_zero_trips_and_size_zero_carries(ocl, monkeypatch) -> None:  # noqa: ANN001
    empty = np.zeros((0, 3), np.float32)

    def f(x, e, n):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, n, lambda i, s: (s[0] * 2.0, s[1] + 1.0), (x, e))

    for n in (0, 3):
        (out, e), seen, _ = run(ocl, f, X, empty, np.int32(n), monkeypatch=monkeypatch)
        np.testing.assert_allclose(out, X * 2.0 ** n)
        assert e.shape == (0, 3)
        assert seen["reads"] == [1] * (n + 1)
    (out, e), seen, exe = run(ocl, lambda x, e: lax.fori_loop(0, 4, lambda i, s: (s[0] + 1.0, s[1] * 2.0), (x, e)),
                              X, empty, monkeypatch=monkeypatch)
    assert [s.trips for s in loop_steps(exe)] == [4] and seen["reads"] == []
    np.testing.assert_allclose(out, X + 4.0)
    assert e.shape == (0, 3)


def _random_control_programs(count: int) -> list[int]:
    """The first ``count`` seeds whose random program (control=True) holds a loop or a
    conditional and no collective (no backend claims collectives: the host communicator
    runs them, so such a program is never wholly on the device)."""
    from axle.ir.ops import Op
    from axle.testing.random_modules import random_module

    seeds = []
    for seed in range(1000):
        module = random_module(seed, 10, control=True)[0]
        nodes = [n for c in module.computations() for n in c.nodes]
        if {n.op for n in nodes} & {Op.WHILE, Op.CONDITIONAL} and not any(n.traits.collective for n in nodes):
            seeds.append(seed)
        if len(seeds) == count:
            return seeds
    raise AssertionError("the generator makes few loops and conditionals")


# 8 seeds: each program's bodies are random programs (nested loops, scans, dots), each a
# few dozen kernels unoptimized; tests/backends/test_differential_campaign.py runs more
@pytest.mark.parametrize("seed", _random_control_programs(8))
def test_random_programs_with_loops_and_conditionals_match_the_interpreter(ocl, seed) -> None:  # noqa: ANN001
    from axle.interpreter import evaluate
    from axle.testing.cases import OpCase, assert_program_close, run_case
    from axle.testing.random_modules import random_module

    m, inputs = random_module(seed, 10, control=True)
    assert device_claims(m, ocl)  # so run_case runs it under strict placement: nothing on the host
    expected = evaluate(m, *inputs)
    for optimize in (True, False):
        actual = run_case(OpCase(f"random({seed})", m, inputs), ocl, optimize=optimize)
        assert_program_close(m, actual, expected, f"random_module({seed}, 10, control=True) on {ocl}")
