"""Denoising noisy gradients from their history: maximum-likelihood (recursive least squares) estimates of the
gradient and Hessian on quadratic and cubic objectives, cheap recursive estimators, a two-query recursive denoiser
on a smooth nonconvex test function, and the pieces of a DP-SGD wrapper (per-sample clipping, an RDP accountant).

Kernels registered in :data:`KERNELS`:

* :func:`rls_gradient_estimates` (Numba recursive least squares) against :func:`rls_gradient_estimates_ref`
  (a batch ridge solve at every step);
* :func:`run_nonconvex` (Numba optimiser loop) against :func:`run_nonconvex_ref` (the same loop in Python);
* :func:`per_sample_clipped_sum` (closed-form per-sample gradients of a two-layer ReLU network, Torch) against
  :func:`per_sample_clipped_sum_ref` (one autograd call per sample).

The gradient oracle everywhere is ``g(x) = grad f(x) + sigma * xi`` with fresh standard normal ``xi`` at every
query (the noise of a privatised or subsampled gradient); noise arrays are drawn by the caller from an explicit
generator and passed in, so every kernel is deterministic.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch

from paperkit.contracts import Arg, Contract, Kernel

# ----------------------------------------------------------------------------------------------- validation


def _arr(x, name: str, ndim: int, dtypes=("float32", "float64")) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array, got {type(x).__name__}")
    if str(x.dtype) not in dtypes:
        raise TypeError(f"{name} must have dtype in {dtypes}, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {x.shape}")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite")
    return x


def _positive(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    x = float(x)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be finite and > 0, got {x}")
    return x


# --------------------------------------------------------------------------- features of the gradient model


def gradient_features(X: np.ndarray, degree: int) -> np.ndarray:
    """Regressors of the gradient model: ``[1, x]`` for a quadratic objective (gradient affine in ``x``,
    ``degree=1``) and ``[1, x, x_i x_j (i <= j)]`` for a cubic one (gradient quadratic in ``x``, ``degree=2``).
    ``X`` is (T, d); returns (T, p) float64."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be (T, d), got shape {X.shape}")
    if degree not in (1, 2):
        raise ValueError(f"degree must be 1 or 2, got {degree}")
    cols = [np.ones((X.shape[0], 1)), X]
    if degree == 2:
        i, j = np.triu_indices(X.shape[1])
        cols.append(X[:, i] * X[:, j])
    return np.concatenate(cols, axis=1)


# ------------------------------------------------------------------------- ML (least-squares) estimation


def _check_rls(Z, G, ridge):
    Z = _arr(Z, "Z", 2)
    G = _arr(G, "G", 2)
    if G.dtype != Z.dtype:
        raise TypeError(f"G must have the dtype of Z ({Z.dtype}), got {G.dtype}")
    if Z.shape[0] == 0:
        raise ValueError("Z must have at least one row (one gradient observation)")
    if G.shape[0] != Z.shape[0]:
        raise ValueError(f"G must have as many rows as Z ({Z.shape[0]}), got {G.shape[0]}")
    if Z.shape[1] == 0 or G.shape[1] == 0:
        raise ValueError(f"Z and G need at least one column, got Z {Z.shape}, G {G.shape}")
    return Z.astype(np.float64), G.astype(np.float64), _positive(ridge, "ridge")


@numba.njit(cache=True)
def _rls(Z, G, ridge, pred, theta):
    T, p = Z.shape
    d = G.shape[1]
    P = np.zeros((p, p))
    for i in range(p):
        P[i, i] = 1.0 / ridge
    Pz = np.zeros(p)
    for t in range(T):
        z = Z[t]
        s = 1.0
        for i in range(p):
            acc = 0.0
            for j in range(p):
                acc += P[i, j] * z[j]
            Pz[i] = acc
            s += z[i] * acc
        for k in range(d):
            r = G[t, k]
            for i in range(p):
                r -= theta[i, k] * z[i]
            for i in range(p):
                theta[i, k] += Pz[i] / s * r
        for i in range(p):
            for j in range(p):
                P[i, j] -= Pz[i] * Pz[j] / s
        for k in range(d):
            acc = 0.0
            for i in range(p):
                acc += theta[i, k] * z[i]
            pred[t, k] = acc


def rls_gradient_estimates(Z, G, ridge: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Recursive least squares over a history of noisy gradients.

    ``Z`` (T, p): the regressors of each query point (:func:`gradient_features`); ``G`` (T, d): the noisy gradients
    observed there. After each observation ``t`` the coefficients ``theta_t`` (p, d) minimise
    ``sum_{s<=t} ||G_s - theta^T Z_s||^2 + ridge ||theta||^2`` (under Gaussian noise and a vanishing ``ridge``, the
    maximum-likelihood fit of the gradient model). Returns ``(pred, theta)``: ``pred[t] = theta_t^T Z_t``, the
    denoised gradient at the ``t``-th query point, and the final ``theta``. O(p^2 + p d) work per observation.
    """
    Z, G, ridge = _check_rls(Z, G, ridge)
    pred = np.zeros(G.shape)
    theta = np.zeros((Z.shape[1], G.shape[1]))
    _rls(Z, G, ridge, pred, theta)
    return pred, theta


def rls_gradient_estimates_ref(Z, G, ridge: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Plain reference of :func:`rls_gradient_estimates`: a fresh ridge solve on the first ``t+1`` rows at every
    step."""
    Z, G, ridge = _check_rls(Z, G, ridge)
    pred = np.zeros(G.shape)
    theta = np.zeros((Z.shape[1], G.shape[1]))
    for t in range(Z.shape[0]):
        Zt, Gt = Z[: t + 1], G[: t + 1]
        theta = np.linalg.solve(Zt.T @ Zt + ridge * np.eye(Z.shape[1]), Zt.T @ Gt)
        pred[t] = Z[t] @ theta
    return pred, theta


def ml_error_bound(Z: np.ndarray, sigma: float, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean squared errors of the unregularised least-squares fit at fixed query points, which for Gaussian
    noise are the Cramer-Rao bounds of the gradient model: ``grad[t] = d sigma^2 z_t^T (Z_t^T Z_t)^-1 z_t`` for the
    gradient at the ``t``-th point and ``coef[t] = d sigma^2 tr[(Z_t^T Z_t)^-1]_slope`` for the slope coefficients
    (the Hessian, Frobenius norm). Entries with ``t + 1 < p`` (not identifiable) are NaN."""
    Z = np.asarray(Z, dtype=np.float64)
    T, p = Z.shape
    grad, coef = np.full(T, np.nan), np.full(T, np.nan)
    M = np.zeros((p, p))
    for t in range(T):
        M += np.outer(Z[t], Z[t])
        if t + 1 >= p:
            Minv = np.linalg.inv(M)
            grad[t] = d * sigma**2 * Z[t] @ Minv @ Z[t]
            coef[t] = d * sigma**2 * np.trace(Minv[1:, 1:])
    return grad, coef


# --------------------------------------------------------------------------------- cheap linear estimators


def ema_estimates(G: np.ndarray, beta: float) -> np.ndarray:
    """Exponential moving average of the raw gradients (momentum's memory): ``m_t = beta m_{t-1} + (1-beta) g_t``,
    started at ``m_0 = g_0`` (no start-up bias)."""
    G = np.asarray(G, dtype=np.float64)
    out = np.empty_like(G)
    m = G[0].copy()
    for t in range(G.shape[0]):
        m = G[t] if t == 0 else beta * m + (1 - beta) * G[t]
        out[t] = m
    return out


def window_estimates(G: np.ndarray, m: int) -> np.ndarray:
    """Plain average of the last ``m`` raw gradients (no correction for the movement of the iterate)."""
    G = np.asarray(G, dtype=np.float64)
    c = np.cumsum(np.vstack([np.zeros((1, G.shape[1])), G]), axis=0)
    t = np.arange(1, G.shape[0] + 1)
    lo = np.maximum(0, t - m)
    return (c[t] - c[lo]) / (t - lo)[:, None]


def igt_query_points(X: np.ndarray) -> np.ndarray:
    """Query points of implicit gradient transport with weights ``1/t``: ``y_1 = x_1`` and
    ``y_t = x_t + (t - 1)(x_t - x_{t-1})``, so that the running mean of ``y_1..y_t`` is exactly ``x_t``.
    Averaging the noisy gradients seen at the ``y_s`` then estimates ``grad f(x_t)`` without bias on a quadratic,
    with O(d) memory (one vector, as momentum)."""
    X = np.asarray(X, dtype=np.float64)
    Y = X.copy()
    t = np.arange(X.shape[0])[:, None]
    Y[1:] = X[1:] + t[1:] * (X[1:] - X[:-1])
    return Y


# ----------------------------------------------------------------------------- the nonconvex test function


def nonconvex_grad(x: np.ndarray, Q: np.ndarray, amp: float) -> np.ndarray:
    """Gradient of ``f(x) = sum_i [u_i^2 / 2 + amp cos(u_i)]`` with ``u = Q x`` (``Q`` orthogonal): nonconvex for
    ``amp > 1`` (the origin is a local maximum of every coordinate), all derivatives bounded. Works on (d,) or
    (n, d) arrays."""
    u = x @ Q.T
    return (u - amp * np.sin(u)) @ Q


METHODS = {"sgd": 0, "sgd2": 1, "ema": 2, "denoise2": 3, "nsgd": 4, "igt": 5}


@numba.njit(cache=True)
def _grad(x, Q, amp, out):
    d = x.size
    for i in range(d):
        u = 0.0
        for j in range(d):
            u += Q[i, j] * x[j]
        out[i] = u - amp * math.sin(u)
    res = np.zeros(d)
    for j in range(d):
        acc = 0.0
        for i in range(d):
            acc += out[i] * Q[i, j]
        res[j] = acc
    return res


@numba.njit(cache=True)
def _nonconvex(x0, Q, amp, noise, sigma, eta, alpha, method, s1, s2):
    T = noise.shape[0]
    d = x0.size
    x = x0.copy()
    xprev = x0.copy()
    buf = np.zeros(d)
    m = np.zeros(d)
    sq = np.zeros(T)
    calls = 0
    for t in range(T):
        gtrue = _grad(x, Q, amp, buf)
        s = 0.0
        for i in range(d):
            s += gtrue[i] * gtrue[i]
        sq[t] = s
        if method == 0 or method == 4:
            g = gtrue + sigma * noise[t, 0]
            calls += 1
        elif method == 1:
            g = gtrue + sigma * 0.5 * (noise[t, 0] + noise[t, 1])
            calls += 2
        elif method == 2:
            g = gtrue + sigma * noise[t, 0]
            calls += 1
            if t == 0:
                m = g.copy()
            else:
                m = (1 - alpha) * m + alpha * g
            g = m
        elif method == 5:
            y = x + s1 * (x - xprev)
            g = _grad(y, Q, amp, buf) + sigma * noise[t, 0]
            calls += 1
            if t == 0:
                m = g.copy()
            else:
                m = (1 - alpha) * m + alpha * g
            g = m
        else:
            dx = x - xprev
            ga = _grad(x + s1 * dx, Q, amp, buf) + sigma * noise[t, 0]
            gb = _grad(x + s2 * dx, Q, amp, buf) + sigma * noise[t, 1]
            calls += 2
            g = 2.0 * ga - gb
            if t == 0:
                m = g.copy()
            else:
                m = (1 - alpha) * m + alpha * g
            g = m
        xprev = x.copy()
        if method == 0 or method == 1:
            x = x - eta * g
        else:
            nrm = 0.0
            for i in range(d):
                nrm += g[i] * g[i]
            nrm = math.sqrt(nrm) + 1e-300
            x = x - (eta / nrm) * g
    return sq, calls


def _check_nonconvex(x0, Q, noise, sigma, eta, alpha, method):
    x0 = _arr(x0, "x0", 1, ("float64",))
    Q = _arr(Q, "Q", 2, ("float64",))
    noise = _arr(noise, "noise", 3, ("float64",))
    d = x0.size
    if d == 0:
        raise ValueError("x0 must have at least one coordinate")
    if Q.shape != (d, d):
        raise ValueError(f"Q must be ({d}, {d}), got {Q.shape}")
    if noise.shape[0] == 0 or noise.shape[1] < 2 or noise.shape[2] != d:
        raise ValueError(f"noise must be (T >= 1, 2, {d}), got {noise.shape}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
    eta = _positive(eta, "eta")
    alpha = float(alpha)
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    return x0, Q, noise, sigma, eta, alpha


def extrapolation(alpha: float) -> tuple[float, float, float]:
    """Where the two-query denoiser queries, in units of the last step ``x_t - x_{t-1}``, and the one-query
    transport point. For an exponential average with weight ``alpha`` the age ``k`` of a gradient has mean
    ``m1 = (1-alpha)/alpha`` and variance ``V = (1-alpha)/alpha^2``. Querying at ``m1 + a`` and ``m1 + 2a`` with
    weights ``2`` and ``-1``, ``a = sqrt(V/2)``, cancels the first- and second-order lag of the average under steady
    motion (it is exact for cubic objectives moving at constant velocity); one query at ``m1`` cancels only the
    first-order lag (implicit gradient transport). Returns ``(s1, s2, m1)``."""
    m1 = (1 - alpha) / alpha
    a = math.sqrt((1 - alpha) / alpha**2 / 2)
    return m1 + a, m1 + 2 * a, m1


def run_nonconvex(x0, Q, noise, sigma: float, eta: float, alpha: float, method: str, amp: float = 2.0):
    """Run one optimiser for ``T = noise.shape[0]`` steps on :func:`nonconvex_grad`'s function and return
    ``(sq, calls)``: ``sq[t] = ||grad f(x_t)||^2`` at every iterate (exact gradient, not an oracle call) and the
    number of noisy oracle calls spent.

    ``method``: ``"sgd"`` (``x -= eta g``), ``"sgd2"`` (two queries averaged per step), ``"ema"`` (normalised
    step along an exponential average of raw gradients, weight ``alpha``), ``"nsgd"`` (normalised step along the
    raw gradient), ``"igt"`` (one query at the transport point, normalised step) and ``"denoise2"`` (the two-query
    recursive denoiser of :func:`extrapolation`, normalised step). ``noise`` is (T, 2, d) standard normal draws;
    query ``j`` of step ``t`` uses ``noise[t, j]``.
    """
    x0, Q, noise, sigma, eta, alpha = _check_nonconvex(x0, Q, noise, sigma, eta, alpha, method)
    s1, s2, m1 = extrapolation(alpha)
    if method == "igt":
        s1 = m1
    sq, calls = _nonconvex(x0, Q, float(amp), noise, sigma, eta, alpha, METHODS[method], s1, s2)
    return sq, int(calls)


def run_nonconvex_ref(x0, Q, noise, sigma: float, eta: float, alpha: float, method: str, amp: float = 2.0):
    """Plain NumPy reference of :func:`run_nonconvex` (same arguments, same result)."""
    x0, Q, noise, sigma, eta, alpha = _check_nonconvex(x0, Q, noise, sigma, eta, alpha, method)
    s1, s2, m1 = extrapolation(alpha)
    x, xprev, m, calls, sq = x0.copy(), x0.copy(), None, 0, []
    for t in range(noise.shape[0]):
        gt = nonconvex_grad(x, Q, amp)
        sq.append(float(gt @ gt))
        if method in ("sgd", "nsgd"):
            g, calls = gt + sigma * noise[t, 0], calls + 1
        elif method == "sgd2":
            g, calls = gt + sigma * 0.5 * (noise[t, 0] + noise[t, 1]), calls + 2
        else:
            dx = x - xprev
            if method == "ema":
                raw, calls = gt + sigma * noise[t, 0], calls + 1
            elif method == "igt":
                raw, calls = nonconvex_grad(x + m1 * dx, Q, amp) + sigma * noise[t, 0], calls + 1
            else:
                raw = 2 * (nonconvex_grad(x + s1 * dx, Q, amp) + sigma * noise[t, 0]) \
                    - (nonconvex_grad(x + s2 * dx, Q, amp) + sigma * noise[t, 1])
                calls += 2
            m = raw if m is None else (1 - alpha) * m + alpha * raw
            g = m
        xprev = x.copy()
        x = x - eta * g if method in ("sgd", "sgd2") else x - eta / (np.linalg.norm(g) + 1e-300) * g
    return np.array(sq), calls


def fit_slope(n: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of ``log y`` on ``log n``."""
    return float(np.polyfit(np.log(n), np.log(y), 1)[0])


# --------------------------------------------------------------------------------------- DP-SGD pieces


def _check_mlp(W1, b1, W2, b2, X, y, clip):
    for name, v, nd in (("W1", W1, 2), ("b1", b1, 1), ("W2", W2, 2), ("b2", b2, 1), ("X", X, 2)):
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor, got {type(v).__name__}")
        if v.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name} must be float32 or float64, got {v.dtype}")
        if v.dim() != nd:
            raise ValueError(f"{name} must have {nd} axes, got shape {tuple(v.shape)}")
        if v.dtype != W1.dtype:
            raise TypeError(f"{name} must have the dtype of W1 ({W1.dtype}), got {v.dtype}")
        if not torch.isfinite(v).all():
            raise ValueError(f"{name} must be finite")
    if not isinstance(y, torch.Tensor) or y.dtype != torch.int64:
        raise TypeError(f"y must be an int64 torch tensor, got {getattr(y, 'dtype', type(y).__name__)}")
    if y.dim() != 1:
        raise ValueError(f"y must have 1 axis, got shape {tuple(y.shape)}")
    h, k = W1.shape[0], W2.shape[0]
    if W1.shape[1] != X.shape[1] or b1.shape[0] != h or W2.shape[1] != h or b2.shape[0] != k:
        raise ValueError(f"shapes do not chain: X {tuple(X.shape)}, W1 {tuple(W1.shape)}, b1 {tuple(b1.shape)}, "
                         f"W2 {tuple(W2.shape)}, b2 {tuple(b2.shape)}")
    if X.shape[0] == 0:
        raise ValueError("X must have at least one row")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y must have {X.shape[0]} labels, got {y.shape[0]}")
    if ((y < 0) | (y >= k)).any():
        raise ValueError(f"y must hold class labels in [0, {k})")
    return _positive(clip, "clip")


def per_sample_clipped_sum(W1, b1, W2, b2, X, y, clip: float):
    """Sum over the rows of ``X`` of each example's cross-entropy gradient, clipped to norm ``clip`` (DP-SGD's
    sensitivity bound), for the network ``logits = W2 relu(W1 x + b1) + b2``. Per-example gradients in closed form
    (outer products), no autograd. Returns ``(gW1, gb1, gW2, gb2, n_clipped)``; add Gaussian noise of standard
    deviation ``noise_multiplier * clip`` to each and divide by the expected batch size to privatise."""
    clip = _check_mlp(W1, b1, W2, b2, X, y, clip)
    pre = X @ W1.T + b1
    h = torch.relu(pre)
    logits = h @ W2.T + b2
    dl = torch.softmax(logits, dim=1)
    dl[torch.arange(X.shape[0]), y] -= 1.0
    dh = (dl @ W2) * (pre > 0)
    norm2 = ((dl**2).sum(1) * (1 + (h**2).sum(1)) + (dh**2).sum(1) * (1 + (X**2).sum(1)))
    scale = torch.clamp(clip / torch.sqrt(norm2).clamp_min(1e-300), max=1.0)
    dls, dhs = dl * scale[:, None], dh * scale[:, None]
    return dhs.T @ X, dhs.sum(0), dls.T @ h, dls.sum(0), int((scale < 1).sum())


def per_sample_clipped_sum_ref(W1, b1, W2, b2, X, y, clip: float):
    """Reference of :func:`per_sample_clipped_sum`: one autograd backward per example, clip, sum."""
    clip = _check_mlp(W1, b1, W2, b2, X, y, clip)
    params = [p.detach().clone().requires_grad_(True) for p in (W1, b1, W2, b2)]
    acc = [torch.zeros_like(p) for p in params]
    n_clipped = 0
    for i in range(X.shape[0]):
        logits = torch.relu(X[i] @ params[0].T + params[1]) @ params[2].T + params[3]
        loss = torch.nn.functional.cross_entropy(logits[None], y[i : i + 1])
        gs = torch.autograd.grad(loss, params)
        nrm = torch.sqrt(sum((g**2).sum() for g in gs))
        c = min(1.0, clip / max(float(nrm), 1e-300))
        n_clipped += c < 1
        for a, g in zip(acc, gs):
            a += c * g
    return acc[0], acc[1], acc[2], acc[3], int(n_clipped)


def rdp_subsampled_gaussian(q: float, noise_multiplier: float, orders=tuple(range(2, 129))) -> np.ndarray:
    """Renyi DP of one step of the Poisson-subsampled Gaussian mechanism (sampling rate ``q``, noise standard
    deviation ``noise_multiplier`` times the sensitivity) at integer ``orders``, by the exact binomial expansion
    ``log sum_k C(a, k) (1-q)^(a-k) q^k exp((k^2 - k) / (2 s^2)) / (a - 1)`` (Mironov, Talwar and Zhang 2019)."""
    if not 0 < q <= 1:
        raise ValueError(f"q must be in (0, 1], got {q}")
    s = _positive(noise_multiplier, "noise_multiplier")
    out = []
    for a in orders:
        if int(a) != a or a < 2:
            raise ValueError(f"orders must be integers >= 2, got {a}")
        a = int(a)
        k = np.arange(a + 1)
        logc = np.array([math.lgamma(a + 1) - math.lgamma(j + 1) - math.lgamma(a - j + 1) for j in k])
        if q == 1:
            terms = np.where(k == a, (a * a - a) / (2 * s * s), -np.inf)
        else:
            terms = logc + (a - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * s * s)
        mx = terms.max()
        out.append((mx + math.log(np.exp(terms - mx).sum())) / (a - 1))
    return np.array(out)


def dp_epsilon(q: float, noise_multiplier: float, steps: int, delta: float) -> float:
    """(epsilon, delta)-DP of ``steps`` compositions of the subsampled Gaussian, by RDP composition and the
    conversion ``eps = min_a [steps * rdp(a) + log(1/delta) / (a - 1)]``."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    orders = np.arange(2, 129)
    rdp = rdp_subsampled_gaussian(q, noise_multiplier, tuple(orders))
    return float(np.min(steps * rdp + math.log(1 / delta) / (orders - 1)))


def noise_for_epsilon(q: float, steps: int, delta: float, epsilon: float) -> float:
    """The smallest noise multiplier (to 1e-3 relative) whose :func:`dp_epsilon` is at most ``epsilon``."""
    lo, hi = 0.3, 50.0
    if dp_epsilon(q, hi, steps, delta) > epsilon:
        raise ValueError(f"epsilon={epsilon} needs a noise multiplier above {hi}")
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if dp_epsilon(q, mid, steps, delta) > epsilon else (lo, mid)
    return hi


# ------------------------------------------------------------------------------------------- registry


def _rls_inputs(rng, size):
    X = rng.normal(size=(size, 2))
    Z = np.concatenate([np.ones((size, 1)), X], axis=1)
    G = Z @ rng.normal(size=(3, 2)) + 0.1 * rng.normal(size=(size, 2))
    return {"Z": Z, "G": G, "ridge": 1e-3}


def _nc_inputs(rng, size):
    d = 3
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    return {"x0": rng.normal(size=d) * 2, "Q": Q, "noise": rng.normal(size=(size, 2, d)), "sigma": 0.5,
            "eta": 0.05, "alpha": 0.3, "method": "denoise2"}


def _mlp_inputs(rng, size):
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    return {"W1": t(4, 5), "b1": t(4), "W2": t(3, 4), "b2": t(3), "X": t(size, 5),
            "y": torch.randint(0, 3, (size,), generator=g), "clip": 0.7}


KERNELS = [
    Kernel("gradient_denoise.rls_gradient_estimates", rls_gradient_estimates, rls_gradient_estimates_ref,
           _rls_inputs,
           Contract(args=(Arg("Z", ndim=2), Arg("G", ndim=2, same_dtype_as="Z")),
                    shapes="Z (T, p), G (T, d) -> pred (T, d), theta (p, d)"),
           tol={"float64": (1e-7, 1e-9), "float32": (1e-7, 1e-9)}, benchmark="gradient_denoise.rls_gradient_estimates",
           oracle="sklearn.linear_model.Ridge(fit_intercept=False) on every prefix"),
    Kernel("gradient_denoise.run_nonconvex", run_nonconvex, run_nonconvex_ref, _nc_inputs,
           Contract(args=(Arg("x0", ("float64",), ndim=1), Arg("Q", ("float64",), ndim=2),
                          Arg("noise", ("float64",), ndim=3)),
                    shapes="x0 (d,), Q (d, d), noise (T, 2, d) -> sq (T,), calls"),
           tol={"float64": (1e-8, 1e-10)}, benchmark="gradient_denoise.run_nonconvex"),
    Kernel("gradient_denoise.per_sample_clipped_sum", per_sample_clipped_sum, per_sample_clipped_sum_ref,
           _mlp_inputs,
           Contract(args=(Arg("W1", ndim=2), Arg("b1", ndim=1, same_dtype_as="W1"),
                          Arg("W2", ndim=2, same_dtype_as="W1"), Arg("b2", ndim=1, same_dtype_as="W1"),
                          Arg("X", ndim=2, same_dtype_as="W1"), Arg("y", ("int64",), ndim=1, low=0)),
                    shapes="W1 (h, m), b1 (h,), W2 (k, h), b2 (k,), X (n, m), y (n,) -> sums of clipped gradients"),
           tol={"float64": (1e-9, 1e-11), "float32": (1e-4, 1e-5)}, benchmark="gradient_denoise.per_sample_clipped_sum",
           oracle="torch.autograd per example"),
]
