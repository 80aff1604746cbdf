"""Kernels of the pruning-and-transforms chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The vectorised Wanda and N:M masks against their loop references and against the Torch form of locuslab/wanda
(``torch.sort`` of the score per row and a scatter, the library a user would pick); the soft count of removable
lines and the mask-row correlation against their loop references, the latter also against ``numpy.corrcoef``.
"""
from __future__ import annotations

import numpy as np
import torch

from paperkit.network_structure import prune_transforms as pt
from paperkit.timing import speed_ratio


def _torch_wanda(W, a, sparsity):
    """Wanda as in locuslab/wanda lib/prune.py: sort the score per output row, zero the smallest share."""
    score = W.abs() * a[None, :]
    k = int(W.shape[1] * sparsity)
    idx = torch.sort(score, dim=-1, stable=True)[1][:, :k]
    mask = torch.ones_like(W, dtype=torch.bool)
    return mask.scatter_(1, idx, False)


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    rows = []
    n, m = (64, 256) if quick else (384, 1024)
    W, a = rng.normal(size=(n, m)), rng.uniform(0.1, 2.0, m)
    Wt, at = torch.tensor(W), torch.tensor(a)
    r = speed_ratio(lambda: pt.wanda_mask(W, a, 0.5), lambda: pt.wanda_mask_ref(W, a, 0.5), repeats=reps)
    rows.append({"kernel": "prune_transforms.wanda_mask", "baseline": "prune_transforms.wanda_mask_ref",
                 "ratio": round(r.ratio, 3), "shape": f"W {n}x{m}", "work": f"{n} row sorts of {m} scores"})
    r = speed_ratio(lambda: pt.wanda_mask(W, a, 0.5), lambda: _torch_wanda(Wt, at, 0.5), repeats=reps)
    rows.append({"kernel": "prune_transforms.wanda_mask", "baseline": "torch.sort + scatter (locuslab/wanda form)",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"W {n}x{m}",
                 "work": f"{n} row sorts of {m} scores"})
    r = speed_ratio(lambda: pt.nm_mask(W, a, 2, 4), lambda: pt.nm_mask_ref(W, a, 2, 4), repeats=reps)
    rows.append({"kernel": "prune_transforms.nm_mask", "baseline": "prune_transforms.nm_mask_ref",
                 "ratio": round(r.ratio, 3), "shape": f"W {n}x{m}, 2:4", "work": f"{n * m // 4} groups"})
    r = speed_ratio(lambda: pt.removable_share(W, 0.01), lambda: pt.removable_share_ref(W, 0.01), repeats=reps)
    rows.append({"kernel": "prune_transforms.removable_share", "baseline": "prune_transforms.removable_share_ref",
                 "ratio": round(r.ratio, 3), "shape": f"A {n}x{m}", "work": f"{n + m} line norms"})
    k = 48 if quick else 160
    M = (rng.random((k, m)) < 0.5).astype(np.float64)
    r = speed_ratio(lambda: pt.mask_row_corr(M), lambda: pt.mask_row_corr_ref(M), repeats=reps)
    rows.append({"kernel": "prune_transforms.mask_row_corr", "baseline": "prune_transforms.mask_row_corr_ref",
                 "ratio": round(r.ratio, 3), "shape": f"mask {k}x{m}", "work": f"{k * (k - 1)} row pairs"})
    r = speed_ratio(lambda: pt.mask_row_corr(M),
                    lambda: np.abs(np.corrcoef(M)[~np.eye(k, dtype=bool)]).mean(), repeats=reps)
    rows.append({"kernel": "prune_transforms.mask_row_corr", "baseline": "numpy.corrcoef", "vs": "library",
                 "ratio": round(r.ratio, 3), "shape": f"mask {k}x{m}", "work": f"{k * (k - 1)} row pairs"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
