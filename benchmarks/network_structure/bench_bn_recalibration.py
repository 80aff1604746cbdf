"""Kernels of the BatchNorm-unlearning chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The recalibration statistics (one train-mode pass per batch) against the float64 layer-by-layer reference and against
``torch.optim.swa_utils.update_bn`` (the library a user would pick; it needs a copy of the network to leave the
original alone, which is included in its time), on the chapter's CNN.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch.optim.swa_utils import update_bn

from paperkit.network_structure import bn_recalibration as br
from paperkit.network_structure import bn_unlearning as bu
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    reps = 3 if quick else 7
    n, width, bs = (256, 8, 64) if quick else (1024, 16, 128)
    net = bu.make_cnn("bn", width, torch.Generator().manual_seed(0)).double()
    X = torch.tensor(np.random.default_rng(0).random((n, 64)))
    batches = [X[i:i + bs] for i in range(0, n, bs)]
    rows = []
    r = speed_ratio(lambda: br.recalibration_stats(net, X, bs), lambda: br.recalibration_stats_ref(net, X, bs),
                    repeats=reps)
    rows.append({"kernel": "bn_recalibration.recalibration_stats", "baseline": "bn_recalibration.recalibration_stats_ref",
                 "ratio": round(r.ratio, 3), "shape": f"N={n}, batch {bs}, CNN {width}/{2 * width} channels",
                 "work": f"{n} images through 2 conv + 2 BatchNorm layers"})

    def library():
        m = copy.deepcopy(net)
        update_bn(batches, m)
        return m

    r = speed_ratio(lambda: br.recalibration_stats(net, X, bs), library, repeats=reps)
    rows.append({"kernel": "bn_recalibration.recalibration_stats", "baseline": "torch.optim.swa_utils.update_bn",
                 "vs": "library", "ratio": round(r.ratio, 3),
                 "shape": f"N={n}, batch {bs}, CNN {width}/{2 * width} channels",
                 "work": f"{n} images through 2 conv + 2 BatchNorm layers"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
