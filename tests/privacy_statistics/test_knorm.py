"""K-norm covariance release: samplers against closed forms, exact privacy loss, projection against eigh and cvxpy."""
import numpy as np
import pytest
from scipy import stats

from paperkit.privacy_statistics import knorm as K


def sym(rng, *shape):
    G = rng.standard_normal(shape)
    return (G + np.swapaxes(G, -1, -2)) / 2


# --- Schatten norms ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 2, 5, 8])
@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
def test_schatten_matches_numpy_matrix_norms(d, batch):
    M = sym(np.random.default_rng(d), *batch, d, d)
    flat = M.reshape(-1, d, d)
    for p, ord_ in [(1, "nuc"), (2, "fro"), (np.inf, 2)]:
        want = np.array([np.linalg.norm(A, ord_) for A in flat]).reshape(batch)
        np.testing.assert_allclose(K.schatten(M, p), want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(K.schatten_ref(M, p), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p", [1.5, 3.0, 7.0])
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_schatten_general_p_matches_reference(p, dtype, rtol):
    M = (50 * sym(np.random.default_rng(3), 6, 5, 5)).astype(dtype)
    np.testing.assert_allclose(K.schatten(M, p), K.schatten_ref(M, p), rtol=rtol)
    # Schatten norms decrease in p
    assert np.all(K.schatten(M, p) <= K.schatten(M, 1) * (1 + 1e-12))


def test_schatten_large_p_does_not_overflow():
    # sigma^400 overflows float64 for sigma ~ 50; the fast version rescales: ||M||_op <= ||M||_p <= d^(1/p) ||M||_op
    M = 50 * sym(np.random.default_rng(3), 6, 5, 5)
    op, s400 = K.schatten(M, np.inf), K.schatten(M, 400.0)
    assert np.all(np.isfinite(s400)) and np.all(op <= s400 * (1 + 1e-12)) and np.all(s400 <= op * 5 ** (1 / 400))


# --- samplers ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [2, 3, 8])
@pytest.mark.parametrize("vandermonde", [True, False])
def test_mcmc_kernel_matches_reference(d, vandermonde):
    # 300 sweeps cross a 256-step block boundary
    lam, acc = K.knorm_eigs_mcmc(d, 40, 300, np.random.default_rng(d), vandermonde=vandermonde)
    lam_r, acc_r = K.knorm_eigs_mcmc_ref(d, 40, 300, np.random.default_rng(d), vandermonde=vandermonde)
    np.testing.assert_array_equal(acc, acc_r)
    np.testing.assert_allclose(lam, lam_r, rtol=1e-6, atol=1e-9)
    assert np.all((acc > 0.2) & (acc < 0.95)), acc


@pytest.mark.parametrize("d", [2, 3])
def test_exact_sampler_radial_law_is_gamma_D(d):
    # density ∝ exp(-||Z||_*) in D dimensions => ||Z||_* ~ Gamma(D, 1)
    Z = K.sample_knorm_nuclear_exact(d, 4000, np.random.default_rng(10 + d))
    nuc = K.schatten(Z, 1)
    assert stats.kstest(nuc, stats.gamma(K.sym_dim(d)).cdf).pvalue > 1e-3
    # symmetric law: Z and -Z alike, so the mean matrix is ~0
    assert np.abs(Z.mean(axis=0)).max() < 6 * Z.std(axis=0).max() / np.sqrt(len(Z))


@pytest.mark.parametrize("d", [4, 8])
def test_mcmc_radial_law_is_gamma_D_and_control_is_not(d):
    lam, _ = K.knorm_eigs_mcmc(d, 2000, 300, np.random.default_rng(d))
    gamma = stats.gamma(K.sym_dim(d))
    assert stats.kstest(np.abs(lam).sum(axis=1), gamma.cdf).pvalue > 1e-3
    lam0, _ = K.knorm_eigs_mcmc(d, 2000, 300, np.random.default_rng(d), vandermonde=False)
    # without the Vandermonde Jacobian the eigenvalues are i.i.d. Laplace: sum |lam| ~ Gamma(d), not Gamma(D)
    assert stats.kstest(np.abs(lam0).sum(axis=1), gamma.cdf).pvalue < 1e-6
    assert stats.kstest(np.abs(lam0).sum(axis=1), stats.gamma(d).cdf).pvalue > 1e-3


def test_mcmc_matches_exact_sampler_in_eigenvalue_law():
    rng = np.random.default_rng(7)
    exact = np.linalg.eigvalsh(K.sample_knorm_nuclear_exact(3, 3000, rng))
    mcmc = np.sort(K.knorm_eigs_mcmc(3, 3000, 300, rng)[0], axis=1)
    for k in range(3):
        assert stats.ks_2samp(exact[:, k], mcmc[:, k]).pvalue > 1e-3, k


def test_frobenius_sampler_radial_law_and_rotation_keeps_eigenvalues():
    rng = np.random.default_rng(2)
    Z = K.sample_knorm_frobenius(4, 3000, rng)
    fro = np.sqrt(np.sum(Z * Z, axis=(1, 2)))
    assert stats.kstest(fro, stats.gamma(10).cdf).pvalue > 1e-3
    lam = rng.standard_normal((5, 6))
    np.testing.assert_allclose(np.linalg.eigvalsh(K.haar_rotate(lam, rng)), np.sort(lam, axis=1), atol=1e-12)
    Zs = K.sample_knorm_nuclear(5, 7, rng, n_steps=20)
    assert Zs.shape == (7, 5, 5) and np.allclose(Zs, np.swapaxes(Zs, 1, 2))


# --- privacy: exact density ratio ----------------------------------------------------------------------------------

@pytest.mark.parametrize("d, n", [(2, 1), (4, 10), (8, 64)])
def test_density_ratio_on_neighbours_bounded_by_e_eps_and_attained(d, n):
    rng, eps = np.random.default_rng(d * n), 0.7
    b = K.knorm_scale(eps, n)
    Z = K.sample_knorm_frobenius(d, 200, rng)  # any outputs: the bound holds pointwise
    for k in range(10):
        S, Sp = K.neighbour_pair(d, n, rng, orthogonal=k % 2 == 0)
        assert K.schatten(S - Sp, 1) <= 2 / n + 1e-12
        losses = K.knorm_log_ratio(np.concatenate([S + b * Z, Sp + b * Z]), S, Sp, b)
        assert losses.max() <= eps * (1 + 1e-10) and losses.min() >= -eps * (1 + 1e-10)
        if k % 2 == 0:
            # orthogonal unit rows: ||S - S'||_* = 2/n and the loss reaches eps along Y = S + c (S - S')
            np.testing.assert_allclose(K.schatten(S - Sp, 1), 2 / n, rtol=1e-12)
            np.testing.assert_allclose(K.knorm_log_ratio(S + 3 * (S - Sp), S, Sp, b), eps, rtol=1e-10)
            # a mechanism calibrated to sensitivity 1/n (half the scale) loses 2 eps there
            np.testing.assert_allclose(K.knorm_log_ratio(S + 3 * (S - Sp), S, Sp, b / 2), 2 * eps, rtol=1e-10)


def test_max_privacy_loss_is_one_and_broken_scale_two():
    rng = np.random.default_rng(0)
    Z = K.sample_knorm_nuclear(4, 30, rng, n_steps=50)
    assert abs(K.max_privacy_loss(4, 8, 1.0, K.knorm_scale(1.0, 8), Z, rng, n_pairs=6) - 1) < 1e-9
    assert abs(K.max_privacy_loss(4, 8, 1.0, K.knorm_scale(1.0, 8) / 2, Z, rng, n_pairs=6) - 2) < 1e-9


def test_audit_lower_bound_separates_correct_and_broken_scale():
    rng = np.random.default_rng(1)
    S, Sp = np.diag([1.0, 0.0]), np.diag([0.0, 1.0])
    Z1, Z2 = K.sample_knorm_nuclear_exact(2, 20000, rng), K.sample_knorm_nuclear_exact(2, 20000, rng)
    res = {}
    for b in (2.0, 1.0):
        stat = lambda Y: K.knorm_log_ratio(Y, S, Sp, 2.0)  # noqa: E731 - scale-free statistic in [-1, 1]
        res[b] = K.audit_lower_bound(stat(S + b * Z1), stat(Sp + b * Z2), 0.8, 1e-3)
    assert 0.3 < res[2.0]["eps_lb"] <= 1.0  # eps = 1 mechanism (n = 1): sound and not vacuous
    assert res[1.0]["eps_lb"] > 1.3  # half the scale: the audit proves eps > 1
    same = K.audit_lower_bound(np.ones(100), np.ones(100), 0.5, 0.05)
    assert same["eps_lb"] < 0


# --- projection -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 3, 8])
def test_projection_psd_cone_matches_eigh_clip(d):
    M = sym(np.random.default_rng(d), 20, d, d)
    mu, U = np.linalg.eigh(M)
    want = np.einsum("kij,kj,klj->kil", U, np.maximum(mu, 0), U)
    np.testing.assert_allclose(K.psd_trace_projection(M, np.inf), want, atol=1e-12)
    np.testing.assert_allclose(K.psd_trace_projection_ref(M, np.inf), want, atol=1e-12)


@pytest.mark.parametrize("d, dtype, atol", [(2, np.float64, 1e-10), (6, np.float64, 1e-10), (6, np.float32, 1e-5)])
def test_projection_properties_and_reference(d, dtype, atol):
    rng = np.random.default_rng(d)
    M = (2 * sym(rng, 200, d, d)).astype(dtype)
    t = rng.uniform(0, 2, size=200)
    P = K.psd_trace_projection(M, t)
    np.testing.assert_allclose(P, K.psd_trace_projection_ref(M, t), atol=atol)
    assert np.linalg.eigvalsh(P).min() > -1e-10 and np.all(np.trace(P, axis1=1, axis2=2) <= t + 1e-10)
    np.testing.assert_allclose(K.psd_trace_projection(P, t), P, atol=1e-10)
    # projection onto a convex set holding S never moves further from S (why perturb-and-project cannot hurt)
    X = K.sphere_rows(30, d, 0.5, 5.0, rng)
    S = X.T @ X / 30
    assert np.all(K.schatten(K.psd_trace_projection(M, 1.0) - S, 2) <= K.schatten(M - S, 2) + 1e-10)


def test_projection_matches_cvxpy():
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(5)
    for t in (0.3, 1.0, 5.0):
        M = 1.5 * sym(rng, 3, 3)
        P = cp.Variable((3, 3), symmetric=True)
        cp.Problem(cp.Minimize(cp.sum_squares(P - M)), [P >> 0, cp.trace(P) <= t]).solve(solver=cp.CLARABEL)
        np.testing.assert_allclose(K.psd_trace_projection(M, t), P.value, atol=1e-5)


# --- releases, data, helpers, bad input --------------------------------------------------------------------------

def test_releases_are_feasible_and_scaled():
    rng = np.random.default_rng(3)
    X = K.sphere_rows(64, 5, 0.4, 10.0, rng)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), np.sqrt(0.4))
    S = X.T @ X / 64
    Z, lap = K.sample_knorm_frobenius(5, 50, rng), rng.laplace(size=50)
    out = K.releases(S, Z, lap, 1.0, 64)
    np.testing.assert_allclose(out["knorm"] - S, Z / 32)
    for m in ("pp", "pp_adaptive"):
        assert np.linalg.eigvalsh(out[m]).min() > -1e-10
    assert np.all(np.trace(out["pp"], axis1=1, axis2=2) <= 1 + 1e-10)
    t_hat = np.clip(0.4 + lap / (0.25 * 64), 0, 1)
    assert np.all(np.trace(out["pp_adaptive"], axis1=1, axis2=2) <= t_hat + 1e-10)
    err = K.release_errors(S, Z, lap, 1.0, 64, [1, 2, np.inf])
    assert err["knorm"].shape == (3, 50) and np.all(err["knorm"][0] >= err["knorm"][1])


def test_loglog_slope_reads_power_laws():
    x = np.array([2.0, 4, 8, 16])
    assert abs(K.loglog_slope(x, 3 * x ** -0.5) + 0.5) < 1e-12
    assert abs(K.loglog_slope(x, x ** 2) - 2) < 1e-12


@pytest.mark.parametrize("call, name", [
    (lambda r: K.knorm_eigs_mcmc(0, 5, 5, r), "d"),
    (lambda r: K.knorm_eigs_mcmc(3, -1, 5, r), "n_chains"),
    (lambda r: K.knorm_eigs_mcmc_ref(3, 5, 0, r), "n_steps"),
    (lambda r: K.knorm_eigs_mcmc(3, 5, 5, r, step=-1.0), "step"),
    (lambda r: K.sample_knorm_nuclear_exact(5, 10, r), "d"),
    (lambda r: K.schatten(np.ones((2, 3)), 1), "M"),
    (lambda r: K.schatten(np.eye(2), 0.5), "p"),
    (lambda r: K.psd_trace_projection(np.eye(2), -1.0), "t"),
    (lambda r: K.knorm_scale(0.0, 5), "eps"),
    (lambda r: K.knorm_scale(1.0, 0), "n"),
    (lambda r: K.sphere_rows(4, 2, 1.5, 5.0, r), "trace"),
    (lambda r: K.sphere_rows(4, 2, 0.5, 0.5, r), "cond"),
    (lambda r: K.haar_rotate(np.ones(3), r), "lam"),
    (lambda r: K.audit_lower_bound([1.0], [1.0], 0.5, 2.0), "alpha"),
])
def test_bad_input_raises_value_error_naming_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call(np.random.default_rng(0))


# --- trivial baselines, worst case over data sets, threshold sample sizes ----------------------------------------

def test_frobenius_scale_is_the_frobenius_sensitivity():
    rng = np.random.default_rng(11)
    n = 5
    worst = 0.0
    for k in range(200):
        S, Sp = K.neighbour_pair(4, n, rng, orthogonal=k % 2 == 0)
        worst = max(worst, np.linalg.norm(S - Sp, "fro"))
    # never above sqrt(2)/n, reached by orthogonal unit differing rows
    assert worst <= K.frobenius_scale(1.0, n) * (1 + 1e-12)
    np.testing.assert_allclose(worst, K.frobenius_scale(1.0, n), rtol=1e-9)
    with pytest.raises(ValueError, match="eps"):
        K.frobenius_scale(0.0, n)


@pytest.mark.parametrize("d", [4, 8])
def test_best_constant_error_closed_forms_on_extreme_points(d):
    # worst case of ||cI - S||_p over {0, e1 e1^T}: p = 1 -> 1 (c = 0), p = inf -> 1/2 (c = 1/2),
    # p = 2 -> sqrt(1 - 1/d) (c = 1/d)
    e = np.zeros((d, d))
    e[0, 0] = 1.0
    Ss = np.stack([np.zeros((d, d)), e])
    np.testing.assert_allclose(K.best_constant_error(Ss, 1), 1.0, atol=1e-12)
    np.testing.assert_allclose(K.best_constant_error(Ss, np.inf), 0.5, atol=1e-12)
    np.testing.assert_allclose(K.best_constant_error(Ss, 2), np.sqrt(1 - 1 / d), atol=1e-12)


def test_best_constant_error_matches_scipy_minimiser():
    from scipy.optimize import minimize_scalar
    rng = np.random.default_rng(5)
    X = rng.standard_normal((4, 6, 6))
    Ss = np.einsum("kij,klj->kil", X, X)
    Ss /= np.trace(Ss, axis1=1, axis2=2)[:, None, None]
    for p in (1, 3.0, np.inf):
        f = lambda c: K.schatten(c * np.eye(6) - Ss, p).max()
        want = minimize_scalar(f, bounds=(0, 1), method="bounded", options={"xatol": 1e-10}).fun
        got = K.best_constant_error(Ss, p)
        # the grid minimum is never below the true minimum and within the grid step (Lipschitz constant <= 6)
        assert want - 1e-9 <= got <= want + 6 * 1 / 400


def test_threshold_n_is_exact_for_power_laws_and_handles_edges():
    ns = np.array([4.0, 8, 16, 32, 64])
    np.testing.assert_allclose(K.threshold_n(ns, 10 / ns, 0.5), 20.0, rtol=1e-12)
    np.testing.assert_allclose(K.threshold_n(ns, 3 / np.sqrt(ns), 0.5), 36.0, rtol=1e-12)
    assert K.threshold_n(ns, 1 / ns, 0.5) == 4.0
    assert K.threshold_n(ns, 1e3 / ns, 0.5) == np.inf
    with pytest.raises(ValueError, match="ns"):
        K.threshold_n(ns[::-1], 10 / ns, 0.5)


def test_worst_case_errors_without_noise():
    # zero noise and a zero Laplace draw: every private release returns S (S is feasible), 0 errs by ||S||_p
    rng = np.random.default_rng(2)
    d, n = 5, 40
    fam = K.data_families(d, n, 0.7, 10.0, rng)
    for S in fam.values():
        assert np.trace(S) <= 0.7 + 1e-12 and np.linalg.eigvalsh(S).min() >= -1e-12
    zeros = np.zeros((3, d, d))
    W = K.worst_case_errors(fam, zeros, zeros, np.zeros(3), 1.0, n, [1, 2, np.inf])
    for m in ("knorm", "pp", "pp_adaptive", "psd", "frobenius"):
        np.testing.assert_allclose(W[m], 0.0, atol=1e-10)
    np.testing.assert_allclose(W["zero"], [0.7, 0.7, 0.7], rtol=1e-12)  # the spike has ||S||_p = tr S
    want = [K.best_constant_error(np.stack(list(fam.values())), p) for p in (1, 2, np.inf)]
    np.testing.assert_allclose(W["const"], want, rtol=1e-12)


def test_shrinkage_oracle_errors_match_worst_case_errors_at_the_ends():
    # lambda = 1 is PP, lambda = 0 the zero output, and the oracle with bound 1 is PP again
    rng = np.random.default_rng(3)
    d, n, ps = 5, 30, [1, 2, np.inf]
    fam = K.data_families(d, n, 0.4, 10.0, rng)
    Z = K.sample_knorm_nuclear(d, 40, rng, n_steps=300)
    lap = rng.laplace(size=40)
    W = K.worst_case_errors(fam, Z, K.sample_knorm_frobenius(d, 40, rng), lap, 1.0, n, ps)
    B = K.shrinkage_oracle_errors(fam, Z, 1.0, n, ps, 1.0, [0.0, 0.5, 1.0])
    np.testing.assert_allclose(B["shrink"][-1], W["pp"], rtol=1e-12)
    np.testing.assert_allclose(B["shrink"][0], W["zero"], rtol=1e-12)
    np.testing.assert_allclose(B["oracle"], W["pp"], rtol=1e-12)
    tight = K.shrinkage_oracle_errors(fam, Z, 1.0, n, ps, 0.4, [1.0])["oracle"]
    assert tight[1] <= W["pp"][1] + 1e-12  # Frobenius: projecting onto a smaller convex set holding S cannot hurt
    with pytest.raises(ValueError, match="lambdas"):
        K.shrinkage_oracle_errors(fam, Z, 1.0, n, ps, 0.4, [])
