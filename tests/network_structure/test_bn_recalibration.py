"""paperkit.network_structure.bn_recalibration, bn_unlearning and bn_unlearning_study: the recalibration statistics
against the float64 layer walk, numpy and torch.optim.swa_utils.update_bn; the operator's exact properties (no
weight changes, idempotence, the identity without BatchNorm); the unlearning methods and the study's bookkeeping."""
import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.optim.swa_utils import update_bn

from paperkit.network_structure import bn_recalibration as br
from paperkit.network_structure import bn_unlearning as bu
from paperkit.network_structure import bn_unlearning_study as st

SEEDS = [0, 1, 2]


def _cnn(norm="bn", seed=0, dtype=torch.float64, width=8):
    net = bu.make_cnn(norm, width, torch.Generator().manual_seed(seed)).to(dtype)
    # give the network non-trivial running statistics and affine parameters
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                m.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(seed + 7))
                m.bias.uniform_(-0.3, 0.3, generator=torch.Generator().manual_seed(seed + 8))
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1, generator=torch.Generator().manual_seed(seed + 9))
                m.running_var.uniform_(0.5, 2, generator=torch.Generator().manual_seed(seed + 10))
    return net.eval()


def _X(n, seed=0, dtype=torch.float64):
    return torch.tensor(np.random.default_rng(seed).random((n, 64)), dtype=dtype)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bs", [0, 7, 16])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_stats_match_reference(seed, bs, dtype, tol):
    net, X = _cnn(seed=seed, dtype=dtype), _X(50, seed, dtype)
    got = br.recalibration_stats(net, X, bs).numpy()
    ref = br.recalibration_stats_ref(net, X, bs).numpy()
    assert got.shape == (2 * (8 + 16),)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bs", [0, 9])
def test_stats_match_torch_update_bn(seed, bs):
    net, X = _cnn(seed=seed), _X(40, seed)
    m = copy.deepcopy(net)
    update_bn([X[i:i + (bs or len(X))] for i in range(0, len(X), bs or len(X))], m)
    want = torch.cat([torch.cat([b.running_mean, b.running_var]) for b in br.bn_layers(m)])
    torch.testing.assert_close(br.recalibration_stats(net, X, bs), want, rtol=1e-12, atol=1e-12)


def test_first_layer_stats_match_numpy():
    net, X = _cnn(seed=3), _X(30, 3)
    with torch.no_grad():
        h = net[1](net[0](X)).numpy()                    # conv1 output (N, C, 8, 8)
    mu = h.mean(axis=(0, 2, 3))
    var = h.transpose(1, 0, 2, 3).reshape(h.shape[1], -1).var(axis=1, ddof=1)
    s = br.recalibration_stats(net, X).numpy()
    np.testing.assert_allclose(s[:8], mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s[8:16], var, rtol=1e-10, atol=1e-12)


def test_eval_batchnorm_is_the_affine_map_of_its_stats():
    net = br.bn_recalibrate(_cnn(seed=4), _X(30, 4))
    b = net[2]
    x = torch.randn(5, 8, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    want = (b.weight[None, :, None, None] * (x - b.running_mean[None, :, None, None])
            / torch.sqrt(b.running_var[None, :, None, None] + b.eps) + b.bias[None, :, None, None])
    torch.testing.assert_close(b(x), want)


@pytest.mark.parametrize("seed", SEEDS)
def test_recalibration_changes_no_weight_and_leaves_the_input_alone(seed):
    net, X = _cnn(seed=seed), _X(40, seed)
    before = copy.deepcopy(net.state_dict())
    R = br.bn_recalibrate(net, X)
    assert br.max_weight_change(net, R) == 0.0
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not net.training and not R.training


@pytest.mark.parametrize("seed", SEEDS)
def test_recalibration_is_idempotent(seed):
    net, X = _cnn(seed=seed), _X(40, seed)
    R1 = br.bn_recalibrate(net, X)
    R2 = br.bn_recalibrate(R1, X)
    assert torch.equal(br.recalibration_stats(R1, X), br.recalibration_stats(net, X))
    for b1, b2 in zip(br.bn_layers(R1), br.bn_layers(R2)):
        assert torch.equal(b1.running_mean, b2.running_mean) and torch.equal(b1.running_var, b2.running_var)
    Xt = _X(20, seed + 50)
    with torch.no_grad():
        assert torch.equal(R1(Xt), R2(Xt))
        assert not torch.equal(R1(Xt), net(Xt))          # the stats set in _cnn are not the retain set's


@pytest.mark.parametrize("seed", SEEDS)
def test_recalibration_is_the_identity_without_batchnorm(seed):
    net, X = _cnn("gn", seed), _X(40, seed)
    assert br.bn_layers(net) == [] and br.recalibration_stats(net, X).numel() == 0
    Xt = _X(20, seed + 50)
    with torch.no_grad():
        assert torch.equal(br.bn_recalibrate(net, X)(Xt), net(Xt))
        with br.recalibrated(net, X) as m:
            assert torch.equal(m(Xt), net(Xt))


def test_context_manager_matches_the_copy_and_restores():
    net, X, Xt = _cnn(seed=5), _X(40, 5), _X(10, 6)
    with torch.no_grad():
        before = net(Xt)
        with br.recalibrated(net, X) as m:
            inside = m(Xt)
        torch.testing.assert_close(inside, br.bn_recalibrate(net, X)(Xt), rtol=0, atol=0)
        assert torch.equal(net(Xt), before)


def test_reset_stats_gives_zero_mean_unit_variance():
    m = br.reset_stats(_cnn(seed=1))
    for b in br.bn_layers(m):
        assert torch.equal(b.running_mean, torch.zeros_like(b.running_mean))
        assert torch.equal(b.running_var, torch.ones_like(b.running_var))


@pytest.mark.parametrize("bad,name", [(lambda: _X(5).float(), "X"), (lambda: _X(5)[None], "X"),
                                      (lambda: _X(0), "X"), (lambda: _X(5) * float("nan"), "X"),
                                      (lambda: np.zeros((5, 64)), "X")])
def test_bad_inputs_are_refused(bad, name):
    with pytest.raises((ValueError, TypeError), match=name):
        br.recalibration_stats(_cnn(), bad())
    with pytest.raises(ValueError, match="batch_size"):
        br.recalibration_stats(_cnn(), _X(5), -1)


# ----------------------------------------------------------------------------------------------- unlearning

@pytest.fixture(scope="module")
def digits():
    from paperkit.data.datasets import sklearn_digits

    X, y, _ = sklearn_digits()
    d = st.split_digits(X, y, 0, 0.3, np.random.default_rng(0))
    net = bu.train(bu.make_cnn("bn", 8, torch.Generator().manual_seed(0)), d["Xtr"], d["ytr"], 4, 3e-3,
                   torch.Generator().manual_seed(1))
    return d, net


def test_split_is_stratified_and_separates_the_forget_class(digits):
    d, _ = digits
    assert bool((d["yf"] == 0).all()) and not bool((d["yr"] == 0).any())
    assert len(d["yf"]) + len(d["yr"]) == len(d["ytr"]) and len(d["ytr"]) + len(d["yte"]) == 1797
    counts = np.bincount(d["yte"].numpy())
    assert counts.min() >= 50 and counts.max() <= 56
    assert float(d["Xtr"].max()) <= 1.0


def test_training_learns_the_digits(digits):
    d, net = digits
    assert bu.accuracy(net, d["Xte"], d["yte"]) > 0.8


def test_forward_method_changes_no_weight_and_pollutes_stats_only_in_train_mode(digits):
    d, net = digits
    args = (d["Xf"], d["yf"], d["Xr"], d["yr"], "forward", 1e-3, 20)
    u = bu.unlearn(net, *args, torch.Generator().manual_seed(0))
    assert br.max_weight_change(net, u) == 0.0
    assert not torch.equal(br.bn_layers(u)[0].running_mean, br.bn_layers(net)[0].running_mean)
    ue = bu.unlearn(net, *args, torch.Generator().manual_seed(0), bn_mode="eval")
    for a, b in zip(br.bn_layers(ue), br.bn_layers(net)):
        assert torch.equal(a.running_mean, b.running_mean) and torch.equal(a.running_var, b.running_var)
    # the polluted first-layer mean moves towards the forget batches' own mean
    target = br.recalibration_stats(net, d["Xf"])[:8]
    old = br.bn_layers(net)[0].running_mean.double()
    new = br.bn_layers(u)[0].running_mean.double()
    assert float((new - target).norm()) < float((old - target).norm())


def test_gradient_ascent_raises_the_forget_loss(digits):
    d, net = digits
    u = bu.unlearn(net, d["Xf"], d["yf"], d["Xr"], d["yr"], "ga", 1e-3, 10, torch.Generator().manual_seed(0),
                   bn_mode="eval")
    loss = lambda m: float(torch.nn.functional.cross_entropy(m(d["Xf"]), d["yf"]))
    with torch.no_grad():
        assert loss(u) > loss(net)


def test_prune_keeps_the_pruned_weights_at_zero(digits):
    d, net = digits
    u = bu.unlearn(net, d["Xf"], d["yf"], d["Xr"], d["yr"], "prune", 1e-2, 5, torch.Generator().manual_seed(0),
                   prune_frac=0.5)
    for m in u:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            assert abs(float((m.weight == 0).double().mean()) - 0.5) < 0.02


def test_callback_sees_every_step_and_the_input_net_is_untouched(digits):
    d, net = digits
    before = copy.deepcopy(net.state_dict())
    seen = []
    bu.unlearn(net, d["Xf"], d["yf"], d["Xr"], d["yr"], "scrub", 1e-3, 6, torch.Generator().manual_seed(0),
               callback=lambda s, m: seen.append((s, m.training)))
    assert seen == [(s, False) for s in range(1, 7)]
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k])


def test_unknown_method_and_mode_are_refused(digits):
    d, net = digits
    with pytest.raises(ValueError, match="method"):
        bu.unlearn(net, d["Xf"], d["yf"], d["Xr"], d["yr"], "nope", 1e-3, 1, torch.Generator())
    with pytest.raises(ValueError, match="bn_mode"):
        bu.unlearn(net, d["Xf"], d["yf"], d["Xr"], d["yr"], "ga", 1e-3, 1, torch.Generator(), bn_mode="x")
    with pytest.raises(ValueError, match="norm"):
        bu.make_cnn("ln", 8, torch.Generator())


def test_recovered_fraction():
    assert st.recovered_fraction(1.0, 0.2, 0.6) == pytest.approx(0.5)
    assert st.recovered_fraction(1.0, 0.2, 0.2) == 0.0
    assert np.isnan(st.recovered_fraction(1.0, 0.95, 1.0))


def test_largest_gain_and_pooled_share():
    key = ("bn", "train", "ga")
    res = {"pre": {key: np.array([0.9, 0.5, 0.2, 0.1])}, "post": {key: {2: 0.9, 4: 0.3}},
           "at_op": {key: {"pre": 0.2, "post": 0.6, "att x": 0.4}}}
    assert st.largest_gain(res, key) == pytest.approx(0.4)          # checkpoint 2: 0.9 - 0.5
    k2 = ("bn", "train", "rl")
    at_op = {key: {"pre": 0.2, "post": 0.6, "att x": 0.4}, k2: {"pre": 0.3, "post": 0.9, "att x": 0.3}}
    assert st.pooled_share(at_op, [key, k2], "x") == pytest.approx(0.2 / 1.0)
    assert np.isnan(st.pooled_share({key: {"pre": 0.5, "post": 0.5, "att x": 0.9}}, [key], "x"))


def test_competing_refreshes_are_recorded(digits):
    d, net = digits
    attack = {"n=10": d["Xr"][:10], "forget all": d["Xf"], "reset": None}
    m = st._measure(net, d, attack)
    for name in attack:
        assert 0.0 <= m["att " + name] <= 1.0 and 0.0 <= m["att_retain " + name] <= 1.0
    # R on the whole retain set given as an attacker set is R itself
    m2 = st._measure(net, d, {"all": d["Xr"]})
    assert m2["att all"] == m2["post"] and m2["att_retain all"] == m2["retain_post"]
