"""The experiments of the gradient-denoising chapter, built on :mod:`paperkit.learning_dynamics.gradient_denoise`:
estimator errors against their Cramer-Rao bounds on quadratic and cubic objectives (Monte Carlo at fixed query
points), convergence slopes on the nonconvex test function, and DP-SGD on scikit-learn's digits with and without the
denoising wrapper."""
from __future__ import annotations

import math

import numpy as np
import torch

from paperkit.learning_dynamics import gradient_denoise as gd


# ------------------------------------------------------------------------------- quadratic and cubic objectives


def quadratic(rng: np.random.Generator, d: int, cond: float):
    """``f(x) = x^T A x / 2 - b^T x`` with eigenvalues of ``A`` log-spaced in ``[1/cond, 1]`` (random rotation)."""
    U = np.linalg.qr(rng.normal(size=(d, d)))[0]
    A = (U * np.geomspace(1 / cond, 1, d)) @ U.T
    xstar = rng.normal(size=d)
    return A, A @ xstar, xstar


def cubic_grad(X, A, b, Qc, c):
    """Gradient of ``x^T A x / 2 - b^T x + (c/6) sum_k (q_k^T x)^3`` (rows of ``Qc`` are the ``q_k``)."""
    return X @ A - b + 0.5 * c * ((X @ Qc.T) ** 2) @ Qc


def sgd_path(grad, x0, eta, sigma, T, rng, query=None):
    """Iterates ``x_0..x_{T-1}`` of SGD on the noisy oracle; ``query(X, t)`` gives the query point (default the
    iterate) and the step uses the running mean of the gradients seen at the query points when ``query`` is set
    (implicit gradient transport with weights 1/t). Returns (X, Y): iterates and query points."""
    d = x0.size
    X, Y = np.zeros((T, d)), np.zeros((T, d))
    x, m = x0.copy(), np.zeros(d)
    for t in range(T):
        X[t] = x
        Y[t] = x if (query is None or t == 0) else x + t * (x - X[t - 1])
        g = grad(Y[t][None])[0] + sigma * rng.normal(size=d)
        if query is None:
            step = g
        else:
            m = m + (g - m) / (t + 1)
            step = m
        x = x - eta * step
    return X, Y


def cheap_errors(G, true, betas=(0.5, 0.8, 0.9, 0.95, 0.99), window=20):
    """Squared errors (T,) of the cheap averages of the raw gradients ``G`` (T, d) as estimates of ``true`` (T, d):
    ``mean`` (running mean of all of them), ``window`` (mean of the last ``window``) and ``ema_<beta>`` (momentum's
    exponential average, started at ``g_0``, so with no start-up bias). Returns a dict of (T,) arrays."""
    from scipy.signal import lfilter

    T = G.shape[0]
    out = {"mean": ((np.cumsum(G, 0) / np.arange(1, T + 1)[:, None] - true) ** 2).sum(1),
           "window": ((gd.window_estimates(G, window) - true) ** 2).sum(1)}
    for b in betas:
        m = lfilter([1 - b], [1, -b], G, axis=0, zi=b * G[:1])[0]
        out[f"ema_{b}"] = ((m - true) ** 2).sum(1)
    return out


def estimator_mc(grad, X, sigma, degree, reps, rng, betas=(0.5, 0.8, 0.9, 0.95, 0.99), window=20,
                 ridge=1e-8):
    """Monte Carlo at fixed query points ``X`` (T, d): ``reps`` fresh noise draws on the gradients observed there,
    and each estimator's squared error of ``grad f(x_t)`` at every step ``t``.

    Returns a dict of (reps, T) arrays of squared errors: ``ml`` (recursive least squares over the whole history
    with the gradient model of ``degree``), ``raw``, and the cheap averages of :func:`cheap_errors` (``mean``,
    ``window``, ``ema_<beta>``); and ``ml_coef`` (reps, p, d), the final fitted coefficients."""
    T, d = X.shape
    true = grad(X)
    Z = gd.gradient_features(X, degree)
    out = {k: np.zeros((reps, T)) for k in ["ml", "raw", "mean", "window"] + [f"ema_{b}" for b in betas]}
    out["ml_coef"] = np.zeros((reps, Z.shape[1], d))
    for r in range(reps):
        G = true + sigma * rng.normal(size=(T, d))
        pred, theta = gd.rls_gradient_estimates(Z, G, ridge)
        out["ml"][r] = ((pred - true) ** 2).sum(1)
        out["ml_coef"][r] = theta
        out["raw"][r] = ((G - true) ** 2).sum(1)
        for k, v in cheap_errors(G, true, betas, window).items():
            out[k][r] = v
    return out


def bound_at(Zy, Zq, sigma, d):
    """Cramer-Rao bound of the gradient at the points ``Zq[t]`` from the observations ``Zy[:t+1]`` (NaN where the
    model is not yet identifiable)."""
    T, p = Zy.shape
    out = np.full(T, np.nan)
    M = np.zeros((p, p))
    for t in range(T):
        M += np.outer(Zy[t], Zy[t])
        if t + 1 >= p:
            out[t] = d * sigma**2 * Zq[t] @ np.linalg.solve(M, Zq[t])
    return out


# --------------------------------------------------------------------------------------- nonconvex slopes


def nonconvex_slopes(Ts, seeds_rng, n_seeds, d, sigma, sched, methods, amp=2.0):
    """For each method and horizon ``T`` (``sched[method](T) -> (eta, alpha, steps)``), run ``n_seeds`` seeds and
    return ``R[method]`` (n_seeds, len(Ts)): the squared mean gradient norm over iterates
    ``(mean_t ||grad f(x_t)||)^2``, and ``N[method]`` (len(Ts),): oracle calls spent."""
    rng0 = np.random.default_rng(seeds_rng.integers(2**63))
    Q = np.linalg.qr(rng0.normal(size=(d, d)))[0]
    x0 = Q.T @ np.full(d, 3.0)
    R = {m: np.zeros((n_seeds, len(Ts))) for m in methods}
    N = {m: np.zeros(len(Ts)) for m in methods}
    children = seeds_rng.spawn(n_seeds)
    for s, child in enumerate(children):
        base = int(child.integers(2**63))
        for j, T in enumerate(Ts):
            for m in methods:
                eta, alpha, steps = sched[m](T)
                noise = np.random.default_rng([base, j, steps]).normal(size=(steps, 2, d))
                sq, calls = gd.run_nonconvex(x0, Q, noise, sigma, eta, alpha, m, amp)
                R[m][s, j] = np.sqrt(sq).mean() ** 2
                N[m][j] = calls
    return R, N


# --------------------------------------------------------------------------------------------- DP-SGD


def digits_split(X, y, rng, n_val=300, n_test=360):
    """Standardised digits split into train / validation / test (pixel scale 0-16 divided by 16, then each pixel
    centred by its training mean)."""
    idx = rng.permutation(len(y))
    te, va, tr = idx[:n_test], idx[n_test:n_test + n_val], idx[n_test + n_val:]
    X = X / 16.0
    mu = X[tr].mean(0)
    t = lambda a: torch.tensor(a, dtype=torch.float32)
    return [(t(X[i] - mu), torch.tensor(y[i], dtype=torch.int64)) for i in (tr, va, te)]


def train_dp(train, evalset, method, lr, epochs, q, noise_mult, clip, seed, hidden=32, alpha=0.2, beta=0.9):
    """DP-SGD (Poisson sampling at rate ``q``, per-example clipping at ``clip``, Gaussian noise ``noise_mult *
    clip`` on the sum, divided by the expected batch size) of a 64-``hidden``-10 ReLU network; every method gets one
    privatised gradient per step, so all have the same privacy. ``method``: ``"sgd"``, ``"momentum"`` (heavy ball,
    ``beta``), ``"adam"``, ``"denoise"`` (the one-query denoising wrapper: an exponential average, weight ``alpha``,
    of privatised gradients queried at the transport point ``w + (1-alpha)/alpha (w - w_prev)``, fed to plain SGD).
    Returns the accuracy on ``evalset``."""
    if method not in ("sgd", "momentum", "adam", "denoise"):
        raise ValueError(f"method must be sgd, momentum, adam or denoise, got {method!r}")
    Xtr, ytr = train
    g = torch.Generator().manual_seed(seed)
    n, m = Xtr.shape
    shapes = [(hidden, m), (hidden,), (10, hidden), (10,)]
    sizes = [math.prod(s) for s in shapes]
    w = torch.cat([(torch.randn(hidden, m, generator=g) / math.sqrt(m)).ravel(), torch.zeros(hidden),
                   (torch.randn(10, hidden, generator=g) / math.sqrt(hidden)).ravel(), torch.zeros(10)])
    unflat = lambda v: [t.view(s) for t, s in zip(torch.split(v, sizes), shapes)]
    prev, s1, s2 = w.clone(), torch.zeros_like(w), torch.zeros_like(w)
    steps = int(round(epochs / q))
    shift = (1 - alpha) / alpha
    for t in range(steps):
        mask = torch.rand(n, generator=g) < q
        if not bool(mask.any()):
            continue
        wq = w + shift * (w - prev) if method == "denoise" else w
        sums = gd.per_sample_clipped_sum(*unflat(wq), Xtr[mask], ytr[mask], clip)[:4]
        grad = (torch.cat([x.ravel() for x in sums]) + noise_mult * clip * torch.randn(w.shape, generator=g)) / (q * n)
        prev = w
        if method == "sgd":
            upd = grad
        elif method == "momentum":
            s1 = beta * s1 + grad
            upd = s1
        elif method == "adam":
            s1 = 0.9 * s1 + 0.1 * grad
            s2 = 0.999 * s2 + 0.001 * grad * grad
            upd = (s1 / (1 - 0.9 ** (t + 1))) / (torch.sqrt(s2 / (1 - 0.999 ** (t + 1))) + 1e-8)
        else:
            s1 = grad if t == 0 else (1 - alpha) * s1 + alpha * grad
            upd = s1
        w = w - lr * upd
    Xe, ye = evalset
    W1, b1, W2, b2 = unflat(w)
    logits = torch.relu(Xe @ W1.T + b1) @ W2.T + b2
    return float((logits.argmax(1) == ye).float().mean())


def igt_mc(grad, X, Y, sigma, reps, rng):
    """Squared errors (reps, T) of implicit gradient transport: the running mean of noisy gradients observed at the
    transport points ``Y`` as an estimate of ``grad f`` at the iterates ``X``."""
    T, d = X.shape
    true, gy = grad(X), grad(Y)
    out = np.zeros((reps, T))
    for r in range(reps):
        G = gy + sigma * rng.normal(size=(T, d))
        out[r] = ((np.cumsum(G, 0) / np.arange(1, T + 1)[:, None] - true) ** 2).sum(1)
    return out


def quad_final_gap(A, b, xstar, x0, sigma, T, kind, eta, seed, beta=0.9):
    """Final suboptimality ``f(x_T) - f*`` on the noisy quadratic after ``T`` oracle calls. ``kind``: ``"sgd"``;
    ``"ema"`` (SGD along a momentum average, ``beta``); ``"pr"`` (step ``eta / (1 + t/100)`` and Polyak-Ruppert
    averaging, the average is returned); ``"tail"`` (constant step and the average of the last half of the iterates
    is returned); ``"igt"`` (SGD fed by implicit gradient transport with weights 1/t)."""
    if kind not in ("sgd", "ema", "pr", "tail", "igt"):
        raise ValueError(f"kind must be sgd, ema, pr, tail or igt, got {kind!r}")
    r = np.random.default_rng(seed)
    d = x0.size
    x, xp, m, avg = x0.copy(), x0.copy(), np.zeros(d), np.zeros(d)
    noise = sigma * r.normal(size=(T, d))
    for t in range(T):
        if kind == "igt":
            y = x if t == 0 else x + t * (x - xp)
            m += (A @ y - b + noise[t] - m) / (t + 1)
            step = m
        else:
            g = A @ x - b + noise[t]
            if kind == "ema":
                m = g if t == 0 else beta * m + (1 - beta) * g
                step = m
            else:
                step = g
        xp = x
        x = x - (eta / (1 + t / 100) if kind == "pr" else eta) * step
        if kind == "pr":
            avg += (x - avg) / (t + 1)
        elif kind == "tail" and t >= T // 2:
            avg += (x - avg) / (t - T // 2 + 1)
    z = (avg if kind in ("pr", "tail") else x) - xstar
    return float(0.5 * z @ A @ z)


def ml_in_loop_mc(A, b, x0, eta, sigma, T, reps, rng, ridge=1e-8):
    """Least squares in the loop: ``reps`` SGD runs (step ``eta``) on the noisy quadratic, each with its own noise,
    so the query points depend on the noise that the fit then sees (unlike :func:`estimator_mc`, where the points
    are frozen). Returns a dict: ``ml`` (reps, T), the squared error of the least-squares gradient at each iterate;
    ``bound`` (reps, T), the fixed-design bound of that run's own query points; the cheap averages of the same
    noisy gradients (``mean``, ``window``, ``ema_<beta>``, each (reps, T), :func:`cheap_errors`); ``hess`` (reps,),
    the squared Frobenius error of the fitted slope matrix (the Hessian ``A``) at the last step, and ``hess_bound``
    (reps,), its fixed-design bound at the run's own query points (:func:`~paperkit.learning_dynamics.
    gradient_denoise.ml_error_bound`)."""
    d = x0.size
    out = {"ml": np.zeros((reps, T)), "bound": np.zeros((reps, T)), "hess": np.zeros(reps),
           "hess_bound": np.zeros(reps)}
    for r in range(reps):
        X, G, x = np.zeros((T, d)), np.zeros((T, d)), x0.copy()
        noise = sigma * rng.normal(size=(T, d))
        for t in range(T):
            X[t] = x
            G[t] = A @ x - b + noise[t]
            x = x - eta * G[t]
        Z, true = gd.gradient_features(X, 1), X @ A - b
        pred, theta = gd.rls_gradient_estimates(Z, G, ridge)
        out["ml"][r] = ((pred - true) ** 2).sum(1)
        out["bound"][r], hb = gd.ml_error_bound(Z, sigma, d)
        out["hess"][r], out["hess_bound"][r] = ((theta[1:] - A) ** 2).sum(), hb[-1]
        for k, v in cheap_errors(G, true).items():
            out.setdefault(k, np.zeros((reps, T)))[r] = v
    return out
