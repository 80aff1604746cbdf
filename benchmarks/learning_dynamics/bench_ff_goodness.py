"""Kernels of the Forward-Forward goodness chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is
faster). The batched goodness (burstiness, entmax-weighted energy) against its one-row reference and, for
burstiness, against scipy.stats.kurtosis (the library a user would pick); the sort-based 1.5-entmax against the
bisection reference; alpha-entmax by batched bisection against its one-row reference; sorted sparsemax against its
one-row reference; the batched label scores against one label at a time.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from paperkit.learning_dynamics import ff_goodness as fg
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    b, n = (64, 128) if quick else (256, 512)
    h = torch.tensor(np.maximum(rng.normal(size=(b, n)), 0))
    rows = []
    for kind in ("kurtosis", "entmax15"):
        r = speed_ratio(lambda: fg.goodness(h, kind), lambda: fg.goodness_ref(h, kind), repeats=reps)
        rows.append({"kernel": "ff_goodness.goodness", "baseline": "ff_goodness.goodness_ref", "ratio": round(r.ratio, 3),
                     "shape": f"B={b}, n={n}, kind={kind}", "work": f"{b} rows of {n} units"})
    x = h.numpy()
    r = speed_ratio(lambda: fg.goodness(h, "kurtosis"), lambda: stats.kurtosis(x, axis=1, fisher=True), repeats=reps)
    rows.append({"kernel": "ff_goodness.goodness", "baseline": "scipy.stats.kurtosis", "vs": "library",
                 "ratio": round(r.ratio, 3), "shape": f"B={b}, n={n}, kind=kurtosis", "work": f"{b} kurtoses"})
    z = torch.tensor(rng.normal(size=(b, n)))
    r = speed_ratio(lambda: fg.entmax15(z), lambda: fg.entmax15_ref(z), repeats=reps)
    rows.append({"kernel": "ff_goodness.entmax15", "baseline": "ff_goodness.entmax15_ref", "ratio": round(r.ratio, 3),
                 "shape": f"B={b}, n={n}", "work": f"{b} projections onto the simplex"})
    r = speed_ratio(lambda: fg.entmax_bisect(z, 4.0), lambda: fg.entmax_bisect_ref(z, 4.0), repeats=reps)
    rows.append({"kernel": "ff_goodness.entmax_bisect", "baseline": "ff_goodness.entmax_bisect_ref",
                 "ratio": round(r.ratio, 3), "shape": f"B={b}, n={n}, alpha=4", "work": f"{b} alpha-entmax rows"})
    r = speed_ratio(lambda: fg.sparsemax(z), lambda: fg.sparsemax_ref(z), repeats=reps)
    rows.append({"kernel": "ff_goodness.sparsemax", "baseline": "ff_goodness.sparsemax_ref", "ratio": round(r.ratio, 3),
                 "shape": f"B={b}, n={n}", "work": f"{b} projections onto the simplex"})
    net = fg.FFNet(64, 128, 2, 10, torch.Generator().manual_seed(0))
    X = torch.rand(200 if quick else 1000, 64, generator=torch.Generator().manual_seed(1))
    r = speed_ratio(lambda: fg.ff_scores(net, X, "kurtosis"), lambda: fg.ff_scores_ref(net, X, "kurtosis"),
                    repeats=reps)
    rows.append({"kernel": "ff_goodness.ff_scores", "baseline": "ff_goodness.ff_scores_ref", "ratio": round(r.ratio, 3),
                 "shape": f"N={len(X)}, d=64, 2x128, 10 labels", "work": f"{10 * len(X)} forward passes"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
