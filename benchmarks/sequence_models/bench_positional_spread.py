"""Positional-spread kernels against their plain references: the Numba min-separation kernel, the mean-pooled
encoder's batched forward, and the vectorised (vmap) training of all PE scales at once."""
from __future__ import annotations

import numpy as np
import torch

from paperkit.sequence_models.positional_spread import (MeanPoolEncoder, meanpool_encoder_ref, min_separation, min_separation_ref,
                                        train_encoders, train_encoders_ref)
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    rows = []
    reps = 3 if quick else 7
    for L, d in ([(256, 32)] if quick else [(256, 32), (1024, 64)]):
        E = np.random.default_rng(0).normal(size=(L, d))
        min_separation(E)  # compile outside the timing
        r = speed_ratio(lambda: min_separation(E), lambda: min_separation_ref(E), repeats=reps)
        rows.append({"kernel": "positional_spread.min_separation", "baseline": "positional_spread.min_separation_ref",
                     "ratio": r.ratio, "shape": f"E {L}x{d}",
                     "work": f"{L * (L - 1) // 2} row pairs; reference materialises an {L}x{L}x{d} difference tensor"})

    m = MeanPoolEncoder(16, 2, 32, 2, 64, 1.0, torch.Generator().manual_seed(0))
    x = torch.randint(0, 16, (64, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        r = speed_ratio(lambda: m(x), lambda: meanpool_encoder_ref(m, x), repeats=reps)
    rows.append({"kernel": "positional_spread.MeanPoolEncoder.forward",
                 "baseline": "positional_spread.meanpool_encoder_ref", "ratio": r.ratio,
                 "shape": "64 sequences x 32 tokens, d=32, 2 heads",
                 "work": "one forward pass of 64 sequences (same weights)"})

    steps = 20 if quick else 100
    kw = dict(L=16, vocab=16, steps=steps, batch=32, lr=3e-3, d_model=32, max_len=32)
    scales = [0.03, 0.1, 0.3, 1.0, 3.0]
    r = speed_ratio(lambda: train_encoders("mean_threshold", scales, gen=torch.Generator().manual_seed(0), **kw),
                    lambda: train_encoders_ref("mean_threshold", scales, gen=torch.Generator().manual_seed(0), **kw),
                    repeats=3 if quick else 5)
    rows.append({"kernel": "positional_spread.train_encoders", "baseline": "positional_spread.train_encoders_ref",
                 "ratio": r.ratio, "shape": f"{len(scales)} scales, batch 32 x 16 tokens, d=32",
                 "work": f"{len(scales)} models x {steps} Adam steps each (identical work on both sides)"})
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)
