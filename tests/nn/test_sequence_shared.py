"""The shared sequence-model pieces: tiny transformer, algorithmic tasks with exact answers, byte corpus."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperkit.data.algo_tasks import binary_add_task, copy_task, dyck1_labels, dyck1_task
from paperkit.data.byte_corpus import byte_corpus_stdlib, split
from paperkit.nn.tiny_transformer import TinyConfig, TinyTransformer, attention_probs, rope


def model(**kw):
    torch.manual_seed(0)
    return TinyTransformer(TinyConfig(**{"vocab": 11, "d_model": 16, "n_heads": 2, "n_layers": 2, **kw})).double()


@pytest.mark.parametrize("causal", [True, False])
def test_attention_matches_torch_sdpa(causal):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 7, 8, generator=g, dtype=torch.float64) for _ in range(3))
    p = attention_probs(q, k, causal)
    torch.testing.assert_close(p.sum(-1), torch.ones(2, 3, 7, dtype=torch.float64))
    torch.testing.assert_close(p @ v, F.scaled_dot_product_attention(q, k, v, is_causal=causal))


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "none"])
def test_causal_model_ignores_the_future(pos):
    m = model(pos=pos)
    x = torch.randint(0, 11, (3, 12), generator=torch.Generator().manual_seed(2))
    y = x.clone()
    y[:, 8:] = (y[:, 8:] + 1) % 11
    torch.testing.assert_close(m(x)[:, :8], m(y)[:, :8])
    assert not torch.allclose(m(x)[:, 8:], m(y)[:, 8:])


def test_no_positions_and_no_mask_is_permutation_equivariant():
    m = model(pos="none", causal=False)
    x = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(3))
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(m(x)[:, perm], m(x[:, perm]))
    assert not torch.allclose(model(pos="learned", causal=False)(x)[:, perm], model(pos="learned", causal=False)(x[:, perm]))


def test_rope_scores_depend_only_on_offset():
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64), torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64)
    qs, ks = rope(q.expand(1, 1, 20, 8).clone()), rope(k.expand(1, 1, 20, 8).clone())
    s = (qs @ ks.transpose(-1, -2))[0, 0]
    torch.testing.assert_close(s[5, 2], s[15, 12])
    torch.testing.assert_close(s[3, 3], (q @ k.transpose(-1, -2))[0, 0, 0, 0])


def test_loops_and_per_sample_loop_counts():
    m = model(n_loops=1)
    x = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(6))
    out, attn = m(x, n_loops=3, return_attn=True)
    assert len(attn) == 3 * 2 and attn[0].shape == (3, 2, 6, 6)
    per = m(x, n_loops=torch.tensor([1, 3, 2]))
    for i, n in enumerate([1, 3, 2]):
        torch.testing.assert_close(per[i], m(x[i:i + 1], n_loops=n)[0])
    with pytest.raises(ValueError, match="per-sample n_loops"):
        m(x, n_loops=torch.tensor([1, 2]))


def test_reinjection_and_per_loop_states_match_a_hand_unrolled_loop():
    m = model(n_loops=1, reinject=True, pos="none")
    x = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(8))
    logits, states = m(x, n_loops=3, return_states=True)
    e = m.embed(x)
    # h_1 = blocks(e), h_{i+1} = blocks(h_i + e): written out by hand for three loops.
    h = e
    for i in range(3):
        h = h + e if i > 0 else h
        for blk in m.blocks:
            h, _ = blk(h)
        torch.testing.assert_close(states[i], h)
    torch.testing.assert_close(logits, m.readout(h))
    # Stopping after two loops gives the second state's readout; without reinjection the loops differ.
    torch.testing.assert_close(m(x, n_loops=2), m.readout(states[1]))
    plain = model(n_loops=1, reinject=False, pos="none")
    assert not torch.allclose(plain(x, n_loops=3), logits)
    with pytest.raises(ValueError, match="n_loops must be an int"):
        m(x, n_loops=-1)


@pytest.mark.parametrize("kw, msg", [({"d_model": 15}, "divisible"), ({"pos": "alibi"}, "pos must be"),
                                     ({"n_layers": 0}, "n_layers must be >= 1")])
def test_bad_config_is_rejected(kw, msg):
    with pytest.raises(ValueError, match=msg):
        TinyConfig(vocab=5, n_heads=2, **kw)


def test_copy_and_addition_answers_are_exact():
    rng = np.random.default_rng(0)
    tok, tgt, mask = copy_task(rng, 50, 6, n_symbols=5)
    assert tok.shape == (50, 13) and (tok[:, 6] == 5).all() and mask.sum() == 50 * 6
    np.testing.assert_array_equal(tgt[mask].reshape(50, 6), tok[:, :6])
    tok, tgt, mask = binary_add_task(rng, 200, 7)
    a = (tok[:, :7] * 2 ** np.arange(7)).sum(1)
    b = (tok[:, 8:15] * 2 ** np.arange(7)).sum(1)
    s = (tgt[mask].reshape(200, 8) * 2 ** np.arange(8)).sum(1)
    np.testing.assert_array_equal(a + b, s)


def test_dyck_labels_against_a_plain_scan():
    tok, lab, mask = dyck1_task(np.random.default_rng(1), 300, 16)
    for row, labels in zip(tok, lab):
        depth, ok = 0, True
        for t, c in enumerate(row):
            depth += 1 if c == 0 else -1
            ok = ok and depth >= 0
            assert labels[t] == int(ok and depth == 0)
    assert 0.03 < lab.mean() < 0.6, "both labels occur"
    np.testing.assert_array_equal(dyck1_labels(np.array([[0, 1, 1, 0]])), [[0, 1, 0, 0]])


def test_byte_corpus_is_real_python_and_deterministic():
    data = byte_corpus_stdlib(200_000)
    assert data.dtype == np.uint8 and len(data) == 200_000
    np.testing.assert_array_equal(data, byte_corpus_stdlib(200_000))
    text = data.tobytes().decode("utf-8", errors="replace")
    assert "def " in text and "import " in text
    tr, va = split(data, 0.25)
    assert len(tr) == 150_000 and len(va) == 50_000
    with pytest.raises(ValueError, match="max_bytes"):
        byte_corpus_stdlib(0)


def test_seeded_models_come_from_the_generator_and_leave_the_global_state_alone():
    cfg = TinyConfig(vocab=7, d_model=8, n_heads=2, n_layers=1)
    before = torch.random.get_rng_state()
    a = TinyTransformer.seeded(cfg, torch.Generator().manual_seed(3))
    assert torch.equal(torch.random.get_rng_state(), before)
    b = TinyTransformer.seeded(cfg, torch.Generator().manual_seed(3))
    c = TinyTransformer.seeded(cfg, torch.Generator().manual_seed(4))
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.embed.weight, c.embed.weight)


@pytest.mark.parametrize("causal", [True, False])
def test_an_explicit_mask_replaces_the_causal_one(causal):
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    tril = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(attention_probs(q, k, causal, tril), attention_probs(q, k, True))
    # a block-structured mask (each query sees earlier even positions and itself), against torch SDPA
    allowed = (torch.arange(6)[None, :] % 2 == 0) & (torch.arange(6)[None, :] < torch.arange(6)[:, None])
    allowed |= torch.eye(6, dtype=torch.bool)
    torch.testing.assert_close(attention_probs(q, k, causal, allowed) @ v,
                               F.scaled_dot_product_attention(q, k, v, attn_mask=allowed))
    m = model(causal=causal)
    x = torch.randn(2, 6, 16, generator=g, dtype=torch.float64)
    torch.testing.assert_close(m.blocks[0](x, tril)[0], model(causal=True).blocks[0](x)[0])
    with pytest.raises(ValueError, match="allowed must be a \\(6, 6\\) bool mask"):
        attention_probs(q, k, causal, allowed.float())
