"""Kernels of the residual-gauge chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The indexed signed permutation against its dense-matrix reference (and against ``X @ T.T``, what a user would
write); the one-product correlation matrix against its per-pair reference and against ``numpy.corrcoef``; the
Hungarian matching (scipy's ``linear_sum_assignment``) against the brute-force reference over all d! permutations.
"""
from __future__ import annotations

import numpy as np

from paperkit.network_structure import residual_gauge as rg
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    rows = []
    n, d = (4000, 256) if quick else (20000, 1024)
    perm, signs = rg.random_signed_perm(rng, d, 0.5)
    X = rng.normal(size=(n, d))
    T = rg.signed_perm_matrix(perm, signs)
    r = speed_ratio(lambda: rg.signed_perm_apply(X, perm, signs), lambda: rg.signed_perm_apply_ref(X, perm, signs),
                    repeats=reps)
    rows.append({"kernel": "residual_gauge.signed_perm_apply", "baseline": "residual_gauge.signed_perm_apply_ref",
                 "ratio": round(r.ratio, 3), "shape": f"n={n}, d={d}", "work": f"{n * d} entries moved"})
    r = speed_ratio(lambda: rg.signed_perm_apply(X, perm, signs), lambda: X @ T.T, repeats=reps)
    rows.append({"kernel": "residual_gauge.signed_perm_apply", "baseline": "numpy X @ T.T (dense T)", "vs": "library",
                 "ratio": round(r.ratio, 3), "shape": f"n={n}, d={d}", "work": f"{n * d} entries moved"})
    nc, dc = (2000, 64) if quick else (20000, 256)
    A, B = rng.normal(size=(nc, dc)), rng.normal(size=(nc, dc))
    r = speed_ratio(lambda: rg.corr_matrix(B, A), lambda: rg.corr_matrix_ref(B, A), repeats=reps)
    rows.append({"kernel": "residual_gauge.corr_matrix", "baseline": "residual_gauge.corr_matrix_ref",
                 "ratio": round(r.ratio, 3), "shape": f"n={nc}, d={dc}", "work": f"{dc * dc} correlations"})
    r = speed_ratio(lambda: rg.corr_matrix(B, A), lambda: np.corrcoef(B.T, A.T)[:dc, dc:], repeats=reps)
    rows.append({"kernel": "residual_gauge.corr_matrix", "baseline": "numpy.corrcoef", "vs": "library",
                 "ratio": round(r.ratio, 3), "shape": f"n={nc}, d={dc}", "work": f"{dc * dc} correlations"})
    C = rng.uniform(-1, 1, size=(8, 8))
    r = speed_ratio(lambda: rg.hungarian_match(C), lambda: rg.hungarian_match_ref(C), repeats=reps)
    rows.append({"kernel": "residual_gauge.hungarian_match", "baseline": "residual_gauge.hungarian_match_ref",
                 "ratio": round(r.ratio, 3), "shape": "d=8", "work": "one assignment (8! = 40320 candidates)"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
