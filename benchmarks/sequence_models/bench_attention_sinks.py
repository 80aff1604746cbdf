"""Per-row Numba bisection for the least switch scale against the whole-matrix SciPy-softmax reference, and the
vectorised attention-mass split of a trained head against its per-query loop."""
from __future__ import annotations

import numpy as np

import torch

from paperkit.sequence_models.attention_sinks import mass_split, mass_split_ref, min_scale_bisect, min_scale_ref
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    rows = []
    for n, d in ([(256, 32)] if quick else [(256, 32), (1024, 32)]):
        E = np.random.default_rng(0).normal(size=(n, d))
        E /= np.linalg.norm(E, axis=1, keepdims=True)
        S, t = E @ E.T, np.arange(n)
        r = speed_ratio(lambda: min_scale_bisect(S, t, 0.99), lambda: min_scale_ref(S, t, 0.99),
                        repeats=3 if quick else 7)
        rows.append({"kernel": "attention_sinks.min_scale_bisect", "baseline": "attention_sinks.min_scale_ref",
                     "ratio": r.ratio, "shape": f"S {n}x{n} (diagonal pattern, d={d}), p=0.99",
                     "work": f"reference: 60+ whole-matrix softmax steps on {n}x{n}; kernel: one check per row, bisection only on rows above the running maximum"})
    B, L = (64, 33) if quick else (512, 33)
    g = torch.Generator().manual_seed(0)
    P = torch.rand(B, L, L, generator=g).tril()
    P = P / P.sum(-1, keepdim=True)
    mask = torch.rand(B, L, generator=g) < 0.8
    r = speed_ratio(lambda: mass_split(P, mask, 0), lambda: mass_split_ref(P, mask, 0), repeats=3 if quick else 5)
    rows.append({"kernel": "attention_sinks.mass_split", "baseline": "attention_sinks.mass_split_ref",
                 "ratio": r.ratio, "shape": f"P {B}x{L}x{L}, sink column 0",
                 "work": f"{int(mask.sum())} selected queries, 3 masses each, gathered once (kernel) or one by one"})
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)
