"""paperkit.generative_models.diffusion_training: the exact model laws (with the exact denoisers they must give
p0 or converge to it), the reverse-step matrix against its reference, the KL split and the crossing readout."""
import numpy as np
import pytest
import torch
from scipy import stats

from paperkit.generative_models import diffusion_training as dt
from paperkit.generative_models import discrete_diffusion as dd


def _law(L, seed):
    S = dd.forbidden_pattern_support(L, 2, "11")
    return S, dd.zipf_law(S, 1.0, np.random.default_rng(seed))


@pytest.mark.parametrize("seed", [0, 1])
def test_step_matrix_matches_reference_and_is_stochastic(seed):
    rng = np.random.default_rng(seed)
    L, N = 3, 2
    pr = rng.random((N ** L, L, N))
    pr /= pr.sum(2, keepdims=True)
    X = dd.all_strings(L, N)
    P = dt.uniform_step_matrix(pr, X, 0.2, 0.6, N)
    np.testing.assert_allclose(P, dt.uniform_step_matrix_ref(pr, X, 0.2, 0.6, N), rtol=1e-12)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-12)


def test_step_to_clean_with_a_certain_denoiser_returns_its_prediction():
    L, N = 3, 2
    X = dd.all_strings(L, N)
    target = np.eye(N)[X[::-1]]             # the denoiser says: x0 is the complement-order string
    P = dt.uniform_step_matrix(target, X, 0.3, 1.0, N)
    np.testing.assert_allclose(P, np.eye(len(X))[::-1], atol=1e-12)


def test_posterior_table_is_bayes():
    T = dt._posterior_table(0.3, 0.8, 2)
    # brute force: q(x_s = b | x_t = c, x0 = a) ∝ q(c | b) q(b | a)
    fwd = lambda b, c: 0.3 / 0.8 * (b == c) + (1 - 0.3 / 0.8) / 2  # noqa: E731
    marg = lambda a, b: 0.8 * (a == b) + 0.2 / 2  # noqa: E731
    for c in range(2):
        for a in range(2):
            w = np.array([fwd(b, c) * marg(a, b) for b in range(2)])
            np.testing.assert_allclose(T[c, a], w / w.sum())


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_masked_sampler_returns_p0(seed):
    S, p0 = _law(6, seed)
    orders = np.stack([np.random.default_rng(seed).permutation(6) for _ in range(3)])
    np.testing.assert_allclose(dt.exact_masked_law(p0, 6, 2, orders), p0, atol=1e-14)


def test_exact_uniform_sampler_converges_to_p0():
    S, p0 = _law(5, 0)
    errs = [dt.law_metrics(dt.uniform_model_law(dt.exact_x0_fn(p0, 5, 2), 5, 2, K), p0, S)["kl"][0]
            for K in (8, 32, 128)]
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-3


def test_exact_x0_posterior_is_bayes():
    S, p0 = _law(4, 0)
    f = dt.exact_x0_fn(p0, 4, 2)
    X = dd.all_strings(4, 2)
    out = f(X, 0.4)[0]
    for i in (0, 5, 11):
        lik = np.prod(np.where(X == X[i], 0.4 + 0.6 / 2, 0.6 / 2), axis=1) * p0
        lik /= lik.sum()
        for pos in range(4):
            assert out[i, pos, 1] == pytest.approx(lik[X[:, pos] == 1].sum())


def test_kl_splits_into_support_and_frequency_terms():
    S, p0 = _law(6, 0)
    rng = np.random.default_rng(0)
    laws = rng.dirichlet(np.ones(len(p0)), size=4)
    m = dt.law_metrics(laws, p0, S)
    kl = (p0[S] * np.log(p0[S] / laws[:, S])).sum(1)
    np.testing.assert_allclose(m["kl"], kl, rtol=1e-12)
    np.testing.assert_allclose(m["s"], laws[:, S].sum(1))
    for j in range(4):
        assert m["spearman"][j] == pytest.approx(stats.spearmanr(laws[j, S], p0[S]).statistic)
    assert dt.law_metrics(p0[None], p0, S)["kl"][0] == pytest.approx(0.0, abs=1e-14)


def test_first_crossing_settles_and_interpolates():
    steps = np.array([0, 1, 10, 100, 1000])
    v = np.array([[1.0, 1.0], [0.5, 0.05], [0.2, 0.5], [0.05, 0.05], [0.01, 0.05]])
    out = dt.first_crossing(steps, v, 0.1, False, censor=2000.0)
    # column 0: crosses between 10 (0.2) and 100 (0.05): w = 2/3 in log step
    assert out[0] == pytest.approx(np.exp(np.log(10) + 2 / 3 * np.log(10)))
    assert out[1] == pytest.approx(np.exp(np.log(10) + (0.1 - 0.5) / (0.05 - 0.5) * np.log(10)))
    never = dt.first_crossing(steps, np.full((5, 1), 1.0), 0.1, False, censor=2000.0)
    assert never[0] == 2000.0


def test_order_lags_sign():
    steps = np.array([0, 10, 100, 1000])
    m = {"support_nats": np.array([[1.5], [0.05], [0.01], [0.01]]),
         "freq_nats": np.array([[0.7], [0.6], [0.3], [0.01]])}
    lag = dt.order_lags(steps, m, (0.5, 0.1), censor=2000.0)
    assert (lag > 0).all()


def test_training_reduces_kl_and_seeds_are_independent():
    S, p0 = _law(5, 0)
    orders = np.stack([np.random.default_rng(0).permutation(5)])
    fn = lambda m: dt.masked_model_law(m, 5, 2, orders)  # noqa: E731
    _, laws = dt.train_denoisers("absorbing", p0, 5, 2, [3, 4], 60, [0, 60], fn, batch=64, hidden=16)
    m = dt.law_metrics(laws, p0, S)
    assert (m["kl"][-1] < m["kl"][0]).all()
    _, alone = dt.train_denoisers("absorbing", p0, 5, 2, [4], 60, [0, 60], fn, batch=64, hidden=16)
    np.testing.assert_allclose(alone[:, 0], laws[:, 1], rtol=1e-5, atol=1e-7)


def test_softmax_learner_starts_uniform():
    S, p0 = _law(4, 0)
    laws = dt.train_softmax(p0, [0], 5, [0, 5], batch=32)
    np.testing.assert_allclose(laws[0, 0], 1 / 16)
    assert dt.law_metrics(laws[-1], p0, S)["kl"][0] < dt.law_metrics(laws[0], p0, S)["kl"][0]


def test_batched_mlp_shapes():
    gens = [torch.Generator().manual_seed(s) for s in range(2)]
    m = dt.BatchedMLP(4, 2, 8, gens)
    tok = torch.tensor(dd.all_strings(4, 2))
    out = m(dt.encode(tok, torch.zeros(16), 2).expand(2, -1, -1))
    assert out.shape == (2, 16, 4, 2)


def test_step_matrix_checks_inputs():
    X = dd.all_strings(2, 2)
    with pytest.raises(ValueError, match="a_t"):
        dt.uniform_step_matrix(np.full((4, 2, 2), 0.5), X, 0.6, 0.2, 2)
    with pytest.raises(ValueError, match="x0_probs"):
        dt.uniform_step_matrix(np.full((3, 2, 2), 0.5), X, 0.2, 0.6, 2)


def test_one_law_per_model_is_used_by_each_model():
    S = dd.forbidden_pattern_support(4, 2, "11")
    p0s = np.stack([dd.zipf_law(S, 1.0, np.random.default_rng(s)) for s in (0, 1)])
    laws = dt.train_softmax(p0s, [0, 1], 400, [400], batch=256, lr=0.05)[0]
    m = dt.law_metrics(laws, p0s, S)
    swapped = dt.law_metrics(laws, p0s[::-1], S)
    assert (m["freq_nats"] < swapped["freq_nats"]).all()
    with pytest.raises(ValueError, match="p0"):
        dt.train_softmax(p0s, [0, 1, 2], 2, [2])


def test_order_lags_censoring_gives_no_order():
    steps = np.array([0, 10, 100, 1000])
    m = {"support_nats": np.array([[1.5, 1.5], [0.05, 1.2], [0.01, 1.0], [0.01, 0.9]]),
         "freq_nats": np.array([[0.7, 0.7], [0.6, 0.6], [0.3, 0.3], [0.2, 0.01]])}
    lag = dt.order_lags(steps, m, (0.5, 0.1), censor=2000.0)
    assert lag[0, 0] > 0 and np.isnan(lag[1, 0])        # frequency never reaches 0.1: censored, not a lag
    assert lag[0, 1] < 0 or np.isnan(lag[0, 1])
    assert np.isnan(lag[1, 1])                           # support never reaches 0.1
    np.testing.assert_allclose(dt.observed_lag(np.array([0.0, 5.0]), np.array([0.0, 2000.0]), 1000), [0.0, np.nan])


def test_cross_readout_and_state_order_margin():
    steps = np.array([0, 10, 100, 1000])
    m = {"support_nats": np.array([[1.5, 1.5, 0.0], [0.1, 1.2, 0.0], [0.01, 0.5, 0.0], [0.01, 0.2, 0.0]]),
         "freq_nats": np.array([[0.7, 0.7, 0.74], [0.6, 0.3, 0.74], [0.3, 0.1, 0.74], [0.05, 0.01, 0.74]])}
    xr = dt.cross_readout(steps, m, 0.1, censor=2000.0)
    assert xr["freq_at_support"][0] == pytest.approx(0.6)          # support reaches 0.1 exactly at step 10
    assert xr["support_at_freq"][0] < 0.1                            # frequencies reached after the support
    assert np.isnan(xr["freq_at_support"][1]) and xr["support_at_freq"][1] == pytest.approx(0.5)
    assert xr["freq_at_support"][2] == pytest.approx(0.74) and np.isnan(xr["support_at_freq"][2])
    mg = dt.state_order_margin(xr, 0.1)
    assert mg[0] > 0 and mg[1] == 0.0 and mg[2] == 0.0               # censored -> 0, the support-only law fails


def test_trivial_learners():
    L, N = 5, 2
    S = dd.forbidden_pattern_support(L, N, "11")
    p0s = np.stack([dd.zipf_law(S, 1.0, np.random.default_rng(s)) for s in (0, 1)])
    ck = np.array([0, 5, 50])
    tl = dt.trivial_learners(p0s, S, L, N, ck)
    for law in tl.values():
        assert law.shape == (3, 2, 2 ** L)
        np.testing.assert_allclose(law.sum(-1), 1.0)
    np.testing.assert_allclose(tl["support_only"][0, 0][S], 1 / S.sum())
    X = dd.all_strings(L, N)
    for j in range(2):                                   # token marginals equal those of p0, tokens independent
        tok = tl["token_freq"][0, j]
        for i in range(L):
            assert tok[X[:, i] == 1].sum() == pytest.approx(p0s[j][X[:, i] == 1].sum())
        a, b = X[:, 0] == 1, X[:, 1] == 1
        assert tok[a & b].sum() == pytest.approx(tok[a].sum() * tok[b].sum())
    np.testing.assert_allclose(tl["mixture"][0], 1 / 2 ** L)
    np.testing.assert_allclose(tl["mixture"][-1], p0s)
    m = dt.law_metrics(tl["mixture"], p0s, S)
    lag = dt.order_lags(ck, m, (0.5,), censor=100.0)
    assert (lag <= 0).all()                              # no hierarchy: frequencies reach any level no later
