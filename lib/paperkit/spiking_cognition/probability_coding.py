"""A Bayesian observer of probabilities: noisy encoding ``m = F(p) + noise``, decoding by the posterior mean.

Symbols (our reading of the encoding-decoding account of probability distortion):

* ``p`` in [0, 1], the stimulus (a probability or a relative frequency); ``pi(p)`` the observer's prior;
* ``F`` the encoding, increasing with ``F(0) = 0`` and ``F(1) = 1``; ``F'`` its *precision* (the Fisher information
  of the measurement is ``J(p) = F'(p)^2 / sigma^2``);
* ``m = F(p) + sigma * eps``, ``eps ~ N(0, 1)`` (the measurement is not bounded, the stimulus is);
* ``phat(m) = E[p | m]`` (Bayes risk under squared error), and the report ``r = phat(m) + tau * eta`` (motor noise).

Small-noise bias away from the bounds (see :func:`bias_terms`), for ``phat`` the posterior mean::

    E[phat | p] - p  ~  sigma^2 (log pi)'(p) / F'(p)^2   +   sigma^2 (1 / F'(p)^2)'
                        (prior attraction)                 (likelihood repulsion)

and near 0 and 1 a third part, the *boundary regression* (:func:`boundary_bias`): the posterior is cut by the
bounds, so estimates near a bound move inward even with a uniform prior and a uniform encoding.

Encodings and priors used by the fits are piecewise constant on ``K`` equal bins of [0, 1]: ``F'`` takes the value
``a_k / h`` on bin ``k`` (``a`` on the simplex, ``h = 1 / K``), so ``F`` is piecewise linear
(:func:`encoding_values`).

Kernels (registered in ``KERNELS``): :func:`posterior_mean` / :func:`posterior_mean_ref` (a loop over
measurements) and :func:`trial_loglik` / :func:`trial_loglik_ref` (a loop over trials), both also checked against
scipy.integrate in the tests; :func:`trial_loglik_torch` is the same likelihood in Torch for the fits.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy import integrate, stats
from scipy.special import logsumexp, ndtr, roots_hermitenorm

from paperkit.arrays import real_array

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _positive(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    x = float(x)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be positive and finite, got {x}")
    return x


# ------------------------------------------------------------------------------------------ encodings, weights

def encoding_values(p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``F(p)`` for the piecewise-linear encoding with bin increments ``a`` (shape (K,), non-negative, sum 1) on
    ``K`` equal bins of [0, 1]; ``p`` any shape, values in [0, 1]. Returns an array of ``p``'s shape."""
    a = np.asarray(a, dtype=float)
    K = len(a)
    t = np.clip(np.asarray(p, dtype=float)[..., None] * K - np.arange(K), 0.0, 1.0)
    return (t * a).sum(-1)


def prelec(p: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """Prelec (1998) weighting function ``w(p) = exp(-beta (-ln p)^alpha)``; ``p`` in (0, 1), any shape."""
    p = np.clip(np.asarray(p, dtype=float), 1e-12, 1 - 1e-12)
    return np.exp(-beta * (-np.log(p)) ** alpha)


def llo(p: np.ndarray, gamma: float, log_delta: float) -> np.ndarray:
    """Linear in log-odds weighting: ``logit w(p) = gamma logit p + log delta``; ``p`` in (0, 1), any shape."""
    p = np.clip(np.asarray(p, dtype=float), 1e-12, 1 - 1e-12)
    return 1.0 / (1.0 + np.exp(-(gamma * np.log(p / (1 - p)) + log_delta)))


# ------------------------------------------------------------------------------------------ decoding on a grid

def posterior_mean(m: np.ndarray, p_grid: np.ndarray, F_grid: np.ndarray, log_w: np.ndarray,
                   sigma: float) -> np.ndarray:
    """Posterior mean ``phat(m) = sum_j p_j w_j N(m; F_j, sigma^2) / sum_j w_j N(m; F_j, sigma^2)``.

    ``m``: (M,) measurements; ``p_grid``: (P,) stimulus grid; ``F_grid``: (P,) encoding at the grid, ``F(p_j)``;
    ``log_w``: (P,) log prior weights of the grid points (need not be normalised; ``-inf`` allowed);
    ``sigma``: the encoding noise. Returns (M,)."""
    m = real_array(m, "m", 1)
    p_grid = real_array(p_grid, "p_grid", 1)
    F_grid = real_array(F_grid, "F_grid", 1)
    log_w = np.asarray(log_w, dtype=float)
    if log_w.ndim != 1 or np.isnan(log_w).any() or np.isposinf(log_w).any():
        raise ValueError("log_w must be a 1-D array without NaN or +inf")
    if not (len(p_grid) == len(F_grid) == len(log_w)):
        raise ValueError(f"p_grid, F_grid and log_w must have one length, got {len(p_grid)}, {len(F_grid)}, "
                         f"{len(log_w)}")
    sigma = _positive(sigma, "sigma")
    if len(m) == 0:
        return np.zeros(0)
    if len(p_grid) == 0:
        raise ValueError("p_grid must not be empty")
    lp = log_w[None, :] - 0.5 * ((m[:, None] - F_grid[None, :]) / sigma) ** 2
    lp -= lp.max(1, keepdims=True)
    w = np.exp(lp)
    return (w @ p_grid) / w.sum(1)


def posterior_mean_ref(m, p_grid, F_grid, log_w, sigma):
    """Reference of :func:`posterior_mean`: one measurement at a time, with scipy's logsumexp."""
    m, p_grid, F_grid = (real_array(x, n, 1) for x, n in ((m, "m"), (p_grid, "p_grid"), (F_grid, "F_grid")))
    log_w = np.asarray(log_w, dtype=float)
    if log_w.ndim != 1 or np.isnan(log_w).any() or np.isposinf(log_w).any():
        raise ValueError("log_w must be a 1-D array without NaN or +inf")
    if not (len(p_grid) == len(F_grid) == len(log_w)):
        raise ValueError("p_grid, F_grid and log_w must have one length")
    sigma = _positive(sigma, "sigma")
    out = np.zeros(len(m))
    for i, mi in enumerate(m):
        lp = log_w - 0.5 * ((mi - F_grid) / sigma) ** 2
        out[i] = float(np.exp(lp - logsumexp(lp)) @ p_grid)
    return out


def measurement_grid(sigma: float, n: int) -> np.ndarray:
    """``n`` equally spaced measurements covering ``[-5 sigma, 1 + 5 sigma]`` (where ``m`` lands for ``F`` in
    [0, 1])."""
    sigma = _positive(sigma, "sigma")
    return np.linspace(-5 * sigma, 1 + 5 * sigma, n)


def estimate_moments(p: np.ndarray, p_grid, F_grid, log_w, sigma: float, F_p: np.ndarray | None = None,
                     n_m: int = 801) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of ``phat(m)`` over ``m ~ N(F(p), sigma^2)`` for each stimulus in ``p`` (N,),
    by a trapezoid rule on :func:`measurement_grid`; ``F_p`` is ``F`` at ``p`` (default: interpolated from the
    grid). Returns two (N,) arrays."""
    p = real_array(p, "p", 1)
    F_p = np.interp(p, p_grid, F_grid) if F_p is None else real_array(F_p, "F_p", 1)
    mg = measurement_grid(sigma, n_m)
    ph = posterior_mean(mg, p_grid, F_grid, log_w, sigma)
    k = np.exp(-0.5 * ((mg[None, :] - F_p[:, None]) / sigma) ** 2)
    k /= k.sum(1, keepdims=True)
    mean = k @ ph
    return mean, np.sqrt(np.maximum(k @ ph ** 2 - mean ** 2, 0.0))


# ------------------------------------------------------------------------------------------ bias decomposition

def bias_terms(p: np.ndarray, dF, d2F, dlog_prior, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """The two interior terms of the small-noise bias of the posterior mean, at stimuli ``p`` (N,):
    prior attraction ``sigma^2 (log pi)'(p) / F'(p)^2`` and likelihood repulsion
    ``sigma^2 (1/F'^2)'(p) = -2 sigma^2 F''(p) / F'(p)^3``. ``dF``, ``d2F``, ``dlog_prior``: callables of ``p``."""
    p = real_array(p, "p", 1)
    sigma = _positive(sigma, "sigma")
    f1, f2 = dF(p), d2F(p)
    return sigma ** 2 * dlog_prior(p) / f1 ** 2, -2 * sigma ** 2 * f2 / f1 ** 3


def _cut_normal_mean(m: np.ndarray, sigma: float) -> np.ndarray:
    """Mean of ``N(m, sigma^2)`` cut to [0, 1] (closed form), elementwise over ``m``."""
    a, b = -m / sigma, (1 - m) / sigma
    z = ndtr(b) - ndtr(a)
    dens = np.exp(-0.5 * a ** 2) - np.exp(-0.5 * b ** 2)
    safe = z > 1e-300
    out = np.where(m < 0.5, 0.0, 1.0)
    return np.where(safe, m + sigma * dens / (math.sqrt(2 * math.pi) * np.where(safe, z, 1.0)), out)


def truncated_mean_bias(u: np.ndarray, sigma: float, n_nodes: int = 121) -> np.ndarray:
    """Boundary regression of the simplest observer (uniform encoding, uniform prior on [0, 1]): the posterior given
    ``m`` is ``N(m, sigma^2)`` cut to [0, 1], and this returns ``E[E[u | m]] - u`` over ``m ~ N(u, sigma^2)`` for
    each encoded value in ``u`` (N,), by Gauss-Hermite quadrature with ``n_nodes`` nodes. Returns (N,)."""
    u = real_array(u, "u", 1)
    sigma = _positive(sigma, "sigma")
    x, w = roots_hermitenorm(n_nodes)
    return _cut_normal_mean(u[:, None] + sigma * x[None, :], sigma) @ (w / w.sum()) - u


def truncated_mean_bias_quad(u: float, sigma: float) -> float:
    """:func:`truncated_mean_bias` at one ``u`` by adaptive scipy.integrate.quad (the oracle of the tests)."""
    sigma = _positive(sigma, "sigma")
    f = lambda e: stats.norm.pdf(e) * float(_cut_normal_mean(np.array([u + sigma * e]), sigma)[0])
    return integrate.quad(f, -9, 9, limit=200, epsabs=1e-13)[0] - u


def boundary_bias(p: np.ndarray, F, dF, sigma: float) -> np.ndarray:
    """Boundary regression of an observer with encoding ``F`` (our reading): the cut-normal regression of
    :func:`truncated_mean_bias` in the encoded space ``u = F(p)``, carried back to ``p`` by ``1 / F'(p)``.
    ``p``: (N,); ``F``, ``dF``: callables. Returns (N,)."""
    p = real_array(p, "p", 1)
    return truncated_mean_bias(np.asarray(F(p), dtype=float), sigma) / dF(p)


def exact_mean_quad(p: float, F, prior, sigma: float) -> float:
    """``E[phat(m)]`` for ``m ~ N(F(p), sigma^2)`` with the continuous prior density ``prior`` on [0, 1], by nested
    scipy.integrate.quad (the oracle of the grid decoder; slow: one stimulus per call)."""
    sigma = _positive(sigma, "sigma")

    def phat(m):
        f = lambda x, k: x ** k * prior(x) * math.exp(-0.5 * ((m - F(x)) / sigma) ** 2)
        pts = [min(max(x, 0.0), 1.0) for x in np.linspace(0, 1, 9)]
        num = integrate.quad(f, 0, 1, args=(1,), limit=200, points=pts, epsabs=0, epsrel=1e-10)[0]
        den = integrate.quad(f, 0, 1, args=(0,), limit=200, points=pts, epsabs=0, epsrel=1e-10)[0]
        return num / den

    u = F(p)
    return integrate.quad(lambda e: stats.norm.pdf(e) * phat(u + sigma * e), -8, 8, limit=100, epsabs=1e-11)[0]


# ------------------------------------------------------------------------------------------ likelihood of reports

def trial_loglik(r: np.ndarray, F_stim: np.ndarray, m_grid: np.ndarray, phat: np.ndarray, sigma: float,
                 tau: float) -> np.ndarray:
    """Log likelihood of each report ``r_t`` (T,) given its stimulus' encoded value ``F_stim`` (T,):
    ``log int N(m; F(p_t), sigma^2) N(r_t; phat(m), tau^2) dm``, the integral a normalised sum over the measurement
    grid ``m_grid`` (M,) at which ``phat`` (M,) is given. Returns (T,)."""
    r = real_array(r, "r", 1)
    F_stim = real_array(F_stim, "F_stim", 1)
    m_grid = real_array(m_grid, "m_grid", 1)
    phat = real_array(phat, "phat", 1)
    sigma, tau = _positive(sigma, "sigma"), _positive(tau, "tau")
    if len(r) != len(F_stim):
        raise ValueError(f"r and F_stim must have one length, got {len(r)} and {len(F_stim)}")
    if len(m_grid) != len(phat) or len(m_grid) < 2:
        raise ValueError("m_grid and phat must have one length of at least 2")
    lk = -0.5 * ((m_grid[None, :] - F_stim[:, None]) / sigma) ** 2
    lk -= logsumexp(lk, axis=1, keepdims=True)
    lr = -0.5 * ((r[:, None] - phat[None, :]) / tau) ** 2 - math.log(tau) - LOG_SQRT_2PI
    return logsumexp(lk + lr, axis=1)


def trial_loglik_ref(r, F_stim, m_grid, phat, sigma, tau):
    """Reference of :func:`trial_loglik`: one trial at a time, plain sums of densities (scipy.stats.norm)."""
    r, F_stim, m_grid, phat = (real_array(x, n, 1) for x, n in
                               ((r, "r"), (F_stim, "F_stim"), (m_grid, "m_grid"), (phat, "phat")))
    sigma, tau = _positive(sigma, "sigma"), _positive(tau, "tau")
    if len(r) != len(F_stim):
        raise ValueError("r and F_stim must have one length")
    if len(m_grid) != len(phat) or len(m_grid) < 2:
        raise ValueError("m_grid and phat must have one length of at least 2")
    out = np.zeros(len(r))
    for t in range(len(r)):
        k = stats.norm.pdf(m_grid, F_stim[t], sigma)
        out[t] = math.log(float((k / k.sum()) @ stats.norm.pdf(r[t], phat, tau)))
    return out


def trial_loglik_torch(r: torch.Tensor, F_stim: torch.Tensor, m_grid: torch.Tensor, phat: torch.Tensor,
                       sigma: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """:func:`trial_loglik` in Torch (differentiable in ``F_stim``, ``phat``, ``sigma``, ``tau``); shapes alike."""
    lk = -0.5 * ((m_grid[None, :] - F_stim[:, None]) / sigma) ** 2
    lk = lk - torch.logsumexp(lk, 1, keepdim=True)
    lr = -0.5 * ((r[:, None] - phat[None, :]) / tau) ** 2 - torch.log(tau) - LOG_SQRT_2PI
    return torch.logsumexp(lk + lr, 1)


def posterior_mean_torch(m: torch.Tensor, p_grid: torch.Tensor, F_grid: torch.Tensor, log_w: torch.Tensor,
                         sigma: torch.Tensor) -> torch.Tensor:
    """:func:`posterior_mean` in Torch (differentiable); shapes alike."""
    lp = log_w[None, :] - 0.5 * ((m[:, None] - F_grid[None, :]) / sigma) ** 2
    return torch.softmax(lp, 1) @ p_grid


# ------------------------------------------------------------------------------------------ registry

def _pm_inputs(rng, size):
    P = 60
    pg = (np.arange(P) + 0.5) / P
    a = rng.dirichlet(np.ones(6))
    return dict(m=rng.uniform(-0.3, 1.3, size), p_grid=pg, F_grid=encoding_values(pg, a),
                log_w=np.log(rng.dirichlet(np.ones(P))), sigma=float(rng.uniform(0.03, 0.2)))


def _ll_inputs(rng, size):
    sigma = float(rng.uniform(0.04, 0.15))
    mg = measurement_grid(sigma, 80)
    return dict(r=rng.uniform(-0.1, 1.1, size), F_stim=rng.uniform(0, 1, size), m_grid=mg,
                phat=np.clip(mg, 0.02, 0.98), sigma=sigma, tau=float(rng.uniform(0.02, 0.1)))


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("probability_coding.posterior_mean", posterior_mean, posterior_mean_ref, _pm_inputs,
               Contract(args=(Arg("m", ("float64",), 1), Arg("p_grid", ("float64",), 1),
                              Arg("F_grid", ("float64",), 1)), empty="value",
                        empty_value=lambda kw: np.zeros(0),
                        shapes="m: (M,); p_grid, F_grid, log_w: (P,); returns (M,)"),
               tol={"float64": (1e-10, 1e-12)}, benchmark="probability_coding.posterior_mean",
               oracle="nested scipy.integrate.quad of the continuous posterior mean"),
        Kernel("probability_coding.trial_loglik", trial_loglik, trial_loglik_ref, _ll_inputs,
               Contract(args=(Arg("r", ("float64",), 1), Arg("F_stim", ("float64",), 1),
                              Arg("m_grid", ("float64",), 1), Arg("phat", ("float64",), 1)), empty="value",
                        empty_value=lambda kw: np.zeros(0),
                        shapes="r, F_stim: (T,); m_grid, phat: (M,); returns (T,)"),
               tol={"float64": (1e-10, 1e-12)}, benchmark="probability_coding.trial_loglik",
               oracle="scipy.integrate.quad of N(m; F, sigma) N(r; phat(m), tau) over m"),
    ]


KERNELS = _registry()
