"""paperkit.learning_dynamics.ufm_regression: the UFM closed forms against their references, cvxpy's nuclear-norm
solve and L-BFGS on the factored objective; the loss gradient against Torch autograd; whitening identities."""
import math

import numpy as np
import pytest
import torch

from paperkit.learning_dynamics import ufm_regression as u

SEEDS = [0, 1, 2]
LAMS = [(1e-2, 1e-2), (1e-2, 1e-1), (3e-2, 1e-1), (1e-3, 3.0)]


def _targets(seed, K=4, N=60, kind="decay"):
    return u.make_targets(u.spectrum(kind, K, 1.0, 10.0), N, np.random.default_rng(seed))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(1, 7), (3, 5), (4, 60), (6, 4)])
@pytest.mark.parametrize("lam", LAMS)
def test_closed_forms_match_references(seed, shape, lam):
    Y = np.random.default_rng(seed).normal(size=shape)
    for fast, ref in ((u.ufm_closed_form, u.ufm_closed_form_ref), (u.separate_closed_form, u.separate_closed_form_ref)):
        a, b = fast(Y, *lam), ref(Y, *lam)
        np.testing.assert_allclose(a[0], b[0], rtol=1e-8, atol=1e-10)
        assert a[1] == pytest.approx(b[1], rel=1e-9, abs=1e-14)
        assert a[2] == pytest.approx(b[2], rel=1e-9, abs=1e-14)


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-3), ("float64", 1e-9)])
def test_closed_form_float32(dtype, tol):
    Y = _targets(0).astype(dtype)
    np.testing.assert_allclose(u.ufm_closed_form(Y, 1e-2, 1e-1)[0], u.ufm_closed_form_ref(Y, 1e-2, 1e-1)[0],
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", SEEDS)
def test_mse_formula_from_spectrum(seed):
    s2 = u.spectrum("decay", 5, 1.3, 20.0)
    Y = u.make_targets(s2, 80, np.random.default_rng(seed))
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(Y @ Y.T / 80)), np.sort(s2), rtol=1e-10)
    for lw, lh in LAMS:
        t = 80 * lw * lh
        assert u.ufm_closed_form(Y, lw, lh)[1] == pytest.approx(u.min_mse_from_spectrum(s2, t), rel=1e-10)
        assert u.separate_closed_form(Y, lw, lh)[1] == pytest.approx(
            u.min_mse_from_spectrum(np.diag(Y @ Y.T / 80), t), rel=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_closed_form_matches_cvxpy_nuclear_norm(seed):
    cp = pytest.importorskip("cvxpy")
    Y = _targets(seed, K=3, N=30)
    lw, lh = 1e-2, 2e-1
    Z = cp.Variable(Y.shape)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(Z - Y) / (2 * 30) + math.sqrt(lw * lh) * cp.normNuc(Z)))
    prob.solve()
    Zc, _, obj = u.ufm_closed_form(Y, lw, lh)
    assert prob.value == pytest.approx(obj, rel=1e-6)
    np.testing.assert_allclose(Z.value, Zc, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("lam", LAMS)
def test_factored_fit_reaches_closed_form(seed, lam):
    Y = _targets(seed, K=3, N=40)
    fit = u.ufm_factored_fit(Y, *lam, d_feat=8, rng=np.random.default_rng(seed))
    Zc, mse, obj = u.ufm_closed_form(Y, *lam)
    assert fit["objective"] == pytest.approx(obj, rel=1e-7)
    assert fit["mse"] == pytest.approx(mse, rel=1e-5)
    sep = u.separate_factored_fit(Y, *lam, d_feat=4, rng=np.random.default_rng(seed))
    assert sep[1] == pytest.approx(u.separate_closed_form(Y, *lam)[1], rel=1e-5)


def test_narrow_features_cannot_reach_closed_form():
    Y = _targets(0, K=4, N=40)
    fit = u.ufm_factored_fit(Y, 1e-2, 1e-2, d_feat=1, rng=np.random.default_rng(0))
    assert fit["mse"] > 2 * u.ufm_closed_form(Y, 1e-2, 1e-2)[1]


@pytest.mark.parametrize("seed", SEEDS)
def test_joint_never_worse_than_separate_and_rotation_invariance(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        K = int(rng.integers(2, 7))
        Y = rng.normal(size=(K, 50)) * rng.uniform(0.2, 3, size=(K, 1))
        Y = np.linalg.qr(rng.normal(size=(K, K)))[0] @ Y
        lw, lh = 10 ** rng.uniform(-3, -1, 2)
        assert u.ufm_closed_form(Y, lw, lh)[1] <= u.separate_closed_form(Y, lw, lh)[1] + 1e-12
        Q = np.linalg.qr(rng.normal(size=(K, K)))[0]
        assert u.ufm_closed_form(Q @ Y, lw, lh)[1] == pytest.approx(u.ufm_closed_form(Y, lw, lh)[1], rel=1e-9)


def test_product_only_dependence():
    Y = _targets(0)
    ref = u.ufm_closed_form(Y, 1e-2, 1e-1)[1]
    for c in (1e-3, 0.05, 2.0):
        assert u.ufm_closed_form(Y, 1e-3 / c, c)[1] == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["raw", "standardise", "whiten"])
def test_whiten_targets_roundtrip_and_whitened_formula(seed, mode):
    Y = _targets(seed, K=4, N=70) * 1.7
    Yt, Ainv = u.whiten_targets(Y, mode)
    np.testing.assert_allclose(Ainv @ Yt, Y, rtol=1e-10, atol=1e-10)
    C = Yt @ Yt.T / 70
    if mode == "whiten":
        np.testing.assert_allclose(C, np.eye(4), atol=1e-10)
    if mode == "standardise":
        np.testing.assert_allclose(np.diag(C), 1.0, rtol=1e-10)
    s2 = np.linalg.eigvalsh(Y @ Y.T / 70)
    for lw, lh in LAMS:
        t = 70 * lw * lh
        got = u.scaled_closed_form_mse(Y, lw, lh, mode)
        if mode == "whiten":
            assert got == pytest.approx(min(1.0, t) * s2.mean(), rel=1e-9)
        if mode == "raw":
            assert got == pytest.approx(u.min_mse_from_spectrum(s2, t), rel=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_loss_grad_matches_reference_and_autograd(seed):
    rng = np.random.default_rng(seed)
    W, H, Y = rng.normal(size=(3, 5)), rng.normal(size=(5, 9)), rng.normal(size=(3, 9))
    L, gW, gH = u.ufm_loss_grad(W, H, Y, 0.1, 0.02)
    Lr, gWr, gHr = u.ufm_loss_grad_ref(W, H, Y, 0.1, 0.02)
    assert L == pytest.approx(Lr, rel=1e-12)
    np.testing.assert_allclose(gW, gWr, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gH, gHr, rtol=1e-10, atol=1e-12)
    Wt, Ht = torch.tensor(W, requires_grad=True), torch.tensor(H, requires_grad=True)
    Lt = 0.5 / 9 * ((Wt @ Ht - torch.tensor(Y)) ** 2).sum() + 0.05 * (Wt ** 2).sum() + 0.01 * (Ht ** 2).sum()
    Lt.backward()
    assert float(Lt.detach()) == pytest.approx(L, rel=1e-12)
    np.testing.assert_allclose(Wt.grad.numpy(), gW, rtol=1e-10)
    np.testing.assert_allclose(Ht.grad.numpy(), gH, rtol=1e-10)


def test_errors_name_the_argument():
    Y = _targets(0)
    with pytest.raises(ValueError, match="lam_w"):
        u.ufm_closed_form(Y, -1.0, 0.1)
    with pytest.raises(ValueError, match="lam_h"):
        u.separate_closed_form(Y, 0.1, float("nan"))
    with pytest.raises(ValueError, match="mode"):
        u.whiten_targets(Y, "pca")
    with pytest.raises(ValueError, match="Y"):
        u.ufm_closed_form(np.zeros((0, 3)), 0.1, 0.1)
    with pytest.raises(ValueError, match="kind"):
        u.spectrum("flat", 3)


# ---------------------------------------------------------------- networks (ufm_study)

def test_mlp_loss_grad_matches_autograd():
    from paperkit.learning_dynamics import ufm_study as us

    rng = np.random.default_rng(0)
    X, Y, h = rng.normal(size=(12, 3)), rng.normal(size=(12, 2)), 5
    x = rng.normal(size=3 * h + h + h * 2 + 2)
    L, g = us.mlp_loss_grad(x, X, Y, h, 0.07)
    xt = torch.tensor(x, requires_grad=True)
    W1, b1 = xt[:15].reshape(3, h), xt[15:20]
    W2, b2 = xt[20:30].reshape(h, 2), xt[30:]
    F = torch.tanh(torch.tensor(X) @ W1 + b1) @ W2 + b2
    Lt = 0.5 / 12 * ((F - torch.tensor(Y)) ** 2).sum() + 0.035 * ((W1 ** 2).sum() + (W2 ** 2).sum())
    Lt.backward()
    assert L == pytest.approx(float(Lt.detach()), rel=1e-12)
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_separate_networks_and_whitening_gap_run_on_real_data():
    from paperkit.data.datasets import sklearn_diabetes
    from paperkit.learning_dynamics import ufm_study as us

    Xd, yd, names, prov = sklearn_diabetes()
    assert Xd.shape == (442, 10) and names[4:] == ["s1", "s2", "s3", "s4", "s5", "s6"]
    Xin, Yd = np.column_stack([Xd[:, :4], yd]), Xd[:, 4:]
    r = us.joint_vs_separate(Xin, Yd, 0.1, 8, np.random.default_rng(0), 300, max_iter=100)
    assert set(r) == {f"{w}_{p}" for w in ("joint", "sep", "pc_sep") for p in ("train", "test")}
    assert all(0 < v < 2 for v in r.values())
    d_tr, d_te = us.whitening_gap(Xin, Yd, 0.1, 8, [0.3, 3.0], np.random.default_rng(0), 300, max_iter=100)
    assert d_tr.shape == d_te.shape == (2,)
