"""Regret and hull-membership kernels of the value supply/demand chapter. ``ratio`` = baseline time / kernel time
(> 1: the kernel is faster). menu_regret against its plain loop; in_hull (Qhull facets) against the LP reference
and against scipy's Delaunay.find_simplex, the library a user would pick for point-in-hull.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial import Delaunay

from paperkit.games_markets import value_coverage as vc
from paperkit.games_markets import value_regret as vr
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    rows, reps = [], 3 if quick else 7
    for n in ([200] if quick else [200, 2000]):
        U, M = rng.dirichlet(np.ones(5), n), rng.dirichlet(np.ones(5), 23)
        r = speed_ratio(lambda: vr.menu_regret(U, M), lambda: vr.menu_regret_ref(U, M), repeats=reps)
        rows.append({"kernel": "value_regret.menu_regret", "baseline": "value_regret.menu_regret_ref",
                     "ratio": round(r.ratio, 3), "shape": f"n={n}, m=23, K=5", "work": f"{n * 23 * 5} multiply-adds"})
    for n in ([100] if quick else [100, 1000]):
        P, V = rng.dirichlet(np.ones(5), n), rng.dirichlet(4 * np.ones(5), 23)
        r = speed_ratio(lambda: vc.in_hull(P, V), lambda: vc.in_hull_ref(P, V), repeats=reps)
        rows.append({"kernel": "value_coverage.in_hull", "baseline": "value_coverage.in_hull_ref (one HiGHS LP per point)",
                     "ratio": round(r.ratio, 3), "shape": f"n={n}, m=23, K=5", "work": f"{n} membership tests"})
        r = speed_ratio(lambda: vc.in_hull(P, V), lambda: Delaunay(V[:, :-1]).find_simplex(P[:, :-1]) >= 0,
                        repeats=reps)
        rows.append({"kernel": "value_coverage.in_hull", "baseline": "scipy.spatial.Delaunay.find_simplex",
                     "vs": "library", "ratio": round(r.ratio, 3), "shape": f"n={n}, m=23, K=5",
                     "work": f"{n} membership tests"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
