"""paperkit.privacy_statistics.multiple_testing: BH against scipy, e-BH on hand-worked cases, the Numba conformal kernels against their
references, the validity of conformal p-values and e-values by simulation (with intervals), and bad input."""
import numpy as np
import pytest
from scipy import stats

from paperkit.privacy_statistics.multiple_testing import (block_fdp, block_trace_matrix, bh, certra, conformal_evalues,
                                       conformal_evalues_ref, conformal_pvalues, conformal_pvalues_ref, ebh,
                                       fair_level, mean_ci, pooled_conformal_bh, proportion_ci,
                                       simulate_block_fdr)


@pytest.mark.parametrize("m", [1, 2, 7, 100, 2000])
@pytest.mark.parametrize("alpha", [0.01, 0.1, 0.3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bh_matches_scipy(m, alpha, seed):
    rng = np.random.default_rng(seed)
    # a mixture of nulls and small p-values, so that BH rejects something in most cases
    p = np.where(rng.random(m) < 0.3, rng.random(m) * 1e-3, rng.random(m))
    want = stats.false_discovery_control(p, method="bh") <= alpha
    np.testing.assert_array_equal(bh(p, alpha), want)


def test_bh_is_step_up_and_batched():
    # hand case, m = 4, alpha = 0.2: thresholds 0.05, 0.1, 0.15, 0.2; p_(3) = 0.12 <= 0.15 lets p_(2) = 0.11 in too
    p = np.array([0.04, 0.11, 0.12, 0.9])
    np.testing.assert_array_equal(bh(p, 0.2), [True, True, True, False])
    np.testing.assert_array_equal(bh(np.array([0.06, 0.9]), 0.1), [False, False])
    rng = np.random.default_rng(3)
    P = rng.random((4, 5, 30)) ** 3
    got = bh(P, 0.1)
    assert got.shape == P.shape
    for idx in np.ndindex(4, 5):
        np.testing.assert_array_equal(got[idx], stats.false_discovery_control(P[idx]) <= 0.1)


@pytest.mark.parametrize("e,alpha,want", [
    # m = 4, alpha = 0.5: need e_(k) >= 8 / k; e_(1) = 10 >= 8 and e_(2) = 4 >= 4, e_(3) = 1 < 8/3
    ([10.0, 4.0, 1.0, 0.0], 0.5, [True, True, False, False]),
    # equal e-values of 3 >= 8/4 = 2 at k = 4: all four go
    ([3.0, 3.0, 3.0, 3.0], 0.5, [True, True, True, True]),
    # one large e-value is not enough on its own: 7 < 8
    ([7.0, 0.0, 0.0, 0.0], 0.5, [False, False, False, False]),
    # step-up: e_(3) = 2.7 >= 8/3 rescues e = 2.8 and 2.7, although 2.8 < 8/2
    ([2.8, 0.5, 2.7, 9.0], 0.5, [True, False, True, True]),
    ([20.0, 1.0], 0.1, [True, False]),  # m / (alpha k) = 20 at k = 1
])
def test_ebh_hand_cases(e, alpha, want):
    np.testing.assert_array_equal(ebh(np.array(e), alpha), want)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ebh_equals_bh_on_inverse_evalues(seed):
    rng = np.random.default_rng(seed)
    e = np.where(rng.random((6, 50)) < 0.2, rng.exponential(60, (6, 50)), rng.exponential(1, (6, 50)))
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(ebh(e, 0.1), bh(1 / e, 0.1))


SHAPES = [((1,), 1, 1), ((3,), 10, 7), ((2, 5), 100, 60), ((40,), 19, 200), ((), 50, 13)]


@pytest.mark.parametrize("lead,n,m", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("ties", [False, True])
def test_conformal_pvalues_match_reference(lead, n, m, seed, ties):
    rng = np.random.default_rng(seed)
    cal, test = rng.normal(size=(*lead, n)), rng.normal(size=(*lead, m))
    if ties:  # integer scores: many calibration/test ties, which count as ">="
        cal, test = np.round(cal * 2), np.round(test * 2)
    got = conformal_pvalues(cal, test)
    assert got.shape == (*lead, m)
    np.testing.assert_array_equal(got, conformal_pvalues_ref(cal, test))
    # float32 input gives the same counts
    np.testing.assert_array_equal(conformal_pvalues(cal.astype(np.float32), test.astype(np.float32)),
                                  conformal_pvalues_ref(cal.astype(np.float32), test.astype(np.float32)))


def test_conformal_pvalues_hand_case():
    # n = 3: p = (1 + #{C >= S}) / 4; the tie S = 3 counts C = 3
    np.testing.assert_array_equal(conformal_pvalues([1.0, 2.0, 3.0], [2.5, 0.0, 3.0, 9.0]), [0.5, 1.0, 0.5, 0.25])


def test_conformal_pvalues_are_super_uniform_by_simulation():
    """P(p <= t) = floor(t (n + 1)) / (n + 1) <= t when calibration and test are exchangeable; the Clopper-Pearson
    interval over 40,000 draws must contain that value, and must exclude t when the calibration is shifted down."""
    rng = np.random.default_rng(0)
    reps, n = 40_000, 19
    ts = np.array([0.05, 0.1, 0.25, 0.5])
    exact = np.floor(ts * (n + 1)) / (n + 1)
    p = conformal_pvalues(rng.normal(size=(reps, n)), rng.normal(size=(reps, 1)))[:, 0]
    lo, hi = proportion_ci((p[:, None] <= ts).sum(0), reps, level=0.999)
    assert np.all(lo <= exact) and np.all(exact <= hi) and np.all(lo <= ts)
    assert np.all(hi - lo < 0.02)  # narrow enough to see a violation of 0.02
    # broken exchangeability: calibration nulls drawn lower than the test nulls; p-values are then too small
    p_bad = conformal_pvalues(rng.normal(-0.5, 1, size=(reps, n)), rng.normal(size=(reps, 1)))[:, 0]
    lo_bad, _ = proportion_ci((p_bad[:, None] <= ts).sum(0), reps, level=0.999)
    assert np.all(lo_bad[:3] > ts[:3])


@pytest.mark.parametrize("lead,n,m", SHAPES)
@pytest.mark.parametrize("alpha", [0.05, 0.2, 0.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_conformal_evalues_match_reference(lead, n, m, alpha, seed):
    rng = np.random.default_rng(seed)
    link = rng.random((*lead, m)) < 0.4
    cal, test = rng.normal(size=(*lead, n)), rng.normal(size=(*lead, m)) + 3 * link
    got = conformal_evalues(cal, test, alpha)
    assert got.shape == (*lead, m)
    np.testing.assert_allclose(got, conformal_evalues_ref(cal, test, alpha), rtol=1e-15, atol=0)
    rounded = (np.round(cal), np.round(test))  # ties everywhere
    np.testing.assert_allclose(conformal_evalues(*rounded, alpha), conformal_evalues_ref(*rounded, alpha), rtol=1e-15)


def test_conformal_evalues_hand_case():
    # n = 3, m = 2: FDP_hat(t) = 2 (1 + #{C >= t}) / (4 #{S >= t}); at t = 1.5 it is 2 * 2 / (4 * 2) = 0.5
    cal, test = np.array([0.0, 1.0, 2.0]), np.array([5.0, 1.5])
    np.testing.assert_array_equal(conformal_evalues(cal, test, 0.5), [2.0, 2.0])  # T = 1.5, e = 4 / (1 + 1)
    np.testing.assert_array_equal(ebh(conformal_evalues(cal, test, 0.5), 0.5), [True, True])
    # at alpha = 0.25 no threshold qualifies (FDP_hat(5) = 0.5, FDP_hat(1.5) = 0.5): all e-values are 0
    np.testing.assert_array_equal(conformal_evalues(cal, test, 0.25), [0.0, 0.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n,m,alpha", [(100, 60, 0.1), (19, 40, 0.2), (300, 10, 0.05), (50, 200, 0.1)])
def test_certra_equals_per_block_bh_on_conformal_pvalues(seed, n, m, alpha):
    rng = np.random.default_rng(seed)
    link = rng.random((200, m)) < 0.3
    cal, test = rng.normal(size=(200, n)), rng.normal(size=(200, m)) + 3 * link
    e, rej = certra(cal, test, alpha)
    np.testing.assert_array_equal(rej, bh(conformal_pvalues(cal, test), alpha))
    assert rej.any()  # the identity is not only about empty sets


def test_null_evalues_sum_to_at_most_m_by_simulation():
    """e-BH controls FDR because sum over nulls of E[e_j] <= m; check it with a t interval, and that shifting the
    calibration down (broken exchangeability) drives the sum clearly above m."""
    rng = np.random.default_rng(1)
    reps, n, m = 20_000, 50, 30
    link = rng.random((reps, m)) < 0.3
    test = rng.normal(size=(reps, m)) + 3 * link
    ratio = np.where(link, 0, conformal_evalues(rng.normal(size=(reps, n)), test, 0.2)).sum(1) / m
    mean, lo, hi = mean_ci(ratio, level=0.999)
    assert lo <= 1 and hi - lo < 0.1
    bad = np.where(link, 0, conformal_evalues(rng.normal(-1, 1, size=(reps, n)), test, 0.2)).sum(1) / m
    assert mean_ci(bad, level=0.999)[1] > 1.2


def test_certra_controls_fdr_under_dependence_inside_blocks():
    """A factor shared by all scores of a block (calibration and test alike) keeps them exchangeable but makes them
    strongly dependent; the per-block FDR stays <= alpha (upper 99.9% bound), while pooled BH across blocks with
    different null laws does not."""
    rng = np.random.default_rng(2)
    reps, K, n, m, alpha = 400, 10, 60, 40, 0.2
    # module 0 has few links and a null law shifted up by 2
    link = rng.random((reps, K, m)) < np.where(np.arange(K) == 0, 0.05, 0.3)[:, None]
    z = rng.normal(size=(reps, K, 1)) + np.where(np.arange(K) == 0, 2.0, 0.0)[:, None]
    cal = z + rng.normal(size=(reps, K, n))
    test = z + rng.normal(size=(reps, K, m)) + 3.5 * link
    _, rej = certra(cal, test, alpha)
    fdr_hi = mean_ci(block_fdp(rej, ~link), level=0.999, n_intervals=K)[2]
    assert fdr_hi.max() <= alpha + 0.02
    pooled_fdr = block_fdp(pooled_conformal_bh(cal, test, alpha), ~link).mean(0)
    assert pooled_fdr[0] > alpha + 0.2


def test_pooled_bh_pools_calibration_and_candidates():
    rng = np.random.default_rng(4)
    cal, test = rng.normal(size=(3, 4, 20)), rng.normal(size=(3, 4, 15)) + 2 * (rng.random((3, 4, 15)) < 0.3)
    got = pooled_conformal_bh(cal, test, 0.2)
    for r in range(3):
        p = conformal_pvalues_ref(cal[r].ravel(), test[r].ravel())
        np.testing.assert_array_equal(got[r], (stats.false_discovery_control(p) <= 0.2).reshape(4, 15))


def test_block_fdp_and_fair_level():
    rej = np.array([[True, True, False, False], [False, False, False, False], [True, True, True, True]])
    null = np.array([[True, False, True, False], [True, True, True, True], [True, True, True, False]])
    np.testing.assert_array_equal(block_fdp(rej, null), [0.5, 0.0, 0.75])
    # L = 3 levels, R = 2 repeats, K = 2 blocks: per-block FDRs are (0, 0.05), (0.1, 0.3), (0.05, 0.1)
    level_fdp = np.array([[[0, 0], [0, 0.1]], [[0.2, 0.5], [0, 0.1]], [[0.1, 0.2], [0, 0]]])
    assert fair_level(level_fdp, [0.01, 0.1, 0.05], 0.1) == 0.05
    assert fair_level(level_fdp, [0.01, 0.1, 0.05], 0.04) == 0.0


def test_simulate_block_fdr_matches_direct_computation():
    """The chunked driver gives the same numbers as running the methods on the whole array at once."""
    kw = dict(K=6, n_cal=40, m_test=25, hard=1, null_shift=1.5, signal=4.0, link_rate=0.3, hard_link_rate=0.05)
    out = simulate_block_fdr(np.random.default_rng(8), 50, alpha=0.1, marginal_levels=[0.1, 0.01],
                             max_elems=6 * 65 * 7, **kw)  # chunks of 7 repeats
    cal, test, link, mu = block_trace_matrix(np.random.default_rng(8), 7, **kw)
    np.testing.assert_array_equal(out["fdp"]["CERTRA"][:7], block_fdp(certra(cal, test, 0.1)[1], ~link))
    np.testing.assert_array_equal(out["fdp"]["marginal"][:7], block_fdp(pooled_conformal_bh(cal, test, 0.1), ~link))
    np.testing.assert_array_equal(out["level_fdp"][0], out["fdp"]["marginal"])
    assert out["fdp"]["oracle"].shape == (50, 6) and out["level_recall"].shape == (2, 50)
    assert out["certra_equals_bh"].all() and not out["marginal_equals_bh"].all()
    # a lower level rejects less: recall cannot rise
    assert np.all(out["level_recall"][1] <= out["level_recall"][0])


def test_block_trace_matrix_layout():
    rng = np.random.default_rng(6)
    cal, test, link, mu = block_trace_matrix(rng, 400, 5, 30, 50, 1, 2.0, 4.0, 0.3, 0.05)
    assert cal.shape == (400, 5, 30) and test.shape == link.shape == (400, 5, 50)
    np.testing.assert_array_equal(mu, [0, 0, 0, 0, 2.0])
    assert abs(cal[:, 4].mean() - 2.0) < 0.05 and abs(cal[:, :4].mean()) < 0.05
    assert abs(link[:, :4].mean() - 0.3) < 0.02 and abs(link[:, 4].mean() - 0.05) < 0.01


def test_confidence_intervals_match_scipy():
    x = np.random.default_rng(7).random((50, 3))
    mean, lo, hi = mean_ci(x, level=0.9)
    for j in range(3):
        want = stats.t.interval(0.9, 49, loc=x[:, j].mean(), scale=stats.sem(x[:, j]))
        np.testing.assert_allclose([lo[j], hi[j]], want, rtol=1e-12)
    assert np.all(mean_ci(x, 0.9, n_intervals=3)[1] < lo)  # Bonferroni widens
    for k, n in [(0, 10), (3, 10), (10, 10), (17, 400)]:
        ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
        np.testing.assert_allclose(proportion_ci(k, n), [ci.low, ci.high], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("call,name", [
    (lambda: bh([0.1, 0.2], 0.0), "alpha"),
    (lambda: bh([0.1, 0.2], 1.0), "alpha"),
    (lambda: bh([0.1, 0.2], True), "alpha"),
    (lambda: bh([], 0.1), "p"),
    (lambda: bh([0.1, np.nan], 0.1), "p"),
    (lambda: ebh([1.0, -1.0], 0.1), "e"),
    (lambda: conformal_pvalues(np.zeros((2, 5)), np.zeros((3, 4))), "cal and test"),
    (lambda: conformal_pvalues(np.zeros(0), np.zeros(4)), "cal"),
    (lambda: conformal_evalues(np.zeros(5), np.zeros(4), 2.0), "alpha"),
    (lambda: pooled_conformal_bh(np.zeros(5), np.zeros(4), 0.1), "block axis"),
    (lambda: block_fdp(np.zeros(3, bool), np.zeros(4, bool)), "reject and is_null"),
    (lambda: block_trace_matrix(np.random.default_rng(0), -1, 3, 5, 5, 1, 1.0, 1.0, 0.3, 0.1), "reps"),
    (lambda: block_trace_matrix(np.random.default_rng(0), 2, 3, 5, 5, 4, 1.0, 1.0, 0.3, 0.1), "hard"),
    (lambda: block_trace_matrix(np.random.default_rng(0), 2, 3, 5, 5, 1, 1.0, 1.0, 1.3, 0.1), "link_rate"),
    (lambda: mean_ci(np.zeros(1)), "x"),
    (lambda: fair_level(np.zeros((2, 3, 4)), [0.1], 0.1), "level_fdp"),
    (lambda: proportion_ci(5, 3), "k <= n"),
])
def test_bad_input_raises_value_error_naming_it(call, name):
    with pytest.raises(ValueError, match=name):
        call()
