"""paperkit.privacy_statistics.sos_barrier: barrier bound against Clarabel, the certificate identity, banded = dense
backward, implicit gradient against finite differences, the counted work, and bad input."""
import numpy as np
import pytest

from paperkit.privacy_statistics import sos
from paperkit.privacy_statistics import sos_barrier as sb


def instance(n, seed, dense=False):
    th = np.random.default_rng(seed).uniform(-1, 1, n - 1)
    cl = [list(range(n))] if dense else sos.chain_cliques(n)
    return sb.moment_blocks(n, cl), sos.chain_poly(th), cl


@pytest.mark.parametrize("n,dense", [(2, False), (4, False), (4, True), (5, False)])
def test_barrier_bound_within_gap_of_clarabel(n, dense):
    mb, f, cl = instance(n, n, dense)
    gap = 1e-5
    p = sb.barrier_solve(mb, mb.coeff_vector(f), gap=gap, linalg="dense" if dense else "band")
    g_star = sos.solve(sos.build(n, cl), f)[0]
    # weak duality: gamma_t <= gamma* <= gamma_t + sum_k s_k / t = gamma_t + gap (solver tolerance 1e-7 added)
    assert p.gamma <= g_star + 1e-7
    assert g_star - p.gamma <= gap + 1e-7


@pytest.mark.parametrize("dense", [False, True])
def test_certificate_identity_and_psd(dense):
    mb, f, _ = instance(4, 1, dense)
    c = mb.coeff_vector(f)
    p = sb.barrier_solve(mb, c, gap=1e-3, linalg="dense" if dense else "band")
    lhs = np.zeros(mb.m)
    for r, Q in zip(mb.rows, p.Q):
        np.add.at(lhs, r.ravel(), Q.ravel())
        assert np.linalg.eigvalsh(Q).min() > 0
    lhs[mb.zero] += p.gamma
    # f - gamma_t = sum_k m_k^T Q_k m_k, coefficient by coefficient
    np.testing.assert_allclose(lhs, c, atol=1e-7)


@pytest.mark.parametrize("n", [3, 6])
def test_band_and_dense_backward_agree(n):
    mb, f, _ = instance(n, 2)
    p = sb.barrier_solve(mb, mb.coeff_vector(f), gap=1e-3)
    _, G, Lg = sb.cert_loss(p, 0.1)
    a, b = sb.backward(mb, p, G, Lg, "band"), sb.backward(mb, p, G, Lg, "dense")
    np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("n,rho,seed", [(2, 0.0, 0), (3, 0.05, 1), (4, 0.2, 2)])
def test_implicit_gradient_matches_finite_differences(n, rho, seed):
    mb, f, _ = instance(n, seed)
    L, g = sb.cert_grad(mb, f, rho=rho)
    L_ref, g_ref = sb.cert_grad_ref(mb, f, rho=rho)
    assert L == pytest.approx(L_ref, abs=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-5 * np.abs(g_ref).max())


def test_envelope_read_off_is_wrong_for_a_certificate_loss():
    mb, f, _ = instance(3, 4)
    _, g = sb.cert_grad(mb, f, rho=0.05)
    p = sb.barrier_solve(mb, mb.coeff_vector(f), gap=1e-3)
    env = sb.envelope_grad(mb, p, 1.0)
    assert np.abs(env - g).max() > 0.05 * np.abs(g).max()


def test_bandwidth_constant_and_counted_work():
    bws = []
    for n in (8, 16, 32):
        mb = sb.moment_blocks(n, sos.chain_cliques(n))
        y = sb.gaussian_moments(mb)
        bws.append(sb.band_width(mb))
        assert mb.m == 10 * n - 5
    assert len(set(bws)) == 1
    mb = sb.moment_blocks(32, sos.chain_cliques(32))
    assert sb.backward_flops(mb, "dense") > 10 * sb.backward_flops(mb, "band")


def test_gaussian_moments_strictly_feasible():
    mb, _, _ = instance(5, 0, dense=True)
    y = sb.gaussian_moments(mb)
    assert y[mb.zero] == 1.0
    assert all(np.linalg.eigvalsh(y[r]).min() > 0 for r in mb.rows)


def test_bad_input_names_the_parameter():
    mb, f, _ = instance(3, 0)
    c = mb.coeff_vector(f)
    with pytest.raises(ValueError, match="linalg"):
        sb.barrier_solve(mb, c, linalg="lu")
    with pytest.raises(ValueError, match="gap"):
        sb.barrier_solve(mb, c, gap=0.0)
    with pytest.raises(ValueError, match="c must"):
        sb.barrier_solve(mb, c[:-1])
    with pytest.raises(ValueError, match="y_init"):
        sb.barrier_solve(mb, c, y_init=-np.ones(mb.m))
    with pytest.raises(ValueError, match="rho"):
        sb.cert_grad(mb, f, rho=-1.0)
    with pytest.raises(ValueError, match="poly"):
        sb.cert_grad(mb, {(1, 1, 1): 1.0})
    with pytest.raises(ValueError, match="n must"):
        sb.moment_blocks(0, [[0]])
    with pytest.raises(ValueError, match="dL_dQ"):
        p = sb.barrier_solve(mb, c, gap=1e-2)
        sb.backward(mb, p, [], 1.0)
