"""The SPMD frontend (frontend/spmd.py, frontend/collectives.py): pmap and shard_map with
the axle.lax collectives inside, against NumPy written out by hand; jit, grad and vmap
inside; sharded arrays; the errors."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import axle
from axle.errors import ArgumentError, TracingError
from axle.ir.traffic import collective_signature, traffic
from axle.sharding import Mesh, NamedSharding
from axle.sharding import PartitionSpec as P

lax = axle.lax
X = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0


def _pmap(fn: Any) -> Any:
    return axle.pmap(fn, axis_name="i")


def test_reductions_and_axis_index() -> None:
    got = np.asarray(_pmap(lambda v: (lax.psum(v, "i"), lax.pmean(v, "i"), lax.pmax(v, "i"), lax.pmin(v, "i"),
                                      lax.axis_index("i")))(X)[0])
    np.testing.assert_array_equal(got, np.stack([X.sum(0)] * 4))
    outs = _pmap(lambda v: (lax.pmean(v, "i"), lax.pmax(v, "i"), lax.pmin(v, "i"), lax.axis_index("i")))(X)
    np.testing.assert_allclose(np.asarray(outs[0]), np.stack([X.mean(0)] * 4), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(outs[1]), np.stack([X.max(0)] * 4))
    np.testing.assert_array_equal(np.asarray(outs[2]), np.stack([X.min(0)] * 4))
    np.testing.assert_array_equal(np.asarray(outs[3]), np.arange(4, dtype=np.int32))


def test_gather_scatter_permute_all_to_all() -> None:
    gathered = np.asarray(_pmap(lambda v: lax.all_gather(v, "i"))(X))
    np.testing.assert_array_equal(gathered, np.stack([X] * 4))
    tiled = np.asarray(_pmap(lambda v: lax.all_gather(v, "i", tiled=True))(X))
    np.testing.assert_array_equal(tiled[2], X.reshape(-1))
    y = np.arange(16, dtype=np.float32).reshape(4, 4)
    scattered = np.asarray(_pmap(lambda v: lax.psum_scatter(v, "i"))(y))
    np.testing.assert_array_equal(scattered, y.sum(0))  # replica i gets element i of the sum
    shifted = np.asarray(_pmap(lambda v: lax.ppermute(v, "i", [(0, 1), (1, 2), (2, 3)]))(X))
    np.testing.assert_array_equal(shifted, np.concatenate([np.zeros((1, 3), np.float32), X[:3]]))
    a2a = np.asarray(_pmap(lambda v: lax.all_to_all(v, "i", 0, 0))(y))
    np.testing.assert_array_equal(a2a, y.T)


def test_grad_jit_and_vmap_inside() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    xs = rng.standard_normal((4, 5, 3)).astype(np.float32)

    def loss(w: Any, xb: Any) -> Any:
        return axle.numpy.sum((xb @ w) ** 2)

    @axle.jit
    def step(w: Any, xb: Any) -> Any:
        return lax.pmean(axle.grad(loss)(w, xb), "d")

    got = np.asarray(axle.pmap(step, axis_name="d")(np.stack([w] * 4), xs))
    flat = xs.reshape(20, 3)
    want = 2 * flat.T @ (flat @ w) / 4
    for r in range(4):
        np.testing.assert_allclose(got[r], want, rtol=1e-4, atol=1e-5)
    rows = np.asarray(axle.pmap(lambda v: axle.vmap(lambda e: lax.psum(e, "i"))(v), axis_name="i")(xs))
    np.testing.assert_allclose(rows[1], xs.sum(0), rtol=1e-5, atol=1e-6)


def test_shard_map_over_a_2d_mesh() -> None:
    mesh = Mesh(np.array([axle.default_device()] * 4).reshape(2, 2), ("x", "y"))
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    out = axle.shard_map(lambda ab, bb: lax.psum(ab @ bb, "y"), mesh, in_specs=(P("x", "y"), P("y", None)),
                         out_specs=P("x", None))(a, b)
    np.testing.assert_allclose(np.asarray(out), a @ b, rtol=1e-5, atol=1e-5)
    # axis_index along each axis, and a psum over both
    idx = axle.shard_map(lambda v: (v * 0 + lax.axis_index("x") * 10 + lax.axis_index("y")).astype(np.int32),
                         mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))(np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(np.asarray(idx), [[0, 1], [10, 11]])
    total = axle.shard_map(lambda v: lax.psum(v, ("x", "y")), mesh, in_specs=P("x", "y"), out_specs=P())(a)
    np.testing.assert_allclose(np.asarray(total), a.reshape(2, 4, 2, 3).sum(axis=(0, 2)), rtol=1e-5)


def test_device_put_to_a_sharding_gathers_back() -> None:
    mesh = Mesh(np.array([axle.default_device()] * 4).reshape(2, 2), ("x", "y"))
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    s = axle.device_put(a, NamedSharding(mesh, P("x", "y")))
    assert s.shape == (4, 6) and len(s.blocks) == 4
    np.testing.assert_array_equal(np.asarray(s.blocks[1]), a[:2, 3:])
    np.testing.assert_array_equal(np.asarray(s), a)
    with pytest.raises(ArgumentError, match=r"dimension 1 \(size 5\).*does not split into 2"):
        axle.device_put(np.zeros((4, 5), np.float32), NamedSharding(mesh, P("x", "y")))


def test_errors_name_the_problem() -> None:
    with pytest.raises(TracingError, match=r"psum: axis name\(s\) 'j' are not distinct names of the bound"):
        _pmap(lambda v: lax.psum(v, "j"))(X)
    with pytest.raises(TracingError, match="not bound: call it inside axle.pmap"):
        axle.jit(lambda v: lax.psum(v, "i"))(X)
    with pytest.raises(ArgumentError, match="mapped axes differ in size: argument 0 has 4, argument 1 has 3"):
        _pmap(lambda a, b: a + b)(X, np.zeros((3, 3), np.float32))
    with pytest.raises(ArgumentError, match=r"size 4 \(argument 0\) but 2 devices"):
        axle.pmap(lambda v: v, axis_name="i", devices=[axle.default_device()] * 2)(X)
    with pytest.raises(ArgumentError, match="must be the group size 4"):
        _pmap(lambda v: lax.psum_scatter(v, "i"))(X)


# ------------------------------------------------------------------ pmap and shard_map inside jit, grad, vmap, loops


def _every_collective(v: Any) -> Any:
    """A scalar per replica that reads every collective (and axis_index) of its rank-2 ``v``."""
    gathered = lax.all_gather(v, "i", axis=1, tiled=True)
    scattered = lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True)
    swapped = lax.all_to_all(v, "i", 0, 1)
    shifted = lax.ppermute(v, "i", [(0, 3), (3, 1), (1, 0)])
    return ((gathered ** 2).sum() + (scattered ** 3).sum() + (swapped * lax.axis_index("i")).sum()
            + (shifted * v).sum() + lax.pmax(v, "i").sum() + lax.pmean(v, "i").sum())


def test_pmap_inside_jit_vmap_and_a_loop_matches_the_replicas() -> None:
    pf = _pmap(lambda v: (lax.psum(v, "i"), lax.all_gather(v, "i"), lax.psum_scatter(v.reshape(4, 1) * v[:1], "i"),
                          lax.all_to_all(v.reshape(4, 1) * v, "i", 0, 1), lax.ppermute(v, "i", [(0, 1), (2, 0)]),
                          lax.axis_index("i")))
    for eager, staged in zip(pf(np.concatenate([X, X[:, :1]], 1)), axle.jit(pf)(np.concatenate([X, X[:, :1]], 1))):
        np.testing.assert_allclose(np.asarray(staged), np.asarray(eager), rtol=1e-6)
    zs = np.stack([X, 2 * X])
    batched = np.asarray(axle.vmap(_pmap(lambda v: lax.psum(v, "i")))(zs))
    np.testing.assert_allclose(batched, np.broadcast_to(zs.sum(1, keepdims=True), zs.shape), rtol=1e-6)
    # a loop inside the pmap whose carry starts the same on every replica and reads a
    # collective and axis_index: it differs between replicas after the first trip
    def trip(i: Any, c: Any) -> Any:
        return lax.psum(c, "i") + lax.axis_index("i").astype(np.float32)

    inner = _pmap(lambda v: lax.fori_loop(0, 2, trip, np.float32(1)) + v)
    np.testing.assert_array_equal(np.asarray(axle.jit(inner)(X[:, 0])), np.asarray(inner(X[:, 0])))
    looped = np.asarray(lax.fori_loop(0, 3, lambda i, c: _pmap(lambda v: lax.pmean(v, "i") + v)(c), X))
    want = X.copy()
    for _ in range(3):
        want = want.mean(0) + want
    np.testing.assert_allclose(looped, want, rtol=1e-5)


def test_grad_of_pmap_transposes_the_collectives() -> None:
    xs = np.random.default_rng(2).standard_normal((4, 4, 2))  # float64: finite differences to 1e-6

    def total(x: Any) -> Any:
        return _pmap(_every_collective)(x).sum()

    got = np.asarray(axle.jit(axle.grad(total))(xs))
    # grad inside the pmap (each replica's rules, run on threads) gives the same gradient
    np.testing.assert_allclose(got, np.asarray(_pmap(axle.grad(_every_collective))(xs)), rtol=1e-12, atol=1e-12)
    eps, probe = 1e-6, [(0, 0, 0), (1, 3, 1), (3, 2, 0)]
    for idx in probe:
        up, down = xs.copy(), xs.copy()
        up[idx] += eps
        down[idx] -= eps
        fd = (float(np.asarray(total(up))) - float(np.asarray(total(down)))) / (2 * eps)
        assert abs(got[idx] - fd) < 1e-5 * max(1.0, abs(fd)), (idx, got[idx], fd)


def test_shard_map_inside_jit_and_grad() -> None:
    mesh = Mesh(np.array([axle.default_device()] * 4).reshape(2, 2), ("x", "y"))
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((8, 6)), rng.standard_normal((6, 4))
    mm = axle.shard_map(lambda ab, bb: lax.psum(ab @ bb, "y"), mesh, in_specs=(P("x", "y"), P("y", None)),
                        out_specs=P("x", None))
    np.testing.assert_allclose(np.asarray(axle.jit(mm)(a, b)), a @ b, rtol=1e-12, atol=1e-12)
    ga, gb = axle.jit(axle.grad(lambda a, b: (mm(a, b) ** 2).sum(), argnums=(0, 1)))(a, b)
    np.testing.assert_allclose(np.asarray(ga), 2 * (a @ b) @ b.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(gb), a.T @ (2 * a @ b), rtol=1e-12, atol=1e-12)


def test_pmap_in_axes_out_axes_and_static_arguments() -> None:
    ones = np.ones(3, np.float32)
    for wrap in (lambda f: f, axle.jit):  # the replicas on threads, and as a batch inside jit
        moved = _pmap_axes(lambda a, b: a + b["w"], in_axes=(1, {"w": None}))
        np.testing.assert_array_equal(np.asarray(wrap(moved)(X.T, {"w": ones})), X + 1)
        summed = _pmap_axes(lambda a, b: lax.psum(a, "i") + b, in_axes=(0, None), out_axes=None)
        np.testing.assert_array_equal(np.asarray(wrap(summed)(X, ones)), X.sum(0) + 1)
        np.testing.assert_array_equal(np.asarray(wrap(_pmap_axes(lambda a: a, out_axes=1))(X)), X.T)
    scaled = axle.pmap(lambda a, k: a * k, axis_name="i", static_broadcasted_argnums=1)
    np.testing.assert_array_equal(np.asarray(scaled(X, 3)), 3 * X)
    np.testing.assert_array_equal(np.asarray(scaled(X, 2)), 2 * X)


def _pmap_axes(fn: Any, **kw: Any) -> Any:
    return axle.pmap(fn, axis_name="i", **kw)


def test_pmap_axes_errors_name_the_argument() -> None:
    with pytest.raises(ArgumentError, match=r"argument 0 has 4, argument 1 \(leaf 0\) has 3"):
        _pmap_axes(lambda a, b: a, in_axes=(0, 1))(X, [X])
    with pytest.raises(ArgumentError, match=r"in_axes 2 is out of range for argument 0 of shape \(4, 3\)"):
        _pmap_axes(lambda a: a, in_axes=2)(X)
    with pytest.raises(ArgumentError, match="no argument is mapped"):
        _pmap_axes(lambda a: a, in_axes=None)(X)
    with pytest.raises(ArgumentError, match="in_axes has 1 entries for 2 positional"):
        _pmap_axes(lambda a, b: a, in_axes=(0,))(X, X)
    with pytest.raises(ArgumentError, match=r"size 4 \(argument 0\) but 2 devices"):
        axle.jit(axle.pmap(lambda v: v, axis_name="i", devices=[axle.default_device()] * 2))(X)
    with pytest.raises(TracingError, match="pmap inside the function of another pmap"):
        _pmap(lambda v: axle.pmap(lambda w: w, axis_name="j")(v.reshape(3, 1)))(X)


def test_explain_lists_collectives_and_bytes_per_step() -> None:
    def step(w: Any, x: Any) -> Any:
        g = lax.pmean(axle.grad(lambda w: ((x @ w) ** 2).sum())(w), "d")
        looped = lax.fori_loop(0, 2, lambda i, c: lax.psum(c, "d"), x[0])
        return w - 0.1 * g, lax.all_gather(looped.astype(np.float16), "d")

    ex = axle.pmap(step, axis_name="d").lower(np.ones((4, 3, 2), np.float32), np.ones((4, 8, 3), np.float32)).explain()
    text = ex.text(source=False)
    assert "collectives: 3, each a host step" in text
    assert ("all-reduce(sum) f32[3,2] over 4 replicas, groups {0,1,2,3}: 24 B per replica, 96 B per step in all; "
            "local (one process: host memory)") in text
    assert "all-reduce(sum) f32[3] over 4 replicas, groups {0,1,2,3}: 12 B per replica, 48 B per trip of its loop" in text
    assert "per step: 2 collectives, 30 B per replica, 120 B over all replicas (plus those in loops, per trip)" in text
    assert "<h2>Communication</h2>" in ex.to_html() and "96 B per step in all" in ex.to_html()
    # over 2 processes of 2 replicas: the all-reduce is one MPI Allreduce, the float16 gather an Allgather
    by_op = {t.node.op.value: replace(t, processes=2) for t in ex.communication if not t.in_loop}
    assert by_op["all-reduce"].cross_process() == "cross-process: MPI Allreduce of 24 B per process"
    assert by_op["all-gather"].cross_process() == ("cross-process: MPI Allgather, 12 B sent and 12 B received per "
                                                   "process")


def test_traffic_names_the_mpi_call_of_each_collective() -> None:
    """How each collective would cross 2 processes of 2 replicas (axle.distributed's paths)."""
    def f(v: Any) -> Any:
        return (lax.psum_scatter(v, "i", tiled=True), lax.all_to_all(v, "i", 0, 0),
                lax.ppermute(v, "i", [(0, 1), (1, 2)]), lax.psum(v.astype(np.float16), "i"))

    module = axle.pmap(f, axis_name="i").lower(np.ones((4, 8), np.float32)).module
    got = [t.cross_process() for t in traffic(module, processes=2)]
    assert got == ["cross-process: MPI Reduce_scatter_block of 32 B per process, 16 B back",
                   "cross-process: MPI Alltoall, 32 B sent and received per process",
                   "cross-process: MPI point-to-point, 1 of 2 pairs cross processes, 32 B in all",
                   "cross-process: MPI Allgather, 32 B sent and 32 B received per process"]


def test_collective_signature_ignores_all_but_the_collectives() -> None:
    """What processes must agree on (axle.distributed checks it once per program)."""
    def sig(fn: Any, x: np.ndarray = X) -> str:
        return collective_signature(axle.pmap(fn, axis_name="i").lower(x).module)

    same = sig(lambda v: lax.psum(v * 2, "i"))
    assert same == sig(lambda v: lax.psum(v * 3 + 1, "i")) and "all-reduce" in same
    assert same != sig(lambda v: lax.pmax(v * 2, "i"))
    assert same != sig(lambda v: lax.psum(v * 2, "i"), X[:, :2])
