"""attention_sinks kernels against their plain references and the closed forms they should meet."""
import math

import numpy as np
import pytest
import torch
from scipy.special import softmax

from paperkit.sequence_models.attention_sinks import (bigram_table, head_qkv, make_recall_model, mass_split, mass_split_ref,
                                      min_scale_bisect, min_scale_ref, recall_or_bigram_batch, sink_attention_probs,
                                      sink_attention_probs_ref, sink_report, smoothing_energy, smoothing_energy_ref,
                                      switch_scale_closed_form, train_recall_model)
from paperkit.nn.tiny_transformer import attention_probs

TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 5, 4), (2, 3, 7, 8)])
@pytest.mark.parametrize("with_sink", [False, True])
def test_sink_probs_match_ref(dtype, causal, shape, with_sink):
    g = torch.Generator().manual_seed(sum(shape))
    q = torch.randn(*shape, generator=g, dtype=dtype)
    k = torch.randn(*shape, generator=g, dtype=dtype)
    ks = torch.randn(shape[-1], generator=g, dtype=dtype) if with_sink else None
    P = sink_attention_probs(q, k, causal, ks)
    R = sink_attention_probs_ref(q, k, causal, ks)
    assert P.shape == (*shape[:3], shape[2] + with_sink)
    torch.testing.assert_close(P, R, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(P.sum(-1), torch.ones(shape[:3], dtype=dtype), atol=TOL[dtype], rtol=0)
    if causal and with_sink:  # query 0 sees only the sink and key 0
        assert torch.all(P[..., 0, 2:] == 0)


def test_sink_probs_bad_shapes():
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match="sink_key"):
        sink_attention_probs(q, q, False, torch.zeros(7))
    with pytest.raises(ValueError, match="k must"):
        sink_attention_probs(q, torch.zeros(1, 1, 4, 6), False)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(1, 3), (10, 4), (64, 32)])
def test_smoothing_energy(seed, shape):
    X = np.random.default_rng(seed).normal(size=shape) + 5.0
    assert smoothing_energy(X) == pytest.approx(smoothing_energy_ref(X), rel=1e-9)
    # constant rows carry no energy, and a uniform attention matrix destroys all of it
    assert smoothing_energy(np.ones(shape) * 3.0) == pytest.approx(0.0, abs=1e-6)
    assert smoothing_energy(np.full((shape[0], shape[0]), 1 / shape[0]) @ X) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="X"):
        smoothing_energy(np.zeros(3))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("p", [0.6, 0.9, 0.999])
def test_min_scale_matches_ref_and_is_minimal(seed, p):
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(40, 16)); E /= np.linalg.norm(E, axis=1, keepdims=True)
    S, t = E @ E.T, np.arange(40)
    b = min_scale_bisect(S, t, p)
    assert b == pytest.approx(min_scale_ref(S, t, p), rel=1e-9)
    rows = np.arange(40)
    assert softmax(b * S, 1)[rows, t].min() >= p - 1e-12
    assert softmax(0.999 * b * S, 1)[rows, t].min() < p


def test_min_scale_closed_form_and_infeasible():
    cos = np.array([1.0, 0.5, 0.1, 0.0, -0.3])
    cf = switch_scale_closed_form(100, 0.99, cos)
    for c, want in zip(cos, cf):
        S = np.zeros((1, 100)); S[0, 0] = c
        got = min_scale_bisect(S, np.array([0]), 0.99)
        assert (np.isinf(got) and np.isinf(want)) or got == pytest.approx(want, rel=1e-12)
    assert math.isinf(min_scale_ref(np.zeros((1, 5)), np.array([0]), 0.9))


def test_min_scale_bad_input():
    with pytest.raises(ValueError, match="target"):
        min_scale_bisect(np.zeros((3, 4)), np.array([0, 1]), 0.9)
    with pytest.raises(ValueError, match="p must"):
        min_scale_bisect(np.zeros((3, 4)), np.array([0, 1, 2]), 0.4)
    with pytest.raises(ValueError, match="S must"):
        min_scale_bisect(np.zeros(4), np.array([0]), 0.9)


# ----- trained-head pieces: task generator, q/k/v read-out, mass split -----


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("bos", [True, False])
def test_recall_batch_obeys_its_rules(seed, bos):
    rng = np.random.default_rng(seed)
    V, L = 6, 20
    table = bigram_table(rng, V)
    x = recall_or_bigram_batch(rng, table, 64, L, 0.3, bos).numpy()
    assert x.shape == (64, L + bos) and x.dtype == np.int64
    if bos:
        assert np.all(x[:, 0] == V + 1) and not np.any(x[:, 1:] == V + 1)
        x = x[:, 1:]
    assert np.all(x[:, 0] < V) and not np.any(x[:, :2] == V)  # no trigger before a context exists
    assert x.max() <= V
    for b in range(64):
        for t in range(1, L):
            if x[b, t - 1] == V:  # after a trigger: a token seen before the trigger
                assert x[b, t] in x[b, : t - 1]
    # after content tokens the successors follow the bigram table (loose frequency check on a large batch)
    big = recall_or_bigram_batch(np.random.default_rng(seed), np.eye(V)[np.roll(np.arange(V), 1)], 256, L, 0.2)
    big = big.numpy()[:, 1:]
    prev, nxt = big[:, :-1].ravel(), big[:, 1:].ravel()
    ok = (prev < V) & (nxt < V)
    assert np.all(nxt[ok] == (prev[ok] - 1) % V)  # the permutation table np.roll(eye) maps a to a - 1
    assert 0.15 < np.mean(nxt[prev < V] == V) < 0.25  # triggers appear at about p_trigger


def test_recall_batch_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="bigram"):
        recall_or_bigram_batch(rng, np.ones((3, 3)), 4, 8, 0.2)
    with pytest.raises(ValueError, match="p_trigger"):
        recall_or_bigram_batch(rng, np.eye(3), 4, 8, 1.0)
    with pytest.raises(ValueError, match="length"):
        recall_or_bigram_batch(rng, np.eye(3), 4, 2, 0.2)
    with pytest.raises(ValueError, match="n_content"):
        bigram_table(rng, 1)


def test_head_qkv_reproduces_the_models_attention():
    rng, g = np.random.default_rng(0), torch.Generator().manual_seed(0)
    model = make_recall_model(8, 16, 12, g)
    x = recall_or_bigram_batch(rng, bigram_table(rng, 8), 5, 12, 0.2)
    q, k, v = head_qkv(model, x)
    assert q.shape == k.shape == v.shape == (5, 1, 13, 16)
    with torch.no_grad():
        _, attn = model(x, return_attn=True)
    torch.testing.assert_close(attention_probs(q, k, causal=True), attn[0], atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="layer"):
        head_qkv(model, x, layer=1)
    # the same generator state gives the same model, and the global generator is left alone
    state = torch.random.get_rng_state()
    a = make_recall_model(8, 16, 12, torch.Generator().manual_seed(3))
    b = make_recall_model(8, 16, 12, torch.Generator().manual_seed(3))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, r) for p, r in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sink_col", [0, 2, None])
@pytest.mark.parametrize("seed", [0, 1])
def test_mass_split_matches_ref(dtype, sink_col, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(3, 1, 9, 4, generator=g, dtype=dtype)
    P = attention_probs(q, torch.randn(3, 1, 9, 4, generator=g, dtype=dtype), causal=True)[:, 0]
    mask = torch.rand(3, 9, generator=g) < 0.6
    got, want = mass_split(P, mask, sink_col), mass_split_ref(P, mask, sink_col)
    assert got["n"] == want["n"]
    for key in ("sink", "diag", "uniform"):
        assert got[key] == pytest.approx(want[key], rel=1e-5 if dtype == torch.float32 else 1e-12)


def test_mass_split_closed_forms_and_bad_input():
    L = 6
    uniform = torch.tril(torch.ones(L, L)) / torch.arange(1, L + 1)[:, None]  # causal uniform head
    sink = torch.zeros(L, L)
    sink[:, 0] = 1.0  # every query on key 0
    mask = torch.ones(1, L, dtype=torch.bool)
    r = mass_split(uniform[None], mask)
    assert r["sink"] == pytest.approx(r["uniform"]) and r["diag"] == pytest.approx(r["uniform"])
    assert r["uniform"] == pytest.approx(np.mean(1 / np.arange(2, L + 1)))  # query 0 (the sink itself) excluded
    r = mass_split(sink[None], mask)
    assert r["sink"] == 1.0 and r["diag"] == 0.0 and r["n"] == L - 1
    with pytest.raises(ValueError, match="query_mask"):
        mass_split(sink[None], torch.ones(1, L))
    with pytest.raises(ValueError, match="P must"):
        mass_split(torch.zeros(1, 3, 4), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="sink_col"):
        mass_split(sink[None], mask, sink_col=L)


def test_training_lowers_loss_and_report_is_consistent():
    rng, g = np.random.default_rng(0), torch.Generator().manual_seed(0)
    table = bigram_table(rng, 8)
    model = make_recall_model(8, 16, 12, g)
    loss = train_recall_model(model, table, 60, 16, 12, 0.2, 0.01, rng)
    assert loss.shape == (60,) and loss[-10:].mean() < loss[:10].mean()
    rep = sink_report(model, recall_or_bigram_batch(rng, table, 32, 12, 0.2), 8, bos=True)
    assert rep["mean_attn"].shape == (13, 13)
    np.testing.assert_allclose(rep["mean_attn"].sum(1), 1.0, atol=1e-5)
    assert 0 <= rep["sink"] <= 1 and 0 <= rep["diag"] <= 1 and -1 <= rep["cos_sink"] <= 1
    with pytest.raises(ValueError, match="steps"):
        train_recall_model(model, table, 0, 16, 12, 0.2, 0.01, rng)


def test_backcopy_recall_copies_the_token_before_the_trigger():
    from paperkit.sequence_models.attention_sinks import bigram_table, recall_or_bigram_batch
    rng = np.random.default_rng(0)
    table = bigram_table(rng, 8)
    x = recall_or_bigram_batch(rng, table, 64, 24, 0.3, bos=False, recall="previous").numpy()
    trig = 8
    b, t = np.nonzero(x[:, 1:-1] == trig)
    t = t + 1  # trigger positions >= 1
    assert len(t) > 0
    assert np.all(x[b, t + 1] == x[b, t - 1])
    with pytest.raises(ValueError):
        recall_or_bigram_batch(rng, table, 4, 8, 0.3, recall="random")


def test_context_sensitivity_zero_for_a_token_wise_head():
    import torch
    from paperkit.sequence_models.attention_sinks import (bigram_table, context_sensitivity, make_recall_model,
                                                          recall_or_bigram_batch)
    rng = np.random.default_rng(1)
    table = bigram_table(rng, 6)
    model = make_recall_model(6, 16, 12, torch.Generator().manual_seed(0))
    x0 = recall_or_bigram_batch(rng, table, 256, 12, 0.2, True)
    same = context_sensitivity(model, x0, x0.clone(), 6, True, 7)
    assert same["idle"] == pytest.approx(0.0, abs=1e-7)
    x1 = recall_or_bigram_batch(rng, table, 256, 12, 0.2, True)
    other = context_sensitivity(model, x0, x1, 6, True, 7)
    assert other["idle"] > 0.01
    with pytest.raises(ValueError):
        context_sensitivity(model, x0, x1, 6, True, 1)
