"""paperkit.spiking_cognition.probability_coding and probability_study: the grid decoder and the report likelihood
against their references, scipy.integrate and closed forms; the small-noise bias terms against the exact bias; the
fitted models against the NumPy likelihood and on data they generated."""
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from paperkit.spiking_cognition import probability_coding as pc
from paperkit.spiking_cognition import probability_study as ps

SEEDS = [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", [1, 17, 200])
def test_posterior_mean_matches_reference_and_torch(seed, size):
    kw = pc._pm_inputs(np.random.default_rng(seed), size)
    fast = pc.posterior_mean(**kw)
    np.testing.assert_allclose(fast, pc.posterior_mean_ref(**kw), rtol=1e-12, atol=1e-13)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in kw.items()}
    np.testing.assert_allclose(pc.posterior_mean_torch(t["m"], t["p_grid"], t["F_grid"], t["log_w"], t["sigma"]),
                               fast, rtol=1e-10, atol=1e-12)
    assert np.all((fast >= kw["p_grid"].min() - 1e-12) & (fast <= kw["p_grid"].max() + 1e-12))


def test_posterior_mean_on_a_fine_grid_matches_scipy_quad():
    obs = ps.smooth_observer(c=0.05, lam=1.2)
    n = 4000
    pg = (np.arange(n) + 0.5) / n
    for m, sigma in ((0.02, 0.05), (0.5, 0.08), (1.03, 0.04)):
        f = lambda x, k: x ** k * obs["prior"](x) * math.exp(-0.5 * ((m - obs["F"](x)) / sigma) ** 2)
        exact = integrate.quad(f, 0, 1, args=(1,), limit=200)[0] / integrate.quad(f, 0, 1, args=(0,), limit=200)[0]
        grid = pc.posterior_mean(np.array([m]), pg, obs["F"](pg), obs["log_prior"](pg), sigma)[0]
        assert grid == pytest.approx(exact, abs=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", [1, 9, 150])
def test_trial_loglik_matches_reference_and_torch(seed, size):
    kw = pc._ll_inputs(np.random.default_rng(seed), size)
    fast = pc.trial_loglik(**kw)
    np.testing.assert_allclose(fast, pc.trial_loglik_ref(**kw), rtol=1e-11, atol=1e-12)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in kw.items()}
    tl = pc.trial_loglik_torch(t["r"], t["F_stim"], t["m_grid"], t["phat"], t["sigma"], t["tau"])
    np.testing.assert_allclose(tl.numpy(), fast, rtol=1e-10, atol=1e-12)


def test_trial_loglik_on_a_fine_grid_matches_scipy_quad():
    sigma, tau = 0.07, 0.03
    phat_fn = lambda m: np.clip(0.1 + 0.8 * m, 0.05, 0.95)
    mg = np.linspace(-6 * sigma, 1 + 6 * sigma, 4001)
    for r, F in ((0.3, 0.25), (0.9, 0.97), (0.02, 0.0)):
        exact = integrate.quad(lambda m: stats.norm.pdf(m, F, sigma) * stats.norm.pdf(r, phat_fn(m), tau),
                               -1, 2, limit=400, points=[F])[0]
        grid = pc.trial_loglik(np.array([r]), np.array([F]), mg, phat_fn(mg), sigma, tau)[0]
        assert grid == pytest.approx(math.log(exact), abs=1e-4)


def test_kernels_reject_bad_input_naming_the_argument():
    kw = pc._pm_inputs(np.random.default_rng(0), 5)
    with pytest.raises(ValueError, match="sigma"):
        pc.posterior_mean(**{**kw, "sigma": -1.0})
    with pytest.raises(ValueError, match="one length"):
        pc.posterior_mean(**{**kw, "F_grid": kw["F_grid"][:-1]})
    with pytest.raises(ValueError, match="log_w"):
        pc.posterior_mean(**{**kw, "log_w": np.full(len(kw["p_grid"]), np.nan)})
    kl = pc._ll_inputs(np.random.default_rng(0), 5)
    with pytest.raises(ValueError, match="tau"):
        pc.trial_loglik(**{**kl, "tau": 0.0})
    with pytest.raises(ValueError, match="F_stim"):
        pc.trial_loglik(**{**kl, "F_stim": kl["F_stim"][:-1]})
    with pytest.raises(TypeError, match="r"):
        pc.trial_loglik(**{**kl, "r": kl["r"].astype(complex)})


def test_encoding_values_is_the_piecewise_linear_cdf():
    a = np.random.default_rng(3).dirichlet(np.ones(7))
    p = np.linspace(0, 1, 701)
    F = pc.encoding_values(p, a)
    assert F[0] == 0 and F[-1] == pytest.approx(1.0)
    assert np.all(np.diff(F) >= -1e-15)
    np.testing.assert_allclose(np.diff(F) / np.diff(p), np.repeat(a * 7, 100), rtol=1e-9)


def test_weighting_functions_closed_forms():
    p = np.linspace(0.01, 0.99, 50)
    np.testing.assert_allclose(pc.prelec(p, 1.0, 1.0), p, rtol=1e-12)
    np.testing.assert_allclose(pc.llo(p, 1.0, 0.0), p, rtol=1e-12)
    assert pc.prelec(np.array([1 / math.e]), 0.6, 1.0)[0] == pytest.approx(1 / math.e)   # Prelec's fixed point
    w = pc.llo(p, 0.6, 0.0)
    assert np.all(w[p < 0.5] > p[p < 0.5]) and np.all(w[p > 0.5] < p[p > 0.5])          # inverse S


def test_truncated_mean_bias_matches_quad_and_points_inward():
    u = np.array([0.0, 0.01, 0.05, 0.3, 0.5, 0.93, 1.0])
    fast = pc.truncated_mean_bias(u, 0.05)
    np.testing.assert_allclose(fast, [pc.truncated_mean_bias_quad(x, 0.05) for x in u], atol=1e-10)
    assert fast[0] > 0 and fast[-1] < 0 and abs(fast[4]) < 1e-12
    assert 0.5 * 0.05 < fast[0] < 0.05        # at the bound the regression is a sizeable share of sigma


def test_small_noise_terms_match_the_exact_bias_in_the_interior():
    obs = ps.smooth_observer(c=0.05, lam=1.2)
    p = np.linspace(0.25, 0.75, 11)
    errs = []
    for sigma in (0.01, 0.02):
        exact = ps.mean_curve(p, obs["F"], obs["log_prior"], sigma, n_grid=3000, n_m=3001)[0] - p
        att, rep = pc.bias_terms(p, obs["dF"], obs["d2F"], obs["dlog_prior"], sigma)
        errs.append(np.abs(exact - att - rep).max() / np.abs(exact).max())
        assert errs[-1] < 0.01
    assert errs[1] > 2.5 * errs[0]            # relative remainder of order sigma^2


def test_uniform_observer_has_no_interior_bias():
    p = np.array([0.3, 0.5, 0.7])
    bias = ps.mean_curve(p, lambda x: x, lambda x: 0 * x, 0.05)[0] - p
    assert np.abs(bias).max() < 1e-5
    s_edge, s_mid = ps.slopes(lambda x: x, lambda x: 0 * x, 0.08)
    assert s_mid == pytest.approx(1.0, abs=1e-3) and s_edge < s_mid


def test_arcsine_encoding_and_its_precision():
    p = np.linspace(0.05, 0.95, 19)
    h = 1e-6
    dF = (ps.arcsine_encoding(p + h) - ps.arcsine_encoding(p - h)) / (2 * h)
    np.testing.assert_allclose(dF, 1 / (math.pi * np.sqrt(p * (1 - p))), rtol=1e-6)
    prec = ps.true_precision(ps.arcsine_encoding, 10)
    assert prec.mean() == pytest.approx(1.0) and ps.u_index(prec) > 1.0
    np.testing.assert_allclose(ps.power_encoding(p, 0.0), p, atol=1e-12)


# ---------------------------------------------------------------- the fitted models

def _data(seed, F=ps.arcsine_encoding, n_trials=15):
    g = np.random.default_rng(seed)
    bim = [(0.5, 4, 12), (0.5, 12, 4)]
    p, cond = ps.stimuli(g, 20, n_trials, bim)
    r = ps.respond(g, p, cond, [F, F], [lambda x: 0 * x, lambda x: ps.beta_mixture_logpdf(x, bim)], 0.08, 0.03)
    return p, r, cond


def test_fit_loglik_equals_the_numpy_likelihood():
    p, r, cond = _data(0)
    f = ps.Fit("free", 2, 10, 12, 60, np.linspace(-0.45, 1.45, 91))
    with torch.no_grad():
        f.theta["enc"] += torch.tensor(np.random.default_rng(1).normal(size=10))
    ll = ps.heldout_loglik(f, r, p, cond)
    a = f.increments(0).detach().numpy()
    pg = f.pg.numpy()
    for c in (0, 1):
        log_w = np.log(f.prior(c).detach().numpy())[f.bin_of.numpy()]
        phat = pc.posterior_mean(f.mg.numpy(), pg, pc.encoding_values(pg, a), log_w, 0.1)
        ref = pc.trial_loglik(r[cond == c], pc.encoding_values(p[cond == c], a), f.mg.numpy(), phat, 0.1, 0.05)
        np.testing.assert_allclose(ll[cond == c], ref, rtol=1e-10)


def test_free_fit_finds_a_u_on_u_data_and_none_on_uniform_data():
    kw = dict(n_grid=40, n_m=61, max_iter=40)
    p, r, cond = _data(2, n_trials=15)
    assert ps.u_index(ps.fit("free", r, p, cond, **kw).precision()) > 0.3
    p, r, cond = _data(3, F=lambda x: x, n_trials=15)
    assert ps.u_index(ps.fit("free", r, p, cond, **kw).precision()) < 0.3


def test_prelec_fit_recovers_its_parameters():
    g = np.random.default_rng(4)
    p = np.tile(np.arange(1, 41) / 41, 30)
    cond = np.zeros(len(p), int)
    r = ps.simulate_weighting(g, p, lambda x: pc.prelec(x, 0.6, 1.0), 0.05)
    f = ps.fit("prelec", r, p, cond)
    assert math.exp(float(f.theta["w1"][0].detach())) == pytest.approx(0.6, abs=0.08)
    assert math.exp(float(f.theta["log_sd"][0].detach())) == pytest.approx(0.05, abs=0.005)


def test_split_stimuli_and_paired_bound():
    g = np.random.default_rng(5)
    p, cond = ps.stimuli(g, 10, 6, [(1.0, 2, 2)])
    assert len(p) == 120 and (cond == 0).sum() == 60 and np.all((p > 0) & (p < 1))
    test = ps.split(g, cond, 1 / 3)
    assert test[cond == 0].sum() == 20 and test[cond == 1].sum() == 20
    good, bad = np.zeros(50), -np.ones(50) + 0.01 * g.normal(size=50)
    mean, upper = ps.paired_bound(good, bad)
    assert mean < 0 and upper < 0 and upper > mean
    with pytest.raises(ValueError, match="kind"):
        ps.Fit("nonsense", 1, 4, 4, 20, np.linspace(0, 1, 10))


def test_weighting_noise_that_narrows_toward_the_bounds():
    # simulate: the report spread is sqrt(sd^2 + sd_bin^2 w (1 - w)) (closed form) ...
    g = np.random.default_rng(6)
    p = np.repeat([0.02, 0.5], 20000)
    r = ps.simulate_weighting(g, p, lambda x: x, 0.03, 0.12)
    for x in (0.02, 0.5):
        assert r[p == x].std() == pytest.approx(math.sqrt(0.03 ** 2 + 0.12 ** 2 * x * (1 - x)), rel=0.03)
    # ... and the Prelec fit, which may narrow its noise the same way, recovers both noise parameters
    p = np.tile(np.arange(1, 41) / 41, 40)
    cond = np.zeros(len(p), int)
    r = ps.simulate_weighting(g, p, lambda x: pc.prelec(x, 0.6, 1.0), 0.03, 0.12)
    f = ps.fit("prelec", r, p, cond)
    assert math.exp(float(f.theta["w1"][0].detach())) == pytest.approx(0.6, abs=0.08)
    s0, s1 = (math.exp(float(f.theta[k][0].detach())) for k in ("log_sd", "log_sd_bin"))
    w = pc.prelec(np.array([0.05, 0.3, 0.6, 0.95]), 0.6, 1.0)
    np.testing.assert_allclose(np.sqrt(s0 ** 2 + s1 ** 2 * w * (1 - w)), np.sqrt(0.03 ** 2 + 0.12 ** 2 * w * (1 - w)),
                               rtol=0.15)
    # the fit reaches at least the likelihood of the true parameters (it is a maximum-likelihood fit)
    ll_fit = ps.heldout_loglik(f, r, p, cond).sum()
    with torch.no_grad():
        for k, v in (("w1", math.log(0.6)), ("w2", 0.0), ("log_sd", math.log(0.03)), ("log_sd_bin", math.log(0.12))):
            f.theta[k].fill_(v)
    assert ll_fit >= ps.heldout_loglik(f, r, p, cond).sum()
