"""Kernels of the gradient-denoising chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
Recursive least squares (Numba) against a fresh ridge solve per step and against scikit-learn's Ridge refitted per
step; the Numba optimiser loop against its NumPy reference; closed-form per-example clipping against per-example
autograd."""
from __future__ import annotations

import numpy as np
import torch

from paperkit.learning_dynamics import gradient_denoise as gd
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    rows = []
    T, dd = (200, 10) if quick else (1000, 20)
    X = rng.normal(size=(T, dd))
    Z = gd.gradient_features(X, 1)
    G = Z @ rng.normal(size=(Z.shape[1], dd)) + rng.normal(size=(T, dd))
    r = speed_ratio(lambda: gd.rls_gradient_estimates(Z, G), lambda: gd.rls_gradient_estimates_ref(Z, G), repeats=reps)
    rows.append({"kernel": "gradient_denoise.rls_gradient_estimates", "baseline": "gradient_denoise.rls_gradient_estimates_ref",
                 "ratio": round(r.ratio, 3), "shape": f"T={T}, p={Z.shape[1]}, d={dd}", "work": f"{T} prefix fits"})

    def sk():
        from sklearn.linear_model import Ridge
        for t in range(T):
            Ridge(alpha=1e-6, fit_intercept=False).fit(Z[: t + 1], G[: t + 1])
    r = speed_ratio(lambda: gd.rls_gradient_estimates(Z, G), sk, repeats=reps)
    rows.append({"kernel": "gradient_denoise.rls_gradient_estimates", "baseline": "sklearn Ridge refit per step",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"T={T}, p={Z.shape[1]}, d={dd}",
                 "work": f"{T} prefix fits"})
    d, steps = 10, 2000 if quick else 20000
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    noise = rng.normal(size=(steps, 2, d))
    x0 = Q.T @ np.full(d, 3.0)
    r = speed_ratio(lambda: gd.run_nonconvex(x0, Q, noise, 1.0, 0.01, 0.1, "denoise2"),
                    lambda: gd.run_nonconvex_ref(x0, Q, noise, 1.0, 0.01, 0.1, "denoise2"), repeats=reps)
    rows.append({"kernel": "gradient_denoise.run_nonconvex", "baseline": "gradient_denoise.run_nonconvex_ref",
                 "ratio": round(r.ratio, 3), "shape": f"T={steps}, d={d}", "work": f"{2 * steps} oracle calls"})
    g = torch.Generator().manual_seed(0)
    W = [torch.randn(32, 64, generator=g), torch.zeros(32), torch.randn(10, 32, generator=g), torch.zeros(10)]
    Xb, yb = torch.randn(128, 64, generator=g), torch.randint(0, 10, (128,), generator=g)
    r = speed_ratio(lambda: gd.per_sample_clipped_sum(*W, Xb, yb, 1.0), lambda: gd.per_sample_clipped_sum_ref(*W, Xb, yb, 1.0),
                    repeats=reps)
    rows.append({"kernel": "gradient_denoise.per_sample_clipped_sum", "baseline": "gradient_denoise.per_sample_clipped_sum_ref",
                 "ratio": round(r.ratio, 3), "shape": "batch 128, 64-32-10 MLP", "work": "128 per-example gradients"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
