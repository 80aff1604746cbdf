"""paperkit.privacy_statistics.causation_bounds: Tian-Pearl bounds against hand-computed cases and a brute-force LP over all joint
distributions of the counterfactuals, the Numba kernel against its reference, and the sample-size rules."""
import numpy as np
import pytest
from scipy import stats
from scipy.optimize import linprog

from paperkit.privacy_statistics import causation_bounds as cb

TOL = 1e-7  # HiGHS solves to ~1e-9; the closed forms are exact


def lp_constraints(p_exp, p_obs):
    """Equalities ``A q = b`` on q[t, x] (index 2 t + x; t in TYPES order (Y_x', Y_x)) that reproduce the data."""
    A, b = [], []
    for x, y, cell in ((1, 1, 0), (1, 0, 1), (0, 1, 2), (0, 0, 3)):
        # consistency: with X = x we observe Y = Y_x, which is TYPES[t][x]
        A.append([float(k % 2 == x and cb.TYPES[k // 2][x] == y) for k in range(8)])
        b.append(p_obs[cell])
    A.append([float(cb.TYPES[k // 2][1] == 1) for k in range(8)]); b.append(p_exp[0])  # P(y_x)
    A.append([float(cb.TYPES[k // 2][0] == 1) for k in range(8)]); b.append(p_exp[1])  # P(y_x')
    return np.array(A), np.array(b)


def lp_bounds(p_exp, p_obs, poc):
    """Min and max of ``poc`` over every joint distribution q(type, x) of (Y_x', Y_x, X) that reproduces p_exp and
    p_obs (8 unknowns, 6 equalities, q >= 0): the brute-force oracle for tightness."""
    A, b = lp_constraints(p_exp, p_obs)
    c = np.zeros(8)
    if poc == "PNS":
        c[2], c[3] = 1, 1                  # type (0, 1) under either x
    elif poc == "PN":
        c[3] = 1 / p_obs[0]                # type (0, 1) among (x, y)
    else:
        c[2] = 1 / p_obs[3]                # type (0, 1) among (x', y')
    lo = linprog(c, A_eq=A, b_eq=b, bounds=(0, None), method="highs")
    hi = linprog(-c, A_eq=A, b_eq=b, bounds=(0, None), method="highs")
    assert lo.status == 0 and hi.status == 0
    return lo.fun, -hi.fun


def test_lp_constraints_hold_for_the_generating_model():
    rng = np.random.default_rng(4)
    r, s = cb.random_models(rng, 5)
    p_exp, p_obs, truth = cb.model_probabilities(r, s)
    for i in range(5):
        q = np.stack([r[i] * (1 - s[i]), r[i] * s[i]], axis=1).reshape(-1)  # q[t, x] = P(type t) P(X = x | t)
        A, b = lp_constraints(p_exp[i], p_obs[i])
        np.testing.assert_allclose(A @ q, b, atol=1e-15)
        assert q[2] + q[3] == pytest.approx(truth["PNS"][i])


def test_hand_case_drug_example():
    # experiment: 1.6% die under the drug, 1.4% without; observation: 2 of 1000 takers die, 28 of 1000 refusers
    p_exp = np.array([0.016, 0.014])
    p_obs = np.array([0.001, 0.499, 0.014, 0.486])
    lo, hi = cb.poc_bounds(p_exp, p_obs, "PNS")
    # max(0, .016-.014, .015-.014, .016-.015) and min(.016, .986, .001+.486, .002+.499+.014)
    assert lo == pytest.approx(0.002) and hi == pytest.approx(0.016)
    lo, hi = cb.poc_bounds(p_exp, p_obs, "PN")
    # (P(y) - P(y_x')) / P(x,y) = .001/.001 = 1 and min(1, (.986 - .486)/.001) = 1: the drug was necessary
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    lo, hi = cb.poc_bounds(p_exp, p_obs, "PS")
    assert lo == pytest.approx(0.001 / 0.486) and hi == pytest.approx(0.015 / 0.486)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_confounding_gives_the_experimental_bounds(seed):
    rng = np.random.default_rng(seed)
    p1, p0, px = rng.uniform(0.05, 0.95, size=(3, 50))
    p_exp = np.stack([p1, p0], 1)
    p_obs = np.stack([px * p1, px * (1 - p1), (1 - px) * p0, (1 - px) * (1 - p0)], 1)
    expected = {"PNS": (np.maximum(0, p1 - p0), np.minimum(p1, 1 - p0)),
                "PN": (np.maximum(0, (p1 - p0) / p1), np.minimum(1, (1 - p0) / p1)),
                "PS": (np.maximum(0, (p1 - p0) / (1 - p0)), np.minimum(1, p1 / (1 - p0)))}
    for poc, (lo_e, hi_e) in expected.items():
        lo, hi = cb.poc_bounds(p_exp, p_obs, poc)
        np.testing.assert_allclose(lo, lo_e, atol=1e-12)
        np.testing.assert_allclose(hi, hi_e, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_bounds_are_tight_and_equal_the_lp(seed):
    rng = np.random.default_rng(seed)
    r, s = cb.random_models(rng, 12)
    p_exp, p_obs, truth = cb.model_probabilities(r, s)
    for poc in cb.POCS:
        lo, hi = cb.poc_bounds(p_exp, p_obs, poc)
        assert np.all(lo - TOL <= truth[poc]) and np.all(truth[poc] <= hi + TOL)
        for i in range(len(r)):
            lp_lo, lp_hi = lp_bounds(p_exp[i], p_obs[i], poc)
            assert lo[i] == pytest.approx(lp_lo, abs=TOL), (poc, i)
            assert hi[i] == pytest.approx(lp_hi, abs=TOL), (poc, i)


def test_bounds_broadcast_and_reject_bad_probabilities():
    r, s = cb.random_models(np.random.default_rng(0), 6)
    p_exp, p_obs, _ = cb.model_probabilities(r.reshape(2, 3, 4), s.reshape(2, 3, 4))
    lo, hi = cb.poc_bounds(p_exp, p_obs, "PNS")
    assert lo.shape == (2, 3) and hi.shape == (2, 3)
    lo1, hi1 = cb.poc_bounds(p_exp[1, 2], p_obs[1, 2], "PNS")
    assert lo1 == lo[1, 2] and hi1 == hi[1, 2]
    with pytest.raises(ValueError, match="p_exp"):
        cb.poc_bounds([0.5, 0.5, 0.5], p_obs[0, 0])
    with pytest.raises(ValueError, match="p_obs"):
        cb.poc_bounds(p_exp[0, 0], [0.5, 0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="poc"):
        cb.poc_bounds(p_exp, p_obs, "PNX")


# ------------------------------------------------------------------------------------------------- kernel

def _counts(seed, lead, dtype):
    rng = np.random.default_rng(seed)
    r, s = cb.random_models(rng, 5)
    p_exp, p_obs, _ = cb.model_probabilities(r, s)
    reps = int(np.prod(lead)) // 5 if np.prod(lead) % 5 == 0 else 1
    n_exp = rng.integers(1, 60, size=(5, reps)) * 2
    k_exp, k_obs, n_arm, n_obs = cb.draw_counts(rng, p_exp, p_obs, n_exp, rng.integers(3, 90, size=(5, reps)), reps)
    shape = lead if np.prod(lead) == 5 * reps else (5, reps)
    return (k_exp.reshape(shape + (2,)).astype(dtype), k_obs.reshape(shape + (4,)).astype(dtype),
            n_arm.reshape(shape).astype(dtype), n_obs.reshape(shape).astype(dtype))


@pytest.mark.parametrize("poc", cb.POCS)
@pytest.mark.parametrize("lead", [(5,), (5, 40), (10, 3, 10)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_matches_reference(poc, lead, dtype, seed):
    k_exp, k_obs, n_arm, n_obs = _counts(seed, lead, dtype)
    lo, hi = cb.bound_estimates(k_exp, k_obs, n_arm, n_obs, poc)
    lo_r, hi_r = cb.bound_estimates_ref(k_exp, k_obs, n_arm, n_obs, poc)
    assert lo.shape == k_exp.shape[:-1] and lo.dtype == np.float64
    # same arithmetic up to the order of a 6-term dot product
    np.testing.assert_allclose(lo, lo_r, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hi, hi_r, rtol=1e-12, atol=1e-14)
    # and the vectorised bounds of the plug-in probabilities
    lo_v, hi_v = cb.poc_bounds(k_exp / n_arm[..., None], k_obs / n_obs[..., None], poc, allow_contradiction=True)
    np.testing.assert_allclose(lo, lo_v, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hi, hi_v, rtol=1e-12, atol=1e-14)


def test_kernel_skips_empty_denominators_and_scalar_sizes():
    k_exp = np.array([[30, 10], [30, 10]])
    k_obs = np.array([[0, 40, 20, 40], [10, 30, 20, 40]])
    for fn in (cb.bound_estimates, cb.bound_estimates_ref):
        lo, hi = fn(k_exp, k_obs, 50, 100, "PN")
        assert lo[0] == 0.0 and hi[0] == 1.0          # no (x, y) units: PN is unconstrained
        # (P(y) - P(y_x')) / P(x,y) = (0.3 - 0.2) / 0.1 and (0.8 - 0.4) / 0.1 clipped at 1
        assert lo[1] == pytest.approx(1.0) and hi[1] == 1.0


def test_kernel_rejects_bad_input_naming_the_argument():
    k_exp, k_obs = np.array([[3, 4]]), np.array([[1, 2, 3, 4]])
    with pytest.raises(ValueError, match="n_arm"):
        cb.bound_estimates(k_exp, k_obs, -5, 10)
    with pytest.raises(ValueError, match="n_obs"):
        cb.bound_estimates(k_exp, k_obs, 5, 0)
    with pytest.raises(ValueError, match="k_exp"):
        cb.bound_estimates(np.array([[3, 4, 5]]), k_obs, 5, 10)
    with pytest.raises(ValueError, match="k_obs"):
        cb.bound_estimates(k_exp, np.array([[1, 2, 3]]), 5, 10)
    with pytest.raises(ValueError, match="k_obs must sum"):
        cb.bound_estimates(k_exp, k_obs, 5, 11)
    with pytest.raises(ValueError, match="k_exp must not exceed"):
        cb.bound_estimates(k_exp, k_obs, 3, 10)
    with pytest.raises(ValueError, match="integer"):
        cb.bound_estimates(k_exp.astype(float), k_obs, 5, 10)
    p_exp, p_obs, _ = cb.model_probabilities(*cb.hard_pns_model())
    with pytest.raises(ValueError, match="n_exp must be even"):
        cb.draw_counts(np.random.default_rng(0), p_exp, p_obs, 7, 10, 3)
    with pytest.raises(ValueError, match="reps"):
        cb.draw_counts(np.random.default_rng(0), p_exp, p_obs, 8, 10, 0)


def test_draw_counts_is_deterministic_and_has_the_right_moments():
    p_exp, p_obs, _ = cb.model_probabilities(*cb.hard_pns_model())
    a = cb.draw_counts(np.random.default_rng(3), p_exp, p_obs, 400, 300, 20000)
    b = cb.draw_counts(np.random.default_rng(3), p_exp, p_obs, 400, 300, 20000)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    k_exp, k_obs = a[0][0], a[1][0]
    assert np.all(k_obs.sum(1) == 300)
    np.testing.assert_allclose(k_exp.mean(0) / 200, p_exp[0], atol=0.003)
    np.testing.assert_allclose(k_obs.mean(0) / 300, p_obs[0], atol=0.003)


# ------------------------------------------------------------------------------------------------- variances and rules

@pytest.mark.parametrize("poc,endpoint", [("PNS", "lower"), ("PNS", "upper")])
def test_worst_case_variance_dominates_every_distribution_and_is_attained(poc, endpoint):
    rng = np.random.default_rng(7)
    pcs = cb.pieces(poc, endpoint)
    p_exp = rng.uniform(0, 1, size=(5000, 2))
    p_obs = rng.dirichlet(np.ones(4) * 0.5, size=5000)
    for ratio in (0.5, 1.0, 3.0):
        w = cb.worst_case_unit_variance(pcs, ratio)
        v = cb.delta_unit_variance(p_exp, p_obs, pcs, ratio)
        assert np.all(v <= w + 1e-12)
    # p_exp = 1/2 and the observational indicator split 50/50 attain the bound for every PNS piece
    v = cb.delta_unit_variance(np.array([0.5, 0.5]), np.array([0.25, 0.25, 0.25, 0.25]), pcs)
    np.testing.assert_allclose(v, cb.worst_case_unit_variance(pcs), atol=1e-12)


def test_ignoring_the_multinomial_covariance_overstates_the_worst_case():
    w = cb.worst_case_unit_variance(cb.pieces("PNS", "upper"))
    w_ind = cb.worst_case_unit_variance(cb.pieces("PNS", "upper"), covariance="ignored")
    np.testing.assert_allclose(w, [0.5, 0.5, 0.25, 1.25])
    np.testing.assert_allclose(w_ind, [0.5, 0.5, 0.5, 1.5])
    with pytest.raises(ValueError, match="affine"):
        cb.worst_case_unit_variance(cb.pieces("PN", "lower"))


def test_delta_variance_matches_an_explicit_covariance_matrix():
    rng = np.random.default_rng(11)
    r, s = cb.random_models(rng, 20)
    p_exp, p_obs, _ = cb.model_probabilities(r, s)
    for poc in cb.POCS:
        for ep in ("lower", "upper"):
            pcs = cb.pieces(poc, ep)
            v = cb.delta_unit_variance(p_exp, p_obs, pcs, obs_ratio=2.0)
            f = cb.piece_values(p_exp, p_obs, pcs)
            for i in range(20):
                z = np.concatenate([p_exp[i], p_obs[i]])
                cov = np.zeros((6, 6))  # n_exp * Cov(z_hat) with n_exp/2 per arm and n_obs = 2 n_exp
                cov[:2, :2] = np.diag(2 * p_exp[i] * (1 - p_exp[i]))
                cov[2:, 2:] = (np.diag(p_obs[i]) - np.outer(p_obs[i], p_obs[i])) / 2.0
                den = pcs.d @ z + pcs.e
                g = (pcs.a - f[i][:, None] * pcs.d) / den[:, None]
                np.testing.assert_allclose(v[i], np.einsum("jk,kl,jl->j", g, cov, g), rtol=1e-10, atol=1e-14)


def test_delta_variance_of_a_ratio_endpoint_matches_monte_carlo():
    # PN lower of the hard model is the ratio piece (0.571); at n = 20000 its estimate is near Gaussian
    p_exp, p_obs, _ = cb.model_probabilities(*cb.hard_pns_model())
    cov = cb.coverage_sim(np.random.default_rng(5), p_exp, p_obs, 20000, 20000, 20000, "PN", 0.05)
    v = cb.delta_unit_variance(p_exp, p_obs, cb.pieces("PN", "lower"))[0, 1]
    mc = cov.err_lower[0].var(ddof=1) * 20000
    # 20000 repetitions: the variance estimate has relative sd sqrt(2 / 20000) = 1 %
    assert mc / v == pytest.approx(1.0, abs=0.04)


def test_rule_values_by_hand_and_their_order():
    z4, z2 = stats.norm.ppf(1 - 0.05 / 4), stats.norm.ppf(1 - 0.05 / 2)
    new = cb.distribution_free_rule(0.05, 0.05)
    # worst piece: P(y_x) - P(y_x') + P(x,y') + P(x',y), n * Var <= 1/2 + 1/2 + 1/4
    assert new.n_exp == 2 * np.ceil(z4 ** 2 * 1.25 / 0.05 ** 2 / 2) == 2512 and new.n_obs == new.n_exp
    old = cb.additive_margin_rule(0.05, 0.05)
    # margins sqrt(1/2) per arm and 1/2 per observational cell, added: 2 sqrt(1/2) + 2 (1/2)
    assert old.n_exp == 2 * np.ceil((z2 * (2 * np.sqrt(0.5) + 1) / 0.05) ** 2 / 2) == 8956
    ignored = cb.distribution_free_rule(0.05, 0.05, covariance="ignored")
    assert new.n_exp < ignored.n_exp < old.n_exp
    assert cb.distribution_free_rule(0.05, 0.05, obs_ratio=2.0).n_obs == 2 * cb.distribution_free_rule(
        0.05, 0.05, obs_ratio=2.0).n_exp
    with pytest.raises(ValueError, match="affine"):
        cb.distribution_free_rule(0.05, 0.05, poc="PN")
    with pytest.raises(ValueError, match="margin"):
        cb.distribution_free_rule(0.0, 0.05)
    with pytest.raises(ValueError, match="alpha"):
        cb.additive_margin_rule(0.05, 1.5)


@pytest.mark.parametrize("rule", [cb.distribution_free_rule, cb.additive_margin_rule])
def test_required_n_scales_as_margin_to_the_minus_two(rule):
    m = np.geomspace(0.005, 0.1, 12)
    n = np.array([rule(mi, 0.05).n_exp for mi in m])
    slope = np.polyfit(np.log(m), np.log(n), 1)[0]
    assert slope == pytest.approx(-2.0, abs=0.01)


def test_pilot_rule_at_the_truth_and_its_floor():
    p_exp, p_obs, _ = cb.model_probabilities(*cb.hard_pns_model())
    # huge pilot: only the active pieces count, so the PNS plug-in needs z^2 * 1.24 / m^2
    z4 = stats.norm.ppf(1 - 0.05 / 4)
    n = cb.pilot_rule(p_exp, p_obs, 10 ** 9, 0.05, 0.05, "PNS")
    assert n.shape == (1,) and n[0] == 10 ** 9  # the floor: never below the pilot
    n = cb.pilot_rule(p_exp, p_obs, 200, 0.05, 0.05, "PNS")
    assert n[0] == 2 * np.ceil(z4 ** 2 * 1.24 / 0.05 ** 2 / 2)
    assert n[0] < cb.distribution_free_rule(0.05, 0.05).n_exp
    # PN: both endpoints are ratio pieces; the larger delta variance sets n
    v = max(np.nanmax(cb.delta_unit_variance(p_exp, p_obs, cb.pieces("PN", ep))) for ep in ("lower", "upper"))
    assert cb.pilot_rule(p_exp, p_obs, 200, 0.05, 0.05, "PN")[0] == 2 * np.ceil(z4 ** 2 * v / 0.05 ** 2 / 2)
    with pytest.raises(ValueError, match="n_pilot"):
        cb.pilot_rule(p_exp, p_obs, 1, 0.05, 0.05, "PN")


def test_distribution_free_rule_covers_the_hard_model_and_half_of_it_does_not():
    p_exp, p_obs, _ = cb.model_probabilities(*cb.hard_pns_model())
    n = cb.distribution_free_rule(0.05, 0.05).n_exp
    rng = np.random.default_rng(0)
    full = cb.coverage_sim(rng, p_exp, p_obs, n, n, 4000, "PNS", 0.05)
    half = cb.coverage_sim(rng, p_exp, p_obs, n // 2, n // 2, 4000, "PNS", 0.05)
    lo, _ = cb.coverage_interval(full.hits, 4000)
    _, hi = cb.coverage_interval(half.hits, 4000)
    assert lo[0] > 0.95 and hi[0] < 0.95


def test_coverage_interval_is_wilson():
    lo, hi = cb.coverage_interval(np.array([950, 1000]), 1000)
    ci = stats.binomtest(950, 1000).proportion_ci(0.95, method="wilson")
    assert (lo[0], hi[0]) == (ci.low, ci.high) and hi[1] == 1.0
