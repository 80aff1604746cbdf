"""Kernels of the generalized-BLR chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The vectorised q-Gaussian log density against its one-point reference and against scipy.stats.multivariate_t (the
library a user would pick for q > 1); the vectorised logistic gradient and Hessian diagonal against the loop
reference and against Torch autograd; one generalized BLR step against its reference.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from paperkit.learning_dynamics import q_gaussian as qg
from paperkit.learning_dynamics import tsallis_blr as tb
from paperkit.timing import speed_ratio


def _torch_grad_hess(theta, X, y):
    Xt, yt = torch.tensor(X), torch.tensor(y)
    out = []
    for th in theta:
        f = lambda w: torch.nn.functional.binary_cross_entropy_with_logits(Xt @ w, yt, reduction="sum")
        t = torch.tensor(th, requires_grad=True)
        g = torch.autograd.grad(f(t), t)[0]
        out.append((g, torch.diagonal(torch.autograd.functional.hessian(f, torch.tensor(th)))))
    return out


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    rows = []
    n, d = (2000, 11) if quick else (20000, 11)
    m, s = rng.normal(size=d), rng.uniform(0.5, 2.0, d)
    x = m + rng.normal(size=(n, d)) * 0.3
    r = speed_ratio(lambda: qg.q_gaussian_logpdf(x, m, s, 0.5), lambda: qg.q_gaussian_logpdf_ref(x, m, s, 0.5),
                    repeats=reps)
    rows.append({"kernel": "q_gaussian.q_gaussian_logpdf", "baseline": "q_gaussian.q_gaussian_logpdf_ref",
                 "ratio": round(r.ratio, 3), "shape": f"n={n}, d={d}, q=0.5", "work": f"{n * d} squared terms"})
    sp = qg.shape_params(1.1, d, float(np.log(s).sum()))
    mvt = stats.multivariate_t(loc=m, shape=np.diag(1 / s) * np.exp(sp["log_2tau"]) / sp["nu"], df=sp["nu"])
    r = speed_ratio(lambda: qg.q_gaussian_logpdf(x, m, s, 1.1), lambda: mvt.logpdf(x), repeats=reps)
    rows.append({"kernel": "q_gaussian.q_gaussian_logpdf", "baseline": "scipy.stats.multivariate_t.logpdf",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"n={n}, d={d}, q=1.1",
                 "work": f"{n} densities"})
    N, k = (300, 5) if quick else (1200, 5)
    X, y = rng.normal(size=(N, d)), (rng.random(N) < 0.5).astype(float)
    th = rng.normal(size=(k, d))
    r = speed_ratio(lambda: tb.logistic_grad_hess(th, X, y), lambda: tb.logistic_grad_hess_ref(th, X, y),
                    repeats=reps)
    rows.append({"kernel": "tsallis_blr.logistic_grad_hess", "baseline": "tsallis_blr.logistic_grad_hess_ref",
                 "ratio": round(r.ratio, 3), "shape": f"draws={k}, N={N}, d={d}", "work": f"{k * N * d} products"})
    r = speed_ratio(lambda: tb.logistic_grad_hess(th, X, y), lambda: _torch_grad_hess(th, X, y), repeats=reps)
    rows.append({"kernel": "tsallis_blr.logistic_grad_hess", "baseline": "torch.autograd grad + functional.hessian",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"draws={k}, N={N}, d={d}",
                 "work": f"{k} gradients and Hessian diagonals"})
    ms, ss = np.zeros(d), np.ones(d)
    r = speed_ratio(lambda: tb.generalized_blr_step(ms, ss, X, y, 0.5, 0.1, 1.0, np.random.default_rng(1), k),
                    lambda: tb.generalized_blr_step_ref(ms, ss, X, y, 0.5, 0.1, 1.0, np.random.default_rng(1), k),
                    repeats=reps)
    rows.append({"kernel": "tsallis_blr.generalized_blr_step", "baseline": "tsallis_blr.generalized_blr_step_ref",
                 "ratio": round(r.ratio, 3), "shape": f"n_mc={k}, N={N}, d={d}", "work": "one BLR step"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
