"""Learners in the discretised two-bidder first-price auction of :mod:`paperkit.games_markets.equilibrium_lp`, and
the grid sweep of equilibrium-set ranges.

A learner holds, for each bidder i and own value v, a mixed bid ``beta[i, v, :]`` on the simplex. At every step each
bidder sees its interim utility gradient ``g[i, v, b] = sum_c U[v, b, c] q_j[c]`` (``q_j`` the other's bid
distribution averaged over its prior) and both update at once:

* :func:`pga_learn` (Numba) and :func:`pga_learn_ref` (NumPy): projected gradient ascent,
  ``beta <- proj_simplex(beta + lr g)``;
* :func:`hedge_learn`: multiplicative weights, ``beta <- beta exp(lr g) / Z`` (the standard no-regret learner that
  is not a gradient method on the simplex).

Each returns the time average of the played product strategies as an LP point ``y`` (flat, (m, m, n, n):
``y[v1, v2, b1, b2] = mean_t beta_t[0, v1, b1] beta_t[1, v2, b2]``) and the last strategies. The average satisfies
the value-marginal and type-agnostic rows exactly; the deviation rows measure how far it is from each equilibrium set.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from paperkit.games_markets import equilibrium_lp as el
from paperkit.games_markets.simplex_projection import project_simplex_ref


def _check_learner(prior, beta0, steps, lr):
    p = el.check_prior(prior)
    if not isinstance(beta0, np.ndarray):
        raise TypeError(f"beta0 must be a NumPy array, got {type(beta0).__name__}")
    if beta0.dtype not in (np.float32, np.float64):
        raise TypeError(f"beta0 must be float32 or float64, got {beta0.dtype}")
    if beta0.ndim != 3 or beta0.shape[0] != 2 or beta0.shape[1] != p.size:
        raise ValueError(f"beta0 must have shape (2, m, n) with m = {p.size}, got {beta0.shape}")
    if beta0.shape[2] < 1:
        raise ValueError("beta0 has no bids")
    if not np.all(np.isfinite(beta0)):
        raise ValueError("beta0 has non-finite entries")
    if beta0.min() < 0 or beta0.max() > 1 or np.abs(beta0.sum(-1) - 1).max() > 1e-6:
        raise ValueError("beta0 rows must be probability vectors (entries in [0, 1] summing to 1)")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if not np.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and positive, got {lr!r}")
    return p, beta0.astype(np.float64), int(steps), float(lr)


@njit(cache=True)
def _pga(p, U, beta, steps, lr):
    m, n = beta.shape[1], beta.shape[2]
    Y = np.zeros((m, m, n, n))
    q = np.empty((2, n))
    u = np.empty(n)
    for _ in range(steps):
        for i in range(2):
            for c in range(n):
                s = 0.0
                for w in range(m):
                    s += p[w] * beta[i, w, c]
                q[i, c] = s
        for v1 in range(m):
            for v2 in range(m):
                for b1 in range(n):
                    a = beta[0, v1, b1]
                    for b2 in range(n):
                        Y[v1, v2, b1, b2] += a * beta[1, v2, b2]
        new = np.empty_like(beta)
        for i in range(2):
            j = 1 - i
            for v in range(m):
                for b in range(n):
                    g = 0.0
                    for c in range(n):
                        g += U[v, b, c] * q[j, c]
                    new[i, v, b] = beta[i, v, b] + lr * g
                # project the row onto the simplex (sort-based)
                for b in range(n):
                    u[b] = new[i, v, b]
                u.sort()
                s, theta = 0.0, 0.0
                for k in range(1, n + 1):
                    s += u[n - k]
                    t = (s - 1.0) / k
                    if u[n - k] - t > 0.0:
                        theta = t
                for b in range(n):
                    x = new[i, v, b] - theta
                    new[i, v, b] = x if x > 0.0 else 0.0
        beta = new
    return Y / steps, beta


def pga_learn(prior, beta0, steps: int = 2000, lr: float = 0.05):
    """Simultaneous projected gradient ascent from ``beta0`` (shape (2, m, n)): ``(y_avg (m*m*n*n,), beta_last)``."""
    p, beta, steps, lr = _check_learner(prior, beta0, steps, lr)
    U = el.utility(p.size, beta.shape[2])
    Y, last = _pga(p, U, beta.copy(), steps, lr)
    return Y.ravel(), last


def pga_learn_ref(prior, beta0, steps: int = 2000, lr: float = 0.05):
    """The NumPy reference of :func:`pga_learn` (same contract), with :func:`project_simplex_ref`."""
    p, beta, steps, lr = _check_learner(prior, beta0, steps, lr)
    m, n = beta.shape[1:]
    U = el.utility(m, n)
    Y = np.zeros((m, m, n, n))
    for _ in range(steps):
        q = np.einsum("w,iwc->ic", p, beta)
        Y += beta[0][:, None, :, None] * beta[1][None, :, None, :]
        g = np.stack([U @ q[1], U @ q[0]])                     # (2, m, n)
        beta = project_simplex_ref((beta + lr * g).reshape(2 * m, n)).reshape(2, m, n)
    return (Y / steps).ravel(), beta


def hedge_learn(prior, beta0, steps: int = 2000, lr: float = 0.5):
    """Simultaneous Hedge (multiplicative weights on the interim utilities): ``(y_avg, beta_last)``."""
    p, beta, steps, lr = _check_learner(prior, beta0, steps, lr)
    m, n = beta.shape[1:]
    U = el.utility(m, n)
    Y = np.zeros((m, m, n, n))
    logw = np.log(np.maximum(beta, 1e-300))
    for _ in range(steps):
        q = np.einsum("w,iwc->ic", p, beta)
        Y += beta[0][:, None, :, None] * beta[1][None, :, None, :]
        logw = logw + lr * np.stack([U @ q[1], U @ q[0]])
        logw -= logw.max(-1, keepdims=True)
        beta = np.exp(logw)
        beta /= beta.sum(-1, keepdims=True)
    return (Y / steps).ravel(), beta


def product_point(beta) -> np.ndarray:
    """The LP point ``y`` of one pair of mixed strategies ``beta`` (2, m, n) played independently."""
    beta = np.asarray(beta, dtype=np.float64)
    return (beta[0][:, None, :, None] * beta[1][None, :, None, :]).ravel()


def pure_strategy(m: int, n_bids: int, bid_of_value) -> np.ndarray:
    """``beta`` (2, m, n) of both bidders bidding the grid point nearest ``bid_of_value(v)`` (below, on ties)."""
    v, b = el.value_grid(m), el.bid_grid(n_bids)
    k = np.clip(np.rint(np.asarray(bid_of_value(v)) * n_bids - 1e-9).astype(int), 0, n_bids - 1)
    beta = np.zeros((2, m, n_bids))
    beta[:, np.arange(m), k] = 1.0
    return beta


def mean_bid(beta, n_bids: int) -> np.ndarray:
    """Expected bid per bidder and value, (2, m)."""
    return np.asarray(beta) @ el.bid_grid(n_bids)


# ----------------------------------------------------------------------------------------------------- sweep

def range_table(grids, gamma: float, families=el.FAMILIES, objectives=("revenue",), method: str = "highs"):
    """``{(family, objective, (m, n)): (min, max)}`` over grids for one prior exponent; the minimising and
    maximising LP points of every revenue range are kept under ``(family, "revenue_points", (m, n))``."""
    out = {}
    for m, n in grids:
        p = el.power_prior(m, gamma)
        objs = {"revenue": el.revenue_objective(p, n), "bid_gap": el.bid_gap_objective(p, n, gamma)}
        for fam in families:
            lp = el.build_lp(p, n, fam)
            for name in objectives:
                if name not in objs:
                    raise ValueError(f"objectives: unknown objective {name!r}")
                lo, x_lo = el.lp_solve(objs[name], lp, "min", method)
                hi, x_hi = el.lp_solve(objs[name], lp, "max", method)
                out[(fam, name, (m, n))] = (lo, hi)
                if name == "revenue":
                    out[(fam, "revenue_points", (m, n))] = (x_lo, x_hi)
    return out


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        m = size
        beta0 = rng.dirichlet(np.ones(4), size=(2, m)) if m else np.zeros((2, 0, 4))
        return {"prior": rng.uniform(0.2, 1.0, size=m), "beta0": beta0, "steps": 30, "lr": 0.1}

    return [Kernel("bscce_auction.pga_learn", pga_learn, pga_learn_ref, inputs,
                   Contract(args=(Arg("prior", ndim=1, low=0.0), Arg("beta0", ndim=3, low=0.0, high=1.0)),
                            empty="error", shapes="prior: (m,), beta0: (2, m, n) -> y (m*m*n*n,), beta (2, m, n)"),
                   tol={"float64": (1e-9, 1e-12), "float32": (1e-6, 1e-9)},
                   benchmark="pga_learn (Numba)",
                   oracle="fixed point at a strict pure Nash equilibrium; exact regret bound of online gradient ascent")]


KERNELS = _registry()
