"""Kernels of the joint-versus-separate UFM chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The closed form by the K x K Gram eigen-decomposition against the thin-SVD reference, against cvxpy's nuclear-norm
solve (the library a user would pick) and against L-BFGS on the factored objective; the separate closed form against
its per-row reference; the factored loss gradient against its per-sample reference and Torch autograd.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from paperkit.learning_dynamics import ufm_regression as ur
from paperkit.timing import speed_ratio


def _cvxpy_solve(Y, lw, lh):
    import cvxpy as cp

    Z = cp.Variable(Y.shape)
    N = Y.shape[1]
    cp.Problem(cp.Minimize(cp.sum_squares(Z - Y) / (2 * N) + math.sqrt(lw * lh) * cp.normNuc(Z))).solve()
    return Z.value


def _torch_grad(W, H, Y, lw, lh):
    Wt, Ht = torch.tensor(W, requires_grad=True), torch.tensor(H, requires_grad=True)
    L = (0.5 / Y.shape[1] * ((Wt @ Ht - torch.tensor(Y)) ** 2).sum() + 0.5 * lw * (Wt ** 2).sum()
         + 0.5 * lh * (Ht ** 2).sum())
    L.backward()
    return float(L.detach()), Wt.grad, Ht.grad


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    lw, lh = 0.03, 0.1
    rows = []
    K, N = (8, 2000) if quick else (32, 20000)
    Y = ur.make_targets(ur.spectrum("decay", K, 1.0, 10.0), N, rng)
    r = speed_ratio(lambda: ur.ufm_closed_form(Y, lw, lh), lambda: ur.ufm_closed_form_ref(Y, lw, lh), repeats=reps)
    rows.append({"kernel": "ufm_regression.ufm_closed_form", "baseline": "ufm_regression.ufm_closed_form_ref",
                 "ratio": round(r.ratio, 3), "shape": f"K={K}, N={N}", "work": "one soft-threshold solve"})
    r = speed_ratio(lambda: ur.separate_closed_form(Y, lw, lh), lambda: ur.separate_closed_form_ref(Y, lw, lh),
                    repeats=reps)
    rows.append({"kernel": "ufm_regression.separate_closed_form", "baseline": "ufm_regression.separate_closed_form_ref",
                 "ratio": round(r.ratio, 3), "shape": f"K={K}, N={N}", "work": f"{K} single-target solves"})
    Ks, Ns = 4, 100
    Ysm = ur.make_targets(ur.spectrum("decay", Ks, 1.0, 10.0), Ns, rng)
    r = speed_ratio(lambda: ur.ufm_closed_form(Ysm, lw, lh), lambda: _cvxpy_solve(Ysm, lw, lh), repeats=reps)
    rows.append({"kernel": "ufm_regression.ufm_closed_form", "baseline": "cvxpy normNuc problem (default solver)",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"K={Ks}, N={Ns}",
                 "work": "one nuclear-norm proximal problem"})
    r = speed_ratio(lambda: ur.ufm_closed_form(Ysm, lw, lh),
                    lambda: ur.ufm_factored_fit(Ysm, lw, lh, 8, np.random.default_rng(1)), repeats=reps)
    rows.append({"kernel": "ufm_regression.ufm_closed_form", "baseline": "L-BFGS on the factored UFM (d=8)",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"K={Ks}, N={Ns}",
                 "work": "minimal training MSE of one problem"})
    d, Nb = 16, (500 if quick else 5000)
    W, H, Yb = rng.normal(size=(K, d)), rng.normal(size=(d, Nb)), rng.normal(size=(K, Nb))
    r = speed_ratio(lambda: ur.ufm_loss_grad(W, H, Yb, lw, lh), lambda: ur.ufm_loss_grad_ref(W, H, Yb, lw, lh),
                    repeats=reps)
    rows.append({"kernel": "ufm_regression.ufm_loss_grad", "baseline": "ufm_regression.ufm_loss_grad_ref",
                 "ratio": round(r.ratio, 3), "shape": f"K={K}, d={d}, N={Nb}", "work": f"{K * d * Nb} products"})
    r = speed_ratio(lambda: ur.ufm_loss_grad(W, H, Yb, lw, lh), lambda: _torch_grad(W, H, Yb, lw, lh), repeats=reps)
    rows.append({"kernel": "ufm_regression.ufm_loss_grad", "baseline": "torch.autograd backward",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"K={K}, d={d}, N={Nb}",
                 "work": "one loss and gradient"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
