"""Numba min-separation kernel against the NumPy all-pairs reference."""
from __future__ import annotations

import numpy as np

from paperkit.positional_spread import min_separation, min_separation_ref
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    rows = []
    for L, d in ([(256, 32)] if quick else [(256, 32), (1024, 64)]):
        E = np.random.default_rng(0).normal(size=(L, d))
        min_separation(E)  # compile outside the timing
        r = speed_ratio(lambda: min_separation(E), lambda: min_separation_ref(E), repeats=3 if quick else 7)
        rows.append({"kernel": "positional_spread.min_separation", "baseline": "positional_spread.min_separation_ref",
                     "ratio": r.ratio, "shape": f"E {L}x{d}",
                     "work": f"{L * (L - 1) // 2} row pairs; reference materialises an {L}x{L}x{d} difference tensor"})
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)
