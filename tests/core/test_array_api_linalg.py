"""axle.numpy.linalg (the array API's linalg extension) against NumPy: the factorizations
(host custom calls to LAPACK) eagerly and inside jit, their VJP rules by finite
differences, and the products, norms and views built from primitives."""
from __future__ import annotations

import numpy as np
import pytest
from test_autodiff import check_grad

import axle
import axle.numpy as anp
from axle.errors import ShapeError, TracingError
from axle.numpy import linalg as la

DEV = "interpreter:0"
RNG = np.random.default_rng(7)


def _spd(*batch: int, n: int = 4) -> np.ndarray:
    a = RNG.standard_normal((*batch, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


A = RNG.standard_normal((2, 4, 3))
SPD = _spd(2)

# name -> (axle function, NumPy function, arguments)
CASES = {
    "inv": (la.inv, np.linalg.inv, (SPD,)),
    "det": (la.det, np.linalg.det, (SPD,)),
    "slogdet": (lambda x: tuple(la.slogdet(x)), lambda x: tuple(np.linalg.slogdet(x)), (SPD,)),
    "cholesky": (la.cholesky, np.linalg.cholesky, (SPD,)),
    "cholesky_upper": (lambda x: la.cholesky(x, upper=True), lambda x: np.swapaxes(np.linalg.cholesky(x), -1, -2),
                       (SPD,)),
    "eigvalsh": (la.eigvalsh, np.linalg.eigvalsh, (SPD,)),
    "solve": (la.solve, np.linalg.solve, (SPD, RNG.standard_normal((2, 4, 2)))),
    "solve_vector": (la.solve, lambda a, b: np.linalg.solve(a, b[:, None])[..., 0], (SPD, np.arange(4.0))),
    "svdvals": (la.svdvals, lambda x: np.linalg.svd(x, compute_uv=False), (A,)),
    "pinv": (la.pinv, np.linalg.pinv, (A,)),
    "matrix_rank": (la.matrix_rank, np.linalg.matrix_rank, (np.array([[1.0, 2.0], [2.0, 4.0]]),)),
    "qr_r_abs": (lambda x: anp.abs(la.qr(x).R), lambda x: np.abs(np.linalg.qr(x)[1]), (A,)),
    "diagonal": (lambda x: la.diagonal(x, offset=1), lambda x: np.diagonal(x, 1, -2, -1), (A,)),
    "diagonal_neg": (lambda x: la.diagonal(x, offset=-2), lambda x: np.diagonal(x, -2, -2, -1), (A,)),
    "trace": (lambda x: la.trace(x, offset=-1), lambda x: np.trace(x, -1, -2, -1), (A,)),
    "cross": (la.cross, np.cross, (A[..., :3, :], A[..., 1:, :])),
    "outer": (la.outer, np.outer, (np.arange(3.0), np.arange(4.0))),
    "matrix_power_3": (lambda x: la.matrix_power(x, 3), lambda x: np.linalg.matrix_power(x, 3), (SPD,)),
    "matrix_power_neg": (lambda x: la.matrix_power(x, -2), lambda x: np.linalg.matrix_power(x, -2), (SPD,)),
    "matrix_power_0": (lambda x: la.matrix_power(x, 0), lambda x: np.linalg.matrix_power(x, 0), (SPD,)),
    "vector_norm": (lambda x: la.vector_norm(x, axis=(0, 2)), lambda x: np.sqrt(np.sum(x * x, axis=(0, 2))), (A,)),
    "vector_norm_inf": (lambda x: la.vector_norm(x, ord=np.inf), lambda x: np.max(np.abs(x)), (A,)),
    "vector_norm_3": (lambda x: la.vector_norm(x, ord=3, keepdims=True),
                      lambda x: np.sum(np.abs(x) ** 3, keepdims=True) ** (1 / 3), (A,)),
    **{f"matrix_norm_{o}": (lambda x, o=o: la.matrix_norm(x, ord=o),
                            lambda x, o=o: np.linalg.norm(x, o, axis=(-2, -1)), (A,))
       for o in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)},
    "tensordot": (lambda a, b: la.tensordot(a, b, axes=1), lambda a, b: np.tensordot(a, b, 1), (A, A[0].T)),
    "vecdot": (la.vecdot, lambda a, b: np.sum(a * b, axis=-1), (A, A[0])),
}


def _flat(out):
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_linalg_matches_numpy(name, mode):
    fn, ref, args = CASES[name]
    f = axle.jit(fn) if mode == "jit" else fn
    for got, want in zip(_flat(f(*args)), _flat(ref(*args))):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_eigh_and_svd_reconstruct_their_input():
    w, v = la.eigh(SPD)
    np.testing.assert_allclose(np.asarray(v) @ (np.asarray(w)[..., None] * np.swapaxes(np.asarray(v), -1, -2)), SPD,
                               rtol=1e-10, atol=1e-10)
    u, s, vh = la.svd(A, full_matrices=False)
    assert (u.shape, s.shape, vh.shape) == ((2, 4, 3), (2, 3), (2, 3, 3))
    np.testing.assert_allclose(np.asarray(u) @ (np.asarray(s)[..., None] * np.asarray(vh)), A, atol=1e-12)
    u, s, vh = la.svd(A)
    assert (u.shape, vh.shape) == ((2, 4, 4), (2, 3, 3))
    q, r = la.qr(A, mode="complete")
    assert (q.shape, r.shape) == ((2, 4, 4), (2, 4, 3))
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), A, atol=1e-12)


def test_linalg_float32_stays_float32_and_ints_compute_in_float64():
    assert la.inv(SPD.astype(np.float32)).dtype == np.float32
    assert la.det(np.array([[2, 1], [1, 3]])).dtype == np.float64
    np.testing.assert_allclose(np.asarray(la.det(np.array([[2, 1], [1, 3]]))), 5.0)


def test_linalg_custom_calls_run_on_the_host_and_say_so():
    for dev in ("cpu:0", "interpreter:0"):
        text = axle.jit(lambda x: la.inv(x) * 2.0, device=dev).lower(SPD).explain().text(source=False)
        assert 'target="axle.linalg.inv"' in text
        assert "host step: %custom-call (custom-call) runs its target's registered Python reference" in text


def test_linalg_bad_input_raises_axle_errors():
    with pytest.raises(ShapeError, match="linalg.inv: needs square matrices"):
        la.inv(A)
    with pytest.raises(ShapeError, match="linalg.det: needs a stack of matrices"):
        la.det(np.arange(3.0))
    with pytest.raises(ShapeError, match="linalg.cross"):
        la.cross(A[..., :2], A[..., :2])


# VJP rules of the host targets, by finite differences (eager and under jit)
SPD3 = _spd(n=3)
GRAD_CASES = {
    "inv": (lambda x: la.inv(x), (_spd(n=3),)),
    "det": (lambda x: la.det(x), (_spd(n=3),)),
    "slogdet": (lambda x: la.slogdet(x).logabsdet, (_spd(2, n=3),)),
    "solve_a": (lambda a: la.solve(a, np.arange(6.0).reshape(3, 2)), (_spd(n=3),)),
    "solve_b": (lambda b: la.solve(SPD3, b), (RNG.standard_normal((3, 2)),)),
}
SYM_GRAD_CASES = {  # read one triangle: checked along symmetric perturbations
    "cholesky": lambda x: la.cholesky(x),
    "eigh_values": lambda x: la.eigvalsh(x),
    "eigh_vectors": lambda x: anp.abs(la.eigh(x).eigenvectors),
}


def _readout(f):
    def scalar(*xs):
        out = f(*xs)
        return anp.sum(out * anp.sin(out + 0.3)) + anp.sum(out) * 0.7

    return scalar


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_linalg_vjp_finite_differences(name):
    f, args = GRAD_CASES[name]
    check_grad(_readout(f), *args, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", sorted(SYM_GRAD_CASES))
def test_symmetric_linalg_vjp_finite_differences(name):
    f = SYM_GRAD_CASES[name]
    base = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    # the function of the 6 free entries of a symmetric matrix
    iu = np.triu_indices(3)

    def of_free(v):
        m = anp.zeros((3, 3)).at[iu].set(v)
        return _readout(f)(m + anp.matrix_transpose(m) - m * anp.eye(3))

    check_grad(of_free, base[iu], rtol=1e-5, atol=1e-7)


def _fd_jvp(f, args, tangents, eps=1e-6):
    plus = f(*[a + eps * t for a, t in zip(args, tangents)])
    minus = f(*[a - eps * t for a, t in zip(args, tangents)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


def _sym_tangent(n: int) -> np.ndarray:
    t = RNG.standard_normal((n, n))
    return t + t.T


# forward mode (axle.jvp) of the host targets against finite differences; cholesky and eigh
# along symmetric tangents (they read one triangle of a symmetric input)
JVP_CASES = {
    "inv": (la.inv, (SPD3,), (RNG.standard_normal((3, 3)),)),
    "det": (la.det, (SPD3,), (RNG.standard_normal((3, 3)),)),
    "slogdet": (lambda x: la.slogdet(x).logabsdet, (SPD3,), (RNG.standard_normal((3, 3)),)),
    "solve": (la.solve, (SPD3, RNG.standard_normal((3, 2))), (RNG.standard_normal((3, 3)),
                                                              RNG.standard_normal((3, 2)))),
    "cholesky": (la.cholesky, (SPD3,), (_sym_tangent(3),)),
    "eigvalsh": (la.eigvalsh, (SPD3,), (_sym_tangent(3),)),
    "eigh_vectors": (lambda x: anp.abs(la.eigh(x).eigenvectors), (SPD3,), (_sym_tangent(3),)),
}


@pytest.mark.parametrize("name", sorted(JVP_CASES))
def test_linalg_jvp_finite_differences(name):
    f, args, tangents = JVP_CASES[name]
    with axle.device(DEV):
        out, t_out = axle.jvp(f, args, tangents)
    np.testing.assert_allclose(np.asarray(out), np.asarray(f(*args)), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(t_out), _fd_jvp(f, args, tangents), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fn", [la.svdvals, lambda x: la.qr(x).R, lambda x: la.svd(x).S])
def test_grad_through_a_target_without_a_rule_raises(fn):
    with pytest.raises(TracingError, match="has no VJP rule"):
        axle.grad(lambda x: anp.sum(fn(x)))(A[0])
