"""Kernels of the sponsored-suggestions chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
Best-response dynamics (Numba) against the plain-loop reference; the vectorised misreport search against its loop
reference. No maintained library computes equilibria of this two-stage game; nashpy's support enumeration covers
two-player bimatrix games only, so the references are the baselines.
"""
from __future__ import annotations

import numpy as np

from paperkit.games_markets import sponsored_mechanisms as sm
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    rows, reps = [], 3 if quick else 7
    for n, N, L in ([(3, 4, 6)] if quick else [(3, 4, 6), (4, 5, 11)]):
        d = sm.random_instance(rng, n, N, 1)
        tab = sm.bid_table(d["q"], d["V"], d["theta"], L)
        st = np.zeros(N, np.int64)
        _, _, rounds = sm.best_response_dynamics(**d, rule=1, rho=0.0, table=tab, start=st)
        r = speed_ratio(lambda: sm.best_response_dynamics(**d, rule=1, rho=0.0, table=tab, start=st),
                        lambda: sm.best_response_dynamics_ref(**d, rule=1, rho=0.0, table=tab, start=st),
                        repeats=reps)
        rows.append({"kernel": "sponsored_mechanisms.best_response_dynamics",
                     "baseline": "sponsored_mechanisms.best_response_dynamics_ref", "ratio": round(r.ratio, 3),
                     "shape": f"n={n} intents, N={N} bidders, {L} levels", "work":
                     f"{rounds * N * (tab.shape[1] + 1)} profile evaluations"})
        d2 = sm.random_instance(rng, n, N, 2)
        g = np.linspace(0, 2 * d2["V"].max(), L)
        r = speed_ratio(lambda: sm.misreport_gain(**d2, i=0, grid=g, payment="vcg"),
                        lambda: sm.misreport_gain_ref(**d2, i=0, grid=g, payment="vcg"), repeats=reps)
        rows.append({"kernel": "sponsored_mechanisms.misreport_gain",
                     "baseline": "sponsored_mechanisms.misreport_gain_ref", "ratio": round(r.ratio, 3),
                     "shape": f"n={n} intents, N={N} bidders, {L}+1 levels", "work": f"{(L + 1) ** n} reports"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
