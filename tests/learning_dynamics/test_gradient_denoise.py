"""Gradient-denoising kernels: recursive least squares against a ridge solve per prefix and against scikit-learn's
Ridge, its exact error against Monte Carlo, the Numba optimiser loop against its NumPy reference, per-example clipped
gradients against autograd, and the RDP accountant against its closed form (q = 1) and numerical integration."""
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from paperkit.learning_dynamics import gradient_denoise as gd
from paperkit.learning_dynamics import gradient_denoise_study as st


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("degree", [1, 2])
def test_rls_matches_batch_ridge_and_sklearn(seed, degree):
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 3))
    Z = gd.gradient_features(X, degree)
    G = Z @ rng.normal(size=(Z.shape[1], 3)) + 0.1 * rng.normal(size=(40, 3))
    pred, theta = gd.rls_gradient_estimates(Z, G, 1e-3)
    pref, tref = gd.rls_gradient_estimates_ref(Z, G, 1e-3)
    np.testing.assert_allclose(pred, pref, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(theta, tref, rtol=1e-7, atol=1e-9)
    for t in (Z.shape[1] + 2, 39):
        sk = Ridge(alpha=1e-3, fit_intercept=False).fit(Z[: t + 1], G[: t + 1])
        np.testing.assert_allclose(sk.predict(Z[t : t + 1])[0], pred[t], rtol=1e-6, atol=1e-8)


def test_rls_float32_inputs_and_errors():
    rng = np.random.default_rng(0)
    Z = np.c_[np.ones(10), rng.normal(size=(10, 2))]
    G = rng.normal(size=(10, 2))
    p64 = gd.rls_gradient_estimates(Z, G)[0]
    p32 = gd.rls_gradient_estimates(Z.astype(np.float32), G.astype(np.float32))[0]
    assert p32.dtype == np.float64 and np.allclose(p32, p64, atol=1e-5)
    with pytest.raises(ValueError, match="ridge"):
        gd.rls_gradient_estimates(Z, G, 0.0)
    with pytest.raises(ValueError, match="G"):
        gd.rls_gradient_estimates(Z, G[:5])
    with pytest.raises(TypeError, match="G"):
        gd.rls_gradient_estimates(Z, G.astype(np.float32))


def test_ml_error_matches_monte_carlo_and_bound():
    rng = np.random.default_rng(1)
    d, T, sigma = 3, 60, 0.5
    X = np.cumsum(rng.normal(size=(T, d)) * 0.3, axis=0)
    A = np.diag([1.0, 0.5, 0.2])
    grad = lambda Y: Y @ A - 1.0
    mc = st.estimator_mc(grad, X, sigma, 1, 4000, rng)
    bound, _ = gd.ml_error_bound(gd.gradient_features(X, 1), sigma, d)
    bound2 = st.bound_at(gd.gradient_features(X, 1), gd.gradient_features(X, 1), sigma, d)
    np.testing.assert_allclose(bound[10:], bound2[10:], rtol=1e-10)
    ratio = mc["ml"].mean(0)[10:] / bound[10:]
    assert abs(ratio.mean() - 1) < 0.03
    assert np.all(np.isnan(bound[: 3]))


def test_igt_points_average_to_the_iterate():
    X = np.random.default_rng(2).normal(size=(50, 4))
    Y = gd.igt_query_points(X)
    np.testing.assert_allclose(np.cumsum(Y, 0) / np.arange(1, 51)[:, None], X, atol=1e-12)


def test_ema_and_window():
    G = np.random.default_rng(3).normal(size=(30, 2))
    e = gd.ema_estimates(G, 0.8)
    m = G[0]
    for t in range(1, 30):
        m = 0.8 * m + 0.2 * G[t]
    np.testing.assert_allclose(e[-1], m)
    np.testing.assert_allclose(gd.window_estimates(G, 5)[-1], G[-5:].mean(0))
    np.testing.assert_allclose(gd.window_estimates(G, 5)[2], G[:3].mean(0))


def test_extrapolation_cancels_two_orders_of_lag():
    for alpha in (0.05, 0.2, 0.7):
        s1, s2, m1 = gd.extrapolation(alpha)
        k = np.arange(20000)
        w = alpha * (1 - alpha) ** k
        for order in (1, 2):  # E_k [2 (s1 - k)^o - (s2 - k)^o] = 0 for o = 1, 2 (and 1 for o = 0)
            val = (w * (2 * (s1 - k) ** order - (s2 - k) ** order)).sum()
            assert abs(val) < 1e-6 * max(1, m1**order)
        assert abs((w * (m1 - k)).sum()) < 1e-6 * m1


@pytest.mark.parametrize("method", list(gd.METHODS))
def test_run_nonconvex_matches_reference(method):
    rng = np.random.default_rng(4)
    d = 4
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    noise = rng.normal(size=(60, 2, d))
    a = gd.run_nonconvex(Q.T @ np.full(d, 3.0), Q, noise, 0.7, 0.05, 0.25, method)
    b = gd.run_nonconvex_ref(Q.T @ np.full(d, 3.0), Q, noise, 0.7, 0.05, 0.25, method)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-8, atol=1e-10)
    assert a[1] == b[1] == (120 if method in ("sgd2", "denoise2") else 60)


def test_nonconvex_grad_by_finite_differences():
    rng = np.random.default_rng(5)
    Q = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    f = lambda x: float(np.sum((Q @ x) ** 2 / 2 + 2 * np.cos(Q @ x)))
    x = rng.normal(size=3)
    fd = np.array([(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(3)])
    np.testing.assert_allclose(gd.nonconvex_grad(x, Q, 2.0), fd, rtol=1e-6, atol=1e-8)


def test_run_nonconvex_refuses_bad_arguments():
    Q, x0, noise = np.eye(2), np.ones(2), np.zeros((5, 2, 2))
    with pytest.raises(ValueError, match="method"):
        gd.run_nonconvex(x0, Q, noise, 1.0, 0.1, 0.5, "adam")
    with pytest.raises(ValueError, match="alpha"):
        gd.run_nonconvex(x0, Q, noise, 1.0, 0.1, 0.0, "ema")
    with pytest.raises(ValueError, match="eta"):
        gd.run_nonconvex(x0, Q, noise, 1.0, -0.1, 0.5, "sgd")
    with pytest.raises(ValueError, match="Q"):
        gd.run_nonconvex(x0, np.eye(3), noise, 1.0, 0.1, 0.5, "sgd")


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
@pytest.mark.parametrize("clip", [0.05, 1.0, 100.0])
def test_per_sample_clipping_matches_autograd(dtype, tol, clip):
    g = torch.Generator().manual_seed(6)
    W = [torch.randn(8, 6, generator=g, dtype=dtype), torch.randn(8, generator=g, dtype=dtype),
         torch.randn(5, 8, generator=g, dtype=dtype), torch.randn(5, generator=g, dtype=dtype)]
    X = torch.randn(17, 6, generator=g, dtype=dtype)
    y = torch.randint(0, 5, (17,), generator=g)
    fast = gd.per_sample_clipped_sum(*W, X, y, clip)
    slow = gd.per_sample_clipped_sum_ref(*W, X, y, clip)
    for a, b in zip(fast[:4], slow[:4]):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    assert fast[4] == slow[4]
    if clip == 100.0:
        assert fast[4] == 0
    if clip == 0.05:  # every example has norm at most clip: the sum has norm at most n * clip
        assert fast[4] > 0
        assert math.sqrt(sum(float((a ** 2).sum()) for a in fast[:4])) <= 17 * 0.05 + 1e-6


def test_per_sample_refuses_bad_labels():
    W = [torch.zeros(2, 3), torch.zeros(2), torch.zeros(4, 2), torch.zeros(4)]
    with pytest.raises(ValueError, match="y"):
        gd.per_sample_clipped_sum(*W, torch.zeros(2, 3), torch.tensor([0, 4]), 1.0)


@pytest.mark.parametrize("sigma", [0.8, 1.5, 4.0])
def test_rdp_full_batch_is_the_gaussian_closed_form(sigma):
    orders = (2, 3, 8, 32)
    np.testing.assert_allclose(gd.rdp_subsampled_gaussian(1.0, sigma, orders),
                               [a / (2 * sigma**2) for a in orders], rtol=1e-12)


@pytest.mark.parametrize("q,sigma,a", [(0.01, 1.0, 2), (0.1, 2.0, 4), (0.3, 1.2, 3), (0.05, 0.7, 6)])
def test_rdp_subsampled_equals_numerical_integration(q, sigma, a):
    """E_{mu0}[(mu1/mu0)^a] for mu0 = N(0, s^2), mu1 = (1-q) N(0, s^2) + q N(1, s^2), by quadrature."""
    p0 = lambda x: stats.norm.pdf(x, 0, sigma)
    p1 = lambda x: (1 - q) * p0(x) + q * stats.norm.pdf(x, 1, sigma)
    val, _ = integrate.quad(lambda x: p0(x) * (p1(x) / p0(x)) ** a, -30 * sigma, 30 * sigma + 1, limit=400)
    assert gd.rdp_subsampled_gaussian(q, sigma, (a,))[0] == pytest.approx(math.log(val) / (a - 1), rel=1e-7)


def test_dp_epsilon_monotone_and_inverse():
    e1, e2 = gd.dp_epsilon(0.1, 1.0, 100, 1e-5), gd.dp_epsilon(0.1, 2.0, 100, 1e-5)
    assert e1 > e2 > 0
    s = gd.noise_for_epsilon(0.1, 100, 1e-5, 3.0)
    assert gd.dp_epsilon(0.1, s, 100, 1e-5) <= 3.0 < gd.dp_epsilon(0.1, s / 1.01, 100, 1e-5)
    with pytest.raises(ValueError, match="q"):
        gd.rdp_subsampled_gaussian(0.0, 1.0)
    with pytest.raises(ValueError, match="delta"):
        gd.dp_epsilon(0.1, 1.0, 10, 2.0)


def test_quadratic_igt_wrapper_beats_plain_sgd():
    rng = np.random.default_rng(7)
    A, b, xs = st.quadratic(rng, 5, 10.0)
    x0 = xs + rng.normal(size=5)
    plain = np.mean([st.quad_final_gap(A, b, xs, x0, 1.0, 500, "sgd", 0.3, s) for s in range(4)])
    igt = np.mean([st.quad_final_gap(A, b, xs, x0, 1.0, 500, "igt", 0.3, s) for s in range(4)])
    assert igt < plain


def test_cheap_errors_match_the_plain_estimators():
    rng = np.random.default_rng(8)
    true = rng.normal(size=(40, 3))
    G = true + rng.normal(size=(40, 3))
    err = st.cheap_errors(G, true, betas=(0.8,), window=5)
    np.testing.assert_allclose(err["ema_0.8"], ((gd.ema_estimates(G, 0.8) - true) ** 2).sum(1), rtol=1e-12)
    np.testing.assert_allclose(err["window"], ((gd.window_estimates(G, 5) - true) ** 2).sum(1), rtol=1e-12)
    np.testing.assert_allclose(err["mean"][-1], ((G.mean(0) - true[-1]) ** 2).sum(), rtol=1e-12)


def test_ml_in_loop_replays_one_run_and_tracks_its_bound():
    rng = np.random.default_rng(9)
    A, b, xs = st.quadratic(rng, 3, 5.0)
    x0 = xs + rng.normal(size=3)
    out = st.ml_in_loop_mc(A, b, x0, 0.3, 0.5, 80, 300, np.random.default_rng(10))
    # the first run, replayed by hand with the same noise
    noise = 0.5 * np.random.default_rng(10).normal(size=(80, 3))
    X, x = np.zeros((80, 3)), x0.copy()
    for t in range(80):
        X[t] = x
        x = x - 0.3 * (A @ x - b + noise[t])
    G = X @ A - b + noise
    pred, theta = gd.rls_gradient_estimates(gd.gradient_features(X, 1), G, 1e-8)
    np.testing.assert_allclose(out["ml"][0], ((pred - (X @ A - b)) ** 2).sum(1), rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(out["bound"][0], gd.ml_error_bound(gd.gradient_features(X, 1), 0.5, 3)[0], rtol=1e-9)
    assert out["hess"][0] == pytest.approx(((theta[1:] - A) ** 2).sum())
    assert set(out) >= {"mean", "window", "ema_0.9", "hess_bound"} and out["mean"].shape == (300, 80)
    # over many runs the fit's error is of the order of its realised bound (not equal: the design adapts)
    ratio = out["ml"][:, 20:].sum() / out["bound"][:, 20:].sum()
    assert 0.8 < ratio < 1.3
