"""Exact privacy loss of binomial and bit-built discrete Laplace counting noise (paperkit.privacy_statistics.dp_mechanisms).

Fast functions against their plain references, and against scipy.stats (binom, geom, dlaplace) as trusted oracles.
"""
import math

import numpy as np
import pytest
import scipy.stats

from paperkit.privacy_statistics import dp_mechanisms as dm


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("m", [1, 2, 7, 40])
def test_hockey_stick_matches_reference(seed, m):
    rng = np.random.default_rng(seed)
    pmf = rng.dirichlet(np.ones(m))
    for eps in (0.01, 0.5, 2.0, 10.0):
        assert dm.hockey_stick_delta(pmf, eps) == pytest.approx(dm.hockey_stick_delta_ref(pmf, eps), rel=1e-12,
                                                                abs=1e-15)


def test_hockey_stick_known_values():
    # a point mass: the two outputs never overlap, delta = 1 at every eps
    assert dm.hockey_stick_delta([1.0], 3.0) == 1.0
    # Bernoulli(1/2) noise: outputs {c, c+1} vs {c+1, c+2}: delta = 1/2 (the non-shared point)
    assert dm.hockey_stick_delta([0.5, 0.5], 0.1) == pytest.approx(0.5)
    # ideal discrete Laplace (scipy.stats.dlaplace) is pure eps-DP: delta(eps) = 0 up to round-off and the cut tail
    pmf = scipy.stats.dlaplace.pmf(np.arange(-400, 401), 0.7)
    assert dm.hockey_stick_delta(pmf, 0.7) < 1e-12
    assert dm.hockey_stick_delta(pmf, 0.6) > 0.03


def test_binomial_pmf_and_minimal_coins():
    pmf = dm.binomial_noise_pmf(10)
    assert pmf.shape == (11,) and pmf.sum() == pytest.approx(1.0)
    assert dm.pmf_std(pmf) == pytest.approx(math.sqrt(10) / 2)
    for eps, delta in [(1.0, 1e-6), (0.5, 1e-5), (2.0, 1e-3)]:
        n = dm.min_binomial_bits(eps, delta)
        assert n % 2 == 0
        assert dm.hockey_stick_delta_ref(dm.binomial_noise_pmf(n), eps) <= delta
        assert dm.hockey_stick_delta_ref(dm.binomial_noise_pmf(n - 2), eps) > delta
    assert dm.min_binomial_bits(0.5, 1e-6) > 3 * dm.min_binomial_bits(1.0, 1e-6)  # ~ 1/eps^2


@pytest.mark.parametrize("thresholds, precision", [((3,), 2), ((5, 2), 3), ((11, 6, 1), 4), ((0, 16, 7), 4)])
def test_vlm_pmf_matches_bit_enumeration(thresholds, precision):
    fast, ref = dm.vlm_noise_pmf(thresholds, precision), dm.vlm_noise_pmf_ref(thresholds, precision)
    assert fast.shape == ref.shape == (2 ** (len(thresholds) + 1) - 1,)
    np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=1e-15)
    assert fast.sum() == pytest.approx(1.0) and np.allclose(fast, fast[::-1])


def test_bits_of_a_geometric_recover_scipy_geom_and_dlaplace():
    # 40 bits of precision round p_4 ~ 2.8e-6 by ~2e-7 relative and p_5 ~ 8e-12 coarsely; values below 2^5 see
    # p_5, p_6 only through factors 1 - O(1e-11), so they match to ~1e-7
    eps, B, L = 0.8, 7, 40
    g = dm.geometric_from_bits_pmf(dm.bit_thresholds(eps, B, L), L)
    a = math.exp(-eps)
    np.testing.assert_allclose(g[:32], scipy.stats.geom.pmf(np.arange(32) + 1, 1 - a), rtol=1e-6)
    z = dm.vlm_noise_pmf(dm.bit_thresholds(eps, B, L), L)
    centre = (z.size - 1) // 2
    np.testing.assert_allclose(z[centre - 25:centre + 26], scipy.stats.dlaplace.pmf(np.arange(-25, 26), eps),
                               rtol=1e-6)
    assert dm.pmf_std(z) == pytest.approx(math.sqrt(2 * a) / (1 - a), rel=1e-6)


@pytest.mark.parametrize("eps", [0.1, 0.5, 2.0])
def test_vlm_design_meets_its_exact_target(eps):
    d = dm.design_vlm(eps, 1e-6)
    pmf = dm.vlm_noise_pmf(d.thresholds, d.precision)
    assert d.delta_exact == dm.hockey_stick_delta(pmf, eps) <= 1e-6
    assert d.eps0 <= eps and len(d.thresholds) == d.n_bits
    assert d.committed_bits == 2 * d.n_bits * (2 * d.precision + 1) and d.coins == 2 * d.n_bits * d.precision
    # one fewer bit of precision at the same design breaks the target (the search did not stop early)
    if d.precision > 1:
        coarse = dm.vlm_noise_pmf(dm.bit_thresholds(d.eps0, d.n_bits, d.precision - 1), d.precision - 1)
        assert dm.hockey_stick_delta(coarse, eps) > 1e-6
    assert dm.epsilon_for_delta(pmf, 1e-6) <= eps


def test_vbm_coins_grow_much_faster_than_vlm_bits_as_eps_shrinks():
    nb = [dm.min_binomial_bits(e, 1e-6) for e in (0.1, 0.2)]
    vl = [dm.design_vlm(e, 1e-6).committed_bits for e in (0.1, 0.2)]
    assert math.log(nb[0] / nb[1]) / math.log(2) > 1.7  # nearly quadratic in 1/eps
    assert math.log(vl[0] / vl[1]) / math.log(2) < 0.5


def test_epsilon_for_delta_inverts_the_profile():
    pmf = dm.binomial_noise_pmf(200)
    e = dm.epsilon_for_delta(pmf, 1e-4)
    assert dm.hockey_stick_delta(pmf, e) <= 1e-4 < dm.hockey_stick_delta(pmf, e * (1 - 1e-6))
    assert dm.epsilon_for_delta([1.0], 0.5) == math.inf


@pytest.mark.parametrize("seed", [0, 1])
def test_samplers_follow_the_exact_pmfs(seed):
    rng = np.random.default_rng(seed)
    d = dm.design_vlm(0.5, 1e-6)
    pmf = dm.vlm_noise_pmf(d.thresholds, d.precision)
    s = dm.sample_vlm_noise(d.thresholds, d.precision, 200_000, rng)
    assert s.dtype == np.int64 and dm.total_variation(s, pmf) < 0.01
    assert dm.total_variation(s, dm.vlm_noise_pmf(dm.bit_thresholds(0.75, d.n_bits, 12), 12)) > 0.05
    b = dm.sample_binomial_noise(100, 200_000, rng)
    assert dm.total_variation(b, dm.binomial_noise_pmf(100)) < 0.01 and abs(b.mean()) < 0.05
    lap = dm.sample_laplace_noise(0.5, 200_000, rng)
    assert np.sqrt(np.mean(lap**2)) == pytest.approx(math.sqrt(2) / 0.5, rel=0.02)


def test_chi_square_gof_matches_scipy_and_separates_right_from_wrong_laws():
    rng = np.random.default_rng(3)
    # no merging needed: the statistic is scipy's
    pmf3 = np.array([0.25, 0.5, 0.25])
    s3 = rng.choice([-1, 0, 1], p=pmf3, size=1000)
    ref = scipy.stats.chisquare(np.bincount(s3 + 1, minlength=3), pmf3 * 1000)
    assert dm.chi_square_log10_p(s3, pmf3) == pytest.approx(-math.log10(ref.pvalue), rel=1e-9)
    # merging: tails expecting < 5 draws join their neighbours, off-support draws land in the edge bins
    pmf5 = np.array([0.001, 0.299, 0.4, 0.299, 0.001])
    s5 = np.array([-1] * 30 + [0] * 40 + [1] * 29 + [7])
    ref = scipy.stats.chisquare([30, 40, 30], [30, 40, 30])
    assert dm.chi_square_log10_p(s5, pmf5) == pytest.approx(-math.log10(ref.pvalue), abs=1e-12)
    pmf = dm.binomial_noise_pmf(80)
    assert 0 <= dm.chi_square_log10_p(dm.sample_binomial_noise(80, 50_000, rng), pmf) < 4
    # draws from a law four coins wider, and duplicated noise, are rejected by far
    assert dm.chi_square_log10_p(dm.sample_binomial_noise(84, 50_000, rng), pmf) > 6
    huge = dm.chi_square_log10_p(dm.sample_binomial_noise(80, 50_000, rng) * 2, pmf)
    assert 1e3 < huge < math.inf
    # the asymptotic tail used past scipy's underflow agrees with scipy where both are finite
    stat, dof = 1000.0, 30
    approx = -stat / 2 + (dof / 2 - 1) * math.log(stat / 2) - math.lgamma(dof / 2)
    assert approx == pytest.approx(scipy.stats.chi2.logsf(stat, dof), rel=1e-3)
    with pytest.raises(ValueError, match="too few samples"):
        dm.chi_square_log10_p(np.array([0]), pmf)


def test_total_variation_counts_mass_off_the_support():
    assert dm.total_variation(np.array([0, 0, 1, -1]), [0.25, 0.5, 0.25]) == pytest.approx(0.0)
    assert dm.total_variation(np.array([5, 0]), [0.0, 1.0, 0.0]) == pytest.approx(0.5)


def test_bad_arguments_raise_value_errors_naming_them():
    rng = np.random.default_rng(0)
    for call, word in [
        (lambda: dm.hockey_stick_delta([[0.5, 0.5]], 1.0), "pmf"),
        (lambda: dm.hockey_stick_delta([0.5, -0.1], 1.0), "pmf"),
        (lambda: dm.hockey_stick_delta([1.0], 0.0), "eps"),
        (lambda: dm.binomial_noise_pmf(7), "n_bits"),
        (lambda: dm.binomial_noise_pmf(-2), "n_bits"),
        (lambda: dm.min_binomial_bits(1.0, 1.5), "delta"),
        (lambda: dm.geometric_bit_probs(1.0, 0), "n_bits"),
        (lambda: dm.bit_thresholds(1.0, 3, 0), "precision"),
        (lambda: dm.vlm_noise_pmf((9,), 3), "thresholds"),
        (lambda: dm.vlm_noise_pmf((), 3), "thresholds"),
        (lambda: dm.sample_vlm_noise((1,), 2, -1, rng), "size"),
        (lambda: dm.sample_binomial_noise(4, -1, rng), "size"),
        (lambda: dm.sample_laplace_noise(-1.0, 3, rng), "eps"),
        (lambda: dm.total_variation(np.array([]), [1.0]), "samples"),
        (lambda: dm.chi_square_log10_p(np.array([]), [1.0]), "samples"),
    ]:
        with pytest.raises(ValueError, match=word):
            call()
