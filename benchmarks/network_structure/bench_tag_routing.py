"""Kernels of the fixed tag-routing chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
SpecDrop's branch weights and the merge against their loop references, the merge against ``torch.bmm`` (what a user
would write with the library), and the batched pruning sensitivity (all K prunings in one pass) against one
branch and one category at a time.
"""
from __future__ import annotations

import numpy as np
import torch

from paperkit.network_structure import tag_routing as tr
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    B, K, h = (256, 4, 32) if quick else (2048, 8, 64)
    tags = torch.tensor(rng.integers(0, K, B))
    outs = torch.tensor(rng.normal(size=(B, K, h)))
    w = tr.specdrop_weights(tags, K, 0.7, 0.1)
    rows = []
    r = speed_ratio(lambda: tr.specdrop_weights(tags, K, 0.7, 0.1), lambda: tr.specdrop_weights_ref(tags, K, 0.7, 0.1),
                    repeats=reps)
    rows.append({"kernel": "tag_routing.specdrop_weights", "baseline": "tag_routing.specdrop_weights_ref",
                 "ratio": round(r.ratio, 3), "shape": f"B={B}, K={K}", "work": f"{B * K} weights"})
    r = speed_ratio(lambda: tr.merge(outs, w), lambda: tr.merge_ref(outs, w), repeats=reps)
    rows.append({"kernel": "tag_routing.merge", "baseline": "tag_routing.merge_ref", "ratio": round(r.ratio, 3),
                 "shape": f"B={B}, K={K}, h={h}", "work": f"{B * K * h} multiply-adds"})
    r = speed_ratio(lambda: tr.merge(outs, w), lambda: torch.bmm(w.unsqueeze(1), outs).squeeze(1), repeats=reps)
    rows.append({"kernel": "tag_routing.merge", "baseline": "torch.bmm", "vs": "library", "ratio": round(r.ratio, 3),
                 "shape": f"B={B}, K={K}, h={h}", "work": f"{B * K * h} multiply-adds"})
    g = torch.Generator().manual_seed(0)
    net = tr.BranchNet(64, 10, 4, 32, 8, "specdrop", g)
    N = 400 if quick else 2000
    X, y = torch.rand(N, 64, generator=g), torch.randint(0, 10, (N,), generator=g)
    c = torch.randint(0, 4, (N,), generator=g)
    W = tr.specdrop_weights(c, 4, 0.7, 0.1).float()
    r = speed_ratio(lambda: tr.prune_sensitivity(net, X, y, c, c, W), lambda: tr.prune_sensitivity_ref(net, X, y, c, c, W),
                    repeats=reps)
    rows.append({"kernel": "tag_routing.prune_sensitivity", "baseline": "tag_routing.prune_sensitivity_ref",
                 "ratio": round(r.ratio, 3), "shape": f"N={N}, d=64, K=4", "work": f"{5 * N} forward passes"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
