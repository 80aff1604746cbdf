"""Simulator of the temporal-leniency chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster):
the vectorised ``simulate_reviews`` against its plain-loop reference ``simulate_reviews_ref`` (same draws)."""
from __future__ import annotations

import numpy as np

from paperkit.games_markets import review_sim as rs
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per size."""
    rows, reps = [], 3 if quick else 7
    for P in ([500] if quick else [500, 5000]):
        r = speed_ratio(lambda: rs.simulate_reviews(P, 4, 0.3, 0.8, np.random.default_rng(0)),
                        lambda: rs.simulate_reviews_ref(P, 4, 0.3, 0.8, np.random.default_rng(0)), repeats=reps)
        rows.append({"kernel": "review_sim.simulate_reviews", "baseline": "review_sim.simulate_reviews_ref",
                     "ratio": round(r.ratio, 3), "shape": f"P={P}, R=4", "work": f"{4 * P} reviews"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
