"""A simulated review process with a planted submission-time leniency effect, and the within-paper timing slope.

Our reading of the paper's setting (the real reviews are not available offline). For P papers with R reviews each:

    q_p ~ N(0, 1)                      latent quality; accepted iff q_p > accept_q
    t_pr ~ Beta(2, 1.5) on [0, 1]      review time, 1 = the deadline
    s_pr = q_p + beta t_pr + sd(t_pr) e_pr,   sd(t) = sigma (1 + gamma t),   e_pr ~ N(0, 1)

so ``beta`` is the leniency (score inflation per unit of time) and ``gamma`` the loss of thoroughness (noise growth);
beta = gamma = 0 is the null process without a timing effect.

``simulate_reviews`` draws all reviews at once; ``simulate_reviews_ref`` draws the same numbers paper by paper in a
plain loop (the same generator calls in the same order per block, hence identical output).
``fe_slope(s, t, paper)`` is the paper-fixed-effects OLS slope of s on t (within-paper demeaning, shapes (N,));
``fe_slope_ref`` computes it with an explicit loop over papers. Tests compare both with least squares (scipy) with paper
dummies.
"""
from __future__ import annotations

import numpy as np

from paperkit.contracts import Arg, Contract, Kernel


def _check_sim(n_papers, reviews_per_paper, beta, gamma, sigma, rng):
    if int(n_papers) != n_papers or n_papers < 1:
        raise ValueError(f"n_papers must be a positive integer, got {n_papers!r}")
    if int(reviews_per_paper) != reviews_per_paper or reviews_per_paper < 2:
        raise ValueError(f"reviews_per_paper must be an integer >= 2, got {reviews_per_paper!r}")
    for name, v in (("beta", beta), ("gamma", gamma), ("sigma", sigma)):
        if not np.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v!r}")
    if gamma < 0 or sigma <= 0:
        raise ValueError(f"gamma must be >= 0 and sigma > 0, got gamma={gamma!r}, sigma={sigma!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")


def simulate_reviews(n_papers, reviews_per_paper, beta, gamma, rng, sigma=0.6, accept_q=0.8):
    """Return dict with ``paper`` (N,) int64, ``q`` (P,), ``accept`` (P,) bool, ``t`` (N,), ``s`` (N,); N = P R."""
    _check_sim(n_papers, reviews_per_paper, beta, gamma, sigma, rng)
    P, R = int(n_papers), int(reviews_per_paper)
    q = rng.standard_normal(P)
    t = rng.beta(2.0, 1.5, size=(P, R))
    e = rng.standard_normal((P, R))
    s = q[:, None] + beta * t + sigma * (1.0 + gamma * t) * e
    return {"paper": np.repeat(np.arange(P), R), "q": q, "accept": q > accept_q,
            "t": t.ravel(), "s": s.ravel()}


def simulate_reviews_ref(n_papers, reviews_per_paper, beta, gamma, rng, sigma=0.6, accept_q=0.8):
    """Plain-loop reference of :func:`simulate_reviews` (same draws, same output)."""
    _check_sim(n_papers, reviews_per_paper, beta, gamma, sigma, rng)
    P, R = int(n_papers), int(reviews_per_paper)
    q = rng.standard_normal(P)
    t = rng.beta(2.0, 1.5, size=(P, R))
    e = rng.standard_normal((P, R))
    paper, tt, ss = [], [], []
    for p in range(P):
        for r in range(R):
            paper.append(p)
            tt.append(t[p, r])
            ss.append(q[p] + beta * t[p, r] + sigma * (1.0 + gamma * t[p, r]) * e[p, r])
    return {"paper": np.array(paper, dtype=np.int64), "q": q, "accept": q > accept_q,
            "t": np.array(tt), "s": np.array(ss)}


def _check_fe(s, t, paper):
    for name, a in (("s", s), ("t", t)):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            raise TypeError(f"{name} must be a float NumPy array")
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
        if a.size < 2:
            raise ValueError(f"{name} needs at least 2 entries")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite")
    if s.dtype != t.dtype:
        raise TypeError(f"t must have the dtype of s, got {t.dtype} and {s.dtype}")
    if not isinstance(paper, np.ndarray) or paper.dtype.kind not in "iu" or paper.shape != s.shape:
        raise ValueError("paper must be an integer array of the shape of s")
    if s.shape != t.shape:
        raise ValueError("t must have the shape of s")


def fe_slope(s, t, paper):
    """Within-paper OLS slope of s on t: sum (t - t_bar_p)(s - s_bar_p) / sum (t - t_bar_p)^2 (a scalar)."""
    _check_fe(s, t, paper)
    _, inv, cnt = np.unique(paper, return_inverse=True, return_counts=True)
    tm = np.bincount(inv, weights=t) / cnt
    sm = np.bincount(inv, weights=s) / cnt
    dt, ds = t - tm[inv], s - sm[inv]
    den = float(dt @ dt)
    if den <= 0:
        raise ValueError("t has no within-paper variation")
    return float(dt @ ds) / den


def fe_slope_ref(s, t, paper):
    """Loop-over-papers reference of :func:`fe_slope`."""
    _check_fe(s, t, paper)
    num = den = 0.0
    for p in np.unique(paper):
        m = paper == p
        dt = t[m] - t[m].mean()
        num += float(dt @ (s[m] - s[m].mean()))
        den += float(dt @ dt)
    if den <= 0:
        raise ValueError("t has no within-paper variation")
    return num / den


def _fe_inputs(rng, size):
    n = 2 * size
    return {"s": rng.standard_normal(n), "t": rng.random(n), "paper": np.repeat(np.arange(size), 2)}


KERNELS = [Kernel(
    name="fe_slope", fn=fe_slope, reference=fe_slope_ref, make_inputs=_fe_inputs,
    contract=Contract(args=(Arg("s", ndim=1, scale=True), Arg("t", ndim=1, same_dtype_as="s"),
                            Arg("paper", dtypes=("int64",), ndim=1, finite=False)),
                      empty="error", size_one=True, shapes="s, t, paper: (N,)"),
    tol={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5)},
    oracle="scipy lstsq with paper dummies")]
