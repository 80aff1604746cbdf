"""Speed of paperkit.geometry.knn's Numba kernels against the NumPy references, scikit-learn, and this machine's
limit, as interleaved ratios.

``ratio`` = baseline time / kernel time (> 1: the Numba kernel is faster). Work is counted as distance evaluations
(n * m pairs of d-vectors); the ball query stops early, so its pairs are an upper bound. The machine limit of
``knn_distances`` is the float64 GEMM that its distance block needs, 2 n m d FLOP at the BLAS rate measured by
:mod:`roofline` in the same run (the top-k selection and the exact recomputation of candidates come on top).
Kernel and library run with one BLAS thread, as the chapters do (threads=1; OpenBLAS threads also stall on this
shared 2-core machine); the limit is measured on all cores.
"""
from __future__ import annotations

import numpy as np
import roofline
from sklearn.neighbors import KDTree, NearestNeighbors
from threadpoolctl import threadpool_limits

from paperkit.geometry.knn import in_any_ball, in_any_ball_ref, knn_distances, knn_distances_ref
from paperkit.timing import speed_ratio


def _row(kernel, baseline, r, shape, work, vs="reference"):
    return {"kernel": kernel, "baseline": baseline, "ratio": round(r.ratio, 3), "shape": shape, "work": work,
            "t_kernel_s": r.t_candidate_s, "t_baseline_s": r.t_baseline_s, "vs": vs}


def run(quick: bool = True) -> list[dict]:
    """Time the kernels at the chapter's sizes (quick) or a larger grid; one dict per (kernel, baseline, shape)."""
    roofline.gemm_flops(np.float64)  # the all-core rate, before the one-thread limit below
    with threadpool_limits(1, user_api="blas"):
        return _run(quick)


def _run(quick: bool) -> list[dict]:
    rng = np.random.default_rng(0)
    sizes = [(1000, 16, 5)] if quick else [(1000, 16, 5), (2000, 32, 10), (4000, 64, 10)]
    repeats = 3 if quick else 7
    rows = []
    for n, d, k in sizes:
        a, b = rng.normal(size=(n, d)), rng.normal(size=(n, d))
        shape = f"n=m={n}, d={d}, k={k}"
        work = f"{n * n} distance pairs"
        nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(b)
        r_ref = speed_ratio(lambda: knn_distances(a, b, k), lambda: knn_distances_ref(a, b, k), repeats)
        rows.append(_row("knn_distances (numba)", "knn_distances_ref (numpy)", r_ref, shape, work))
        rows.append(_row("knn_distances (numba)", "sklearn NearestNeighbors brute (fit once)",
                         speed_ratio(lambda: knn_distances(a, b, k), lambda: nn.kneighbors(a), 3 * repeats), shape,
                         work, "library"))
        rows.append(roofline.limit_row("knn_distances (numba)", f"float64 GEMM of the distance block, "
                                       f"{2 * n * n * d:.3g} FLOP",
                                       roofline.best_time(lambda: knn_distances(a, b, k), repeats),
                                       2.0 * n * n * d / roofline.gemm_flops(np.float64), shape, work))
        rows.append(_row("knn_distances k=1 (numba)", "sklearn KDTree build + query k=1",
                         speed_ratio(lambda: knn_distances(a, b, 1), lambda: KDTree(b).query(a, k=1), repeats),
                         shape, work, "library"))
        radii = knn_distances(b, b, k, exclude_self=True)[0][:, -1]
        rows.append(_row("in_any_ball (numba)", "in_any_ball_ref (numpy)",
                         speed_ratio(lambda: in_any_ball(a, b, radii), lambda: in_any_ball_ref(a, b, radii), repeats),
                         shape, f"<= {n * n} distance pairs (stops at first hit)"))
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
