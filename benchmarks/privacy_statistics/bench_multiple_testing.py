"""Per-block conformal multiple testing: the Numba kernels and the vectorised BH against their plain references, on
the shape of the CERTRA chapter (repeats x modules blocks, n calibration nulls and m candidates per block)."""
import numpy as np
from scipy import stats

from paperkit.privacy_statistics.multiple_testing import (bh, conformal_evalues, conformal_evalues_ref, conformal_pvalues,
                                       conformal_pvalues_ref)
from paperkit.timing import speed_ratio


def _bh_per_block_scipy(p, alpha):
    return np.stack([stats.false_discovery_control(row) <= alpha for row in p])


def run(quick: bool) -> list[dict]:
    blocks, n, m = (400, 100, 60) if quick else (4000, 100, 60)
    rng = np.random.default_rng(0)
    link = rng.random((blocks, m)) < 0.3
    cal, test = rng.normal(size=(blocks, n)), rng.normal(size=(blocks, m)) + 4.0 * link
    p = conformal_pvalues(cal, test)
    reps = 3 if quick else 5
    shape = f"{blocks} blocks, n={n}, m={m}, float64"
    r_e = speed_ratio(lambda: conformal_evalues(cal, test, 0.1), lambda: conformal_evalues_ref(cal, test, 0.1),
                      repeats=reps)
    r_p = speed_ratio(lambda: conformal_pvalues(cal, test), lambda: conformal_pvalues_ref(cal, test), repeats=reps)
    r_bh = speed_ratio(lambda: bh(p, 0.1), lambda: _bh_per_block_scipy(p, 0.1), repeats=reps)
    pairs = f"{blocks * m * (n + m):.3g} (test, calibration-or-test) score pairs"
    return [
        {"kernel": "conformal_evalues (Numba, sort + binary search)",
         "baseline": "conformal_evalues_ref (Python loop over blocks, brute-force counts)",
         "ratio": r_e.ratio, "shape": shape, "work": pairs},
        {"kernel": "conformal_pvalues (Numba, sort + binary search)",
         "baseline": "conformal_pvalues_ref (broadcast comparison of every pair)",
         "ratio": r_p.ratio, "shape": shape, "work": f"{blocks * m * n:.3g} (test, calibration) score pairs"},
        {"kernel": "bh (one vectorised sort over all blocks)",
         "baseline": "scipy.stats.false_discovery_control, one call per block",
         "ratio": r_bh.ratio, "shape": shape, "work": f"{blocks * m:.3g} p-values in {blocks} BH runs",
         "vs": "library"},
    ]


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)
