"""paperkit.privacy_statistics.conformal_risk: the fast threshold against the plain reference, exact values, and the risk guarantee
checked by simulation on synthetic exchangeable data (with a Clopper-Pearson interval from scipy)."""
import numpy as np
import pytest
from scipy.stats import binomtest

from paperkit.privacy_statistics.conformal_risk import (crc_threshold, crc_threshold_ref, evaluate_splits,
                                                        uncorrected_threshold, uncorrected_threshold_ref)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [1, 2, 9, 60])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("bound", [1.0, 2.5])
def test_threshold_matches_reference(seed, n, ties, bound):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 4, size=n).astype(float) if ties else rng.normal(size=n)
    l = bound * rng.random(n) * (rng.random(n) < 0.4)
    for alpha in (0.01, 0.1, 0.3, 0.7, 1.0):
        assert crc_threshold(s, l, alpha, bound) == crc_threshold_ref(s, l, alpha, bound)
    assert crc_threshold(s.astype(np.float32), l, 0.3, bound) == crc_threshold_ref(s.astype(np.float32), l, 0.3, bound)


def brute_force_plugin(s, l, alpha):
    """Independent brute force: R_n at -inf and at every score (where it changes), smallest t with R_n <= alpha."""
    grid = sorted(set(s.tolist()) | {-np.inf})
    ok = [t for t in grid if np.mean(l * (s > t)) <= alpha + 1e-15]
    return min(ok)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [1, 2, 9, 60])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("bound", [1.0, 2.5])
def test_uncorrected_threshold_matches_reference_and_brute_force(seed, n, ties, bound):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 4, size=n).astype(float) if ties else rng.normal(size=n)
    l = bound * rng.random(n) * (rng.random(n) < 0.4)
    for alpha in (0.01, 0.1, 0.3, 0.7, 1.0):
        t = uncorrected_threshold(s, l, alpha, bound)
        assert t == uncorrected_threshold_ref(s, l, alpha, bound) == brute_force_plugin(s, l, alpha)
        # never stricter than CRC (the correction only removes accepted points), and it never refuses everything
        assert t <= crc_threshold(s, l, alpha, bound) and t < np.inf


def test_uncorrected_hand_case():
    s = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    l = np.array([0, 1, 0, 0, 1, 0, 1, 0, 0], dtype=float)
    # n = 9: sum / 9 <= alpha.  alpha = 0.2 allows one loss (1/9) -> t = 0.5, as CRC; alpha = 0.15 still one
    assert uncorrected_threshold(s, l, 0.2) == 0.5 and uncorrected_threshold(s, l, 0.15) == 0.5
    # alpha = 0.1 < 1/9 allows none: t = 0.8; CRC's (1 + 1) / 10 = 0.2 > 0.15 allows none at 0.15 either
    assert uncorrected_threshold(s, l, 0.1) == 0.8 and crc_threshold(s, l, 0.15) == 0.8
    # alpha = 0.09: CRC refuses everything (B / (n + 1) = 0.1 > alpha), the plug-in still accepts the top score
    assert crc_threshold(s, l, 0.09) == np.inf and uncorrected_threshold(s, l, 0.09) == 0.8
    assert uncorrected_threshold(s, l, 1 / 3) == -np.inf


def test_hand_case():
    s = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    l = np.array([0, 1, 0, 0, 1, 0, 1, 0, 0], dtype=float)
    # n = 9: (sum + 1) / 10 <= alpha.  alpha = 0.2 allows one loss above t -> t = 0.5 (0.8 is the only loss above)
    assert crc_threshold(s, l, 0.2) == 0.5
    # alpha = 0.3 allows two: t = 0.3, everything above 0.3 carries losses 0.8 and 0.5
    assert crc_threshold(s, l, 0.3) == 0.3
    # alpha = 0.4 allows all three: accept every input
    assert crc_threshold(s, l, 0.4) == -np.inf
    # alpha = 0.1 allows none: t = 0.8 (only 0.9, loss-free, is accepted)
    assert crc_threshold(s, l, 0.1) == 0.8
    # alpha < B / (n + 1): no threshold qualifies, accept nothing
    assert crc_threshold(s, l, 0.09) == np.inf


def test_zero_losses_accept_everything_and_ties_are_never_split():
    assert crc_threshold(np.ones(5), np.zeros(5), 0.2) == -np.inf
    # three tied scores with one loss: t must be either below all three or at their value (accepting none of them)
    s, l = np.array([2.0, 1.0, 1.0, 1.0]), np.array([0.0, 1.0, 0.0, 0.0])
    assert crc_threshold(s, l, 0.2) == 1.0


@pytest.mark.parametrize("n,alpha", [(20, 0.1), (50, 0.1), (40, 0.05)])
def test_guarantee_is_exact_when_every_accept_is_a_loss(n, alpha):
    # with l = 1 everywhere CRC lets k = floor(alpha (n + 1) - 1) calibration scores above t, so a fresh
    # exchangeable point lands above t with probability exactly (k + 1) / (n + 1) <= alpha.  The plug-in rule
    # R_n(t) <= alpha (no "+B" correction) lets floor(alpha n) through: (floor(alpha n) + 1) / (n + 1) > alpha here.
    rng = np.random.default_rng(n)
    trials = 20_000
    crc_hits = plug_hits = 0
    allowed = int(np.floor(alpha * (n + 1) - 1 + 1e-12))
    for _ in range(trials):
        s = rng.normal(size=n + 1)
        t = crc_threshold(s[:n], np.ones(n), alpha)
        crc_hits += s[n] > t
        t_plug = np.sort(s[:n])[::-1][int(np.floor(alpha * n + 1e-12))]  # R_n(t) <= alpha, smallest such t
        plug_hits += s[n] > t_plug
    exact = (allowed + 1) / (n + 1)
    ci = binomtest(int(crc_hits), trials).proportion_ci(confidence_level=0.999, method="exact")
    assert exact <= alpha and ci.low <= exact <= ci.high
    plug = binomtest(int(plug_hits), trials).proportion_ci(confidence_level=0.999, method="exact")
    assert plug.low > alpha


@pytest.mark.parametrize("seed", [0, 1])
def test_false_approval_rate_is_controlled_on_synthetic_exchangeable_data(seed):
    # i.i.d. proxy scores; "unsafe" (loss 1) more likely at low score; one test point per trial -> Bernoulli trials
    rng = np.random.default_rng(seed)
    n, alpha, trials = 40, 0.1, 20_000
    s = rng.normal(size=(trials, n + 1))
    l = (rng.random((trials, n + 1)) < 1 / (1 + np.exp(3 * s))).astype(float)
    hits = sum(l[i, n] * (s[i, n] > crc_threshold(s[i, :n], l[i, :n], alpha)) for i in range(trials))
    ci = binomtest(int(hits), trials).proportion_ci(confidence_level=0.999, method="exact")
    assert ci.low <= alpha  # never significantly above alpha
    assert ci.high >= alpha - 2 / (n + 1)  # and not vacuous: CRC's lower bound for continuous scores
    # the uncalibrated proxy that accepts everything breaks the bound by far
    assert binomtest(int(l[:, n].sum()), trials).proportion_ci(confidence_level=0.999).low > alpha + 0.1


def test_evaluate_splits_on_a_fixed_pool():
    rng = np.random.default_rng(5)
    N, n_cal = 300, 150
    s = rng.normal(size=N)
    l = (rng.random(N) < 1 / (1 + np.exp(3 * s))).astype(float)
    c = rng.random(N)
    out = evaluate_splits(s, l, n_cal, 0.1, 4000, rng, columns={"c": c})
    assert set(out) == {"threshold", "accept", "risk", "first_loss", "c", "c|accept"}
    assert all(v.shape == (4000,) for v in out.values())
    # given the pool, calibration and test points are exchangeable under shuffling: mean test risk <= alpha
    se = out["risk"].std() / np.sqrt(4000)
    assert out["risk"].mean() <= 0.1 + 4 * se
    assert np.all(out["c|accept"] <= out["c"] + 1e-12)
    assert abs(out["c"].mean() - c.mean()) < 0.01
    # first_loss is one test point's loss: its mean estimates the same risk
    assert abs(out["first_loss"].mean() - out["risk"].mean()) < 4 * np.sqrt(0.1 / 4000)
    # split by split, the numbers are those of crc_threshold on that split's calibration part (tied scores too)
    s = np.floor(s * 3)
    replay = np.random.default_rng(7)
    again = evaluate_splits(s, l, n_cal, 0.1, 3, np.random.default_rng(7), columns={"c": c})
    for r in range(3):
        perm = replay.permutation(N)
        cal, test = perm[:n_cal], perm[n_cal:]
        t = crc_threshold(s[cal], l[cal], 0.1)
        acc = s[test] > t
        assert again["threshold"][r] == t and again["accept"][r] == acc.mean()
        assert again["risk"][r] == np.mean(l[test] * acc) and again["first_loss"][r] == l[test[0]] * acc[0]
        assert np.isclose(again["c|accept"][r], np.mean(c[test] * acc)) and np.isclose(again["c"][r], c[test].mean())


def test_evaluate_splits_runs_the_given_threshold():
    rng = np.random.default_rng(2)
    s = rng.normal(size=60)
    l = (rng.random(60) < 0.3).astype(float)
    out = evaluate_splits(s, l, 20, 0.1, 5, np.random.default_rng(1), threshold_fn=uncorrected_threshold)
    replay = np.random.default_rng(1)
    for r in range(5):
        perm = replay.permutation(60)
        assert out["threshold"][r] == uncorrected_threshold(s[perm[:20]], l[perm[:20]], 0.1)


@pytest.mark.parametrize("n,alpha", [(10, 0.1), (20, 0.1)])
def test_uncorrected_threshold_breaks_the_bound_at_small_n(n, alpha):
    # with a score that carries no information, the plug-in rule lets floor(alpha n) losses through, CRC fewer:
    # on a fixed pool under random splits the plug-in's risk exceeds alpha, CRC's does not
    rng = np.random.default_rng(n)
    s, l = rng.normal(size=400), (rng.random(400) < 0.5).astype(float)
    crc = evaluate_splits(s, l, n, alpha, 4000, rng)["risk"].mean()
    plug = evaluate_splits(s, l, n, alpha, 4000, rng, threshold_fn=uncorrected_threshold)["risk"].mean()
    assert crc <= alpha + 0.005 < alpha + 0.02 < plug


def test_bad_input_raises_naming_the_argument():
    s, l = np.zeros(5), np.zeros(5)
    for args, name in [((s, np.zeros(4), 0.1), "losses"), ((np.zeros((2, 2)), l, 0.1), "scores"),
                       ((s, l, 0.0), "alpha"), ((s, l + 2, 0.1), "losses"), ((s * np.nan, l, 0.1), "scores")]:
        with pytest.raises(ValueError, match=name):
            crc_threshold(*args)
        with pytest.raises(ValueError, match=name):
            crc_threshold_ref(*args)
    with pytest.raises(ValueError, match="bound"):
        crc_threshold(s, l, 0.1, bound=0)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="n_cal"):
        evaluate_splits(s, l, 5, 0.1, 10, rng)
    with pytest.raises(ValueError, match="n_splits"):
        evaluate_splits(s, l, 2, 0.1, 0, rng)
    with pytest.raises(ValueError, match="threshold_fn"):
        evaluate_splits(s, l, 2, 0.1, 10, rng, threshold_fn=0.5)
    for args, name in [((s, np.zeros(4), 0.1), "losses"), ((s, l, 0.0), "alpha")]:
        with pytest.raises(ValueError, match=name):
            uncorrected_threshold(*args)
    with pytest.raises(ValueError, match="column"):
        evaluate_splits(s, l, 2, 0.1, 10, rng, columns={"c": np.zeros(3)})
