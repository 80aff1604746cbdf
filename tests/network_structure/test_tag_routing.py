"""paperkit.network_structure.tag_routing and tag_routing_study: SpecDrop weights, the merge, the load-balancing loss
and the pruning sensitivity against their loop references; the denominator identity; the oracles (p_i = 0 is hard
per-tag routing, K = 1 is the dense network, equal weights are the mean); equal parameter counts; tags; training."""
import numpy as np
import pytest
import torch

from paperkit.network_structure import tag_routing as tr
from paperkit.network_structure import tag_routing_study as ts

SEEDS = [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("K,p_a,p_i", [(4, 0.7, 0.1), (3, 0.9, 0.25), (5, 1.0, 0.0), (1, 0.7, 0.1), (2, 0.0, 1.0)])
def test_weights_match_reference_and_sum_to_one(seed, K, p_a, p_i):
    t = torch.tensor(np.random.default_rng(seed).integers(0, K, 40))
    w = tr.specdrop_weights(t, K, p_a, p_i)
    np.testing.assert_allclose(w.numpy(), tr.specdrop_weights_ref(t, K, p_a, p_i), rtol=0, atol=1e-15)
    np.testing.assert_allclose(w.sum(1).numpy(), 1.0, atol=1e-15)
    assert torch.all(w[torch.arange(40), t] == p_a / (p_a + (K - 1) * p_i))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_merge_matches_reference(seed, dtype, tol):
    rng = np.random.default_rng(seed)
    outs = torch.tensor(rng.normal(size=(23, 4, 7)), dtype=dtype)
    w = torch.tensor(rng.random((23, 4)), dtype=dtype)
    np.testing.assert_allclose(tr.merge(outs, w).double().numpy(), tr.merge_ref(outs, w), rtol=tol, atol=tol)


@pytest.mark.parametrize("p_a,p_i", [(0.7, 0.1), (0.9, 0.2), (0.5, 0.05), (3.0, 1.0)])
def test_denominator_makes_identical_branches_merge_to_one(p_a, p_i):
    rng = np.random.default_rng(0)
    one = torch.tensor(rng.normal(size=(30, 1, 5)))
    same = one.expand(-1, 4, -1)
    t = torch.tensor(rng.integers(0, 4, 30))
    merged = tr.merge(same, tr.specdrop_weights(t, 4, p_a, p_i))
    torch.testing.assert_close(merged, one[:, 0], rtol=0, atol=1e-14)
    # the norm ratio ||merged|| / ||single branch|| is one
    assert float(merged.norm() / one.norm()) == pytest.approx(1.0, abs=1e-14)


def test_hard_routing_oracle_and_equal_weights():
    t = torch.tensor([0, 3, 1, 1, 2])
    torch.testing.assert_close(tr.specdrop_weights(t, 4, 1.0, 0.0), torch.nn.functional.one_hot(t, 4).double())
    torch.testing.assert_close(tr.specdrop_weights(t, 4, 0.3, 0.3), torch.full((5, 4), 0.25, dtype=torch.float64))
    outs = torch.tensor(np.random.default_rng(1).normal(size=(5, 4, 3)))
    torch.testing.assert_close(tr.merge(outs, tr.specdrop_weights(t, 4, 1.0, 0.0)), outs[torch.arange(5), t])


def _net(mode, K=4, h=6, w=3, seed=0, d=9, C=5):
    return tr.BranchNet(d, C, K, h, w, mode, torch.Generator().manual_seed(seed))


def test_network_modes_agree_with_their_definitions():
    g = torch.Generator().manual_seed(3)
    X, t = torch.rand(11, 9, generator=g), torch.randint(0, 4, (11,), generator=g)
    sd, hard = _net("specdrop"), _net("hard")
    hard.load_state_dict(sd.state_dict())
    # hard routing is SpecDrop at p_a = 1, p_i = 0
    torch.testing.assert_close(hard(X, t)[0], sd(X, t, weights=tr.specdrop_weights(t, 4, 1.0, 0.0).float())[0])
    nor = _net("norouting")
    nor.load_state_dict(sd.state_dict())
    torch.testing.assert_close(nor(X, t)[0], sd(X, t, weights=torch.full((11, 4), 0.25))[0])
    # K = 1: SpecDrop is the dense network of the same width
    one, dense = _net("specdrop", K=1, w=5), _net("dense", K=1, w=5)
    dense.load_state_dict(one.state_dict())
    t0 = torch.zeros(11, dtype=torch.int64)
    torch.testing.assert_close(one(X, t0)[0], dense(X, t0)[0])


def test_forward_matches_merge_of_explicit_branches():
    net = _net("specdrop")
    g = torch.Generator().manual_seed(4)
    X, t = torch.rand(8, 9, generator=g), torch.randint(0, 4, (8,), generator=g)
    with torch.no_grad():
        z = torch.relu(X @ net.W_s + net.E[t] + net.c_s)
        outs = torch.stack([torch.relu(z @ net.A[k] + net.a[k]) @ net.Bm[k] for k in range(4)], 1)
        m = tr.merge(outs, tr.specdrop_weights(t, 4, 0.7, 0.1).float())
        want = torch.relu(m + net.c_m) @ net.W_o + net.c_o
    torch.testing.assert_close(net(X, t)[0], want)


@pytest.mark.parametrize("K,h,w", [(4, 32, 8), (3, 16, 5), (2, 7, 1)])
def test_parameter_counts_are_equal(K, h, w):
    counts = {m: tr.count_parameters(_net(m, K, h, w)) for m in tr.MODES}
    assert len({c["rest"] for c in counts.values()}) == 1
    assert len({counts[m]["total"] for m in ("dense",) + tr.FIXED}) == 1
    for m in tr.GATED:
        assert counts[m]["router"] == h * K
    assert counts["specdrop"]["router"] == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_load_balancing_loss_matches_reference_and_limits(seed):
    p = torch.softmax(torch.tensor(np.random.default_rng(seed).normal(size=(40, 5))), 1)
    assert float(tr.load_balancing_loss(p)) == pytest.approx(tr.load_balancing_loss_ref(p), rel=1e-12)
    assert float(tr.load_balancing_loss(torch.full((10, 5), 0.2, dtype=torch.float64))) == pytest.approx(1.0)
    collapsed = torch.zeros(10, 5, dtype=torch.float64)
    collapsed[:, 2] = 1
    assert float(tr.load_balancing_loss(collapsed)) == pytest.approx(5.0)      # all load on one branch: K


@pytest.mark.parametrize("seed", SEEDS)
def test_prune_sensitivity_matches_reference(seed):
    net = _net("specdrop", seed=seed)
    g = torch.Generator().manual_seed(seed)
    X, y = torch.rand(60, 9, generator=g), torch.randint(0, 5, (60,), generator=g)
    c = torch.randint(0, 4, (60,), generator=g)
    W = tr.specdrop_weights(c, 4, 0.7, 0.1).float()
    np.testing.assert_allclose(tr.prune_sensitivity(net, X, y, c, c, W), tr.prune_sensitivity_ref(net, X, y, c, c, W),
                               atol=1e-12)


def test_specialisation_of_a_diagonal_matrix():
    assert ts.specialisation(np.eye(4)) == pytest.approx(1.0)
    assert ts.specialisation(np.ones((4, 4))) == pytest.approx(0.0)


def test_errors_name_the_argument():
    t = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="tags"):
        tr.specdrop_weights(torch.tensor([0, 4]), 4, 0.7, 0.1)
    with pytest.raises(TypeError, match="tags"):
        tr.specdrop_weights(t.double(), 4, 0.7, 0.1)
    with pytest.raises(ValueError, match="p_i"):
        tr.specdrop_weights(t, 4, 0.7, -0.1)
    with pytest.raises(ValueError, match="K"):
        tr.specdrop_weights(t, 0, 0.7, 0.1)
    with pytest.raises(TypeError, match="w must have the dtype"):
        tr.merge(torch.zeros(2, 4, 3), torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="probs"):
        tr.load_balancing_loss(torch.full((3, 2), 1.5))
    with pytest.raises(ValueError, match="mode"):
        _net("moe")
    with pytest.raises(ValueError, match="groups"):
        ts.superclass_of([[0, 1], [1, 2]], 3)


def test_tags_of_each_condition():
    rng = np.random.default_rng(0)
    cats = np.repeat(np.arange(4), 250)
    assert np.array_equal(ts.make_tags(cats, "aligned", rng), cats)
    rnd = ts.make_tags(cats, "random", rng)
    assert abs((rnd == cats).mean() - 0.25) < 0.05
    mixed = ts.make_tags(rng.permutation(cats), "mixed_units", rng, unit=8)
    assert mixed.min() >= 0 and mixed.max() < 4
    # one tag per unit of 8: agreement with the sample's own category is above chance (its own draw) but far below 1
    perm_cats = rng.permutation(cats)
    agree = (ts.make_tags(perm_cats, "mixed_units", rng, unit=8) == perm_cats).mean()
    assert 0.28 < agree < 0.5


def test_paired_se_counts_discordant_images():
    a = np.array([True] * 90 + [False] * 10)
    assert ts.paired_se(a, a) == 0.0
    b = a.copy()
    b[:5] = False
    assert ts.paired_se(a, b) == pytest.approx(np.sqrt(5 - 25 / 100) / 100)


def test_training_learns_and_is_reproducible():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 600)
    X = (np.eye(4)[y] @ rng.random((4, 10)) * 3 + 0.2 * rng.normal(size=(600, 10))).astype(np.float32)
    split = (torch.tensor(X[:450]), torch.tensor(y[:450]), torch.tensor(X[450:]), torch.tensor(y[450:]))
    tags = np.minimum(y, 3) // 2
    a = ts.run(split, tags[:450], tags[450:], "specdrop", K=2, h=8, w=4, steps=120, batch=32, seed=1)
    b = ts.run(split, tags[:450], tags[450:], "specdrop", K=2, h=8, w=4, steps=120, batch=32, seed=1)
    assert a["loss"] == b["loss"] and a["acc"] == b["acc"]
    assert a["loss"][-1] < a["loss"][0] and a["acc"] > 0.6          # four classes: chance is 0.25
    g = ts.run(split, tags[:450], tags[450:], "top1_gate", K=2, h=8, w=4, steps=60, batch=32, seed=1)
    assert g["load"].sum() == pytest.approx(1.0)
