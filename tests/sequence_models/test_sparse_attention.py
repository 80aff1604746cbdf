"""Dense attention (torch SDPA) against its plain reference and closed forms; attention over a key subset; the
error bound of a threshold index; the budget baselines; the synthetic decoding stream and the decoding passes."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from paperkit.sequence_models import halfspace_index as hsi
from paperkit.sequence_models import sparse_attention as sa

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


@pytest.fixture(autouse=True)
def one_blas_thread():
    with threadpool_limits(1, user_api="blas"):
        yield


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n,d,dv", [(1, 4, 4), (37, 8, 5), (1000, 64, 64)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_matches_reference(seed, n, d, dv, dtype):
    rng = np.random.default_rng(seed)
    K, V = rng.standard_normal((n, d)).astype(dtype), rng.standard_normal((n, dv)).astype(dtype)
    q = 3 * rng.standard_normal(d)
    np.testing.assert_allclose(sa.dense_attention(q, K, V), sa.dense_attention_ref(q, K, V), **TOL[dtype])


def test_attention_closed_forms():
    rng = np.random.default_rng(0)
    V = rng.standard_normal((50, 6))
    K = np.ones((50, 8))  # equal scores: the plain mean of the values
    for f in (sa.dense_attention, sa.dense_attention_ref):
        np.testing.assert_allclose(f(rng.standard_normal(8), K, V), V.mean(axis=0), rtol=1e-10)
    K = np.zeros((50, 8))
    K[7, 0] = 1.0
    q = np.zeros(8)
    q[0] = 2.0 * np.sqrt(8)  # logit of key 7 is 2, the rest 0: weights e^2 / (e^2 + 49)
    w = np.full(50, 1.0)
    w[7] = np.exp(2.0)
    np.testing.assert_allclose(sa.dense_attention_ref(q, K, V), w @ V / w.sum(), rtol=1e-12)


def test_subset_attention():
    rng = np.random.default_rng(1)
    K, V, q = rng.standard_normal((200, 16)), rng.standard_normal((200, 4)), rng.standard_normal(16)
    np.testing.assert_allclose(sa.subset_attention(q, K, V, np.arange(200)), sa.dense_attention_ref(q, K, V),
                               rtol=1e-12)
    np.testing.assert_allclose(sa.subset_attention(q, K, V, [5]), V[5], rtol=1e-12)
    assert np.array_equal(sa.subset_attention(q, K, V, []), np.zeros(4))
    ids = np.array([3, 50, 199])
    np.testing.assert_allclose(sa.subset_attention(q, K, V, ids), sa.dense_attention_ref(q, K[ids], V[ids]),
                               rtol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_threshold_error_bound_and_identity(seed):
    """o_S - o = m (o_S - o_rest) exactly, so ||o_S - o|| <= 2 max||v|| m, for every threshold."""
    rng = np.random.default_rng(seed)
    n, d = 500, 16
    K = rng.standard_normal((n, d)) * rng.uniform(0.5, 3)
    V = rng.standard_normal((n, 8)) * rng.uniform(0.1, 5)
    q = rng.standard_normal(d) * 3
    s = K @ q
    w = np.exp((s - s.max()) / np.sqrt(d))
    w /= w.sum()
    dense = sa.dense_attention_ref(q, K, V)
    for tau in list(np.quantile(s, [0.0, 0.5, 0.9, 0.99])) + [s.max() + 1]:
        S = np.flatnonzero(s >= tau)
        rest = np.flatnonzero(s < tau)
        m = w[rest].sum()
        err = np.linalg.norm(sa.subset_attention(q, K, V, S) - dense)
        assert err <= 2 * np.linalg.norm(V, axis=1).max() * m + 1e-12
        if S.size and rest.size:
            gap = sa.subset_attention(q, K, V, S) - sa.subset_attention(q, K, V, rest)
            np.testing.assert_allclose(err, m * np.linalg.norm(gap), rtol=1e-9, atol=1e-14)


def test_streaming_ids():
    ids = sa.streaming_ids(100, 20)
    assert np.array_equal(ids, np.r_[0:4, 84:100])
    assert np.array_equal(sa.streaming_ids(10, 20), np.arange(10))
    with pytest.raises(ValueError, match="budget"):
        sa.streaming_ids(100, 4)


def test_h2o_keeps_budget_recent_and_heavy_and_never_readmits():
    rng = np.random.default_rng(2)
    n0, d, budget, recent = 300, 8, 40, 10
    K, V = rng.standard_normal((n0 + 50, d)), rng.standard_normal((n0 + 50, 3))
    acc = rng.random(n0)
    acc[123] = 100.0  # a heavy hitter from the prompt
    cache = sa.H2OCache(budget, recent)
    cache.prefill(acc)
    assert cache.ids.size == budget and 123 in cache.ids
    assert set(range(n0 - recent, n0)) <= set(cache.ids)
    seen_evicted = set(range(n0)) - set(cache.ids)
    for t in range(50):
        m = n0 + t + 1
        ids, _ = cache.step(rng.standard_normal(d), K, V, m)
        assert ids.size <= budget + 1 and cache.ids.size <= budget
        assert set(range(m - recent, m)) <= set(cache.ids) and 123 in ids
        assert not (set(ids) & seen_evicted)
        seen_evicted |= set(ids) - set(cache.ids)
    with pytest.raises(ValueError, match="recent"):
        sa.H2OCache(10, 10)


def test_h2o_output_is_attention_over_its_keys():
    rng = np.random.default_rng(3)
    K, V = rng.standard_normal((120, 8)), rng.standard_normal((120, 3))
    cache = sa.H2OCache(30, 10)
    cache.prefill(rng.random(100))
    q = rng.standard_normal(8)
    ids, out = cache.step(q, K, V, 101)
    np.testing.assert_allclose(out, sa.subset_attention(q, K, V, ids), rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_quest_page_bound_and_selection(seed):
    rng = np.random.default_rng(seed)
    n, d, page = 1000, 16, 16
    K, q = rng.standard_normal((n, d)), rng.standard_normal(d)
    lo, hi = sa.page_boxes(K, page)
    assert lo.shape == (63, d)
    ub = np.maximum(lo * q, hi * q).sum(axis=1)
    true_max = np.array([(K[p * page:(p + 1) * page] @ q).max() for p in range(63)])
    assert np.all(true_max <= ub + 1e-12)  # the page bound is an upper bound
    ids = sa.quest_ids(q, lo, hi, n, 160, page)
    pages = np.unique(ids // page)
    assert pages.size == 10 and set(pages) == set(np.argsort(-ub)[:10])
    with pytest.raises(ValueError, match="budget"):
        sa.quest_ids(q, lo, hi, n, 8, page)


def test_stream_shapes_and_critical_keys():
    rng = np.random.default_rng(4)
    st = sa.synthetic_kv_stream(2048, 32, 60, rng, n_critical=6)
    assert st.K.shape == (2108, 32) and st.V.shape == (2108, 32) and st.Q.shape == (60, 32)
    assert st.critical_on.shape == (60, 6) and st.critical_on.sum() == 6 * 8
    logit = (st.Q @ st.K[st.critical].astype(np.float64).T) / np.sqrt(32)
    # asked for: near critical_logit (25, more when two asked-for keys overlap); at quiet steps: near 0
    quiet = ~st.critical_on.any(axis=1)
    assert quiet.any() and np.all(logit[st.critical_on] > 15) and np.all(np.abs(logit[quiet]) < 5)
    again = sa.synthetic_kv_stream(2048, 32, 60, np.random.default_rng(4), n_critical=6)
    assert np.array_equal(st.K, again.K) and np.array_equal(st.Q, again.Q)
    with pytest.raises(ValueError, match="steps"):
        sa.synthetic_kv_stream(100, 8, 0, rng)


def test_decoding_passes():
    rng = np.random.default_rng(5)
    n, d, steps = 4096, 32, 60
    st = sa.synthetic_kv_stream(n, d, steps, rng, n_critical=8)
    tau = 12.0 * np.sqrt(d)
    dense = sa.dense_pass(st, tau)
    t = 17
    np.testing.assert_allclose(dense.out[t], sa.dense_attention_ref(st.Q[t], st.K[: n + t + 1], st.V[: n + t + 1]),
                               rtol=1e-10)
    run = sa.decode_with_index(st, tau, hsi.build_index(st.K[:n], 32, rng), dense)
    assert run["false_neg"].sum() == 0 and run["extra"].sum() == 0
    assert np.all(run["err"] <= run["bound"] + 1e-12)
    assert np.all(run["scanned"] <= n + np.arange(1, steps + 1))
    budget = int(run["scanned"].mean()) + 32
    for m in sa.BUDGET_METHODS:
        r = sa.decode_with_budget(st, m, budget, dense)
        assert r["err"].shape == (steps,) and np.all((0 <= r["recall"]) & (r["recall"] <= 1))
    # H2O evicts the silent critical keys early, so it misses them when they are asked for
    assert sa.decode_with_budget(st, "H2O", budget, dense)["dropped"].sum() > 0
    with pytest.raises(ValueError, match="method"):
        sa.decode_with_budget(st, "top-k", budget, dense)
    with pytest.raises(ValueError, match="index"):
        sa.decode_with_index(st, tau, hsi.build_index(st.K[:100], 4, rng), dense)


@pytest.mark.parametrize("args,match", [
    ((np.zeros(3), np.zeros((5, 4)), np.zeros((5, 2))), "q"),
    ((np.zeros(4), np.zeros((5, 4)), np.zeros((4, 2))), "V"),
    ((np.zeros(4), np.zeros((0, 4)), np.zeros((0, 2))), "K")])
def test_attention_rejects_bad_shapes(args, match):
    for f in (sa.dense_attention, sa.dense_attention_ref):
        with pytest.raises(ValueError, match=match):
            f(*args)
    with pytest.raises(ValueError, match=match):
        sa.subset_attention(*args, [0])
    with pytest.raises(ValueError, match="ids"):
        sa.subset_attention(np.zeros(4), np.zeros((5, 4)), np.zeros((5, 2)), [7])


def test_warmup_reads_change_only_the_prompt_time_queries():
    """Reading the critical keys at prompt time draws nothing extra: K, V, Q and the schedule are unchanged."""
    plain = sa.synthetic_kv_stream(2048, 32, 60, np.random.default_rng(6), n_critical=6)
    read = sa.synthetic_kv_stream(2048, 32, 60, np.random.default_rng(6), n_critical=6, warmup_reads=10.0)
    for name in ("K", "V", "Q", "critical", "critical_on"):
        assert np.array_equal(getattr(plain, name), getattr(read, name)), name
    assert not np.array_equal(plain.warmup_Q, read.warmup_Q)
    # each critical key is read by at least one prompt-time query, at a logit near critical_logit (25)
    logit = read.warmup_Q @ read.K[read.critical].astype(np.float64).T / np.sqrt(32)
    assert np.all(logit.max(axis=0) > 15)
    assert np.all(np.abs(plain.warmup_Q @ plain.K[plain.critical].astype(np.float64).T / np.sqrt(32)) < 5)
    # so H2O's prefill keeps them as heavy hitters, which it never does without the reads
    for st, kept in ((read, True), (plain, False)):
        cache = sa.H2OCache(200, 100)
        cache.prefill(sa.h2o_prefill_scores(st.warmup_Q, st.K[:2048]))
        assert np.all(np.isin(st.critical, cache.ids)) == kept
    with pytest.raises(ValueError, match="warmup_reads"):
        sa.synthetic_kv_stream(2048, 32, 60, np.random.default_rng(6), warmup_reads=-1.0)


def test_missed_counts_and_matched_quest_budget():
    rng = np.random.default_rng(7)
    n, d, steps = 4096, 32, 40
    st = sa.synthetic_kv_stream(n, d, steps, rng, n_critical=4)
    tau = 12.0 * np.sqrt(d)
    dense = sa.dense_pass(st, tau)
    above = np.array([a.size for a in dense.above])
    for m in sa.BUDGET_METHODS:
        r = sa.decode_with_budget(st, m, 256, dense)
        np.testing.assert_allclose(r["missed"], np.round((1 - r["recall"]) * above), atol=1e-9)
    # keys plus boxes of the matched Quest budget stay within the index's reads, one page short of exceeding them
    cache = n + np.arange(1, steps + 1)
    b = sa.matched_quest_budget(600.0, cache.mean())
    assert b % 16 == 0 and b + np.ceil(cache.mean() / 16) <= 600 < b + 16 + np.ceil(cache.mean() / 16)
    r = sa.decode_with_budget(st, "Quest", b, dense)
    assert r["touched"].mean() <= 600 + 1
    assert sa.matched_quest_budget(10.0, cache.mean()) == 16  # at least one page
    with pytest.raises(ValueError, match="page"):
        sa.matched_quest_budget(600.0, cache.mean(), page=0)


def test_seed_metrics_small_run():
    out = sa.seed_metrics(2048, 32, 50, 12.0 * np.sqrt(32), np.random.default_rng(8), 32, n_critical=4)
    assert out["false_neg"] == 0 and 0 < out["touched"] <= 1.1 and out["budget"] >= 32
    assert out["err_index"] >= 0 and out["quest_missed"] >= 0 and out["err_h2o_read"] >= 0
    again = sa.seed_metrics(2048, 32, 50, 12.0 * np.sqrt(32), np.random.default_rng(8), 32, n_critical=4)
    assert out == again
