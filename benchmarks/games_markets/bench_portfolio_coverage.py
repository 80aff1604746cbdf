"""Kernels of the deployment-portfolio chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The lazy Numba greedy against the plain greedy reference and against the exact optimum by scipy.optimize.milp
(HiGHS), which a user might solve instead; the Numba coverage matrix against its NumPy broadcast reference.
"""
from __future__ import annotations

import numpy as np

from paperkit.games_markets import portfolio_archive as pa
from paperkit.games_markets import portfolio_coverage as pc
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    rows, reps = [], 3 if quick else 7
    for M, P in ([(120, 400)] if quick else [(120, 400), (500, 4000)]):
        arch = pa.synthetic_archive(rng, M=M, D=6)
        prof = pa.profiles(rng, arch, P, 1.0)
        v, lo, hi = arch["values"], prof["lo"], prof["hi"]
        r = speed_ratio(lambda: pc.coverage_matrix(v, lo, hi), lambda: pc.coverage_matrix_ref(v, lo, hi), repeats=reps)
        rows.append({"kernel": "portfolio_coverage.coverage_matrix", "baseline": "portfolio_coverage.coverage_matrix_ref",
                     "ratio": round(r.ratio, 3), "shape": f"M={M}, P={P}, F={v.shape[1]}",
                     "work": f"{M * P * v.shape[1]} comparisons (reference)"})
        C, w = pc.coverage_matrix(v, lo, hi), np.full(P, 1.0 / P)
        K = 5
        r = speed_ratio(lambda: pc.greedy_max_coverage(C, w, K), lambda: pc.greedy_max_coverage_ref(C, w, K),
                        repeats=reps)
        rows.append({"kernel": "portfolio_coverage.greedy_max_coverage",
                     "baseline": "portfolio_coverage.greedy_max_coverage_ref", "ratio": round(r.ratio, 3),
                     "shape": f"M={M}, P={P}, K={K}", "work": f"{K * M * P} gain terms (reference)"})
        r = speed_ratio(lambda: pc.greedy_max_coverage(C, w, K), lambda: pc.exact_max_coverage(C, w, K), repeats=reps)
        rows.append({"kernel": "portfolio_coverage.greedy_max_coverage", "baseline": "scipy.optimize.milp (HiGHS, exact)",
                     "vs": "library", "ratio": round(r.ratio, 3), "shape": f"M={M}, P={P}, K={K}",
                     "work": "one portfolio of K models"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
