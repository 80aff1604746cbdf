"""Speed as a ratio: two callables timed in interleaved repeats on the same (noisy, shared) machine."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Ratio:
    """``ratio`` = median over repeats of ``t_baseline / t_candidate`` (> 1 means the candidate is faster)."""

    ratio: float
    t_candidate_s: float
    t_baseline_s: float
    repeats: int


def speed_ratio(candidate: Callable[[], object], baseline: Callable[[], object], repeats: int = 7,
                warmup: int = 1) -> Ratio:
    """Time ``candidate`` and ``baseline`` alternately ``repeats`` times (after ``warmup`` untimed calls each).

    Interleaving means a burst of load from another process hits both sides alike; the median of per-pair ratios
    discards the pairs it hit unevenly. Absolute times are reported but only the ratio is meaningful here.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        candidate()
        baseline()
    tc, tb, ratios = [], [], []
    for _ in range(repeats):
        t = time.perf_counter(); candidate(); c = time.perf_counter() - t
        t = time.perf_counter(); baseline(); b = time.perf_counter() - t
        tc.append(c); tb.append(b); ratios.append(b / max(c, 1e-12))
    return Ratio(statistics.median(ratios), statistics.median(tc), statistics.median(tb), repeats)
