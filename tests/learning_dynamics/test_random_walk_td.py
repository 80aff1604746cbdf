"""paperkit.learning_dynamics.random_walk_td and random_walk_td_study: the linearised TD gradient against its loop
reference and Torch autograd, the junta evaluation against the parity in closed form, the walk's law, the ridge
readout against scikit-learn, the slope against scipy, and the harnesses on small tasks."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from paperkit.learning_dynamics import random_walk_td as rw
from paperkit.learning_dynamics import random_walk_td_study as st

SEEDS = [0, 1, 2]


def _pairs(rng, B, d, walk=True):
    x = rng.choice([-1.0, 1.0], size=(B, d))
    x2, j = rw.lazy_walk_step(x, rng) if walk else rw.redraw_step(x, rng)
    return x, x2, j


# ---------------------------------------------------------------- data

@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_parity_table_is_the_product(k):
    rng = np.random.default_rng(k)
    x = rng.choice([-1.0, 1.0], size=(300, 9))
    S = np.sort(rng.choice(9, k, replace=False)).astype(np.int64)
    np.testing.assert_array_equal(rw.junta_value(x, S, rw.parity_table(k)), x[:, S].prod(1))


@pytest.mark.parametrize("seed", SEEDS)
def test_junta_value_matches_reference_and_random_junta_depends_on_every_bit(seed):
    rng = np.random.default_rng(seed)
    T = rw.random_junta_table(4, rng)
    assert abs(T.sum()) <= 4 and set(np.unique(T)) <= {-1.0, 1.0}
    S = np.array([7, 2, 5, 0], dtype=np.int64)
    x = rng.choice([-1.0, 1.0], size=(200, 8))
    f = rw.junta_value(x, S, T)
    np.testing.assert_array_equal(f, rw.junta_value_ref(x, S, T))
    for l in range(4):                        # flipping each relevant bit changes f somewhere
        y = x.copy(); y[:, S[l]] *= -1
        assert np.any(rw.junta_value(y, S, T) != f)
    y = x.copy(); y[:, [1, 3, 4, 6]] *= -1    # flipping irrelevant bits never does
    np.testing.assert_array_equal(rw.junta_value(y, S, T), f)


def test_junta_value_rejects_bad_input():
    x = np.ones((3, 4))
    with pytest.raises(ValueError, match="x must hold hypercube"):
        rw.junta_value(x * 0.5, np.array([0], dtype=np.int64), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="S must index"):
        rw.junta_value(x, np.array([4], dtype=np.int64), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="S must not repeat"):
        rw.junta_value(x, np.array([1, 1], dtype=np.int64), np.ones(4))
    with pytest.raises(ValueError, match="table must have"):
        rw.junta_value(x, np.array([1], dtype=np.int64), np.ones(4))
    with pytest.raises(TypeError, match="S must be an int64"):
        rw.junta_value(x, np.array([1.0]), np.ones(2))


def test_lazy_walk_law():
    rng = np.random.default_rng(0)
    B, d = 200000, 5
    x, x2, j = _pairs(rng, B, d)
    changed = (x != x2).sum(1)
    assert set(np.unique(changed)) == {0, 1}
    np.testing.assert_array_equal(changed == 1, j >= 0)
    assert abs((j < 0).mean() - 0.5) < 0.005
    counts = np.bincount(j[j >= 0], minlength=d)
    assert stats.chisquare(counts).pvalue > 1e-3                  # the flipped coordinate is uniform
    rows = np.nonzero(j >= 0)[0][:1000]
    assert np.all(x2[rows, j[rows]] == -x[rows, j[rows]])


def test_redraw_is_independent_of_x():
    rng = np.random.default_rng(1)
    x = np.ones((100000, 3))
    x2, _ = rw.redraw_step(x, rng)
    assert abs(x2.mean()) < 0.01 and abs(np.corrcoef(x2[:, 0], x2[:, 1])[0, 1]) < 0.01


# ---------------------------------------------------------------- TD gradient

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("walk", [True, False])
def test_td_linear_grad_matches_reference_and_autograd(seed, walk):
    rng = np.random.default_rng(seed)
    m, d, B = 7, 6, 25
    x, x2, _ = _pairs(rng, B, d, walk)
    S = np.array([1, 4], dtype=np.int64)
    fx, fx2 = rw.junta_value(x, S, rw.parity_table(2)), rw.junta_value(x2, S, rw.parity_table(2))
    W, a, b = rng.normal(size=(m, d)), rng.choice([-1.0, 1.0], m), rng.uniform(-1, 1, m)
    G, r = rw.td_linear_grad(W, a, b, x, x2, fx, fx2)
    Gr, rr = rw.td_linear_grad_ref(W, a, b, x, x2, fx, fx2)
    np.testing.assert_allclose(G, Gr, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r, rr, rtol=1e-12, atol=1e-14)
    Wt = torch.tensor(W, requires_grad=True)
    s = (((torch.tensor(x) + torch.tensor(x2)) / 2 @ Wt.T + torch.tensor(b)) > 0).double()
    dnet = ((s * torch.tensor(a)) * ((torch.tensor(x2) - torch.tensor(x)) @ Wt.T)).sum(1) / m
    loss = ((dnet - torch.tensor(fx2 - fx)) ** 2).mean()
    loss.backward()
    np.testing.assert_allclose(G, Wt.grad.numpy(), rtol=1e-12, atol=1e-14)
    assert float((r ** 2).mean()) == pytest.approx(float(loss.detach()), rel=1e-12)


def test_linearised_increment_is_exact_when_no_neuron_switches():
    rng = np.random.default_rng(3)
    m, d = 5, 8
    W, a = rng.normal(size=(m, d)) * 0.05, rng.choice([-1.0, 1.0], m)
    b = np.array([2.0, -2.0, 2.0, -2.0, 2.0])               # far from the kink: no neuron switches on a flip
    x, x2, j = _pairs(rng, 50, d)
    zero = np.zeros(50)
    _, r = rw.td_linear_grad(W, a, b, x, x2, zero, zero)
    np.testing.assert_allclose(r, rw.net_value(W, a, b, x2) - rw.net_value(W, a, b, x), atol=1e-14)


def test_irrelevant_flip_moves_only_its_column_and_only_shrinks_the_increment():
    rng = np.random.default_rng(4)
    m, d = 9, 10
    S = np.array([0, 1, 2], dtype=np.int64)
    W, a, b = rng.normal(size=(m, d)), rng.choice([-1.0, 1.0], m), rng.uniform(-1, 1, m)
    x = rng.choice([-1.0, 1.0], size=(1, d))
    for j in range(3, d):
        x2 = x.copy(); x2[0, j] *= -1
        fx, fx2 = rw.junta_value(x, S, rw.parity_table(3)), rw.junta_value(x2, S, rw.parity_table(3))
        assert fx2[0] == fx[0]
        G, r = rw.td_linear_grad(W, a, b, x, x2, fx, fx2)
        assert np.all(np.delete(G, j, axis=1) == 0)
        W2 = W - 1e-3 * G                                    # a small step lowers |increment|
        _, r2 = rw.td_linear_grad(W2, a, b, x, x2, fx, fx2)
        assert abs(r2[0]) <= abs(r[0])


def test_td_linear_grad_rejects_bad_input():
    rng = np.random.default_rng(0)
    kw = rw._td_inputs(rng, 4)
    with pytest.raises(ValueError, match="at least one pair"):
        rw.td_linear_grad(**rw._td_inputs(rng, 0))
    with pytest.raises(TypeError, match="x must have the dtype of W"):
        rw.td_linear_grad(**dict(kw, x=kw["x"].astype(np.float32)))
    with pytest.raises(ValueError, match="fx and fx2"):
        rw.td_linear_grad(**dict(kw, fx=kw["fx"][:2]))


def test_mse_grad_matches_autograd():
    rng = np.random.default_rng(5)
    m, d = 6, 4
    W, a, b = rng.normal(size=(m, d)), rng.choice([-1.0, 1.0], m), rng.uniform(-1, 1, m)
    x, y = rng.choice([-1.0, 1.0], size=(30, d)), rng.choice([-1.0, 1.0], 30)
    Wt = torch.tensor(W, requires_grad=True)
    net = torch.relu(torch.tensor(x) @ Wt.T + torch.tensor(b)) @ torch.tensor(a) / m
    ((net - torch.tensor(y)) ** 2).mean().backward()
    np.testing.assert_allclose(rw.mse_grad(W, a, b, x, y), Wt.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(rw.net_value(W, a, b, x), net.detach().numpy(), rtol=1e-12)


# ---------------------------------------------------------------- readout and slope

def test_ridge_readout_matches_sklearn():
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(6)
    F, y = rng.normal(size=(80, 5)), rng.normal(size=80)
    lam = 0.01
    c = rw.ridge_readout(F, y, lam)
    ref = Ridge(alpha=lam * 80, fit_intercept=False).fit(F, y).coef_
    np.testing.assert_allclose(c, ref, rtol=1e-10, atol=1e-12)


def test_relu_features_are_scale_free_in_w():
    rng = np.random.default_rng(7)
    W, b, x = rng.normal(size=(4, 6)), rng.uniform(-1, 1, 4), rng.choice([-1.0, 1.0], size=(10, 6))
    F = rw.relu_features(W, b, x, 2.0)
    np.testing.assert_allclose(F, rw.relu_features(W * 37.0, b, x, 2.0), rtol=1e-12)
    assert F.shape == (10, 5) and np.all(F[:, -1] == 1)


def test_loglog_slope_matches_scipy():
    d = np.array([16, 32, 64, 128.0])
    n = 3.0 * d ** 1.3 * np.array([1.1, 0.9, 1.05, 0.97])
    assert rw.loglog_slope(d, n) == pytest.approx(stats.linregress(np.log(d), np.log(n)).slope, rel=1e-12)
    assert rw.loglog_slope(d, 5 * d) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive finite"):
        rw.loglog_slope(d, np.array([1, 2, np.inf, 4.0]))
    assert np.isinf(st.slopes(d, np.array([[1, 2, 3, 4.0], [1, 2, np.inf, 4]]))[1])


# ---------------------------------------------------------------- harnesses

def test_stylised_td_learns_a_parity_and_the_redrawn_control_does_not():
    d, k = 16, 3
    S, T = st.task(d, k, "parity", np.random.default_rng(0))
    r = st.stylised_run(d, S, T, np.random.default_rng(1), max_pairs=60 * d, check_every=2 * d)
    assert np.isfinite(r["first"]) and r["first"] <= 40 * d and r["acc"][-1] >= 0.95
    c = st.stylised_run(d, S, T, np.random.default_rng(1), data="redraw_td", lr=0.5 * 2 / d, max_pairs=60 * d,
                        check_every=4 * d)
    assert math.isinf(c["first"]) and max(c["acc"]) < 0.8


def test_stylised_td_selects_relevant_coordinates_and_iid_mse_does_not():
    d, k = 24, 3
    S, T = st.task(d, k, "parity", np.random.default_rng(2))
    kw = dict(max_pairs=20 * d * k, check_every=10 * d, stop=False)
    td = st.stylised_run(d, S, T, np.random.default_rng(3), **kw)
    iid = st.stylised_run(d, S, T, np.random.default_rng(3), data="iid_mse", **kw)
    assert td["ratio"][-1] > 100 and 0.3 < iid["ratio"][-1] < 3


def test_adam_run_learns_a_small_parity_and_counting_floor_is_about_2d_log_k():
    d, k = 8, 2
    S, T = st.task(d, k, "parity", np.random.default_rng(4))
    r = st.adam_run(d, S, T, np.random.default_rng(5), torch.Generator().manual_seed(0), max_samples=60000,
                    check_every=1024)
    assert np.isfinite(r["first"])
    fl = [st.counting_floor(32, *st.task(32, 2, "parity", np.random.default_rng(s)), np.random.default_rng(s + 9))
          for s in range(200)]
    assert 0.7 < np.mean(fl) / (2 * 32 * 1.5) < 1.3                # coupon collector over k = 2 coordinates


def test_sweep_runs_do_not_depend_on_the_rest_of_the_sweep():
    a = st.sweep(0, 2, [16, 24], 3, "parity", "walk_td", max_pairs=800, check_per_d=4)
    b = st.sweep(0, 1, [24], 3, "parity", "walk_td", max_pairs=800, check_per_d=4)
    assert a["first"][0, 1] == b["first"][0, 0]
    with pytest.raises(ValueError, match="data must be"):
        st.stylised_run(8, np.array([0, 1], dtype=np.int64), rw.parity_table(2), np.random.default_rng(0), data="x")
    with pytest.raises(ValueError, match="kind must be"):
        st.task(8, 2, "majority", np.random.default_rng(0))
