"""Kernels of the BSCCE chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).

The vectorised sparse LP builder against the loop-built reference; the batched Numba simplex projection against the
sort-based NumPy reference and against one cvxpy QP per row (what a user might write instead); the Numba
projected-gradient learner against its NumPy reference.
"""
from __future__ import annotations

import numpy as np

from paperkit.games_markets import bscce_auction as ba
from paperkit.games_markets import equilibrium_lp as el
from paperkit.games_markets import simplex_projection as spj
from paperkit.timing import speed_ratio


def _cvxpy_rows(X):
    import cvxpy as cp

    out = np.empty_like(X)
    for i, x in enumerate(X):
        z = cp.Variable(x.size)
        cp.Problem(cp.Minimize(cp.sum_squares(z - x)), [z >= 0, cp.sum(z) == 1]).solve()
        out[i] = z.value
    return out


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    rows, reps = [], 3 if quick else 7
    for m, n in ([(4, 5)] if quick else [(4, 5), (5, 6)]):
        p = el.power_prior(m, 3.0)
        r = speed_ratio(lambda: el.build_lp(p, n, "bscce"), lambda: el.build_lp_ref(p, n, "bscce"), repeats=reps)
        sz = el.lp_size(m, n, "bscce")
        rows.append({"kernel": "equilibrium_lp.build_lp", "baseline": "equilibrium_lp.build_lp_ref",
                     "ratio": round(r.ratio, 3), "shape": f"m={m}, n={n}, BSCCE",
                     "work": f"{sz['ub_rows'] + sz['eq_rows']} rows x {sz['variables']} columns"})
    for B, n in ([(20000, 10)] if quick else [(20000, 10), (200000, 32)]):
        X = rng.normal(size=(B, n))
        r = speed_ratio(lambda: spj.project_simplex(X), lambda: spj.project_simplex_ref(X), repeats=reps)
        rows.append({"kernel": "simplex_projection.project_simplex", "baseline": "simplex_projection.project_simplex_ref",
                     "ratio": round(r.ratio, 3), "shape": f"B={B}, n={n}", "work": f"{B} row projections"})
    X = rng.normal(size=(20, 10))
    r = speed_ratio(lambda: spj.project_simplex(X), lambda: _cvxpy_rows(X), repeats=2 if quick else 3)
    rows.append({"kernel": "simplex_projection.project_simplex", "baseline": "cvxpy QP per row", "vs": "library",
                 "ratio": round(r.ratio, 3), "shape": "B=20, n=10", "work": "20 row projections"})
    for m, n, T in ([(9, 10, 500)] if quick else [(9, 10, 500), (15, 16, 2000)]):
        p = el.power_prior(m, 3.0)
        b0 = rng.dirichlet(np.ones(n), size=(2, m))
        r = speed_ratio(lambda: ba.pga_learn(p, b0, T, 0.05), lambda: ba.pga_learn_ref(p, b0, T, 0.05), repeats=reps)
        rows.append({"kernel": "bscce_auction.pga_learn", "baseline": "bscce_auction.pga_learn_ref",
                     "ratio": round(r.ratio, 3), "shape": f"m={m}, n={n}, steps={T}",
                     "work": f"{T} steps of 2 x {m} projections and an {m * m * n * n}-entry average"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
