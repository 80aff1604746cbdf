"""paperkit.learning_dynamics.q_gaussian and tsallis_blr: q-Gaussian densities, samplers and escorts against scipy;
the logistic kernels against their references and Torch autograd; the generalized BLR against closed forms and a
direct minimisation of its objective."""
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from scipy.special import expit, log_expit

from paperkit.learning_dynamics import q_gaussian as qg
from paperkit.learning_dynamics import tsallis_blr as tb

SEEDS = [0, 1, 2]


# ---------------------------------------------------------------- q-exponential

@pytest.mark.parametrize("q", [-0.5, 0.5, 1.0, 1.5])
def test_q_exp_and_q_log_are_inverse_and_match_reference(q):
    x = np.linspace(0.1, 5.0, 50)
    np.testing.assert_allclose(qg.q_exp(qg.q_log(x, q), q), x, rtol=1e-12)
    u = np.linspace(-1.5, 1.5, 41)
    np.testing.assert_allclose(qg.q_exp(u, q), qg.q_exp_ref(u, q), rtol=1e-12)
    if q == 1.0:
        np.testing.assert_allclose(qg.q_exp(u, q), np.exp(u))


def test_q_exp_rejects_bad_q():
    for bad in (2.0, 3.0, float("nan")):
        with pytest.raises(ValueError, match="q must"):
            qg.q_exp(np.zeros(2), bad)
    with pytest.raises(TypeError, match="q must"):
        qg.q_exp(np.zeros(2), "1")


# ---------------------------------------------------------------- densities

@pytest.mark.parametrize("q", [0.2, 0.5, 0.9, 1.0, 1.1, 1.4, 1.6])
@pytest.mark.parametrize("s", [0.3, 2.0, 50.0])
def test_1d_density_normalises_and_matches_scipy(q, s):
    m = np.array([0.4])
    sv = np.array([s])
    pdf = lambda x: math.exp(qg.q_gaussian_logpdf(np.array([[x]]), m, sv, q)[0])
    lo, hi = (0.4 - qg.support_radius(q, sv)[0], 0.4 + qg.support_radius(q, sv)[0]) if q < 1 else (-np.inf, np.inf)
    assert integrate.quad(pdf, lo, hi, limit=300)[0] == pytest.approx(1.0, abs=1e-8)
    var = integrate.quad(lambda x: pdf(x) * (x - 0.4) ** 2, lo, hi, limit=300)[0]
    assert var == pytest.approx(qg.covariance_factor(q, sv) / s, rel=1e-7)
    grid = np.linspace(-3, 3, 301) / math.sqrt(s) + 0.4
    lp = qg.q_gaussian_logpdf(grid[:, None], m, sv, q)
    sp = qg.shape_params(q, 1, math.log(s))
    if q > 1:
        ref = stats.t(df=sp["nu"], loc=0.4, scale=math.sqrt(math.exp(sp["log_2tau"]) / sp["nu"] / s)).logpdf(grid)
        assert sp["nu"] == pytest.approx((3 - q) / (q - 1))
    elif q < 1:
        R, a = qg.support_radius(q, sv)[0], 1 / (1 - q)
        ref = stats.beta(a + 1, a + 1, loc=0.4 - R, scale=2 * R).logpdf(grid)
    else:
        ref = stats.norm(0.4, 1 / math.sqrt(s)).logpdf(grid)
    fin = np.isfinite(ref)
    assert (np.isfinite(lp) == fin).all()
    np.testing.assert_allclose(lp[fin], ref[fin], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("q", [0.5, 1.0, 1.15])
def test_multivariate_density_matches_scipy_and_reference(q):
    rng = np.random.default_rng(3)
    d = 3
    m, s = rng.normal(size=d), rng.uniform(0.5, 3.0, d)
    x = m + rng.normal(size=(40, d)) * 0.5 / np.sqrt(s)
    lp = qg.q_gaussian_logpdf(x, m, s, q)
    np.testing.assert_allclose(lp, qg.q_gaussian_logpdf_ref(x, m, s, q), rtol=1e-10, atol=1e-10)
    sp = qg.shape_params(q, d, float(np.log(s).sum()))
    if q > 1:
        shape = np.diag(1 / s) * math.exp(sp["log_2tau"]) / sp["nu"]
        np.testing.assert_allclose(lp, stats.multivariate_t(loc=m, shape=shape, df=sp["nu"]).logpdf(x), rtol=1e-9)
    elif q == 1:
        np.testing.assert_allclose(lp, stats.multivariate_normal(m, np.diag(1 / s)).logpdf(x), rtol=1e-10)


def test_2d_compact_density_integrates_to_one():
    m, s = np.zeros(2), np.array([1.0, 4.0])
    f = lambda b, a: math.exp(qg.q_gaussian_logpdf(np.array([[a, b]]), m, s, 0.5)[0])
    r = qg.support_radius(0.5, s)
    val = integrate.dblquad(f, -r[0], r[0], lambda a: -r[1] * math.sqrt(max(0, 1 - (a / r[0]) ** 2)),
                            lambda a: r[1] * math.sqrt(max(0, 1 - (a / r[0]) ** 2)))[0]
    assert val == pytest.approx(1.0, abs=1e-6)


def test_density_rejects_bad_input():
    m, s = np.zeros(2), np.ones(2)
    with pytest.raises(ValueError, match="s must be positive"):
        qg.q_gaussian_logpdf(np.zeros((1, 2)), m, -s, 0.5)
    with pytest.raises(ValueError, match="x must be"):
        qg.q_gaussian_logpdf(np.zeros((1, 3)), m, s, 0.5)
    with pytest.raises(ValueError, match="q must be below"):
        qg.q_gaussian_logpdf(np.zeros((1, 2)), m, s, 1.6)    # d = 2: finite covariance needs q < 1.5


# ---------------------------------------------------------------- sampling and escorts

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("q", [0.5, 1.0, 1.3])
def test_samples_and_escort_samples_follow_their_densities(seed, q):
    rng = np.random.default_rng(seed)
    m, s = np.array([0.2]), np.array([3.0])
    x = qg.q_gaussian_sample(m, s, q, 20000, rng)[:, 0]
    cdf = lambda t: integrate.quad(lambda u: math.exp(qg.q_gaussian_logpdf(np.array([[u]]), m, s, q)[0]),
                                   -np.inf if q >= 1 else 0.2 - qg.support_radius(q, s)[0], t)[0]
    qs = np.quantile(x, [0.1, 0.5, 0.9])
    assert [cdf(v) for v in qs] == pytest.approx([0.1, 0.5, 0.9], abs=0.015)
    # escort of order 2 - q: density proportional to p^(2-q)
    e = qg.q_gaussian_sample(m, s, q, 20000, rng, escort=True)[:, 0]
    lo, hi = (0.2 - qg.support_radius(q, s)[0], 0.2 + qg.support_radius(q, s)[0]) if q < 1 else (-np.inf, np.inf)
    pw = lambda u: math.exp((2 - q) * qg.q_gaussian_logpdf(np.array([[u]]), m, s, q)[0])
    Z = integrate.quad(pw, lo, hi)[0]
    mad = integrate.quad(lambda u: pw(u) * abs(u - 0.2), lo, hi)[0] / Z
    assert np.abs(e - 0.2).mean() == pytest.approx(mad, rel=0.04)


def test_compact_samples_stay_in_support():
    rng = np.random.default_rng(0)
    m, s = np.array([1.0, -1.0, 0.0]), np.array([1.0, 5.0, 0.2])
    x = qg.q_gaussian_sample(m, s, 0.3, 50000, rng)
    quad = (((x - m) ** 2) * s).sum(1)
    r2 = math.exp(qg.shape_params(0.3, 3, float(np.log(s).sum()))["log_r2"])
    assert quad.max() <= r2 * (1 + 1e-12)
    assert quad.max() > 0.9 * r2


def test_stein_identity_of_the_escort():
    # E_p[l'(x)(x - m)] = Var_p * E_escort[l''] for a non-quadratic l, the identity behind the Newton-like step
    for q in (0.5, 1.3):
        m, s = 0.3, 2.0
        sv = np.array([s])
        lo, hi = (m - qg.support_radius(q, sv)[0], m + qg.support_radius(q, sv)[0]) if q < 1 else (-np.inf, np.inf)
        p = lambda u: math.exp(qg.q_gaussian_logpdf(np.array([[u]]), np.array([m]), sv, q)[0])
        l1, l2 = lambda u: math.tanh(u), lambda u: 1 - math.tanh(u) ** 2
        lhs = integrate.quad(lambda u: p(u) * l1(u) * (u - m), lo, hi)[0]
        esc = integrate.quad(lambda u: p(u) ** (2 - q) * l2(u), lo, hi)[0] / integrate.quad(lambda u: p(u) ** (2 - q), lo, hi)[0]
        assert lhs == pytest.approx(qg.covariance_factor(q, sv) / s * esc, rel=1e-8)


# ---------------------------------------------------------------- logistic kernels

@pytest.mark.parametrize("seed", SEEDS)
def test_logistic_grad_hess_matches_reference_and_autograd(seed):
    rng = np.random.default_rng(seed)
    X, y, th = rng.normal(size=(30, 4)), (rng.random(30) < 0.5).astype(float), rng.normal(size=(3, 4)) * 2
    loss, g, h = tb.logistic_grad_hess(th, X, y)
    lr, gr, hr = tb.logistic_grad_hess_ref(th, X, y)
    np.testing.assert_allclose(loss, lr, rtol=1e-12); np.testing.assert_allclose(g, gr, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, hr, rtol=1e-10, atol=1e-12)
    for i in range(3):
        t = torch.tensor(th[i], requires_grad=True)
        f = lambda w: torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor(X) @ w, torch.tensor(y),
                                                                           reduction="sum")
        val = f(t)
        val.backward()
        np.testing.assert_allclose(t.grad.numpy(), g[i], rtol=1e-10)
        H = torch.autograd.functional.hessian(f, torch.tensor(th[i]))
        np.testing.assert_allclose(np.diag(H.numpy()), h[i], rtol=1e-10)
        assert float(val.detach()) == pytest.approx(loss[i], rel=1e-12)


def test_generalized_blr_step_matches_reference():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), (rng.random(40) < 0.5).astype(float)
    m, s = rng.normal(size=3) * 0.1, rng.uniform(1, 3, 3)
    for q in (0.5, 1.0, 1.2):
        for hu in ("escort", "p"):
            a = tb.generalized_blr_step(m, s, X, y, q, 0.3, 1.0, np.random.default_rng(5), 4, hu)
            b = tb.generalized_blr_step_ref(m, s, X, y, q, 0.3, 1.0, np.random.default_rng(5), 4, hu)
            np.testing.assert_allclose(a[0], b[0], rtol=1e-10); np.testing.assert_allclose(a[1], b[1], rtol=1e-10)


def test_generalized_blr_step_rejects_bad_input():
    X, y, m, s = np.zeros((4, 3)), np.zeros(4), np.zeros(3), np.ones(3)
    with pytest.raises(ValueError, match="rho"):
        tb.generalized_blr_step(m, s, X, y, 0.5, 1.5, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="q must be below"):
        tb.generalized_blr_step(m, s, X, y, 1.45, 0.5, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="s0"):
        tb.generalized_blr_step(m, s, X, y, 0.5, 0.5, -1.0, np.random.default_rng(0))


# ---------------------------------------------------------------- the rule against closed forms and scipy

@pytest.mark.parametrize("q", [0.5, 1.0, 1.3])
def test_one_step_is_exact_on_a_quadratic_loss(q):
    h, yv = 5.0, 0.8
    m, s, _ = tb.blr_1d(q, lambda t: h * (t - yv), lambda t: np.full_like(t, h), 0.0, 1.0, rho=1.0, steps=1)
    assert m == pytest.approx(h * yv / (1 + h), rel=1e-12) and s == pytest.approx(1 + h, rel=1e-12)


def _logistic_toy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=10) * 1.5
    y = (rng.random(10) < expit(x)).astype(float)
    loss = lambda t: -(y * log_expit(np.outer(t, x)) + (1 - y) * log_expit(-np.outer(t, x))).sum(1)
    grad = lambda t: ((expit(np.outer(t, x)) - y) * x).sum(1)
    hess = lambda t: (expit(np.outer(t, x)) * (1 - expit(np.outer(t, x))) * x ** 2).sum(1)
    return loss, grad, hess


@pytest.mark.parametrize("q", [0.5, 1.3])
def test_fixed_point_is_the_direct_minimiser_and_kl_rule_is_not(q):
    loss, grad, hess = _logistic_toy()
    m, s, _ = tb.blr_1d(q, grad, hess, 0.0, 1.0, rho=0.5, steps=3000)
    mk, sk, _ = tb.blr_1d(q, grad, hess, 0.0, 1.0, rho=0.5, steps=3000, hessian_under="p")
    mo, so, fo = tb.minimise_objective_1d(q, loss, 0.0, 1.0)
    assert abs(m - mo) + abs(math.log(s / so)) < 1e-5
    assert abs(mk - mo) + abs(math.log(sk / so)) > 1e-3
    assert tb.fy_objective_1d_nodes(mk, sk, q, loss, 0.0, 1.0) > fo
    assert tb.fy_objective_1d_nodes(m, s, q, loss, 0.0, 1.0) == pytest.approx(tb.fy_objective_1d(m, s, q, loss, 0.0, 1.0),
                                                                               abs=1e-6)


def test_discrepancy_is_kl_at_q1_and_zero_at_the_prior():
    zero = lambda t: np.zeros_like(t)
    for q in (0.5, 1.0, 1.3):
        assert tb.fy_objective_1d_nodes(0.3, 2.0, q, zero, 0.3, 2.0) == pytest.approx(0.0, abs=1e-12)
        assert tb.fy_objective_1d_nodes(0.8, 3.0, q, zero, 0.3, 2.0) > 0
    kl = 0.5 * (2.0 / 3.0 - 1 + 2.0 * 0.5 ** 2 + math.log(3.0 / 2.0))     # KL(N(0.8, 1/3) || N(0.3, 1/2))
    assert tb.fy_objective_1d_nodes(0.8, 3.0, 1.0, zero, 0.3, 2.0) == pytest.approx(kl, rel=1e-10)


def test_log_mass_below():
    assert tb.log_mass_below(0.0, 5.0, 100.0, 1.0) > -np.inf           # a Gaussian has mass everywhere
    r = qg.support_radius(0.5, np.array([4.0]))[0]
    assert tb.log_mass_below(1.0 - r - 1e-9, 1.0, 4.0, 0.5) == -np.inf
    assert math.exp(tb.log_mass_below(1.0, 1.0, 4.0, 0.5)) == pytest.approx(0.5)


def test_study_scores_match_sklearn_metrics():
    from sklearn.metrics import accuracy_score, log_loss

    from paperkit.learning_dynamics import tsallis_study as ts
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.4).astype(float)
    p = rng.random(200)
    sc = ts.scores(p, y)
    assert sc["acc"] == pytest.approx(accuracy_score(y, p >= 0.5))
    assert sc["nll"] == pytest.approx(log_loss(y, p), rel=1e-12)


def test_study_pca_features_are_standardised_on_the_training_rows():
    from paperkit.learning_dynamics import tsallis_study as ts
    X = np.random.default_rng(1).normal(size=(120, 8)) @ np.diag(np.arange(1, 9.0))
    tr = np.arange(80)
    Z = ts.pca_features(X, tr, 3)
    assert Z.shape == (120, 4) and np.all(Z[:, -1] == 1)
    assert np.allclose(Z[tr, :3].std(0), 1) and np.allclose(Z[tr, :3].mean(0), 0, atol=1e-12)
    # the first component carries the most training variance before standardisation
    assert abs(np.corrcoef(Z[tr, 0], X[tr, -1])[0, 1]) > 0.9


def test_study_paired_nll_bound_matches_the_paired_t_statistic():
    from scipy import stats

    from paperkit.learning_dynamics import tsallis_study as ts
    rng = np.random.default_rng(2)
    y = (rng.random(300) < 0.5).astype(float)
    p_base = np.clip(0.5 + (y - 0.5) * rng.uniform(0.2, 0.9, 300), 0.01, 0.99)
    p_key = np.clip(p_base + rng.normal(0, 0.05, 300), 0.01, 0.99)
    row = {1.0: ts.scores(p_base, y), "k": ts.scores(p_key, y)}
    mean, bound = ts.paired_nll_bound(row, "k")
    d = row["k"]["nll_rows"] - row[1.0]["nll_rows"]
    assert mean == pytest.approx(row["k"]["nll"] - row[1.0]["nll"], abs=1e-12)
    t = stats.ttest_rel(row["k"]["nll_rows"], row[1.0]["nll_rows"]).statistic     # mean / (sd / sqrt(n))
    assert bound == pytest.approx(mean + 2 * mean / t, rel=1e-10)
    assert ts.paired_nll_bound(row, 1.0) == (0.0, 0.0)                            # a method against itself
    assert d.shape == (300,)
