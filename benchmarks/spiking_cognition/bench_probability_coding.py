"""Kernels of the inverse-S probability chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The vectorised grid decoder against its one-measurement-at-a-time reference and against the same computation in
Torch (the library the fits use); the vectorised report likelihood against its one-trial reference and against
scipy.integrate.quad per trial (what a user without a grid would write).
"""
from __future__ import annotations

import numpy as np
import torch
from scipy import integrate, stats

from paperkit.spiking_cognition import probability_coding as pc
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    rows = []
    M, P = (300, 200) if quick else (2000, 1000)
    pg = (np.arange(P) + 0.5) / P
    sigma = 0.08
    kw = dict(m=pc.measurement_grid(sigma, M), p_grid=pg, F_grid=pc.encoding_values(pg, rng.dirichlet(np.ones(10))),
              log_w=np.log(rng.dirichlet(np.ones(P))), sigma=sigma)
    r = speed_ratio(lambda: pc.posterior_mean(**kw), lambda: pc.posterior_mean_ref(**kw), repeats=reps)
    rows.append({"kernel": "probability_coding.posterior_mean", "baseline": "probability_coding.posterior_mean_ref",
                 "ratio": round(r.ratio, 3), "shape": f"M={M}, P={P}", "work": f"{M * P} posterior weights"})
    tk = {k: torch.tensor(v, dtype=torch.float64) for k, v in kw.items()}
    r = speed_ratio(lambda: pc.posterior_mean(**kw),
                    lambda: pc.posterior_mean_torch(tk["m"], tk["p_grid"], tk["F_grid"], tk["log_w"], tk["sigma"]),
                    repeats=reps)
    rows.append({"kernel": "probability_coding.posterior_mean", "baseline": "torch softmax (posterior_mean_torch)",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"M={M}, P={P}",
                 "work": f"{M * P} posterior weights"})
    T, Mg = (400, 91) if quick else (4000, 181)
    ll = dict(r=rng.uniform(0, 1, T), F_stim=rng.uniform(0, 1, T), m_grid=pc.measurement_grid(sigma, Mg),
              phat=np.clip(pc.measurement_grid(sigma, Mg), 0.02, 0.98), sigma=sigma, tau=0.03)
    r = speed_ratio(lambda: pc.trial_loglik(**ll), lambda: pc.trial_loglik_ref(**ll), repeats=reps)
    rows.append({"kernel": "probability_coding.trial_loglik", "baseline": "probability_coding.trial_loglik_ref",
                 "ratio": round(r.ratio, 3), "shape": f"T={T}, M={Mg}", "work": f"{T} report likelihoods"})
    n_q = 20
    sub = {k: (v[:n_q] if k in ("r", "F_stim") else v) for k, v in ll.items()}
    phat_fn = lambda m: np.interp(m, ll["m_grid"], ll["phat"])

    def by_quad():
        return [np.log(integrate.quad(lambda m: stats.norm.pdf(m, f, sigma) * stats.norm.pdf(x, phat_fn(m), 0.03),
                                      f - 6 * sigma, f + 6 * sigma, limit=100)[0])
                for x, f in zip(sub["r"], sub["F_stim"])]

    r = speed_ratio(lambda: pc.trial_loglik(**sub), by_quad, repeats=reps)
    rows.append({"kernel": "probability_coding.trial_loglik", "baseline": "scipy.integrate.quad per trial",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"T={n_q}, M={Mg}",
                 "work": f"{n_q} report likelihoods"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
