"""The gauged tiny transformer, the tools moved between charts and AdamW state transport."""
import numpy as np
import pytest
import torch

from paperkit.network_structure import residual_gauge as rg
from paperkit.network_structure import residual_gauge_study as st


def _trained(norm, steps=30, seed=0):
    rng, gen = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    bigram = rng.dirichlet(np.full(16, 0.3), size=16)
    model = st.make_model(norm, 16, 8, 2, 2, 12, gen)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    st.train(model, opt, [st.latent_class_batch(rng, bigram, 8, 12, 0.5)[0] for _ in range(steps)])
    return model, rng, bigram


@pytest.mark.parametrize("seed", [0, 1])
def test_rms_model_is_invariant_under_signed_permutations_and_states_move_by_T(seed):
    model, rng, bigram = _trained("rms", seed=seed)
    perm, signs = rg.random_signed_perm(rng, 8, 0.5)
    T = st.signed_perm_tensor(perm, signs)
    moved = st.gauge_model(model, T, perm)
    x = st.latent_class_batch(rng, bigram, 4, 12, 0.5)[0]
    assert st.model_deviation(model, moved, x) < 1e-5
    with torch.no_grad():
        sa, sb = st.residual_states(model, x)[0], st.residual_states(moved, x)[0]
    torch.testing.assert_close(sb, sa @ T.T, atol=1e-5, rtol=1e-5)


def test_layernorm_model_only_admits_a_global_sign():
    model, rng, bigram = _trained("ln")
    perm, signs = rg.random_signed_perm(rng, 8, 0.5)
    x = st.latent_class_batch(rng, bigram, 4, 12, 0.5)[0]
    flip = st.gauge_model(model, st.signed_perm_tensor(perm, -np.ones(8)), perm)
    mixed = st.gauge_model(model, st.signed_perm_tensor(perm, signs), perm)
    assert st.model_deviation(model, flip, x) < 1e-5
    assert st.model_deviation(model, mixed, x) > 1e-2


def test_gauge_model_matches_a_float64_dense_reparameterisation_of_one_weight():
    model, rng, _ = _trained("rms", steps=2)
    perm, signs = rg.random_signed_perm(rng, 8, 0.5)
    T = rg.signed_perm_matrix(perm, signs)
    moved = st.gauge_model(model, torch.as_tensor(T, dtype=torch.float32), perm)
    W = model.blocks[0].attn.qkv.weight.detach().double().numpy()
    np.testing.assert_allclose(moved.blocks[0].attn.qkv.weight.detach().numpy(), W @ T.T, atol=1e-6)
    Wo = model.blocks[1].mlp[2].weight.detach().double().numpy()
    np.testing.assert_allclose(moved.blocks[1].mlp[2].weight.detach().numpy(), T @ Wo, atol=1e-6)
    np.testing.assert_array_equal(moved.ln_f.weight.detach().numpy(), model.ln_f.weight.detach().numpy()[perm])


def test_residual_axis_refuses_an_unknown_parameter():
    with pytest.raises(ValueError, match="name"):
        st.residual_axis("blocks.0.mystery.weight")


def test_recovered_gauge_transfers_tools_exactly_without_drift():
    model, rng, bigram = _trained("rms", steps=40)
    gen = torch.Generator().manual_seed(0)
    x, c = st.latent_class_batch(rng, bigram, 64, 12, 0.5)
    tools = st.source_tools(model, x, c, 1, 0.3, 20, gen)
    perm, signs = rg.random_signed_perm(rng, 8, 0.5)
    B = st.gauge_model(model, st.signed_perm_tensor(perm, signs), perm)
    rec = st.recover_gauges(model, B, x)
    assert rg.match_accuracy(*rec["Bd"], perm, signs) == (1.0, 1.0)
    own = st.transfer_scores(model, tools, torch.eye(8), x, c)
    moved = st.transfer_scores(B, tools, st.signed_perm_tensor(*rec["Bd"]), x, c)
    assert moved["steer"] == pytest.approx(own["steer"], rel=1e-4)
    assert moved["probe_acc"] == own["probe_acc"]
    assert moved["sae_nmse"] == pytest.approx(own["sae_nmse"], rel=1e-3)


def test_ceiling_sweep_raw_accuracy_is_the_plus_share():
    out = st.ceiling_sweep(np.random.default_rng(0), [12], [0.25, 0.5], 1000, 0.2, 2)
    np.testing.assert_allclose(out["raw"], out["p_true"])
    assert np.all(out["abs_sign"] == 1.0)


def test_signed_adam_transport_follows_the_original_trajectory_and_permutation_only_does_not():
    model, rng, bigram = _trained("rms", steps=5)
    perm, signs = rg.random_signed_perm(rng, 8, 0.5)
    batches = [st.latent_class_batch(rng, bigram, 8, 12, 0.5)[0] for _ in range(8)]
    out = st.adam_transport(model, perm, signs, batches[:3], batches[3:], 1e-2, 0.01)
    assert out["start"] < 1e-12
    assert out["signed"].max() < 1e-10
    assert out["perm"][-1] > 1e-3


def test_adam_transport_with_all_plus_signs_ties():
    model, rng, bigram = _trained("rms", steps=5)
    perm, _ = rg.random_signed_perm(rng, 8, 1.0)
    batches = [st.latent_class_batch(rng, bigram, 8, 12, 0.5)[0] for _ in range(5)]
    out = st.adam_transport(model, perm, np.ones(8), batches[:2], batches[2:], 1e-2, 0.0)
    np.testing.assert_allclose(out["signed"], out["perm"], atol=1e-12)


def test_float32_rounded_signed_transport_stays_near_the_original_trajectory():
    model, rng, bigram = _trained("rms", steps=5)
    perm, signs = rg.random_signed_perm(rng, 8, 0.5)
    batches = [st.latent_class_batch(rng, bigram, 8, 12, 0.5)[0] for _ in range(8)]
    out = st.adam_transport(model, perm, signs, batches[:3], batches[3:], 1e-2, 0.01)
    assert 0 < out["rounded"].max() < 1e-3 * out["perm"][-1]
    assert set(out) == {"start", "signed", "perm", "rounded", "reset"}
