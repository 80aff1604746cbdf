"""The Bayesian learning rule with a Tsallis / Fenchel-Young discrepancy (our reading of the generalized BLR).

Objective, for a loss ``l(theta)`` (negative log-likelihood) and a prior ``p0`` in the same q-Gaussian family::

    F(p) = E_p[l] + D_q(p; p0),   D_q(p; p0) = Omega_q(p) - Omega_q(p0) - <lambda0, mu(p) - mu(p0)>,

with ``Omega_q`` the Tsallis negentropy (:mod:`paperkit.learning_dynamics.q_gaussian`), ``mu = E_p[T]`` the
ordinary moments of ``T = (theta, theta^2)`` and ``lambda0 = (S0 m0, -S0/2)``. ``D_q`` is the Fenchel-Young
discrepancy of ``Omega_q``: non-negative, zero at ``p = p0``, and the KL divergence at ``q = 1``. On the q-Gaussian
family ``p_lambda`` the moments ``mu`` are dual coordinates (``grad_mu Omega_q(p_mu) = lambda``), so mirror descent in
``mu`` is the additive update of the Bayesian learning rule::

    lambda <- (1 - rho) lambda + rho (lambda0 - grad_mu E_p[l]).

With ``lambda = (S m, -S/2)`` and the Stein identity of the q-Gaussian (``grad p = -S u p^q``), the gradient in ``mu``
is ``(E_p[grad l] - 2 m h, h)`` with ``h = E_escort[hess l] / 2`` under the escort ``p^(2-q) / int p^(2-q)``,
which gives a Newton-like step (:func:`generalized_blr_step`)::

    S <- (1 - rho) S + rho (S0 + E_escort[hess l]),     m <- m - rho (E_p[grad l] + S0 (m - m0)) / S.

At ``q = 1`` the escort is ``p`` itself and this is the variational online Newton (VON) update of the classical BLR.
The *KL rule applied to a q-Gaussian* (``hessian_under="p"``: the Hessian averaged under ``p`` instead of the
escort) is the natural wrong rule; the chapter uses it as the control.

Kernels (registered in ``KERNELS``): :func:`logistic_grad_hess` (vectorised) / :func:`logistic_grad_hess_ref`
(loop over draws); :func:`generalized_blr_step` / :func:`generalized_blr_step_ref` (same rule, loop over draws).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy import integrate, optimize
from scipy.special import expit, log_expit, roots_hermite, roots_jacobi

from paperkit.arrays import real_array
from paperkit.learning_dynamics import q_gaussian as qg


# ---------------------------------------------------------------------------------------------- 1-D, exact

def omega(p_vals_fn, lo, hi, q: float) -> float:
    """Tsallis negentropy ``Omega_q`` of a 1-D density given as a callable on ``[lo, hi]`` (scipy.integrate.quad)."""
    if q == 1.0:
        f = lambda x: (lambda p: p * math.log(p) if p > 0 else 0.0)(p_vals_fn(x))
        return integrate.quad(f, lo, hi, limit=400, epsabs=1e-13, epsrel=1e-12)[0]
    ip = integrate.quad(lambda x: p_vals_fn(x) ** (2.0 - q), lo, hi, limit=400, epsabs=1e-13, epsrel=1e-12)[0]
    return (ip - 1.0) / ((2.0 - q) * (1.0 - q))


def _pdf1(m: float, s: float, q: float):
    mm, ss = np.array([m]), np.array([s])
    return lambda x: math.exp(qg.q_gaussian_logpdf(np.array([[x]]), mm, ss, q)[0])


def _limits(m: float, s: float, q: float):
    if q < 1.0:
        r = float(qg.support_radius(q, np.array([s]))[0])
        return m - r, m + r
    return -np.inf, np.inf


def fy_objective_1d(m: float, s: float, q: float, loss, m0: float, s0: float) -> float:
    """``F = E_p[l] + D_q(p; p0)`` for the 1-D q-Gaussian ``p`` (centre ``m``, ``S = s``) and prior ``p0`` (``m0``,
    ``s0``), every integral by scipy.integrate.quad (no gradient formula involved). ``loss`` maps an array of
    parameter values to losses; it may return ``inf`` (a likelihood of bounded support)."""
    pdf, pdf0 = _pdf1(m, s, q), _pdf1(m0, s0, q)
    lo, hi = _limits(m, s, q)
    lo0, hi0 = _limits(m0, s0, q)
    kw = dict(limit=400, epsabs=1e-13, epsrel=1e-12)
    el = integrate.quad(lambda x: pdf(x) * float(loss(np.array([x]))[0]), lo, hi, **kw)[0]
    mu1 = integrate.quad(lambda x: pdf(x) * x, lo, hi, **kw)[0]
    mu2 = integrate.quad(lambda x: pdf(x) * x * x, lo, hi, **kw)[0]
    nu1 = integrate.quad(lambda x: pdf0(x) * x, lo0, hi0, **kw)[0]
    nu2 = integrate.quad(lambda x: pdf0(x) * x * x, lo0, hi0, **kw)[0]
    lin = s0 * m0 * (mu1 - nu1) - 0.5 * s0 * (mu2 - nu2)
    return el + omega(pdf, lo, hi, q) - omega(pdf0, lo0, hi0, q) - lin


def fy_objective_1d_nodes(m: float, s: float, q: float, loss, m0: float, s0: float, n_nodes: int = 200) -> float:
    """:func:`fy_objective_1d` with every expectation by fixed Gauss-Jacobi / Gauss-Hermite quadrature on the
    q-Gaussian (fast; agrees with the scipy.integrate.quad version to about 1e-10). The negentropy comes from
    ``E_p[p^(1-q)]`` (``E_p[log p]`` at ``q = 1``) with ``p`` evaluated by
    :func:`~paperkit.learning_dynamics.q_gaussian.q_gaussian_logpdf`; no gradient formula is involved."""
    def parts(mm, ss):
        x, w = _nodes_1d(q, n_nodes, False)
        th = mm + x * _node_scale(q, ss)
        lp = qg.q_gaussian_logpdf(th[:, None], np.array([mm]), np.array([ss]), q)
        om = float(w @ lp) if q == 1.0 else (float(w @ np.exp((1.0 - q) * lp)) - 1.0) / ((2.0 - q) * (1.0 - q))
        return th, w, om
    th, w, om = parts(m, s)
    th0, w0, om0 = parts(m0, s0)
    el = float(w @ loss(th))
    lin = s0 * m0 * (w @ th - w0 @ th0) - 0.5 * s0 * (w @ th ** 2 - w0 @ th0 ** 2)
    return el + om - om0 - float(lin)


def minimise_objective_1d(q: float, loss, m0: float, s0: float, start=(0.0, 1.0), objective=None):
    """Direct minimisation of the objective (default :func:`fy_objective_1d_nodes`) over ``(m, log s)`` by
    Nelder-Mead, restarted twice from its own result. Returns ``(m, s, F)``."""
    obj = fy_objective_1d_nodes if objective is None else objective
    f = lambda z: obj(z[0], math.exp(z[1]), q, loss, m0, s0)
    z = np.array([start[0], math.log(start[1])])
    for _ in range(3):
        res = optimize.minimize(f, z, method="Nelder-Mead",
                                options={"xatol": 1e-12, "fatol": 1e-16, "maxiter": 4000, "maxfev": 8000})
        z = res.x
    return float(z[0]), float(math.exp(z[1])), float(res.fun)


@functools.lru_cache(maxsize=64)
def log_mass_below(x0: float, m: float, s: float, q: float) -> float:
    """Log of the probability that the 1-D q-Gaussian (centre ``m``, ``S = s``) puts below ``x0``: exact
    (``log Phi`` for the Gaussian, the t or scaled Beta cdf otherwise); ``-inf`` when the mass is exactly zero."""
    from scipy import stats

    sp = qg.shape_params(q, 1, math.log(s))
    if sp["kind"] == "gauss":
        return float(stats.norm.logcdf((x0 - m) * math.sqrt(s)))
    if sp["kind"] == "t":
        sc = math.sqrt(math.exp(sp["log_2tau"]) / sp["nu"] / s)
        return float(stats.t(df=sp["nu"]).logcdf((x0 - m) / sc))
    r = float(qg.support_radius(q, np.array([s]))[0])
    if x0 <= m - r:
        return -math.inf
    return float(stats.beta(sp["a"] + 1, sp["a"] + 1, loc=m - r, scale=2 * r).logcdf(x0))


@functools.lru_cache(maxsize=64)
def _nodes_1d(q: float, n: int, escort: bool):
    """Quadrature nodes (in whitened units w = sqrt(s)(theta - m) divided by the shape scale) and weights for the
    1-D q-Gaussian (or its escort): Gauss-Jacobi for q < 1 and for the t form, Gauss-Hermite for q = 1."""
    if q == 1.0:
        x, w = roots_hermite(n)
        return _frozen(x * math.sqrt(2.0), w / w.sum())
    sp = qg.shape_params(q, 1, 0.0)
    if q < 1.0:
        a = sp["a"] + (1.0 if escort else 0.0)
        x, w = roots_jacobi(n, a, a)
        return _frozen(x * math.exp(0.5 * sp["log_r2"]), w / w.sum())
    nu = sp["nu"] - (2.0 if escort else 0.0)
    u, w = roots_jacobi(n, (nu - 2.0) / 2.0, (nu - 2.0) / 2.0)   # u = t / sqrt(nu + t^2), t ~ Student t_nu
    t = math.sqrt(nu) * u / np.sqrt(1.0 - u * u)
    return _frozen(t * math.sqrt(math.exp(sp["log_2tau"]) / nu), w / w.sum())


def _frozen(*arrays):
    for a in arrays:
        a.setflags(write=False)
    return arrays


def blr_1d(q: float, grad, hess, m0: float, s0: float, rho: float = 0.5, steps: int = 400, n_nodes: int = 200,
           m_init: float | None = None, s_init: float | None = None, hessian_under: str = "escort",
           tol: float = 1e-14):
    """Run the generalized BLR (:func:`generalized_blr_step`'s rule) in 1-D with expectations by quadrature.

    ``grad``/``hess``: the loss's first and second derivatives (vectorised). ``hessian_under``: ``"escort"`` (the
    rule) or ``"p"`` (the KL rule on a q-Gaussian, the control). Returns ``(m, s, iterations)``.
    """
    if hessian_under not in ("escort", "p"):
        raise ValueError(f"hessian_under must be 'escort' or 'p', got {hessian_under!r}")
    if not 0 < rho <= 1:
        raise ValueError(f"rho must lie in (0, 1], got {rho}")
    xp, wp = _nodes_1d(q, n_nodes, False)
    xe, we = _nodes_1d(q, n_nodes, hessian_under == "escort")
    m = m0 if m_init is None else m_init
    s = s0 if s_init is None else s_init
    for it in range(1, steps + 1):
        # whitened nodes scale with det(S)^(-1/(2a+d)) etc.; recompute via the shape at this s
        sc = _node_scale(q, s)
        g = float(wp @ grad(m + xp * sc))
        h = float(we @ hess(m + xe * sc))
        s_new = (1 - rho) * s + rho * (s0 + h)
        m_new = m - rho * (g + s0 * (m - m0)) / s_new
        done = abs(m_new - m) < tol * (1 + abs(m)) and abs(s_new - s) < tol * (1 + s)
        m, s = m_new, s_new
        if done:
            break
    return m, s, it


def _node_scale(q: float, s: float) -> float:
    """Factor taking the nodes of :func:`_nodes_1d` (computed at ``s = 1``) to theta units at ``s``."""
    if q == 1.0:
        return 1.0 / math.sqrt(s)
    sp1, sps = qg.shape_params(q, 1, 0.0), qg.shape_params(q, 1, math.log(s))
    key = "log_r2" if q < 1.0 else "log_2tau"
    return math.exp(0.5 * (sps[key] - sp1[key])) / math.sqrt(s)


# ---------------------------------------------------------------------------------------------- logistic loss

def _check_lr(theta, X, y):
    theta = real_array(theta, "theta", 2)
    X = real_array(X, "X", 2)
    y = real_array(y, "y", 1)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y must have the same number of rows, got {X.shape[0]} and {y.shape[0]}")
    if theta.shape[1] != X.shape[1]:
        raise ValueError(f"theta must be (n_draws, d) with d = X.shape[1] = {X.shape[1]}, got {theta.shape}")
    if ((y != 0) & (y != 1)).any():
        raise ValueError("y must hold labels 0 or 1")
    if theta.dtype != X.dtype:
        raise TypeError(f"theta must have the dtype of X, got {theta.dtype} and {X.dtype}")
    return theta, X, y


def logistic_grad_hess(theta, X, y):
    """Summed logistic loss ``l(theta) = sum_n [log(1 + e^{z_n}) - y_n z_n]``, ``z = X theta``, at each row of
    ``theta`` (n_draws, d): returns ``(loss (n_draws,), grad (n_draws, d), diag Hessian (n_draws, d))``. The
    Hessian of the logistic loss equals its Gauss-Newton matrix."""
    theta, X, y = _check_lr(theta, X, y)
    z = theta @ X.T                                   # (k, N)
    pr = expit(z)
    loss = -(y * log_expit(z) + (1 - y) * log_expit(-z)).sum(1)
    grad = (pr - y) @ X
    hess = (pr * (1 - pr)) @ (X * X)
    return loss, grad, hess


def logistic_grad_hess_ref(theta, X, y):
    """Reference for :func:`logistic_grad_hess`: one draw and one data point at a time."""
    theta, X, y = _check_lr(theta, X, y)
    k, d = theta.shape
    loss, grad, hess = np.zeros(k), np.zeros((k, d)), np.zeros((k, d))
    for i in range(k):
        for n in range(X.shape[0]):
            z = float(X[n] @ theta[i])
            pr = 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
            loss[i] += (max(z, 0.0) + math.log1p(math.exp(-abs(z)))) - y[n] * z
            grad[i] += (pr - y[n]) * X[n]
            hess[i] += pr * (1 - pr) * X[n] ** 2
    return loss, grad, hess


# ---------------------------------------------------------------------------------------------- d-dim step

def _check_step(m, s, X, y, q, rho, s0):
    m, s = qg._check_ms(m, s)
    X = real_array(X, "X", 2)
    y = real_array(y, "y", 1)
    if X.shape[1] != m.shape[0]:
        raise ValueError(f"X must have d = len(m) = {m.shape[0]} columns, got {X.shape}")
    if X.dtype != m.dtype:
        raise TypeError(f"X must have the dtype of m, got {X.dtype} and {m.dtype}")
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0 < rho <= 1:
        raise ValueError(f"rho must lie in (0, 1], got {rho!r}")
    if isinstance(s0, bool) or not isinstance(s0, (int, float)) or not s0 > 0 or not math.isfinite(s0):
        raise ValueError(f"s0 must be a positive number, got {s0!r}")
    if q >= qg.max_q(m.shape[0]):
        raise ValueError(f"q must be below 1 + 2/(d+2) = {qg.max_q(m.shape[0]):.4f} for d = {m.shape[0]}, got {q}")
    return m, s, X, y


def generalized_blr_step(m, s, X, y, q, rho, s0, rng: np.random.Generator, n_mc: int = 5,
                         hessian_under: str = "escort"):
    """One generalized BLR step for Bayesian logistic regression with a d-dimensional elliptical q-Gaussian
    posterior (centre ``m``, diagonal ``S = diag(s)``) and prior ``q``-Gaussian (centre 0, ``S0 = s0 I``).

    ``E_p[grad l]`` from ``n_mc`` draws of ``p``; ``E_escort[diag hess l]`` from ``n_mc`` draws of the escort
    (``hessian_under="p"``: from draws of ``p``, the KL rule on a q-Gaussian). Returns ``(m_new, s_new)``.
    """
    m, s, X, y = _check_step(m, s, X, y, q, rho, s0)
    if hessian_under not in ("escort", "p"):
        raise ValueError(f"hessian_under must be 'escort' or 'p', got {hessian_under!r}")
    th_p = qg.q_gaussian_sample(m, s, q, n_mc, rng)
    th_e = qg.q_gaussian_sample(m, s, q, n_mc, rng, escort=hessian_under == "escort")
    _, g, _ = logistic_grad_hess(th_p.astype(X.dtype), X, y)
    _, _, h = logistic_grad_hess(th_e.astype(X.dtype), X, y)
    s_new = (1 - rho) * s + rho * (s0 + h.mean(0))
    m_new = m - rho * (g.mean(0) + s0 * m) / s_new
    return m_new, s_new


def generalized_blr_step_ref(m, s, X, y, q, rho, s0, rng: np.random.Generator, n_mc: int = 5,
                             hessian_under: str = "escort"):
    """Reference for :func:`generalized_blr_step`: the same draws, the gradient and Hessian one draw at a time
    (:func:`logistic_grad_hess_ref`)."""
    m, s, X, y = _check_step(m, s, X, y, q, rho, s0)
    th_p = qg.q_gaussian_sample(m, s, q, n_mc, rng)
    th_e = qg.q_gaussian_sample(m, s, q, n_mc, rng, escort=hessian_under == "escort")
    g = np.zeros(m.shape[0])
    h = np.zeros(m.shape[0])
    for i in range(n_mc):
        g += logistic_grad_hess_ref(th_p[i:i + 1].astype(X.dtype), X, y)[1][0] / n_mc
        h += logistic_grad_hess_ref(th_e[i:i + 1].astype(X.dtype), X, y)[2][0] / n_mc
    s_new = (1 - rho) * s + rho * (s0 + h)
    m_new = m - rho * (g + s0 * m) / s_new
    return m_new, s_new


def train_blr(X, y, q, rng, steps: int = 300, rho: float = 0.1, s0: float = 1.0, n_mc: int = 5,
              hessian_under: str = "escort"):
    """Generalized BLR from the prior (``m = 0``, ``s = s0``) for ``steps`` steps; returns ``(m, s)``."""
    m, s = np.zeros(X.shape[1]), np.full(X.shape[1], float(s0))
    for _ in range(steps):
        m, s = generalized_blr_step(m, s, X, y, q, rho, s0, rng, n_mc, hessian_under)
    return m, s


def predictive(X, m, s, q, rng, n_samples: int = 200) -> np.ndarray:
    """Posterior predictive ``P(y = 1 | x)`` averaged over ``n_samples`` draws of the q-Gaussian posterior."""
    th = qg.q_gaussian_sample(m, s, q, n_samples, rng)
    return expit(th @ X.T).mean(0)


def map_logistic(X, y, s0: float = 1.0) -> np.ndarray:
    """MAP weights of logistic regression with the Gaussian prior ``N(0, I/s0)`` (scipy L-BFGS)."""
    f = lambda w: (float(logistic_grad_hess(w[None], X, y)[0][0]) + 0.5 * s0 * w @ w,
                   logistic_grad_hess(w[None], X, y)[1][0] + s0 * w)
    return optimize.minimize(f, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B",
                             options={"gtol": 1e-10, "maxiter": 2000}).x


def ece(prob, y, bins: int = 10) -> float:
    """Expected calibration error of binary predictions (confidence of the predicted class, equal-width bins)."""
    conf = np.maximum(prob, 1 - prob)
    correct = ((prob >= 0.5) == (y == 1)).astype(float)
    edges = np.linspace(0.5, 1.0, bins + 1)
    idx = np.clip(np.digitize(conf, edges) - 1, 0, bins - 1)
    return float(sum(abs(correct[idx == b].mean() - conf[idx == b].mean()) * (idx == b).mean()
                     for b in range(bins) if (idx == b).any()))


# ----------------------------------------------------------------------------------------------------- registry

def _lr_inputs(rng, size):
    d = 3
    return {"theta": rng.normal(size=(size, d)), "X": rng.normal(size=(6, d)),
            "y": (rng.random(6) < 0.5).astype(np.float64)}


def _step_inputs(rng, size):
    d = 3
    return {"m": rng.normal(size=d) * 0.1, "s": rng.uniform(1.0, 3.0, size=d), "X": rng.normal(size=(size, d)),
            "y": (rng.random(size) < 0.5).astype(np.float64), "q": 0.7, "rho": 0.5, "s0": 1.0,
            "rng": np.random.default_rng(int(rng.integers(1 << 30))), "n_mc": 3}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("tsallis_blr.logistic_grad_hess", logistic_grad_hess, logistic_grad_hess_ref, _lr_inputs,
               Contract(args=(Arg("theta", ("float64", "float32"), 2, same_dtype_as="X"),
                              Arg("X", ("float64", "float32"), 2),
                              Arg("y", ("float64",), 1, low=0.0, high=1.0)), empty="value",
                        empty_value=lambda kw: (np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3))),
                        shapes="theta: (n_draws, d); X: (N, d); y: (N,) in {0, 1}"),
               tol={"float64": (1e-10, 1e-10)}, benchmark="tsallis_blr.logistic_grad_hess",
               oracle="torch.autograd gradient and Hessian diagonal"),
        Kernel("tsallis_blr.generalized_blr_step", generalized_blr_step, generalized_blr_step_ref, _step_inputs,
               Contract(args=(Arg("m", ("float64",), 1), Arg("s", ("float64",), 1, low=1e-300),
                              Arg("X", ("float64",), 2), Arg("y", ("float64",), 1, low=0.0, high=1.0)),
                        empty="value", empty_value=None,
                        shapes="m, s: (d,); X: (N, d); y: (N,); q below 1 + 2/(d+2)"),
               tol={"float64": (1e-10, 1e-10)}, benchmark="tsallis_blr.generalized_blr_step",
               oracle="closed-form conjugate update (one step, rho = 1, quadratic loss) and scipy.optimize"),
    ]


KERNELS = _registry()
