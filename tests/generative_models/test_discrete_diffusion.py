"""paperkit.generative_models.discrete_diffusion: the language, the exact forward marginals against
scipy.linalg.expm and closed forms, the reverse rates against their reference and the theorem's leading term."""
import math

import numpy as np
import pytest
from scipy import linalg

from paperkit.generative_models import discrete_diffusion as dd

SEEDS = [0, 1, 2]


def _law(L, N, forbidden, seed):
    S = dd.forbidden_pattern_support(L, N, forbidden)
    return S, dd.zipf_law(S, 1.0, np.random.default_rng(seed))


def test_support_counts_are_fibonacci_numbers():
    # binary strings of length L without "11": F(L + 2)
    fib = [1, 1]
    for _ in range(12):
        fib.append(fib[-1] + fib[-2])
    for L in range(1, 11):
        assert dd.forbidden_pattern_support(L, 2, "11").sum() == fib[L + 1]


def test_forbidden_pattern_over_three_letters_matches_brute_force():
    X = dd.all_strings(4, 3)
    S = dd.forbidden_pattern_support(4, 3, "21")
    brute = np.array(["21" not in "".join(map(str, x)) for x in X])
    np.testing.assert_array_equal(S, brute)
    with pytest.raises(ValueError, match="forbidden"):
        dd.forbidden_pattern_support(4, 2, "2")


def test_hamming_distance_to_support_brute_force():
    X = dd.all_strings(5, 2)
    S = dd.forbidden_pattern_support(5, 2, "11")
    d = dd.hamming_to_support(X, S)
    for i in range(len(X)):
        assert d[i] == min(int((X[i] != z).sum()) for z in X[S])
    assert (d[S] == 0).all() and (d[~S] > 0).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_zipf_law_is_normalised_on_support(seed):
    S, p0 = _law(6, 2, "11", seed)
    assert p0.sum() == pytest.approx(1.0)
    assert (p0[~S] == 0).all() and (p0[S] > 0).all()
    np.testing.assert_allclose(np.sort(p0[S])[::-1] / p0[S].max(), 1.0 / np.arange(1, S.sum() + 1))


def test_token_kernel_is_expm_of_the_generator():
    for kind in dd.KINDS:
        Q = dd.token_generator(3, kind)
        np.testing.assert_allclose(Q.sum(1), 0.0, atol=1e-15)
        for t in (1e-9, 1e-3, 0.7, 5.0):
            np.testing.assert_allclose(dd._token_kernel(Q, t), linalg.expm(t * Q), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind", dd.KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_forward_marginals_match_expm_of_the_full_generator(kind, seed):
    S, p0 = _law(4, 2, "11", seed)
    t = np.array([1e-7, 1e-3, 0.3, 2.0])
    fast = dd.forward_marginals(p0, t, 4, 2, kind)
    ref = dd.forward_marginals_ref(p0, t, 4, 2, kind)
    np.testing.assert_allclose(fast, ref, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(fast.sum(1), 1.0, rtol=1e-12)


def test_forward_marginals_three_letters():
    rng = np.random.default_rng(3)
    p0 = rng.random(27)
    p0 /= p0.sum()
    t = np.array([0.01, 0.5])
    for kind in dd.KINDS:
        np.testing.assert_allclose(dd.forward_marginals(p0, t, 3, 3, kind), dd.forward_marginals_ref(p0, t, 3, 3, kind),
                                   rtol=1e-9, atol=1e-15)


def test_absorbing_marginal_closed_form():
    # q_t(x) = (1 - e^-t)^m e^{-t (L - m)} * sum of p0 over the completions of x (m masked positions)
    S, p0 = _law(4, 2, "11", 0)
    t = 0.4
    q = dd.forward_marginals(p0, np.array([t]), 4, 2, "absorbing")[0]
    X3, X2 = dd.all_strings(4, 3), dd.all_strings(4, 2)
    for i, x in enumerate(X3):
        m = int((x == 2).sum())
        comp = ((X2 == x) | (x == 2)).all(1)
        expected = (-math.expm1(-t)) ** m * math.exp(-t * (4 - m)) * p0[comp].sum()
        assert q[i] == pytest.approx(expected, rel=1e-12, abs=1e-300)


def test_uniform_large_t_is_uniform():
    S, p0 = _law(4, 2, "11", 1)
    q = dd.forward_marginals(p0, np.array([60.0]), 4, 2, "uniform")[0]
    np.testing.assert_allclose(q, 1 / 16, rtol=1e-12)


def test_single_edit_counts():
    src, dst, pos = dd.single_edits(5, 2, "uniform")
    assert len(src) == 2 ** 5 * 5
    X = dd.all_strings(5, 2)
    assert ((X[src] != X[dst]).sum(1) == 1).all()
    sa, da, pa = dd.single_edits(3, 2, "absorbing")
    X3 = dd.all_strings(3, 3)
    assert len(sa) == 3 * 3 ** 2 * 2              # masked positions x other positions' states x tokens
    assert (X3[sa, pa] == 2).all() and (X3[da, pa] < 2).all()


@pytest.mark.parametrize("kind", dd.KINDS)
def test_edit_rates_match_reference(kind):
    S, p0 = _law(4, 2, "11", 2)
    t = np.array([1e-4, 0.1])
    q = dd.forward_marginals(p0, t, 4, 2, kind)
    src, dst, _ = dd.single_edits(4, 2, kind)
    np.testing.assert_allclose(dd.edit_rates(q, src, dst, 2, kind), dd.edit_rates_ref(q, src, dst, 2, kind),
                               rtol=1e-13, atol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_uniform_rates_follow_the_trichotomy_and_the_leading_coefficient(seed):
    L, N = 7, 2
    S, p0 = _law(L, N, "11", seed)
    X = dd.all_strings(L, N)
    d = dd.hamming_to_support(X, S)
    src, dst, _ = dd.single_edits(L, N, "uniform")
    t = np.geomspace(1e-8, 1e-6, 4)
    R = dd.edit_rates(dd.forward_marginals(p0, t, L, N, "uniform"), src, dst, N, "uniform")
    np.testing.assert_allclose(dd.loglog_slopes(t, R), d[dst] - d[src], atol=1e-4)
    lead = dd.uniform_leading_rates(t[0], dd.leading_coefficients(p0, X, S), d, src, dst, N)
    np.testing.assert_allclose(R[0], lead, rtol=1e-5)
    inside = S[src] & S[dst]
    np.testing.assert_allclose(R[0, inside], p0[dst[inside]] / p0[src[inside]] / N, rtol=1e-5)


def test_absorbing_support_leaving_rates_are_zero_and_others_scale_as_inverse_t():
    L, N = 6, 2
    S, p0 = _law(L, N, "11", 0)
    t = np.geomspace(1e-8, 1e-6, 3)
    q = dd.forward_marginals(p0, t, L, N, "absorbing")
    src, dst, _ = dd.single_edits(L, N, "absorbing")
    R = dd.edit_rates(q, src, dst, N, "absorbing")
    live = q[0, src] > 0
    leaving = live & (q[0, dst] == 0)
    assert leaving.sum() > 0 and (R[:, leaving] == 0).all()
    np.testing.assert_allclose(dd.loglog_slopes(t, R[:, live & ~leaving]), -1.0, atol=1e-6)


def test_full_support_law_has_no_trichotomy():
    L, N = 6, 2
    S, p0 = _law(L, N, "11", 0)
    p = np.where(S, p0, 1e-3)
    p /= p.sum()
    src, dst, _ = dd.single_edits(L, N, "uniform")
    t = np.geomspace(1e-8, 1e-6, 3)
    R = dd.edit_rates(dd.forward_marginals(p, t, L, N, "uniform"), src, dst, N, "uniform")
    np.testing.assert_allclose(dd.loglog_slopes(t, R), 0.0, atol=1e-3)


def test_inputs_are_checked():
    p0 = np.full(16, 1 / 16)
    with pytest.raises(ValueError, match="p0"):
        dd.forward_marginals(p0[:8], np.array([0.1]), 4, 2, "uniform")
    with pytest.raises(ValueError, match="t must"):
        dd.forward_marginals(p0, np.array([-0.1]), 4, 2, "uniform")
    with pytest.raises(ValueError, match="kind"):
        dd.forward_marginals(p0, np.array([0.1]), 4, 2, "gaussian")
    with pytest.raises(ValueError, match="L must"):
        dd.all_strings(0, 2)
    with pytest.raises(TypeError, match="src"):
        dd.edit_rates(np.ones((1, 4)), np.array([0.5]), np.array([1]), 2, "uniform")


def test_valid_completions_brute_force_and_zero_rates():
    L, N = 5, 2
    S, p0 = _law(L, N, "11", 1)
    comp = dd.has_valid_completion(L, N, S)
    Y = dd.all_strings(L, N + 1)
    valid = [tuple(r) for r in dd.all_strings(L, N)[S]]
    for y, c in zip(Y, comp):
        brute = any(all(yi == N or yi == vi for yi, vi in zip(y, v)) for v in valid)
        assert c == brute
    # the absorbing marginal vanishes exactly on the states without a valid completion
    q = dd.forward_marginals(p0, np.array([1e-6, 0.5]), L, N, "absorbing")
    np.testing.assert_array_equal(q[0] > 0, comp)
    np.testing.assert_array_equal(q[1] > 0, comp)
